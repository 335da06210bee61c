"""Env probes: how fast one process steps the env, alone and as a sampler with policy inference.

Runs inside the probe worker process (:mod:`spreeze_like.autotune.worker`), spawned with one BLAS
thread like every sampler process (samplers act with a numpy policy). Three figures:

* ``step``: ``env.step`` with pre-drawn random actions, resetting on episode ends -- the env's own
  cost, the ceiling of any sampler.
* ``per_sampler[n]``: the real sampler loop (:class:`~spreeze_like.roles.sampler.SamplerWorker`
  with ``n`` envs, a published policy, one batched actor forward per step of all ``n`` envs, rows
  packed and handed to a sink that drops them). The ring's cost is measured separately.
* ``step_with_policy`` is ``per_sampler[1]``: one actor forward per env step.

Batching over more envs amortises the forward pass (a small MLP costs about the same for 1 row
as for 8) but steps each env less often per policy refresh. How N such processes scale when they
step at once is measured by :mod:`spreeze_like.autotune.sampler_scaling` (from the probe's caller:
the worker is a daemon process and may not start processes); the planner picks the fewest
processes, then the fewest envs each, that make the rate the critic learns from
(:mod:`spreeze_like.autotune.sampler_supply`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from spreeze_like.algos.spec import AlgoSpec
from spreeze_like.autotune.measure import time_rate
from spreeze_like.autotune.results import EnvRates, Rate

ENVS_PER_SAMPLER_OPTIONS = (1, 2, 4, 8, 16)  # also the K of the multi-process probe (sampler_scaling)


class _DropSink:
    """A TransitionSink that discards rows (the ring's cost is probed on its own)."""

    def write(self, rows: np.ndarray) -> None:
        pass


def raw_step_rate(env_id: str, budget_s: float, env_kwargs: Mapping[str, Any] | None = None) -> Rate:
    """``env.step`` alone with random actions (reset on episode end)."""
    from spreeze_like.envs import make_env

    env = make_env(env_id, env_kwargs=env_kwargs)
    try:
        env.reset(seed=0)
        actions = np.random.default_rng(0).uniform(-1, 1, (1024,) + env.action_space.shape).astype(np.float32)
        i = 0

        def step() -> None:
            nonlocal i
            _, _, terminated, truncated, _ = env.step(actions[i & 1023])
            i += 1
            if terminated or truncated:
                env.reset()

        return time_rate(step, budget_s, "steps/s", warmup=10, min_ops=20)
    finally:
        env.close()


def sampler_rate(env_id: str, spec: AlgoSpec, n_envs: int, budget_s: float,
                 env_kwargs: Mapping[str, Any] | None = None) -> Rate:
    """Env steps/s of one sampler process stepping ``n_envs`` envs with batched policy inference."""
    from spreeze_like.algos import make_policy
    from spreeze_like.algos.networks import get_flat
    from spreeze_like.metrics import stats_schema
    from spreeze_like.roles.ports import LocalBoard, LocalStatsBlock
    from spreeze_like.roles.sampler import SamplerWorker

    board = LocalBoard()
    board.publish(get_flat([make_policy(spec)]))  # a published policy, so the sampler uses it (no warm-up)
    stats = LocalStatsBlock(stats_schema(1)).role("sampler-0")
    sampler = SamplerWorker(env_id, spec, 0, n_envs, 0, _DropSink(), board, stats, env_kwargs=env_kwargs)
    try:
        rate = time_rate(sampler.step, budget_s, "steps/s", per_call=n_envs, warmup=3, min_ops=20)
        if sampler.version == 0:  # it would have timed random actions, not policy inference
            raise RuntimeError("the probe's sampler did not load the published policy")
        return rate
    finally:
        sampler.close()


def probe_env(
    env_id: str,
    spec: AlgoSpec,
    budget_s: float,
    progress: Callable[[str], None],
    options: Sequence[int] = ENVS_PER_SAMPLER_OPTIONS,
    env_kwargs: Mapping[str, Any] | None = None,
) -> EnvRates:
    """All env figures within about ``budget_s`` seconds (a fifth for the raw step, the rest shared)."""
    import torch

    torch.set_num_threads(1)  # the probe worker's setting for this part (samplers act in numpy, one BLAS thread)
    raw_budget = 0.2 * budget_s
    step = raw_step_rate(env_id, raw_budget, env_kwargs)
    progress(f"env {env_id}: env.step alone {step.text()}")
    per_sampler: dict[int, Rate] = {}
    share = (budget_s - raw_budget) / max(1, len(options))
    for n in options:
        per_sampler[n] = sampler_rate(env_id, spec, n, share, env_kwargs)
        progress(f"env {env_id}: sampler with {n} env(s), batched policy inference: {per_sampler[n].text()}")
    return EnvRates(
        env_id=env_id,
        obs_dim=spec.obs_dim,
        act_dim=spec.act_dim,
        step=step,
        step_with_policy=per_sampler.get(1) or sampler_rate(env_id, spec, 1, share, env_kwargs),
        per_sampler=per_sampler,
    )
