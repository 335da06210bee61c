"""Evaluator process (``evaluator``): deterministic episodes with the newest actor weights.

Runs the existing :class:`~spreeze_like.roles.evaluator.Evaluator` with the actor board (reader)
as its weights source and its stats row as its stats writer:

- every ``eval_every`` global env steps (the samplers' counters in the stats block, plus the
  step the session started from), while the phase is ``RUN``;
- on the supervisor's request (``eval_request``/``eval_step`` in the control row: the final
  evaluation), after which it sets ``eval_ack``.

Each result is appended as one JSON line to ``<run_dir>/evals.jsonl`` (env step, mean return, wall
seconds since the session started, every episode's return and length, the actor version evaluated); the supervisor reads it for the run's
result and the checkpoint's evaluation history, the monitor gets ``eval/episodic_return`` from the
stats row. It runs at normal priority: an evaluation is a short burst (one batched forward per
step for all episodes), and a niced evaluator starves on a loaded machine, where the final
evaluation is on the run's critical path. Creates nothing shared; the supervisor restarts it
with back-off if it dies.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from spreeze_like.console import say
from spreeze_like.procs.control import EXIT, RUN, RUNNING, ChildArgs, Control, mark_ready, set_state
from spreeze_like.procs.segments import Attached
from spreeze_like.roles import build
from spreeze_like.roles.evaluator import EvalResult
from spreeze_like.write_guard import WriteGuard

EVALS_FILE = "evals.jsonl"


def _print(line: str) -> None:
    say(line)  # a child's stdout is a pipe or a file more often than a terminal (console.py: a closed one)


def append_result(run_dir: str | Path, result: EvalResult, wall_s: float, guard: WriteGuard | None = None) -> None:
    """One line per evaluation; a line is written whole with one ``write`` call (appends are atomic).

    ``wall_s``: seconds since the session started when the evaluation ended (the serial mode's rule).
    With a ``guard``, a failed write (a full disk) is its one warning line instead of an exception
    (review finding 7): the evaluation still reached the stats row, so TensorBoard has it.
    """
    line = json.dumps({"env_step": result.env_step, "mean_return": result.mean_return, "wall_s": wall_s,
                       "returns": list(result.returns), "lengths": list(result.lengths), "version": result.version,
                       **({"successes": list(result.successes)} if result.successes is not None else {})})
    path = Path(run_dir) / EVALS_FILE
    try:
        if guard is not None and guard.failing and _ends_torn(path):
            line = "\n" + line  # the failed write may have left part of a line: the next one starts afresh
        with open(path, "a") as f:
            f.write(line + "\n")
    except OSError as exc:
        if guard is None:
            raise
        guard.failed(exc)
    else:
        if guard is not None:
            guard.succeeded()


def _ends_torn(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            if f.seek(0, 2) == 0:
                return False
            f.seek(-1, 2)
            return f.read(1) != b"\n"
    except FileNotFoundError:
        return False


def read_results(run_dir: str | Path) -> list[dict]:
    """Every evaluation recorded in the run folder.

    A line that is not one is skipped, never raised (review finding 15): torn by a crash or a full
    disk, or valid JSON that is not an object with a numeric ``env_step`` and ``mean_return`` (a hand
    edit, another tool's line); the supervisor reads these fields of every record.
    """
    path = Path(run_dir) / EVALS_FILE
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if is_result(record):
            out.append(record)
    return out


def is_result(record: object) -> bool:
    """True for an evaluation record: a JSON object whose ``env_step`` and ``mean_return`` are numbers."""
    return isinstance(record, dict) and all(
        isinstance(record.get(key), (int, float)) and not isinstance(record.get(key), bool)
        for key in ("env_step", "mean_return")
    )


def run(args: ChildArgs) -> None:
    """Process body (called by :func:`spreeze_like.procs.control.child_main`)."""
    cfg = args.config
    spec = args.spec
    t0 = float(args.extra["t0"])  # the session's start (CLOCK_MONOTONIC is one clock for all processes)
    with Attached(args.segments) as shm:
        block = shm.stats()
        row = block.role(args.role)
        row.claim()
        control = Control(block)
        sampler_rows = [block.role(r) for r in block.roles if r.startswith("sampler-")]
        evaluator = build.evaluator(cfg, spec, shm.board("actor", "reader"), row, args.run_dir, args.start_step, _print)
        evaluator.beat = row.beat  # during an evaluation too: it may last longer than --evaluator-hang-s
        ack = int(row.get("eval_ack"))  # a restarted evaluator does not repeat an answered request

        def global_step() -> int:
            return args.start_step + int(sum(r.get("env_steps") for r in sampler_rows))

        guard = WriteGuard(f"{EVALS_FILE} ({args.run_dir})", "evaluations still reach TensorBoard, but the run's "
                           "result and the checkpoints' evaluation history miss the ones not written", _print, retry_s=0)
        every = cfg.eval_every
        # from the session's start, not from now: an evaluator started late (or restarted) evaluates
        # at once for the multiples it missed, then keeps the schedule
        next_eval = (args.start_step // every + 1) * every if every > 0 else math.inf
        mark_ready(row)
        set_state(row, RUNNING)
        try:
            while True:
                row.beat()
                phase = control.phase()
                if phase == EXIT:
                    return
                request, step = control.eval_request()
                if request > ack:  # the final evaluation (the supervisor asks for no other)
                    append_result(args.run_dir, evaluator.evaluate(step, final=True), time.monotonic() - t0, guard)
                    ack = request
                    row.set("eval_ack", float(request))
                    continue
                step = global_step()
                # at the last step the supervisor asks for the final evaluation itself (one, not two)
                if phase == RUN and next_eval <= step < cfg.total_steps:
                    append_result(args.run_dir, evaluator.evaluate(step), time.monotonic() - t0, guard)
                    next_eval = (step // every + 1) * every
                    continue
                time.sleep(0.05)
        finally:
            evaluator.close()
