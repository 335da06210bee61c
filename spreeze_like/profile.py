"""``python -m spreeze_like.profile``: what this desktop can do, measured (also ``tools/profile_hardware.py``).

Runs every probe of :mod:`spreeze_like.autotune.probe` for one env (progress lines while it
measures, about a minute and a half in all by default), then

* prints a readable report (hardware, /dev/shm, GPUs, memcpy, ring, env and sampler rates, update
  rates by batch size per device) and the plan ``--autotune`` would make for default settings (the
  algorithm and network timed are the env's, as a run gets them from its presets: :func:`run_settings`);
* writes the results as JSON (``profile.json`` in the output folder, or ``--json PATH``);
* writes the curves to TensorBoard in ``<logdir>/profile__<unixtime>/`` (see
  :mod:`spreeze_like.autotune.report` for the tags): ``tensorboard --logdir runs``;
* refreshes the probe cache that ``--autotune`` reads (``--cached`` shows the cached results
  instead of measuring).

Bad input (an env that cannot be made, a device this machine does not have, a budget below half a
second, an unwritable folder) ends with one ``error:`` line and exit status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path
from typing import Any

from spreeze_like.console import exit_status, say
from spreeze_like.errors import ConfigError


def build_parser() -> argparse.ArgumentParser:
    from spreeze_like.autotune.probe import DEFAULT_BUDGET_S
    from spreeze_like.config import ALGOS, DEFAULT_ENV_ID
    from spreeze_like.config_fields import OneLineParser, json_object

    p = OneLineParser(prog="python -m spreeze_like.profile",
                      description="Measure this machine for spreeze_like: report, JSON, TensorBoard curves.")
    p.add_argument("--env", default=DEFAULT_ENV_ID,
                   help=f"gymnasium env id (or module:EnvId) to measure (default: {DEFAULT_ENV_ID})")
    p.add_argument("--env-kwargs", type=json_object, default={}, metavar="JSON",
                   help="keyword arguments of gymnasium.make, as a run's --env-kwargs (its probe cache is their own)")
    p.add_argument("--algo", default=None, choices=ALGOS,
                   help="algorithm whose updates are timed (default: the env's, as a run without --algo gets it)")
    p.add_argument("--hidden-sizes", type=int, nargs="+", default=None, metavar="N",
                   help="hidden layer widths of the actor, and of the critic without --critic-hidden-sizes "
                        "(default: the env's preset for the algorithm, as a run gets them; else 256 256)")
    p.add_argument("--critic-hidden-sizes", type=int, nargs="+", default=None, metavar="N",
                   help="hidden layer widths of each critic, as a run's --critic-hidden-sizes (default: the preset's, "
                        "else --hidden-sizes)")
    p.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S,
                   help=f"seconds of measuring; process start-ups add a few (default: {DEFAULT_BUDGET_S:.0f})")
    p.add_argument("--devices", nargs="+", default=None, metavar="DEV",
                   help="devices to time updates on, e.g. cpu cuda:0 (default: the CPU and every GPU)")
    p.add_argument("--logdir", default="runs", help="folder that receives profile__<unixtime>/ (default: runs)")
    p.add_argument("--json", default="", metavar="PATH", help="write the JSON here instead of into the output folder")
    p.add_argument("--cached", action="store_true", help="report the cached results for this machine and env, if any")
    p.add_argument("--no-plan", action="store_true", help="do not print the autotune plan for default settings")
    return p


def _output_dir(logdir: str) -> Path:
    from spreeze_like.rundir import new_unique_folder

    return new_unique_folder(Path(logdir), f"profile__{int(time.time())}", "an output folder")


def _json_path(given: str | None, out_dir: Path) -> Path:
    """Where the JSON goes (``--json``, else the output folder), tried now (:func:`writable_file`)."""
    from spreeze_like.write_guard import writable_file

    return writable_file(Path(given) if given else out_dir / "profile.json", "--json")


def run_settings(env: str, algo: str | None, hidden_sizes: list[int] | None,
                 env_kwargs: dict[str, Any] | None = None,
                 critic_hidden_sizes: list[int] | None = None) -> tuple[Any, set[str]]:
    """The settings a default run on ``env`` gets (its algorithm and preset laid under what was given here),
    and the names set by a flag here or by a preset (the plan keeps those, as in a run).

    The probe cache is keyed by env, algorithm and network, so the profile must time the ones that
    ``--autotune`` will look up: Pendulum-v1's SAC preset has 96 x 96 layers and HalfCheetah-v5's
    algorithm is CrossQ, where a fixed ``sac`` / 256 x 256 here refreshed a cache file no run read.
    """
    from spreeze_like.config import TrainConfig
    from spreeze_like.layering import lay_presets

    given: dict[str, Any] = {"env": env}
    if env_kwargs:
        given["env_kwargs"] = dict(env_kwargs)
    if algo is not None:
        given["algo"] = algo
    if hidden_sizes is not None:
        given["hidden_sizes"] = tuple(hidden_sizes)
    if critic_hidden_sizes is not None:
        given["critic_hidden_sizes"] = tuple(critic_hidden_sizes)
    config, sources = lay_presets(TrainConfig(**given).validate(), dict.fromkeys(given, "flag"))
    return config, set(sources)


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    t0 = time.monotonic()

    def progress(line: str) -> None:
        say(f"[profile {time.monotonic() - t0:5.1f} s] {line}")

    return exit_status(lambda: profile(args, progress))


def profile(args: argparse.Namespace, progress: Any) -> int:
    """Probe (or read the cache), write the JSON and TensorBoard files, print the report and the plan."""
    from spreeze_like.autotune import cache, hardware
    from spreeze_like.autotune.probe import probe_machine
    from spreeze_like.autotune.report import report_text, write_tensorboard

    settings, kept = run_settings(args.env, args.algo, args.hidden_sizes, args.env_kwargs, args.critic_hidden_sizes)
    algo, hidden, critic = settings.algo, list(settings.hidden_sizes), list(settings.critic_hidden_sizes)
    path = cache.cache_path(hardware.fingerprint(), args.env, algo, hidden, args.env_kwargs, critic)
    # where the report goes, made and checked before the minute of measuring (a --logdir or --json that cannot be
    # written was said only after it); the folder is removed again while it is empty, as when the probe fails
    out_dir = _output_dir(args.logdir)
    try:
        json_path = _json_path(args.json, out_dir)
        if args.cached:
            results = cache.load_cached(path)
            if results is None:
                raise ConfigError(f"no cached probe results for {args.env} on this machine ({path}); "
                                  "run without --cached to measure")
        else:
            results = probe_machine(args.env, algo, hidden, args.budget, args.devices, progress, args.env_kwargs,
                                    critic_hidden_sizes=critic)
            try:
                cache.save_results(results, path)
            except OSError as exc:
                progress(f"could not update the probe cache {path}: {exc.strerror or exc}")
        try:
            json_path.write_text(results.to_json() + "\n")
        except OSError as exc:
            raise ConfigError(f"cannot write {json_path}: {exc.strerror or exc}; pass --json with a writable "
                              "path") from None
    except BaseException:
        with contextlib.suppress(OSError):
            out_dir.rmdir()  # only while empty
        raise
    write_tensorboard(results, out_dir)
    say(report_text(results))
    if not args.no_plan:
        from spreeze_like.autotune.apply import explicit_fields, parallel_mode_available
        from spreeze_like.autotune.plan import make_plan
        say(make_plan(results, settings, explicit_fields(settings, kept), parallel_mode_available()).text())
    say(f"JSON: {json_path}\nTensorBoard: tensorboard --logdir {out_dir}\nprobe cache: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
