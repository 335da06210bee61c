"""Shared-memory IPC: segments and their names, SPSC transition rings, weight boards, stats blocks.

See docs/ipc.md for the protocols and the ownership rules.
"""

from __future__ import annotations

from spreeze_like.ipc.naming import (
    ShmName,
    list_our_files,
    new_run_id,
    parse_name,
    pid_alive,
    segment_name,
    sweep_dead_segments,
    unlink_run,
)
from spreeze_like.ipc.segment import ArrayLayout, Segment, align_up, shm_free_bytes, unlink_segment

__all__ = [
    "ArrayLayout",
    "Segment",
    "ShmName",
    "align_up",
    "list_our_files",
    "new_run_id",
    "parse_name",
    "pid_alive",
    "segment_name",
    "shm_free_bytes",
    "sweep_dead_segments",
    "unlink_run",
    "unlink_segment",
]
