"""The run folder: ``<logdir>/<env>__<algo>__<seed>__<unixtime>/``, its config.json, and resume.

:func:`prepare_run` is the one entry both the serial and the parallel mode start from: it creates
(or, on ``--resume``, reopens) the folder, checks that it is writable, loads the newest checkpoint
when resuming (refusing one from another env or algorithm), and writes the resolved config as
``config.json`` (atomically), with a ``sources`` map beside the values that names where each came
from (flag, resume, config-file, preset:<file>#<table>, autotune, python, default; see
:mod:`spreeze_like.layering`). ``TrainConfig.from_dict`` and ``--config``/``--resume`` read such a
file as it is; a version from before sources existed rejects the extra key. Every failure is a
one-line SpreezeError.

One writer per run folder (review finding 5): :func:`prepare_run` takes an exclusive ``flock`` on
``<run_dir>/.lock`` before it reads or writes anything there, and the run's process (the serial
process, or the parallel supervisor) holds it until the mode returns (:mod:`spreeze_like.modes`
releases it) or the process dies: the kernel drops a flock with its last descriptor, so a SIGKILLed
run leaves no stale lock to clean up. A second run or ``--resume`` of a folder in use is refused in
one line naming the holder (pid, host, start time, which the holder writes into the file). The
descriptor is close-on-exec, so spawned children never hold it. The file itself stays (removing a
lock file races with the next locker); only the lock on it means anything. Why flock and not a pid
file: a pid file outlives its writer's death and a reused pid makes it lie; the flock cannot.

A run folder is data, not code (review finding 4): :func:`refuse_unnamed_env_module` keeps a saved
``module:EnvId`` (config.json for ``--resume``, a checkpoint for ``evaluate`` and ``load_policy``) from
importing its module unless the user names the env again.

While the run goes, :meth:`RunContext.check_folder` (called by the modes about once a second) stops
it in one line if the folder was deleted, moved or replaced (its device and inode no longer at the
path, review finding 15); no writer of the run recreates it (``mkdir`` without ``parents`` below
the run folder).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spreeze_like.checkpoint import check_compatible, load_latest
from spreeze_like.config import TrainConfig
from spreeze_like.config_fields import SOURCES_KEY
from spreeze_like.errors import CheckpointError, ConfigError, SpreezeError

LOCK_FILE = ".lock"
CHECK_EVERY_S = 1.0  # how often check_folder() looks at the folder (a stat; the serial loop calls it every step)


class RunFolderError(SpreezeError):
    """The run folder is in use by another run, or was deleted or moved while this run used it (exit 2)."""


class RunFolderLock:
    """An exclusive flock on ``<run_dir>/.lock`` (see the module docstring); :meth:`acquire` takes it."""

    def __init__(self, run_dir: Path, fd: int) -> None:
        self.run_dir, self.fd = run_dir, fd
        st = os.stat(run_dir)
        self.identity = (st.st_dev, st.st_ino)

    @classmethod
    def acquire(cls, run_dir: Path) -> RunFolderLock:
        """Lock ``run_dir`` for this process, or raise RunFolderError naming the process that holds it."""
        try:
            fd = os.open(run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise ConfigError(f"cannot write to run folder {run_dir}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise RunFolderError(f"run folder {run_dir} is in use by {holder}; one run at a time per folder: wait "
                                 "for that run to end (or stop it), then retry") from None
        except OSError as exc:  # ENOLCK: a network filesystem without locks
            os.close(fd)
            raise RunFolderError(f"cannot lock run folder {run_dir} ({exc.strerror or exc}); use a --logdir on a "
                                 "filesystem with file locks") from None
        try:  # who holds it, for the message of the run refused; the lock alone is what counts
            note = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()})
            os.ftruncate(fd, 0)
            os.pwrite(fd, (note + "\n").encode(), 0)
        except OSError:
            pass  # a full disk: the message will say "another process"
        return cls(run_dir, fd)

    def folder_gone(self) -> bool:
        """True once the path no longer names the folder that was locked (deleted, moved or replaced)."""
        try:
            st = os.stat(self.run_dir)
        except OSError:
            return True
        return (st.st_dev, st.st_ino) != self.identity

    def release(self) -> None:
        """Drop the lock (idempotent); a dead process's lock is dropped by the kernel."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        self.release()


def _holder(fd: int) -> str:
    """``pid N on host H since <time>`` from the lock file, as its holder wrote it."""
    try:
        note = json.loads(os.pread(fd, 4096, 0).decode())
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(note["since"])))
        return f"pid {int(note['pid'])} on host {note['host']} (since {since})"
    except (OSError, ValueError, KeyError, TypeError):  # written by nothing yet, or by something else
        return "another process"


@dataclass
class RunContext:
    """Where a run writes and what it resumes from (``payload`` is None for a fresh run); holds the folder's lock."""

    run_dir: Path
    payload: dict[str, Any] | None = None
    checkpoint_path: Path | None = None
    lock: RunFolderLock | None = field(default=None, repr=False)
    _checked_at: float = field(default=0.0, repr=False)

    def check_folder(self, force: bool = False) -> None:
        """Raise RunFolderError if the run folder was deleted, moved or replaced (looks once a second)."""
        now = time.monotonic()
        if self.lock is None or (not force and now - self._checked_at < CHECK_EVERY_S):
            return
        self._checked_at = now
        if self.lock.folder_gone():
            raise RunFolderError(self.gone_message())

    def gone_message(self) -> str:
        return (f"run folder {self.run_dir} was deleted or moved while this run used it; the run stopped and wrote "
                "nothing more (a moved folder resumes from its new place with --resume)")

    def release(self) -> None:
        """Let another run use the folder (the mode's end; :mod:`spreeze_like.modes`)."""
        if self.lock is not None:
            self.lock.release()

    @property
    def start_step(self) -> int:
        return int(self.payload["env_steps"]) if self.payload else 0

    @property
    def generation(self) -> int:
        """How many times this run has been resumed (0 for a fresh run)."""
        return int(self.payload.get("generation", 0)) + 1 if self.payload else 0


def safe_name(env: str) -> str:
    """An env id as a file name: ``module:EnvId`` and ``namespace/`` parts become ``_`` (no ``:`` on Windows)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", env)


def run_name(config: TrainConfig, unixtime: int | None = None) -> str:
    stamp = int(time.time()) if unixtime is None else unixtime
    return f"{safe_name(config.env)}__{config.algo}__{config.seed}__{stamp}"


def _new_run_dir(config: TrainConfig) -> Path:
    return new_unique_folder(Path(config.logdir), run_name(config), "a run folder")


def refuse_unnamed_env_module(saved_env: Any, typed: Any, what: str, add: str) -> None:
    """A run folder or a checkpoint is data, not code: a saved ``module:EnvId`` is imported only if typed again.

    Making ``module:EnvId`` imports ``module``, and with ``python -m`` the current folder is on ``sys.path``;
    so ``cd RUN && python -m spreeze_like.run --resume .`` (or ``... evaluate .``) would run any ``module.py``
    that came with a downloaded or shared run folder (review finding 4). Typing the env names the module
    yourself, as for a new run; a plain gymnasium id imports nothing. ``what`` names the file that holds
    the id, ``add`` says how to type it."""
    if not isinstance(saved_env, str) or typed is not None:
        return
    from spreeze_like.envs import split_env_module  # gymnasium: only where a saved env is read

    module, _ = split_env_module(saved_env)
    if module:
        raise ConfigError(
            f"{what} names env {saved_env!r}, which would import the Python module {module!r}; a run folder is "
            f"data, so its modules are imported only if you name the env yourself: {add} (after checking that "
            f"{module!r} is the module you mean)"
        )


def new_unique_folder(base: Path, name: str, what: str) -> Path:
    """Create ``base/name`` (``base`` too if missing), or ``name_1``... when folders were started in the same
    second (the names end in a unix time); a failure is one ConfigError line naming ``--logdir``."""
    try:
        base.mkdir(parents=True, exist_ok=True)
        for suffix in [""] + [f"_{i}" for i in range(1, 100)]:
            path = base / (name + suffix)
            try:
                path.mkdir()
                return path
            except FileExistsError:
                continue
    except OSError as exc:
        raise ConfigError(
            f"cannot create {what} under --logdir {base}: {exc.strerror or exc}; pass --logdir with a writable folder"
        ) from None
    raise ConfigError(f"too many folders named {name} under {base}; wait a second or pass another --logdir")


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """``data`` as indented JSON, written as :func:`write_text_atomic` writes."""
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``path`` whole or not at all (tmp file, fsync, rename); a failed write leaves no tmp file behind.
    Also the benchmarks' result files: a time limit's kill mid-write keeps the previous whole file."""
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def prepare_run(config: TrainConfig, sources: Mapping[str, str] | None = None) -> RunContext:
    """Create or reopen the run folder for a resolved config; see the module docstring.

    ``sources`` (field -> where its value came from) is saved beside the values when given.
    """
    if config.resume:
        run_dir = Path(config.resume)
        if not run_dir.is_dir():
            raise ConfigError(f"--resume {config.resume}: no such run folder")
        lock = RunFolderLock.acquire(run_dir)  # before reading: the holder may be rotating its checkpoints
    else:
        run_dir = _new_run_dir(config)
        lock = RunFolderLock.acquire(run_dir)
    try:
        context = RunContext(run_dir, lock=lock)
        if config.resume:
            payload, path = load_latest(run_dir)
            check_compatible(payload, config.env, config.algo, path, config.hidden_sizes, config.env_kwargs,
                             config.critic_hidden_sizes, config.n_step)
            if int(payload["env_steps"]) >= config.total_steps:
                raise CheckpointError(
                    f"{path} is already at {payload['env_steps']} env steps >= --total-steps {config.total_steps}; "
                    "pass a larger --total-steps to continue"
                )
            context.payload, context.checkpoint_path = payload, path
        try:
            saved = config.to_dict()
            if sources is not None:
                saved[SOURCES_KEY] = {name: sources.get(name, "default") for name in saved}
            write_json_atomic(context.run_dir / "config.json", saved)
        except OSError as exc:
            raise ConfigError(f"cannot write to run folder {context.run_dir}: {exc.strerror or exc}") from None
    except BaseException:
        lock.release()
        raise
    return context
