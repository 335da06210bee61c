"""The allowed values of each run setting, and the checks that refuse any other.

:meth:`spreeze_like.config.TrainConfig.validate` calls :func:`check_values` (types, signs, ranges,
choices, and the combinations that cannot run), then :mod:`spreeze_like.config_bounds` (upper bounds
on counts and sizes). Each check raises through the ``bad`` callback that validate passes:
``bad(field, what is allowed)`` builds a :class:`~spreeze_like.errors.ConfigError` of one line that
names the flag. The choice lists below are also the flags' ``choices`` (the fields of ``config.py``)
and are read by the roles that act on them. Owns no process or shared resource.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import typing
from typing import Any

from spreeze_like.errors import ConfigError

if typing.TYPE_CHECKING:
    from spreeze_like.config import TrainConfig

Bad = typing.Callable[[str, str], ConfigError]

DEFAULT_ENV_ID = "Pendulum-v1"  # the one env id in the code: what a run trains on when none is given
ALGOS = ("sac", "td3", "ddpg", "crossq")
PRECISIONS = ("auto", "fp32", "bf16")
LEARNER_STEPS = ("auto", "eager", "explicit", "cuda-graph", "compiled-graph")  # algos/graphed.py
DEVICE_REPLAY = ("auto", "on", "off")  # roles/batches.py
# --n-step's bound: past a few dozen steps the off-policy bias of uncorrected n-step returns dominates, and each
# truncated episode drops N - 1 of its steps (roles/nstep.py); 100 only catches a typo
MAX_N_STEP = 100
MAX_HER_GOALS = 32  # the HER paper found 4 to 8 best; more only stores copies of the same steps
HER_STRATEGIES = ("future", "final", "episode")  # roles/her.py; SB3's names
VIDEO_FORMATS = ("mp4", "gif")  # roles/eval_video.py: mp4 needs imageio-ffmpeg (the [video] extra), gif imageio
_DEVICE_RE = re.compile(r"^(auto|cpu|cuda|cuda:\d+|mps)$")

# Whole numbers >= 1, and >= 0 (0: off, none or auto, as each field's help line says)
POSITIVE_INTS = ("total_steps", "envs_per_sampler", "buffer_size", "updates_per_graph", "batch_size",
                 "weight_sync_period", "torch_threads", "eval_episodes", "keep_checkpoints", "max_nonfinite_steps")
COUNT_INTS = ("learning_starts", "eval_every", "video_every", "checkpoint_every", "policy_delay", "seed", "max_restarts",
              "samplers", "remote_samplers", "remote_envs_per_sampler", "remote_batch")


def check_env_kwargs(env_kwargs: Any, bad: Bad) -> None:
    """``--env-kwargs``: a JSON object of keyword arguments (names are strings, values JSON values, so that
    config.json holds them exactly); ``render_mode`` is refused: samplers render nothing (``--video-every`` makes
    the one env it renders itself)."""
    if not isinstance(env_kwargs, dict) or not all(isinstance(k, str) and k.isidentifier() for k in env_kwargs):
        raise bad("env_kwargs", "give a JSON object of keyword arguments, e.g. '{\"ctrl_cost_weight\": 0.05}'")
    if "render_mode" in env_kwargs:
        raise bad("env_kwargs", "a training run renders nothing; watch a trained policy with python -m "
                                "spreeze_like.evaluate RUN --render human, or record videos with --video-every N")
    try:
        json.dumps(env_kwargs, allow_nan=False)
    except (TypeError, ValueError):
        raise bad("env_kwargs", "values must be JSON values (numbers, strings, true/false, null, lists, objects), "
                                "finite") from None


# Values a field's declared type takes, for fields set from Python (the flags and config.json are parsed to these);
# whole-number fields have their own checks below, with their ranges
_KINDS: dict[str, tuple[tuple[type, ...], str]] = {
    "float": ((int, float), "a number (a Python int or float: config.json holds it)"),
    "str": ((str,), "a string"),
    "bool": ((bool,), "True or False"),
}


def check_types(cfg: TrainConfig, bad: Bad) -> None:
    """A float, string or bool field holding anything else (``train(gamma="0.99")`` was a TypeError traceback deep
    in a range check; ``train(env=5)`` an AttributeError in the preset lookup)."""
    for f in dataclasses.fields(cfg):
        declared = str(f.type)
        base = declared.removesuffix(" | None")
        value = getattr(cfg, f.name)
        if base not in _KINDS or (value is None and base != declared):
            continue
        kinds, words = _KINDS[base]
        if not isinstance(value, kinds) or (isinstance(value, bool) and base != "bool"):
            raise bad(f.name, f"must be {words}" + (" or None (auto)" if base != declared else ""))


def check_values(cfg: TrainConfig, bad: Bad) -> None:
    """Refuse the first field of ``cfg`` whose value no run can take (``bad`` builds the error)."""
    if not isinstance(cfg.env, str) or not cfg.env.strip():
        raise bad("env", f"give a gymnasium env id such as {DEFAULT_ENV_ID}")
    check_types(cfg, bad)
    check_env_kwargs(cfg.env_kwargs, bad)
    if cfg.algo not in ALGOS:
        raise bad("algo", f"choose one of {', '.join(ALGOS)}")
    if cfg.precision not in PRECISIONS:
        raise bad("precision", f"choose one of {', '.join(PRECISIONS)}")
    if cfg.learner_step not in LEARNER_STEPS:
        raise bad("learner_step", f"choose one of {', '.join(LEARNER_STEPS)}")
    if cfg.device_replay not in DEVICE_REPLAY:
        raise bad("device_replay", f"choose one of {', '.join(DEVICE_REPLAY)}")
    for name in POSITIVE_INTS:
        if not isinstance(getattr(cfg, name), int) or getattr(cfg, name) < 1:
            raise bad(name, "must be a whole number >= 1")
    for name in COUNT_INTS:
        if not isinstance(getattr(cfg, name), int) or getattr(cfg, name) < 0:
            raise bad(name, "must be a whole number >= 0")
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if isinstance(value, float) and not math.isfinite(value):
            raise bad(f.name, "must be a finite number")
    for name in ("sampler_hang_s", "learner_hang_s", "evaluator_hang_s", "remote_place_timeout_s"):
        if not getattr(cfg, name) >= 1.0:
            raise bad(name, "must be >= 1 second")
    for name in ("utd", "actor_lr", "critic_lr", "alpha_lr", "alpha_init"):
        value = getattr(cfg, name)
        if value is not None and not value > 0:  # None: actor_lr's auto
            raise bad(name, "must be > 0")
    for name in ("exploration_noise", "policy_noise", "noise_clip", "log_interval", "tb_interval", "time_limit_s"):
        if not getattr(cfg, name) >= 0:
            raise bad(name, "must be >= 0")
    if not 0.0 <= cfg.gamma < 1.0:
        raise bad("gamma", "must be in [0, 1)")
    if not isinstance(cfg.n_step, int) or not 1 <= cfg.n_step <= MAX_N_STEP:
        raise bad("n_step", f"must be an integer in [1, {MAX_N_STEP}] (1: one-step TD; 3 to 5 is usual)")
    if not isinstance(cfg.her_goals, int) or not 0 <= cfg.her_goals <= MAX_HER_GOALS:
        raise bad("her_goals", f"must be an integer in [0, {MAX_HER_GOALS}] (0: off; 4 is HER's usual)")
    if cfg.her_strategy not in HER_STRATEGIES:
        raise bad("her_strategy", f"choose one of {', '.join(HER_STRATEGIES)}")
    if cfg.video_format not in VIDEO_FORMATS:
        raise bad("video_format", f"choose one of {', '.join(VIDEO_FORMATS)}")
    if cfg.her_goals and cfg.n_step > 1:
        raise bad("her_goals", "does not combine with --n-step > 1 (a relabelled n-step row needs each of its "
                               "N rewards recomputed): drop one of the two")
    if cfg.her_goals and cfg.remote_samplers:
        raise bad("her_goals", "is not built for remote samplers (--remote-samplers): run HER with local "
                               "samplers")
    if not 0.0 < cfg.tau <= 1.0:
        raise bad("tau", "must be in (0, 1]")
    if not 0.0 <= cfg.priority_beta <= 1.0:
        raise bad("priority_beta", "must be in [0, 1]")
    if cfg.batch_size > cfg.buffer_size:
        raise bad("batch_size", f"must not exceed --buffer-size {cfg.buffer_size}")
    if not cfg.hidden_sizes or any(not isinstance(h, int) or h < 1 for h in cfg.hidden_sizes):
        raise bad("hidden_sizes", "give one or more layer widths >= 1, e.g. --hidden-sizes 256 256")
    if any(not isinstance(h, int) or h < 1 for h in cfg.critic_hidden_sizes):
        raise bad("critic_hidden_sizes", "give one or more layer widths >= 1, e.g. --critic-hidden-sizes 2048 "
                                         "2048 (or leave it out: the critic then has --hidden-sizes)")
    for name in ("actor_device", "critic_device"):
        if not isinstance(getattr(cfg, name), str) or not _DEVICE_RE.match(getattr(cfg, name)):
            raise bad(name, "use auto, cpu, cuda or cuda:N")
    if not isinstance(cfg.logdir, str) or not cfg.logdir:
        raise bad("logdir", "give a folder path")
    if not cfg.probe_budget >= 0.5:
        raise bad("probe_budget", "must be >= 0.5 seconds (the probes need time to measure)")
