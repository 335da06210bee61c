"""Shared checks for the replay tests."""

from __future__ import annotations

import contextlib
import math
import mmap
import os

import numpy as np
import posix_ipc

from spreeze_like.ipc import segment_name
from spreeze_like.replay.sum_tree import SumTree


def assert_tree_consistent(tree: SumTree, rel: float = 1e-9) -> None:
    """Every inner node equals a float64 recomputation from its children, and from its leaves.

    Sums: against the numpy sum of the children (1e-12 relative: only the addition order differs)
    and against math.fsum of every leaf below the node (``rel``). Mins: exactly the smallest
    positive leaf below the node (inf where none).
    """
    k, depth = tree.k, tree.depth
    leaves = np.array(tree.leaves())
    span = 1
    below_sums = leaves
    below_mins = np.where(leaves > 0, leaves, np.inf)
    for level in range(depth - 1, -1, -1):
        span *= k
        sums, mins = np.array(tree.level(level)), np.array(tree.level(level, mins=True))
        pad = sums.size * k - below_sums.size
        expect_sums = np.concatenate([below_sums, np.zeros(pad)]).reshape(-1, k).sum(axis=1)
        expect_mins = np.concatenate([below_mins, np.full(pad, np.inf)]).reshape(-1, k).min(axis=1)
        np.testing.assert_allclose(sums, expect_sums, rtol=1e-12, atol=0, err_msg=f"sums of level {level}")
        np.testing.assert_array_equal(mins, expect_mins, err_msg=f"mins of level {level}")
        for j in range(0, sums.size, max(1, sums.size // 64)):  # a spread of nodes vs exact sums
            exact = math.fsum(leaves[j * span : (j + 1) * span])
            assert abs(sums[j] - exact) <= rel * exact, (level, j, sums[j], exact)
        below_sums, below_mins = sums, mins
    assert abs(tree.total() - math.fsum(leaves)) <= rel * math.fsum(leaves)


@contextlib.contextmanager
def shared_buffer(nbytes: int, kind: str, index: int = 0):
    """A fresh POSIX shared-memory segment named by the project rule; unlinked on exit."""
    name = segment_name(f"test{os.getpid()}", kind, index)
    shm = posix_ipc.SharedMemory(name, posix_ipc.O_CREX, size=nbytes)
    try:
        mem = mmap.mmap(shm.fd, shm.size)
        shm.close_fd()
        yield name, mem
    finally:
        posix_ipc.unlink_shared_memory(name)


def attach_buffer(name: str) -> mmap.mmap:
    """Map an existing segment (in a child process)."""
    shm = posix_ipc.SharedMemory(name)
    mem = mmap.mmap(shm.fd, shm.size)
    shm.close_fd()
    return mem
