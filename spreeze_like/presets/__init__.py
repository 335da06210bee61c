"""Presets: tuned settings per env id and algorithm, read from TOML tables shipped beside this module.

``spreeze_like/presets/<algo>.toml`` (``sac.toml``, ``td3.toml``, ``ddpg.toml``) holds one table per
env id plus a ``[default]`` table; the keys are :class:`~spreeze_like.config.TrainConfig` field
names, and each table's ``source`` string says which measurement or published table justifies its
values. An env's preset is its algorithm's ``[default]`` table overlaid with the env's own table; a
``module:EnvId`` env is looked up by its ``EnvId``. ``--presets FILE`` (the ``presets`` field) reads
a file of the same format instead of the shipped one, so a user can copy a table and edit it.

Where presets sit among the other layers (flag > a resumed run's config.json > ``--config`` file >
preset > built-in default) is :mod:`spreeze_like.layering`'s business; this module only reads and
checks files. It imports nothing from spreeze_like but the errors (``config`` imports it to fill
``--actor-lr auto``), so it checks each value's *type* against :data:`PRESET_FIELDS`; the ranges are
checked by ``layering`` with ``TrainConfig.validate``. Every problem is a one-line
:class:`~spreeze_like.errors.ConfigError` naming the file and the key. The module owns no state: the
files are read on each call (a few hundred bytes; runs read them a handful of times).
"""

from __future__ import annotations

import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spreeze_like.config_fields import typed_value
from spreeze_like.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 reads TOML with the tomli backport (a dependency there)
    import tomli as tomllib

__all__ = ["ALGO_FILE", "DEFAULT_ENTRY", "PRESET_DIR", "PRESET_FIELDS", "PresetFile", "default_algo", "env_key",
           "format_default_algos", "format_presets", "load_presets"]

PRESET_DIR = Path(__file__).resolve().parent
DEFAULT_ENTRY = "default"
SOURCE_KEY = "source"
ALGO_FILE = "algos.toml"  # the algorithm per env id when nobody chose one
ALGO_KEY = "algo"

# What a preset may set, with each value's TOML type (tests/trainer/test_presets.py checks these
# against TrainConfig's field types). Learning settings only: the env and algorithm choose the file
# and table, and devices, threads and process layout belong to the machine (--autotune), not the env.
PRESET_FIELDS: dict[str, type] = {
    "total_steps": int,
    "learning_starts": int,
    "exploration_noise": float,
    "buffer_size": int,
    "prioritized": bool,
    "priority_alpha": float,
    "priority_beta": float,
    "batch_size": int,
    "utd": float,
    "gamma": float,
    "n_step": int,
    "tau": float,
    "actor_lr": float,
    "critic_lr": float,
    "alpha_lr": float,
    "alpha_init": float,
    "target_entropy": float,
    "policy_delay": int,
    "policy_noise": float,
    "noise_clip": float,
    "hidden_sizes": tuple,
    "critic_hidden_sizes": tuple,
}


def env_key(env_id: str) -> str:
    """The table name an env id is looked up by: ``my_pkg.envs:MyEnv-v0`` counts as ``MyEnv-v0``."""
    return env_id.rsplit(":", 1)[-1]


@dataclass(frozen=True)
class PresetFile:
    """One algorithm's checked presets: ``entries`` maps a table name to its settings (``source`` apart)."""

    algo: str
    path: Path
    label: str  # how sources name the file: "sac.toml" for a shipped one, the path given otherwise
    entries: dict[str, dict[str, Any]]
    sources: dict[str, str]

    def entry_label(self, entry: str) -> str:
        return f"preset:{self.label}#{entry}"

    def lookup(self, env_id: str) -> dict[str, tuple[Any, str]]:
        """``{field: (value, source label)}`` for ``env_id``: ``[default]`` overlaid with the env's table."""
        found = {k: (v, self.entry_label(DEFAULT_ENTRY)) for k, v in self.entries.get(DEFAULT_ENTRY, {}).items()}
        key = env_key(env_id)
        if key != DEFAULT_ENTRY:
            found.update({k: (v, self.entry_label(key)) for k, v in self.entries.get(key, {}).items()})
        return found

    def merged(self, entry: str) -> dict[str, Any]:
        """The values a run on the env named ``entry`` gets from this file."""
        return {k: v for k, (v, _) in self.lookup(entry).items()}


def preset_path(algo: str, path: str | Path = "") -> Path:
    return Path(path) if path else PRESET_DIR / f"{algo}.toml"


def _read_toml(file: Path, label: str) -> dict[str, Any]:
    """The parsed TOML of a preset file; a one-line ConfigError naming ``label`` if unreadable or invalid."""
    try:
        text = file.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read preset file {label}: {exc.strerror or exc}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        reason = " ".join(str(exc).split())
        raise ConfigError(f"preset file {label} is not valid TOML: {reason}") from None


def load_presets(algo: str, path: str | Path = "") -> PresetFile:
    """Read and type-check ``path`` (default: the shipped ``<algo>.toml``). Raises a one-line ConfigError."""
    file = preset_path(algo, path)
    label = str(path) if path else file.name
    data = _read_toml(file, label)
    entries: dict[str, dict[str, Any]] = {}
    sources: dict[str, str] = {}
    for entry, table in data.items():
        if not isinstance(table, dict):
            raise ConfigError(
                f"preset file {label}: {entry} = {table!r} is outside a table; put settings under [<env id>] or "
                f"[{DEFAULT_ENTRY}]"
            )
        source = table.get(SOURCE_KEY, "")
        if not isinstance(source, str):
            raise ConfigError(f"preset file {label} [{entry}]: {SOURCE_KEY} must be a string saying where the values "
                              "come from")
        sources[entry] = source
        entries[entry] = {k: _checked(label, entry, k, v) for k, v in table.items() if k != SOURCE_KEY}
    return PresetFile(algo, file, label, entries, sources)


def _checked(label: str, entry: str, key: str, value: Any) -> Any:
    where = f"preset file {label} [{entry}]"
    if key not in PRESET_FIELDS:
        raise ConfigError(f"{where}: unknown setting {key}; a preset may set {', '.join(PRESET_FIELDS)}")
    expected = PRESET_FIELDS[key]
    ok, value = typed_value(expected, value)  # a tuple field (hidden_sizes) is a TOML array
    if not ok:
        what = "an array of whole numbers" if expected is tuple else expected.__name__
        raise ConfigError(f"{where}: {key} = {value!r} has the wrong type; expected {what}")
    return value


def _algo_tables() -> dict[str, dict[str, Any]]:
    """The checked tables of the shipped ``algos.toml``: each has ``algo`` (a string) and ``source``."""
    label = ALGO_FILE
    data = _read_toml(PRESET_DIR / ALGO_FILE, label)
    for entry, table in data.items():
        if not isinstance(table, dict) or set(table) != {ALGO_KEY, SOURCE_KEY} or not all(
                isinstance(v, str) for v in table.values()):
            raise ConfigError(f"preset file {label} [{entry}]: a table holds exactly {ALGO_KEY} and {SOURCE_KEY}, "
                              "both strings")
    if DEFAULT_ENTRY not in data:
        raise ConfigError(f"preset file {label} has no [{DEFAULT_ENTRY}] table")
    return data


def default_algo(env_id: str) -> tuple[str, str]:
    """``(algorithm, source label)`` a run on ``env_id`` uses when nobody chose one: the env's table of
    ``algos.toml``, else its ``[default]``. The caller checks the name against the known algorithms."""
    tables = _algo_tables()
    key = env_key(env_id)
    entry = key if key in tables else DEFAULT_ENTRY
    return tables[entry][ALGO_KEY], f"preset:{ALGO_FILE}#{entry}"


def format_default_algos(width: int = 100) -> str:
    """The ``--list-presets`` section of ``algos.toml``: the algorithm per env and why."""
    tables = _algo_tables()
    names = sorted(tables, key=lambda e: (e != DEFAULT_ENTRY, e.lower()))
    pad = max(len(n) for n in names) + 2
    lines = [f"algorithm when --algo is not given  ({PRESET_DIR / ALGO_FILE})"]
    for name in names:
        lines.append(f"  {name.ljust(pad)}algo={tables[name][ALGO_KEY]}")
        lines += textwrap.wrap(tables[name][SOURCE_KEY], width, initial_indent=" " * (pad + 2) + "source: ",
                               subsequent_indent=" " * (pad + 10))
    return "\n".join(lines + [""])


def _value_text(value: Any) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(map(str, value)) + "]"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:_}"
    return repr(value)


def format_presets(presets: list[PresetFile], width: int = 100) -> str:
    """The tables for ``--list-presets``: per algorithm, each entry's settings and its source."""
    lines: list[str] = []
    for preset in presets:
        lines.append(f"{preset.algo}  ({preset.path})")
        names = sorted(preset.entries, key=lambda e: (e != DEFAULT_ENTRY, e.lower()))
        pad = max((len(n) for n in names), default=0) + 2
        for name in names:
            settings = "  ".join(f"{k}={_value_text(v)}" for k, v in preset.entries[name].items()) or "(nothing)"
            lines.append(f"  {name.ljust(pad)}{settings}")
            if preset.sources.get(name):
                lines += textwrap.wrap(preset.sources[name], width, initial_indent=" " * (pad + 2) + "source: ",
                                       subsequent_indent=" " * (pad + 10))
        lines.append("")
    note = (f"An env gets its algorithm's [{DEFAULT_ENTRY}] table overlaid with its own table; flags, a resumed "
            "run's config.json and --config win over both. Your own file: --presets FILE.")
    lines += textwrap.wrap(note, width)
    return "\n".join(lines)
