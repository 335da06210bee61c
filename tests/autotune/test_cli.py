"""The command lines: ``python -m spreeze_like.profile`` and ``python -m spreeze_like.run --autotune/--plan-only``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from spreeze_like.autotune.results import ProbeResults

from .helpers import assert_one_line_error, run_module, seed_cache


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    """One real profile run with a tiny budget, CPU only: (process, cache home, output folder)."""
    xdg = tmp_path_factory.mktemp("xdg")
    logdir = tmp_path_factory.mktemp("runs")
    proc = run_module("spreeze_like.profile", "--budget", "3", "--devices", "cpu", "--logdir", str(logdir), xdg=xdg)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    (out_dir,) = logdir.glob("profile__*")
    return proc, xdg, out_dir


def test_profile_report_holds_every_item(profiled):
    proc, _, _ = profiled
    out = proc.stdout
    for item in ("[profile", "CPU ", "physical", "logical", "memory ", "/dev/shm", "GPUs", "memcpy", "ring (process",
                 "env.step alone", "with policy (1 env", "sampler with 8 env(s)",
                 "sampler processes at once, total env steps/s", "cpu, 1 torch thread(s), ",
                 "critic/s", "actor/s", "critic frames/s", "autotune plan for Pendulum-v1", "--batch-size",
                 "--precision"):
        assert item in out, item
    # each curve names the arithmetic it was measured in, the one a run gets there by default
    from spreeze_like.devices import resolve_precision

    assert f"cpu, 1 torch thread(s), {resolve_precision('auto', ('cpu',))}; stopped:" in out


def test_profile_writes_json_tensorboard_and_the_cache(profiled):
    from tests.trainer.tb import scalars

    _, xdg, out_dir = profiled
    results = ProbeResults.load(out_dir / "profile.json")
    curve = results.curve("cpu", 1)
    assert curve.points and curve.points[0].batch_size == 256 and curve.stop_reason
    tags = scalars(out_dir)
    assert [step for step, _ in tags["updates/cpu_1t/critic_frames_per_s"]] == [p.batch_size for p in curve.points]
    assert [step for step, _ in tags["env/sampler_steps_per_s"]] == [1, 2, 4, 8, 16]
    # the multi-process curve: x = sampler processes (this machine's plan allows max_samplers of them)
    from spreeze_like.autotune.layout import max_samplers
    from spreeze_like.autotune.sampler_scaling import sampler_counts

    counts = sampler_counts(max_samplers(results.hardware.usable_cores))
    assert sorted(results.env.parallel) == counts
    assert [step for step, _ in tags["env/samplers_x4envs_steps_per_s"]] == counts
    for tag in ("updates/cpu_1t/critic_updates_per_s", "updates/cpu_1t/actor_updates_per_s",
                "data/memcpy_gb_per_s", "data/ring_transitions_per_s", "env/step_alone_per_s"):
        assert tag in tags
    # the network a default Pendulum-v1 run gets from its preset (96 x 96), not a fixed 256 x 256
    (cached,) = (xdg / "spreeze_like" / "probes").glob("*__Pendulum-v1__sac-96x96.json")
    assert ProbeResults.load(cached).created == results.created
    assert "updates (sac, hidden 96x96)" in profiled[0].stdout


def test_autotune_after_a_profile_uses_its_cache(profiled, tmp_path):
    """The README's promise: the profile refreshes the cache that --autotune reads (it wrote one no run read)."""
    _, xdg, _ = profiled
    proc = run_module("spreeze_like.run", "--plan-only", "--probe-budget", "0.5", "--logdir", str(tmp_path),
                      xdg=xdg)
    assert proc.returncode == 0, proc.stderr
    assert "using cached probe results" in proc.stdout and "probing this machine" not in proc.stdout, proc.stdout


def test_profile_times_the_algorithm_and_network_a_run_gets():
    from spreeze_like.presets import default_algo
    from spreeze_like.profile import run_settings

    settings, kept = run_settings("HalfCheetah-v5", None, None)
    assert settings.algo == default_algo("HalfCheetah-v5")[0] == "crossq"
    assert {"algo", "total_steps"} <= kept  # from algos.toml and crossq.toml: the plan keeps them, as in a run
    settings, kept = run_settings("Pendulum-v1", "td3", [64, 64])
    assert (settings.algo, settings.hidden_sizes) == ("td3", (64, 64))
    assert run_settings("Pendulum-v1", None, None)[0].hidden_sizes == (96, 96)


def test_plan_only_prints_the_plan_from_the_cache_and_trains_nothing(tmp_path):
    seed_cache(tmp_path / "xdg")
    proc = run_module("spreeze_like.run", "--plan-only", "--batch-size", "512", "--logdir", str(tmp_path / "runs"),
                      xdg=tmp_path / "xdg")
    assert proc.returncode == 0, proc.stderr
    assert "using cached probe results" in proc.stdout and "autotune plan for Pendulum-v1" in proc.stdout
    line = next(ln for ln in proc.stdout.splitlines() if ln.strip().startswith("--batch-size"))
    assert "512" in line and "set by you" in line  # the typed flag wins
    assert "--samplers" in proc.stdout and "--buffer-size" in proc.stdout
    assert not (tmp_path / "runs").exists()


def test_autotune_trains_with_the_plan_and_saves_it(tmp_path):
    seed_cache(tmp_path / "xdg", hidden=(32, 32))
    proc = run_module("spreeze_like.run", "--autotune", "--hidden-sizes", "32", "32", "--total-steps", "300",
                      "--learning-starts", "200", "--eval-every", "0", "--eval-episodes", "2", "--log-interval", "0",
                      "--tb-interval", "0", "--checkpoint-every", "0", "--logdir", str(tmp_path / "runs"),
                      xdg=tmp_path / "xdg")
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    plan = json.loads((run_dir / "plan.json").read_text())
    config = json.loads((run_dir / "config.json").read_text())
    for name in ("batch_size", "utd", "samplers", "envs_per_sampler", "serial", "buffer_size", "torch_threads"):
        assert plan["choices"][name]["source"] == "plan"
        assert config[name] == plan["choices"][name]["value"], name
    assert config["total_steps"] == 300 and config["hidden_sizes"] == [32, 32]  # the user's flags kept
    assert "autotune plan for Pendulum-v1" in proc.stdout


@pytest.mark.parametrize("args, fragments", [
    (["--plan-only", "--env", "NoSuchEnv-v0"], ["cannot make env", "NoSuchEnv-v0"]),
    (["--plan-only", "--critic-device", "cuda:3"], ["--critic-device cuda:3", "no such device"]),
    (["--autotune", "--probe-budget", "0.1"], ["--probe-budget", ">= 0.5"]),
])
def test_run_bad_input_is_one_line_and_exit_2(tmp_path, args, fragments):
    seed_cache(tmp_path / "xdg")
    assert_one_line_error(run_module("spreeze_like.run", *args, xdg=tmp_path / "xdg"), *fragments)


@pytest.mark.parametrize("args, fragments", [
    (["--budget", "0.1"], ["too small"]),
    (["--env", "NoSuchEnv-v0"], ["cannot make env"]),
    (["--env-kwargs", '{"gravity_typo": 1}'], ["--env-kwargs", "gravity_typo"]),  # the probe makes the env with them
    (["--env-kwargs", '{"render_mode": "human"}'], ["--env-kwargs", "renders nothing"]),
    (["--env-kwargs", "[1]"], ["--env-kwargs", "not a JSON object"]),
    (["--cached", "--env-kwargs", '{"g": 5.0}'], ["no cached probe results", "Pendulum-v1+"]),  # their own file
    # where the report goes is tried before the measuring (until 2026-12-03 these were said after the minute of it)
    (["--json", "{tmp}"], ["cannot write", "Is a directory", "pass --json with a writable path"]),
    (["--json", "/proc/profile.json"], ["cannot write /proc/profile.json", "pass --json"]),
    (["--logdir", "{tmp}/a_file"], ["cannot create an output folder under --logdir", "a_file"]),
])
def test_profile_bad_input_is_one_line_and_exit_2(tmp_path, args, fragments):
    (tmp_path / "a_file").write_text("")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    proc = run_module("spreeze_like.profile", "--logdir", str(tmp_path), *args, xdg=tmp_path / "xdg")
    assert_one_line_error(proc, *fragments)
    assert "steps/s" not in proc.stdout  # refused before any probe ran
    assert not list(tmp_path.glob("profile__*"))  # nothing written for a failed profile


@pytest.mark.multiproc
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_stop_signal_in_the_autotune_probe_says_there_is_nothing_to_resume(tmp_path, sig):
    """Ctrl-C (or a batch system's SIGTERM) while a new run's 60 s probe measures: no run folder exists yet, so
    the line must not say "resume with --resume <run folder>" (it did, 2026-11-28), and SIGTERM, which ended
    the process on the spot (no line; multiprocessing warned of leaked semaphores), now ends it the same way
    with exit status 143; the probe's processes end with it."""

    log, logdir = tmp_path / "run.log", tmp_path / "runs"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "spreeze_like.run", "--autotune", "--logdir", str(logdir)],
                                stdout=out, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg"), "PYTHONUNBUFFERED": "1"})
    children: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 120
        while "sampler with 1 env(s)" not in log.read_text():  # the probe's own processes are up
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.05)
        children = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(getattr(signal, sig))
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == (130 if sig == "SIGINT" else 143), err
    assert err.splitlines() == ["interrupted before a run folder was made: nothing was written; start the run again"]
    assert not logdir.exists() or not any(logdir.iterdir())
    _, alive = psutil.wait_procs(children, timeout=5)
    assert not alive, alive
