"""Shared test fixtures.

The hook ``pytest_runtest_protocol`` hides the GPUs (``CUDA_VISIBLE_DEVICES=""``) from every
test not marked ``gpu`` and from the processes it starts: those are the CPU tests, and on a desktop
with GPUs they test the same code path as in CI (``auto`` devices resolve to the CPU), while the
tests marked ``gpu`` test the GPU's path there. (A process that has initialised CUDA already keeps
its GPUs: ``pytest_configure`` initialises the driver in every test process before any test runs.)

The autouse fixture ``no_leftovers`` makes every test fail that leaves behind a shared-memory
segment or semaphore of ours (``/dev/shm/spz.*``, ``/dev/shm/sem.spz.*``) or a child process.
Segment names carry the creator pid (``spz.<run>.<pid>.<kind>.<idx>``), so a segment counts as
ours when it appeared during the test and its creator is this pytest process or is dead; a
segment of a live unrelated process (another test session on the same machine) is not ours.

Under pytest-xdist (``-n 2``) each worker names its segments with a prefix of its own
(``SPREEZE_LIKE_SHM_PREFIX=spzgw0<8 characters of the session's id>``, set here before any test and
inherited by every process a test starts), and a run's start-up sweep, tools/shm_doctor.py and this
check see only names of their own prefix: a worker never sweeps the segments another worker's test
killed a run to inspect, and never counts them as its own leak. Each worker holds one test at a
time, so the rule above stays exact.

It also fails a test that leaves this thread flushing subnormal floats to zero: the learners flush them
(``spreeze_like/cpu_math.py``), and code that runs in a caller's process (the serial trainer, the update
probe) must give the thread back as it found it; hypothesis, for one, refuses to run without subnormals.

``pytest_configure`` also gives this process Python's SIGINT handler when it started with SIGINT ignored (a
pytest run in the background by a shell), so that the CLIs the tests start receive the tests' Ctrl-C.
"""

from __future__ import annotations

import compileall
import os
import re
import signal
import time
from pathlib import Path

import psutil
import pytest

import spreeze_like
from spreeze_like.cpu_math import flushing_now
from spreeze_like.ipc.naming import DEFAULT_PREFIX, PREFIX_ENV, shm_prefix

SHM_DIR = "/dev/shm"
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")  # gw0, gw1, ... under pytest-xdist; empty in a serial run
if _WORKER:
    # the worker and its session (two pytest sessions at once each have a gw0: seen on 2026-11-30, one's start
    # swept the segments the other's test had killed a run to inspect); at most 16 characters after spz
    _SESSION = re.sub(r"[^a-z0-9]", "", os.environ.get("PYTEST_XDIST_TESTRUNUID", "").lower())[:8]
    os.environ[PREFIX_ENV] = (DEFAULT_PREFIX + _WORKER + _SESSION)[:19]
PREFIXES = (f"{shm_prefix()}.", f"sem.{shm_prefix()}.")


def _our_names() -> set[str]:
    try:
        return {n for n in os.listdir(SHM_DIR) if n.startswith(PREFIXES)}
    except FileNotFoundError:  # pragma: no cover - non-Linux
        return set()


def _creator_pid(name: str) -> int | None:
    parts = name.removeprefix("sem.").split(".")
    # spz.<run-id>.<pid>.<kind>.<index>
    if len(parts) >= 3 and parts[2].isdigit():
        return int(parts[2])
    return None


def leftover_segments(before: set[str]) -> list[str]:
    """Segments of ours that appeared since ``before`` and whose creator is us or dead."""
    me = os.getpid()
    out = []
    for name in sorted(_our_names() - before):
        pid = _creator_pid(name)
        if pid is None or pid == me or not psutil.pid_exists(pid):
            out.append(name)
    return out


def _is_mp_resource_tracker(p: psutil.Process) -> bool:
    # multiprocessing's `spawn` starts one resource-tracker helper per parent process and keeps it
    # for the parent's lifetime (it exits on EOF of its pipe); it is Python's, not ours.
    try:
        return "multiprocessing.resource_tracker" in " ".join(p.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def live_children(grace_s: float = 5.0) -> list[psutil.Process]:
    """Children of this process still alive after a grace period (zombies are reaped first)."""
    deadline = time.monotonic() + grace_s
    while True:
        kids = [
            p for p in psutil.Process().children(recursive=True) if _alive(p) and not _is_mp_resource_tracker(p)
        ]
        if not kids or time.monotonic() > deadline:
            return kids
        time.sleep(0.05)


def _alive(p: psutil.Process) -> bool:
    try:
        if p.status() == psutil.STATUS_ZOMBIE:
            os.waitpid(p.pid, os.WNOHANG)  # reap our own zombie; it is not a leak
            return False
        return True
    except (psutil.NoSuchProcess, ChildProcessError):
        return False


def pytest_configure(config):
    # CUDA reads CUDA_VISIBLE_DEVICES once, when this process first initialises the driver: that happens
    # here, before any test, so a CPU test that hides the GPUs cannot hide them from the GPU tests after it
    # (torch's is_available() initialises the driver; a CPU-only build answers without doing anything)
    import torch

    torch.cuda.is_available()
    # A pytest started in the background by a non-interactive shell (`pytest &`, nohup) inherits SIGINT ignored,
    # and so does every CLI a test starts: Python installs no KeyboardInterrupt handler in a process that starts
    # with SIGINT ignored, so a test's Ctrl-C was lost wherever the run had no handler of its own yet (seen on
    # 2026-11-28: the serial trainer's start and a resume's replay load ran on to the end). A terminal delivers
    # Ctrl-C, so the tests do: a Python handler here is SIG_DFL in every process exec'd from this one.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if not hasattr(config, "workerinput"):  # once per session: the serial process, or xdist's controller
        _compile_sources()


def _compile_sources() -> None:
    """Write the .pyc files of our sources before any test starts a process.

    Where PYTHONDONTWRITEBYTECODE is set (it is on this project's development machine, and CI runs on one like it), no
    process writes the .pyc of what it imports, and pip compiles only what it installs, not an editable
    install's sources: every role process of the hundreds of runs the tests start compiled the package's
    modules again. Measured on 2026-11-30 (2-vCPU Xeon; tests/parallel/test_odd_envs.py, test_startup.py
    and test_faults.py, serially, twice each): 64-67 CPU-seconds (the tests and their processes) with the
    .pyc written, 72-79 without; the whole suite serially, 1,052 against 1,155 (one run each). compileall
    writes them whatever the setting, and skips the files whose .pyc is up to date.
    """
    root = Path(__file__).resolve().parent.parent
    for folder in (Path(spreeze_like.__file__).parent, root / "tests", root / "tools"):
        if folder.is_dir():
            compileall.compile_dir(folder, quiet=2)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups into the node ids
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist's ``--dist loadgroup``, keep each module's tests on one worker, in their order (its
    module fixtures are made once, as in a serial run), and every test that starts a real Ray cluster on one
    worker: two clusters at once would only compete for the same two cores.

    This runs where the tests are collected: in each xdist worker, whose ``dist`` option xdist sets to "no" (it
    keeps ``loadgroup`` True for ``--dist loadgroup``), and it must run before xdist's hook, which reads the groups
    (without ``tryfirst`` it ran after it: checked). Until 2026-12-03 this hook looked at ``dist`` alone and so
    never added a group: every test was a unit of its own, a module's fixtures were made on both workers, and two
    Ray clusters ran at once."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            group = "ray-cluster" if item.path.parent.name == "ray_nodes" else item.nodeid.split("::")[0]
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Hide the GPUs from a test not marked ``gpu``, from its setup to its teardown: the fixtures of a wider
    scope that its setup creates see what it sees (a probe cache written by a module fixture is keyed by the
    visible GPUs, so a module fixture and its tests must agree)."""
    hide = item.get_closest_marker("gpu") is None
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    if hide:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    yield
    if hide:
        if before is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = before


@pytest.fixture(autouse=True)
def no_leftovers():
    """Fail the test if it leaves a segment, semaphore or process of ours behind."""
    before = _our_names()
    yield
    kids = live_children()
    for p in kids:  # do not let one test's orphan poison the next
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    leaked = leftover_segments(before)
    for name in leaked:
        try:
            os.unlink(os.path.join(SHM_DIR, name))
        except FileNotFoundError:
            pass
    problems = []
    if kids:
        problems.append("processes left alive: " + ", ".join(f"{p.pid}" for p in kids))
    if leaked:
        problems.append("shared memory left behind: " + ", ".join(leaked))
    if flushing_now():
        torch_flush_off()
        problems.append("this thread was left flushing subnormal floats to zero (use cpu_math.flushed_subnormals)")
    if problems:
        pytest.fail("; ".join(problems), pytrace=False)


def torch_flush_off() -> None:
    """Turn this thread's flushing off again, so that one test's leak does not fail the next."""
    import torch

    torch.set_flush_denormal(False)
