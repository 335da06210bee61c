"""TrainConfig: defaults, the argparse bridge, JSON config files, validation, device resolution.

(Presets and the order of the layers: test_presets.py.)"""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest

from spreeze_like.config import TrainConfig
from spreeze_like.config_fields import SOURCES_KEY
from spreeze_like.devices import resolve_devices
from spreeze_like.errors import ConfigError
from spreeze_like.flags import build_parser, parse_cli


def test_defaults_are_valid_and_sac_on_pendulum():
    cfg = TrainConfig().validate()
    assert (cfg.env, cfg.algo) == ("Pendulum-v1", "sac")


def test_every_field_is_a_flag_with_help():
    help_text = build_parser().format_help()
    for f in dataclasses.fields(TrainConfig):
        assert "--" + f.name.replace("_", "-") in help_text
        assert f.metadata["help"]


def test_help_is_in_sections_with_every_field_placed():
    from spreeze_like.flags import HELP_GROUPS, OTHER_GROUP

    placed = [name for _, names in HELP_GROUPS for name in names]
    fields = [f.name for f in dataclasses.fields(TrainConfig)]
    assert sorted(placed) == sorted(fields)  # each field in exactly one section; none stale
    help_text = build_parser().format_help()
    assert OTHER_GROUP not in help_text
    starts = [help_text.index(f"\n{title}:\n") for title, _ in HELP_GROUPS]
    assert starts == sorted(starts)
    for (title, names), start, end in zip(HELP_GROUPS, starts, [*starts[1:], len(help_text)]):
        section = help_text[start:end]
        for name in names:
            assert "\n  --" + name.replace("_", "-") in section, (title, name)
    assert help_text.index("--config FILE") < starts[1] and help_text.index("--list-presets") < starts[1]


def test_help_names_every_algorithm_says_where_runs_go_and_shows_no_empty_default():
    help_text = build_parser().format_help()
    assert "(SAC, TD3, DDPG, CrossQ)" in help_text
    assert "tensorboard --logdir runs" in help_text
    assert "(default: )" not in help_text
    assert len(help_text.split("\n\n", 1)[0].splitlines()) == 1  # the usage line, not 40 lines of flags


@pytest.mark.parametrize("typed, meant", [("--totl-steps", "--total-steps"), ("--total_steps", "--total-steps"),
                                          ("--prioritised", "--prioritized")])
def test_a_mistyped_flag_is_answered_with_the_real_one(capsys, typed, meant):
    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args([typed, "5"])
    lines = capsys.readouterr().err.splitlines()
    assert stop.value.code == 2 and len(lines) == 1 and lines[0].startswith("error: unrecognized arguments")
    assert f"{typed}: did you mean {meant}?" in lines[0]


def test_flags_parse_to_typed_values():
    cfg = parse_cli(
        [
            "--algo",
            "td3",
            "--total-steps",
            "123",
            "--utd",
            "0.5",
            "--prioritized",
            "--hidden-sizes",
            "64",
            "32",
            "--target-entropy",
            "-2.5",
            "--serial",
        ]
    )
    assert (cfg.algo, cfg.total_steps, cfg.utd, cfg.prioritized) == ("td3", 123, 0.5, True)
    assert cfg.hidden_sizes == (64, 32) and cfg.target_entropy == -2.5 and cfg.serial
    assert parse_cli(["--target-entropy", "auto"]).target_entropy is None
    assert parse_cli(["--no-prioritized"]).prioritized is False


def test_config_file_then_flags_win(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"batch_size": 64, "seed": 7, "hidden_sizes": [32, 32]}))
    cfg = parse_cli(["--config", str(path), "--seed", "9"])
    assert (cfg.batch_size, cfg.seed, cfg.hidden_sizes) == (64, 9, (32, 32))


def test_json_round_trip():
    cfg = TrainConfig(algo="ddpg", hidden_sizes=(8, 8), target_entropy=-1.0)
    assert TrainConfig.from_dict(json.loads(cfg.to_json())) == cfg


@pytest.mark.parametrize(
    "content, match",
    [
        ('{"batch_sise": 3}', "unknown setting"),
        ('{"batch_size": "big"}', "wrong type"),
        ("{not json", "not valid JSON"),
    ],
)
def test_bad_config_file_is_one_line(tmp_path, content, match):
    path = tmp_path / "c.json"
    path.write_text(content)
    with pytest.raises(ConfigError, match=match) as info:
        parse_cli(["--config", str(path)])
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "changes, flag",
    [
        ({"batch_size": 0}, "--batch-size"),
        ({"total_steps": -1}, "--total-steps"),
        ({"gamma": 1.0}, "--gamma"),
        ({"tau": 0.0}, "--tau"),
        ({"utd": float("nan")}, "--utd"),
        ({"actor_lr": float("inf")}, "--actor-lr"),
        ({"actor_lr": 0.0}, "--actor-lr"),
        ({"batch_size": 512, "buffer_size": 256}, "--batch-size"),
        ({"hidden_sizes": ()}, "--hidden-sizes"),
        ({"actor_device": "gpu0"}, "--actor-device"),
        ({"algo": "ppo"}, "--algo"),
        ({"env": " "}, "--env"),
    ],
)
def test_invalid_values_raise_one_line_config_error(changes, flag):
    with pytest.raises(ConfigError) as info:
        dataclasses.replace(TrainConfig(), **changes).validate()
    assert flag in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("changes, said", [
    ({"env": 5}, "--env 5 is invalid: give a gymnasium env id"),
    ({"gamma": "0.99"}, "--gamma '0.99' is invalid: must be a number"),
    ({"gamma": np.float32(0.99)}, "must be a number (a Python int or float"),  # json.dumps refused it at config.json
    ({"tau": True}, "--tau True is invalid: must be a number"),
    ({"actor_lr": "x"}, "must be a number (a Python int or float: config.json holds it) or None (auto)"),
    ({"serial": "yes"}, "--serial 'yes' is invalid: must be True or False"),
    ({"critic_device": 0}, "--critic-device 0 is invalid: must be a string"),
])
def test_a_python_value_of_the_wrong_type_is_one_line_from_train(tmp_path, changes, said):
    """From Python, train() took these to a traceback (a TypeError in a range check, an AttributeError in the
    preset lookup, json's TypeError when config.json was written after the run folder was made)."""
    from spreeze_like.training import train

    with pytest.raises(ConfigError, match=re.escape(said)):
        train(logdir=str(tmp_path), **changes)
    assert list(tmp_path.iterdir()) == []
    assert dataclasses.replace(TrainConfig(), actor_lr=None, gamma=np.float64(0.9), tau=1).validate()  # these are fine


def test_auto_actor_lr_is_the_presets():
    from spreeze_like.algos.spec import AlgoSpec

    assert TrainConfig().actor_lr is None  # auto, recorded resolved in config.json
    assert TrainConfig().resolve().actor_lr == 1e-3  # sac.toml [Pendulum-v1]
    assert dataclasses.replace(TrainConfig(), env="HalfCheetah-v5").resolve().actor_lr == 3e-4  # sac.toml [default]
    assert dataclasses.replace(TrainConfig(), env="mypkg.envs:Pendulum-v1").resolve().actor_lr == 1e-3
    for algo in ("td3", "ddpg"):
        assert dataclasses.replace(TrainConfig(), algo=algo).resolve().actor_lr == 1e-3
        assert dataclasses.replace(TrainConfig(), algo=algo, env="Hopper-v5").resolve().actor_lr == 3e-4
    assert dataclasses.replace(TrainConfig(), actor_lr=5e-4).resolve().actor_lr == 5e-4  # a given value wins
    assert parse_cli(["--actor-lr", "auto"]).actor_lr is None
    assert parse_cli(["--actor-lr", "2e-4"]).resolve().actor_lr == 2e-4
    # a spec built from an unresolved config gets what resolve() would give
    assert AlgoSpec.from_config(TrainConfig(), 3, 1).actor_lr == 1e-3
    assert AlgoSpec.from_config(dataclasses.replace(TrainConfig(), env="Hopper-v5"), 11, 3).actor_lr == 3e-4


def test_a_run_config_json_with_sources_loads_as_a_config():
    cfg = TrainConfig(batch_size=64)
    saved = {**cfg.to_dict(), SOURCES_KEY: {"batch_size": "flag"}}
    assert TrainConfig.from_dict(saved) == cfg


def test_resolve_fills_policy_delay():
    assert dataclasses.replace(TrainConfig(), algo="td3").resolve().policy_delay == 2
    assert TrainConfig().resolve().policy_delay == 1
    assert dataclasses.replace(TrainConfig(), algo="td3", policy_delay=3).resolve().policy_delay == 3


@pytest.mark.parametrize(
    "count, expected",
    [(0, ("cpu", "cpu")), (1, ("cuda:0", "cuda:0")), (2, ("cuda:0", "cuda:1")), (4, ("cuda:0", "cuda:1"))],
)
def test_auto_devices_follow_gpu_count(count, expected):
    assert resolve_devices("auto", "auto", count=count) == expected


def test_auto_devices_use_the_mockable_count(monkeypatch):
    monkeypatch.setattr("spreeze_like.devices.cuda_device_count", lambda: 2)
    cfg = TrainConfig().resolve()
    assert (cfg.actor_device, cfg.critic_device) == ("cuda:0", "cuda:1")


def test_cpu_learners_do_not_ask_for_the_gpu_count(monkeypatch):
    def asked():
        raise AssertionError("counted GPUs for two CPU learners")

    monkeypatch.setattr("spreeze_like.devices.cuda_device_count", asked)
    assert resolve_devices("cpu", "cpu") == ("cpu", "cpu")
    with pytest.raises(AssertionError, match="counted"):
        resolve_devices("cpu", "auto")


def test_explicit_devices():
    assert resolve_devices("cpu", "cuda", count=1) == ("cpu", "cuda:0")
    with pytest.raises(ConfigError, match="CUDA is not available"):
        resolve_devices("cuda:0", "auto", count=0)
    with pytest.raises(ConfigError, match="has 1 GPU"):
        resolve_devices("auto", "cuda:1", count=1)


# --- review finding 12: absurd counts are refused up front, in one line naming the flag -------------------------
@pytest.mark.parametrize(
    "changes, flag",
    [
        ({"samplers": 10**6}, "--samplers"),  # a fork bomb: one process each
        ({"torch_threads": 10**5}, "--torch-threads"),
        ({"samplers": 16, "envs_per_sampler": 1000}, "--envs-per-sampler"),  # 16,000 envs
        ({"eval_episodes": 10**6}, "--eval-episodes"),  # one env each, all at once
        ({"utd": 1e9}, "--utd"),  # a run that stalls without a word
        ({"priority_alpha": 2.0, "prioritized": True}, "--priority-alpha"),  # was refused only inside the learners
        ({"priority_alpha": -0.5}, "--priority-alpha"),
        ({"buffer_size": 2**40 + 1}, "--buffer-size"),  # past the native sum tree's capacity
        ({"buffer_size": 10**18}, "--buffer-size"),  # np.prod overflowed computing the replay size
        ({"hidden_sizes": (2**17, 2**17)}, "--hidden-sizes"),  # 2^34 weights: 800 GiB at 12 copies
    ],
)
def test_finding12_absurd_counts_are_refused_in_one_line(changes, flag):
    with pytest.raises(ConfigError) as info:
        dataclasses.replace(TrainConfig(), **changes).validate()
    assert str(info.value).startswith(flag + " ") and "\n" not in str(info.value)


def test_finding12_bounds_follow_this_machine():
    from spreeze_like.config_bounds import MIN_REPLAY_ROW_BYTES, machine_cores, machine_memory_bytes, max_per_machine

    most = max_per_machine()
    assert most >= 4 * machine_cores() and most >= 16
    dataclasses.replace(TrainConfig(), samplers=most, torch_threads=most).validate()  # the bound itself is allowed
    with pytest.raises(ConfigError, match="--samplers"):
        dataclasses.replace(TrainConfig(), samplers=most + 1).validate()
    memory = machine_memory_bytes()
    assert memory > 0
    fits = memory // MIN_REPLAY_ROW_BYTES
    dataclasses.replace(TrainConfig(), buffer_size=min(fits, 2**40)).validate()
    if fits < 2**40:
        with pytest.raises(ConfigError, match="GiB of memory"):
            dataclasses.replace(TrainConfig(), buffer_size=fits + 1).validate()
