"""Upper bounds on a run's counts and sizes, and the checks that refuse values past them.

Review finding 12: a count past these bounds would exhaust processes, threads or memory, or stall the
run without a word, so :meth:`spreeze_like.config.TrainConfig.validate` calls :func:`check_bounds` and
:func:`check_remote` and a bad value is refused up front in one line naming the flag (through the
``bad`` callback it passes: ``bad(field, what is allowed)`` builds that ConfigError).
docs/reliability.md, "Absurd flag values", gives each bound's reasoning and measurement.
"""

from __future__ import annotations

import itertools
import os
import typing

from spreeze_like.autotune.hardware import usable_cores as machine_cores  # the one count of this process's cores
from spreeze_like.errors import ConfigError
from spreeze_like.remote.address import parse_ray_address

if typing.TYPE_CHECKING:
    from spreeze_like.config import TrainConfig

Bad = typing.Callable[[str, str], ConfigError]

MAX_ENVS = 4096  # samplers x envs_per_sampler: a MuJoCo env holds about 1.2 MiB (measured), 4096 about 5 GiB
MAX_EVAL_EPISODES = 1000  # the evaluator steps one env per episode, all at once
MAX_UTD = 1024  # far past published replay ratios (REDQ: 20); past it every env step waits on 1000+ updates
MAX_BUFFER_SIZE = 1 << 40  # the native sum tree's capacity limit; a uniform replay is refused at the same size
MIN_REPLAY_ROW_BYTES = 32  # a replay row at obs_dim = act_dim = 1 (replay/storage.py's columns)
NETWORK_COPIES = 12  # fp32 copies of the hidden weights a run holds at least: nets, targets, Adam moments
PER_CORE = 4  # processes or threads per core past which more of them only time-share: samplers, torch threads
# Remote samplers run on other machines, so this machine's cores do not bound them; each still costs a
# ring in this machine's /dev/shm, a stats row and the bridge process's calls, and past a few hundred
# one bridge process would be the bottleneck (docs: RAY_REMOTE_SAMPLERS.md, sizing).
MAX_REMOTE_SAMPLERS = 256
MAX_REMOTE_BATCH = 16384  # rows per collect call: the design note's upper clamp (a 26.6 ms call across raylets)


def machine_memory_bytes() -> int:
    """Physical memory of this machine in bytes (0 where the OS does not say)."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return 0


def max_per_machine() -> int:
    """The most samplers or torch threads a run may ask for here: PER_CORE per core, at least 16."""
    return max(16, PER_CORE * machine_cores())


def check_bounds(cfg: TrainConfig, bad: Bad) -> None:
    """Counts that would exhaust processes, threads or memory, or stall the run (review finding 12)."""
    if not 0.0 <= cfg.priority_alpha <= 1.0:  # else refused only inside the learners, after the start-up
        raise bad("priority_alpha", "must be in [0, 1] (0: uniform, 1: fully proportional to |TD error|)")
    most, cores = max_per_machine(), machine_cores()
    for name, what in (("samplers", "sampler processes"), ("torch_threads", "torch threads per process")):
        if getattr(cfg, name) > most:
            raise bad(name, f"at most {most} {what} here ({PER_CORE} per core, {cores} cores): more only "
                            "time-share the cores while each costs memory")
    envs = cfg.samplers * cfg.envs_per_sampler
    if envs > MAX_ENVS:
        raise bad("envs_per_sampler", f"--samplers {cfg.samplers} x --envs-per-sampler {cfg.envs_per_sampler} "
                                      f"= {envs:,} envs, more than {MAX_ENVS:,}; use fewer")
    if cfg.eval_episodes > MAX_EVAL_EPISODES:
        raise bad("eval_episodes", f"at most {MAX_EVAL_EPISODES} (the evaluator steps one env per episode at once)")
    if cfg.utd > MAX_UTD:
        raise bad("utd", f"at most {MAX_UTD} updates per env step (past it every env step waits for over a "
                         "thousand updates and the run seems to stall)")
    if cfg.buffer_size > MAX_BUFFER_SIZE:
        raise bad("buffer_size", f"at most 2^40 = {MAX_BUFFER_SIZE:,} transitions (the sum tree's limit)")
    memory = machine_memory_bytes()
    gib = memory / 2**30
    if memory and cfg.buffer_size * MIN_REPLAY_ROW_BYTES > memory:
        raise bad("buffer_size", f"needs at least {cfg.buffer_size * MIN_REPLAY_ROW_BYTES / 2**30:,.0f} GiB of "
                                 f"replay ({MIN_REPLAY_ROW_BYTES} bytes a transition at the smallest env), more "
                                 f"than this machine's {gib:,.0f} GiB of memory")
    # hidden-to-hidden weights, plus one input and one output weight per unit (the env's sizes are not known here)
    for name in ("hidden_sizes", "critic_hidden_sizes"):
        widths = getattr(cfg, name)
        weights = sum(a * b for a, b in itertools.pairwise(widths)) + 2 * sum(widths)
        if memory and weights * 4 * NETWORK_COPIES > memory:
            raise bad(name, f"{weights:,} hidden weights per network need at least "
                            f"{weights * 4 * NETWORK_COPIES / 2**30:,.0f} GiB ({NETWORK_COPIES} fp32 copies: "
                            f"networks, targets, Adam moments), more than this machine's {gib:,.0f} GiB")


def check_remote(cfg: TrainConfig, bad: Bad) -> None:
    """--ray and the remote sampler counts go together, in the parallel mode only."""
    if cfg.ray is not None:
        if cfg.serial:
            raise bad("ray", "remote samplers are a parallel-mode feature; drop --serial (with --autotune, whose "
                             "plan may choose the serial mode, add --no-serial)")
        if cfg.remote_samplers < 1:
            raise bad("ray", "give --remote-samplers N >= 1 with it (how many sampler actors to run there)")
        parse_ray_address(cfg.ray)  # a malformed address: one line now, not in the bridge process later
    elif cfg.remote_samplers > 0:
        raise bad("remote_samplers", "needs --ray ADDRESS (the Ray cluster to run them on)")
    if cfg.samplers < 1 and cfg.remote_samplers < 1:
        raise bad("samplers", "must be >= 1 (0 only with --remote-samplers N >= 1 and --ray: all sampling remote)")
    if cfg.remote_samplers > MAX_REMOTE_SAMPLERS:
        raise bad("remote_samplers", f"at most {MAX_REMOTE_SAMPLERS} (each is a ring in this machine's /dev/shm "
                                     "and calls of the one bridge process)")
    if cfg.remote_envs_per_sampler > MAX_ENVS:
        raise bad("remote_envs_per_sampler", f"at most {MAX_ENVS:,} envs in one remote sampler")
    if cfg.remote_batch > MAX_REMOTE_BATCH:
        raise bad("remote_batch", f"at most {MAX_REMOTE_BATCH:,} transitions per call (0: auto)")
