"""The end of a parallel run: the stop order, the final checkpoint and evaluation, the joins, the result.

Stop order (end of training, Ctrl-C, SIGTERM or a failure): samplers stop (phase ``FINISH``: the
learners then catch up to the UTD budget on the data collected; ``HALT``: they only finish the
update in hand), a final checkpoint is assembled, the final evaluation runs (normal end only),
phase ``EXIT`` lets the monitor flush TensorBoard and every child return, children are joined,
with ``--save-replay`` the records still in the sampler rings are drained into replay and the replay is
saved beside that checkpoint (no process writes to it any more; :func:`drain_leftovers`,
:mod:`spreeze_like.replay.persist`), segments unlinked. A second Ctrl-C or SIGTERM skips to the
joins (children killed), still unlinking; from then on further signals are ignored until the
cleanup is done (exit status 130 after Ctrl-C, 143 after SIGTERM, the final ``status.json`` written).

:func:`shutdown` runs that order once the supervisor's watch loop has returned; :func:`force_stop`
is the supervisor's last line (its ``finally``), whatever happened before. Both act on the
:class:`~spreeze_like.supervisor.Supervisor` itself: they set its ``state`` and ``failure`` (which
``status.json`` shows while the run ends) and keep its loop ticking while they wait
(:func:`wait_for`: deaths, restarts, hangs, the status file).

Owns nothing: the children it stops are the supervisor's (:mod:`.children`; should the supervisor
be SIGKILLed meanwhile, the parent-death signal and :mod:`.descendants` end them), and the segments
are unlinked by the supervisor after :func:`force_stop`. It removes the checkpoint parts left
behind (:func:`~spreeze_like.procs.parts.remove_parts`) and writes ``startup.json``
(:func:`~spreeze_like.procs.status.write_startup`).
"""

from __future__ import annotations

import contextlib
import importlib
import signal
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from spreeze_like.checkpoint import checkpoint_step, interrupted_line
from spreeze_like.errors import RoleFailedError, ShmError, SpreezeError
from spreeze_like.ipc.stats_block import StatsBlock
from spreeze_like.procs.control import EXIT, FINISH, HALT
from spreeze_like.procs.descendants import kill_tagged
from spreeze_like.procs.evaluator_proc import read_results
from spreeze_like.procs.feeder import RingFeeder
from spreeze_like.procs.parts import LEARNERS, remove_parts
from spreeze_like.procs.segments import Attached
from spreeze_like.procs.status import eval_history, write_startup
from spreeze_like.replay import PrioritizedSampler, UniformSampler
from spreeze_like.replay.persist import keep_replay
from spreeze_like.results import TrainResult
from spreeze_like.roles.ports import LocalStatsBlock
from spreeze_like.roles.replay_writer import ReplayWriter

if TYPE_CHECKING:
    from spreeze_like.supervisor import Supervisor

HALT_WAIT_S = 5.0  # Ctrl-C: learners finish the update in hand within this, or the checkpoint is skipped
JOIN_S = 10.0


def wait_for(sup: Supervisor, done: Callable[[], bool], timeout_s: float, stop_on_signal: bool = True) -> bool:
    """Tick until ``done()``; False on timeout, a failure, or (``stop_on_signal``) a Ctrl-C/SIGTERM."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline or sup.failure is not None:
            return False
        if stop_on_signal and sup.signals.received is not None:
            return False
        sup.tick(0.02)
    return True


def learners_done(block: StatsBlock) -> bool:
    return all(block.role(r).get("done") for r in LEARNERS)


def shutdown(sup: Supervisor, t0: float) -> TrainResult:
    """Stop the run in the order of the module docstring; its result, or the exception that ends it."""
    finished = sup.signals.received is None and sup.failure is None
    settled = False
    if finished:  # learners catch up on the data collected, at the UTD ratio
        sup.state = "finishing"
        sup.control.set("phase", float(FINISH))
        # The final checkpoint needs torch here (~0.8 s to import): import it while the learners catch up,
        # not after them (the checkpoint code's own import then waits for this one; docs/startup.md).
        threading.Thread(target=importlib.import_module, args=("torch",), name="import-torch", daemon=True).start()
        settled = wait_for(sup, lambda: learners_done(sup.block), 3600.0)
        sup.startup["t_learned"] = time.monotonic()
        finished = sup.signals.received is None and sup.failure is None
        if finished and not settled:
            sup.failure = "the learners did not finish within an hour of the last env step"
    if not finished:  # learners finish the update in hand only
        sup.state = "stopping"
        sup.control.set("phase", float(HALT))
        if sup.signals.received is not None:
            sup.say("[spreeze] stopping: samplers stopped, learners finish their update, then a checkpoint "
                    "(press Ctrl-C again to force)")
        settled = wait_for(sup, lambda: learners_done(sup.block), HALT_WAIT_S, stop_on_signal=False)
    # Counted, not compared by path: a stop at the env step of the last periodic checkpoint (the samplers paced,
    # waiting for the learners) rewrites that same file, and its replay must still be saved
    before = sup.ckpt.saved
    if settled and sup.failure is None:
        timeout = 60.0 if finished else HALT_WAIT_S
        sup.ckpt.ask()
        wait_for(sup, lambda: sup.finish_checkpoint(sup.block.snapshot(), timeout), timeout + 5.0,
                 stop_on_signal=False)
        sup.startup["t_checkpointed"] = time.monotonic()
    checkpointed = sup.ckpt.saved != before
    final = final_evaluation(sup) if finished and sup.failure is None else None
    sup.startup["t_evaluated"] = time.monotonic()
    if finished:  # a short run on a loaded machine can end before the (deferred) monitor is up
        monitor = sup.children["monitor"]
        wait_for(sup, lambda: not monitor.alive or sup.block.pid("monitor") == monitor.pid, 120.0)
    sup.control.set("phase", float(EXIT))
    sup.state = "exiting"
    deadline = time.monotonic() + JOIN_S
    for child in sup.children.values():
        if child.alive and sup.block.pid(child.role) != child.pid:
            child.kill_now()  # still starting up: it holds nothing to save, and imports can take long
    for child in sup.children.values():
        child.stop(deadline)
    sup.startup["t_joined"] = time.monotonic()
    if sup.config.save_replay and checkpointed and sup.failure is None:  # nothing writes to replay any more
        with sup.signals.deferred():  # a forcing signal lets the replay being written finish first
            drain_leftovers(sup)
            keep_replay(sup.owned.storage(), sup.run_dir, checkpoint_step(sup.last_checkpoint()), sup.config.env,
                        sup.owned.tree(), sup.say)
    snap = sup.block.snapshot()
    steps = sup.global_step(snap)
    write_startup(sup.run_dir, sup.startup, sup.children, snap)
    if sup.failure is not None:
        sup.state = "failed"
        if sup.user_error is not None:
            raise SpreezeError(sup.user_error)
        raise RoleFailedError(sup.failure)
    if not finished:
        sup.state = "interrupted"
        sup.say(interrupted_line(steps, sup.last_checkpoint(), sup.run_dir))
        if sup.signals.received == signal.SIGTERM:
            raise SystemExit(128 + signal.SIGTERM)
        raise KeyboardInterrupt
    sup.state = "finished"
    evals = eval_history(sup.run_dir)
    return TrainResult(
        run_dir=sup.run_dir, env_steps=steps, critic_updates=int(snap["critic-learner"]["total_updates"]),
        actor_updates=int(snap["actor-learner"]["total_updates"]),
        episodes=sum(e for _, e in sup.restored) + int(sum(snap[f"sampler-{i}"]["episodes"]
                                                           for i in range(sup.config.sampler_rows))),
        final_eval_return=float(final["mean_return"]) if final else float("nan"),
        final_eval_returns=tuple(final["returns"]) if final else (), evals=evals,
        wall_s=time.monotonic() - t0, mode="parallel", stop_reason=sup.early.reason,
        final_eval_successes=_successes(final))


def _successes(final: dict[str, Any] | None) -> tuple[bool, ...] | None:
    """The final evaluation's per-episode successes from its evals.jsonl record (absent: the env says none)."""
    listed = final.get("successes") if final else None
    return tuple(bool(s) for s in listed) if isinstance(listed, list) else None


def drain_leftovers(sup: Supervisor) -> int:
    """Every record still in a sampler ring into replay, once every role is joined; returns how many.

    A stop halts the critic learner, which drains the rings, together with the samplers, so the records
    written in between stay in the rings (37 of 5,765 in a Pendulum-v1 run here; at most what the
    rings hold). The samplers counted them, so the stop's checkpoint does, and without this the saved
    replay would lack them for good. Nothing else writes to replay now: this process takes the writer role
    from the joined critic and gives it back; prioritized rows get the largest priority, as the critic's
    feeder gives them. A storage still claimed by a live process (a reused pid) or a ring that fails its
    checks is one line, and the replay is saved as the critic left it."""
    storage, tree = sup.owned.storage(), sup.owned.tree()
    inserter = UniformSampler(storage) if tree is None else PrioritizedSampler(storage, tree)
    writer = ReplayWriter(inserter, sup.plan.layout, sup.block.role("replay"))
    drained = LocalStatsBlock({"drain": ["drained_rows", "drain_s"]}).role("drain")  # the critic's row stays its own
    try:
        # attached as their reader anew: a handle keeps its own read cursor, and the creator's never read
        with Attached(sup.plan) as shm:
            rings = [shm.ring(i, "reader") for i in range(len(sup.owned.rings))]
            return RingFeeder(rings, writer, drained).drain(max_rows=sum(r.capacity for r in rings))
    except (RuntimeError, ShmError) as exc:  # a writer still alive (a reused pid), a ring's corrupt counters: the
        # replay is saved as the critic left it, and the run's checkpoint is written already
        sup.say(f"[spreeze] the records left in the sampler rings are not in the saved replay ({exc})")
        return 0
    finally:
        storage.release_writer()


def final_evaluation(sup: Supervisor) -> dict[str, Any] | None:
    steps = sup.global_step(sup.block.snapshot())
    request = int(sup.control.get("eval_request")) + 1
    sup.control.set("eval_step", float(steps))
    sup.control.set("eval_request", float(request))
    if not wait_for(sup, lambda: sup.block.role("evaluator").get("eval_ack") >= request, 1800.0):
        sup.say("[spreeze] the final evaluation did not finish; see evals.jsonl for the last one")
        return None
    results = [r for r in read_results(sup.run_dir) if r["env_step"] == steps]
    return results[-1] if results else None


def force_stop(sup: Supervisor) -> None:
    """Last line: every child gone, whatever happened above (idempotent)."""
    if sup.owned is not None and sup.owned.stats is not None:
        with contextlib.suppress(Exception):  # the block may be half-created
            sup.control.set("phase", float(EXIT))
    forced = sup.signals.forced is not None or (
        sup.signals.received is not None and sup.state not in ("finished", "interrupted", "failed"))
    deadline = time.monotonic() + (0.0 if forced else 2.0)
    for child in sup.children.values():
        if forced:
            child.kill_now()
        child.stop(deadline)  # also kills what its env started and left running
    kill_tagged(sup.run_id)  # and whatever an earlier process of a role left
    remove_parts(sup.run_dir)
