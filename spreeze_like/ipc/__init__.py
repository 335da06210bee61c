"""Shared-memory IPC: segments and their names, SPSC transition rings, weight boards, stats blocks.

See docs/ipc.md for the protocols and the ownership rules.
"""

from __future__ import annotations

from spreeze_like.ipc.lifetime import child_setup, die_with_parent, set_parent_death_signal
from spreeze_like.ipc.naming import (
    ShmName,
    list_our_files,
    new_run_id,
    parse_name,
    pid_alive,
    segment_name,
)
from spreeze_like.ipc.ring import Ring
from spreeze_like.ipc.segment import ArrayLayout, Segment, align_up, shm_free_bytes, unlink_segment
from spreeze_like.ipc.stats_block import RoleStats, StatsBlock
from spreeze_like.ipc.sweep import sweep_dead_segments, unlink_run
from spreeze_like.ipc.transition import TransitionLayout
from spreeze_like.ipc.weight_board import WeightBoard

__all__ = [
    "ArrayLayout",
    "Ring",
    "RoleStats",
    "Segment",
    "ShmName",
    "StatsBlock",
    "TransitionLayout",
    "WeightBoard",
    "align_up",
    "child_setup",
    "die_with_parent",
    "list_our_files",
    "new_run_id",
    "parse_name",
    "pid_alive",
    "segment_name",
    "set_parent_death_signal",
    "shm_free_bytes",
    "sweep_dead_segments",
    "unlink_run",
    "unlink_segment",
]
