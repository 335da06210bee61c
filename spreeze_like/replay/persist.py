"""The replay buffer saved beside a run's checkpoints (``--save-replay``) and loaded again by ``--resume``.

Why: without it a resumed run starts from an empty buffer. It refills ``max(batch_size,
learning_starts)`` transitions with its restored policy and then trains on a buffer that holds only
the newest few thousand transitions of one policy, which is not where the networks were trained (a
dip in the learning curve; BENCHMARKS.md, "Resume with and without the saved replay"). A preempted
run (SIGTERM) should continue as if it had not stopped.

When it is written: at the end of a session (the end of training, Ctrl-C, SIGTERM), after the final
checkpoint, by the process that owns the storage once nothing writes to it any more: the serial
trainer itself; in the parallel mode the supervisor after every role has been joined and it has
drained what was left in the sampler rings (``procs/shutdown.drain_leftovers``), before it unlinks
the segments. Not at the periodic checkpoints: a HalfCheetah buffer of 1M transitions is about 170
MB (Humanoid's 3 GB), too much to write every few minutes, and the critic's feeder is writing into
it then. So a run killed with SIGKILL resumes with the newest replay saved by an earlier
session end, or with none.

Layout: ``<run>/checkpoints/replay_<env step, 10 digits>/`` holding ``meta.json`` (format, env id,
dims, rows, the env step of the checkpoint written with it) and one ``.npy`` per column, rows oldest
first (so loading is a plain FIFO append). The folder is written under a temporary name, each file
fsynced, then renamed into place and the parent fsynced: a crash leaves the previous replay folder or
the new one, never a torn one under a final name; a killed writer's temporary folder is removed by
the next save. Only the newest replay folder is kept. Saving again at the env step of an existing
folder (a resume stopped before its first new step) cannot rename over it (a folder is not replaced
while it holds files), so that folder is first renamed aside to ``.replay_retired.<name>`` and
removed only once the new one is in place; a crash between the two renames leaves the old folder
there, and the next save or load renames it back (:func:`_finish_interrupted_swap`).

Loading trusts nothing: ``.npy`` files are read without pickle, every column's dtype and shape is
checked against ``meta.json`` and against the env's dimensions, and a folder that fails any check is
a one-line :class:`~spreeze_like.errors.CheckpointError` saying to delete it (the run then resumes
with an empty buffer, as without ``--save-replay``). Odd-generation slots (a writer killed mid-chunk)
are left out.

Prioritized replay: the sum tree's priorities are saved too (``priority.npy``, float64, in the rows'
order; ``meta.json`` says ``"priorities": true`` and holds the largest priority set, which new rows
get), and a prioritized resume puts each loaded row back at its priority, so sampling goes on where it
stopped. Without them every loaded row would get a new tree's largest priority, 1.0: sampling would
be uniform over the loaded rows until TD errors had re-ranked each one. A replay saved without
priorities (a uniform run, or an older spreeze_like) loads into a prioritized run with the largest
priority for every row, as new rows get; a uniform resume ignores saved priorities. Still format 1:
the file and the keys are optional, and an older reader ignores them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from spreeze_like.checkpoint import fsync_dir
from spreeze_like.errors import CheckpointError
from spreeze_like.replay.storage import ReplayStorage
from spreeze_like.replay.sum_tree import SumTree

FORMAT = 1
COLUMNS = ("obs", "action", "reward", "next_obs", "terminated", "truncated")
_NAME = re.compile(r"^replay_(\d{10,})$")
_TMP_PREFIX = ".replay_tmp."
_RETIRED_PREFIX = ".replay_retired."  # + a final name: a same-step save's previous folder, until the new one is in
PRIORITY_FILE = "priority.npy"  # prioritized replay's sum-tree leaves of the saved rows, float64
LOAD_CHUNK = 65_536  # rows appended per storage.add while loading (bounds the copy's extra memory)


@dataclass(frozen=True)
class SavedReplay:
    """What :func:`save_replay` wrote, or what :func:`load_replay` appended."""

    path: Path
    rows: int
    env_step: int  # the env step of the checkpoint it was written with


def replay_folders(checkpoints: Path) -> list[Path]:
    """Final-named replay folders in a run's checkpoint folder, oldest first."""
    if not checkpoints.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in checkpoints.iterdir() if (m := _NAME.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found)]


def _fifo_slots(storage: ReplayStorage) -> np.ndarray:
    """The filled slots, oldest row first, without those a killed writer left half-written (odd generation)."""
    inserted, capacity = storage.inserted, storage.capacity
    if inserted <= capacity:
        slots = np.arange(inserted, dtype=np.int64)
    else:
        start = inserted % capacity
        slots = np.concatenate([np.arange(start, capacity, dtype=np.int64), np.arange(start, dtype=np.int64)])
    return slots[storage.generations[slots] % 2 == 0]


def _finish_interrupted_swap(checkpoints: Path) -> None:
    """Put right what a save killed during a same-step swap left: a retired folder whose final name is empty
    goes back under it (it is whole: removing it starts only after the new folder is in place); one whose
    final name is filled again is removed (the swap had finished; its removal may have been cut short)."""
    if not checkpoints.is_dir():
        return
    for retired in checkpoints.glob(f"{_RETIRED_PREFIX}replay_*"):
        final = checkpoints / retired.name[len(_RETIRED_PREFIX):]
        if not _NAME.match(final.name):
            continue
        if final.exists():
            shutil.rmtree(retired, ignore_errors=True)
        else:
            os.replace(retired, final)
            fsync_dir(checkpoints)


def _write_npy(path: Path, array: np.ndarray) -> None:
    with open(path, "wb") as f:
        np.save(f, array, allow_pickle=False)
        f.flush()
        os.fsync(f.fileno())


def save_replay(storage: ReplayStorage, checkpoints: Path, env_step: int, env_id: str,
                tree: SumTree | None = None) -> SavedReplay:
    """Write ``storage``'s rows (and prioritized replay's ``tree`` priorities of them) to
    ``checkpoints/replay_<env_step>/`` and remove every older replay folder.

    The caller guarantees that nothing adds to the storage or the tree meanwhile. Raises OSError on a failed
    write (a full disk): nothing partial is left and the previous replay folder stays.
    """
    _finish_interrupted_swap(checkpoints)
    for stale in checkpoints.glob(f"{_TMP_PREFIX}*"):  # a killed writer's leftovers
        shutil.rmtree(stale, ignore_errors=True)
    final = checkpoints / f"replay_{env_step:010d}"
    tmp = checkpoints / f"{_TMP_PREFIX}{os.getpid()}"
    retired = checkpoints / f"{_RETIRED_PREFIX}{final.name}"
    slots = _fifo_slots(storage)
    meta = {"format": FORMAT, "env": env_id, "obs_dim": storage.obs_dim, "act_dim": storage.act_dim,
            "rows": int(slots.size), "env_step": int(env_step), "priorities": tree is not None}
    if tree is not None:
        meta["max_priority"] = tree.max_priority()
    try:
        tmp.mkdir()
        for name in COLUMNS:
            _write_npy(tmp / f"{name}.npy", getattr(storage, name)[slots])
        if tree is not None:
            _write_npy(tmp / PRIORITY_FILE, tree.get(slots))
        with open(tmp / "meta.json", "w") as f:
            json.dump(meta, f)
            f.flush()
            os.fsync(f.fileno())
        fsync_dir(tmp)
        if final.exists():  # the same step saved again: keep the old folder, aside, until the new one is in
            os.replace(final, retired)
            fsync_dir(checkpoints)
        os.replace(tmp, final)  # a failure here leaves the retired folder: the next save or load restores it
        fsync_dir(checkpoints)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(retired, ignore_errors=True)
    for old in replay_folders(checkpoints):
        if old != final:
            shutil.rmtree(old, ignore_errors=True)
    return SavedReplay(final, int(slots.size), int(env_step))


def _read_meta(folder: Path) -> dict:
    try:
        meta = json.loads((folder / "meta.json").read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{folder}/meta.json is unreadable ({type(exc).__name__}); delete {folder} to resume "
                              "with an empty replay buffer") from None
    counts = ("obs_dim", "act_dim", "rows", "env_step")
    top = meta.get("max_priority", 1.0) if isinstance(meta, dict) else None
    if (not isinstance(meta, dict) or meta.get("format") != FORMAT or not isinstance(meta.get("env"), str)
            or any(type(meta.get(k)) is not int or meta[k] < 0 for k in counts)
            or type(meta.get("priorities", False)) is not bool
            or type(top) not in (int, float) or not np.isfinite(top) or top < 1.0):  # a tree's max starts at 1
        raise CheckpointError(f"{folder} is not a spreeze_like replay of format {FORMAT}; delete it to resume with an "
                              "empty replay buffer")
    return meta


def _read_columns(folder: Path, meta: dict, with_priorities: bool) -> dict[str, np.ndarray]:
    """Every column memory-mapped, checked for dtype and shape (no pickle, nothing read into memory yet); the
    priorities too (``"priority"``) when ``with_priorities`` and the folder has them, checked for values."""
    rows, obs_dim, act_dim = int(meta["rows"]), int(meta["obs_dim"]), int(meta["act_dim"])
    shapes = {"obs": (rows, obs_dim), "action": (rows, act_dim), "next_obs": (rows, obs_dim)}
    wanted = [(name, f"{name}.npy", np.float32) for name in COLUMNS]
    if with_priorities and meta.get("priorities"):
        wanted.append(("priority", PRIORITY_FILE, np.float64))
    columns = {}
    for name, file, dtype in wanted:
        path = folder / file
        try:
            array = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise CheckpointError(f"{path} is corrupt or unreadable ({type(exc).__name__}); delete {folder} to resume "
                                  "with an empty replay buffer") from None
        shape = shapes.get(name, (rows,))
        if array.dtype != dtype or array.shape != shape:
            raise CheckpointError(f"{path} holds {array.dtype}{list(array.shape)}, not {np.dtype(dtype).name}"
                                  f"{list(shape)}; delete {folder} to resume with an empty replay buffer")
        columns[name] = array
    saved = columns.get("priority")
    if saved is not None and not (np.isfinite(saved).all() and (saved >= 0).all()):
        raise CheckpointError(f"{folder / PRIORITY_FILE} holds priorities that are negative or not finite; delete "
                              f"{folder} to resume with an empty replay buffer")
    return columns


def load_replay(checkpoints: Path, storage: ReplayStorage, env_id: str,
                tree: SumTree | None = None) -> SavedReplay | None:
    """Append the newest saved replay of a run to an empty ``storage`` (FIFO: its newest rows when the storage is
    smaller); None when the run has none. With prioritized replay's ``tree`` each row gets its saved priority
    (saved without: the largest one, as a new row does) before it is published. Raises CheckpointError, adding
    nothing, for a replay that is not this env's or does not read back."""
    try:
        _finish_interrupted_swap(checkpoints)
    except OSError as exc:
        raise CheckpointError(f"a replay folder set aside in {checkpoints} by a killed save could not be renamed "
                              f"back ({exc.strerror or exc}); rename {_RETIRED_PREFIX}replay_<step> to replay_<step> "
                              "there, or delete it to resume with an empty replay buffer") from None
    found = replay_folders(checkpoints)
    if not found:
        return None
    folder = found[-1]
    meta = _read_meta(folder)
    if meta["env"] != env_id or (meta["obs_dim"], meta["act_dim"]) != (storage.obs_dim, storage.act_dim):
        raise CheckpointError(f"{folder} holds transitions of env {meta['env']!r} with obs/action dims "
                              f"{meta['obs_dim']}/{meta['act_dim']}, not {env_id!r} with {storage.obs_dim}/"
                              f"{storage.act_dim}; delete it to resume with an empty replay buffer")
    columns = _read_columns(folder, meta, with_priorities=tree is not None)
    if storage.inserted:
        raise ValueError("load_replay needs an empty storage")
    rows = int(meta["rows"])
    first = max(0, rows - storage.capacity)  # a smaller --buffer-size keeps the newest rows
    chunk = min(LOAD_CHUNK, storage.capacity)
    saved = columns.get("priority")

    def prioritize(lo: int, hi: int) -> Callable[[np.ndarray], object] | None:
        if tree is None:
            return None
        if saved is None:
            return tree.set_max
        return lambda slots: tree.update(slots, np.asarray(saved[lo:hi]))

    try:
        for lo in range(first, rows, chunk):
            hi = min(rows, lo + chunk)
            storage.add(*(np.asarray(columns[name][lo:hi]) for name in COLUMNS), on_written=prioritize(lo, hi))
        if saved is not None and rows > first:
            tree.raise_max(float(meta["max_priority"]))  # new rows get the saved run's largest priority
    except (OSError, ValueError) as exc:  # a file truncated after its header was read
        raise CheckpointError(f"{folder} does not read back ({type(exc).__name__}: {exc}); delete it to resume with "
                              "an empty replay buffer") from None
    return SavedReplay(folder, rows - first, int(meta["env_step"]))


def describe_loaded(loaded: SavedReplay, checkpoint_step: int) -> str:
    """The resume's line about the replay it continues with."""
    if loaded.env_step == checkpoint_step:
        when = "saved with this checkpoint"
    elif loaded.env_step < checkpoint_step:  # the newest checkpoint is a periodic one (the run was killed)
        when = (f"saved at {loaded.env_step:,} env steps, the checkpoint at {checkpoint_step:,}: the transitions "
                "between the two are not in it")
    else:  # a newer checkpoint was deleted to fall back to this one
        when = (f"saved at {loaded.env_step:,} env steps, after the checkpoint at {checkpoint_step:,}: it also "
                "holds the transitions collected after it")
    return f"[spreeze] replay: {loaded.rows:,} transitions loaded from {loaded.path.name} ({when})"


# --- what the two modes call: the supervisor (parallel) and the serial trainer ---------------------------------
def resume_replay(storage: ReplayStorage, run_dir: Path, env_id: str, checkpoint_step: int,
                  tree: SumTree | None, say: Callable[[str], None]) -> int:
    """At a resume, before any role adds a row: the newest saved replay into the empty storage (and its
    priorities into prioritized replay's ``tree``). Returns the rows loaded (0 without a saved replay: the run
    refills its buffer as it always did). The loader gives up the writer role afterwards, so the critic's
    feeder (another process) may add next."""
    try:
        loaded = load_replay(Path(run_dir) / "checkpoints", storage, env_id, tree)
    finally:
        storage.release_writer()
    if loaded is None:
        return 0
    say(describe_loaded(loaded, checkpoint_step))
    return loaded.rows


def keep_replay(storage: ReplayStorage, run_dir: Path, env_step: int, env_id: str, tree: SumTree | None,
                say: Callable[[str], None]) -> SavedReplay | None:
    """At a session's end, after its final checkpoint: save the replay (``--save-replay``), with prioritized
    replay's ``tree`` priorities. A failed write (a full disk) is one line, not a failure of the run: its
    checkpoint is written, and a resume refills the buffer."""
    checkpoints = Path(run_dir) / "checkpoints"
    try:
        saved = save_replay(storage, checkpoints, env_step, env_id, tree)
    except OSError as exc:  # ENOSPC from a write, or numpy's short-write error (no errno) from np.save
        row_bytes = sum(getattr(storage, name)[:1].nbytes for name in COLUMNS)  # what one saved row takes
        row_bytes += 8 if tree is not None else 0  # its float64 priority
        try:
            free = f"{shutil.disk_usage(checkpoints).free / 2**20:,.0f} MiB free there"
        except OSError:
            free = "the folder is gone"
        say(f"[spreeze] replay not saved ({exc.strerror or exc}; it needs {storage.size * row_bytes / 2**20:,.0f} "
            f"MiB, {free}): the checkpoint is written, and a resume refills the replay buffer")
        return None
    say(f"[spreeze] replay: {saved.rows:,} transitions saved in {saved.path}")
    return saved
