"""Build each role from a resolved TrainConfig plus its ports: one wiring for both modes.

The serial mode (``spreeze_like.serial``) calls these with in-process ports; a parallel-mode process
entry calls the same function with the shared-memory ports it attached, after setting its torch
threads (samplers: 1). Every argument that crosses a process boundary (the config, the
:class:`~spreeze_like.algos.base.AlgoSpec`) is a picklable dataclass.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spreeze_like.algos.spec import AlgoSpec
from spreeze_like.config import TrainConfig
from spreeze_like.roles.ports import ReplaySampler, StatsWriter, TransitionSink, WeightsSink, WeightsSource
from spreeze_like.seeding import derive_seed

if TYPE_CHECKING:
    from spreeze_like.roles.actor_learner import ActorLearner
    from spreeze_like.roles.critic_learner import CriticLearner
    from spreeze_like.roles.evaluator import Evaluator
    from spreeze_like.roles.sampler import SamplerWorker

# Each builder imports its role's module itself: a sampler or evaluator process then never imports
# the learners' modules, and with them torch (see algos/numpy_policy.py).


def algo_spec(config: TrainConfig) -> AlgoSpec:
    """The algorithm spec for a resolved config (makes one env to read its sizes).

    Only the supervisor and the serial mode call this; spawned roles get the supervisor's spec.
    """
    from spreeze_like.envs import env_info  # here: a learner process never imports gymnasium

    info = env_info(config.env, config.env_kwargs)
    return AlgoSpec.from_config(config, info.obs_dim, info.act_dim)


def sampler(
    config: TrainConfig,
    spec: AlgoSpec,
    index: int,
    sink: TransitionSink,
    weights: WeightsSource,
    stats: StatsWriter,
    generation: int = 0,
) -> SamplerWorker:
    """Role ``sampler-<index>``."""
    from spreeze_like.roles.sampler import SamplerWorker, random_steps_per_sampler

    # the warm-up is shared by every sampler row, remote ones included (serial mode has no remote rows)
    random_steps = random_steps_per_sampler(config.learning_starts, config.sampler_rows)
    return SamplerWorker(
        config.env, spec, index, config.envs_per_sampler, random_steps, sink, weights, stats, generation=generation,
        env_kwargs=config.env_kwargs,
    )


def critic_learner(
    config: TrainConfig,
    spec: AlgoSpec,
    replay: ReplaySampler,
    actor_source: WeightsSource,
    critic_sink: WeightsSink,
    stats: StatsWriter,
) -> CriticLearner:
    """Role ``critic-learner`` on ``config.critic_device``."""
    from spreeze_like.roles.critic_learner import CriticLearner

    return CriticLearner(
        spec,
        config.critic_device,
        replay,
        actor_source,
        critic_sink,
        stats,
        config.batch_size,
        config.weight_sync_period,
        config.prioritized,
        config.max_nonfinite_steps,
        config.learner_step,
        config.device_replay,
        config.updates_per_graph,
    )


def actor_learner(
    config: TrainConfig,
    spec: AlgoSpec,
    replay: ReplaySampler,
    critic_source: WeightsSource,
    actor_sink: WeightsSink,
    stats: StatsWriter,
) -> ActorLearner:
    """Role ``actor-learner`` on ``config.actor_device``."""
    from spreeze_like.roles.actor_learner import ActorLearner

    return ActorLearner(
        spec,
        config.actor_device,
        replay,
        critic_source,
        actor_sink,
        stats,
        config.batch_size,
        config.weight_sync_period,
        config.max_nonfinite_steps,
        config.learner_step,
        config.device_replay,
        config.updates_per_graph,
    )


def evaluator(config: TrainConfig, spec: AlgoSpec, weights: WeightsSource, stats: StatsWriter,
              run_dir: str | Path, start_step: int, say: Callable[[str], None]) -> Evaluator:
    """Role ``evaluator``; with ``--video-every``, it records videos into ``run_dir`` (the schedule from
    ``start_step``, the session's first env step), and says each file through ``say``."""
    from spreeze_like.roles.eval_video import EvalVideos
    from spreeze_like.roles.evaluator import Evaluator

    videos = None
    if config.video_every > 0:
        videos = EvalVideos(run_dir, config.video_every, config.video_format, start_step, config.env, say)
    return Evaluator(config.env, spec, weights, stats, config.eval_episodes, env_kwargs=config.env_kwargs,
                     videos=videos)


def replay_samplers(config: TrainConfig, storage: Any, tree: Any = None) -> tuple[Any, Any]:
    """(critic sampler, actor sampler) over a replay storage (local or shared memory).

    The critic's sampler is prioritized when ``config.prioritized`` (then ``tree``, a
    ``replay.SumTree`` over the same slots, is required) and is also the one that inserts, so new
    rows get the maximal priority. The actor always samples uniformly (see roles/actor_learner.py).
    Each sampler has its own seeded stream.
    """
    from spreeze_like.replay import PrioritizedConfig, PrioritizedSampler, UniformSampler

    actor = UniformSampler(storage, seed=derive_seed(config.seed, "replay/actor"))
    critic_seed = derive_seed(config.seed, "replay/critic")
    if not config.prioritized:
        return UniformSampler(storage, seed=critic_seed), actor
    if tree is None:
        raise ValueError("prioritized replay needs a sum tree over the storage's slots")
    # beta goes from priority_beta to 1 over the critic updates the run will make
    expected_updates = max(1, int((config.total_steps - config.learning_starts) * config.utd))
    per = PrioritizedConfig(alpha=config.priority_alpha, beta0=config.priority_beta, beta_steps=expected_updates)
    return PrioritizedSampler(storage, tree, per, seed=critic_seed), actor


def local_replay(config: TrainConfig, obs_dim: int, act_dim: int) -> tuple[Any, Any, Any]:
    """(storage, critic sampler, actor sampler) in this process's memory (the serial mode)."""
    from spreeze_like.replay import ReplayStorage, SumTree

    storage = ReplayStorage.local(config.buffer_size, obs_dim, act_dim)
    tree = SumTree.local(config.buffer_size) if config.prioritized else None
    return (storage, *replay_samplers(config, storage, tree))
