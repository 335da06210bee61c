"""The ray bridge's scheduling: collect calls, pacing, weights and faults of the remote samplers.

The ``ray-bridge`` process (:mod:`spreeze_like.procs.ray_bridge_proc`) is the run's only Ray driver. It
owns the remote samplers ``sampler-<first> .. sampler-<first+count-1>``: their actors, their stats rows
(it claims them; the one writer) and their rings (the one writer). :class:`Bridge` is that logic,
written against a small :class:`~spreeze_like.remote.slots.Cluster` interface (create an actor, call it,
put, wait, get, kill; its per-sampler bookkeeping is :class:`~spreeze_like.remote.slots.RemoteSlot`), so
the tests drive it with a fake cluster whose calls they resolve, fail or stall, and
:mod:`~spreeze_like.remote.ray_handles` implements it over Ray.

One :meth:`Bridge.poll` does, for every remote sampler:

- **Calls**: at most :data:`MAX_CALLS` ``collect(n)`` calls in flight per actor; replies are taken in
  completion order, their rows written with ``Ring.try_write`` (room was reserved at issue, so it never
  waits), then the worker's counter deltas applied to the row (``env_steps`` last-but-one, ``in_flight``
  last: a reader summing ``emitted + in_flight`` can only over-count for an instant, never under-count).
- **Pacing, exact as for local samplers** (:mod:`spreeze_like.procs.pacing` rule 2): a call for ``n``
  env steps is issued only while ``allowance - emitted - in_flight`` (over every sampler row) is at
  least ``n``, shrinking ``n`` to what is free; it waits for ``max(n_envs, lead / 2)`` free steps
  before asking for fewer than it wants (the local samplers' hysteresis). So the samplers, local and
  remote, never run past the critic's allowance by more than ``n_envs - 1`` steps each, as local
  samplers already may. Also ``n <= quota-<i> - env_steps - in_flight`` (the row's session quota) and
  ``n <=`` the ring's free room minus the rows already in flight to it.
- **Weights**: at most every :data:`WEIGHT_CHECK_S` it compares the actor board's version with the
  newest it holds; a newer vector is read and put into the object store once (one ``put`` per
  version, the reference reused), and passed only on the next call of each actor that has an older one.
  ``policy_lag`` is observed per batch, weighted by its env steps like a local sampler's per step: the
  steps ran somewhere between the call's issue and its reply, so their lag is estimated as the mean of
  the board's versions at those two moments minus the version they were collected with. (A local
  sampler observes its lag right after loading the newest weights, so its figure is near 0; a remote
  batch of ``n`` steps at UTD ``u`` is about ``n x u / 2`` versions behind by the nature of batching.)
- **Faults**: an exception from a call (the actor or its node died) is a death; a call older than
  ``--sampler-hang-s`` is a hang: the actor is killed and it counts as a death. A death is restarted
  with the local samplers' back-off (1, 2, 4 ... 30 s) while at most ``--max-restarts`` deaths fall
  within :data:`~spreeze_like.procs.children.RESTART_WINDOW_S`; each restart is counted in the row's
  ``remote_restarts``. An actor not placed (its first ping unanswered) within
  ``--remote-place-timeout-s``, or one more death than the budget allows, is abandoned: the actor is
  killed, its in-flight calls forgotten (their rows, should they arrive, are never written), then the
  row's ``abandoned`` is set to 1 and its state to DONE; the supervisor moves its unused quota to the
  local samplers. A :class:`~spreeze_like.errors.SpreezeError` raised inside an actor (an env that
  cannot be made on that node, an observation of the wrong shape) ends the bridge with that line,
  as it would end a local sampler: the run stops with exit status 2.

It also writes ``<run_dir>/remote_samplers.json`` (:mod:`~spreeze_like.remote.info_file`: atomically,
on every change and at most once a second otherwise). It creates nothing shared: rings, rows and the
board belong to the supervisor.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from spreeze_like.algos.numpy_policy import NumpyPolicy
from spreeze_like.errors import SpreezeError, first_line
from spreeze_like.procs.children import RESTART_WINDOW_S, STABLE_S
from spreeze_like.procs.control import CONTROL, DONE, RUN, RUNNING, STARTING, WAITING, set_state
from spreeze_like.procs.pacing import backoff_s, claimed, resume_gap
from spreeze_like.remote.info_file import RemoteInfoFile
from spreeze_like.remote.sizing import batch_rows, round_to_envs
from spreeze_like.remote.slots import Call, Cluster, RemoteSlot
from spreeze_like.roles.ports import observe
from spreeze_like.roles.sampler import random_steps_per_sampler

MAX_CALLS = 2  # collect calls in flight per actor: one stepping, one queued behind it (hides the call cost)
WEIGHT_CHECK_S = 0.05
PLACEMENT_CHECK_S = 1.0  # how often an unplaced actor's state is asked of the cluster
BRIDGE_ROLE = "ray-bridge"

class Bridge:
    """See the module docstring.

    Args:
        cluster: the :class:`Cluster` (Ray's, or a test's fake).
        cfg: the run's :class:`~spreeze_like.config.TrainConfig`.
        spec: the algorithm spec the actors build their policy from.
        block: the stats block (``control``, ``critic-learner``, every ``sampler-<i>``, ``ray-bridge`` rows).
        rings: ``{i: Ring}`` attached as writer, for each remote row ``i``.
        board: the actor weight board (reader): ``version()`` and ``read(out)``.
        first, count: the remote rows are ``sampler-<first> .. sampler-<first+count-1>``.
        restored: ``{i: (env_steps, episodes)}`` of a resumed checkpoint.
        generation: the session's generation (seeds).
        lead: the pacing lead (the hysteresis is half of it).
        run_dir: where ``remote_samplers.json`` goes (None: not written).
        clock: ``time.monotonic`` (tests pass their own).
        say: where the bridge's one-line reports go.
    """

    def __init__(self, cluster: Cluster, cfg: Any, spec: Any, block: Any, rings: dict[int, Any], board: Any,
                 first: int, count: int, restored: dict[int, tuple[int, int]] | None = None, generation: int = 0,
                 lead: int = 1, run_dir: str | Path | None = None, clock: Callable[[], float] = time.monotonic,
                 say: Callable[[str], None] = print) -> None:
        self.cluster, self.cfg, self.spec, self.board = cluster, cfg, spec, board
        self.clock, self.say = clock, say
        self.restored = restored or {}
        self.generation = generation
        self.n_envs = int(getattr(cfg, "remote_envs_per_sampler", 0) or 0) or cfg.envs_per_sampler
        self.random_steps = random_steps_per_sampler(cfg.learning_starts, cfg.samplers + cfg.remote_samplers)
        self.gap = max(self.n_envs, resume_gap(lead))
        self.control = block.role(CONTROL)
        self.critic = block.role("critic-learner")
        self.me = block.role(BRIDGE_ROLE)
        self.sampler_rows = [block.role(r) for r in block.roles if r.startswith("sampler-")]
        self.slots = [RemoteSlot(i, block.role(f"sampler-{i}"), rings[i], self.n_envs) for i in range(first, first + count)]
        self.vector = np.zeros(NumpyPolicy(spec).size, dtype=np.float32)  # the actor vector, as the board holds it
        self.newest = 0  # version of self.weights_ref
        self.weights_ref: Any = None
        self.puts = 0
        self._weights_checked = -float("inf")
        self.info_file = RemoteInfoFile(run_dir)
        self._future_slot: dict[Any, RemoteSlot] = {}

    # --- start and end ---------------------------------------------------------------------------------------
    def start(self, bridge_restarted: bool = False) -> None:
        """Claim the rows and create every actor that is not abandoned.

        ``bridge_restarted``: this bridge replaces a dead one, whose actors died with it (they were its
        own): each counts as a restart of its remote sampler (new seeds, ``remote_restarts`` + 1).
        """
        now = self.clock()
        self.me.claim()
        for slot in self.slots:
            slot.row.claim()
            slot.forget_calls()  # a dead bridge's calls died with its actors
            if slot.abandoned:
                set_state(slot.row, DONE)
                continue
            if bridge_restarted:
                slot.restarts += 1
                slot.row.add("remote_restarts")
            self._create(slot, now)
        self._write_info(now, force=True)

    def abandon_all(self, why: str) -> None:
        """Claim the rows and give every remote sampler up (a restarted bridge that cannot reach the cluster)."""
        self.me.claim()
        for slot in self.slots:
            slot.row.claim()
            if not slot.abandoned:
                self._abandon(slot, why)
        self._write_info(self.clock(), force=True)

    def close(self) -> None:
        """Kill every actor (the end of the run, or of the bridge)."""
        for slot in self.slots:
            if slot.actor is not None:
                self.cluster.kill(slot.actor)
                slot.actor = None
            slot.forget_calls()

    # --- one loop iteration ----------------------------------------------------------------------------------
    def poll(self, timeout: float = 0.05) -> None:
        """One iteration: supervise, wait up to ``timeout`` for replies and take them, issue calls."""
        now = self.clock()
        self.me.beat()
        phase = int(self.control.get("phase"))
        for slot in self.slots:
            slot.row.beat()
        if phase == RUN:
            for slot in self.slots:
                self._supervise(slot, now)
        else:  # samplers stop: rows still in flight are dropped, as a local sampler drops its next step
            for slot in self.slots:
                self._forget(slot, calls_only=True)
        futures = list(self._future_slot)
        ready = self.cluster.wait(futures, timeout) if futures else []
        if not futures and timeout > 0:
            time.sleep(timeout)
        for future in ready:
            slot = self._future_slot.pop(future, None)
            if slot is not None:
                self._take(slot, future)
        now = self.clock()
        if phase == RUN:  # after the replies: a finished call is replaced at once
            self._issue(now)
        for slot in self.slots:
            self._flush_pending(slot)
            self._set_row_state(slot, phase)
        self.me.set("cpu_s", time.process_time())
        set_state(self.me, DONE if all(s.done(phase, self._quota(s)) for s in self.slots) else RUNNING)
        self._write_info(now)

    @property
    def all_done(self) -> bool:
        phase = int(self.control.get("phase"))
        return all(s.done(phase, self._quota(s)) for s in self.slots)

    # --- actors ----------------------------------------------------------------------------------------------
    def _create(self, slot: RemoteSlot, now: float) -> None:
        restored_steps, restored_episodes = self.restored.get(slot.index, (0, 0))
        init = {"env_id": self.cfg.env, "env_kwargs": self.cfg.env_kwargs, "spec": self.spec, "index": slot.index,
                "n_envs": self.n_envs, "random_steps": self.random_steps,
                "generation": self.generation + 1000 * slot.restarts,
                "env_steps": int(restored_steps + slot.row.get("env_steps")),
                "episodes": int(restored_episodes + slot.row.get("episodes"))}
        slot.actor = self.cluster.create(slot.index, init)
        slot.ping = self.cluster.ping(slot.actor)
        self._future_slot[slot.ping] = slot
        slot.placed = slot.waiting_for_node = False
        slot.created_at = slot.checked_placement_at = now
        slot.restart_at = None
        slot.actor_version = 0
        slot.node_ip, slot.node_id, slot.pid = "", "", None
        set_state(slot.row, STARTING)

    def _supervise(self, slot: RemoteSlot, now: float) -> None:
        if slot.abandoned or (slot.actor is None and slot.done(RUN, self._quota(slot))):
            return  # an actor that died after its quota was done is not needed again
        if slot.actor is None:
            if slot.restart_at is not None and now >= slot.restart_at:
                slot.restarts += 1
                slot.row.add("remote_restarts")
                self._create(slot, now)
                self.say(f"[spreeze] remote {slot.role} restarted (restart {slot.restarts})")
            return
        if not slot.placed:
            waited = now - slot.created_at
            if waited > self.cfg.remote_place_timeout_s:
                self._abandon(slot, f"not placed on a Ray node within {self.cfg.remote_place_timeout_s:.0f} s "
                                    "(no node with a free CPU?)")
            elif now - slot.checked_placement_at >= PLACEMENT_CHECK_S:
                slot.checked_placement_at = now
                slot.waiting_for_node = bool(self.cluster.pending_placement(slot.actor))
            return
        oldest = min((c.issued_at for c in slot.calls.values()), default=now)
        if now - oldest > self.cfg.sampler_hang_s:
            self._death(slot, now, f"a collect call has not returned for {now - oldest:.0f} s; killed it")

    def _death(self, slot: RemoteSlot, now: float, why: str) -> None:
        """The actor died or hung: kill it, forget its calls, restart later or abandon it."""
        self.cluster.kill(slot.actor)
        slot.actor = None
        self._forget(slot)
        slot.deaths.append(now)
        recent = sum(1 for t in slot.deaths if now - t < RESTART_WINDOW_S)
        if recent > self.cfg.max_restarts:
            self._abandon(slot, f"{why}; {recent} deaths within {RESTART_WINDOW_S:.0f} s, more than "
                                f"--max-restarts {self.cfg.max_restarts}")
            return
        slot.failures = slot.failures + 1 if now - slot.created_at < STABLE_S else 1
        delay = backoff_s(slot.failures)
        slot.restart_at = now + delay
        where = f" on {slot.node_ip}" if slot.node_ip else ""
        self.say(f"[spreeze] remote {slot.role}{where} died ({why}); restarting it in {delay:.0f} s")

    def _abandon(self, slot: RemoteSlot, why: str) -> None:
        """Give a remote sampler up for good: kill, forget its calls, then ``abandoned`` = 1 and DONE."""
        if slot.actor is not None:
            self.cluster.kill(slot.actor)
            slot.actor = None
        self._forget(slot)
        slot.pending = None
        slot.restart_at = None
        slot.abandoned = True
        slot.row.set("abandoned", 1.0)
        set_state(slot.row, DONE)
        self.say(f"[spreeze] remote {slot.role} abandoned: {why}; the run goes on without it")

    def _forget(self, slot: RemoteSlot, calls_only: bool = False) -> None:
        """Drop the slot's futures: whatever they bring later is never looked at (late rows are not written)."""
        for future in [f for f, s in self._future_slot.items() if s is slot]:
            if calls_only and future not in slot.calls:
                continue
            del self._future_slot[future]
        if not calls_only:
            slot.ping = None
        slot.forget_calls()

    # --- weights ---------------------------------------------------------------------------------------------
    def _refresh_weights(self, now: float) -> None:
        """Put the board's newest vector if it is newer than the last put, at most every WEIGHT_CHECK_S.

        Called when a call is about to go out, not every loop: with the learners publishing a version
        per update, it put a 294 KB HalfCheetah vector every 50 ms (a put plus the actor's get: 3.2 ms in
        the design note), though actors take a version only with their next call; bench_remote measured
        the bridge at 0.131 cores per 10k transitions/s that way.
        """
        if now - self._weights_checked < WEIGHT_CHECK_S:
            return
        self._weights_checked = now
        if self.board.version() <= self.newest:
            return
        version = self.board.read(self.vector)
        if version > self.newest:
            self.weights_ref = self.cluster.put(self.vector)
            self.puts += 1
            self.newest = version

    # --- calls -----------------------------------------------------------------------------------------------
    def _quota(self, slot: RemoteSlot) -> float:
        return self.control.get(f"quota-{slot.index}")

    def _issue(self, now: float) -> None:
        free = self.critic.get("allowance") - claimed(self.sampler_rows)
        for slot in self.slots:
            if not slot.placed or slot.actor is None or slot.abandoned or slot.pending is not None:
                continue
            if len(slot.calls) >= MAX_CALLS:
                continue
            left = int(self._quota(slot) - slot.row.get("env_steps") - slot.in_flight)
            if left <= 0:
                continue
            want = min(batch_rows(self.cfg, slot.rate), left)
            if free < min(want, self.gap):  # wait for a burst's worth, as a waiting local sampler does
                continue
            n = round_to_envs(int(min(want, free)), slot.n_envs, up=True)
            room = slot.ring.capacity - slot.ring.fill() - slot.in_flight
            if n > room:
                n = round_to_envs(room, slot.n_envs, up=False)
            if n <= 0:
                continue
            self._refresh_weights(now)  # only when a call goes out: a put nobody takes is wasted CPU
            weights, version = None, 0
            if self.newest > slot.actor_version and self.weights_ref is not None:
                weights, version = self.weights_ref, self.newest
                slot.actor_version = self.newest
            future = self.cluster.collect(slot.actor, n, weights, version)
            self._future_slot[future] = slot
            slot.calls[future] = Call(n, now, self.board.version())
            slot.in_flight += n
            slot.row.set("in_flight", float(slot.in_flight))
            self.me.add("calls")
            free -= n

    def _take(self, slot: RemoteSlot, future: Any) -> None:
        try:
            reply = self.cluster.get(future)
        except SpreezeError as exc:
            where = f" on {slot.node_ip}" if slot.node_ip else ""
            raise type(exc)(f"remote {slot.role}{where}: {first_line(exc)}") from None
        except Exception as exc:  # noqa: BLE001 - any other failure of a call is the actor's death
            self._death(slot, self.clock(), first_line(exc, 160, named=True))
            return
        if slot.ping is not None and future == slot.ping:
            slot.ping = None
            slot.placed, slot.waiting_for_node = True, False
            slot.node_ip, slot.node_id, slot.pid = reply.get("node_ip", ""), reply.get("node_id", ""), reply.get("pid")
            set_state(slot.row, RUNNING)
            return
        call = slot.calls.pop(future)
        rows = reply["rows"]
        if len(rows):
            rows = np.ascontiguousarray(rows, dtype=np.float32)
            written = slot.ring.try_write(rows)
            if written < len(rows):
                slot.pending = rows[written:].copy()
            self.me.add("rows_written", float(written))
        for name, delta in reply["add"].items():
            slot.row.add(name, delta)
        for name, value in reply["set"].items():
            slot.row.set(name, value)
        steps, version = int(reply["steps"]), int(reply["version"])
        if version > 0:  # the steps ran between issue and reply: the lag at their midpoint, per step
            slot.lag = max(0.0, (call.board_version + self.board.version()) / 2 - version)
            observe(slot.row, "policy_lag", slot.lag * steps, steps)
        if reply.get("busy_s", 0) > 0:
            rate = steps / reply["busy_s"]
            slot.rate = rate if slot.rate is None else 0.7 * slot.rate + 0.3 * rate
        slot.in_flight -= call.steps
        slot.row.set("in_flight", float(slot.in_flight))

    def _flush_pending(self, slot: RemoteSlot) -> None:
        if slot.pending is None:
            return
        written = slot.ring.try_write(slot.pending)
        self.me.add("rows_written", float(written))
        slot.pending = None if written == len(slot.pending) else slot.pending[written:]

    def _set_row_state(self, slot: RemoteSlot, phase: int) -> None:
        if slot.done(phase, self._quota(slot)):
            set_state(slot.row, DONE)
        elif slot.actor is None or not slot.placed:
            set_state(slot.row, STARTING)
        else:
            set_state(slot.row, RUNNING if slot.calls else WAITING)

    # --- remote_samplers.json --------------------------------------------------------------------------------
    def info(self, now: float) -> dict[str, Any]:
        phase = int(self.control.get("phase"))
        samplers = {}
        for slot in self.slots:
            rate = self.info_file.steps_per_s(slot.role, float(slot.row.get("env_steps")), now)
            samplers[slot.role] = {"node_ip": slot.node_ip, "node_id": slot.node_id, "pid": slot.pid,
                                   "state": slot.state(phase, self._quota(slot)), "restarts": slot.restarts,
                                   "steps_per_s": round(rate, 1), "policy_lag": slot.lag}
        return {"ray_address": self.cluster.address, "samplers": samplers}

    def _write_info(self, now: float, force: bool = False) -> None:
        self.info_file.write(self.info(now), now, force)

