"""``spreeze_like.train(config)``: the Python entry point, the same run as the CLI.

(The module is ``training``, not ``train``, so that the package attribute ``spreeze_like.train``
stays the function: importing a submodule named ``train`` would replace it with the module.)

It lays the env's preset under the user's settings (:mod:`spreeze_like.layering`), resolves the
config (``auto`` devices and delays), prepares the run folder (new, or reopened on ``resume``; its
config.json records the source of every value), prints the header with the settings that are not
built-in defaults, and runs the mode :mod:`spreeze_like.modes` finds: the parallel mode
(``spreeze_like.supervisor.run_parallel``) or, with ``serial`` or where the parallel mode is not
built, the serial mode. Both return a :class:`~spreeze_like.results.TrainResult`; neither imports
this module.

With ``autotune`` the settings the user did not choose come from the autotuner's plan
(``spreeze_like.autotune``), which is saved as ``plan.json`` in the run folder.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING

from spreeze_like.checkpoint import interrupted_before_training
from spreeze_like.config import TrainConfig
from spreeze_like.console import say
from spreeze_like.errors import ConfigError
from spreeze_like.layering import complete_sources, lay_presets, mark_planned, python_sources, settings_lines
from spreeze_like.modes import parallel_entry, serial_entry
from spreeze_like.results import TrainResult
from spreeze_like.roles.her import checked_env_info
from spreeze_like.rundir import prepare_run
from spreeze_like.structured_obs import describe

if TYPE_CHECKING:  # the autotuner is imported only when a run asks for it
    from spreeze_like.autotune.plan import Plan
    from spreeze_like.modes import ModeEntry

__all__ = ["TrainResult", "train"]


def train(
    config: TrainConfig | None = None,
    print_fn: Callable[[str], None] = say,
    explicit: Collection[str] | None = None,
    sources: Mapping[str, str] | None = None,
    **overrides: object,
) -> TrainResult:
    """Train an agent and return the final evaluation, run folder and counters.

    Args:
        config: the settings (default: ``TrainConfig()``, SAC on the default env).
        print_fn: where progress lines go (stdout by default, :func:`spreeze_like.console.say`: a closed pipe
            drops them and the run goes on).
        explicit: names of fields the user set even where they equal the default (kept over the env's
            preset and the autotune plan); fields off their default and ``overrides`` always count as set.
        sources: where each set field came from (the CLI passes ``flag`` / ``config-file`` / ``resume``
            from :func:`spreeze_like.flags.parse_command_line`); given, it replaces the guess from defaults.
        overrides: field values replacing those of ``config``, e.g. ``train(total_steps=5000)``.

    Raises:
        spreeze_like.errors.SpreezeError: any bad input (config, preset file, env, logdir, checkpoint), one line.
    """
    config = dataclasses.replace(config or TrainConfig(), **overrides)  # type: ignore[arg-type]
    config.validate()  # before the presets are looked up by its env, as the command line's parse does
    try:
        config, resolved, given, plan, run = _plan(config, print_fn, explicit, sources, overrides)
    except KeyboardInterrupt:  # in the autotune probe (60 s) or an env's import: say what there is to resume
        if config.resume:  # the line the serial trainer's start says too: one case, one wording
            raise interrupted_before_training(config.resume) from None
        raise KeyboardInterrupt("interrupted before a run folder was made: nothing was written; start the run "
                                "again") from None
    all_sources = complete_sources(given, config)
    context = prepare_run(resolved, all_sources)
    try:
        if plan is not None:
            from spreeze_like.autotune.apply import save_plan

            save_plan(plan, context.run_dir)
    except BaseException:
        context.release()  # the mode entries release the folder's lock; nothing else would before exit
        raise
    print_fn(
        f"[spreeze] {resolved.algo} on {resolved.env}, {'serial' if resolved.serial else 'parallel'} mode, "
        f"actor on {resolved.actor_device}, critic on {resolved.critic_device}; run folder {context.run_dir}"
        + (f" (resuming at env step {context.start_step:,})" if context.payload else "")
    )
    for line in settings_lines(resolved, all_sources):
        print_fn(line)
    if run is None:
        return serial_entry()(resolved, context, print_fn)
    return run(resolved, context)


def _plan(config: TrainConfig, print_fn: Callable[[str], None], explicit: Collection[str] | None,
          sources: Mapping[str, str] | None, overrides: Mapping[str, object]
          ) -> tuple[TrainConfig, TrainConfig, dict[str, str], Plan | None, ModeEntry | None]:
    """Everything before the run folder: presets, the autotune plan, the env's check and the mode's entry.
    Returns (the laid config, the resolved one, each field's source, the plan or None, the parallel entry)."""
    if config.plan_only:
        raise ConfigError("plan_only trains nothing: run python -m spreeze_like.run --plan-only, or call "
                          "spreeze_like.autotune.apply.autotune(config) for the plan")
    if config.video_every > 0:
        from spreeze_like.video import prefer_headless_gl

        prefer_headless_gl()  # before anything imports MuJoCo; the evaluator's process inherits the choice
    given = dict(sources) if sources is not None else python_sources(config, explicit or ())
    given.update(dict.fromkeys(overrides, "python"))
    config, given = lay_presets(config, given)
    plan = None
    if config.autotune and config.resume:
        print_fn("[spreeze] --resume keeps the run's saved settings; the autotune plan is not applied again")
    elif config.autotune:
        from spreeze_like.autotune.apply import autotune

        config, plan = autotune(config, set(given), print_fn)
        given = mark_planned(given, plan)
    resolved = config.resolve()
    # a bad env fails here, before a run folder is made for it; so does one whose first step raises, and with
    # --her-goals one that cannot be relabelled or whose compute_reward raises (not in a sampler)
    info = checked_env_info(resolved.env, resolved.env_kwargs, resolved.her_goals)
    if resolved.video_every > 0:  # the writer is installed and the env renders a frame: not found an hour in
        from spreeze_like.video import check_can_record

        check_can_record(resolved.env, resolved.env_kwargs, resolved.video_format, "--video-every")
    if info.structured_obs_space is not None:
        print_fn(f"[spreeze] observations: {describe(info.structured_obs_space)}, flattened into {info.obs_dim} "
                 "inputs in that order")
    run = None if resolved.serial else parallel_entry()
    if run is None and not resolved.serial:
        print_fn("[spreeze] the parallel mode is not built yet; running every role in this process (--serial)")
        resolved = dataclasses.replace(resolved, serial=True)
    return config, resolved, given, plan, run

