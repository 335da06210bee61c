"""Where each setting of a run comes from: the presets laid under the user's settings, and the sources.

The order, first match wins::

    flag  >  resumed run's config.json  >  --config file  >  preset  >  built-in default

:mod:`spreeze_like.flags` gives the user's layers with a source each (``flag``, ``resume``,
``config-file``); from Python, ``train(config)`` counts every field off its dataclass default, and
every name passed as ``explicit`` or as a keyword override, as ``python``. :func:`lay_presets` then
fills each field nobody set (or set to ``auto``, i.e. None) from the env's preset, labelled
``preset:<file>#<table>`` (the algorithm itself, when nobody chose it, from ``algos.toml``); the
fields still unnamed are ``default``. With ``--autotune`` the planned fields become ``autotune``
(:func:`mark_planned`): the plan changes only fields that are neither the user's nor a preset's,
since the autotuner keeps every field it is told is set.

A resumed run keeps its saved values: every field in its config.json is ``resume`` (with the source
it had then, e.g. ``resume (preset:sac.toml#Pendulum-v1)``), so a preset reaches only fields that
an older config.json lacks. The full map is saved as ``sources`` in config.json
(:func:`spreeze_like.rundir.prepare_run`) and :func:`settings_lines` prints the settings that are not
simply the built-in default under the run's header line (and above the autotune plan).

A preset file is checked whole before use: types and keys by :mod:`spreeze_like.presets`, ranges
here with ``TrainConfig.validate`` on each table as a run on that env would get it; a problem is
one ConfigError line naming the file and the table. This module owns no files or processes.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection, Mapping
from typing import Any

from spreeze_like.config import ALGOS, TrainConfig
from spreeze_like.errors import ConfigError
from spreeze_like.presets import ALGO_FILE, PresetFile, default_algo, load_presets

__all__ = ["ORDER", "checked_presets", "complete_sources", "lay_presets", "mark_planned", "python_sources",
           "settings_lines"]

ORDER = "flag > resumed run > --config file > preset > default"
DEFAULT = "default"
PYTHON = "python"
AUTOTUNE = "autotune"


def checked_presets(algo: str, path: str = "") -> PresetFile:
    """The algorithm's presets (``path``: a file to read instead of the shipped one), every table checked."""
    presets = load_presets(algo, path)
    base = dataclasses.replace(TrainConfig(), algo=algo)
    for entry in presets.entries:
        try:
            dataclasses.replace(base, **presets.merged(entry)).validate()
        except ConfigError as exc:
            raise ConfigError(f"preset file {presets.label} [{entry}]: {exc}") from None
    return presets


def python_sources(config: TrainConfig, explicit: Collection[str] = ()) -> dict[str, str]:
    """Sources of a config built in Python: fields off their default, and the names in ``explicit``."""
    defaults = TrainConfig()
    names = {f.name for f in dataclasses.fields(config) if getattr(config, f.name) != getattr(defaults, f.name)}
    return dict.fromkeys(sorted(names | set(explicit)), PYTHON)


def lay_presets(config: TrainConfig, sources: Mapping[str, str]) -> tuple[TrainConfig, dict[str, str]]:
    """``config`` with the env's preset under the user's settings, and the sources with the preset's labels.

    When nobody chose the algorithm (``algo`` absent from ``sources``), the env's table of
    ``presets/algos.toml`` chooses it first (SAC unless a measurement there chose another), and that
    algorithm's preset file is read.
    A preset value is taken for every field absent from ``sources`` or set to ``auto`` (None), so that
    ``--actor-lr auto`` means "the preset's". Raises ConfigError for a malformed preset file.
    """
    laid = dict(sources)
    if "algo" not in sources:  # nobody chose: the env's algorithm (presets/algos.toml), which picks the preset file
        algo, label = default_algo(config.env)
        if algo not in ALGOS:
            raise ConfigError(f"preset file {ALGO_FILE}: algo {algo!r} for {config.env} is not one of "
                              f"{', '.join(ALGOS)}")
        if algo != config.algo:
            config = dataclasses.replace(config, algo=algo)
            laid["algo"] = label
    presets = checked_presets(config.algo, config.presets)
    values: dict[str, Any] = {}
    for name, (value, label) in presets.lookup(config.env).items():
        if name not in sources or getattr(config, name) is None:
            values[name] = value
            laid[name] = label
    return dataclasses.replace(config, **values).validate(), laid


def mark_planned(sources: Mapping[str, str], plan: Any) -> dict[str, str]:
    """The sources after ``--autotune`` applied ``plan``: its planned fields (not the user's) are ``autotune``."""
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    marked = dict(sources)
    for name, choice in plan.choices.items():
        if name in names and choice.source == "plan":
            marked[name] = AUTOTUNE
    return marked


def complete_sources(sources: Mapping[str, str], before_resolve: TrainConfig) -> dict[str, str]:
    """Every field named: the unnamed ones are ``default``, and so is an ``auto`` actor lr that no preset filled
    (``resolve()`` gave it the built-in rate)."""
    full = {f.name: sources.get(f.name, DEFAULT) for f in dataclasses.fields(TrainConfig)}
    if before_resolve.actor_lr is None:
        full["actor_lr"] = DEFAULT
    return full


def _text(value: Any) -> str:
    if isinstance(value, tuple):
        return " ".join(map(str, value))
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, dict):  # --env-kwargs, as it is typed
        return json.dumps(value)
    return str(value)


def settings_lines(config: TrainConfig, sources: Mapping[str, str], prefix: str = "[spreeze]") -> list[str]:
    """The settings that did not come from the built-in defaults (nor were resumed from them), each with its
    source, for the console header; plus a note when the warm-up outlasts the run."""
    defaults = TrainConfig()
    rows = []
    for f in dataclasses.fields(config):
        value, source = getattr(config, f.name), sources.get(f.name, DEFAULT)
        if source in (DEFAULT, f"resume ({DEFAULT})") or (source == "resume" and value == getattr(defaults, f.name)):
            continue  # a built-in default, also as resumed (its auto already resolved then)
        rows.append((f.name, _text(value), source))
    lines = [f"{prefix} settings ({ORDER}): " + ("all built-in defaults" if not rows else "")]
    if rows:
        lines[0] = lines[0].rstrip()
        name_w, value_w = max(len(r[0]) for r in rows), max(len(r[1]) for r in rows)
        lines += [f"{prefix}   {n.ljust(name_w)}  {v.ljust(value_w)}  {s}" for n, v, s in rows]
    if config.learning_starts >= config.total_steps:
        lines.append(f"{prefix} note: learning_starts {config.learning_starts:,} "
                     f"({sources.get('learning_starts', DEFAULT)}) >= total_steps {config.total_steps:,}: this run "
                     "only collects random actions; pass --learning-starts or --total-steps")
    return lines
