"""Review findings 5 and 15: one writer per run folder, and run-folder files that stay whole.

Each test runs the real CLI in real processes where the finding involves them: a run holding its
folder while a second one is refused, a holder killed with SIGKILL, a run folder deleted under a
running serial and parallel run, a reader racing an evals.jsonl rewrite.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spreeze_like.checkpoint import list_checkpoints
from spreeze_like.errors import CheckpointError, SpreezeError
from spreeze_like.procs.evaluator_proc import EVALS_FILE, read_results
from spreeze_like.procs.parts import read_part
from spreeze_like.procs.status import eval_history, trim_eval_history
from spreeze_like.rundir import LOCK_FILE, RunFolderError, RunFolderLock

from .helpers import TINY_ARGS, cli_env, only_run_dir, run_cli, start_cli, survivors, wait_status

SERIAL = [*TINY_ARGS, "--serial", "--checkpoint-every", "200"]


def wait_for_checkpoint(run_dir: Path, proc: subprocess.Popen, log: Path, timeout: float = 90.0) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = list_checkpoints(run_dir)
        if found:
            return found[-1]
        assert proc.poll() is None, f"the run exited ({proc.returncode}) early:\n{log.read_text()[-3000:]}"
        time.sleep(0.1)
    raise AssertionError(f"no checkpoint within {timeout} s:\n{log.read_text()[-3000:]}")


def error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("error: ")]


def delete(run_dir: Path) -> None:
    """``rm -rf`` a folder a live run writes into (a file appearing meanwhile makes one pass fail)."""
    deadline = time.monotonic() + 10.0
    while run_dir.exists() and time.monotonic() < deadline:
        shutil.rmtree(run_dir, ignore_errors=True)
    assert not run_dir.exists()


def step_of(checkpoint: Path) -> int:
    return int(checkpoint.stem.split("_")[1])


# --- finding 5: no lock on the run folder -----------------------------------------------------------------------
def test_finding05_a_folder_in_use_is_refused_and_the_lock_dies_with_its_holder(tmp_path):
    logdir, log = tmp_path / "runs", tmp_path / "holder.log"
    holder = start_cli(*SERIAL, "--total-steps", "100000", "--logdir", str(logdir), log=log)
    try:
        run_dir = only_run_dir(logdir)
        wait_for_checkpoint(run_dir, holder, log)
        refused = run_cli("--resume", str(run_dir), "--total-steps", "200000", timeout=120)
        lines = refused.stderr.strip().splitlines()
        assert refused.returncode == 2 and len(lines) == 1, refused.stderr
        assert lines[0].startswith(f"error: run folder {run_dir} is in use by pid {holder.pid} on host "), lines[0]
        assert holder.poll() is None  # the holder never noticed
    finally:
        holder.send_signal(signal.SIGKILL)  # the kernel drops its flock: no stale lock file to clean up
        holder.wait(timeout=30)
    newest = list_checkpoints(run_dir)[-1]
    resumed = run_cli("--resume", str(run_dir), "--total-steps", str(step_of(newest) + 100), timeout=180)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "final evaluation" in resumed.stdout
    assert (run_dir / LOCK_FILE).is_file()  # the file stays; only the lock on it meant anything


def test_finding05_the_parallel_supervisor_holds_the_lock_and_children_never_do(tmp_path):
    logdir, log = tmp_path / "runs", tmp_path / "run.log"
    proc = start_cli(*TINY_ARGS, "--total-steps", "100000", "--logdir", str(logdir), log=log)
    try:
        run_dir = only_run_dir(logdir)
        status = wait_status(run_dir, lambda s: s["state"] == "running" and s["env_steps"] > 0, timeout=120,
                             proc=proc, log=log)
        with pytest.raises(RunFolderError, match=f"in use by pid {proc.pid} on host"):
            RunFolderLock.acquire(run_dir)  # a second locker, here in the test process
        children = [r["pid"] for r in status["roles"].values() if r.get("pid")]
        assert children
        for pid in children:  # close-on-exec and spawn: no child holds a descriptor of the lock file
            fds = os.listdir(f"/proc/{pid}/fd")
            held = {os.path.realpath(f"/proc/{pid}/fd/{fd}") for fd in fds if os.path.exists(f"/proc/{pid}/fd/{fd}")}
            assert str((run_dir / LOCK_FILE).resolve()) not in held
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert survivors(children, timeout=30) == []  # they die with the supervisor (parent-death signal)
    lock = RunFolderLock.acquire(run_dir)  # the dead supervisor's lock went with it
    lock.release()
    from spreeze_like.ipc.sweep import sweep_shm

    sweep_shm()  # the SIGKILLed supervisor's segments (the next run's start would remove them too)


def test_finding05_one_process_cannot_lock_a_folder_twice(tmp_path):
    first = RunFolderLock.acquire(tmp_path)
    with pytest.raises(RunFolderError, match=f"in use by pid {os.getpid()}"):
        RunFolderLock.acquire(tmp_path)
    first.release()
    RunFolderLock.acquire(tmp_path).release()


# --- finding 15: run-folder files not robust ---------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["serial", "parallel"])
def test_finding15_a_run_folder_deleted_mid_run_stops_the_run_in_one_line(tmp_path, mode):
    logdir, log = tmp_path / "runs", tmp_path / "run.log"
    args = SERIAL if mode == "serial" else [*TINY_ARGS, "--checkpoint-every", "0"]
    proc = start_cli(*args, "--total-steps", "100000", "--logdir", str(logdir), log=log)
    try:
        run_dir = only_run_dir(logdir)
        if mode == "serial":
            wait_for_checkpoint(run_dir, proc, log)
        else:
            wait_status(run_dir, lambda s: s["state"] == "running" and s["env_steps"] > 0, timeout=120, proc=proc,
                        log=log)
        delete(run_dir)
        t0 = time.monotonic()
        proc.wait(timeout=60)
        stopped_in = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert proc.returncode == 2, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    assert len(error_lines(text)) == 1 and "was deleted or moved" in error_lines(text)[0], text[-3000:]
    assert stopped_in < 30, stopped_in
    assert list(logdir.iterdir()) == []  # nothing re-created the folder


def test_finding15_checkpoint_writers_do_not_recreate_a_deleted_run_folder(tmp_path):
    from spreeze_like.checkpoint import save_checkpoint
    from spreeze_like.procs.parts import write_part

    gone = tmp_path / "run"
    for write in (lambda: save_checkpoint(gone, {"roles": {}}, 100), lambda: write_part(gone, 1, "actor-learner", {})):
        with pytest.raises(CheckpointError, match="was deleted or moved") as info:
            write()
        assert "\n" not in str(info.value)
    assert not gone.exists()


def test_finding15_read_part_errors_are_one_line(tmp_path):
    with pytest.raises(CheckpointError, match="critic-learner's part of checkpoint 3") as missing:
        read_part(tmp_path, 3, "critic-learner")
    torn = tmp_path / "checkpoints" / "parts" / "4" / "actor-learner.pt"
    torn.parent.mkdir(parents=True)
    torn.write_bytes(b"PK\x03\x04 not a whole zip")
    with pytest.raises(CheckpointError, match="actor-learner's part of checkpoint 4") as corrupt:
        read_part(tmp_path, 4, "actor-learner")
    assert "\n" not in str(missing.value) + str(corrupt.value)


def test_finding15_evals_lines_that_are_not_records_are_skipped(tmp_path):
    good = [{"env_step": 1000, "mean_return": -900.5, "wall_s": 3.0}, {"env_step": 2000, "mean_return": -400.0}]
    lines = [json.dumps(good[0]), "3", "[1, 2]", '"text"', "null", json.dumps({"env_step": "x", "mean_return": 1}),
             json.dumps({"mean_return": 1.0}), '{"env_step": 15', json.dumps(good[1])]
    (tmp_path / EVALS_FILE).write_text("\n".join(lines) + "\n")
    assert read_results(tmp_path) == good
    assert eval_history(tmp_path) == [(1000, -900.5, 3.0), (2000, -400.0, 0.0)]
    trim_eval_history(tmp_path, 1500)  # a resume's trim reads them the same way
    assert read_results(tmp_path) == good[:1]


def test_finding15_a_reader_never_sees_a_half_rewritten_evals_file(tmp_path):
    """The resume's rewrite of evals.jsonl races a reader in another process: it must see old or new, whole."""
    records = [{"env_step": s, "mean_return": -float(s), "returns": [1.0] * 10} for s in range(1000, 11000, 1000)]
    (tmp_path / EVALS_FILE).write_text("".join(json.dumps(r) + "\n" for r in records))
    trim_eval_history(tmp_path, 10**9)  # keeps all: every rewrite below writes the same text
    want = (tmp_path / EVALS_FILE).read_text()
    reader = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\n"
        "path, want = sys.argv[1], open(sys.argv[1]).read()\n"
        "bad = reads = 0\n"
        "end = time.monotonic() + 1.5\n"
        "while time.monotonic() < end:\n"
        "    try:\n"
        "        text = open(path).read()\n"
        "    except FileNotFoundError:\n"
        "        text = ''\n"
        "    reads += 1\n"
        "    bad += text != want\n"
        "print(bad, reads)\n"), str(tmp_path / EVALS_FILE)], stdout=subprocess.PIPE, text=True, env=cli_env())
    rewrites = 0
    while reader.poll() is None:
        trim_eval_history(tmp_path, 10**9)
        rewrites += 1
    bad, reads = map(int, reader.communicate()[0].split())
    assert rewrites > 50 and reads > 1000, (rewrites, reads)
    assert bad == 0, f"{bad} of {reads} reads saw a partial file during {rewrites} rewrites"
    assert (tmp_path / EVALS_FILE).read_text() == want


def test_finding15_evals_rewrite_on_a_full_disk_is_one_line_and_keeps_the_file(tmp_path):
    from fullfs import fill, small_tmpfs

    with small_tmpfs(tmp_path / "fs", 512) as fs:
        run_dir = fs / "run"
        run_dir.mkdir()
        records = [{"env_step": s, "mean_return": -1.0, "returns": [1.0] * 50} for s in (1000, 2000, 3000, 4000)]
        (run_dir / EVALS_FILE).write_text("".join(json.dumps(r) + "\n" for r in records))
        before = (run_dir / EVALS_FILE).read_text()
        fill(fs)
        try:
            trim_eval_history(run_dir, 2000)
        except SpreezeError as exc:  # no room for the new copy: say so, change nothing
            assert "\n" not in str(exc) and "No space left on device" in str(exc)
            assert (run_dir / EVALS_FILE).read_text() == before
        else:  # room enough after all: trimmed whole
            assert [r["env_step"] for r in read_results(run_dir)] == [1000, 2000]
        assert sorted(p.name for p in run_dir.iterdir()) == [EVALS_FILE]  # no temporary file left
