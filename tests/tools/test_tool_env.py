"""A benchmark tool given an env it cannot use ends at once with one ``error:`` line and exit status 2, before it
prints a header, spawns a child or makes a scratch folder; a measuring child that dies ends its tool at once.

Found on 2026-12-03 by trying ``--env Nope-v0`` on every tool: four of them printed a traceback (two of them a
measuring child's, then waited up to an hour on the dead child's queue), four exited 1 after making a scratch folder,
which they kept, and bench_vs_sb3 printed its header, then named its internal recorded env
('peers_record:SpzBench/Recorded-v0') instead of the one typed. bench_autotune (``--envs``) already refused it in one
line (its own check returns 2 from ``main``, which its in-process tests call), and is held to it here too."""

from __future__ import annotations

import importlib.util
import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("bench_autotune", "bench_flush_denormal", "bench_learner_rate", "bench_learning", "bench_parallel_vs_serial",
         "bench_resume", "bench_seeds", "bench_startup", "bench_vs_sb3", "soak")


@pytest.mark.parametrize("tool", TOOLS)
def test_an_unknown_env_is_one_line_and_exit_2_before_anything_is_made(tool, tmp_path):
    temp = tmp_path / "temp"  # the tools' scratch folders (tempfile.mkdtemp) would land here
    temp.mkdir()
    env_flag = {"bench_seeds": ["--", "--env", "Nope-v0"],  # its run flags
                "bench_autotune": ["--envs", "Nope-v0", "--out", str(tmp_path / "out")]}.get(tool, ["--env", "Nope-v0"])
    done = subprocess.run([sys.executable, f"tools/{tool}.py", *env_flag], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "TMPDIR": str(temp)}, check=False)
    assert done.returncode == 2, done.stderr[-3000:]
    expected = ("error: cannot make env 'Nope-v0': Environment `Nope` doesn't exist. Did you mean: `Hopper`? (for your "
                "own env pass module:EnvId, e.g. my_pkg.envs:MyEnv-v0)")
    assert done.stderr.splitlines() == [expected], done.stderr[-3000:]
    assert done.stdout == ""  # no header of a benchmark that is not going to run
    assert list(temp.iterdir()) == []


@pytest.mark.parametrize("args", [
    ["tools/bench_learner_rate.py", "--alone-seconds", "-1"], ["tools/bench_learner_rate.py", "--total-steps", "0"],
    ["tools/bench_flush_denormal.py", "--window", "0"], ["tools/bench_startup.py", "--timeout", "-1"],
    ["tools/bench_ipc.py", "--repeats", "0"], ["tools/bench_resume.py", "--seeds", "-3"],
    ["tools/soak.py", "--minutes", "-1"], ["tools/bench_explicit_grad.py", "--sizes", "32"]])
def test_a_number_out_of_range_is_an_error_line_and_exit_2_before_anything_is_made(args, tmp_path):
    """Before 2026-12-03 each of these ended in a traceback (a division by zero, an empty median, a timeout of
    -1 s), after making a scratch folder or, for the soak, after starting two runs it then left running."""
    temp = tmp_path / "temp"
    temp.mkdir()
    done = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TMPDIR": str(temp)}, check=False)
    assert done.returncode == 2, done.stderr[-3000:]
    # one error line (argparse's own checks print their usage above it, as for any flag it refuses)
    assert "Traceback" not in done.stderr and "error: " in done.stderr.splitlines()[-1], done.stderr[-3000:]
    assert list(temp.iterdir()) == []


@pytest.fixture
def result_of(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "tools"))
    from bench_learner_rate import result_of

    return result_of


def test_a_child_that_dies_without_its_result_ends_the_wait_at_once(result_of):
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=os._exit, args=(3,))
    proc.start()
    t0 = time.monotonic()
    with pytest.raises(SystemExit, match="exited with status 3 before it gave its result"):
        result_of(proc, queue, 3600)
    assert time.monotonic() - t0 < 30  # not the hour of the timeout
    assert proc.exitcode == 3


def test_a_result_put_just_before_the_child_exits_is_still_taken(result_of):
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=queue.put, args=({"rate": 1.5},))
    proc.start()
    proc.join()  # the child is gone before the wait starts: its result must still be read
    assert result_of(proc, queue, 60) == {"rate": 1.5}


JSON_TOOLS = ("bench_autotune", "bench_cpu_compile", "bench_explicit_grad", "bench_flush_denormal", "bench_gpu",
              "bench_ipc", "bench_learner_rate", "bench_remote", "bench_resume", "bench_sampler", "bench_seeds",
              "bench_startup", "bench_vs_sb3", "soak")


@pytest.mark.parametrize("tool", JSON_TOOLS + ("check_tb_layout",))
def test_an_output_file_that_cannot_be_written_is_one_line_before_the_measuring(tool, tmp_path):
    """Found on 2026-12-03: each tool wrote its --json at the end, so a folder given as the file (or a path under
    /proc) was a traceback after the measuring: a soak's half hour, bench_vs_sb3 after its first run."""
    temp = tmp_path / "temp"
    temp.mkdir()
    flag = "-o" if tool == "check_tb_layout" else "--json"
    done = subprocess.run([sys.executable, f"tools/{tool}.py", flag, str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "TMPDIR": str(temp)}, check=False)
    assert done.returncode == 2, done.stderr[-3000:]
    said = f"error: cannot write {tmp_path}: Is a directory; pass {flag} with a writable path"
    assert done.stderr.splitlines() == [said], done.stderr[-3000:]
    assert done.stdout == "" and list(temp.iterdir()) == []


@pytest.mark.skipif(importlib.util.find_spec("cpprb") is not None, reason="cpprb is installed here (the [bench] extra)")
def test_bench_replay_without_its_peer_is_one_line():
    """It was an ImportError traceback after its header; cpprb is the [bench] extra's."""
    done = subprocess.run([sys.executable, "tools/bench_replay.py", "--quick"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == ('error: cpprb, the peer this benchmark measures against, is not installed: pip install -e '
                           '".[bench]"\n')


def test_bench_learner_rate_runs_in_its_scratch_folder(tmp_path):
    """Its settings check of 2026-12-03 (morning) validated them with the logdir "", so every call without --logdir
    ended in "error: --logdir '' is invalid" before measuring anything; no test ran the tool with good input."""
    temp = tmp_path / "temp"
    temp.mkdir()
    out = tmp_path / "rate.json"
    done = subprocess.run([sys.executable, "tools/bench_learner_rate.py", "--total-steps", "1200", "--learning-starts",
                           "400", "--batch-size", "32", "--hidden-sizes", "16", "16", "--alone-seconds", "0.5",
                           "--feeders", "inline", "--json", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=240, env={**os.environ, "TMPDIR": str(temp)}, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "median ratio in run / alone (inline)" in done.stdout
    assert json.loads(out.read_text())["runs"] and list(temp.iterdir()) == []  # the scratch folder removed
