"""The benchmark's report and peer selection without any run: tools/peers_report.py, the --peers /
--skip-* choices of tools/bench_vs_sb3.py and the settings tools/peers_runners.py gives each peer.

The report's headline is ours / peer wall time to a threshold, per seed and the median, per peer;
records made here with known threshold times pin that arithmetic, including a seed where one side
never reached the threshold (no ratio, and then no median: a missing value is not "fast").
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import sys
from pathlib import Path

import pytest

TOOLS = str(Path(__file__).resolve().parents[2] / "tools")
if TOOLS not in sys.path:
    sys.path.insert(0, TOOLS)

import bench_vs_sb3
import peers_rltools
from peers_record import RunRecord
from peers_report import report
from peers_runners import PEERS, algo_kwargs, shared_kwargs

from spreeze_like.errors import ConfigError

ARGS = argparse.Namespace(env="Pendulum-v1", threshold_train=-250.0, threshold_eval=-200.0, window=1, fixed_wall=0.0)


def run(name: str, seed: int, t_train: float | None, t_eval: float | None) -> RunRecord:
    """A 100 s run whose training return (window 1) reaches -250 at t_train and whose evaluation reaches -200
    at t_eval (None: never)."""
    train = [(5.0, 200, -1000.0)] + ([(t_train, 400, -240.0)] if t_train else [])
    evals = [(6.0, 200, -900.0)] + ([(t_eval, 400, -150.0)] if t_eval else [])
    return RunRecord(name, seed, wall_s=100.0, env_steps=400, updates=300, train=train, evals=evals)


def test_the_summary_gives_each_peer_its_ratio_per_seed_and_the_median() -> None:
    records = [run("ours-parallel", 1, 10.0, 12.0), run("ours-parallel", 2, 30.0, 33.0),
               run("sb3", 1, 40.0, 48.0), run("sb3", 2, 60.0, 66.0),
               run("sbx", 1, 20.0, 24.0), run("sbx", 2, 20.0, None),
               run("sbx-crossq", 1, 10.0, 6.0), run("sbx-crossq", 2, 15.0, 11.0)]
    summary = report(records, ARGS)["summary"]["ours-parallel"]
    assert list(summary) == ["sb3", "sbx", "sbx-crossq"]
    assert summary["sb3"]["t_train"] == {"per_seed": [0.25, 0.5], "median": 0.375}
    assert summary["sb3"]["t_eval"] == {"per_seed": [0.25, 0.5], "median": 0.375}
    assert summary["sbx"]["t_train"] == {"per_seed": [0.5, 1.5], "median": 1.0}
    # SBX seed 2 never reached the evaluation threshold: no ratio for that seed, so no median
    assert summary["sbx"]["t_eval"] == {"per_seed": [0.5, None], "median": None}
    assert summary["sbx-crossq"]["t_train"] == {"per_seed": [1.0, 2.0], "median": 1.5}
    assert summary["sbx-crossq"]["t_eval"] == {"per_seed": [2.0, 3.0], "median": 2.5}
    assert summary["sb3"]["seeds"] == [1, 2]


def test_the_report_prints_the_summary_line_per_peer(capsys: pytest.CaptureFixture[str]) -> None:
    report([run("ours-serial", 1, 10.0, 12.0), run("sbx-crossq", 1, 20.0, None)], ARGS)
    out = capsys.readouterr().out
    assert "ratios ours / SBX CrossQ (" in out
    assert "vs SBX CrossQ  train 0.50 (median 0.50); eval - (median -)" in out


@pytest.mark.parametrize(("flags", "peers"), [
    ([], ["sb3", "sbx", "sbx-crossq"]),
    (["--skip-sbx"], ["sb3"]),  # no SBX at all, SAC nor CrossQ
    (["--skip-sbx-crossq"], ["sb3", "sbx"]),
    (["--skip-sb3"], ["sbx", "sbx-crossq"]),
    (["--peers", "sb3-td3", "sbx-td3", "sbx-ddpg", "--skip-sbx"], ["sb3-td3"]),  # --skip-sbx: every SBX algorithm
    (["--peers", "sb3-td3", "sb3-ddpg", "sbx-td3", "--skip-sb3"], ["sbx-td3"]),
    (["--peers", "sbx-crossq", "sbx", "sbx-crossq"], ["sbx-crossq", "sbx"]),
])
def test_peers_chosen_by_flags(flags: list[str], peers: list[str]) -> None:
    assert bench_vs_sb3.parse_args(flags).peers == peers


def test_every_peer_gets_the_same_shared_settings_and_crossq_none_of_sacs() -> None:
    args = bench_vs_sb3.parse_args(["--env", "HalfCheetah-v5", "--peer-device", "cpu"])
    shared = [shared_kwargs(args, PEERS[p], 3) for p in PEERS]
    assert all(s == shared[0] for s in shared)
    assert shared[0]["learning_rate"] == 3e-4 and shared[0]["learning_starts"] == 10_000 and shared[0]["seed"] == 3
    entropy = {"ent_coef": "auto_1.0", "target_entropy": "auto"}
    assert algo_kwargs(args, PEERS["sb3"], 6) == algo_kwargs(args, PEERS["sbx"], 6) == {
        **entropy, "tau": 0.005, "policy_kwargs": {"net_arch": [256, 256]}}
    assert algo_kwargs(args, PEERS["sbx-crossq"], 6) == entropy  # SBX's CrossQ as shipped: no tau, its own networks
    narrow = bench_vs_sb3.parse_args(["--crossq-critic-units", "256"])
    assert algo_kwargs(narrow, PEERS["sbx-crossq"], 6) == {
        **entropy, "policy_kwargs": {"net_arch": {"pi": [256, 256], "qf": [256, 256]}}}
    faster_targets = bench_vs_sb3.parse_args(["--peer-tau", "0.02"])
    assert algo_kwargs(faster_targets, PEERS["sb3"], 6) == algo_kwargs(faster_targets, PEERS["sbx"], 6) == {
        **entropy, "tau": 0.02, "policy_kwargs": {"net_arch": [256, 256]}}
    assert algo_kwargs(faster_targets, PEERS["sbx-crossq"], 6) == entropy  # no target networks to pass it to


@pytest.mark.parametrize("name", ["sb3-td3", "sbx-td3", "sb3-ddpg", "sbx-ddpg"])
def test_td3_and_ddpg_peers_explore_with_our_default_noise_and_no_entropy(name: str) -> None:
    pytest.importorskip("stable_baselines3", reason="the bench extra (stable-baselines3) is not installed")
    from spreeze_like.config import TrainConfig

    args = bench_vs_sb3.parse_args(["--peer-tau", "0.02", "--peers", name])
    kwargs = algo_kwargs(args, PEERS[name], 6)
    noise = kwargs.pop("action_noise")
    assert noise._mu.tolist() == [0.0] * 6 and noise._sigma.tolist() == [TrainConfig().exploration_noise] * 6
    critic_lr = {"qf_learning_rate": args.sb3_lr} if name.startswith("sbx") else {}  # SBX's DDPG has its own 1e-3
    assert kwargs == {"tau": 0.02, "policy_kwargs": {"net_arch": [256, 256]}, **critic_lr}


def test_a_peer_tau_out_of_range_is_one_error_line() -> None:
    with pytest.raises(ConfigError, match="--peer-tau 0.0: must be in"):
        bench_vs_sb3.parse_args(["--peer-tau", "0"])


def test_every_peer_gets_rl_zoos_gamma_for_the_env_and_algorithm_unless_told() -> None:
    """SB3's 0.99, but rl-zoo's on Swimmer-v5 (as our presets): 0.9999 for SAC, TD3 and DDPG, 0.999 for CrossQ;
    --peer-gamma gives every peer its value; out of (0, 1] is refused."""
    swimmer = {p: 0.999 if PEERS[p].algo == "crossq" else 0.9999 for p in PEERS}
    for argv, gammas in ((["--env", "HalfCheetah-v5"], dict.fromkeys(PEERS, 0.99)), (["--env", "Swimmer-v5"], swimmer),
                         (["--env", "Swimmer-v5", "--peer-gamma", "0.99"], dict.fromkeys(PEERS, 0.99))):
        args = bench_vs_sb3.parse_args([*argv, "--peer-device", "cpu"])
        assert {p: shared_kwargs(args, PEERS[p], 1)["gamma"] for p in PEERS} == gammas, argv
        assert peers_rltools.settings(args)["GAMMA"] == gammas["rltools"], argv
    for bad in ("0", "1.5"):
        with pytest.raises(ConfigError, match=f"--peer-gamma {float(bad)}: must be in"):
            bench_vs_sb3.parse_args(["--peer-gamma", bad])


@pytest.mark.skipif(importlib.util.find_spec("sbx") is None or importlib.util.find_spec("stable_baselines3") is None,
                    reason="the bench extra's peers (sbx-rl, stable-baselines3) are not installed")
@pytest.mark.parametrize("name", ["sbx", "sbx-crossq", "sbx-td3", "sbx-ddpg", "sb3", "sb3-td3", "sb3-ddpg"])
def test_the_peer_constructors_take_every_setting_given(name: str) -> None:
    """A misspelt keyword would fail only in a peer's child, late; binding the signature catches it here."""
    import importlib

    peer = PEERS[name]
    args = bench_vs_sb3.parse_args(["--crossq-critic-units", "256"])
    signature = inspect.signature(getattr(importlib.import_module(peer.module), peer.model))
    signature.bind("MlpPolicy", "Pendulum-v1", **shared_kwargs(args, peer, 1), **algo_kwargs(args, peer, 1))
    if name == "sbx-crossq":  # what the docs promise CrossQ keeps of its own
        assert signature.parameters["policy_delay"].default == 3
        assert "tau" not in signature.parameters


def test_a_command_cut_short_keeps_every_finished_run(tmp_path, monkeypatch):
    """--json is rewritten after every run, not every seed: a device call's time limit that stops the
    command during a slow peer still leaves ours and the peers before it (no run here: the runners are
    stubbed, the last one is 'cut' by an exception)."""
    out = tmp_path / "figures.json"
    monkeypatch.setattr(bench_vs_sb3, "ours_device", lambda cfg: "cpu")
    monkeypatch.setattr(bench_vs_sb3, "run_peer_child", lambda *a: {"device": "cpu"})
    monkeypatch.setattr(bench_vs_sb3, "run_ours", lambda args, seed, serial, scratch: RunRecord("ours", seed, 5.0))

    def run_peer(args, peer, seed, scratch):
        if peer == "sb3":
            raise KeyboardInterrupt  # the command cut in the middle of a run (timeout's SIGTERM ends it there)
        return RunRecord(peer, seed, 7.0)

    monkeypatch.setattr(bench_vs_sb3, "run_peer", run_peer)
    with pytest.raises(KeyboardInterrupt):
        bench_vs_sb3.main(["--env", "Pendulum-v1", "--seeds", "1", "--peers", "sbx", "sb3", "--json", str(out),
                           "--no-png", "--device", "cpu"])
    partial = json.loads(out.read_text())["partial"]
    assert [(r["name"], r["seed"], r["wall_s"]) for r in partial] == [("ours", 1, 5.0), ("sbx", 1, 7.0)]


def test_a_users_ctrl_c_during_our_run_stops_the_benchmark(tmp_path, monkeypatch):
    """The benchmark stops our run with its own SIGINT (wall budget, thresholds reached) and goes on; a
    Ctrl-C the watcher did not send used to be taken for one of those, so the peers then ran anyway."""
    import peers_ours

    def interrupted(config, print_fn):
        raise KeyboardInterrupt

    monkeypatch.setattr("spreeze_like.training.train", interrupted)
    args = argparse.Namespace(set=[], device="cpu", total_steps=600, learning_starts=100, eval_every=0,
                              eval_episodes=1, logdir=str(tmp_path / "runs"), env="Pendulum-v1", wall_budget=0.0,
                              stop_when_reached=False)
    with pytest.raises(KeyboardInterrupt):
        peers_ours.run_ours(args, 1, True, tmp_path)


def test_a_peer_stopped_at_its_budget_short_of_the_threshold_gives_an_upper_bound(capsys) -> None:
    capped = run("sb3", 2, None, None)
    capped.note, capped.budget_s = "stopped at the wall budget", 80.0
    uncapped = run("sbx", 2, None, None)  # no budget: not reached means no figure at all
    records = [run("ours-parallel", 1, 10.0, 12.0), run("ours-parallel", 2, 30.0, 20.0),
               run("sb3", 1, 40.0, 48.0), capped, run("sbx", 1, 20.0, 24.0), uncapped]
    summary = report(records, ARGS)["summary"]["ours-parallel"]
    assert summary["sb3"]["t_eval"] == {"per_seed": [0.25, None], "median": None,
                                        "at_most_per_seed": [None, 0.25], "median_at_most": 0.25}
    assert summary["sb3"]["t_train"]["at_most_per_seed"] == [None, 30.0 / 80.0]
    assert summary["sbx"]["t_eval"] == {"per_seed": [0.5, None], "median": None}
    assert "vs SB3 SAC     train 0.25 <=0.38 (median <=0.31); eval 0.25 <=0.25 (median <=0.25)" in capsys.readouterr().out


def test_peer_stop_ratio_caps_each_peer_at_ours_time_over_its_ratio() -> None:
    args = bench_vs_sb3.parse_args(["--peer-stop-ratio", "sb3=0.25", "--peer-stop-ratio", "sbx=0.5",
                                    "--wall-budget", "240"])
    assert args.peer_stop_ratio == {"sb3": 0.25, "sbx": 0.5}
    ours = [run("ours-parallel", 1, 10.0, 30.0), run("ours-serial", 1, 10.0, 40.0)]
    # the slowest of our modes sets the cap, so the bound holds for each of them
    assert bench_vs_sb3.peer_args(args, "sb3", ours).wall_budget == 160.0
    assert bench_vs_sb3.peer_args(args, "sbx", ours).wall_budget == 80.0
    assert bench_vs_sb3.peer_args(args, "sbx-crossq", ours) is args  # no ratio: the budget as given
    assert bench_vs_sb3.peer_args(args, "sb3", [run("ours-parallel", 1, 10.0, 70.0)]).wall_budget == 240.0
    assert bench_vs_sb3.peer_args(args, "sb3", [run("ours-parallel", 1, 10.0, None)]) is args  # ours short of it
    assert args.wall_budget == 240.0  # the caps are per peer run: the shared args are left alone


@pytest.mark.parametrize("text", ["sb3", "sb3=0", "sb3=1.5", "sb3=x", "nope=0.5"])
def test_a_bad_peer_stop_ratio_is_one_config_error(text: str) -> None:
    with pytest.raises(ConfigError, match="--peer-stop-ratio"):
        bench_vs_sb3.parse_args(["--skip-sbx-crossq", "--peer-stop-ratio", text])
