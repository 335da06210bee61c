"""The run folder: ``<logdir>/<env>__<algo>__<seed>__<unixtime>/``, its config.json, and resume.

:func:`prepare_run` is the one entry both the serial and the parallel mode start from: it creates
(or, on ``--resume``, reopens) the folder, checks that it is writable, loads the newest checkpoint
when resuming (refusing one from another env or algorithm), and writes the resolved config as
``config.json`` (atomically), with a ``sources`` map beside the values that names where each came
from (flag, resume, config-file, preset:<file>#<table>, autotune, python, default; see
:mod:`spreeze_like.layering`). ``TrainConfig.from_dict`` and ``--config``/``--resume`` read such a
file as it is; a version from before sources existed rejects the extra key. Every failure is a
one-line SpreezeError.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spreeze_like.checkpoint import check_compatible, load_latest
from spreeze_like.config import SOURCES_KEY, TrainConfig
from spreeze_like.errors import CheckpointError, ConfigError


@dataclass
class RunContext:
    """Where a run writes and what it resumes from (``payload`` is None for a fresh run)."""

    run_dir: Path
    payload: dict[str, Any] | None = None
    checkpoint_path: Path | None = None

    @property
    def start_step(self) -> int:
        return int(self.payload["env_steps"]) if self.payload else 0

    @property
    def generation(self) -> int:
        """How many times this run has been resumed (0 for a fresh run)."""
        return int(self.payload.get("generation", 0)) + 1 if self.payload else 0


def run_name(config: TrainConfig, unixtime: int | None = None) -> str:
    env = re.sub(r"[^A-Za-z0-9_.-]+", "_", config.env)  # module:EnvId and namespaces/ become safe names
    return f"{env}__{config.algo}__{config.seed}__{int(time.time()) if unixtime is None else unixtime}"


def _new_run_dir(config: TrainConfig) -> Path:
    base = Path(config.logdir)
    name = run_name(config)
    try:
        base.mkdir(parents=True, exist_ok=True)
        for suffix in [""] + [f"_{i}" for i in range(1, 100)]:  # two runs started in the same second
            path = base / (name + suffix)
            try:
                path.mkdir()
                return path
            except FileExistsError:
                continue
    except OSError as exc:
        raise ConfigError(
            f"cannot create a run folder under --logdir {config.logdir}: {exc.strerror or exc}; "
            "pass --logdir with a writable folder"
        ) from None
    raise ConfigError(f"too many runs named {name} under {base}; wait a second or pass another --logdir")


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def prepare_run(config: TrainConfig, sources: Mapping[str, str] | None = None) -> RunContext:
    """Create or reopen the run folder for a resolved config; see the module docstring.

    ``sources`` (field -> where its value came from) is saved beside the values when given.
    """
    if config.resume:
        run_dir = Path(config.resume)
        if not run_dir.is_dir():
            raise ConfigError(f"--resume {config.resume}: no such run folder")
        payload, path = load_latest(run_dir)
        check_compatible(payload, config.env, config.algo, path)
        if int(payload["env_steps"]) >= config.total_steps:
            raise CheckpointError(
                f"{path} is already at {payload['env_steps']} env steps >= --total-steps {config.total_steps}; "
                "pass a larger --total-steps to continue"
            )
        context = RunContext(run_dir, payload, path)
    else:
        context = RunContext(_new_run_dir(config))
    try:
        saved = config.to_dict()
        if sources is not None:
            saved[SOURCES_KEY] = {name: sources.get(name, "default") for name in saved}
        write_json_atomic(context.run_dir / "config.json", saved)
    except OSError as exc:
        raise ConfigError(f"cannot write to run folder {context.run_dir}: {exc.strerror or exc}") from None
    return context
