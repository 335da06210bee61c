"""Smoke tests of tools/bench_vs_sb3.py at its smallest size, so the benchmark does not rot.

They time nothing (speed lives in the benchmark itself); they check that ours and each peer (SB3,
SBX SAC, SBX CrossQ) run, that the shared episode recorder saw training and evaluation episodes, that
the figures, ratios, per-peer summary and devices come out, that every run's curves.csv and the
env's PNG are written, and that a device this machine lacks is refused with one line. The SBX peers'
tests skip, with the reason, where sbx-rl is not installed. The report's ratio arithmetic and the
--peers/--skip-* selection are checked without any run in tests/bench/test_peers_report.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
BENCH = [sys.executable, str(ROOT / "tools" / "bench_vs_sb3.py")]
SMALLEST = ["--seeds", "1", "--serial", "--total-steps", "600", "--learning-starts", "400", "--eval-every", "300",
            "--eval-episodes", "2"]
needs_sbx = pytest.mark.skipif(importlib.util.find_spec("sbx") is None,
                               reason="sbx-rl (the bench extra's SBX peers: SAC and CrossQ) is not installed")


def run_bench(args: list[str], timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(BENCH + args, capture_output=True, text=True, timeout=timeout, cwd=ROOT, check=False,
                          env=env)


def check_rows(rows: dict) -> None:
    for name, per_seed in rows.items():
        v = per_seed["1"]
        assert v["env_steps"] == 600, name
        assert v["episodes"] == 3, name  # Pendulum episodes are 200 steps: the recorder saw every training one
        assert v["updates"] > 0, name
        assert [e[1] for e in v["evals"]] == [300, 600], name  # evaluations found and tied to their env step
        assert all(-2000 < e[2] <= 0 for e in v["evals"]), name


def test_bench_vs_sb3_smallest_configuration(tmp_path: Path) -> None:
    pytest.importorskip("stable_baselines3", reason="the bench extra (stable-baselines3) is not installed")
    out = tmp_path / "figures.json"
    temp = tmp_path / "temp"  # the runs' TMPDIR: SB3's own logger, left to itself, makes an SB3-<time> folder there
    temp.mkdir()
    proc = run_bench(SMALLEST + ["--skip-sbx", "--device", "cpu", "--peer-device", "cpu", "--json", str(out)],
                     env={**os.environ, "TMPDIR": str(temp)})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert not list(temp.glob("SB3-*"))
    assert "load average before" in proc.stdout and "ratios ours / SB3" in proc.stdout
    assert "ratios ours / SBX" not in proc.stdout
    figures = json.loads(out.read_text())
    rows = figures["rows"]
    assert set(rows) == {"ours-serial", "sb3"}
    check_rows(rows)
    assert rows["ours-serial"]["1"]["device"].startswith("actor cpu, critic cpu")  # --device reached our learners
    assert rows["sb3"]["1"]["device"] == "torch cpu (cpu)"
    assert set(figures["ratios"]) == {"sb3"} and set(figures["summary"]["ours-serial"]) == {"sb3"}
    ratio = figures["ratios"]["sb3"]["ours-serial/updates_per_s"]
    assert ratio["per_seed"][0] == pytest.approx(
        rows["ours-serial"]["1"]["updates_per_s"] / rows["sb3"]["1"]["updates_per_s"])
    check_curves(tmp_path / "figures_curves", rows)


def check_curves(curves_dir: Path, rows: dict) -> None:
    """Each run's curves.csv (beside --json by default) holds the benchmark's own records, and the PNG exists."""
    from spreeze_like.curves import read_curves

    for name, per_seed in rows.items():
        curves = read_curves(curves_dir / f"Pendulum-v1-{name}-seed1")
        assert (curves.meta["system"], curves.meta["seed"], curves.meta["env"]) == (name, 1, "Pendulum-v1")
        assert curves.meta["algo"] == per_seed["1"]["algo"], name
        assert [p.env_steps for p in curves.train] == [200, 400, 600], name
        assert [(p.env_steps, round(p.episode_return, 1), p.episodes) for p in curves.eval] == [
            (s, m, 2) for _, s, m in per_seed["1"]["evals"]], name
        # the benchmark's clock: every point inside the run's wall time, in time order
        times = [p.wall_s for p in sorted(curves.train + curves.eval, key=lambda p: p.wall_s)]
        assert 0 < times[0] and times[-1] <= per_seed["1"]["wall_s"] + 1e-3, name
    png = curves_dir / "curves_Pendulum-v1.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


@needs_sbx
def test_bench_vs_sbx_sac_and_crossq_smallest_configuration(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    proc = run_bench(SMALLEST + ["--peers", "sbx", "sbx-crossq", "--peer-device", "cpu", "--set",
                                 'critic_device="cpu"', "--json", str(out)])
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "ratios ours / SBX SAC (" in proc.stdout and "ratios ours / SBX CrossQ (" in proc.stdout
    assert "ratios ours / SB3" not in proc.stdout
    assert "sbx on jax cpu" in proc.stdout and "sbx-crossq on jax cpu" in proc.stdout
    figures = json.loads(out.read_text())
    rows = figures["rows"]
    assert set(rows) == {"ours-serial", "sbx", "sbx-crossq"}
    check_rows(rows)
    assert "critic cpu" in rows["ours-serial"]["1"]["device"]  # --set critic_device reached our critic
    for peer in ("sbx", "sbx-crossq"):
        assert rows[peer]["1"]["device"] == "jax cpu (cpu)", peer  # JAX_PLATFORMS=cpu from --peer-device cpu
        assert figures["devices"][peer] == ["jax cpu (cpu)"], peer
        assert figures["ratios"][peer]["ours-serial/steps_per_s"]["per_seed"][0] > 0, peer
        # the summary holds the same per-seed ratios as the full table, peer by peer
        for key in ("t_train", "t_eval"):
            assert figures["summary"]["ours-serial"][peer][key] == {
                k: figures["ratios"][peer][f"ours-serial/{key}"][k] for k in ("per_seed", "median")}, (peer, key)
    assert [rows[n]["1"]["algo"] for n in ("ours-serial", "sbx", "sbx-crossq")] == ["sac", "sac", "crossq"]
    # the updates counted are critic updates, one per env step after the warm-up (the actor's come every 3rd)
    assert rows["sbx-crossq"]["1"]["updates"] == 600 - 400
    assert "summary: ours / peer wall time to the threshold" in proc.stdout
    assert "vs SBX CrossQ" in proc.stdout
    check_curves(tmp_path / "figures_curves", rows)


@needs_sbx
def test_bench_vs_td3_and_ddpg_peers_smallest_configuration(tmp_path: Path) -> None:
    """Ours as TD3 beside SB3's TD3 and SBX's DDPG (both frameworks, both algorithms): their updates are critic
    updates, one per env step after the warm-up, and the report names each peer's algorithm."""
    pytest.importorskip("stable_baselines3", reason="the bench extra (stable-baselines3) is not installed")
    out = tmp_path / "figures.json"
    proc = run_bench(SMALLEST + ["--peers", "sb3-td3", "sbx-ddpg", "--peer-device", "cpu", "--device", "cpu",
                                 "--set", 'algo="td3"', "--json", str(out), "--no-png"])
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "ratios ours / SB3 TD3 (" in proc.stdout and "ratios ours / SBX DDPG (" in proc.stdout
    rows = json.loads(out.read_text())["rows"]
    assert set(rows) == {"ours-serial", "sb3-td3", "sbx-ddpg"}
    check_rows(rows)
    assert [rows[n]["1"]["algo"] for n in ("ours-serial", "sb3-td3", "sbx-ddpg")] == ["td3", "td3", "ddpg"]
    assert rows["sb3-td3"]["1"]["updates"] == rows["sbx-ddpg"]["1"]["updates"] == 600 - 400


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal of a GPU this machine does not have")
@pytest.mark.parametrize("flags", [["--device", "cuda:0"], ["--set", 'actor_device="cuda:0"'],
                                   ["--skip-ours", "--skip-sbx", "--peer-device", "cuda"]],
                         ids=["device", "set", "peer-device"])
def test_an_absent_gpu_is_refused_before_any_run(flags: list[str]) -> None:
    if "--skip-ours" in flags and importlib.util.find_spec("stable_baselines3") is None:
        pytest.skip("the bench extra (stable-baselines3) is not installed")
    proc = run_bench(SMALLEST + flags, timeout=120)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("error: ") and "cuda" in proc.stderr
    assert "done " not in proc.stdout  # refused before the first run


@needs_sbx
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal of a GPU this machine does not have")
@pytest.mark.parametrize("peer", ["sbx", "sbx-crossq"])
def test_sbx_on_an_absent_gpu_is_refused(peer: str) -> None:
    proc = run_bench(SMALLEST + ["--skip-ours", "--peers", peer, "--peer-device", "cuda"], timeout=120)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("error: --peer-device cuda: JAX runs on cpu")


def test_a_png_without_a_curves_folder_is_refused(tmp_path: Path) -> None:
    proc = run_bench(SMALLEST + ["--png", str(tmp_path / "c.png")], timeout=120)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == "error: --png needs the curves: give --curves-dir or --json"
    assert "done " not in proc.stdout and not (tmp_path / "c.png").exists()


def test_ours_runs_what_a_default_run_on_the_base_env_gets() -> None:
    """The run sees the recording wrapper's env id, which no preset knows: the benchmark lays the base env's
    algorithm (presets/algos.toml) and preset itself, under its shared settings and --set."""
    import argparse

    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from peers_ours import ours_config
        from peers_record import MODULE, RECORDED_ID
    finally:
        sys.path.remove(str(ROOT / "tools"))
    from spreeze_like.config import TrainConfig
    from spreeze_like.layering import lay_presets

    def config(env: str, **extra):
        args = argparse.Namespace(set=list(extra.items()), device=None, total_steps=20_000, learning_starts=123,
                                  eval_every=1000, eval_episodes=10, logdir="runs", env=env)
        return ours_config(args, 2, False)

    for env in ("Pendulum-v1", "HalfCheetah-v5", "Hopper-v5", "Walker2d-v5", "Ant-v5", "Humanoid-v5"):
        default, _ = lay_presets(TrainConfig(env=env), {"env": "flag"})
        ours = config(env)
        assert ours.env == f"{MODULE}:{RECORDED_ID}" and ours.seed == 2
        assert (ours.algo, ours.hidden_sizes, ours.tau) == (default.algo, default.hidden_sizes, default.tau), env
        assert ours.actor_lr == default.resolve().actor_lr, env
        assert (ours.learning_starts, ours.total_steps) == (123, 20_000), env  # the benchmark's shared settings win
    crossq_envs = ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5", "Ant-v5", "Humanoid-v5")
    assert all(config(env).algo == "crossq" for env in crossq_envs)
    forced = config("HalfCheetah-v5", algo="sac")
    assert (forced.algo, forced.actor_lr) == ("sac", 3e-4)  # --set wins, and the lr is SAC's on the base env
    assert config("Pendulum-v1").tau == 0.02 and config("Pendulum-v1", tau=0.005).tau == 0.005


def test_evaluation_rounds_get_the_steps_of_their_own_evaluations_in_order() -> None:
    """A learned policy returns about the same mean at every evaluation: each round must keep its own step."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from peers_ours import eval_steps
    finally:
        sys.path.remove(str(ROOT / "tools"))
    known = [(1000, -1500.0), (2000, -141.90), (3000, -141.95), (4000, -141.91)]
    assert eval_steps([-1500.0, -141.90, -141.95, -141.91], known) == [1000, 2000, 3000, 4000]
    # a round the run's list lacks (interrupted before it was stored) gets -1 and does not shift the others
    assert eval_steps([-1500.0, -600.0, -141.90], known) == [1000, -1, 2000]


def test_env_kwargs_reach_every_side(tmp_path: Path) -> None:
    """``--env-kwargs`` make every side's env (Pendulum's episodes cut to 100 steps): the shared recorder counts
    6 training episodes in 600 env steps for ours, and for SB3 where the bench extra is installed (3 without
    the kwargs: check_rows above). ``--set env_kwargs=`` would reach ours alone and is refused."""
    peers = [] if importlib.util.find_spec("stable_baselines3") is None else ["--peers", "sb3"]
    out = tmp_path / "figures.json"
    proc = run_bench(SMALLEST + ["--skip-sbx", "--device", "cpu", "--peer-device", "cpu", "--json", str(out),
                                 "--no-png", "--env-kwargs", '{"max_episode_steps": 100}']
                     + (peers or ["--skip-sb3"]))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert 'Pendulum-v1 (--env-kwargs {"max_episode_steps": 100})' in proc.stdout
    figures = json.loads(out.read_text())
    assert set(figures["rows"]) == {"ours-serial"} | ({"sb3"} if peers else set())
    for name, per_seed in figures["rows"].items():
        assert per_seed["1"]["episodes"] == 6, name
    assert figures["settings"]["env_kwargs"] == {"max_episode_steps": 100}
    refused = run_bench(SMALLEST + ["--set", 'env_kwargs={"g": 5.0}'], timeout=120)
    assert refused.returncode == 2 and "give --env-kwargs" in refused.stderr.strip().splitlines()[-1]


def test_her_goals_reach_every_side(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--her-goals K`` and ``--her-strategy`` on a goal env (TinyReach: 8-step episodes, Dict observations): ours
    stores 1 + K rows a step (replay rows are not in the benchmark's record, so its run's config is the check that
    the flags reached it), SB3 gets its HerReplayBuffer with K goals of the strategy and MultiInputPolicy, both
    train the same env steps and episodes, and the results file says both. ``--set her_goals=`` is refused."""
    sb3 = importlib.util.find_spec("stable_baselines3") is not None
    tests_dir = str(ROOT / "tests")
    monkeypatch.setenv("PYTHONPATH", tests_dir)
    out = tmp_path / "figures.json"
    proc = run_bench(["--env", "trainer.goal_envs:TinyReach-v0", "--seeds", "1", "--serial", "--total-steps", "400",
                      "--learning-starts", "100", "--eval-every", "200", "--eval-episodes", "2", "--her-goals", "2",
                      "--her-strategy", "final",
                      "--skip-sbx", "--device", "cpu", "--peer-device", "cpu", "--json", str(out), "--no-png",
                      "--logdir", str(tmp_path / "ours")] + ([] if sb3 else ["--skip-sb3"]))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    figures = json.loads(out.read_text())
    assert (figures["settings"]["her_goals"], figures["settings"]["her_strategy"]) == (2, "final")
    assert set(figures["rows"]) == {"ours-serial"} | ({"sb3"} if sb3 else set())
    for name, per_seed in figures["rows"].items():
        assert per_seed["1"]["env_steps"] == 400 and per_seed["1"]["episodes"] == 50, name
    (run_dir,) = (tmp_path / "ours").iterdir()  # ours wrote its run folder there: its config says K
    ours = json.loads((run_dir / "config.json").read_text())
    assert (ours["her_goals"], ours["her_strategy"]) == (2, "final")
    refused = run_bench(SMALLEST + ["--set", "her_goals=4"], timeout=120)
    assert refused.returncode == 2 and "give --her-goals" in refused.stderr.strip().splitlines()[-1]
    if not sb3:
        return
    sys.path.insert(0, str(ROOT / "tools"))
    sys.path.insert(0, tests_dir)
    try:
        import argparse

        import trainer.goal_envs  # noqa: F401 - registers TinyReach-v0
        from peers_record import BASE_ENV_VAR
        from peers_runners import PEERS, make_model
        from stable_baselines3 import HerReplayBuffer

        monkeypatch.setenv(BASE_ENV_VAR, "TinyReach-v0")
        args = argparse.Namespace(peer_device="cpu", sb3_lr=3e-4, learning_starts=100, peer_tau=0.005, peer_gamma=0.99,
                                  her_goals=2,
                                  her_strategy="final")
        model = make_model(args, PEERS["sb3"], 1)
        assert isinstance(model.replay_buffer, HerReplayBuffer) and model.replay_buffer.n_sampled_goal == 2
        assert model.replay_buffer.goal_selection_strategy.name == "FINAL"
        assert type(model.policy).__name__ == "MultiInputPolicy"
    finally:
        sys.path.remove(str(ROOT / "tools"))
        sys.path.remove(tests_dir)


needs_rltools = pytest.mark.skipif(
    importlib.util.find_spec("rltools") is None or not any(shutil.which(c) for c in ("g++", "clang++")),
    reason="the rltools peer needs rltools (the bench extra) and a C++ compiler")


@needs_rltools
def test_the_rltools_peer_trains_on_the_recorded_env_with_its_own_networks(tmp_path: Path) -> None:
    """RLtools (compiled on the spot, tools/peers_rltools.py) next to ours: the recorder saw its training episodes,
    the evaluations ran its policy, updates are one per step after the warm-up, the note says its settings."""
    out = tmp_path / "figures.json"
    proc = run_bench(SMALLEST + ["--peers", "rltools", "--device", "cpu", "--json", str(out), "--no-png"], timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert set(rows) == {"ours-serial", "rltools"}
    check_rows(rows)
    assert rows["rltools"]["1"]["updates"] == 600 - 400
    assert rows["rltools"]["1"]["device"].startswith("C++ cpu, one thread")
    assert "ratios ours / RLtools SAC" in proc.stdout and "RLtools 64x64, batch 100" in proc.stdout


def test_the_rltools_env_starts_from_the_paired_seed_and_says_its_episode_limit() -> None:
    """RLtools resets without a seed: the wrapper gives the first reset the seed (later resets continue the env's
    generator, as SB3's), and its spec carries the limit RLtools compiles in (the recorded env's has none)."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import gymnasium as gym
        from peers_rltools import FirstResetSeeded
    finally:
        sys.path.remove(str(ROOT / "tools"))
    plain = gym.make("Pendulum-v1")
    wrapped = FirstResetSeeded(gym.make("Pendulum-v1"), 7, 123)
    first, _ = plain.reset(seed=7)
    second, _ = plain.reset()
    assert (wrapped.reset()[0] == first).all() and (wrapped.reset()[0] == second).all()
    assert wrapped.spec.max_episode_steps == 123 and wrapped.spec.id == "Pendulum-v1"


@needs_rltools
def test_the_rltools_peer_on_its_own_cpp_pendulum_is_evaluated_on_gymnasiums(tmp_path: Path) -> None:
    """``--rltools-native``: no Python env in RLtools' loop, so no recorded training episode; our evaluations of its
    policy on gymnasium's Pendulum-v1 still run at their steps, and it runs its whole --total-steps."""
    out = tmp_path / "figures.json"
    proc = run_bench(SMALLEST + ["--peers", "rltools", "--rltools-native", "--skip-ours", "--stop-when-reached",
                                 "--json", str(out), "--no-png"], timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    row = json.loads(out.read_text())["rows"]["rltools"]["1"]
    assert row["env_steps"] == 600 and row["episodes"] == 0
    assert [e[1] for e in row["evals"]] == [300, 600] and all(-2000 < e[2] <= 0 for e in row["evals"])
    assert "its C++ Pendulum" in proc.stdout


@pytest.mark.parametrize("args", [["--env", "HalfCheetah-v5", "--peers", "rltools"], ["--peers", "sb3"]])
def test_rltools_native_is_refused_off_pendulum_or_without_the_peer(args: list[str]) -> None:
    proc = run_bench(SMALLEST + ["--rltools-native", *args], timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1].startswith("error: --rltools-native")
