"""Where probe results are kept between runs, and how they are read back.

One JSON file per machine, env and network: ``$XDG_CACHE_HOME/spreeze_like/probes/`` (default
``~/.cache/spreeze_like/probes/``), named ``<machine fingerprint>__<env>__<algo>-<hidden>.json``.
The machine fingerprint (:func:`spreeze_like.autotune.hardware.fingerprint`) changes with the
hardware or the torch version, so a cached file never describes another machine; the env and the
network sizes are in the name because they change the step and update costs. A file written by an
older probe schema, or one that cannot be read, counts as absent (the probes run again and
overwrite it). ``--reprobe`` ignores the file and refreshes it.

Files are written atomically (temporary file + ``os.replace``), so two runs starting together read
either the old or the new file, never half of one.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from spreeze_like.autotune.results import SCHEMA_VERSION, ProbeResults


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/spreeze_like/probes`` (``~/.cache/...`` when the variable is unset or empty)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "spreeze_like" / "probes"


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


def cache_path(fingerprint: str, env_id: str, algo: str, hidden_sizes: Sequence[int],
               env_kwargs: Mapping[str, Any] | None = None, critic_hidden_sizes: Sequence[int] = ()) -> Path:
    """The cache file for this machine, env, algorithm and hidden layer sizes. ``--env-kwargs`` make another env
    (a step may cost more, observations may be wider): they add a digest of their JSON to the env's part. A critic
    of other widths (``--critic-hidden-sizes``) adds ``-q<widths>``: its updates cost another time."""
    net = "x".join(str(h) for h in hidden_sizes)
    if critic_hidden_sizes and tuple(critic_hidden_sizes) != tuple(hidden_sizes):
        net += "-q" + "x".join(str(h) for h in critic_hidden_sizes)
    env = _safe(env_id)
    if env_kwargs:
        env += "+" + hashlib.sha256(json.dumps(dict(env_kwargs), sort_keys=True).encode()).hexdigest()[:12]
    return cache_dir() / f"{_safe(fingerprint)}__{env}__{_safe(algo)}-{net}.json"


def load_cached(path: Path) -> ProbeResults | None:
    """The cached results at ``path``, or None if absent, unreadable or from another schema."""
    try:
        data = json.loads(path.read_text())
        if data.get("schema") != SCHEMA_VERSION:
            return None
        return ProbeResults.from_dict(data)
    except (OSError, ValueError, TypeError, KeyError):
        return None


def save_results(results: ProbeResults, path: Path) -> Path:
    """Write ``results`` to ``path`` atomically (creating the folder); returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(results.to_json() + "\n")
    os.replace(tmp, path)
    return path
