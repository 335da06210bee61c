"""Learning curves of one run as ``curves.csv`` in its run folder: ours and peers' in one format.

The file is what ``tools/plot_runs.py`` draws, for any run: ours (written live by the monitor) or a
peer's (written by a benchmark after the peer's run, with :func:`write_curves`). It is plain text::

    # curves {"format": "spreeze-curves/2", "system": "spreeze_like", "mode": "serial", "env": "Pendulum-v1", ...}
    kind,wall_s,env_steps,episode_return,episodes,success
    # session {"start_step": 0, "wall_offset": 0.0}
    train,2.013,400,-1234.5,2,
    eval,4.120,1000,-1101.25,10,
    eval,6.250,2000,-350.5,10,0.7

- line 1: ``# curves`` and a JSON object naming the run: ``system`` (``spreeze_like``, ``sb3``,
  ...), ``env``, ``algo``, ``seed``, optionally ``mode`` and ``label`` (the legend text; default
  ``"<system> [<mode>] seed <seed>"``);
- line 2: the column names;
- then rows: ``kind`` is ``train`` (training episodes) or ``eval`` (a deterministic evaluation),
  ``wall_s`` seconds since the run started (see below), ``env_steps`` the run's env step at the
  point (for ``eval``: when the evaluation began), ``episode_return`` the mean return of the
  ``episodes`` episodes the row stands for. A peer writes one ``train`` row per episode; our
  monitor writes one per ``tb_interval`` period (the mean of the episodes that ended in it), and
  one ``eval`` row per evaluation, with the time its result was known. ``success`` is the share of
  those episodes that reached their goal, where the env says so (``info["is_success"]`` or
  ``info["success"]``: goal envs), and empty where it does not.
- format 1 (until 2026-11-29) had no ``success`` column: it is read as rows without one, and a
  writer continuing such a file (a resume) rewrites it in format 2 first.
- ``# ...`` lines after line 2 are notes for the writer (``# session``: where a session of the run
  started); readers skip them.

Wall time: ``wall_s`` counts from the start of the run's first session; a resumed session adds
the wall time the run had reached at its checkpoint (the ``wall_offset``, taken as the largest
``wall_s`` kept), so the time between sessions is not counted.

Who writes and removes: the file belongs to the run folder and is never removed by us (deleting
the run folder removes it). In our runs exactly one process writes it at a time: the monitor
(:class:`~spreeze_like.roles.monitor.Monitor`; the serial trainer's in ``--serial`` mode, the
monitor process in a parallel run), through :class:`CurveWriter`. Each row is appended and
flushed as one ``write`` (line buffering), with no fsync: a crash or a killed monitor loses at
most the row being written, and a machine crash may leave a torn last line, which
:func:`read_curves` skips and the next writer cuts off. On resume the writer rewrites the file
(a temporary file and ``os.replace``) without the rows past the checkpoint, so the curve continues
from there as TensorBoard's does (the monitor's ``purge_step``); a monitor restarted within a
session appends to the file as it is. A failed write (a full disk) is one warning line, never an
exception: rows are dropped until a reopen, tried once a minute, succeeds (review finding 7).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO

from spreeze_like.errors import ConfigError
from spreeze_like.write_guard import WriteGuard

CURVES_FILE = "curves.csv"
FORMAT = "spreeze-curves/2"
COLUMNS = ("kind", "wall_s", "env_steps", "episode_return", "episodes", "success")
# format 1's columns: files written before the success column (read, and upgraded by a writer that continues one)
FORMAT_1 = "spreeze-curves/1"
COLUMNS_1 = COLUMNS[:-1]
_META_PREFIX = "# curves "
_SESSION_PREFIX = "# session "
Kind = Literal["train", "eval"]
KINDS = ("train", "eval")


@dataclass(frozen=True)
class CurvePoint:
    """One row: ``episodes`` episodes of mean return ``episode_return`` at (``wall_s``, ``env_steps``), of which
    the share ``success`` reached their goal (None: the env does not say)."""

    kind: Kind
    wall_s: float
    env_steps: int
    episode_return: float
    episodes: int = 1
    success: float | None = None

    def to_line(self) -> str:
        success = "" if self.success is None else repr(self.success)
        return f"{self.kind},{self.wall_s:.3f},{self.env_steps},{self.episode_return!r},{self.episodes},{success}\n"


@dataclass
class Curves:
    """A run's curves as read back: its meta object, and its rows of each kind in file order."""

    path: Path
    meta: dict[str, Any]
    train: list[CurvePoint] = field(default_factory=list)
    eval: list[CurvePoint] = field(default_factory=list)

    @property
    def label(self) -> str:
        if self.meta.get("label"):
            return str(self.meta["label"])
        words = [str(self.meta.get("system", "?"))]
        if self.meta.get("mode"):
            words.append(str(self.meta["mode"]))
        if self.meta.get("seed") is not None:
            words.append(f"seed {self.meta['seed']}")
        if self.meta.get("env_kwargs"):  # runs of one env id with other --env-kwargs are other envs
            words.append(json.dumps(self.meta["env_kwargs"], separators=(",", ":")))
        if self.meta.get("setting"):  # a seeds grid's setting (seeds_grid.setting_of_run; not in the file)
            words.append(str(self.meta["setting"]))
        return " ".join(words)

    def train_moving_mean(self, window: int) -> list[tuple[float, int, float]]:
        """(wall_s, env_steps, mean return of the last ``window`` episodes) at every train row.

        Rows are weighted by their ``episodes``; a row standing for more episodes than the window
        counts alone (a period mean is all we know of its episodes).
        """
        out: list[tuple[float, int, float]] = []
        for i, point in enumerate(self.train):
            total, count, j = 0.0, 0, i
            while j >= 0 and count < window:
                p = self.train[j]
                total += p.episode_return * p.episodes
                count += p.episodes
                j -= 1
            out.append((point.wall_s, point.env_steps, total / max(count, 1)))
        return out


def curves_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / CURVES_FILE


def _header(meta: Mapping[str, Any]) -> str:
    return _META_PREFIX + json.dumps({"format": FORMAT, **dict(meta)}, sort_keys=True) + "\n" + ",".join(COLUMNS) + "\n"


def _session_line(start_step: int, wall_offset: float) -> str:
    return _SESSION_PREFIX + json.dumps({"start_step": int(start_step), "wall_offset": round(wall_offset, 3)}) + "\n"


def write_curves(run_dir: str | Path, meta: Mapping[str, Any], points: Iterable[CurvePoint]) -> Path:
    """Write a whole run's curves at once (a peer's, after its run), atomically; returns the file."""
    path = curves_path(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = _header(meta) + _session_line(0, 0.0) + "".join(p.to_line() for p in points)
    _replace(path, body)
    return path


def _replace(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    try:
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a full disk leaves no half-written temporary file
        raise


def _parse_row(line: str, columns: int = len(COLUMNS)) -> CurvePoint:
    """One row of a file with ``columns`` columns (6, or format 1's 5)."""
    fields = next(csv.reader(io.StringIO(line)))
    if len(fields) != columns or fields[0] not in KINDS:
        raise ValueError(f"expected {columns} fields starting with train or eval")
    kind: Kind = "train" if fields[0] == "train" else "eval"
    success = float(fields[5]) if columns > 5 and fields[5] else None
    point = CurvePoint(kind, float(fields[1]), int(fields[2]), float(fields[3]), int(fields[4]), success)
    if not (math.isfinite(point.wall_s) and point.episodes >= 0):
        raise ValueError("wall_s must be finite and episodes >= 0")
    if success is not None and not 0.0 <= success <= 1.0:
        raise ValueError("success must be a share in [0, 1]")
    return point


def _split(path: Path) -> tuple[dict[str, Any], list[str], int]:
    """The meta object, the lines after the column names (torn last line included: a line without its
    newline) and the number of columns (format 1 has one fewer)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        if not path.parent.is_dir():
            raise ConfigError(f"{path.parent}: no such run folder") from None
        raise ConfigError(f"{path.parent}: no {CURVES_FILE} (not a run folder, or a run from before curves "
                          "were written)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    lines = text.split("\n")  # a complete file ends with "\n": the last element is then ""
    if len(lines) < 3 or not lines[0].startswith(_META_PREFIX) or lines[1] not in (",".join(COLUMNS),
                                                                                   ",".join(COLUMNS_1)):
        raise ConfigError(f"{path} is not a curves file (its first two lines must be '# curves {{...}}' and "
                          f"'{','.join(COLUMNS)}')")
    try:
        meta = json.loads(lines[0][len(_META_PREFIX):])
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: the '# curves' line is not JSON ({exc.msg})") from None
    columns = COLUMNS if lines[1] == ",".join(COLUMNS) else COLUMNS_1
    expected = FORMAT if columns is COLUMNS else FORMAT_1
    if not isinstance(meta, dict) or meta.get("format") != expected:
        raise ConfigError(f"{path}: format {meta.get('format') if isinstance(meta, dict) else meta!r}, "
                          f"expected {expected} (for the columns {lines[1]})")
    return meta, lines[2:], len(columns)


def read_curves(run_dir: str | Path) -> Curves:
    """Read ``curves.csv`` of a run folder (or the file itself); ConfigError (one line) if it cannot.

    A torn last line (a crash mid-write) is skipped; a malformed line elsewhere is an error.
    """
    path = Path(run_dir)
    path = path if path.is_file() else curves_path(path)
    meta, lines, columns = _split(path)
    curves = Curves(path, meta)
    last = len(lines) - 1
    for i, line in enumerate(lines):
        if not line or line.startswith("#"):
            continue
        try:
            point = _parse_row(line, columns)
        except ValueError as exc:
            if i == last:  # no newline after it: the write it came from never finished
                break
            raise ConfigError(f"{path} line {i + 3}: {line[:60]!r} is not a curve row ({exc})") from None
        (curves.train if point.kind == "train" else curves.eval).append(point)
    return curves


class CurveWriter:
    """Appends rows to a run folder's ``curves.csv`` as the run goes (see the module docstring).

    Args:
        run_dir: the run folder.
        meta: names the run (``system``, ``env``, ``algo``, ``seed``, ``mode``); used when the file
            is created, kept from the file otherwise.
        resume_step: for the first writer of a resumed session: the checkpoint's env step. Rows
            past it are dropped and this session's ``wall_s`` continue from the largest kept one.
            None: a fresh run (no file yet) or a writer restarted within a session (the file's last
            ``# session`` line gives the offset).
    """

    def __init__(self, run_dir: str | Path, meta: Mapping[str, Any], resume_step: int | None = None,
                 warn: Callable[[str], None] | None = None, retry_s: float = 60.0) -> None:
        self.path = curves_path(run_dir)
        self.meta, self._resume_step = meta, resume_step
        self.wall_offset = 0.0
        self.guard = WriteGuard(f"{CURVES_FILE} ({self.path.parent})",
                                f"its rows are dropped until a retry (every {retry_s:.0f} s) succeeds", warn, retry_s)
        self._file: TextIO | None = None
        self._open()

    def _open(self) -> None:
        """Create, cut (resume) or continue the file, and open it for appends; a failure is the guard's."""
        try:
            if not self.path.exists():
                self.wall_offset = 0.0
                _replace(self.path, _header(self.meta) + _session_line(self._resume_step or 0, 0.0))
            else:
                self._upgrade_format_1()
                if self._resume_step is not None:
                    self.wall_offset = self._cut_after(self._resume_step)
                else:  # also a reopen after a failed write: a torn row is cut off, the session's offset kept
                    self.wall_offset = self._continue()
            # line buffered: each row reaches the file with one write(); closed by close()
            self._file = open(self.path, "a", buffering=1)  # noqa: SIM115
        except OSError as exc:
            self.guard.failed(exc)
            return
        self._resume_step = None  # cut once; a reopen continues this session

    def _cut_after(self, resume_step: int) -> float:
        """Rewrite the file without the rows (and session notes) past ``resume_step``; returns the offset."""
        meta, lines, columns = _split(self.path)
        kept, offset = [], 0.0
        for line in lines[:-1]:  # the last element is "" or a torn line
            if line.startswith(_SESSION_PREFIX):
                if json.loads(line[len(_SESSION_PREFIX):]).get("start_step", 0) <= resume_step:
                    kept.append(line + "\n")
            elif line and not line.startswith("#"):
                try:
                    point = _parse_row(line, columns)
                except ValueError:  # not ours to keep: read_curves would refuse the file for it
                    continue
                if point.env_steps <= resume_step:
                    kept.append(line + "\n")
                    offset = max(offset, point.wall_s)
        meta.pop("format", None)
        _replace(self.path, _header(meta) + "".join(kept) + _session_line(resume_step, offset))
        return offset

    def _upgrade_format_1(self) -> None:
        """Rewrite a format 1 file (no ``success`` column; a run begun before 2026-11-29) in format 2, so that
        this writer's rows fit the file's columns. Every line is kept but a torn last one. Only the column line
        is read unless the file is format 1: the writer's cut or continue reads the whole file next anyway."""
        with open(self.path, errors="replace") as f:
            f.readline()
            if f.readline().rstrip("\n") != ",".join(COLUMNS_1):
                return  # format 2, or not a curves file: _split says which, in the cut or continue that follows
        meta, lines, columns = _split(self.path)
        body = []
        for line in lines[:-1]:  # the last element is "" or a torn line
            if line and not line.startswith("#"):
                try:
                    line = _parse_row(line, columns).to_line().rstrip("\n")
                except ValueError:
                    pass  # kept as it was: read_curves refuses such a file in either format
            body.append(line + "\n")
        meta.pop("format", None)
        _replace(self.path, _header(meta) + "".join(body))

    def _continue(self) -> float:
        """Cut a torn last line off (so appends start on a line of their own); the session's offset."""
        _, lines, _ = _split(self.path)
        if lines[-1]:
            with open(self.path, "r+b") as f:
                f.truncate(os.path.getsize(self.path) - len(lines[-1].encode()))
        notes = [line for line in lines[:-1] if line.startswith(_SESSION_PREFIX)]
        return float(json.loads(notes[-1][len(_SESSION_PREFIX):])["wall_offset"]) if notes else 0.0

    def add(self, kind: Kind, wall_s: float, env_steps: int, episode_return: float, episodes: int,
            success: float | None = None) -> None:
        """One row; ``wall_s`` is seconds since this session started (the writer adds the offset);
        ``success``: the share of the episodes that reached their goal, None where the env does not say.

        A failed write (a full disk) drops the row and closes the file; the guard warns once and a
        later row reopens it (every ``retry_s``). Never raises ``OSError``.
        """
        if not math.isfinite(episode_return):
            return  # a NaN mean says nothing a plot can show; the row would only break readers' sums
        if self._file is None:
            if not self.guard.may_try():
                return
            self._open()
            if self._file is None:
                return
        try:
            share = None if success is None or not math.isfinite(success) else float(success)
            self._file.write(CurvePoint(kind, self.wall_offset + wall_s, int(env_steps), float(episode_return),
                                        int(episodes), share).to_line())
        except OSError as exc:
            self._drop(exc)
        else:
            self.guard.succeeded()  # a row reached the file (line buffering), not just an open that cut a torn one

    def _drop(self, exc: OSError | None) -> None:
        file, self._file = self._file, None
        if file is not None:
            try:
                file.close()  # tries the buffer once more; the descriptor is closed whatever happens
            except OSError as again:
                exc = exc or again
        if exc is not None:
            self.guard.failed(exc)

    def close(self) -> None:
        self._drop(None)
