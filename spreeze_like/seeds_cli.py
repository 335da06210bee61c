"""The command line of ``python -m spreeze_like.seeds``: its own flags, and the run flags it checks and passes on.

Its flags are ``--seeds``, ``--vary``, ``--reach``, ``--jobs``, ``--logdir``, ``--resume`` and
``--progress-every``; every other token is ``python -m spreeze_like.run``'s and is checked here once, by that command's own parser and
the env's preset (:func:`spreeze_like.flags.parse_command_line`, :func:`spreeze_like.layering.lay_presets`),
so that a bad value is one ``error:`` line before any folder or process exists. The run flags that
the seeds command sets itself (``--seed``, ``--logdir``, ``--resume``) or that train nothing
(``--plan-only``, ``--list-presets``) are refused. With ``--vary`` (:mod:`spreeze_like.seeds_grid`) every
cell of the grid is checked the same way, its flags after the command's.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field

from spreeze_like.autotune.hardware import usable_cores
from spreeze_like.config import TrainConfig
from spreeze_like.config_fields import OneLineParser
from spreeze_like.errors import ConfigError
from spreeze_like.seeds_grid import Cell, parse_vary

MAX_SEEDS = 1000
PROG = "python -m spreeze_like.seeds"


@dataclass
class SeedsCommand:
    """What the command line asks for. ``jobs`` None: the saved count of a resumed folder."""

    seeds: list[int]
    jobs: int | None
    logdir: str
    resume: str
    progress_every: float
    run_args: list[str]
    config: TrainConfig = field(default_factory=TrainConfig)
    typed_env: str | None = None
    jobs_reason: str = ""
    override_args: list[str] = field(default_factory=list)  # run flags typed with --resume: every seed takes them
    cells: list[Cell] = field(default_factory=list)  # --vary: the grid's settings (none: one setting)
    reach: float | None = None  # --reach: the evaluation return whose first crossing is reported
    algo: str = ""  # the runs' algorithm, for the folder name and header ("sac/crossq" where --vary varies it)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG,
        description="Train one experiment over several seeds: each seed is a python -m spreeze_like.run with these "
                    "run flags, --jobs of them at a time; ends with every seed's final evaluation and their mean, "
                    "std, median, IQM and range.",
        epilog="Every other flag is python -m spreeze_like.run's (see its --help) and goes to every seed, e.g. "
               f"{PROG} --seeds 1-5 --env HalfCheetah-v5 --total-steps 100000.",
    )
    parser.add_argument("--seeds", nargs="+", metavar="S", help="the seeds: numbers and ranges, e.g. 1-5 or 1 2 7")
    parser.add_argument("--vary", action="append", default=[], metavar="NAME=V1,V2",
                        help="compare settings: every value of the run setting NAME, each over every seed; several "
                             "--vary give their product, e.g. --vary tau=0.005,0.02 --vary batch-size=256,1024 "
                             "(hidden-sizes=64x64,256x256; a switch: prioritized=on,off)")
    parser.add_argument("--reach", type=float, default=None, metavar="RETURN",
                        help="also report how soon each run's evaluation first reached this return: its env steps and "
                             "wall seconds, with their median and range per setting (default: off)")
    parser.add_argument("--jobs", default="auto", metavar="N",
                        help="runs at once (each seed, of each --vary setting); auto = this machine's usable cores "
                             "over the busy processes of one run "
                             "(1 for --serial; samplers + 2 learners otherwise), as far as their replays fit in 80%% "
                             "of the free memory (/dev/shm for parallel runs); 1 with --autotune (default: auto)")
    parser.add_argument("--logdir", default="runs", metavar="DIR",
                        help="folder that receives the seeds folder (default: runs)")
    parser.add_argument("--resume", default="", metavar="FOLDER",
                        help="continue a seeds folder: each unfinished seed from its newest checkpoint")
    parser.add_argument("--progress-every", type=float, default=60.0, metavar="S",
                        help="seconds between progress lines (each running seed's newest evaluation); 0: none "
                             "(default: 60)")
    return parser


def parse_seed_list(tokens: list[str]) -> list[int]:
    """``["1-3", "7"]`` (or ``"1,2"``) -> ``[1, 2, 3, 7]``: non-negative, each once, in the order given."""
    seeds: list[int] = []
    for token in (part for text in tokens for part in text.split(",") if part):
        try:
            if "-" in token.strip("-"):
                first, last = (int(x) for x in token.split("-", 1))
                if last < first:
                    raise ValueError
                chosen = list(range(first, last + 1))
            else:
                chosen = [int(token)]
        except ValueError:
            raise ConfigError(f"--seeds {token}: not a seed or a range of seeds; give numbers and ranges such as "
                              "--seeds 1-5 or --seeds 1 2 7") from None
        if any(s < 0 for s in chosen):
            raise ConfigError(f"--seeds {token}: seeds are non-negative integers")
        if len(seeds) + len(chosen) > MAX_SEEDS:
            raise ConfigError(f"--seeds: more than {MAX_SEEDS} seeds; give fewer")
        seeds.extend(s for s in chosen if s not in seeds)
    return seeds


def parse_seeds_command(argv: list[str]) -> SeedsCommand:
    """Parse and check the command line (raises ConfigError, or argparse's one line and exit 2)."""
    ns, run_args = build_parser().parse_known_args(argv)
    if ns.progress_every < 0:
        raise ConfigError("--progress-every must be >= 0 (0: no progress lines)")
    if ns.reach is not None and not math.isfinite(ns.reach):
        raise ConfigError(f"--reach {ns.reach}: give a finite evaluation return")
    jobs = _parse_jobs(ns.jobs)
    if ns.resume:
        if ns.vary:
            raise ConfigError("--resume continues a folder with the settings it has; drop --vary (or start a new "
                              "folder without --resume)")
        if ns.seeds:
            raise ConfigError("--resume continues the seeds its folder names; drop --seeds (or start a new folder "
                              "without --resume)")
        _refuse_own_flags(run_args)
        return SeedsCommand([], jobs, ns.logdir, ns.resume, ns.progress_every, run_args,
                            typed_env=_typed_env(run_args), reach=ns.reach)
    if not ns.seeds:
        raise ConfigError("--seeds is required: the seeds to run, e.g. --seeds 1-5 (or --resume FOLDER)")
    seeds = parse_seed_list(ns.seeds)
    if not seeds:
        raise ConfigError("--seeds names no seed; give numbers and ranges such as --seeds 1-5")
    cells = parse_vary(ns.vary, run_args)
    if len(cells) * len(seeds) > MAX_SEEDS:
        raise ConfigError(f"--vary and --seeds: {len(cells)} settings x {len(seeds)} seeds is more than {MAX_SEEDS} "
                          "runs; give fewer")
    config, dims = checked_run_config(run_args)
    configs = [cell_config(run_args, cell) for cell in cells] or [config]
    command = SeedsCommand(seeds, jobs, ns.logdir, "", ns.progress_every, run_args, config,
                           typed_env=_typed_env(run_args), cells=cells, reach=ns.reach,
                           algo="/".join(dict.fromkeys(c.algo for c in configs)))
    widest = max(configs, key=_busy)  # jobs: the cell whose runs keep the most processes busy and hold the most replay
    command.jobs, command.jobs_reason = _jobs(jobs, widest, len(seeds) * max(1, len(cells)),
                                              max(replay_bytes(c, *dims) for c in configs))
    return command


def cell_config(run_args: list[str], cell: Cell) -> TrainConfig:
    """A cell's runs' settings: the command's run flags, then the cell's (checked as a run checks them)."""
    try:
        return run_config([*run_args, *cell.args])
    except ConfigError as exc:
        raise ConfigError(f"--vary {cell.label}: {exc}") from None


def _parse_jobs(text: str) -> int | None:
    if text.lower() == "auto":
        return None
    try:
        jobs = int(text)
    except ValueError:
        jobs = 0
    if jobs < 1:
        raise ConfigError(f"--jobs {text}: give a number of seeds to run at once (>= 1), or auto")
    return jobs


def _typed_env(run_args: list[str]) -> str | None:
    """The env id typed on this command line, if any (``--env ID`` or ``--env=ID``)."""
    for i, token in enumerate(run_args):
        if token.startswith("--env="):
            return token.split("=", 1)[1]
        if token == "--env" and i + 1 < len(run_args):
            return run_args[i + 1]
    return None


def _refuse_own_flags(run_args: list[str]) -> None:
    for token in run_args:
        flag = token.split("=", 1)[0]
        if flag in ("--seed", "--logdir", "--resume"):
            raise ConfigError(f"{flag} is the seeds command's to set (use --seeds, and its own --logdir / --resume)")
        if flag in ("--plan-only", "--list-presets"):
            raise ConfigError(f"{flag} trains nothing; run python -m spreeze_like.run {flag} instead")


def run_config(run_args: list[str]) -> TrainConfig:
    """The run flags checked as ``python -m spreeze_like.run`` checks them, with the env's preset laid under
    (the env itself is neither imported nor made: :func:`check_env`)."""
    from spreeze_like.flags import parse_command_line
    from spreeze_like.layering import lay_presets

    _refuse_own_flags(run_args)
    line = parse_command_line(run_args)
    config, _sources = lay_presets(line.config, line.sources)
    return config.resolve()


def check_env(config: TrainConfig) -> tuple[int, int]:
    """Make the env and take a step (with --her-goals: relabel), once here rather than failing in every seed;
    returns its (obs_dim, act_dim)."""
    from spreeze_like.roles.her import checked_env_info

    info = checked_env_info(config.env, config.env_kwargs, config.her_goals)
    return info.obs_dim, info.act_dim


def checked_run_config(run_args: list[str]) -> tuple[TrainConfig, tuple[int, int]]:
    """:func:`run_config`, then :func:`check_env`: the config and the env's (obs_dim, act_dim)."""
    config = run_config(run_args)
    return config, check_env(config)


def replay_bytes(config: TrainConfig, obs_dim: int, act_dim: int) -> float:
    """What one run's replay takes: shared memory in the parallel mode, the process's memory in the serial one."""
    from spreeze_like.autotune.plan import replay_row_bytes

    return config.buffer_size * replay_row_bytes(obs_dim, act_dim, config.prioritized)


def memory_free(serial: bool) -> tuple[float, str]:
    """(bytes, where) a run's replay comes from: available memory, and /dev/shm's free space for a parallel run."""
    import psutil

    from spreeze_like.ipc.segment import shm_free_bytes

    available = float(psutil.virtual_memory().available)
    if serial:
        return available, "available memory"
    try:
        shm = float(shm_free_bytes()[0])
    except OSError:
        return available, "available memory"
    return min(available, shm), "/dev/shm" if shm < available else "available memory"


MEMORY_SHARE = 0.8  # of the free memory the seeds' replays may plan to take together


def _busy(config: TrainConfig) -> int:
    """The processes one run of ``config`` keeps busy."""
    return 1 if config.serial else config.samplers + 2


def _jobs(jobs: int | None, config: TrainConfig, n_seeds: int, replay: float = 0.0) -> tuple[int, str]:
    """How many runs (seeds, times the cells of a grid) run at once, and why (for the header)."""
    busy = _busy(config)
    if config.autotune:
        if jobs not in (None, 1):
            raise ConfigError("--autotune plans the whole machine for one run; with --jobs above 1 the runs' probes "
                              "would measure each other: use --jobs 1, or give the settings (python -m "
                              "spreeze_like.run --autotune --plan-only prints a plan) without --autotune")
        return 1, "--autotune: one run at a time"
    if jobs is not None:
        return jobs, "--jobs"
    cores = usable_cores()
    by_cores = max(1, min(n_seeds, cores // busy))
    reason = f"{cores} usable cores, {busy} busy process{'es' if busy > 1 else ''} per run"
    if replay > 0:
        free, where = memory_free(config.serial)
        by_memory = int(MEMORY_SHARE * free // replay)
        if by_memory < by_cores:
            return max(1, by_memory), (f"{reason}; each run's replay ({replay / 2**30:.2f} GiB, --buffer-size "
                                       f"{config.buffer_size:,}) leaves room for {by_memory} in {where}")
    return by_cores, reason
