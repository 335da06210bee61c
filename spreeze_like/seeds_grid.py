"""``--vary NAME=V1,V2``: the settings a seeds experiment compares, each run over every seed.

An experiment in RL is rarely one setting: it is "does tau 0.02 learn sooner than 0.005", over
seeds, since one seed per setting cannot rank settings a few percent apart. ``--vary`` names a run
setting and the values to compare; several ``--vary`` give their product, the *cells* of a grid.
Every cell runs with every seed of ``--seeds``, ``--jobs`` at a time, and the seeds command ends
with each cell's statistics over its seeds.

A setting is a field of :class:`~spreeze_like.config.TrainConfig`, written as its flag
(``batch-size``) or its field (``batch_size``), and a value is what the flag takes: ``tau=0.005,0.02``,
``hidden-sizes=64x64,256x256`` (``x`` or spaces between the layers), ``prioritized=on,off`` (a switch).
Each cell is a list of run flags appended to the command's own: its runs go through the run's
parser and the env's preset as any run does (:func:`spreeze_like.seeds_cli.parse_seeds_command` checks
every cell before anything starts).

Not varied, each for a reason: the seeds command's own ``--seed``, ``--logdir`` and ``--resume``;
``--env`` (one env per experiment: its statistics would mix scales); ``--total-steps`` (every cell
gets the same budget, which a resumed folder also extends alike); ``--autotune`` (its plan takes the
machine for one run at a time); ``--config`` (a file is not a setting).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
import typing
from dataclasses import dataclass
from pathlib import Path

from spreeze_like.config import TrainConfig
from spreeze_like.config_fields import field_types, unwrap_optional
from spreeze_like.errors import ConfigError
from spreeze_like.rundir import safe_name
from spreeze_like.seed_runs import RECORD_FILE

MAX_CELLS = 64
NOT_VARIED = {
    "seed": "the seeds command sets it (--seeds)",
    "logdir": "the seeds command sets it (its own --logdir)",
    "resume": "the seeds command resumes whole folders (--resume FOLDER)",
    "env": "one env per experiment (statistics over envs mix scales); run one seeds command per env",
    "total_steps": "every cell gets the same budget",
    "autotune": "its plan takes the whole machine for one run at a time",
}
_ON, _OFF = ("on", "true", "yes", "1"), ("off", "false", "no", "0")


@dataclass(frozen=True)
class Cell:
    """One setting of the grid: its label (``tau=0.005 batch-size=256``) and the run flags it adds."""

    label: str
    args: tuple[str, ...]

    def folder(self, index: int) -> str:
        """The cell's sub-folder of the seeds folder: ``cell<index>_<label>`` (a file name)."""
        return f"cell{index}_" + safe_name(self.label.replace("=", "_").replace(" ", "__"))

    def to_dict(self) -> dict:
        return {"label": self.label, "args": list(self.args)}

    @classmethod
    def from_dict(cls, data: dict) -> Cell:
        label, args = data["label"], data["args"]
        if not isinstance(label, str) or not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ValueError(f"a cell of label {label!r} and args {args!r}")
        return cls(label, tuple(args))


def parse_vary(specs: list[str], run_args: list[str]) -> list[Cell]:
    """The cells of ``--vary`` specs (their product, the first spec's values slowest), or [] without any.

    Raises ConfigError (one line) for a malformed spec, a setting that cannot vary or is also typed as a
    run flag, a value a switch does not take, or more than :data:`MAX_CELLS` cells.
    """
    if not specs:
        return []
    axes: list[list[tuple[str, tuple[str, ...]]]] = []
    names: list[str] = []
    for spec in specs:
        name, values = _split(spec)
        if name in names:
            raise ConfigError(f"--vary {spec}: {_flag(name)} is varied twice; give all its values in one --vary")
        names.append(name)
        _refuse_typed(name, run_args, spec)
        axes.append([_setting(name, value, spec) for value in values])
    count = 1
    for axis in axes:
        count *= len(axis)
    if count > MAX_CELLS:
        raise ConfigError(f"--vary: {count} settings in the grid, more than {MAX_CELLS}; vary fewer values at once")
    cells = []
    for combo in itertools.product(*axes):
        label = " ".join(text for text, _ in combo)
        cells.append(Cell(label, tuple(token for _, tokens in combo for token in tokens)))
    return cells


def _split(spec: str) -> tuple[str, list[str]]:
    """``"batch-size=256,1024"`` -> (``"batch_size"``, ``["256", "1024"]``), the name checked."""
    name, sep, text = spec.partition("=")
    name = name.strip().lstrip("-").replace("-", "_")
    values = [v.strip() for v in text.split(",")]
    if not sep or not name or not all(values) or len(values) < 2:
        raise ConfigError(f"--vary {spec}: give a setting and two or more values, e.g. --vary tau=0.005,0.02")
    if len(set(values)) != len(values):
        raise ConfigError(f"--vary {spec}: a value is given twice")
    if name not in {f.name for f in dataclasses.fields(TrainConfig)}:
        raise ConfigError(f"--vary {spec}: {_flag(name)} is not a run setting (python -m spreeze_like.run --help "
                          "lists them)")
    if name in NOT_VARIED:
        raise ConfigError(f"--vary {spec}: {_flag(name)} cannot vary: {NOT_VARIED[name]}")
    return name, values


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def flag_setting(token: str) -> str:
    """The setting a run flag token sets, as its flag: ``--no-prioritized`` and ``--tau=0.1`` -> ``--prioritized``,
    ``--tau``; not a flag (a value): the token itself."""
    flag = token.split("=", 1)[0]
    return "--" + flag[5:] if flag.startswith("--no-") else flag


def varied_flags(cells: list[Cell]) -> set[str]:
    """The flags a grid's cells set (see :func:`flag_setting`)."""
    return {flag_setting(t) for cell in cells for t in cell.args if t.startswith("--")}


def _refuse_typed(name: str, run_args: list[str], spec: str) -> None:
    if any(flag_setting(token) == _flag(name) for token in run_args if token.startswith("--")):
        raise ConfigError(f"--vary {spec}: {_flag(name)} is also typed as a run flag; give it in one place")


def _setting(name: str, value: str, spec: str) -> tuple[str, tuple[str, ...]]:
    """One value of a setting: its text in the cell's label and the run flags that give it."""
    base, _optional = unwrap_optional(field_types(TrainConfig)[name])
    flag = _flag(name)
    if base is bool:
        if value.lower() in _ON:
            return f"{flag[2:]}=on", (flag,)
        if value.lower() in _OFF:
            return f"{flag[2:]}=off", ("--no-" + flag[2:],)
        raise ConfigError(f"--vary {spec}: {flag} is a switch: give on or off, not {value!r}")
    if typing.get_origin(base) is tuple:
        layers = [x for x in re.split(r"[x\s]+", value) if x]
        return f"{flag[2:]}={'x'.join(layers)}", (flag, *layers)
    return f"{flag[2:]}={value}", (flag, value)


def setting_of_run(run_dir: str | Path) -> str | None:
    """The grid setting (its label) a run folder ``<seeds folder>/cell<K>_.../seed_S/<run>`` trained, read from
    the seeds folder's ``seeds.json``; None for a run outside a grid (or a folder it cannot read)."""
    run_dir = Path(run_dir)
    match = re.match(r"cell(\d+)_", run_dir.parent.parent.name)
    if match is None:
        return None
    try:
        cells = json.loads((run_dir.parent.parent.parent / RECORD_FILE).read_text()).get("cells") or []
        return str(cells[int(match.group(1))]["label"])
    except (OSError, ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None
