"""The remote-sampler settings (issue 16): flags, help lines, one-line checks, sampler rows, the Ray address."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from spreeze_like.config import TrainConfig
from spreeze_like.config_bounds import MAX_REMOTE_BATCH, MAX_REMOTE_SAMPLERS
from spreeze_like.errors import ConfigError
from spreeze_like.flags import build_parser, parse_cli
from spreeze_like.remote.address import parse_ray_address, resolve_ray_address

RAY = ["--ray", "10.0.0.1:6379"]


def test_defaults_have_no_remote_samplers():
    cfg = TrainConfig().validate()
    assert cfg.ray is None and cfg.remote_samplers == 0 and cfg.sampler_rows == cfg.samplers == 1


def test_flags_parse_and_auto_is_an_address_not_the_default():
    cfg = parse_cli(["--ray", "auto", "--remote-samplers", "3", "--remote-envs-per-sampler", "4", "--remote-batch",
                     "512", "--remote-place-timeout-s", "30", "--samplers", "2"])
    assert cfg.ray == "auto" and cfg.remote_samplers == 3 and cfg.remote_envs_per_sampler == 4
    assert cfg.remote_batch == 512 and cfg.remote_place_timeout_s == 30.0 and cfg.sampler_rows == 5
    assert parse_cli(["--samplers", "0", *RAY, "--remote-samplers", "2"]).sampler_rows == 2  # all sampling remote


def test_each_flag_has_a_help_line():
    text = build_parser().format_help()
    for flag in ("--ray ADDRESS", "--remote-samplers N", "--remote-envs-per-sampler N", "--remote-batch N",
                 "--remote-place-timeout-s X"):
        assert flag in text
    ray_help = " ".join(text.split("\n  --ray ADDRESS", 1)[1].split("\n  --remote-samplers", 1)[0].split())
    assert "RAY_ADDRESS" in ray_help and "127.0.0.1:6379" in ray_help and "(default: off)" in ray_help
    assert 'spreeze_like[ray]' in ray_help


@pytest.mark.parametrize("argv, fragment", [
    (["--serial", *RAY, "--remote-samplers", "1"], ("--ray '10.0.0.1:6379' is invalid: remote samplers are a "
                                                  "parallel-mode feature; drop --serial")),
    (RAY, "give --remote-samplers N >= 1"),
    (["--remote-samplers", "2"], "--remote-samplers 2 is invalid: needs --ray ADDRESS"),
    (["--samplers", "0"], "--samplers 0 is invalid: must be >= 1 (0 only with --remote-samplers"),
    (["--remote-samplers", "-1"], "must be a whole number >= 0"),
    ([*RAY, "--remote-samplers", str(MAX_REMOTE_SAMPLERS + 1)], f"at most {MAX_REMOTE_SAMPLERS}"),
    ([*RAY, "--remote-samplers", "1", "--remote-batch", str(MAX_REMOTE_BATCH + 1)], "--remote-batch"),
    ([*RAY, "--remote-samplers", "1", "--remote-batch", "-5"], "--remote-batch -5 is invalid"),
    ([*RAY, "--remote-samplers", "1", "--remote-envs-per-sampler", "100000"], "--remote-envs-per-sampler"),
    ([*RAY, "--remote-samplers", "1", "--remote-place-timeout-s", "0.5"], "must be >= 1 second"),
    (["--ray", "10.0.0.1", "--remote-samplers", "1"], "give host:port of the Ray head's GCS"),
    (["--ray", "h:0", "--remote-samplers", "1"], "give host:port"),
    (["--ray", "h:70000", "--remote-samplers", "1"], "give host:port"),
])
def test_bad_combinations_are_one_line(argv, fragment):
    with pytest.raises(ConfigError) as err:
        parse_cli(argv)
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_a_bad_combination_through_the_cli_is_one_line_and_exit_2():
    proc = subprocess.run([sys.executable, "-m", "spreeze_like.run", "--serial", *RAY, "--remote-samplers", "1"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: --ray")


def test_config_json_round_trip_keeps_auto():
    cfg = dataclasses.replace(TrainConfig(), ray="auto", remote_samplers=2).validate()
    again = TrainConfig.from_dict(cfg.to_dict()).validate()
    assert again.ray == "auto" and again.remote_samplers == 2
    assert TrainConfig.from_dict(TrainConfig().to_dict()).ray is None


def test_auto_resolves_from_ray_address_else_the_local_default():
    assert resolve_ray_address("auto", {}) == "127.0.0.1:6379"
    assert resolve_ray_address("AUTO", {"RAY_ADDRESS": "10.1.2.3:7000"}) == "10.1.2.3:7000"
    assert resolve_ray_address("auto", {"RAY_ADDRESS": "auto"}) == "127.0.0.1:6379"  # Ray's own auto: the default
    assert resolve_ray_address(" h:1 ", {"RAY_ADDRESS": "10.1.2.3:7000"}) == "h:1"  # a typed address wins
    assert parse_ray_address("auto", {"RAY_ADDRESS": "ray://head:10001"}) == ("head", 10001)
    assert parse_ray_address("[::1]:6379", {}) == ("::1", 6379)
    with pytest.raises(ConfigError, match="from RAY_ADDRESS='nonsense'"):
        parse_ray_address("auto", {"RAY_ADDRESS": "nonsense"})
