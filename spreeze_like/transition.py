"""The one place that knows how a transition is laid out as a float32 row.

A row is ``obs | action | reward | next_obs | terminated | truncated`` (widths ``obs_dim``,
``act_dim``, 1, ``obs_dim``, 1, 1), float32 throughout so that a ring record, a numpy batch and a
replay write all share one dtype. Samplers pack rows; whoever drains them (the in-process replay
writer in serial mode, the ring reader in the parallel mode) unpacks them as column views without
copying. ``terminated`` and ``truncated`` are stored as 0.0/1.0; only ``terminated`` stops the
bootstrap, ``truncated`` is kept for diagnostics.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FIELDS = ("obs", "action", "reward", "next_obs", "terminated", "truncated")


@dataclass(frozen=True)
class TransitionLayout:
    """Column offsets of a transition row for one env's sizes."""

    obs_dim: int
    act_dim: int

    @property
    def width(self) -> int:
        """Floats per row."""
        return 2 * self.obs_dim + self.act_dim + 3

    def slices(self) -> dict[str, slice]:
        o, a = self.obs_dim, self.act_dim
        return {
            "obs": slice(0, o),
            "action": slice(o, o + a),
            "reward": slice(o + a, o + a + 1),
            "next_obs": slice(o + a + 1, 2 * o + a + 1),
            "terminated": slice(2 * o + a + 1, 2 * o + a + 2),
            "truncated": slice(2 * o + a + 2, 2 * o + a + 3),
        }

    def pack(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """Rows ``[n, width]`` from per-field arrays with a leading batch dimension ``n``.

        ``out`` may be a preallocated ``[>= n, width]`` float32 array (for example a ring slot view)
        whose first ``n`` rows are written directly.
        """
        n = len(obs)
        rows = np.empty((n, self.width), dtype=np.float32) if out is None else out[:n]
        s = self.slices()
        rows[:, s["obs"]] = np.reshape(obs, (n, self.obs_dim))
        rows[:, s["action"]] = np.reshape(action, (n, self.act_dim))
        rows[:, s["reward"]] = np.reshape(reward, (n, 1))
        rows[:, s["next_obs"]] = np.reshape(next_obs, (n, self.obs_dim))
        rows[:, s["terminated"]] = np.reshape(terminated, (n, 1))
        rows[:, s["truncated"]] = np.reshape(truncated, (n, 1))
        return rows

    def unpack(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """Column views of ``rows`` (no copy). reward/terminated/truncated are 1-D ``[n]``."""
        if rows.ndim != 2 or rows.shape[1] != self.width:
            raise ValueError(f"expected rows of shape [n, {self.width}], got {rows.shape}")
        cols = {name: rows[:, sl] for name, sl in self.slices().items()}
        for name in ("reward", "terminated", "truncated"):
            cols[name] = cols[name][:, 0]
        return cols

    def finite_mask(self, rows: np.ndarray) -> np.ndarray:
        """``[n]`` bool: rows whose every value is finite (non-finite rows are dropped, counted)."""
        return np.isfinite(rows).all(axis=1)
