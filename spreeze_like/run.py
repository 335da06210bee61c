"""``python -m spreeze_like.run``: train from the command line.

Every field of :class:`~spreeze_like.config.TrainConfig` is a flag (``--help`` lists them with
their help lines and defaults). A bad input of any kind (flag value, env, logdir, checkpoint) ends
with one ``error: ...`` line on stderr and exit status 2, no traceback. At the end it prints the
final evaluation and the run folder. ``--plan-only`` prints the autotune plan and exits 0.
"""

from __future__ import annotations

import sys

from spreeze_like.errors import SpreezeError


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the process exit status."""
    from spreeze_like.config import parse_cli_explicit

    try:
        config, explicit = parse_cli_explicit(argv)
        if config.plan_only:
            from spreeze_like.autotune.apply import autotune

            autotune(config, explicit)
            return 0
        from spreeze_like.training import train

        result = train(config, explicit=explicit)
    except SpreezeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted; resume with --resume <run folder>", file=sys.stderr)
        return 130
    returns = ", ".join(f"{r:.1f}" for r in result.final_eval_returns)
    print(
        f"final evaluation: mean return {result.final_eval_return:.1f} over {len(result.final_eval_returns)} "
        f"episodes ({returns}) after {result.env_steps:,} env steps, {result.wall_s:.0f} s"
    )
    print(f"run folder: {result.run_dir}   (tensorboard --logdir {result.run_dir.parent})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
