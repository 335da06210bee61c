"""``spreeze_like.train(config)``: the Python entry point, the same run as the CLI.

(The module is ``training``, not ``train``, so that the package attribute ``spreeze_like.train``
stays the function: importing a submodule named ``train`` would replace it with the module.)

It resolves the config (``auto`` devices and delays), prepares the run folder (new, or reopened on
``resume``), and runs either the serial mode or the parallel mode. The parallel mode lives in
``spreeze_like.supervisor.run_parallel(config, context)``; until that module exists a non-serial
run falls back to the serial mode and says so in one line.

With ``autotune`` the settings the user did not choose come from the autotuner's plan
(``spreeze_like.autotune``), which is saved as ``plan.json`` in the run folder.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

from spreeze_like.config import TrainConfig
from spreeze_like.envs import env_info
from spreeze_like.errors import ConfigError
from spreeze_like.rundir import RunContext, prepare_run

__all__ = ["TrainResult", "parallel_entry", "train"]


@dataclass
class TrainResult:
    """What a finished run reports (``spreeze_like.train`` returns it; the CLI prints it)."""

    run_dir: Path
    env_steps: int
    critic_updates: int
    actor_updates: int
    episodes: int
    final_eval_return: float
    final_eval_returns: tuple[float, ...]
    # (env step, mean eval return, wall seconds since this session started) of every evaluation
    evals: list[tuple[int, float, float]] = field(default_factory=list)
    stopped_early: bool = False  # an evaluation reached config.stop_at_return
    wall_s: float = 0.0
    mode: str = "serial"


def parallel_entry() -> Callable[[TrainConfig, RunContext], TrainResult] | None:
    """``spreeze_like.supervisor.run_parallel`` if the parallel mode is built, else None."""
    try:
        from spreeze_like.supervisor import run_parallel
    except ModuleNotFoundError as exc:
        if exc.name == "spreeze_like.supervisor":
            return None
        raise
    return run_parallel


def train(
    config: TrainConfig | None = None,
    print_fn: Callable[[str], None] = print,
    explicit: Collection[str] | None = None,
    **overrides: object,
) -> TrainResult:
    """Train an agent and return the final evaluation, run folder and counters.

    Args:
        config: the settings (default: ``TrainConfig()``, SAC on Pendulum-v1).
        print_fn: where progress lines go (``print`` by default).
        explicit: with ``autotune``, the fields the user set (kept over the plan); fields off their
            default and ``overrides`` always count as set.
        overrides: field values replacing those of ``config``, e.g. ``train(total_steps=5000)``.

    Raises:
        spreeze_like.errors.SpreezeError: any bad input (config, env, logdir, checkpoint), one line.
    """
    config = dataclasses.replace(config or TrainConfig(), **overrides)  # type: ignore[arg-type]
    plan = None
    if config.plan_only:
        raise ConfigError("plan_only trains nothing: run python -m spreeze_like.run --plan-only, or call "
                          "spreeze_like.autotune.apply.autotune(config) for the plan")
    if config.autotune and config.resume:
        print_fn("[spreeze] --resume keeps the run's saved settings; the autotune plan is not applied again")
    elif config.autotune:
        from spreeze_like.autotune.apply import autotune

        config, plan = autotune(config, set(explicit or ()) | set(overrides), print_fn)
    config = config.resolve()
    env_info(config.env)  # a bad env fails here, before a run folder is created for it
    run = None if config.serial else parallel_entry()
    if run is None and not config.serial:
        print_fn("[spreeze] the parallel mode is not built yet; running every role in this process (--serial)")
        config = dataclasses.replace(config, serial=True)
    context = prepare_run(config)
    if plan is not None:
        from spreeze_like.autotune.apply import save_plan

        save_plan(plan, context.run_dir)
    print_fn(
        f"[spreeze] {config.algo} on {config.env}, {'serial' if config.serial else 'parallel'} mode, "
        f"actor on {config.actor_device}, critic on {config.critic_device}; run folder {context.run_dir}"
        + (f" (resuming at env step {context.start_step:,})" if context.payload else "")
    )
    if run is None:
        from spreeze_like.serial import run_serial

        return run_serial(config, context, print_fn)
    return run(config, context)
