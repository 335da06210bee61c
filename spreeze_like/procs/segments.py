"""Every shared-memory segment of one parallel run: names, sizes, creation, attachment, removal.

========== ===================================== ====================== =============================
kind       what                                  writer                 readers
========== ===================================== ====================== =============================
``ring``   one SPSC transition ring per sampler  that sampler (a remote   the critic learner's feeder
           row, local or remote                  one's: ``ray-bridge``)
``replay`` replay storage (columnar, FIFO)       critic learner feeder  critic and actor learners
``prio``   native sum tree (``--prioritized``)   critic learner         critic learner
``w-actor`` actor weight board (seqlock)         actor learner          samplers, evaluator, critic
``w-critic`` critic weight board (seqlock)       critic learner         actor learner
``ctl``    stats block: counters, heartbeats,    each role its own row  monitor, supervisor, all
           and the supervisor's control row                             (control row)
========== ===================================== ====================== =============================

Names are ``/spz.<run-id>.<supervisor-pid>.<kind>.<index>`` (:func:`spreeze_like.ipc.segment_name`).

Ownership: the supervisor alone creates (:meth:`RunSegments.create`) and removes
(:meth:`OwnedSegments.unlink_all`, called in its ``finally``; ``spreeze_like.ipc.segment`` also
registers an ``atexit`` unlink of everything its process created). Children only attach
(:class:`Attached`) and close. If the supervisor is SIGKILLed, nothing unlinks; the next start's
``sweep_dead_segments()`` removes the segments because their creator's lifetime lock (an flock the
kernel drops on death, in any PID namespace) can be taken. A child's crash
leaves every segment usable: rings and boards are crash-consistent (see docs/ipc.md), the replay
storage marks a half-written chunk torn, the sum tree's robust lock repairs itself.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spreeze_like.ipc import Ring, Segment, StatsBlock, WeightBoard, segment_name, unlink_run
from spreeze_like.transition import TransitionLayout


@dataclass(frozen=True)
class RunSegments:
    """Names and shapes of a run's segments (picklable; children get it in their ChildArgs)."""

    run_id: str
    rings: tuple[str, ...]
    replay: str
    prio: str | None
    actor_board: str
    critic_board: str
    stats: str
    capacity: int
    obs_dim: int
    act_dim: int
    ring_capacity: int
    actor_params: int
    critic_params: int
    remote_rows: int = 0  # the last ``remote_rows`` rings are remote samplers' (written by the ray-bridge)
    remote_ring_capacity: int = 0  # their records (sized for the bridge's collect batches); 0: ``ring_capacity``

    @property
    def layout(self) -> TransitionLayout:
        return TransitionLayout(self.obs_dim, self.act_dim)

    def capacity_of(self, index: int) -> int:
        """Records of ring ``index``: remote rows' rings may be larger than the local samplers' ones."""
        remote = index >= len(self.rings) - self.remote_rows and self.remote_ring_capacity > 0
        return self.remote_ring_capacity if remote else self.ring_capacity

    def names(self) -> list[str]:
        """Every segment name, in creation order (what ``shm.json`` lists)."""
        extra = [self.prio] if self.prio else []
        return [self.stats, *self.rings, self.replay, *extra, self.actor_board, self.critic_board]

    @classmethod
    def plan(cls, run_id: str, samplers: int, prioritized: bool, capacity: int, obs_dim: int, act_dim: int,
             ring_capacity: int, actor_params: int, critic_params: int, creator_pid: int | None = None,
             remote_rows: int = 0, remote_ring_capacity: int = 0) -> RunSegments:
        """The names and shapes (nothing created yet).

        ``samplers`` counts every sampler row (``TrainConfig.sampler_rows``), of which the last
        ``remote_rows`` are remote with rings of ``remote_ring_capacity`` records.
        """
        def name(kind: str, index: int = 0) -> str:
            return segment_name(run_id, kind, index, creator_pid)

        return cls(run_id, tuple(name("ring", i) for i in range(samplers)), name("replay"),
                   name("prio") if prioritized else None, name("w-actor"), name("w-critic"), name("ctl"),
                   capacity, obs_dim, act_dim, ring_capacity, actor_params, critic_params, remote_rows,
                   remote_ring_capacity)

    def storage_over(self, buffer: Any) -> Any:
        """The replay storage this plan laid out, over its segment's memory (attached, never created)."""
        from spreeze_like.replay import ReplayStorage

        return ReplayStorage(buffer, self.capacity, self.obs_dim, self.act_dim, create=False)

    def tree_over(self, buffer: Any, seed: int | None = None) -> Any:
        """The sum tree this plan laid out (``--prioritized``), over its segment's memory (attached, never created)."""
        from spreeze_like.replay import SumTree

        return SumTree(buffer, self.capacity, create=False, seed=seed)

    def create(self, schema: dict[str, list[str]], tree_seed: int) -> OwnedSegments:
        """Create every segment (supervisor). On any failure, what was created is unlinked again.

        Raises:
            ShmError: a full /dev/shm or a name clash, with the one-line message of ``ipc``.
        """
        from spreeze_like.replay import ReplayStorage, SumTree

        owned = OwnedSegments(self)
        try:
            owned.stats = StatsBlock.create(self.stats, schema)
            width = self.layout.width
            owned.rings = [Ring.create(n, self.capacity_of(i), width) for i, n in enumerate(self.rings)]
            owned.replay = Segment.create(self.replay, ReplayStorage.nbytes(self.capacity, self.obs_dim, self.act_dim))
            ReplayStorage(owned.replay.mmap, self.capacity, self.obs_dim, self.act_dim, create=True)
            if self.prio:
                owned.prio = Segment.create(self.prio, SumTree.nbytes(self.capacity))
                SumTree(owned.prio.mmap, self.capacity, create=True, seed=tree_seed)
            owned.actor_board = WeightBoard.create(self.actor_board, self.actor_params)
            owned.critic_board = WeightBoard.create(self.critic_board, self.critic_params)
        except BaseException:
            owned.unlink_all()
            raise
        return owned


class OwnedSegments:
    """The supervisor's handles: it reads the stats block and rings, and unlinks everything at the end."""

    def __init__(self, plan: RunSegments) -> None:
        self.plan = plan
        self.stats: StatsBlock | None = None
        self.rings: list[Ring] = []
        self.replay: Segment | None = None
        self.prio: Segment | None = None
        self.actor_board: WeightBoard | None = None
        self.critic_board: WeightBoard | None = None

    def write_manifest(self, path: Path) -> None:
        """``shm.json``: the segment names, so a user or ``tools/`` can find and remove them by hand."""
        path.write_text(json.dumps({"run_id": self.plan.run_id, "segments": self.plan.names()}, indent=2) + "\n")

    def storage(self) -> Any:
        """A view of the replay storage this process created: the resume's loader and the end's saver of
        ``--save-replay`` (:mod:`spreeze_like.replay.persist`); drop it before :meth:`unlink_all`."""
        return self.plan.storage_over(self.replay.mmap)

    def tree(self) -> Any:
        """A view of the sum tree this process created (prioritized replay; else None): the resume's loader puts
        the saved priorities in it, the end's saver reads them (``--save-replay``); drop it before
        :meth:`unlink_all`."""
        return None if self.prio is None else self.plan.tree_over(self.prio.mmap)

    def unlink_all(self) -> list[str]:
        """Unlink every segment of the run created by this process (idempotent); returns names removed."""
        for handle in (self.stats, *self.rings, self.replay, self.prio, self.actor_board, self.critic_board):
            if handle is not None:
                with contextlib.suppress(Exception):  # a view still alive must not stop the unlink below
                    handle.close()
        # By name, not by handle: also catches a segment whose handle was lost half-way through create.
        return unlink_run(self.plan.run_id)


class Attached:
    """A child's attachments, opened on demand and closed together (children never unlink).

    Example::

        with Attached(args.segments) as shm:
            stats = shm.stats()                  # StatsBlock
            ring = shm.ring(i, "writer")         # Ring
    """

    def __init__(self, plan: RunSegments) -> None:
        self.plan = plan
        self._open: list[Any] = []
        self._stats: StatsBlock | None = None

    def __enter__(self) -> Attached:  # noqa: PYI034 - a final class in practice
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _keep(self, handle: Any) -> Any:
        self._open.append(handle)
        return handle

    def stats(self) -> StatsBlock:
        if self._stats is None:
            self._stats = self._keep(StatsBlock.attach(self.plan.stats))
        return self._stats

    def ring(self, index: int, role: Any) -> Ring:
        return self._keep(Ring.attach(self.plan.rings[index], role))

    def board(self, which: str, role: Any) -> WeightBoard:
        name = self.plan.actor_board if which == "actor" else self.plan.critic_board
        return self._keep(WeightBoard.attach(name, role))

    def storage(self) -> Any:
        """The replay storage over the shared segment (never ``create``: the supervisor did)."""
        return self.plan.storage_over(self._keep(Segment.attach(self.plan.replay)).mmap)

    def tree(self, seed: int) -> Any:
        if self.plan.prio is None:
            raise ValueError("this run has no sum tree (not --prioritized)")
        return self.plan.tree_over(self._keep(Segment.attach(self.plan.prio)).mmap, seed)

    def close(self) -> None:
        for handle in reversed(self._open):
            with contextlib.suppress(Exception):  # closing at exit: the OS unmaps anyway
                handle.close()
        self._open.clear()


def vector_sizes(spec: Any) -> tuple[int, int]:
    """(actor, critic) weight-vector lengths of an algorithm, counted from its layer widths.

    No torch: the supervisor sizes the weight boards before it spawns the roles, and importing torch
    for that put ~0.8 s before every spawn (docs/startup.md). The layouts are those of
    ``algos/networks.py`` and ``algos/crossq_critic.py``: a ``Linear(i, o)`` holds ``i*o + o`` values; the SAC/CrossQ actor has two
    heads (mean, log_std), the TD3/DDPG actor one; each of the ``n_q`` Q networks is an MLP on
    obs+act with one output; CrossQ's Batch Renormalization layers (on the input and after each hidden
    layer) hold a weight, a bias and the two running statistics per feature; the actor half's
    ``n_extra_critic_state`` scalars (SAC and CrossQ: log_alpha) end the critic vector.
    tests/parallel/test_startup.py checks these against the networks built on torch's meta device.
    """

    def linear(inputs: int, outputs: int) -> int:
        return inputs * outputs + outputs

    hidden = list(spec.hidden_sizes)
    gaussian = spec.algo in ("sac", "crossq")
    actor_widths = [spec.obs_dim, *hidden]
    actor = sum(linear(i, o) for i, o in itertools.pairwise(actor_widths))
    actor += (2 if gaussian else 1) * linear(actor_widths[-1], spec.act_dim)
    q_widths = [spec.obs_dim + spec.act_dim, *spec.critic_widths]
    q = sum(linear(i, o) for i, o in itertools.pairwise(q_widths)) + linear(q_widths[-1], 1)
    if spec.algo == "crossq":
        q += 4 * sum(q_widths)
    return actor, spec.n_q * q + (1 if gaussian else 0)
