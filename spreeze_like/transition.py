"""Transition rows, in one place for everyone: the layout and the finite check.

A row is ``obs | action | reward | next_obs | terminated | truncated``, float32 throughout. The
layout class itself is the ring's record format and lives with the ring
(:class:`spreeze_like.ipc.transition.TransitionLayout`); it is re-exported here so that samplers,
the replay writer and tests all use that one definition. ``terminated`` and ``truncated`` are
0.0/1.0; only ``terminated`` stops the bootstrap, ``truncated`` is kept for diagnostics.
"""

from __future__ import annotations

import numpy as np

from spreeze_like.ipc.transition import TransitionLayout

__all__ = ["TransitionLayout", "finite_rows"]


def finite_rows(rows: np.ndarray) -> np.ndarray:
    """``[n]`` bool: rows whose every value is finite (samplers drop and count the others)."""
    return np.isfinite(rows).all(axis=1)
