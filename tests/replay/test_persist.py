"""replay/persist.py: the replay saved beside a checkpoint (--save-replay) and loaded by --resume.

Rows carry their own row number in every field, so an order, a lost row or a row from the wrong slot
shows. The full disk is a real tmpfs (tests/fullfs.py), skipped without root, never faked.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from fullfs import fill, small_tmpfs

from spreeze_like.errors import CheckpointError
from spreeze_like.native import _native
from spreeze_like.replay import PrioritizedSampler, ReplayStorage, SumTree
from spreeze_like.replay.persist import (
    SavedReplay,
    describe_loaded,
    keep_replay,
    load_replay,
    replay_folders,
    resume_replay,
    save_replay,
)

OBS, ACT = 3, 2
ENV = "Toy-v0"


def chunk(start: int, n: int):
    rows = np.arange(start, start + n, dtype=np.float32)
    obs = np.repeat(rows[:, None], OBS, 1)
    return obs, np.repeat(rows[:, None], ACT, 1), rows, obs + 0.5, rows % 2, (rows % 3 == 0).astype(np.float32)


def filled(capacity: int, rows: int, step: int = 100) -> ReplayStorage:
    storage = ReplayStorage.local(capacity, OBS, ACT)
    for lo in range(0, rows, step):
        storage.add(*chunk(lo, min(step, rows - lo)))
    return storage


def fifo_rows(storage: ReplayStorage) -> np.ndarray:
    """The row numbers the storage holds, oldest first (read from the reward column)."""
    start = storage.inserted % storage.capacity if storage.inserted > storage.capacity else 0
    order = np.r_[start:storage.size, 0:start] if start else np.arange(storage.size)
    return storage.reward[order]


def check_rows_match_numbers(storage: ReplayStorage) -> None:
    n = storage.size
    r = storage.reward[:n]
    np.testing.assert_array_equal(storage.obs[:n], np.repeat(r[:, None], OBS, 1))
    np.testing.assert_array_equal(storage.action[:n], np.repeat(r[:, None], ACT, 1))
    np.testing.assert_array_equal(storage.next_obs[:n], np.repeat(r[:, None], OBS, 1) + 0.5)
    np.testing.assert_array_equal(storage.terminated[:n], r % 2)
    np.testing.assert_array_equal(storage.truncated[:n], (r % 3 == 0).astype(np.float32))


@pytest.mark.parametrize(("capacity", "rows"), [(1000, 640), (1000, 1000), (1000, 2730)])
def test_round_trip_keeps_every_row_in_fifo_order(tmp_path, capacity, rows):
    source = filled(capacity, rows)
    saved = save_replay(source, tmp_path, 5000, ENV)
    assert saved.rows == min(rows, capacity) and saved.path == tmp_path / "replay_0000005000"
    target = ReplayStorage.local(capacity, OBS, ACT)
    loaded = load_replay(tmp_path, target, ENV)
    assert loaded is not None and loaded.rows == saved.rows and loaded.env_step == 5000
    assert target.inserted == saved.rows
    np.testing.assert_array_equal(fifo_rows(target), np.arange(rows - saved.rows, rows, dtype=np.float32))
    np.testing.assert_array_equal(fifo_rows(target), fifo_rows(source))
    check_rows_match_numbers(target)
    assert not (target.generations % 2).any()


def test_a_smaller_buffer_keeps_the_newest_rows(tmp_path):
    save_replay(filled(1000, 1000), tmp_path, 1000, ENV)
    target = ReplayStorage.local(300, OBS, ACT)
    loaded = load_replay(tmp_path, target, ENV)
    assert loaded.rows == 300
    np.testing.assert_array_equal(fifo_rows(target), np.arange(700, 1000, dtype=np.float32))
    check_rows_match_numbers(target)


def test_a_slot_left_half_written_by_a_killed_writer_is_not_saved(tmp_path):
    source = filled(100, 250)
    torn = np.array([50, 51], dtype=np.int64)  # the next chunk's slots, as a writer killed mid-chunk leaves them
    _native.generations_begin_write(source.generations, torn)
    saved = save_replay(source, tmp_path, 250, ENV)
    assert saved.rows == 98
    target = ReplayStorage.local(100, OBS, ACT)
    load_replay(tmp_path, target, ENV)
    assert 150.0 not in target.reward[:98] and 151.0 not in target.reward[:98]
    np.testing.assert_array_equal(fifo_rows(target), np.arange(152, 250, dtype=np.float32))


def test_only_the_newest_replay_is_kept_and_a_killed_writers_folder_is_removed(tmp_path):
    leftover = tmp_path / ".replay_tmp.999999"
    leftover.mkdir()
    (leftover / "obs.npy").write_bytes(b"half")
    save_replay(filled(100, 40), tmp_path, 40, ENV)
    save_replay(filled(100, 90), tmp_path, 90, ENV)
    assert [p.name for p in replay_folders(tmp_path)] == ["replay_0000000090"]
    assert not leftover.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["replay_0000000090"]


KILL_DURING_SAVE = Path(__file__).with_name("kill_during_save.py")


def test_a_save_killed_anywhere_in_a_same_step_swap_leaves_a_whole_replay(tmp_path):
    """A resume stopped before its first new step saves its replay at the step of the folder it loaded. The
    old folder cannot be renamed over, so it goes aside first; SIGKILL the saver at each change of names in
    turn and the run must still load one whole replay, the old or the new, and save cleanly after."""
    outcomes = []
    for kill_at in range(10):
        checkpoints = tmp_path / f"kill_at_{kill_at}"
        checkpoints.mkdir()
        save_replay(filled(100, 40), checkpoints, 500, ENV)
        child = subprocess.run([sys.executable, str(KILL_DURING_SAVE), str(checkpoints), "500", "60", str(kill_at)],
                               check=False, capture_output=True, text=True, timeout=120)
        if child.returncode == 0:
            assert child.stdout.split() == ["saved", str(kill_at)], child.stdout
            break
        assert child.returncode == -signal.SIGKILL, child.stderr
        target = ReplayStorage.local(100, OBS, ACT)
        loaded = load_replay(checkpoints, target, ENV)
        assert loaded is not None and loaded.path.name == "replay_0000000500", f"kill at change {kill_at}"
        assert loaded.rows in (40, 60), f"kill at change {kill_at}: {loaded.rows} rows"
        np.testing.assert_array_equal(fifo_rows(target), np.arange(loaded.rows, dtype=np.float32))
        check_rows_match_numbers(target)
        outcomes.append(loaded.rows)
        save_replay(filled(100, 70), checkpoints, 500, ENV)  # the next session's save puts everything right
        assert sorted(p.name for p in checkpoints.iterdir()) == ["replay_0000000500"], f"kill at change {kill_at}"
    else:
        raise AssertionError("the save was killed at every one of 10 changes: it should make fewer")
    # the old folder aside, the new one in, the old one removed: a kill before the new one is in keeps the old
    # replay, one after keeps the new
    assert len(outcomes) >= 3 and 40 in outcomes and 60 in outcomes, outcomes


def test_no_saved_replay_loads_nothing(tmp_path):
    target = ReplayStorage.local(100, OBS, ACT)
    assert load_replay(tmp_path / "missing", target, ENV) is None
    lines: list[str] = []
    assert resume_replay(target, tmp_path, ENV, 0, None, lines.append) == 0
    assert lines == [] and target.inserted == 0


def test_another_envs_replay_is_refused_and_nothing_is_added(tmp_path):
    save_replay(filled(100, 50), tmp_path, 50, ENV)
    other = ReplayStorage.local(100, OBS + 1, ACT)
    with pytest.raises(CheckpointError, match=r"not 'Toy-v0' with 4/2; delete it"):
        load_replay(tmp_path, other, ENV)
    with pytest.raises(CheckpointError, match="'Toy-v0'.*not 'Other-v0'"):
        load_replay(tmp_path, ReplayStorage.local(100, OBS, ACT), "Other-v0")
    assert other.inserted == 0


def _corrupt(folder: Path, how: str) -> None:
    if how == "truncated":
        path = folder / "obs.npy"
        path.write_bytes(path.read_bytes()[:200])
    elif how == "garbage":
        (folder / "reward.npy").write_bytes(os.urandom(300))
    elif how == "pickled":  # an object array: loading it would need pickle, which is refused
        with open(folder / "action.npy", "wb") as f:
            np.save(f, np.array([{"x": 1}] * 50, dtype=object), allow_pickle=True)
    elif how == "dtype":
        np.save(folder / "terminated.npy", np.zeros(50, np.float64))
    elif how == "rows":
        meta = json.loads((folder / "meta.json").read_text())
        (folder / "meta.json").write_text(json.dumps({**meta, "rows": 60}))
    elif how == "meta":
        (folder / "meta.json").write_text("{not json")
    elif how == "foreign":
        (folder / "meta.json").write_text(json.dumps({"format": 7}))
    elif how == "types":  # counts that are not whole numbers must not reach a shape or a slice
        meta = json.loads((folder / "meta.json").read_text())
        (folder / "meta.json").write_text(json.dumps({**meta, "rows": "50", "obs_dim": 3.0}))


    elif how == "priority-values":
        np.save(folder / "priority.npy", np.r_[np.ones(49), np.nan])
    elif how == "priority-shape":
        np.save(folder / "priority.npy", np.ones(49))
    elif how in ("priority-flag", "priority-max"):
        meta = json.loads((folder / "meta.json").read_text())
        change = {"priorities": "yes"} if how == "priority-flag" else {"max_priority": 0.5}
        (folder / "meta.json").write_text(json.dumps({**meta, **change}))


@pytest.mark.parametrize("how", ["truncated", "garbage", "pickled", "dtype", "rows", "meta", "foreign", "types",
                                 "priority-values", "priority-shape", "priority-flag", "priority-max"])
def test_a_corrupt_replay_is_one_line_saying_to_delete_it(tmp_path, how):
    saved = save_replay(filled(100, 50), tmp_path, 50, ENV, SumTree.local(100))
    _corrupt(saved.path, how)
    target, tree = ReplayStorage.local(100, OBS, ACT), SumTree.local(100)
    with pytest.raises(CheckpointError) as info:
        load_replay(tmp_path, target, ENV, tree)
    message = str(info.value)
    assert "\n" not in message and "delete" in message and str(saved.path) in message
    assert target.inserted == 0 and tree.total() == 0


def _prioritized(capacity: int, rows: int, seed: int = 0) -> tuple[ReplayStorage, SumTree, dict[float, float]]:
    """A filled storage whose tree holds a distinct random priority per row (and a largest priority set, 9.5, that
    no row holds any more); returns the priority of each row number."""
    storage, tree = ReplayStorage.local(capacity, OBS, ACT), SumTree.local(capacity)
    for lo in range(0, rows, 100):
        storage.add(*chunk(lo, min(100, rows - lo)), on_written=tree.set_max)
    slots = np.arange(storage.size, dtype=np.int64)
    tree.update(slots[:1], np.array([9.5]))
    tree.update(slots, np.random.default_rng(seed).uniform(0.05, 3.0, slots.size))
    return storage, tree, dict(zip(storage.reward[slots].tolist(), tree.get(slots).tolist(), strict=True))


@pytest.mark.parametrize(("saved_rows", "capacity"), [(640, 1000), (2730, 1000), (2730, 300)])
def test_prioritized_replay_resumes_with_each_rows_priority(tmp_path, saved_rows, capacity):
    storage, tree, by_row = _prioritized(1000, saved_rows)
    save_replay(storage, tmp_path, saved_rows, ENV, tree)
    target, loaded = ReplayStorage.local(capacity, OBS, ACT), SumTree.local(capacity)
    load_replay(tmp_path, target, ENV, loaded)
    slots = np.arange(target.size, dtype=np.int64)
    got = dict(zip(target.reward[slots].tolist(), loaded.get(slots).tolist(), strict=True))
    assert got == {row: by_row[row] for row in got}  # every row back at its own priority (not 1.0)
    assert len(got) == min(capacity, storage.size)
    assert loaded.max_priority() == 9.5  # what the next new row gets, as in the saved run
    assert loaded.total() == pytest.approx(sum(got.values()))


def test_saved_priorities_are_ignored_by_a_uniform_resume_and_missing_ones_give_the_largest(tmp_path):
    storage, tree, _ = _prioritized(100, 60)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    saved = save_replay(storage, tmp_path / "a", 60, ENV, tree)
    (saved.path / "priority.npy").write_bytes(b"not read by a uniform resume")
    assert load_replay(tmp_path / "a", ReplayStorage.local(100, OBS, ACT), ENV).rows == 60
    save_replay(storage, tmp_path / "b", 60, ENV)  # a uniform run's replay (or an older spreeze_like's)
    assert not (tmp_path / "b" / "replay_0000000060" / "priority.npy").exists()
    fresh = SumTree.local(100)
    load_replay(tmp_path / "b", ReplayStorage.local(100, OBS, ACT), ENV, fresh)
    np.testing.assert_array_equal(fresh.get(np.arange(60)), np.ones(60))


def test_resume_replay_gives_up_the_writer_role_and_says_what_it_loaded(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    save_replay(filled(100, 70), tmp_path / "checkpoints", 70, ENV)
    target = ReplayStorage.local(100, OBS, ACT)
    lines: list[str] = []
    assert resume_replay(target, tmp_path, ENV, 80, None, lines.append) == 70
    assert target.writer_pid() == 0  # the critic's feeder, another process, adds next
    assert lines == [("[spreeze] replay: 70 transitions loaded from replay_0000000070 (saved at 70 env steps, the "
                      "checkpoint at 80: the transitions between the two are not in it)")]


def test_the_line_says_how_the_replay_and_the_checkpoint_relate(tmp_path):
    saved = SavedReplay(tmp_path / "replay_0000000500", 500, 500)
    assert describe_loaded(saved, 500).endswith("(saved with this checkpoint)")
    assert "the checkpoint at 700: the transitions between the two are not in it" in describe_loaded(saved, 700)
    assert "after the checkpoint at 300: it also holds the transitions collected after it" in describe_loaded(saved,
                                                                                                              300)


def test_prioritized_rows_loaded_get_a_priority_and_are_sampled(tmp_path):
    save_replay(filled(128, 128), tmp_path, 128, ENV)
    storage = ReplayStorage.local(128, OBS, ACT)
    tree = SumTree.local(128)
    load_replay(tmp_path, storage, ENV, tree)
    assert np.count_nonzero(tree.leaves()) == 128
    batch = PrioritizedSampler(storage, tree, seed=3).sample(64)
    assert np.isfinite(batch.weights).all() and batch.obs.shape == (64, OBS)


def test_a_full_disk_is_one_line_and_keeps_the_previous_replay(tmp_path):
    with small_tmpfs(tmp_path / "fs", 1024) as fs:
        checkpoints = fs / "checkpoints"
        checkpoints.mkdir()
        keep_replay(filled(100, 20), fs, 20, ENV, None, lambda line: None)  # about 2 KiB
        fill(fs, leave_kib=8)
        lines: list[str] = []
        big = filled(20_000, 20_000, step=5000)  # about 1 MiB: cannot fit
        assert keep_replay(big, fs, 20_000, ENV, None, lines.append) is None
        assert len(lines) == 1 and lines[0].startswith("[spreeze] replay not saved (")
        assert "it needs 1 MiB" in lines[0] and "MiB free there): the checkpoint is written" in lines[0]
        assert sorted(p.name for p in checkpoints.iterdir()) == ["replay_0000000020"]  # no temporary folder left
        (fs / ".filler").unlink()
        target = ReplayStorage.local(100, OBS, ACT)
        assert load_replay(checkpoints, target, ENV).rows == 20
