"""N-step returns, folded where the episodes are: in the sampler, before a row reaches replay.

With ``--n-step N`` the row stored for step ``t`` of an env is::

    obs_t | action_t | r_t + g r_{t+1} + ... + g^(N-1) r_{t+N-1} | obs_{t+N} | terminated | truncated

and every learner bootstraps it with ``g^N`` (:attr:`~spreeze_like.algos.spec.AlgoSpec.bootstrap_gamma`)
where a one-step row has ``g``: ``y = R + g^N (1 - terminated) Q'(obs_{t+N}, a')``. The row layout, replay,
the device mirror, the rings and the remote path are those of one-step rows; only what a row means changes.
As in SB3's n-step buffer and most n-step SAC/TD3 code, the intermediate steps' actions are the behaviour
policy's and are not corrected for (the bias is small for small N; N = 1 is exactly one-step TD).

Episode ends, per env:

* ``terminated`` at step ``T``: every step still held becomes a row whose return runs to ``T`` and whose
  ``terminated`` is 1. Those rows sum fewer than N rewards, which is exact: a terminated row is not
  bootstrapped, so its discount never enters the target.
* ``truncated`` (a time limit): the held step that completes its N rewards there becomes a row (it
  bootstraps from the final observation with ``g^N``, exactly); the up to N-1 later ones cannot: their
  target needs ``g^k`` with k < N, which a row does not carry. They are dropped and counted
  (``nstep_dropped``): N-1 of every truncated episode's steps, 2 in 1,000 on HalfCheetah at N = 3, 1 in
  100 on Pendulum's 200-step episodes. Storing a per-row discount would keep them, at the cost of a column
  in every row, ring, replay file and the GPU mirror; not worth it for that share.
* a NaN or inf transition (the sampler drops it and resets the env): the held steps are dropped too.

Steps held in the windows (at most N-1 per env) are not yet rows: the sampler reports them
(``nstep_pending``) so that pacing counts only rows that reach replay (``procs/pacing.claimed``). A
sampler that stops (the run's end, a crash, a checkpoint's resume) loses what it held: at most N-1
steps per env, never a wrong row. After a crash the restarted sampler process (or the Ray bridge, for a
remote actor) turns its row's held count into dropped steps first (``pacing.drop_held_steps``).
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

import numpy as np


class NStepRow(NamedTuple):
    """One row to store: the first held step's obs and action, the discounted return, the bootstrap obs."""

    obs: np.ndarray
    action: np.ndarray
    reward: float
    next_obs: np.ndarray
    terminated: float
    truncated: float


class NStepWindows:
    """The last steps of each env that are not yet rows (see the module docstring).

    Args:
        n_envs: envs of the sampler, one window each.
        n: the N of the returns (>= 2; a sampler with N = 1 stores its steps as they come, without this).
        gamma: the discount of one step.
    """

    def __init__(self, n_envs: int, n: int, gamma: float) -> None:
        if n < 2:
            raise ValueError(f"n-step windows need n >= 2, got {n}")
        self.n = n
        self.discounts = gamma ** np.arange(n, dtype=np.float64)
        self.windows: list[deque[tuple[np.ndarray, np.ndarray, float]]] = [deque() for _ in range(n_envs)]

    @property
    def pending(self) -> int:
        """Steps held in every window: taken from the envs, not yet rows."""
        return sum(len(w) for w in self.windows)

    def add(self, j: int, obs: np.ndarray, action: np.ndarray, reward: float, next_obs: np.ndarray,
            terminated: bool, truncated: bool) -> tuple[list[NStepRow], int]:
        """Env ``j``'s step (finite values; the caller keeps its own copies of the arrays it passes). Returns the
        rows it completes and the number of held steps that can no longer become rows (a truncation)."""
        window = self.windows[j]
        window.append((obs, action, float(reward)))
        if terminated:
            rows = [self._row(window, i, next_obs, 1.0, 0.0) for i in range(len(window))]
            window.clear()
            return rows, 0
        rows = []
        if len(window) == self.n:
            rows.append(self._row(window, 0, next_obs, 0.0, 1.0 if truncated else 0.0))
            window.popleft()
        if truncated:
            dropped = len(window)
            window.clear()
            return rows, dropped
        return rows, 0

    def drop(self, j: int) -> int:
        """Forget env ``j``'s held steps (its transition was not finite and the env is reset); how many."""
        dropped = len(self.windows[j])
        self.windows[j].clear()
        return dropped

    def _row(self, window: deque, first: int, next_obs: np.ndarray, terminated: float, truncated: float) -> NStepRow:
        steps = list(window)[first:]
        ret = float(np.dot(self.discounts[: len(steps)], [r for _, _, r in steps]))
        obs, action, _ = steps[0]
        return NStepRow(obs, action, ret, next_obs, terminated, truncated)
