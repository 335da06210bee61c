"""The command line: one ``--flag`` per :class:`~spreeze_like.config.TrainConfig` field, and its layers.

:func:`build_parser` adds a flag per dataclass field with the field's help line and default (plus
``--config FILE`` and ``--list-presets``), in ``--help`` sections by topic (:data:`HELP_GROUPS`); :func:`parse_command_line` merges the user's layers,
later wins -- ``--config FILE`` (JSON) < the resumed run's config.json < the flags typed -- and says
where each value came from (``config-file`` / ``resume`` / ``flag``). On ``--resume`` only the flags
typed now override the saved config (Sample Factory's rule), and a saved ``module:EnvId`` is refused
unless ``--env`` names it again (a run folder is data, not code: review finding 4). Presets and
defaults are laid under these by :mod:`spreeze_like.layering`. Bad input is a one-line ConfigError or, for argparse's own
errors, one ``error:`` line and exit status 2 (:class:`~spreeze_like.config_fields.OneLineParser`).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spreeze_like.config import TrainConfig
from spreeze_like.config_fields import (
    SOURCES_KEY,
    OneLineParser,
    coerce_fields,
    field_types,
    json_object,
    load_json_file,
    settings_of,
    unwrap_optional,
)
from spreeze_like.errors import ConfigError

__all__ = ["CommandLine", "add_dataclass_arguments", "build_parser", "parse_cli", "parse_cli_explicit",
           "parse_command_line"]


def _auto_or(base: type) -> Any:
    def parse(text: str) -> Any:
        return None if text.lower() in ("auto", "none") else base(text)

    parse.__name__ = base.__name__
    return parse


# --help's sections, in order: (title, TrainConfig fields). A field in none of them is listed under
# OTHER_GROUP (tests/trainer/test_config.py asserts that none is: place a new field here).
HELP_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("what to train", ("env", "env_kwargs", "algo", "presets", "total_steps", "time_limit_s", "seed", "resume")),
    ("sampling", ("samplers", "envs_per_sampler", "learning_starts", "exploration_noise")),
    ("remote samplers on Ray", ("ray", "remote_samplers", "remote_envs_per_sampler", "remote_batch",
                                "remote_place_timeout_s")),
    ("replay", ("buffer_size", "prioritized", "priority_alpha", "priority_beta")),
    ("learning", ("batch_size", "utd", "gamma", "n_step", "her_goals", "her_strategy", "tau", "actor_lr", "critic_lr", "alpha_lr",
                  "alpha_init", "target_entropy", "policy_delay", "policy_noise", "noise_clip", "hidden_sizes",
                  "critic_hidden_sizes", "weight_sync_period", "max_nonfinite_steps")),
    ("devices and speed", ("actor_device", "critic_device", "precision", "learner_step", "device_replay",
                           "updates_per_graph", "torch_threads")),
    ("evaluation, logging and checkpoints", ("eval_every", "eval_episodes", "video_every", "video_format",
                                             "stop_at_return", "logdir",
                                             "log_interval", "tb_interval", "checkpoint_every", "keep_checkpoints",
                                             "save_replay")),
    ("faults (parallel mode)", ("max_restarts", "sampler_hang_s", "learner_hang_s", "evaluator_hang_s")),
    ("mode and autotuning", ("serial", "autotune", "plan_only", "reprobe", "probe_budget")),
)
OTHER_GROUP = "other settings"

# shown as written (RawDescriptionHelpFormatter): lines under 80 columns
DESCRIPTION = """\
Train an off-policy actor-critic agent (SAC, TD3, DDPG, CrossQ) on a gymnasium
env with continuous actions. A setting you do not give comes from the env's
preset (--list-presets), else from the default shown below; the run's header
prints where each of its settings came from."""
EPILOG = """\
Each run writes <logdir>/<env>__<algo>__<seed>__<unixtime>/ (config.json,
checkpoints, TensorBoard events). Watch runs live with:
  tensorboard --logdir runs"""


def add_dataclass_arguments(parser: argparse.ArgumentParser, cls: type, sections: dict[str, Any] | None = None,
                            groups: tuple[tuple[str, tuple[str, ...]], ...] = ()) -> None:
    """Add one ``--flag`` per dataclass field, with its help line and default, in the sections ``groups`` names.

    Defaults are ``argparse.SUPPRESS`` so that the parsed namespace holds only the flags the user
    typed; :func:`parse_cli` layers them over config files and saved configs. With ``groups``, each
    field's flag goes into its section (``sections``: the argument groups by title, made here when
    missing); fields in none go to an ``other settings`` section at the end.
    """
    hints = field_types(cls)
    sections = sections if sections is not None else {}
    for title, _ in groups:
        sections.setdefault(title, parser.add_argument_group(title))
    home = {name: sections[title] for title, names in groups for name in names}
    other: Any = None
    for f in dataclasses.fields(cls):
        if groups and f.name not in home:
            other = other or parser.add_argument_group(OTHER_GROUP)
        target = home.get(f.name, other) if groups else parser
        flag = "--" + f.name.replace("_", "-")
        base, optional = unwrap_optional(hints[f.name])
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        shown = "auto" if default is None else (" ".join(map(str, default)) if isinstance(default, tuple) else default)
        shown = "none" if shown == "" else shown
        shown = f.metadata.get("shown", shown)
        kwargs: dict[str, Any] = {
            "help": f"{f.metadata.get('help', '')} (default: {shown})",
            "default": argparse.SUPPRESS,
            "dest": f.name,
        }
        if base is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif typing.get_origin(base) is tuple:
            kwargs.update(nargs="+", type=int, metavar="N")
        elif base is dict or typing.get_origin(base) is dict:
            kwargs.update(type=json_object, metavar=f.metadata.get("metavar", "JSON"))
        else:
            # ``literal``: the text is the value, ``auto`` included (--ray auto is not "no --ray")
            kwargs["type"] = _auto_or(base) if optional and not f.metadata.get("literal") else base
            kwargs["metavar"] = f.metadata.get("metavar", {int: "N", float: "X", str: "S"}.get(base, "V"))
            if "choices" in f.metadata:
                kwargs["choices"] = f.metadata["choices"]
                kwargs.pop("metavar")
        target.add_argument(flag, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m spreeze_like.run", usage="%(prog)s [--flag VALUE ...]",
                           description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sections = {title: parser.add_argument_group(title) for title, _ in HELP_GROUPS}
    first = sections[HELP_GROUPS[0][0]]  # --config and --list-presets head the first section
    first.add_argument(
        "--config",
        metavar="FILE",
        default=None,
        help="JSON file of settings (keys are the field names below, e.g. total_steps; a run's config.json works)",
    )
    first.add_argument(
        "--list-presets",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print the per-env presets of every algorithm (or of --algo; of --presets FILE) and exit",
    )
    add_dataclass_arguments(parser, TrainConfig, sections, HELP_GROUPS)
    return parser


@dataclass
class CommandLine:
    """What the command line asks for: the user's settings, where each came from, and ``--list-presets``.

    ``sources`` names only the fields the user set: ``"flag"``, ``"config-file"`` or ``"resume"``
    (``"resume (<source then>)"`` when the saved config.json recorded one); the rest are left to the
    presets and the defaults (:func:`spreeze_like.layering.lay_presets`).
    """

    config: TrainConfig
    sources: dict[str, str]
    list_presets: bool = False


def parse_cli(argv: list[str] | None = None) -> TrainConfig:
    """Parse flags into a validated TrainConfig (not yet resolved, presets not yet laid under it).

    On ``--resume RUN_DIR`` the saved ``RUN_DIR/config.json`` is the base, and only the flags typed
    now override it.
    """
    return parse_command_line(argv).config


def parse_cli_explicit(argv: list[str] | None = None) -> tuple[TrainConfig, frozenset[str]]:
    """:func:`parse_cli`, plus the names of the fields the user set: flags typed, ``--config`` keys and,
    on ``--resume``, every saved setting (``--autotune`` never overrides any of them)."""
    line = parse_command_line(argv)
    return line.config, frozenset(line.sources)


def parse_command_line(argv: list[str] | None = None) -> CommandLine:
    """Parse the command line into the user's settings and the source of each (see :class:`CommandLine`)."""
    ns = vars(build_parser().parse_args(sys.argv[1:] if argv is None else argv))
    config_file = ns.pop("config", None)
    list_presets = bool(ns.pop("list_presets", False))
    merged: dict[str, Any] = {}
    sources: dict[str, str] = {}
    if config_file:
        from_file = settings_of(load_json_file(config_file))
        coerce_fields(TrainConfig, from_file, config_file)  # an object of known settings, or one line naming the file
        merged.update(from_file)
        sources.update(dict.fromkeys(from_file, "config-file"))
    resume = ns.get("resume") or merged.get("resume")
    if resume and not list_presets:
        saved_path = Path(resume) / "config.json"
        if not Path(resume).is_dir():
            raise ConfigError(f"--resume {resume}: no such folder; give a run folder made by spreeze_like (runs/...)")
        if not saved_path.is_file():
            raise ConfigError(f"--resume {resume}: no config.json there; give a run folder made by spreeze_like")
        saved = load_json_file(saved_path)
        settings = settings_of(saved)
        coerce_fields(TrainConfig, settings, str(saved_path))
        from spreeze_like.rundir import refuse_unnamed_env_module

        saved_env = settings.get("env")
        refuse_unnamed_env_module(saved_env, ns.get("env"), f"--resume {resume}: its config.json",
                                  f"add --env {saved_env}")
        merged.update(settings)
        then = saved.get(SOURCES_KEY)
        sources.update({name: _resumed(then.get(name) if isinstance(then, dict) else None) for name in settings})
    sources.update(dict.fromkeys(ns, "flag"))
    merged.update(ns)
    merged["resume"] = resume or ""
    return CommandLine(TrainConfig.from_dict(merged).validate(), sources, list_presets)


def _resumed(source_then: Any) -> str:
    """A resumed value's source: ``resume``, with the source it had in the run being resumed."""
    if not isinstance(source_then, str) or not source_then:
        return "resume"  # a config.json from before sources were saved
    return source_then if source_then.startswith("resume") else f"resume ({source_then})"
