"""The probes: timing under a budget, the GPU subprocess, the ring probe, the cache and --reprobe."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from spreeze_like.autotune import cache, hardware, probe
from spreeze_like.autotune.measure import RING_MIN_BUDGET_S, memcpy_rate, ring_rate, time_rate
from spreeze_like.autotune.results import SCHEMA_VERSION, ProbeResults
from spreeze_like.errors import ConfigError, EnvError

from .helpers import REAL, load


# --- timing ----------------------------------------------------------------------------------------------
def test_time_rate_measures_a_known_rate():
    rate = time_rate(lambda: time.sleep(0.002), 0.3, "ops/s", per_call=2, min_ops=3)
    assert not rate.estimate
    assert 300 < rate.value < 1000  # 2 ops per ~2 ms call: at most 1000/s, and a sleep overshoots little
    assert rate.ops >= 3 and rate.seconds >= 0.3


def test_a_budget_too_small_gives_an_estimate_with_the_reason():
    rate = time_rate(lambda: time.sleep(0.01), 0.0, "ops/s", min_ops=5)
    assert rate.value > 0 and rate.ops == 1
    assert "budget" in rate.estimate and "1 operation" in rate.estimate


def test_memcpy_rate_is_plausible():
    rate = memcpy_rate(0.05, nbytes=8 << 20)
    assert rate.unit == "bytes/s" and 1e8 < rate.value < 1e12 and rate.ops >= 2


def test_ring_probe_moves_rows_between_processes():
    rate = ring_rate(10, RING_MIN_BUDGET_S)
    assert not rate.estimate and rate.ops > 0 and rate.value > 1e4
    # (the conftest fixture checks that the ring segment and the producer process are gone)


def test_ring_probe_with_no_time_is_an_estimate_from_memcpy():
    memcpy = memcpy_rate(0.02, nbytes=8 << 20)
    rate = ring_rate(10, 0.1, memcpy)
    assert rate.ops == 0 and "estimated as half the memcpy bandwidth" in rate.estimate
    assert rate.value == pytest.approx(0.5 * memcpy.value / 40)


def test_sampler_scaling_runs_the_sampler_loop_in_several_processes_at_once():
    from spreeze_like.autotune.sampler_scaling import measure_scaling, sampler_counts

    spec = {"algo": "sac", "obs_dim": 3, "act_dim": 1, "hidden_sizes": (32, 32)}
    lines: list[str] = []
    curve = measure_scaling("Pendulum-v1", spec, [1, 2], [1, 4], 0.2, lines.append)
    assert sorted(curve) == [1, 2] and all(sorted(by_k) == [1, 4] for by_k in curve.values())
    for n, by_k in curve.items():
        for k, rate in by_k.items():
            # every process stepped: at least MIN_STEPS per process in 0.2 s (Pendulum runs thousands/s)
            assert rate.unit == "steps/s" and rate.value > 0 and not rate.estimate, (n, k, rate)
            assert rate.ops % k == 0  # whole sampler steps of k envs each
    assert len(lines) == 4 and "2 sampler process(es) x 4 env(s) each" in lines[-1]
    assert sampler_counts(13) == [1, 2, 4, 8, 13] and sampler_counts(1) == [1] and sampler_counts(4) == [1, 2, 4]
    # (the conftest fixture checks that no worker process is left behind)


def test_sampler_scaling_reports_a_worker_that_fails():
    from spreeze_like.autotune.sampler_scaling import SamplerScalingError, measure_scaling

    spec = {"algo": "sac", "obs_dim": 3, "act_dim": 1, "hidden_sizes": (32, 32)}
    with pytest.raises(SamplerScalingError, match="failed while building"):
        measure_scaling("NoSuchEnv-v0", spec, [1], [1], 0.1)


# --- hardware facts ---------------------------------------------------------------------------------------
_CALLER = """
import sys, json
from spreeze_like.autotune.probe import probe_machine
r = probe_machine("Pendulum-v1", budget_s=1.0, devices=["cpu"], progress=lambda s: None)
assert r.curve("cpu", 1).points and r.env.per_sampler
assert r.env.parallel and all(rate.value > 0 for by_k in r.env.parallel.values() for rate in by_k.values()), r.env
print(json.dumps({"gpus": len(r.hardware.gpus), "note": r.hardware.gpu_note, "torch_in_caller": "torch" in sys.modules,
                  "cores": r.hardware.usable_cores}))
"""


def test_gpus_are_probed_in_a_subprocess_and_the_caller_never_touches_cuda():
    out = subprocess.run([sys.executable, "-c", _CALLER], capture_output=True, text=True, timeout=240, check=True)
    facts = json.loads(out.stdout.strip().splitlines()[-1])
    # the whole probe run (GPU list, env and update rates) leaves torch unimported in the caller,
    # so CUDA cannot have been initialised there
    assert facts["torch_in_caller"] is False
    cuda_here = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                               capture_output=True, text=True, timeout=120, check=True).stdout.strip() == "True"
    if cuda_here:
        assert facts["gpus"] >= 1
    else:
        assert facts["gpus"] == 0 and facts["note"]  # and it says why
    assert facts["cores"] >= 1


def test_fingerprint_is_stable_and_names_the_host():
    a, b = hardware.fingerprint(), hardware.fingerprint()
    assert a == b and len(a.rsplit("-", 1)[1]) == 12


def test_unknown_devices_are_refused():
    hw = load(REAL).hardware
    assert probe.check_devices(["cpu", "cpu"], hw) == ["cpu"]
    with pytest.raises(ConfigError, match="'cuda:1' does not exist"):
        probe.check_devices(["cuda:1"], hw)


def test_curve_jobs_share_the_budget():
    hw = load(REAL).hardware
    jobs = probe.curve_jobs(["cpu"], hw, 30.0)
    assert [(j.device, j.threads) for j in jobs] == [("cpu", 1), ("cpu", hw.usable_cores)]
    assert sum(j.budget_s for j in jobs) == pytest.approx(30.0)


# --- bad input ---------------------------------------------------------------------------------------------
def test_bad_env_and_budget_fail_before_measuring():
    with pytest.raises(EnvError):
        probe.probe_machine("NoSuchEnv-v0", budget_s=1.0)
    with pytest.raises(ConfigError, match="too small"):
        probe.probe_machine("Pendulum-v1", budget_s=0.01)


# --- cache and --reprobe -----------------------------------------------------------------------------------
@pytest.fixture
def fake_probe(monkeypatch, tmp_path):
    """XDG_CACHE_HOME in tmp_path and a probe_machine that returns the real recording and counts calls."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    calls = []

    def fake(env_id, algo, hidden_sizes, budget_s, devices=None, progress=print, env_kwargs=None,
             critic_hidden_sizes=()):
        calls.append(env_id if not env_kwargs else (env_id, dict(env_kwargs)))
        if critic_hidden_sizes:
            calls[-1] = (env_id, tuple(hidden_sizes), tuple(critic_hidden_sizes))
        results = load(REAL)
        results.schema = SCHEMA_VERSION  # what a fresh probe writes (the recording itself is of schema 2)
        return results

    monkeypatch.setattr(probe, "probe_machine", fake)
    return calls


def test_cache_dir_honours_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.cache_dir() == tmp_path / "spreeze_like" / "probes"
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    assert str(cache.cache_dir()).endswith(".cache/spreeze_like/probes")


def test_results_are_cached_per_machine_and_env_and_reprobe_refreshes(fake_probe, tmp_path):
    first, path, cached = probe.load_or_probe("Pendulum-v1", progress=lambda s: None)
    assert not cached and fake_probe == ["Pendulum-v1"] and path.is_file()
    assert path.parent == tmp_path / "spreeze_like" / "probes" and hardware.fingerprint() in path.name
    again, path2, cached = probe.load_or_probe("Pendulum-v1", progress=lambda s: None)
    assert cached and path2 == path and fake_probe == ["Pendulum-v1"]  # no new measuring
    assert again.to_dict() == first.to_dict()
    probe.load_or_probe("HalfCheetah-v5", progress=lambda s: None)  # another env: another file
    assert fake_probe == ["Pendulum-v1", "HalfCheetah-v5"]
    _, _, cached = probe.load_or_probe("Pendulum-v1", reprobe=True, progress=lambda s: None)
    assert not cached and fake_probe[-1] == "Pendulum-v1" and len(fake_probe) == 3
    # --env-kwargs make another env: measured with them, and cached in a file of their own
    _, kw_path, cached = probe.load_or_probe("Pendulum-v1", progress=lambda s: None, env_kwargs={"g": 5.0})
    assert not cached and fake_probe[-1] == ("Pendulum-v1", {"g": 5.0}) and kw_path != path
    _, _, cached = probe.load_or_probe("Pendulum-v1", progress=lambda s: None, env_kwargs={"g": 5.0})
    assert cached and len(fake_probe) == 4
    # a critic of other widths costs another time per update: measured with them, in a file of its own
    _, q_path, cached = probe.load_or_probe("Pendulum-v1", progress=lambda s: None, critic_hidden_sizes=(512, 512))
    assert not cached and fake_probe[-1] == ("Pendulum-v1", (256, 256), (512, 512))
    assert q_path.name.endswith("sac-256x256-q512x512.json") and q_path != path
    # the same widths as the actor's is the same network: the same file
    assert cache.cache_path(hardware.fingerprint(), "Pendulum-v1", "sac", (256, 256), None, (256, 256)) == path


@pytest.mark.parametrize("content", ["{not json", json.dumps({"schema": SCHEMA_VERSION - 1})])
def test_corrupt_or_old_cache_files_are_probed_again(fake_probe, content):
    path = cache.cache_path(hardware.fingerprint(), "Pendulum-v1", "sac", (256, 256))
    path.parent.mkdir(parents=True)
    path.write_text(content)
    _, _, cached = probe.load_or_probe("Pendulum-v1", progress=lambda s: None)
    assert not cached and len(fake_probe) == 1
    assert ProbeResults.load(path).schema == SCHEMA_VERSION


def test_results_round_trip_through_json():
    r = load(REAL)
    again = ProbeResults.from_dict(json.loads(r.to_json()))
    assert again.to_dict() == r.to_dict()
    assert isinstance(next(iter(again.env.per_sampler)), int)  # JSON object keys come back as ints


def test_autotune_reprobe_flag_reaches_the_cache(fake_probe):
    import dataclasses

    from spreeze_like.autotune.apply import autotune
    from spreeze_like.config import TrainConfig

    config = dataclasses.replace(TrainConfig(), autotune=True)
    lines: list[str] = []
    autotune(config, print_fn=lines.append, parallel_available=False)
    autotune(config, print_fn=lines.append, parallel_available=False)
    assert len(fake_probe) == 1  # the second run used the cache
    tuned, plan = autotune(dataclasses.replace(config, reprobe=True), print_fn=lines.append, parallel_available=False)
    assert len(fake_probe) == 2  # --reprobe measured again
    assert tuned.batch_size == plan.value("batch_size") and any("autotune plan" in ln for ln in lines)



def test_a_bf16_curve_times_each_batch_in_the_arithmetic_a_run_gives_it():
    """--precision auto runs a small update in fp32 (devices.bf16_pays); the probe's point at that batch must
    be the rate of that arithmetic, not of bf16, or the plan would expect rates no run gets."""
    import dataclasses

    from spreeze_like.algos.spec import AlgoSpec
    from spreeze_like.autotune.update_probe import at_batch, probe_updates
    from spreeze_like.devices import BF16_MIN_WORK, BF16_MIN_WORK_EXPLICIT

    spec = AlgoSpec(algo="sac", obs_dim=3, act_dim=1, hidden_sizes=(64, 64), precision="bf16")
    assert 256 * 64 * 64 < BF16_MIN_WORK_EXPLICIT <= 4096 * 64 * 64
    # SAC's fp32 is the explicit step, against which bf16 pays later than against autograd's (CrossQ's)
    assert at_batch(spec, 2048).precision == "fp32"
    assert at_batch(dataclasses.replace(spec, algo="crossq"), 2048).precision == "bf16" and 2048 * 64 * 64 >= BF16_MIN_WORK
    assert at_batch(spec, 256).precision == "fp32" and at_batch(spec, 4096).precision == "bf16"
    assert at_batch(dataclasses.replace(spec, critic_hidden_sizes=(512,)), 256).precision == "bf16"  # the widest
    assert at_batch(dataclasses.replace(spec, precision="fp32"), 4096).precision == "fp32"
    curve = probe_updates(spec, "cpu", 1, budget_s=1.5, progress=lambda line: None, max_batch=256)
    assert curve.precision == "bf16" and [(p.batch_size, p.precision) for p in curve.points] == [(256, "fp32")]
