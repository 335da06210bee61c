"""The record layout of one transition in a ring: ``obs | action | reward | next_obs | terminated | truncated``.

Samplers pack, the feeder unpacks; both build the layout from the env's spaces, so they agree by
construction. Everything is float32 (flags are 0.0/1.0), one row per transition, so a batch of
transitions is one C-contiguous ``(n, width)`` array and one ring write. HalfCheetah: 17 + 6 + 1 +
17 + 1 + 1 = 43 values, 172 bytes.

Bootstrapping uses ``terminated`` only; ``truncated`` travels along for episode bookkeeping.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TransitionLayout:
    """Column slices of a packed transition row.

    Attributes:
        obs_dim: Length of the flat observation.
        act_dim: Length of the flat action.
    """

    obs_dim: int
    act_dim: int

    @property
    def width(self) -> int:
        """float32 values per record."""
        return 2 * self.obs_dim + self.act_dim + 3

    @property
    def obs(self) -> slice:
        return slice(0, self.obs_dim)

    @property
    def action(self) -> slice:
        return slice(self.obs_dim, self.obs_dim + self.act_dim)

    @property
    def reward(self) -> int:
        return self.obs_dim + self.act_dim

    @property
    def next_obs(self) -> slice:
        start = self.obs_dim + self.act_dim + 1
        return slice(start, start + self.obs_dim)

    @property
    def terminated(self) -> int:
        return 2 * self.obs_dim + self.act_dim + 1

    @property
    def truncated(self) -> int:
        return 2 * self.obs_dim + self.act_dim + 2

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
        """Pack a batch of ``n`` transitions (leading dimension ``n`` on every argument) into ``(n, width)`` rows.

        Args:
            obs: ``(n, obs_dim)``.
            action: ``(n, act_dim)``.
            reward: ``(n,)``.
            next_obs: ``(n, obs_dim)`` (the true final observation on truncation, not the reset one).
            terminated: ``(n,)`` bool or float.
            truncated: ``(n,)`` bool or float.
            out: Optional preallocated float32 ``(>= n, width)`` array; its first ``n`` rows are used.

        Returns:
            The packed C-contiguous float32 rows, ready for :meth:`Ring.write`.
        """
        n = len(reward)
        rows = np.empty((n, self.width), np.float32) if out is None else out[:n]
        rows[:, self.obs] = obs
        rows[:, self.action] = action
        rows[:, self.reward] = reward
        rows[:, self.next_obs] = next_obs
        rows[:, self.terminated] = terminated
        rows[:, self.truncated] = truncated
        return rows

    def unpack(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """Views (no copies) of the columns of ``(n, width)`` rows, by field name."""
        if rows.ndim != 2 or rows.shape[1] != self.width:
            raise ValueError(f"expected rows of shape (n, {self.width}), got {rows.shape}")
        return {
            "obs": rows[:, self.obs],
            "action": rows[:, self.action],
            "reward": rows[:, self.reward],
            "next_obs": rows[:, self.next_obs],
            "terminated": rows[:, self.terminated],
            "truncated": rows[:, self.truncated],
        }
