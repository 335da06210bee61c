"""``tools/bench_vs_sb3.py --report``: one report made of the --json files of several invocations.

A lent GPU machine runs the learning comparison in calls of at most ten minutes, and a call may be
cut by its time limit in the middle of a seed; the seed is then run again in a later call. These
tests make such files through the benchmark's own ``main()`` with its runners stubbed (no training
here) and check that the report of the files is the report one invocation of the same runs gives,
that a seed's runs all come from one file (ratios pair runs of one invocation, on one machine), and
that a file of other settings, of another tool or of an older version is refused in one line.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = str(ROOT / "tools")
if TOOLS not in sys.path:
    sys.path.insert(0, TOOLS)

import bench_vs_sb3
from peers_record import RunRecord
from peers_report import load_results, report

from spreeze_like.errors import ConfigError

# wall s to the eval threshold (-200) per run and seed; the training threshold (-250) is reached 2 s before
T_EVAL = {("ours-parallel", 1): 10.0, ("sbx", 1): 24.0, ("sb3", 1): 50.0,
          ("ours-parallel", 2): 12.0, ("sbx", 2): 30.0, ("sb3", 2): 36.0}
FLAGS = ["--env", "Pendulum-v1", "--peers", "sbx", "sb3", "--no-png", "--device", "cpu", "--window", "1"]


def made(name: str, seed: int, first_try: bool = False) -> RunRecord:
    """A run reaching both thresholds at its T_EVAL time (a first try of seed 2 is slower: told apart)."""
    t = T_EVAL[(name, seed)] + (100.0 if first_try else 0.0)
    return RunRecord(name, seed, wall_s=t + 5.0, env_steps=1000, updates=800, device="cpu",
                     train=[(1.0, 200, -1200.0), (t - 2.0, 800, -240.0)],
                     evals=[(2.0, 200, -1100.0), (t, 800, -150.0)])


def stub_runners(monkeypatch: pytest.MonkeyPatch, cut_at: tuple[str, int] | None, first_try: bool = False) -> None:
    """The benchmark's runners made to return ``made`` records; the run ``cut_at`` is cut (KeyboardInterrupt,
    as timeout's signal ends a device call)."""
    monkeypatch.setattr(bench_vs_sb3, "ours_device", lambda cfg: "cpu")
    monkeypatch.setattr(bench_vs_sb3, "run_peer_child", lambda *a: {"device": "cpu"})

    def runner(name: str, seed: int) -> RunRecord:
        if (name, seed) == cut_at:
            raise KeyboardInterrupt
        return made(name, seed, first_try and seed == 2)

    monkeypatch.setattr(bench_vs_sb3, "run_ours", lambda args, seed, serial, scratch: runner("ours-parallel", seed))
    monkeypatch.setattr(bench_vs_sb3, "run_peer", lambda args, peer, seed, scratch: runner(peer, seed))


def two_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """Call 1: seeds 1 and 2, cut during SB3's seed 2. Call 2: seed 2 again, finished."""
    first, second = tmp_path / "learn.json", tmp_path / "learn2.json"
    stub_runners(monkeypatch, cut_at=("sb3", 2), first_try=True)
    with pytest.raises(KeyboardInterrupt):
        bench_vs_sb3.main([*FLAGS, "--seeds", "1", "2", "--json", str(first)])
    stub_runners(monkeypatch, cut_at=None)
    bench_vs_sb3.main([*FLAGS, "--seeds", "2", "--json", str(second)])
    return first, second


def test_the_report_of_two_calls_is_the_report_of_one_invocation(tmp_path, monkeypatch, capsys) -> None:
    first, second = two_calls(tmp_path, monkeypatch)
    assert "partial" in json.loads(first.read_text())  # call 1 kept ours and SBX of seed 2 before the cut
    capsys.readouterr()
    merged = tmp_path / "merged.json"
    figures = bench_vs_sb3.main(["--report", str(first), str(second), "--json", str(merged), "--no-png"])
    out = capsys.readouterr().out
    one_invocation = report([made(n, s) for s in (1, 2) for n in ("ours-parallel", "sbx", "sb3")],
                            argparse.Namespace(env="Pendulum-v1", threshold_train=-250.0, threshold_eval=-200.0,
                                               window=1, fixed_wall=0.0))
    assert figures["summary"] == one_invocation["summary"]
    assert figures["summary"]["ours-parallel"]["sb3"]["t_eval"] == {"per_seed": [0.2, 12.0 / 36.0],
                                                                    "median": pytest.approx(0.2666666)}
    assert f"seed 2: the runs of {second} replace those of {first}" in out
    assert f"{first}: seeds 1, 2 (cut short), on " in out and f"{second}: seeds 2 (finished), on " in out
    # the merged file is itself a finished results file: reporting it again gives the same figures
    again = bench_vs_sb3.main(["--report", str(merged), "--no-png"])
    assert again["summary"] == figures["summary"]


def test_a_seeds_runs_all_come_from_the_last_file_holding_it(tmp_path, monkeypatch) -> None:
    first, second = two_calls(tmp_path, monkeypatch)
    records, settings, _ = load_results([str(first), str(second)])
    # seed 2's SBX run of call 1 (the slower first try) is dropped with the rest of that seed's first try
    assert [(r.name, r.seed, r.wall_s) for r in records] == [
        ("ours-parallel", 1, 15.0), ("sbx", 1, 29.0), ("sb3", 1, 55.0),
        ("ours-parallel", 2, 17.0), ("sbx", 2, 35.0), ("sb3", 2, 41.0)]
    assert settings["threshold_eval"] == -200.0 and settings["window"] == 1
    assert "cores, GPUs: " in settings["machine"]
    assert not any("different machines" in note for note in load_results([str(first), str(second)])[2])
    records, _, _ = load_results([str(second), str(first)])  # the other order: call 1's seed 2, ours and SBX
    assert [(r.name, r.seed, r.wall_s) for r in records if r.seed == 2] == [("ours-parallel", 2, 117.0),
                                                                          ("sbx", 2, 135.0)]


def test_files_from_two_machines_are_reported_with_a_note_saying_so(tmp_path, monkeypatch) -> None:
    first, second = two_calls(tmp_path, monkeypatch)
    data = json.loads(second.read_text())
    data["settings"]["machine"] = "another machine, 16 cores, GPUs: NVIDIA H100 80GB HBM3"
    second.write_text(json.dumps(data))
    records, settings, notes = load_results([str(first), str(second)])
    assert settings["machine"].endswith("; another machine, 16 cores, GPUs: NVIDIA H100 80GB HBM3")
    assert notes[-1].startswith("note: the files come from different machines")
    assert len(records) == 6


def test_files_of_other_thresholds_are_refused_in_one_line(tmp_path, monkeypatch) -> None:
    first, _ = two_calls(tmp_path, monkeypatch)
    other = tmp_path / "other.json"
    data = json.loads(first.read_text())
    data["settings"]["threshold_eval"] = -150.0
    other.write_text(json.dumps(data))
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "bench_vs_sb3.py"), "--report", str(first),
                           str(other)], capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"error: --report {other}: its threshold_eval differ") and \
        proc.stderr.count("\n") == 1


def test_files_made_with_other_env_kwargs_are_refused(tmp_path, monkeypatch) -> None:
    """A file from before --env-kwargs (no key) counts as made with none: it mixes with ``{}``, not with others."""
    first, second = two_calls(tmp_path, monkeypatch)
    data = json.loads(second.read_text())
    data["settings"].pop("env_kwargs", None)
    second.write_text(json.dumps(data))
    assert len(load_results([str(first), str(second)])[0]) == 6
    data["settings"]["env_kwargs"] = {"max_episode_steps": 100}
    second.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="its env_kwargs differ"):
        load_results([str(first), str(second)])


@pytest.mark.parametrize("text", [None, "{not json", '{"rows": {}, "ratios": {}}', '[1, 2]',
                                  '{"partial": [], "settings": {"env": "Pendulum-v1"}}',
                                  ('{"partial": [{"nom": "x"}], "settings": {"env": "Pendulum-v1", "threshold_train": 0, '
                                   '"threshold_eval": 0, "window": 5, "eval_episodes": 10}}')])
def test_an_unreadable_old_or_foreign_file_is_a_config_error(tmp_path: Path, text: str | None) -> None:
    path = tmp_path / "results.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(ConfigError, match=f"--report {path}: "):
        load_results([str(path)])
