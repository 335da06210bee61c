"""The run configuration: one typed dataclass with a help line per field, its checks and its JSON form.

Every field of :class:`TrainConfig` is a ``--kebab-case`` flag of ``python -m spreeze_like.run``
with the field's help line (CleanRL's "a docstring per field", done with field metadata because
tyro is not a dependency; :mod:`spreeze_like.flags` builds the parser). Values are layered, later wins:

    dataclass defaults  <  preset  <  --config FILE (JSON)  <  the resumed run's config.json  <  flags given

The last rule is Sample Factory's: on ``--resume`` only the flags the user actually typed override
the saved config, so ``--resume RUN --total-steps 50000`` extends a run without resetting the rest.
:mod:`spreeze_like.flags` parses the user's layers and says where each value came from; the presets
(``spreeze_like/presets/<algo>.toml``, per env id) are laid under them by :mod:`spreeze_like.layering`,
which also prints the sources and has them saved beside the values in config.json.

Validation raises :class:`~spreeze_like.errors.ConfigError` with one line that names the flag and
says what is allowed. ``resolve()`` fills the ``auto`` values (devices, precision, policy delay, and
an actor lr still ``auto``: the preset's) and the result is what ``config.json`` in the run folder
records, beside the source of each value.

Beside this module: :mod:`spreeze_like.config_values` (the allowed values and the per-field checks
of ``validate()``), :mod:`spreeze_like.config_bounds` (the upper bounds on counts and sizes, also
checked by ``validate()``), :mod:`spreeze_like.config_fields` (field types, JSON and flag coercion,
the one-line parser) and :mod:`spreeze_like.remote.address` (the ``--ray`` address).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spreeze_like.config_bounds import check_bounds, check_remote
from spreeze_like.config_fields import coerce_fields, load_json_file, settings_of
from spreeze_like.config_values import (
    ALGOS,
    DEFAULT_ENV_ID,
    DEVICE_REPLAY,
    HER_STRATEGIES,
    LEARNER_STEPS,
    PRECISIONS,
    VIDEO_FORMATS,
    check_values,
)
from spreeze_like.errors import ConfigError
from spreeze_like.presets import load_presets
from spreeze_like.remote.address import RAY_DEFAULT_PORT

# Critic updates per actor update when --policy-delay is 0 (auto): TD3's paper uses 2, CrossQ's 3
# (Bhatt et al. 2024); SAC and DDPG update the actor with every critic update.
DEFAULT_POLICY_DELAY = {"td3": 2, "crossq": 3}
EXPLICIT_ALGOS = ("sac", "td3", "ddpg", "crossq")  # those with an explicit_step (algos/explicit_grad.py, explicit_renorm.py)
# Those whose explicit fp32 step keeps beating bf16 autocast up to devices.BF16_MIN_WORK_EXPLICIT. CrossQ's explicit
# critic step, which runs three times as often as its actor's, broke even with bf16 at devices.BF16_MIN_WORK already
# (tools/bench_precision.py, 2026-11-29: 0.92-0.97x at 256@128, 1.08x at 128@512, 1.16x at 256@160), so its bf16
# starts where it did with autograd's step.
BF16_LATE_ALGOS = ("sac", "td3", "ddpg")
# The actor learning rate ``auto`` stands for when no preset gives one (every shipped preset file has
# one in its [default] table: spreeze_like/presets/).
DEFAULT_ACTOR_LR = 3e-4


def default_policy_delay(algo: str) -> int:
    """What ``--policy-delay 0`` (auto) stands for with ``algo``."""
    return DEFAULT_POLICY_DELAY.get(algo, 1)


def auto_actor_lr(env_id: str, algo: str = "sac", presets: str = "") -> float:
    """The actor learning rate ``auto`` stands for on ``env_id``: the preset's (a ``module:EnvId``
    counts by its EnvId; ``presets`` is a preset file to read instead of the shipped one), else 3e-4."""
    found = load_presets(algo, presets).lookup(env_id).get("actor_lr")
    if found is None:
        return DEFAULT_ACTOR_LR
    value, label = found
    if not (math.isfinite(value) and value > 0):  # layering checks whole files; resolve() alone reads just this
        raise ConfigError(f"{label}: actor_lr {value!r} is invalid: must be > 0")
    return float(value)


def _f(default: Any, help: str, **meta: Any) -> Any:
    """A dataclass field with a help line (and optional argparse extras such as ``choices``)."""
    if isinstance(default, (list, tuple, dict)):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help, **meta})
    return field(default=default, metadata={"help": help, **meta})


@dataclass
class TrainConfig:
    """Everything a run needs. Defaults train SAC on DEFAULT_ENV_ID in a few minutes on 2 CPU cores."""

    # --- what to train -------------------------------------------------------------------------
    env: str = _f(
        DEFAULT_ENV_ID, "gymnasium env id, or module:EnvId to import your own registered env first", metavar="ID"
    )
    env_kwargs: dict[str, Any] = _f(  # noqa: RUF009 - _f makes a default_factory for a dict: no shared default
        {}, "keyword arguments of gymnasium.make for every env of the run, as a JSON object, e.g. "
        "'{\"ctrl_cost_weight\": 0.05}' or '{\"max_episode_steps\": 500}'; saved in config.json, so --resume and "
        "python -m spreeze_like.evaluate make the same env", metavar="JSON", shown="none"
    )
    algo: str = _f("sac", "algorithm; not given: the env's in presets/algos.toml (SAC unless a measurement chose "
                   "another; --list-presets shows them)", choices=ALGOS, shown="the env's, else sac")
    presets: str = _f(
        "", "TOML file of per-env presets to read instead of the shipped spreeze_like/presets/<algo>.toml "
        "(--list-presets shows them)", metavar="FILE"
    )
    total_steps: int = _f(20_000, "env steps to train for (summed over all envs)")
    time_limit_s: float = _f(0.0, "stop training after this many seconds of wall time in this session (0: no limit); "
                             "the run then ends as at its last step, with its final checkpoint and evaluation "
                             "after the limit, and --resume continues it", metavar="S")
    seed: int = _f(1, "run seed; every env, network and sampler seed is derived from it")
    # --- sampling --------------------------------------------------------------------------------
    samplers: int = _f(1, "sampler processes on this machine (in --serial mode: sampler objects stepped in turn); "
                          "0 only with --remote-samplers (all sampling remote)")
    envs_per_sampler: int = _f(1, "envs stepped by each sampler, with one batched policy inference per step")
    learning_starts: int = _f(1000, "env steps of uniform random actions before the policy acts and learning starts")
    exploration_noise: float = _f(0.1, "TD3/DDPG: std of the Gaussian action noise while sampling (actions in [-1, 1])")
    # --- remote samplers (Ray) ------------------------------------------------------------------------
    ray: str | None = _f(
        None, "host:port of a running Ray cluster's GCS (its head's ray start --port), or auto ($RAY_ADDRESS, else "
        f"127.0.0.1:{RAY_DEFAULT_PORT}); connects only, never starts or stops Ray; parallel mode; needs "
        "pip install \"spreeze_like[ray]\"", metavar="ADDRESS", literal=True, shown="off"
    )
    remote_samplers: int = _f(0, "sampler actors on the Ray cluster beside the local --samplers (needs --ray)")
    remote_envs_per_sampler: int = _f(0, "envs stepped by each remote sampler; 0 = same as --envs-per-sampler")
    remote_batch: int = _f(0, "transitions per collect call to a remote sampler; 0 = auto, from the measured call "
                           "cost")
    remote_place_timeout_s: float = _f(120.0, "seconds a remote sampler may wait for a Ray node with a free CPU before "
                                       "it is given up (its steps then go to the local samplers)")
    # --- replay ----------------------------------------------------------------------------------
    buffer_size: int = _f(1_000_000, "replay capacity in transitions (FIFO)")
    prioritized: bool = _f(False, "prioritized replay for the critic (proportional, TD-error priorities)")
    priority_alpha: float = _f(0.6, "prioritized replay: priority exponent")
    priority_beta: float = _f(0.4, "prioritized replay: importance-weight exponent at the start (annealed to 1)")
    # --- learning --------------------------------------------------------------------------------
    batch_size: int = _f(256, "transitions per gradient update")
    utd: float = _f(1.0, "update-to-data ratio: critic updates per env step collected")
    gamma: float = _f(0.99, "discount factor")
    n_step: int = _f(1, "n-step returns: each stored transition sums the next N rewards (discounted) and "
                     "bootstraps from the observation N steps later with gamma^N; 1 = one-step TD")
    her_goals: int = _f(0, "hindsight experience replay (goal envs): each step is stored this many times more, "
                        "with goals the episode achieved (--her-strategy); 0 = off, 4 is HER's usual")
    her_strategy: str = _f("future", "HER: where a relabelled goal comes from: future (a step from this one to the "
                           "episode's end; the paper's best), final (the episode's last), episode (any of its steps)",
                           choices=HER_STRATEGIES)
    tau: float = _f(0.005, "target network soft-update rate")
    actor_lr: float | None = _f(None, "actor learning rate (Adam); auto = the preset's for the env and algorithm "
                                "(--list-presets), else 3e-4")
    critic_lr: float = _f(1e-3, "critic learning rate (Adam)")
    alpha_lr: float = _f(1e-3, "SAC: entropy-coefficient learning rate (Adam)")
    alpha_init: float = _f(1.0, "SAC: initial entropy coefficient (tuned automatically from there)")
    target_entropy: float | None = _f(None, "SAC: entropy target; auto = -action_dim")
    policy_delay: int = _f(0, "critic updates per actor update; 0 = algorithm default (TD3: 2, CrossQ: 3, SAC/DDPG: 1)")
    policy_noise: float = _f(0.2, "TD3: std of the target policy smoothing noise")
    noise_clip: float = _f(0.5, "TD3: clip of the target policy smoothing noise")
    hidden_sizes: tuple[int, ...] = _f((256, 256), "hidden layer widths of the actor MLP, and of the critic's "
                                       "unless --critic-hidden-sizes is given")
    critic_hidden_sizes: tuple[int, ...] = _f(
        (), "hidden layer widths of each critic (Q) MLP when they differ from the actor's, e.g. CrossQ's 2048 2048 "
        "(SBX's default there) with a 256 256 actor; not given: --hidden-sizes", metavar="N")
    weight_sync_period: int = _f(1, "learner updates between publishing a network and refreshing the other's copy")
    max_nonfinite_steps: int = _f(
        10, "learner updates in a row with NaN/inf gradients (each skipped) after which the run stops, keeping the "
        "last good checkpoint"
    )
    # --- devices and threads ----------------------------------------------------------------------
    actor_device: str = _f(
        "auto", "actor learner device: auto (2 GPUs: cuda:0, 1: cuda:0, none: cpu), cpu, cuda:N", metavar="DEVICE"
    )
    critic_device: str = _f(
        "auto", "critic learner device: auto (2 GPUs: cuda:1, 1: cuda:0, none: cpu), cpu, cuda:N", metavar="DEVICE"
    )
    precision: str = _f(
        "auto",
        "learner arithmetic: fp32; bf16 = bfloat16 autocast of the hidden layers (heads, weights and Adam stay "
        "fp32); auto = bf16 on a CPU learner when the CPU multiplies bf16 natively (avx512_bf16/AMX) and the update is "
        "large enough to gain (batch x widest layer^2 >= 16.8 M for SAC/TD3/DDPG, whose fp32 update is the explicit step, "
        "e.g. 256x256 at batch 256; >= 8.4 M for CrossQ, whose explicit critic step ties with bf16 there), else fp32",
        choices=PRECISIONS,
    )
    learner_step: str = _f(
        "auto", "how a learner runs its update: cuda-graph (captured once, replayed: no per-kernel launch cost), "
        "compiled-graph (torch.compile'd, then captured: fewer kernels, tens of seconds to compile), explicit (CPU, "
        "fp32: the backward pass written out by hand, no autograd graph; the same update), eager "
        "(autograd); auto = cuda-graph on a GPU learner, explicit on a CPU one where it applies, else eager",
        choices=LEARNER_STEPS,
    )
    device_replay: str = _f(
        "auto", "mirror the replay columns a learner reads on its device and gather batches there (no batch "
        "crosses PCIe); auto = on for a GPU learner, off on the CPU", choices=DEVICE_REPLAY,
    )
    updates_per_graph: int = _f(
        1, "learner updates run together from one CUDA graph replay when the last of them is due (only where "
        "batches are drawn on the device: uniform replay with the device mirror); one graph launch per N updates "
        "instead of one per update (the rest of an update's host bookkeeping stays per update); 1 = one per replay",
    )
    torch_threads: int = _f(1, "torch CPU threads per process (learners; samplers always use 1)")
    # --- evaluation, logging, checkpoints ---------------------------------------------------------
    eval_every: int = _f(5_000, "env steps between evaluations (0: only the final one)")
    eval_episodes: int = _f(10, "deterministic episodes per evaluation")
    video_every: int = _f(0, "record an evaluation's first episode as a video in <run>/videos/: the first evaluation "
                          "after every N env steps, and the final one (0: none; the evaluator renders every step of "
                          "that episode, slow on a machine without a GPU; needs the [video] extra)")
    video_format: str = _f("mp4", "file format of --video-every's videos (gif needs only imageio, not its ffmpeg)",
                           choices=VIDEO_FORMATS)
    stop_at_return: float | None = _f(None, "stop once an evaluation's mean return reaches this (auto: never)")
    logdir: str = _f("runs", "folder that receives the run folders <env>__<algo>__<seed>__<unixtime>/", metavar="DIR")
    log_interval: float = _f(10.0, "seconds between console progress lines (0: quiet)")
    tb_interval: float = _f(2.0, "seconds between TensorBoard writes of the aggregated scalars")
    checkpoint_every: int = _f(10_000, "env steps between checkpoints (0: only the final one)")
    keep_checkpoints: int = _f(2, "how many recent checkpoints to keep")
    save_replay: bool = _f(False, "at the end of each session (end of training, Ctrl-C, SIGTERM) also save the replay "
                           "buffer beside the final checkpoint, so that --resume continues with it instead of an empty "
                           "buffer (about 170 MB per 1M HalfCheetah transitions; only the newest is kept)")
    resume: str = _f("", "continue the run in this run folder from its newest checkpoint", metavar="RUN_DIR")
    # --- process layout ----------------------------------------------------------------------------
    max_restarts: int = _f(
        10, "parallel mode: restarts of one sampler, evaluator or monitor allowed within 10 minutes; one more "
        "death ends the run (an env that crashes every time)"
    )
    sampler_hang_s: float = _f(60.0, "parallel mode: seconds without a heartbeat after which a sampler is killed as "
                               "hung and restarted (raise it for a simulator whose step or reset takes longer)")
    learner_hang_s: float = _f(180.0, "parallel mode: seconds without a heartbeat after which a learner counts as "
                               "hung and the run stops")
    evaluator_hang_s: float = _f(600.0, "parallel mode: seconds without a heartbeat after which the evaluator is "
                                 "killed as hung and restarted (it beats between episodes and every few hundred steps)")
    serial: bool = _f(False, "run every role in this one process (debugging, determinism, baseline)")
    autotune: bool = _f(False, "measure this machine (cached) and plan samplers, batch, devices, threads, buffers; "
                               "flags you set win")
    plan_only: bool = _f(False, "print the autotune plan and exit without training (implies --autotune)")
    reprobe: bool = _f(False, "with --autotune: measure this machine again instead of using the cached probe results")
    probe_budget: float = _f(60.0, "with --autotune: seconds of measuring when probing (process start-ups add a few)")

    # ------------------------------------------------------------------------------------------------
    def validate(self) -> TrainConfig:
        """Check every field; raise ConfigError with one line naming the flag. Returns self."""

        def bad(name: str, what: str) -> ConfigError:
            value = getattr(self, name)
            return ConfigError(f"--{name.replace('_', '-')} {value!r} is invalid: {what}")

        check_values(self, bad)  # config_values.py: types, signs, ranges, choices, impossible combinations
        check_bounds(self, bad)  # config_bounds.py: counts past this machine's limits (finding 12)
        check_remote(self, bad)
        return self

    @property
    def utd_per_row(self) -> float:
        """Critic updates per row stored: ``utd`` for plain rows; with ``--her-goals K`` each env step stores 1 + K
        rows, and ``utd`` stays updates per env step (roles/her.py)."""
        return self.utd / (1 + self.her_goals)

    @property
    def bf16_starts_late(self) -> bool:
        """Whether this run's fp32 CPU update would be an explicit step that beats bf16 up to larger updates
        (``BF16_LATE_ALGOS``; devices.bf16_min_work)."""
        return self.algo in BF16_LATE_ALGOS and self.learner_step in ("auto", "explicit")

    @property
    def widest_hidden(self) -> int:
        """The widest hidden layer of the actor and critic MLPs (what sets a CPU update's cost per row)."""
        return max((*self.hidden_sizes, *self.critic_hidden_sizes), default=1)

    @property
    def sampler_rows(self) -> int:
        """Sampler rows of a run: ``sampler-0 .. sampler-(samplers-1)`` are local processes, the next
        ``remote_samplers`` rows are remote actors (each row its own ring, stats row and quota)."""
        return self.samplers + self.remote_samplers


    def resolve(self) -> TrainConfig:
        """A validated copy with the ``auto`` values filled in (devices, precision, policy delay, actor lr)."""
        from spreeze_like.devices import resolve_devices, resolve_precision  # local: no torch on config import

        self.validate()
        actor_device, critic_device = resolve_devices(self.actor_device, self.critic_device)
        # --learner-step explicit asks for fp32 outright
        precision = resolve_precision("fp32" if self.learner_step == "explicit" and self.precision == "auto"
                                      else self.precision, (actor_device, critic_device),
                                      update=(self.batch_size, self.widest_hidden), explicit=self.bf16_starts_late)
        if self.learner_step in ("cuda-graph", "compiled-graph") and not all(
                d.startswith("cuda") for d in (actor_device, critic_device)):
            raise ConfigError(f"--learner-step {self.learner_step} needs both learners on CUDA (actor "
                              f"{actor_device}, critic {critic_device}); use --learner-step auto or eager")
        if self.learner_step == "explicit" and (self.algo not in EXPLICIT_ALGOS or precision != "fp32" or not all(
                d == "cpu" for d in (actor_device, critic_device))):
            raise ConfigError(f"--learner-step explicit needs {', '.join(EXPLICIT_ALGOS).upper()} with both learners "
                              f"on the CPU in fp32 (here: {self.algo}, {precision}, actor {actor_device}, critic "
                              f"{critic_device}); use --learner-step auto or eager")
        if self.updates_per_graph > 1 and self.prioritized:
            raise ConfigError("--updates-per-graph above 1 draws every batch on the device; prioritized replay draws "
                              "on the host: use --updates-per-graph 1 with --prioritized")
        delay = self.policy_delay or default_policy_delay(self.algo)
        actor_lr = auto_actor_lr(self.env, self.algo, self.presets) if self.actor_lr is None else self.actor_lr
        return dataclasses.replace(
            self, actor_device=actor_device, critic_device=critic_device, precision=precision, policy_delay=delay,
            actor_lr=actor_lr,
        )

    # --- JSON ------------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (tuples become lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "config") -> TrainConfig:
        """Build from a dict, rejecting unknown keys and wrongly typed values with one line (a run's
        config.json loads as it is: its ``sources`` map is not a setting and is left out)."""
        return dataclasses.replace(cls(), **coerce_fields(cls, settings_of(data), source))

    @classmethod
    def from_json_file(cls, path: str | Path) -> TrainConfig:
        return cls.from_dict(load_json_file(path), source=str(path))
