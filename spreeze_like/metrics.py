"""Names of every scalar: the per-role stats slots and the TensorBoard tags they become.

Each role kind declares its slots up front (:func:`stats_schema`), so that a shared-memory stats block
can have a fixed layout (``StatsSchema.slot_names()`` in order) and a typo fails at once. The monitor
turns the slots into the TensorBoard tags below: counters into rates, mean accumulators into the
mean over the last write period, gauges as they are.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StatsSchema:
    """The slots one role kind writes: counters (totals), means (a ``.sum`` and a ``.count`` counter
    each, see ``ports.observe``) and gauges (last value). Every slot is one float64."""

    kind: str
    counters: tuple[str, ...] = ()
    means: tuple[str, ...] = ()
    gauges: tuple[str, ...] = ()

    def slot_names(self) -> list[str]:
        """Fixed slot order: counters, then ``<mean>.sum``/``<mean>.count`` pairs, then gauges."""
        pairs = [s for m in self.means for s in (m + ".sum", m + ".count")]
        return [*self.counters, *pairs, *self.gauges]


SAMPLER = StatsSchema(
    "sampler",
    # nstep_dropped / nstep_pending: env steps that a truncation cut out of their n-step return, and steps held
    # in n-step windows now (--n-step > 1 only; roles/nstep.py): neither is a row in replay
    # her_rows: rows made with a relabelled goal (--her-goals; roles/her.py), beside the env steps' own rows
    counters=("env_steps", "episodes", "nonfinite_dropped", "nstep_dropped", "her_rows"),
    means=("episodic_return", "episodic_length", "policy_lag", "episodic_success"),  # success: goal envs only
    gauges=("policy_version", "nstep_pending"),
)
CRITIC_LEARNER = StatsSchema(
    "critic-learner",
    counters=("updates", "update_frames", "nonfinite_steps"),
    means=(
        "qf1_loss",
        "qf2_loss",
        "qf1_values",
        "qf2_values",
        "alpha",
        "alpha_loss",
        "td_error",
        "is_weight",
        "copy_staleness",
    ),
    gauges=("version",),
)
ACTOR_LEARNER = StatsSchema(
    "actor-learner",
    counters=("updates", "nonfinite_steps"),
    means=("actor_loss", "entropy", "copy_staleness"),
    gauges=("version",),
)
EVALUATOR = StatsSchema(
    "evaluator",
    counters=("evaluations",),
    # eval_success: the share of eval_success_n episodes that said they succeeded (0 of 0: the env says nothing)
    gauges=("eval_return", "eval_length", "eval_env_step", "eval_version", "eval_success", "eval_success_n"),
)
REPLAY = StatsSchema("replay", counters=("inserted",), gauges=("size",))


def role_names(samplers: int) -> list[str]:
    """Every role of a run, in a fixed order: ``sampler-0..N-1``, learners, evaluator, replay."""
    return [f"sampler-{i}" for i in range(samplers)] + ["critic-learner", "actor-learner", "evaluator", "replay"]


def schema_for(role: str) -> StatsSchema:
    """Schema of a role name such as ``sampler-3`` or ``critic-learner``."""
    kinds = {"critic-learner": CRITIC_LEARNER, "actor-learner": ACTOR_LEARNER, "evaluator": EVALUATOR, "replay": REPLAY}
    return SAMPLER if role.startswith("sampler") else kinds[role]


def stats_schema(samplers: int) -> dict[str, list[str]]:
    """``{role: slot names}`` for a whole run: what ``ipc.StatsBlock.create`` (or LocalStatsBlock) takes."""
    return {role: schema_for(role).slot_names() for role in role_names(samplers)}


# TensorBoard tags (CleanRL's names where CleanRL has one) --------------------------------------------
TAGS = {
    "charts/episodic_return": "mean return of the episodes finished since the last write",
    "charts/episodic_length": "mean length of those episodes",
    "charts/SPS": "env steps per second since the start of this session (CleanRL's definition)",
    "losses/qf1_loss": "critic 1 TD loss (importance-weighted with prioritized replay), mean over the period",
    "losses/qf2_loss": "critic 2 TD loss (SAC/TD3)",
    "losses/qf1_values": "mean Q1(s, a) over the sampled batches",
    "losses/actor_loss": "policy loss",
    "losses/alpha": "SAC entropy coefficient",
    "losses/alpha_loss": "SAC entropy-coefficient loss",
    "eval/episodic_return": "mean return of the deterministic evaluation episodes, at the env step they began",
    "charts/success_rate": "share of the episodes finished in the period whose last step said info['is_success'] "
                           "(or 'success'): goal envs only",
    "eval/success_rate": "share of the deterministic evaluation episodes whose last step said info['is_success'] "
                         "(or 'success'): goal envs only",
    "perf/sample_hz": "env steps per second over the last period, all samplers",
    "perf/update_hz": "critic updates per second over the last period",
    "perf/update_frames_hz": "transitions consumed by critic updates per second (update_hz x batch size)",
    "perf/actor_update_hz": "actor updates per second over the last period",
    "perf/utd": "achieved update-to-data ratio: critic updates / env steps since learning started",
    "perf/policy_lag": "actor versions the samplers' policy is behind the newest, mean per env step",
    "perf/weight_staleness": "versions a learner's copy of the other network is behind, worst of the two",
    "perf/actor_copy_staleness": "critic learner: versions its actor copy is behind the actor learner",
    "perf/critic_copy_staleness": "actor learner: versions its critic copy is behind the critic learner",
    "replay/size": "transitions in replay",
    "replay/td_error": "mean |TD error| of the sampled batches (the priorities' source)",
    "replay/is_weight_mean": "mean importance weight of the sampled batches (1 with uniform replay)",
    "samplers/nonfinite_dropped": "transitions dropped because a value was NaN or inf (total)",
    "samplers/nstep_dropped": "--n-step: env steps that a truncation cut short of N rewards, never stored (total)",
    "samplers/her_rows": "--her-goals: rows made with a goal relabelled from a later step of the episode (total; "
                         "those with a NaN or inf are dropped and counted in samplers/nonfinite_dropped too)",
    "stats/nonfinite_steps": "learner updates skipped because a gradient was NaN or inf, both learners (total)",
    "stats/restarts": "parallel mode: role restarts by the supervisor plus remote sampler actors' restarts (total)",
    "remote/sampler-<i>/steps_per_s": "remote sampler row i (--remote-samplers): env steps per second over the period",
    "remote/sampler-<i>/policy_lag": "remote sampler row i: actor versions its batches' policy was behind, mean",
    "remote/sampler-<i>/restarts": "remote sampler row i: restarts of its actor (total)",
    "hw/cpu_percent": "machine-wide CPU use, percent",
    "hw/mem_used": "machine-wide memory in use, GiB",
}
