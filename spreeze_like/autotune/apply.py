"""``--autotune``: probe (or read the cache), plan, and merge the plan into the run's config.

Which settings are the user's: on the command line, every flag typed (and every key of a
``--config`` file) -- :func:`spreeze_like.flags.parse_cli_explicit` reports them; in Python, every
field that differs from the :class:`~spreeze_like.config.TrainConfig` default, plus any names passed
as ``explicit``. Those are never changed; the plan is made around them (a user's ``--batch-size``
sets how many samplers the plan needs, for example).

The planned values that are fields of this version's ``TrainConfig`` are applied; a planned value
the trainer has no setting for (``ring_capacity``: the parallel mode sizes rings from its pacing) stays
in the plan as information, and the printed plan says so. The plan is saved as ``plan.json`` in the run
folder by :func:`save_plan` (``spreeze_like.train`` calls it once the folder exists).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection
from pathlib import Path

from spreeze_like.autotune.plan import Plan, make_plan
from spreeze_like.autotune.probe import load_or_probe
from spreeze_like.config import TrainConfig
from spreeze_like.console import say

# fields that steer the autotuner itself, or that describe the run, never count as "the user's setting"
_NOT_SETTINGS = {"autotune", "plan_only", "reprobe", "probe_budget"}


def explicit_fields(config: TrainConfig, typed: Collection[str] | None = None) -> set[str]:
    """Fields the user chose: those ``typed`` (CLI flags, config-file keys) and those off their default."""
    defaults = TrainConfig()
    off_default = {f.name for f in dataclasses.fields(config) if getattr(config, f.name) != getattr(defaults, f.name)}
    return (off_default | set(typed or ())) - _NOT_SETTINGS


def apply_plan(config: TrainConfig, plan: Plan) -> TrainConfig:
    """``config`` with the plan's values for every planned field it has (the user's fields untouched)."""
    names = {f.name for f in dataclasses.fields(config)}
    values = {k: c.value for k, c in plan.choices.items() if c.source == "plan" and k in names}
    for name in plan.choices:
        if name not in names:
            note = f"{name} is for information: the trainer has no --{name.replace('_', '-')}, it sizes this itself"
            if note not in plan.notes:
                plan.notes.append(note)
    return dataclasses.replace(config, **values)


def parallel_mode_available() -> bool:
    """Whether ``spreeze_like.supervisor`` (the multi-process mode) is built."""
    from spreeze_like.modes import parallel_entry

    return parallel_entry() is not None


def autotune(
    config: TrainConfig,
    explicit: Collection[str] | None = None,
    print_fn: Callable[[str], None] = say,
    parallel_available: bool | None = None,
) -> tuple[TrainConfig, Plan]:
    """Probe this machine for ``config.env`` (or use the cache), plan, print the plan, return the tuned config.

    Args:
        config: the run's settings (not yet resolved).
        explicit: fields the user set (see the module docstring); None: only those off their default.
        print_fn: receives the probe progress and the plan.
        parallel_available: whether the parallel mode exists (default: look for it).

    Raises:
        spreeze_like.errors.SpreezeError: an env that cannot be made, a device the machine lacks.
    """
    mine = explicit_fields(config, explicit)
    available = parallel_mode_available() if parallel_available is None else parallel_available

    def progress(line: str) -> None:
        print_fn(f"[autotune] {line}")

    probes, path, _ = load_or_probe(config.env, config.algo, config.hidden_sizes, config.probe_budget,
                                    config.reprobe, progress, env_kwargs=config.env_kwargs,
                                    critic_hidden_sizes=config.critic_hidden_sizes)
    plan = make_plan(probes, config, mine, available)
    tuned = apply_plan(config, plan).validate()
    plan.notes.append(f"probe results: {path}")
    print_fn(plan.text())
    return tuned, plan


def save_plan(plan: Plan, run_dir: str | Path) -> Path:
    """Write ``plan.json`` into the run folder (atomically); returns its path."""
    from spreeze_like.rundir import write_json_atomic

    path = Path(run_dir) / "plan.json"
    write_json_atomic(path, plan.to_dict())
    return path

