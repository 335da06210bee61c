"""``<run_dir>/remote_samplers.json``: where each remote sampler runs and how it is doing.

The file is for people and tools (``tensorboard``'s "Remote" panel through the monitor, ``status.json``
through the supervisor, the supervisor's "abandoned" line). Who touches it:

- **writes**: the ``ray-bridge`` process alone (:class:`RemoteInfoFile`, owned by
  :class:`~spreeze_like.remote.bridge.Bridge`): on every change of a sampler's node, pid, state or
  restarts, and at most once every :data:`INFO_EVERY_S` otherwise. Each write replaces the file
  whole (a temporary file and ``os.replace``), so a reader never sees half of one. No fsync: the file
  is a view of state that lives elsewhere (the stats rows), rewritten within a second, and an fsync
  per second would stall the bridge's loop on a busy disk.
- **reads**: the monitor and the supervisor, through :func:`read_remote_info`.
- **removes**: nobody; it stays in the run folder with the run's other records. A crash of the
  bridge leaves the last complete file (and at most one ``.remote_samplers.json.<pid>.tmp`` if it
  died between the write and the rename: the name says whose).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

REMOTE_INFO_FILE = "remote_samplers.json"
INFO_EVERY_S = 1.0  # the longest a write waits when nothing but the rates changed
RATE_WINDOW_S = 2.0  # steps_per_s: env steps over at least this many seconds (one reply is too jumpy)
_RATES = ("steps_per_s", "policy_lag")  # fields that change all the time: they alone never force a write


def read_remote_info(run_dir: str | Path) -> dict[str, Any] | None:
    """``<run_dir>/remote_samplers.json`` as the ray-bridge last wrote it, or None.

    Missing (no remote samplers, or the bridge has not written it yet), unreadable or not a JSON
    object: None, never an error (the file is replaced atomically, so a torn read should not happen;
    the next read tries again).
    """
    try:
        data = json.loads((Path(run_dir) / REMOTE_INFO_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class RemoteInfoFile:
    """The writer's side: each sampler's env-step rate over a window, and the throttled atomic write.

    Args:
        run_dir: the run folder; None: nothing is written (:meth:`write` only keeps the rates).
    """

    def __init__(self, run_dir: str | Path | None) -> None:
        self.path = Path(run_dir) / REMOTE_INFO_FILE if run_dir is not None else None
        self._marks: dict[str, tuple[float, float]] = {}  # role -> (time, env_steps) of its window's start
        self._rates: dict[str, float] = {}
        self._written: tuple[float, str] | None = None  # (when, the fields that force a write)

    def steps_per_s(self, role: str, env_steps: float, now: float) -> float:
        """``role``'s env steps per second, over the last window of at least :data:`RATE_WINDOW_S`."""
        mark = self._marks.get(role)
        if mark is None:
            self._marks[role] = (now, env_steps)
        elif now - mark[0] >= RATE_WINDOW_S:
            self._rates[role] = (env_steps - mark[1]) / (now - mark[0])
            self._marks[role] = (now, env_steps)
        return self._rates.get(role, 0.0)

    def write(self, info: dict[str, Any], now: float, force: bool = False) -> None:
        """Replace the file with ``info`` if a sampler changed, if ``force``, or once a second."""
        if self.path is None:
            return
        changed = json.dumps({role: {f: v for f, v in fields.items() if f not in _RATES}
                              for role, fields in info["samplers"].items()}, sort_keys=True)
        last = self._written
        if not force and last is not None and last[1] == changed and now - last[0] < INFO_EVERY_S:
            return
        tmp = self.path.with_name(f".{REMOTE_INFO_FILE}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(info, indent=2) + "\n")
            os.replace(tmp, self.path)
        except OSError:  # a full disk or a removed run folder: the supervisor reports those; try again later
            tmp.unlink(missing_ok=True)
        self._written = (now, changed)
