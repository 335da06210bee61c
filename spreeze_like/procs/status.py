"""The run folder's ``status.json`` and ``startup.json`` (written by the supervisor), and the evaluation history.

``status.json`` tells users and tools what a parallel run is doing without attaching to shared
memory: the supervisor's pid and state (``starting``, ``running``, ``finishing``, ``stopping``,
``exiting``, then ``finished``, ``interrupted`` or ``failed``), the global env step, the newest
checkpoint, a failure message, and per role its pid, process state (``alive``, ``restarting``,
``exited``), restarts, exit description, the state word of its stats row (``starting``, ``running``,
``waiting``, ``done``) and its heartbeat age; ``live``: each sampler row's env steps, episodes and rows in
flight, and the Ray bridge's CPU seconds, rows written and calls. The last write of a run adds every role's final
counters (``counters``), which ``tools/bench_learner_rate.py`` reads. A run with remote samplers adds
``remote_samplers``: what the Ray bridge last wrote to ``remote_samplers.json`` (per remote sampler
its node, pid, state, restarts, steps/s and policy lag; None until the first write). It is rewritten atomically
(tmp file and rename), at most once a second; a failed write (a full disk) is one warning line
and the next write tries again, since the file is for people and tools, not for the run.

``evals.jsonl`` is written by the evaluator (see :mod:`spreeze_like.procs.evaluator_proc`); the
helpers here read it back for the supervisor.

``startup.json`` (:func:`write_startup`): the start-up timestamps of the supervisor and of each role
(docs/startup.md), written once by the supervisor at the end of a run; a failed write is ignored,
and a run that crashes leaves none.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from spreeze_like.procs.children import RoleProcess, describe_exit
from spreeze_like.procs.control import STARTUP_SLOTS, STATE_NAMES
from spreeze_like.procs.evaluator_proc import EVALS_FILE, read_results
from spreeze_like.rundir import RunFolderError, write_json_atomic
from spreeze_like.write_guard import WriteGuard

STATUS_FILE = "status.json"
STARTUP_FILE = "startup.json"  # start-up timestamps of the run's processes (docs/startup.md)


LIVE_SLOTS = ("env_steps", "episodes", "in_flight", "cpu_s", "rows_written", "calls")


def write_status(run_dir: Path, run_id: str, state: str, env_steps: int, total_steps: int, last_checkpoint: Any,
                 failure: str | None, children: dict[str, RoleProcess], snap: dict[str, dict[str, float]],
                 final: bool = False, guard: WriteGuard | None = None, extra: dict[str, Any] | None = None) -> None:
    """Write ``<run_dir>/status.json`` (see the module docstring); ``final`` adds the counters, ``extra``
    adds its keys (``remote_samplers``: the content of ``remote_samplers.json``, None before the bridge wrote it).

    A failed write (a full disk) is ``guard``'s one warning line (silent without one), never an exception.
    """
    roles = {}
    for role, child in children.items():
        row = snap.get(role, {})
        roles[role] = {
            "pid": child.pid, "process": child.state(), "restarts": child.restarts,
            "exit": describe_exit(child.last_exit) if child.last_exit is not None else None,
            "state": STATE_NAMES.get(int(row.get("state", 0)), "?") if row else None,
            "heartbeat_age_s": round(row["heartbeat_age_s"], 3) if row else None,
        }
    status: dict[str, Any] = {
        "run_id": run_id, "supervisor_pid": os.getpid(), "state": state, "env_steps": env_steps,
        "total_steps": total_steps, "last_checkpoint": str(last_checkpoint) if last_checkpoint else None,
        "failure": failure, "roles": roles, "updated_at": time.time(), **(extra or {}),
    }
    # every write: each sampler row's progress and the bridge's work, for people and tools watching
    # a run (tools/bench_remote.py takes its steady-window rates from these)
    status["live"] = {r: {k: row[k] for k in LIVE_SLOTS if k in row} for r, row in snap.items()
                      if r.startswith("sampler-") or r == "ray-bridge"}
    if final and snap:
        status["counters"] = {r: {k: v for k, v in row.items() if k != "heartbeat_age_s"} for r, row in snap.items()}
    try:
        write_json_atomic(run_dir / STATUS_FILE, status)
    except OSError as exc:  # for people and tools only: a full disk must not stop training
        if guard is not None:
            guard.failed(exc)
    else:
        if guard is not None:
            guard.succeeded()


def eval_history(run_dir: Path) -> list[tuple[int, float, float]]:
    """(env step, mean return, wall seconds into its session) of every evaluation of the run."""
    return [(int(r["env_step"]), float(r["mean_return"]), float(r.get("wall_s", 0.0))) for r in read_results(run_dir)]


def trim_eval_history(run_dir: Path, up_to_step: int) -> None:
    """On resume: keep only the evaluations up to the checkpoint's step (later ones are not in its curve).

    The file is replaced whole or not at all (tmp file, fsync, rename; review finding 15): rewritten
    in place, a reader in another process saw it empty or partial in 4 of 10 reads during rewrites,
    and a run killed between the truncation and the write lost the history (docs/reliability.md).
    A failed rewrite (no room for the copy) is a one-line RunFolderError before the run starts, with
    the file unchanged: a disk that full refuses the run's checkpoints too.
    """
    path = run_dir / EVALS_FILE
    if not path.is_file():
        return
    kept = [r for r in read_results(run_dir) if r["env_step"] <= up_to_step]
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    try:
        with open(tmp, "w") as f:
            f.write("".join(json.dumps(r) + "\n" for r in kept))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise RunFolderError(f"cannot rewrite {path} for the resume: {exc.strerror or exc} (the file is unchanged); "
                             "free space there, then --resume again") from None


def write_startup(run_dir: Path, supervisor: dict[str, float], roles: Iterable[str],
                  snap: dict[str, dict[str, float]]) -> None:
    """``startup.json``: the supervisor's and each role's start-up timestamps (monotonic s; 0 = not reached).

    Read by tools/bench_startup.py; one small write at the end of the run, never on its critical path.
    A failed write is ignored: the file is a measurement, not a result.
    """
    stamps = {role: {k: snap[role][k] for k in (*STARTUP_SLOTS, "t_data", "flushing_threads")
                     if k in snap[role]}
              for role in roles if role in snap}
    with contextlib.suppress(OSError):
        (run_dir / STARTUP_FILE).write_text(json.dumps({"supervisor": supervisor, "roles": stamps}, indent=1))
