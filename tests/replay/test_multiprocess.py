"""Three processes on one shared storage and tree: one inserting, two sampling and updating.

Every row encodes its row number in every field, so a torn or misplaced row fails the learner's
check at once; at the end the tree must be consistent with its leaves (every inner node against a
float64 recomputation) and every slot's generation even (no write left in flight).
"""

from __future__ import annotations

import math
import multiprocessing as mp
import time

import numpy as np

from spreeze_like.replay import PrioritizedConfig, PrioritizedSampler, ReplayStorage, SumTree
from tests.replay.helpers import assert_tree_consistent, attach_buffer, shared_buffer
from tests.replay.test_storage import ACT, OBS, chunk

CAPACITY = 4096
SECONDS = 3.0  # each process runs at least this long after the common start ...
MIN_BATCHES = 30  # ... and each learner until it sampled this many batches (a loaded machine starts them late)
MAX_SECONDS = 60.0
ROW_LIMIT = 1 << 23  # float32 holds row + 0.5 exactly below this


def _attach(names: tuple[str, str], seed: int) -> PrioritizedSampler:
    storage = ReplayStorage(attach_buffer(names[0]), CAPACITY, OBS, ACT, create=False)
    tree = SumTree(attach_buffer(names[1]), CAPACITY, create=False)
    return PrioritizedSampler(storage, tree, PrioritizedConfig(alpha=0.6, eps=1e-3), seed=seed)


def _inserter(names, start: float, learners_done, results) -> None:
    sampler = _attach(names, 0)
    row = CAPACITY
    # keep inserting (so slots are overwritten under the learners) until both learners are done;
    # rows are encoded in float32 (obs = row + 0.5 must stay exact), so stay below 2^23 rows: a 2 ms
    # pause per chunk caps the rate at 128k rows/s, far more than the 2 x CAPACITY the test needs
    while (time.monotonic() < start + SECONDS or learners_done.value < 2) and time.monotonic() < start + MAX_SECONDS:
        if row + 256 >= ROW_LIMIT:
            break
        sampler.add(*chunk(row, 256))
        row += 256
        time.sleep(0.002)
    results.put(("inserter", row - CAPACITY))


def _learner(names, start: float, seed: int, learners_done, results) -> None:
    sampler = _attach(names, seed)
    rng = np.random.default_rng(seed)
    batches = applied = 0
    problems = []
    while (time.monotonic() < start + SECONDS or batches < MIN_BATCHES) and time.monotonic() < start + MAX_SECONDS:
        b = sampler.sample(64)
        row = b.reward
        if not (np.all((b.slots >= 0) & (b.slots < CAPACITY)) and np.all(b.slots == row % CAPACITY)):
            problems.append("slot does not hold its row")
        if not (np.all(b.obs == row[:, None]) and np.all(b.next_obs == row[:, None] + 0.5)):
            problems.append("torn observation")
        if not (np.all(b.action == row[:, None]) and np.all(b.terminated == row % 2)):
            problems.append("torn action/terminated")
        if not (np.all(b.weights > 0) and np.all(b.weights <= 1) and np.all(b.generations % 2 == 0)):
            problems.append("bad weight or generation")
        applied += sampler.update_priorities(b.slots, b.generations, rng.normal(size=64))
        batches += 1
    with learners_done.get_lock():
        learners_done.value += 1
    results.put(("learner", batches, applied, problems[:5]))


def test_one_inserter_two_learners_keep_the_tree_consistent():
    ctx = mp.get_context("spawn")
    with (
        shared_buffer(ReplayStorage.nbytes(CAPACITY, OBS, ACT), "replay") as (s_name, s_mem),
        shared_buffer(SumTree.nbytes(CAPACITY), "tree") as (t_name, t_mem),
    ):
        storage = ReplayStorage(s_mem, CAPACITY, OBS, ACT, create=True)
        tree = SumTree(t_mem, CAPACITY, create=True)
        PrioritizedSampler(storage, tree).add(*chunk(0, CAPACITY))  # full before the learners start
        storage.release_writer()
        results = ctx.Queue()
        start = time.monotonic() + 2.0  # let every process finish importing first
        names = (s_name, t_name)
        learners_done = ctx.Value("i", 0)
        procs = [ctx.Process(target=_inserter, args=(names, start, learners_done, results))]
        procs += [ctx.Process(target=_learner, args=(names, start, seed, learners_done, results)) for seed in (1, 2)]
        for p in procs:
            p.start()
        got = [results.get(timeout=MAX_SECONDS + 60) for _ in procs]
        for p in procs:
            p.join(30)
            assert p.exitcode == 0
        inserted = next(g[1] for g in got if g[0] == "inserter")
        learners = [g for g in got if g[0] == "learner"]
        for _, batches, applied, problems in learners:
            assert problems == []
            assert batches >= MIN_BATCHES
            assert applied < batches * 64, "no update was ever dropped: staleness was not exercised"
        assert inserted > 2 * CAPACITY  # the storage wrapped while the learners sampled
        assert storage.inserted == CAPACITY + inserted
        assert np.all(storage.generations % 2 == 0)
        leaves = np.array(tree.leaves())
        assert np.all(leaves > 0)  # eps > 0: no written slot may lose its priority
        assert_tree_consistent(tree)
        assert abs(tree.total() - math.fsum(leaves)) <= 1e-9 * math.fsum(leaves)
        assert tree.lock_recoveries() == 0
        del storage, tree
