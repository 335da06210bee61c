"""``python -m spreeze_like.run``: train from the command line.

Every field of :class:`~spreeze_like.config.TrainConfig` is a flag (``--help`` lists them with
their help lines and defaults). A bad input of any kind (flag value, preset file, env, logdir,
checkpoint) ends with one ``error: ...`` line on stderr and exit status 2, no traceback. Before
training it prints the settings that are not built-in defaults with the source of each (flag,
resumed run, --config file, preset; :mod:`spreeze_like.layering`); at the end, the final evaluation
and the run folder. ``--plan-only`` prints those settings and the autotune plan and exits 0;
``--list-presets`` prints the per-env presets and exits 0.
"""

from __future__ import annotations

import sys

from spreeze_like.console import exit_status, say


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the process exit status."""
    from spreeze_like.ipc.lifetime import die_with_launcher

    die_with_launcher()  # started by python -m spreeze_like.seeds: stop in order when it dies
    # Every stop prints what there is to resume (the orderly stop's line, a forced stop's, "nothing was written"
    # before the run folder): the last line only confirms, and never points at a folder that may hold nothing
    return exit_status(lambda: run(argv), interrupted="interrupted")


def run(argv: list[str] | None) -> int:
    """Parse the command line, then list the presets, print the plan, or train and print the outcome."""
    from spreeze_like.config import ALGOS
    from spreeze_like.flags import parse_command_line
    from spreeze_like.layering import checked_presets, lay_presets, settings_lines
    from spreeze_like.presets import format_default_algos, format_presets

    line = parse_command_line(argv)
    config = line.config
    if line.list_presets:
        if "algo" in line.sources:
            algos = [config.algo]
        else:
            algos = list(ALGOS)
            say(format_default_algos())
        say(format_presets([checked_presets(algo, config.presets) for algo in algos]))
        return 0
    if config.plan_only:
        from spreeze_like.autotune.apply import autotune

        config, sources = lay_presets(config, line.sources)
        for text in settings_lines(config, sources):
            say(text)
        autotune(config, set(sources))
        return 0
    from spreeze_like.training import train

    result = train(config, sources=line.sources)
    returns = ", ".join(f"{r:.1f}" for r in result.final_eval_returns)
    won = result.final_eval_successes
    say(
        f"final evaluation: mean return {result.final_eval_return:.1f} over {len(result.final_eval_returns)} "
        f"episodes ({returns})" + (f", success {sum(won)}/{len(won)}" if won else "")
        + f" after {result.env_steps:,} env steps, {result.wall_s:.0f} s"
        + (f" (stopped early: {result.stop_reason})" if result.stop_reason else "")
    )
    say(f"run folder: {result.run_dir}   (tensorboard --logdir {result.run_dir.parent})")
    named = f" --env {config.env}" if ":" in config.env else ""  # its module is imported only if named again
    say(f"its policy: python -m spreeze_like.evaluate {result.run_dir}{named}   (or spreeze_like.load_policy in "
        "Python)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
