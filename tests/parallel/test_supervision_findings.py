"""Review findings 7, 8, 9 and 18 (docs/reliability.md), each with real processes through the CLI.

- 7: a full disk under the run folder (a real tmpfs filled up mid-run) costs one warning line per
  file, never a traceback, a crash loop or the run;
- 8: a run whose processes are all stopped (kill -STOP of the process group, Ctrl-Z's SIGTSTP, a
  frozen cgroup) for longer than the hang limits resumes without a hang kill; a hung sampler is
  still killed within its (settable) limit;
- 9: the evaluator beats during an evaluation longer than its limit, and a hung evaluator is killed;
- 18: SIGTERMs that keep coming during the shutdown cannot stop the cleanup; an env's own
  subprocesses die with the role that made them, even when it or the supervisor is SIGKILLed.

Each run has a process group of its own (``process_group=0``) so a test can signal the whole group,
as a terminal does. It stays in pytest's session, whose group is another, so the group is not
orphaned and the kernel does not discard SIGTSTP (Ctrl-Z) sent to it.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from fullfs import fill, small_tmpfs

from spreeze_like.checkpoint import load_latest
from spreeze_like.ipc.sweep import sweep_shm
from spreeze_like.procs.children import StopSignals
from spreeze_like.procs.evaluator_proc import read_results
from spreeze_like.procs.hangs import PAUSE_GAP_S

from .helpers import TINY_ARGS, alive, assert_nothing_left, cli_env, only_run_dir, read_status, survivors, wait_status

pytestmark = pytest.mark.multiproc

TESTS_DIR = str(Path(__file__).resolve().parents[1])
SLOW = "trainer.tiny_envs:TinySlow-v0"
SPAWN = "trainer.tiny_envs:TinySpawn-v0"
HUNG = re.compile(r"\[spreeze\] (\S+) \(pid \d+\) has not beaten for")


class Run:
    """One ``python -m spreeze_like.run`` in a process group of its own; output in ``log``."""

    def __init__(self, tmp_path: Path, *args: str, logdir: Path | None = None, env: dict[str, str] | None = None
                 ) -> None:
        self.logdir = logdir or tmp_path / "runs"
        self.log = tmp_path / "run.log"
        full = {**cli_env(), **(env or {}), "PYTHONPATH": os.pathsep.join([TESTS_DIR, os.environ.get("PYTHONPATH", "")])}
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "spreeze_like.run", *TINY_ARGS, "--total-steps", "100000", *args,
                 "--logdir", str(self.logdir)],
                stdout=out, stderr=subprocess.STDOUT, env=full, text=True, process_group=0)
        self.run_dir: Path | None = None

    def text(self) -> str:
        return self.log.read_text()

    def up(self, min_steps: int = 350, timeout: float = 180) -> dict:
        """Wait until every role is alive (the deferred ones too) and ``min_steps`` env steps are done."""
        self.run_dir = only_run_dir(self.logdir)
        return self.status_when(lambda s: s["env_steps"] > min_steps
                                and all(r["process"] == "alive" for r in s["roles"].values()), timeout)

    def status_when(self, predicate, timeout: float = 60) -> dict:
        return wait_status(self.run_dir, predicate, timeout=timeout, proc=self.proc, log=self.log)

    def line_when(self, pattern: str, timeout: float = 60) -> str:
        """The first output line matching ``pattern`` (waits for it; fails if the run ends first)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [line for line in self.text().splitlines() if re.search(pattern, line)]
            if found:
                return found[0]
            assert self.proc.poll() is None, f"the run exited ({self.proc.returncode}):\n{self.text()[-3000:]}"
            time.sleep(0.1)
        raise AssertionError(f"no line matching {pattern!r} within {timeout} s:\n{self.text()[-3000:]}")

    def stop(self, sig: int = signal.SIGINT, timeout: float = 60) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        """Last resort on a failed test: the whole process group, then the run's segments."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        survivors(self.pids(), 10.0)
        sweep_shm()

    def pids(self) -> list[int]:
        status = read_status(self.run_dir) if self.run_dir else None
        return [r["pid"] for r in (status or {}).get("roles", {}).values() if r["pid"]]


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def hang_kills(text: str) -> list[str]:
    return HUNG.findall(text)


# How late past its limit a hang may be reported: the supervisor's loop may go PAUSE_GAP_S without a check
# before it counts as a pause, plus its own busy work in between (assembling the first checkpoint imports
# torch: 3 s on a loaded 2-core machine), plus the rounding of the printed age. CI once saw a 2 s limit
# reported as 4 s while pytest-xdist ran other runs beside this one.
HANG_REPORT_SLACK_S = PAUSE_GAP_S + 4.0


def killed_after(run: Run, role: str, limit: float, timeout: float = 120) -> float:
    """Waits for the line that kills ``role`` as hung; its printed age, checked against ``limit``."""
    line = run.line_when(rf"{role} \(pid \d+\) has not beaten for \d+ s; killing it", timeout=timeout)
    age = float(re.search(r"has not beaten for (\d+) s", line).group(1))
    assert limit <= age <= limit + HANG_REPORT_SLACK_S + 1.0, line  # + 1: the printed age is rounded
    return age


def all_stopped(pids: list[int], timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(psutil.Process(p).status() == psutil.STATUS_STOPPED for p in pids):
            return True
        time.sleep(0.02)
    return False


# --- finding 7: a full disk --------------------------------------------------------------------------------
def test_finding07_disk_full_in_a_serial_run_is_one_warning_and_the_run_goes_on(tmp_path):
    # 16 MiB: the run's own event files (every 0.1 s) must not fill the disk before the test does
    with small_tmpfs(tmp_path / "fs", 16384) as fs:
        run = Run(tmp_path, "--serial", "--tb-interval", "0.1", logdir=fs)
        try:
            run_dir = only_run_dir(fs)
            deadline = time.monotonic() + 120
            while ("train," not in _text(run_dir / "curves.csv") and time.monotonic() < deadline
                   and run.proc.poll() is None):
                time.sleep(0.1)  # the monitor writes (a train row per write once episodes end)
            fill(fs)
            run.line_when(r"warning: cannot write TensorBoard events", timeout=60)
            time.sleep(1.0)  # the run goes on with the disk still full
            assert run.proc.poll() is None, run.text()[-3000:]
            (fs / ".filler").unlink(missing_ok=True)
            code = run.stop(signal.SIGINT)
        finally:
            run.kill()
        text = run.text()
        assert code == 130, text[-3000:]
        assert "Traceback" not in text, text[-3000:]
        warnings = [line for line in text.splitlines() if "warning: cannot write" in line]
        assert len([w for w in warnings if "TensorBoard" in w]) == 1, warnings
        assert len(warnings) == len({w.split(":")[1] for w in warnings}), warnings  # one line per file at most
        assert all("No space left on device" in w for w in warnings), warnings
        payload, _ = load_latest(run_dir)  # the stop's checkpoint, written once space came back
        assert payload["env_steps"] > 0


def test_finding07_disk_full_in_a_parallel_run_warns_once_per_file_and_restarts_nothing(tmp_path):
    with small_tmpfs(tmp_path / "fs", 4096) as fs:
        # no checkpoint while the disk is full: a checkpoint that cannot be written ends the run (its own test);
        # the first evaluation comes after the fill, so evals.jsonl has no page with room left
        run = Run(tmp_path, "--tb-interval", "0.1", "--eval-every", "1500", "--checkpoint-every", "0", logdir=fs)
        try:
            before = run.up()
            fill(fs)
            for what in ("TensorBoard events", "status.json", "evals.jsonl"):
                run.line_when(rf"warning: cannot write {what}", timeout=60)
            time.sleep(1.0)
            (fs / ".filler").unlink(missing_ok=True)
            after = run.status_when(lambda s: s["env_steps"] > before["env_steps"] + 1000)
            code = run.stop(signal.SIGINT)
        finally:
            run.kill()
        text = run.text()
        assert code == 130, text[-3000:]
        assert "Traceback" not in text, text[-3000:]
        warnings = [line for line in text.splitlines() if "warning: cannot write" in line]
        for what in ("TensorBoard events", "status.json", "evals.jsonl"):
            assert len([w for w in warnings if what in w]) == 1, warnings
        assert all("No space left on device" in w for w in warnings), warnings
        assert "status.json: written again" in text
        for role, info in after["roles"].items():
            assert info["restarts"] == 0 and info["pid"] == before["roles"][role]["pid"], (role, info)
        assert read_status(run.run_dir)["state"] == "interrupted"
        assert_nothing_left(run.run_dir)


# --- finding 8: paused, not hung -------------------------------------------------------------------------------
HANG_LIMITS = ["--sampler-hang-s", "3", "--learner-hang-s", "3", "--evaluator-hang-s", "3"]
PAUSE_S = 5.0  # well past every limit above


def _pause_and_resume(run: Run, stop: Callable[[], None], resume: Callable[[], None], signalled: bool = True) -> None:
    """Stop every process of the run for PAUSE_S, resume them, and check the run goes on with no kill.

    ``signalled``: stopped by a signal, so every process must show state T (a frozen cgroup's do not).
    """
    status = run.status_when(lambda s: all(r["process"] == "alive" for r in s["roles"].values()))
    pids = [status["supervisor_pid"], *run.pids()]
    stop()
    try:
        assert not signalled or all_stopped(pids), "the run's processes did not stop"
        time.sleep(PAUSE_S)
    finally:
        resume()
    steps = status["env_steps"]
    run.status_when(lambda s: s["env_steps"] > steps + 600 and s["updated_at"] > time.time() - 1)
    assert not hang_kills(run.text()), run.text()[-3000:]


def _check_nothing_was_restarted(run: Run, pids: dict[str, int]) -> None:
    status = read_status(run.run_dir)
    for role, info in status["roles"].items():
        assert info["restarts"] == 0 and info["pid"] == pids[role], (role, info)
    assert re.search(r"did not run for \d+ s", run.text()), run.text()[-3000:]  # the supervisor saw the pause


def test_finding08_a_stopped_process_group_and_ctrl_z_resume_without_hang_kills(tmp_path):
    run = Run(tmp_path, *HANG_LIMITS)
    try:
        pids = {role: r["pid"] for role, r in run.up()["roles"].items()}
        group = run.proc.pid  # the group of the supervisor and every role

        def sigstop() -> None:
            os.killpg(group, signal.SIGSTOP)

        def sigtstp() -> None:  # what Ctrl-Z sends to the terminal's foreground group
            os.killpg(group, signal.SIGTSTP)

        def sigcont() -> None:  # what kill -CONT and the shell's fg send
            os.killpg(group, signal.SIGCONT)

        _pause_and_resume(run, sigstop, sigcont)
        _pause_and_resume(run, sigtstp, sigcont)
        _check_nothing_was_restarted(run, pids)
        code = run.stop(signal.SIGINT)
    finally:
        run.kill()
    assert code == 130, run.text()[-3000:]
    assert_nothing_left(run.run_dir)


@contextlib.contextmanager
def freezer(pids: list[int]) -> Iterator[tuple[Callable[[], None], Callable[[], None]]]:
    """A cgroup of our own (v2 ``cgroup.freeze`` or the v1 freezer) holding ``pids``: (freeze, thaw).

    Skips where no cgroup can be made or joined (it needs root). The processes stay in it: the caller
    ends them inside the block; at the exit, any still there are thawed and killed, then it goes.
    """
    root = Path("/sys/fs/cgroup")
    v2 = (root / "cgroup.controllers").exists()
    base = root if v2 else root / "freezer"
    if not (base / "cgroup.procs").exists():
        pytest.skip("no cgroup freezer here")
    group = base / f"spz-test-{os.getpid()}"
    try:
        group.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot make a cgroup here ({exc})")

    def freeze() -> None:
        if v2:
            (group / "cgroup.freeze").write_text("1")
            ready = lambda: "frozen 1" in (group / "cgroup.events").read_text()
        else:
            (group / "freezer.state").write_text("FROZEN")
            ready = lambda: (group / "freezer.state").read_text().strip() == "FROZEN"
        deadline = time.monotonic() + 10
        while not ready():
            assert time.monotonic() < deadline, "the cgroup did not freeze"
            time.sleep(0.02)

    def thaw() -> None:
        if v2:
            (group / "cgroup.freeze").write_text("0")
        else:
            (group / "freezer.state").write_text("THAWED")

    try:
        try:
            for pid in pids:
                (group / "cgroup.procs").write_text(str(pid))
        except OSError as exc:
            pytest.skip(f"cannot move processes into a cgroup here ({exc})")
        yield freeze, thaw
    finally:
        with contextlib.suppress(OSError):
            thaw()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            left = [int(p) for p in (group / "cgroup.procs").read_text().split()]
            if not left:
                break
            for pid in left:  # a failed test: the run's processes are still here
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        with contextlib.suppress(OSError):
            group.rmdir()


def test_finding08_a_frozen_cgroup_resumes_without_hang_kills(tmp_path):
    run = Run(tmp_path, *HANG_LIMITS)
    try:
        status = run.up()
        pids = {role: r["pid"] for role, r in status["roles"].items()}
        with freezer([status["supervisor_pid"], *pids.values()]) as (freeze, thaw):
            _pause_and_resume(run, freeze, thaw, signalled=False)
            _check_nothing_was_restarted(run, pids)
            code = run.stop(signal.SIGINT)  # inside: the cgroup is empty once the run has ended
    finally:
        run.kill()
    assert code == 130, run.text()[-3000:]
    assert_nothing_left(run.run_dir)


def test_finding08_a_hung_sampler_is_still_killed_within_its_limit(tmp_path):
    once = tmp_path / "hang-once"
    once.write_text("")
    env = {"SPZ_TEST_HANG_ROLE": "sampler-0", "SPZ_TEST_HANG_AFTER": "500", "SPZ_TEST_HANG_ONCE": str(once)}
    run = Run(tmp_path, "--env", SLOW, *HANG_LIMITS, env=env)
    try:
        run.run_dir = only_run_dir(run.logdir)
        killed_after(run, "sampler-0", limit=3)
        assert not once.exists()
        run.line_when(r"sampler-0 restarted", timeout=30)
        steps = run.status_when(lambda s: s["roles"]["sampler-0"]["restarts"] == 1)["env_steps"]
        run.status_when(lambda s: s["env_steps"] > steps + 300)  # the new sampler steps
        code = run.stop(signal.SIGINT)
    finally:
        run.kill()
    assert code == 130, run.text()[-3000:]
    assert hang_kills(run.text()) == ["sampler-0"], run.text()[-3000:]
    assert_nothing_left(run.run_dir)


# --- finding 9: the evaluator beats during an evaluation ------------------------------------------------------
def test_finding09_a_long_evaluation_beats_and_a_hung_evaluator_is_killed(tmp_path):
    # Each evaluation: 2 episodes x 40 steps x 0.05 s >= 4 s, twice --evaluator-hang-s. The evaluator hangs
    # for good at its 101st step, inside its second evaluation.
    once = tmp_path / "hang-once"
    once.write_text("")
    env = {"SPZ_TEST_SLOW_ROLE": "evaluator", "SPZ_TEST_SLOW_S": "0.05", "SPZ_TEST_HANG_ROLE": "evaluator",
           "SPZ_TEST_HANG_AFTER": "100", "SPZ_TEST_HANG_ONCE": str(once)}
    run = Run(tmp_path, "--env", SLOW, "--eval-every", "500", "--evaluator-hang-s", "2", env=env)
    try:
        run.run_dir = only_run_dir(run.logdir)
        killed_after(run, "evaluator", limit=2)
        evals = read_results(run.run_dir)  # what the evaluator finished before it hung
        run.status_when(lambda s: s["roles"]["evaluator"]["restarts"] == 1)
        code = run.stop(signal.SIGINT)
    finally:
        run.kill()
    assert code == 130, run.text()[-3000:]
    assert not once.exists()
    assert evals and evals[0]["lengths"] == [40, 40], evals  # one whole evaluation of >= 4 s, not killed
    assert hang_kills(run.text()) == ["evaluator"], run.text()[-3000:]
    assert_nothing_left(run.run_dir)


# --- finding 18: signals during the cleanup; an env's subprocesses -----------------------------------------------
def test_finding18_sigterms_during_the_shutdown_cannot_stop_the_cleanup(tmp_path):
    run = Run(tmp_path)
    try:
        run.up()
        t0 = time.time()
        run.proc.send_signal(signal.SIGTERM)  # the orderly stop ...
        run.line_when(r"stopping: samplers stopped", timeout=30)
        deadline = time.monotonic() + 30
        while run.proc.poll() is None and time.monotonic() < deadline:
            run.proc.send_signal(signal.SIGTERM)  # ... forced by the second, then more all through the cleanup
            time.sleep(0.002)
        code = run.proc.wait(timeout=5)
    finally:
        run.kill()
    # 143 = 128 + SIGTERM: the exit status of the forced stop; a SIGTERM that lands after the supervisor
    # restored the default handler ends the process by the signal itself, which a shell also shows as 143
    assert code in (143, -signal.SIGTERM), run.text()[-3000:]
    assert "Traceback" not in run.text(), run.text()[-3000:]
    status = read_status(run.run_dir)
    assert status["state"] == "interrupted" and "counters" in status and status["updated_at"] > t0, status
    assert all(r["process"] == "exited" for r in status["roles"].values()), status
    assert_nothing_left(run.run_dir)


def _servers(spawn_dir: Path, role: str | None = None) -> list[int]:
    """Pids of the ``sleep`` servers TinySpawn envs started (in ``role``'s processes, or all)."""
    return [int(p.name.split(".")[2]) for p in spawn_dir.iterdir() if role is None or p.name.split(".")[0] == role]


def test_finding18_an_envs_subprocesses_die_with_a_sigkilled_sampler_and_supervisor(tmp_path):
    spawn_dir = tmp_path / "servers"
    spawn_dir.mkdir()
    run = Run(tmp_path, "--env", SPAWN, env={"SPZ_TEST_SPAWN_DIR": str(spawn_dir)})
    try:
        status = run.up()
        first = _servers(spawn_dir, "sampler-0")
        assert len(first) == 1 and alive(first[0])
        deadline = time.monotonic() + 60  # the evaluator may still be making its envs: one per evaluation episode
        while len([p for p in _servers(spawn_dir, "evaluator") if alive(p)]) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        os.kill(status["roles"]["sampler-0"]["pid"], signal.SIGKILL)
        assert not survivors(first, 5.0), "the SIGKILLed sampler's env server outlived it by 5 s"
        status = run.status_when(lambda s: s["roles"]["sampler-0"]["restarts"] == 1
                                 and s["roles"]["sampler-0"]["process"] == "alive", timeout=60)
        deadline = time.monotonic() + 30
        while len(_servers(spawn_dir, "sampler-0")) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        running = [p for p in _servers(spawn_dir) if alive(p)]
        assert len(running) == 3, running  # the new sampler's, the evaluator's two
        children = run.pids()
        os.kill(run.proc.pid, signal.SIGKILL)
        run.proc.wait(timeout=10)
        assert not survivors(children, 5.0), "roles outlived the SIGKILLed supervisor by 5 s"
        assert not survivors(running, 5.0), "env servers outlived the SIGKILLed supervisor by 5 s"
        assert_nothing_left(run.run_dir, grace_s=15.0)  # the reaper also unlinked the run's segments
    finally:
        for pid in _servers(spawn_dir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        run.kill()  # also sweeps the segments the SIGKILLed supervisor could not unlink


def test_finding18_after_the_forcing_signal_further_ones_are_ignored_until_restore():
    """In process, deterministic: the window the CLI test above can only hit by chance."""
    signals = StopSignals()
    signals.install()
    try:
        os.kill(os.getpid(), signal.SIGTERM)  # the orderly stop: recorded
        assert signals.received == signal.SIGTERM and signals.forced is None
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)  # forces
        assert signals.forced == signal.SIGTERM
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGTERM):  # during the cleanup: nothing happens
            os.kill(os.getpid(), sig)
        time.sleep(0.05)
    finally:
        signals.restore()
    assert signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN


def test_finding07_disk_full_at_a_parallel_checkpoint_is_one_error_and_the_last_checkpoint_loads(tmp_path):
    with small_tmpfs(tmp_path / "fs", 4096) as fs:
        # 5,000 env steps between checkpoints: status.json, which says the first one is done, is rewritten once a
        # second, and the disk must be full before the next one's parts are written (at 1,000 a fast run had
        # written them already, and the supervisor's own write failed instead: half the runs, once the CPU
        # step took 0.5-0.7x its time)
        run = Run(tmp_path, "--checkpoint-every", "5000", logdir=fs)
        try:
            run.run_dir = only_run_dir(fs)
            status = run.status_when(lambda s: s["last_checkpoint"] is not None, timeout=180)
            fill(fs)
            code = run.proc.wait(timeout=60)  # the next checkpoint's parts cannot be written
        finally:
            run.kill()
        text = run.text()
        assert code == 2, text[-3000:]
        assert "Traceback" not in text, text[-3000:]
        errors = [line for line in text.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and re.fullmatch(r"error: \S+-learner failed \(its message is above\)", errors[0]), errors
        # the learner's line, on stderr since its error file could not be written either
        assert re.search(r"\[spreeze\] \S+-learner: cannot write checkpoint .*: No space left on device", text), text
        payload, path = load_latest(run.run_dir)
        assert str(path) == status["last_checkpoint"] and payload["env_steps"] >= 5000
        assert_nothing_left(run.run_dir)
