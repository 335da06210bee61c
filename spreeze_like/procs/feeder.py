"""The feeder: drains every sampler ring into replay storage (runs inside the critic-learner process).

Replay storage has exactly one writer process (``ReplayStorage`` enforces it); the feeder is it.
It lives in the critic learner because the critic also owns the other write path into replay,
the TD-error priorities, and because the prioritized sampler gives each new slot the largest
priority *while* it is written (``on_written``), under the sum tree's lock: one process doing both
never races itself. Where in that process it runs is a measured choice (docs/parallel.md):

- ``inline`` (default): the critic's loop calls :meth:`RingFeeder.drain` between updates, in
  batches (when its update budget is spent, or ``lead`` records wait): a drain costs mostly per
  call, so a batch of dozens of records costs about what one does. It shares no lock or GIL with
  anything.
- ``thread``: :class:`FeederThread` drains in a background thread of the same process. Kept for
  the measurement (``SPREEZE_FEEDER=thread``); it only adds GIL handoffs to the critic's loop.

Records are copied straight from the ring's slots into the storage columns (``Ring.peek`` views,
unpacked without a copy by ``TransitionLayout.unpack``), then released to the writer. A crash of
the critic process mid-drain leaves the records in the ring unreleased (nothing is lost from the
ring) and at most one torn storage chunk, which readers skip; but the run ends then anyway, since a
learner died. Owns nothing: the rings and the storage belong to the supervisor.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from spreeze_like.ipc import Ring

MAX_DRAIN_ROWS = 4096  # per drain() call: bounds the pause a burst of data puts between two updates


class RingFeeder:
    """Moves records from the sampler rings into replay through a ``ReplayWriter``.

    Args:
        rings: the sampler rings, attached as ``"reader"``.
        writer: a :class:`~spreeze_like.roles.replay_writer.ReplayWriter` (its ``write`` appends
            rows to the storage, setting new priorities when prioritized).
        stats: the critic learner's stats row (``drained_rows``, ``drain_s``).
    """

    def __init__(self, rings: Sequence[Ring], writer: Any, stats: Any) -> None:
        self.rings, self.writer, self.stats = list(rings), writer, stats
        self.drained = 0
        self.drain_s = 0.0

    def drain(self, max_rows: int = MAX_DRAIN_ROWS) -> int:
        """Copy up to ``max_rows`` available records (round robin over rings) into replay; returns how many."""
        t0 = time.perf_counter()
        moved = 0
        progress = True
        while progress and moved < max_rows:
            progress = False
            for ring in self.rings:
                # peek stops at the buffer's end, so a wrapped batch takes two rounds
                view = ring.peek(max_rows - moved)
                if len(view):
                    self.writer.write(view)
                    ring.release(len(view))
                    moved += len(view)
                    progress = True
        if moved:
            self.drained += moved
            dt = time.perf_counter() - t0
            self.drain_s += dt
            self.stats.add("drained_rows", float(moved))
            self.stats.add("drain_s", dt)
        return moved

    def empty(self) -> bool:
        """True if no ring holds an unread record."""
        return all(ring.available() == 0 for ring in self.rings)

    def backlog(self) -> int:
        """Records waiting in the rings."""
        return sum(ring.available() for ring in self.rings)


class FeederThread:
    """Runs :meth:`RingFeeder.drain` in a daemon thread until :meth:`stop` (the measured alternative).

    ``empty()`` and the storage's ``inserted`` counter are safe to read from the critic's thread:
    the storage publishes its cursor with a release store after the rows are complete.
    """

    def __init__(self, feeder: RingFeeder, idle_sleep_s: float = 2e-4) -> None:
        self.feeder, self.idle_sleep_s = feeder, idle_sleep_s
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="replay-feeder", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                if not self.feeder.drain():
                    time.sleep(self.idle_sleep_s)
        except BaseException as exc:  # noqa: BLE001 - handed to the critic's loop, which re-raises it
            self.error = exc

    def check(self) -> None:
        """Re-raise in the caller's thread an exception the feeder thread died of."""
        if self.error is not None:
            raise self.error

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)
