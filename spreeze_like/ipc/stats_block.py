"""Stats block: per-process counters and heartbeats in one small shared segment (kind ``ctl``).

Every process role (``supervisor``, ``sampler-0`` ..., ``critic``, ``actor``, ``evaluator``) owns one
row: its pid, a heartbeat (``time.monotonic()`` of its last :meth:`RoleStats.beat`, plus a beat
count), a state word, and named counters (float64 or int64). The monitor reads every row to build
TensorBoard scalars; the supervisor reads the heartbeats to find hung processes.

Ownership: the supervisor creates the block with the full schema (:meth:`StatsBlock.create`) and
unlinks it at the end; children attach (:meth:`StatsBlock.attach`, the schema is stored in the
segment) and write only their own row through :meth:`StatsBlock.role`. A crashed supervisor's
block is removed by the next start's sweep.

Consistency: one writer per row, any number of readers, no locks. Every slot is an aligned 8-byte
word, so a reader never sees a torn value (aligned 64-bit loads and stores are single-copy atomic
on x86-64 and AArch64); values of different slots in one snapshot may be from slightly different
moments, which is what monitoring needs. Rows are padded to whole cache lines so that writers of
different rows never contend for one line. ``time.monotonic()`` is CLOCK_MONOTONIC on Linux, one
clock for all processes, so heartbeat ages compare across processes.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np

from spreeze_like.errors import ShmError
from spreeze_like.ipc.segment import CACHE_LINE, Segment, align_up
from spreeze_like.native import _native

CounterType = Literal["f8", "i8"]
MAGIC = 0x3154415453425A53  # b"SZBSTAT1" little-endian
LAYOUT_VERSION = 1
_MAGIC, _LAYOUT, _CREATOR, _N_ROLES, _ROW_WORDS, _SCHEMA_LEN = range(6)
_SCHEMA_OFF = CACHE_LINE
# Fixed words at the start of every row; counters follow.
_PID, _BEATS, _BEAT_T, _STATE = 0, 1, 2, 3
_FIXED_WORDS = 8  # one cache line, the rest reserved


class RoleStats:
    """One role's row: what the process of that role writes (single writer).

    Attributes:
        role: The role's name.
        counters: float64 view of the counter slots (index with :attr:`index`); int64 counters are
            reached through :meth:`add`/:meth:`set`, which use the right type.
    """

    def __init__(self, role: str, row: np.ndarray, types: Mapping[str, CounterType]) -> None:
        self.role = role
        self._i64 = row.view(np.int64)
        self._f64 = row.view(np.float64)
        self.index = {name: _FIXED_WORDS + k for k, name in enumerate(types)}
        self._types = dict(types)

    def claim(self, pid: int | None = None) -> None:
        """Record this process as the row's writer and beat once (call at process start)."""
        self._i64[_PID] = os.getpid() if pid is None else pid
        self.beat()

    def beat(self) -> None:
        """Heartbeat: now, by the system-wide monotonic clock."""
        self._f64[_BEAT_T] = time.monotonic()
        self._i64[_BEATS] += 1

    def set_state(self, state: int) -> None:
        """Set the row's state word (meaning chosen by the supervisor, e.g. 0 starting, 1 running, 2 done)."""
        self._i64[_STATE] = state

    def set(self, name: str, value: float) -> None:
        """Overwrite counter ``name``."""
        arr = self._i64 if self._types[name] == "i8" else self._f64
        arr[self.index[name]] = value

    def add(self, name: str, delta: float = 1) -> None:
        """Add ``delta`` to counter ``name`` (single writer, so no atomic read-modify-write is needed)."""
        arr = self._i64 if self._types[name] == "i8" else self._f64
        arr[self.index[name]] += delta

    def get(self, name: str) -> float | int:
        """Current value of counter ``name``."""
        if self._types[name] == "i8":
            return int(self._i64[self.index[name]])
        return float(self._f64[self.index[name]])


class StatsBlock:
    """All roles' rows. Build with :meth:`create` (supervisor) or :meth:`attach`.

    Attributes:
        name: Segment name.
        schema: ``{role: {counter: "f8" | "i8"}}`` in row order.
    """

    def __init__(self, seg: Segment) -> None:
        self._seg = seg
        self.name = seg.name
        head = seg.ndarray(np.uint64, 8, 0)
        if _native.load_u64(seg.mmap, 0) != MAGIC or int(head[_LAYOUT]) != LAYOUT_VERSION:
            raise ShmError(
                f"shared memory segment {seg.name} is not a stats block of layout {LAYOUT_VERSION}: "
                "it belongs to another version of spreeze_like; stop that run or sweep stale segments"
            )
        n_roles, row_words, schema_len = int(head[_N_ROLES]), int(head[_ROW_WORDS]), int(head[_SCHEMA_LEN])
        raw = bytes(seg.buf[_SCHEMA_OFF : _SCHEMA_OFF + schema_len])
        self.schema: dict[str, dict[str, CounterType]] = json.loads(raw.decode())
        rows_off = _rows_offset(schema_len)
        self._rows = seg.ndarray(np.uint64, (n_roles, row_words), rows_off)
        self.roles = list(self.schema)
        self._role_index = {r: k for k, r in enumerate(self.roles)}

    @classmethod
    def create(cls, name: str, schema: Mapping[str, Sequence[str] | Mapping[str, CounterType]]) -> StatsBlock:
        """Create the block (supervisor).

        Args:
            name: Segment name (kind ``ctl``).
            schema: For each role, its counter names (all float64) or ``{counter: "f8" | "i8"}``.

        Raises:
            ShmError: Name clash or full /dev/shm.
        """
        norm: dict[str, dict[str, CounterType]] = {}
        for role, counters in schema.items():
            if isinstance(counters, Mapping):
                norm[role] = {c: t for c, t in counters.items()}
            else:
                norm[role] = {c: "f8" for c in counters}
            for c, t in norm[role].items():
                if t not in ("f8", "i8"):
                    raise ValueError(f"counter {role}/{c} has type {t!r}; use 'f8' or 'i8'")
        blob = json.dumps(norm).encode()
        row_words = align_up(_FIXED_WORDS + max((len(c) for c in norm.values()), default=0), CACHE_LINE // 8)
        nbytes = _rows_offset(len(blob)) + len(norm) * row_words * 8
        seg = Segment.create(name, nbytes)
        try:
            head = seg.ndarray(np.uint64, 8, 0)
            head[[_LAYOUT, _CREATOR, _N_ROLES, _ROW_WORDS, _SCHEMA_LEN]] = [
                LAYOUT_VERSION,
                os.getpid(),
                len(norm),
                row_words,
                len(blob),
            ]
            seg.buf[_SCHEMA_OFF : _SCHEMA_OFF + len(blob)] = blob
            del head
            _native.store_u64(seg.mmap, _MAGIC * 8, MAGIC)  # last, with release
            return cls(seg)
        except BaseException:
            seg.close()
            seg.unlink()
            raise

    @classmethod
    def attach(cls, name: str) -> StatsBlock:
        """Attach an existing block; the schema comes from the segment."""
        return cls(Segment.attach(name, min_size=_SCHEMA_OFF))

    def close(self) -> None:
        """Drop this process's mapping (never unlinks)."""
        self._rows = None  # type: ignore[assignment]
        self._seg.close()

    def unlink(self) -> None:
        """Remove the segment's name (creator only)."""
        self._seg.unlink()

    def role(self, role: str) -> RoleStats:
        """The writable row of ``role`` (only the process of that role may write it)."""
        if role not in self._role_index:
            raise KeyError(f"stats block {self.name} has no role {role!r}; roles: {', '.join(self.roles)}")
        return RoleStats(role, self._rows[self._role_index[role]], self.schema[role])

    # ----------------------------------------------------------------------------- readers
    def pid(self, role: str) -> int:
        """Pid that claimed ``role`` (0 if none yet)."""
        return int(self._rows[self._role_index[role]].view(np.int64)[_PID])

    def heartbeat_age(self, role: str, now: float | None = None) -> float:
        """Seconds since ``role`` last beat (infinity if it never did)."""
        row = self._rows[self._role_index[role]]
        if row.view(np.int64)[_BEATS] == 0:
            return float("inf")
        return (time.monotonic() if now is None else now) - float(row.view(np.float64)[_BEAT_T])

    def stale_roles(self, max_age_s: float, roles: Sequence[str] | None = None) -> list[str]:
        """Roles (of ``roles``, default all claimed ones) whose last heartbeat is older than ``max_age_s``."""
        now = time.monotonic()
        check = roles if roles is not None else [r for r in self.roles if self.pid(r)]
        return [r for r in check if self.heartbeat_age(r, now) > max_age_s]

    def snapshot(self) -> dict[str, dict[str, float | int]]:
        """Every role's counters plus ``pid``, ``beats``, ``state`` and ``heartbeat_age_s``: the monitor's read."""
        now = time.monotonic()
        rows = self._rows.copy()  # one pass over the memory, then decode at leisure
        out: dict[str, dict[str, float | int]] = {}
        for k, (role, types) in enumerate(self.schema.items()):
            i64, f64 = rows[k].view(np.int64), rows[k].view(np.float64)
            vals: dict[str, float | int] = {
                "pid": int(i64[_PID]),
                "beats": int(i64[_BEATS]),
                "state": int(i64[_STATE]),
                "heartbeat_age_s": now - float(f64[_BEAT_T]) if i64[_BEATS] else float("inf"),
            }
            for j, (c, t) in enumerate(types.items()):
                w = _FIXED_WORDS + j
                vals[c] = int(i64[w]) if t == "i8" else float(f64[w])
            out[role] = vals
        return out


def _rows_offset(schema_len: int) -> int:
    return align_up(_SCHEMA_OFF + schema_len, CACHE_LINE)
