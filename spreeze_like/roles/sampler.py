"""Sampler role (``sampler-<i>``): steps a few envs with the newest policy and emits transitions.

One :class:`SamplerWorker` owns ``envs_per_sampler`` envs and a CPU copy of the policy. Each
``step()`` runs one batched policy inference for all its envs, steps each env once, packs the
transitions as float32 rows (``spreeze_like.transition``) and hands them to its
:class:`~spreeze_like.roles.ports.TransitionSink`. It creates nothing shared: the sink, the actor
weights source and the stats block are given to it, and whoever created them removes them (the
supervisor in the parallel mode). A crash loses at most the transitions of the current step (and, with
``--n-step`` or ``--her-goals``, the steps held for folding or relabelling).

The rules that make the data right:

* Random actions, uniform in [-1, 1], for this sampler's share of ``learning_starts``.
* Each env is stepped alone and reset by hand after ``terminated or truncated``, so ``next_obs`` is
  always the true final observation (never a reset observation, no gymnasium autoreset), and the
  row keeps both flags: learners bootstrap on ``terminated`` only.
* An observation whose shape is not the env's declared one (or whose dtype is not a real number) ends
  the sampler with an :class:`~spreeze_like.errors.EnvError` (``envs.obs_vector``) before anything of
  that step reaches the sink: numpy would broadcast a size-1 observation across the row. In a parallel
  run that one line ends the run (exit status 2) instead of a loop of restarts.
* A transition with a NaN or inf anywhere is dropped and counted; its env is reset, because an env
  that produced a NaN state cannot be trusted to continue the episode.
* With ``--n-step N`` (N > 1) each env's steps go through :class:`~spreeze_like.roles.nstep.NStepWindows`
  and a row is emitted once its N rewards are in (or its episode terminated): see that module for the
  rows, the bootstrap and the steps a truncation drops.
* With ``--her-goals K`` each env's episode is held by :class:`~spreeze_like.roles.her.HerEpisodes`, and when it
  ends its steps are stored K times more with goals it achieved later: see that module.
* Seeds: env ``j`` of sampler ``i`` is reset first with ``seeding.env_seed(seed, global index,
  generation)`` (``seed + index`` in a run's first generation, gymnasium's convention, so a peer
  run with the same seed starts from the same states); later resets continue the env's own RNG.
  Policy noise and warm-up actions use this sampler's own generators, which are part of its
  checkpointed state.

Policy inference is a :class:`~spreeze_like.algos.numpy_policy.NumpyPolicy` over the published
actor vector: a sampler process never imports torch (see that module for why).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from spreeze_like.algos.numpy_policy import NumpyPolicy
from spreeze_like.algos.spec import AlgoSpec
from spreeze_like.envs import episode_success, make_env, obs_vector, reset_env
from spreeze_like.roles.her import HerEpisodes, require_goal_slices
from spreeze_like.roles.nstep import NStepWindows
from spreeze_like.roles.ports import StatsWriter, TransitionSink, WeightsSource, observe
from spreeze_like.seeding import derive_seed, env_seed
from spreeze_like.transition import TransitionLayout, finite_rows


class SamplerWorker:
    """Steps ``n_envs`` envs with batched policy inference. See the module docstring.

    Args:
        env_id: gymnasium id or ``module:EnvId``.
        spec: the algorithm spec (policy sizes, exploration noise, run seed).
        index: this sampler's index ``i`` (role ``sampler-<i>``).
        n_envs: envs stepped by this sampler.
        random_steps: env steps (over its envs) of uniform random actions before using the policy.
        sink: where transition rows go.
        weights: the actor weights source.
        stats: this sampler's stats block.
        generation: resume count, so a resumed run does not repeat the first run's episodes.
    """

    def __init__(
        self,
        env_id: str,
        spec: AlgoSpec,
        index: int,
        n_envs: int,
        random_steps: int,
        sink: TransitionSink,
        weights: WeightsSource,
        stats: StatsWriter,
        generation: int = 0,
        env_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self.env_id, self.spec, self.index, self.random_steps = env_id, spec, index, random_steps
        self.sink, self.weights, self.stats = sink, weights, stats
        self.layout = TransitionLayout(spec.obs_dim, spec.act_dim)
        self.envs = [make_env(env_id, env_kwargs=env_kwargs) for _ in range(n_envs)]
        self._obs_shape = self.envs[0].observation_space.shape  # every observation is checked against it
        self.policy = NumpyPolicy(spec)
        self.version = 0  # board version of the weights in self.policy; 0: none loaded yet (act randomly)
        self._vec = np.zeros(self.policy.size, dtype=np.float32)
        self.rng = np.random.default_rng(derive_seed(spec.seed, "sampler/actions", index, generation))
        self.noise = np.random.default_rng(derive_seed(spec.seed, "sampler/noise", index, generation))
        self.env_steps = 0  # over this sampler's envs, across resumes
        self.episodes = 0
        self.obs = np.stack(
            [
                reset_env(env, env_id, seed=env_seed(spec.seed, index * n_envs + j, generation))
                for j, env in enumerate(self.envs)
            ]
        )
        self.episode_return = np.zeros(n_envs, dtype=np.float64)
        self.episode_length = np.zeros(n_envs, dtype=np.int64)
        self._rows = np.empty((n_envs, self.layout.width), dtype=np.float32)
        self.nstep = NStepWindows(n_envs, spec.n_step, spec.gamma) if spec.n_step > 1 else None
        if self.nstep is not None:  # a step completes at most N rows per env (a termination flushes a window)
            self._folded = np.empty((n_envs * spec.n_step, self.layout.width), dtype=np.float32)
            lay = self.layout
            self._columns = (lay.obs, lay.action, lay.reward, lay.next_obs, lay.terminated, lay.truncated)
        self.her = self._her_episodes(generation) if spec.her_goals else None

    # --- one step of every env ------------------------------------------------------------------------
    def step(self) -> int:
        """Step every env once; returns the number of transitions handed to the sink."""
        self._refresh_policy()
        actions = self._actions()
        n = len(self.envs)
        rewards = np.zeros(n, dtype=np.float32)
        next_obs = np.empty_like(self.obs)
        terminated = np.zeros(n, dtype=np.float32)
        truncated = np.zeros(n, dtype=np.float32)
        infos: list[dict] = []
        for j, env in enumerate(self.envs):
            o, r, term, trunc, info = env.step(actions[j])
            infos.append(info)
            next_obs[j] = obs_vector(o, self._obs_shape, self.env_id, "step")
            rewards[j], terminated[j], truncated[j] = r, term, trunc
        rows = self.layout.pack(self.obs, actions, rewards, next_obs, terminated, truncated, out=self._rows)
        finite = finite_rows(rows)
        all_finite = bool(finite.all())
        emitted = n if all_finite else int(finite.sum())
        if not all_finite:
            self.stats.add("nonfinite_dropped", float(n - emitted))
        if self.nstep is not None:
            emitted = self._fold(actions, rewards, next_obs, terminated, truncated, finite)
        elif all_finite:
            self.sink.write(rows)
        elif emitted:
            self.sink.write(rows[finite])
        if self.her is not None:  # views, no copies: see the note at ``self.obs = next_obs`` below
            for j in np.flatnonzero(finite):
                self.her.add(j, self.obs[j], actions[j], next_obs[j], float(terminated[j]), float(truncated[j]),
                             infos[j])
        self.env_steps += n
        self.stats.add("env_steps", float(n))
        self.episode_return += rewards
        self.episode_length += 1
        # Episode ends: record, then reset by hand. The row above already holds the true final obs.
        done = (terminated > 0) | (truncated > 0) | ~finite
        # Every step makes new ``actions`` and ``next_obs`` arrays, and an env's row of ``self.obs`` is written only
        # by its reset below, after its held steps were folded, relabelled or dropped: so the n-step windows and
        # the HER episodes hold views of these rows, not copies.
        self.obs = next_obs
        relabelled: list[tuple[np.ndarray, ...]] = []
        for j in np.flatnonzero(done):
            if self.her is not None:
                if finite[j]:
                    rows_j = self.her.end(j)
                    if rows_j is not None:
                        relabelled.append(rows_j)
                else:
                    self.her.drop(j)
            if finite[j]:
                self.episodes += 1
                self.stats.add("episodes")
                observe(self.stats, "episodic_return", float(self.episode_return[j]))
                observe(self.stats, "episodic_length", float(self.episode_length[j]))
                success = episode_success(infos[j])  # a goal env says whether the episode reached its goal
                if success is not None:
                    observe(self.stats, "episodic_success", float(success))
            self.episode_return[j] = 0.0
            self.episode_length[j] = 0
            self.obs[j] = reset_env(self.envs[j], self.env_id)
        if self.her is not None:
            emitted += self._write_relabelled(relabelled)
        return emitted

    def _her_episodes(self, generation: int) -> HerEpisodes:
        env = self.envs[0]
        slices = require_goal_slices(env, self.env_id, self.spec.her_goals)  # a run's start checked it already
        rng = np.random.default_rng(derive_seed(self.spec.seed, "sampler/her", self.index, generation))
        return HerEpisodes(len(self.envs), self.spec.her_goals, slices, env, rng, self.env_id, self.spec.her_strategy)

    def _write_relabelled(self, parts: list[tuple[np.ndarray, ...]]) -> int:
        """HER: the relabelled rows of the episodes that ended in this step, to the sink; returns how many."""
        if not parts:
            return 0
        rows = self.layout.pack(*(np.concatenate(column) for column in zip(*parts)))
        # made, then dropped if not finite (compute_reward is the env's code: NaN for an odd goal), as env steps
        # are: pacing.claimed's count of rows stored stays env_steps + her_rows - nonfinite_dropped, exactly
        self.stats.add("her_rows", float(len(rows)))
        return self._write_finite(rows)

    def _write_finite(self, rows: np.ndarray) -> int:
        """Made rows (n-step, relabelled) to the sink, less the non-finite ones (counted); returns how many went."""
        keep = finite_rows(rows)
        if not keep.all():
            self.stats.add("nonfinite_dropped", float(len(rows) - keep.sum()))
            rows = rows[keep]
        if len(rows):
            self.sink.write(rows)
        return len(rows)

    def _fold(self, actions: np.ndarray, rewards: np.ndarray, next_obs: np.ndarray, terminated: np.ndarray,
              truncated: np.ndarray, finite: np.ndarray) -> int:
        """N-step mode: each env's finite step into its window; the rows completed go to the sink. Returns how
        many. (The windows hold views of the step's rows: see the note at ``self.obs = next_obs`` in :meth:`step`.)"""
        assert self.nstep is not None
        out: list = []
        dropped = 0
        for j in range(len(self.envs)):
            if not finite[j]:
                dropped += self.nstep.drop(j)
                continue
            done, lost = self.nstep.add(j, self.obs[j], actions[j], float(rewards[j]), next_obs[j],
                                        bool(terminated[j]), bool(truncated[j]))
            out += done
            dropped += lost
        if dropped:
            self.stats.add("nstep_dropped", float(dropped))
        self.stats.set("nstep_pending", float(self.nstep.pending))
        if not out:
            return 0
        # filled row by row into a reused buffer: np.stack of the rows' parts (12 us) and a second pack (7 us) were
        # a third of the 52 us the folding took per HalfCheetah step (cProfile, 1 env, N = 3)
        rows = self._folded[:len(out)]
        o, a, r, no, te, tr = self._columns
        for row, done in zip(rows, out):
            row[o], row[a], row[r], row[no], row[te], row[tr] = (done.obs, done.action, done.reward, done.next_obs,
                                                                 done.terminated, done.truncated)
        return self._write_finite(rows)  # a sum of finite rewards can still overflow float32

    def _actions(self) -> np.ndarray:
        n = len(self.envs)
        if self.env_steps < self.random_steps or self.version == 0:
            return self.rng.uniform(-1.0, 1.0, size=(n, self.spec.act_dim)).astype(np.float32)
        return self.policy.explore(self.obs, self.noise, self.spec.exploration_noise).astype(np.float32, copy=False)

    def _refresh_policy(self) -> None:
        newest = self.weights.version()
        if newest > self.version:
            version = self.weights.read(self._vec)
            if version > 0:
                self.policy.load(self._vec)
                self.version = version
                self.stats.set("policy_version", float(version))
        if self.version > 0:
            observe(self.stats, "policy_lag", float(max(0, newest - self.version)))

    # --- lifecycle ----------------------------------------------------------------------------------------
    def close(self) -> None:
        for env in self.envs:
            env.close()

    def state_dict(self) -> dict[str, Any]:
        """Counters and RNG states. Env internals cannot be saved: a resumed sampler starts new episodes."""
        return {
            "env_steps": self.env_steps,
            "episodes": self.episodes,
            "rng": self.rng.bit_generator.state,
            "noise_rng": self.noise.bit_generator.state,
            **({"her_rng": self.her.rng.bit_generator.state} if self.her is not None else {}),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.env_steps = int(state["env_steps"])
        self.episodes = int(state["episodes"])
        self.rng.bit_generator.state = state["rng"]
        if "noise_rng" in state:  # checkpoints before the numpy policy held a torch generator: keep the seeded one
            self.noise.bit_generator.state = state["noise_rng"]
        if self.her is not None and "her_rng" in state:  # a run that resumes with HER after one without keeps its seed
            self.her.rng.bit_generator.state = state["her_rng"]


def random_steps_per_sampler(learning_starts: int, samplers: int) -> int:
    """Each sampler's share of the warm-up, so that the shares add up to at least ``learning_starts``."""
    return math.ceil(learning_starts / samplers)
