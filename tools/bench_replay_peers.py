"""The three replay buffers of tools/bench_replay.py behind one small interface.

Each peer: ``fill(rng)`` to capacity, ``make_chunk(rng, n)``, ``insert(chunk)``, ``sample(n)``
(data + importance weights + indexes, as its users get them), ``sample_for_update(n)`` and
``update(sampled, td_errors)`` (the TD errors as a learner has them: signed float32; each peer turns
them into priorities the way its API asks). All use alpha 0.6, beta 0.4 and skip updates for slots
rewritten since they were sampled where the library can (ours always; cpprb with
``check_for_update``, run both with and without it).
"""

from __future__ import annotations

import mmap
import os
import time

import numpy as np

ALPHA, BETA, EPS = 0.6, 0.4, 1e-6


def make_chunk(rng: np.random.Generator, n: int, obs_dim: int, act_dim: int):
    """n random transitions: obs, action, reward, next_obs, terminated (float32)."""
    f = np.float32
    return (
        rng.random((n, obs_dim), f),
        rng.random((n, act_dim), f),
        rng.random(n, f),
        rng.random((n, obs_dim), f),
        (rng.random(n) < 0.01).astype(f),
    )


def attach(name: str) -> mmap.mmap:
    """Map an existing POSIX shared-memory segment."""
    import posix_ipc

    shm = posix_ipc.SharedMemory(name)
    mem = mmap.mmap(shm.fd, shm.size)
    shm.close_fd()
    return mem


class OursPeer:
    """spreeze_like: storage and sum tree in POSIX shared memory, PrioritizedSampler on top.

    The benchmark process creates both segments and unlinks them in :meth:`close` (also on error).
    """

    def __init__(self, capacity: int, obs_dim: int, act_dim: int) -> None:
        import posix_ipc

        from spreeze_like.ipc import segment_name
        from spreeze_like.replay import PrioritizedConfig, PrioritizedSampler, ReplayStorage, SumTree

        run = f"bench{os.urandom(3).hex()}"
        self.names = (segment_name(run, "replay"), segment_name(run, "tree"))
        self._created: list[str] = []
        self.obs_dim, self.act_dim = obs_dim, act_dim
        mems = []
        for name, size in zip(self.names, (ReplayStorage.nbytes(capacity, obs_dim, act_dim), SumTree.nbytes(capacity))):
            shm = posix_ipc.SharedMemory(name, posix_ipc.O_CREX, size=size)
            self._created.append(name)
            mems.append(mmap.mmap(shm.fd, size))
            shm.close_fd()
        self.storage = ReplayStorage(mems[0], capacity, obs_dim, act_dim, create=True)
        self.tree = SumTree(mems[1], capacity, create=True)
        self.sampler = PrioritizedSampler(
            self.storage, self.tree, PrioritizedConfig(alpha=ALPHA, beta0=BETA, beta_steps=10**9, eps=EPS), seed=0
        )

    def make_chunk(self, rng: np.random.Generator, n: int):
        return make_chunk(rng, n, self.obs_dim, self.act_dim)

    def fill(self, rng: np.random.Generator) -> None:
        chunk = self.make_chunk(rng, 65536)
        while self.storage.inserted < self.storage.capacity:
            self.insert(chunk)

    def insert(self, chunk) -> object:
        return self.sampler.add(*chunk)

    def sample(self, n: int):
        return self.sampler.sample(n)

    sample_for_update = sample

    def update(self, batch, td: np.ndarray) -> object:
        return self.sampler.update_priorities(batch.slots, batch.generations, td)

    def close(self) -> None:
        import posix_ipc

        for name in self._created:
            try:
                posix_ipc.unlink_shared_memory(name)
            except posix_ipc.ExistentialError:
                pass
        self._created = []


class CpprbPeer:
    """cpprb.PrioritizedReplayBuffer (its C++ segment tree).

    ``check_for_update=True`` is the like-for-like setting (updates for slots rewritten since the
    last sample are ignored, as ours always does); False is cpprb's fastest setting.
    """

    def __init__(self, capacity: int, obs_dim: int, act_dim: int, check_for_update: bool = True) -> None:
        from cpprb import PrioritizedReplayBuffer

        env = {"obs": {"shape": obs_dim}, "act": {"shape": act_dim}, "rew": {}, "next_obs": {"shape": obs_dim}}
        env["done"] = {}
        self.rb = PrioritizedReplayBuffer(capacity, env, alpha=ALPHA, eps=EPS, check_for_update=check_for_update)
        self.capacity, self.obs_dim, self.act_dim = capacity, obs_dim, act_dim

    def make_chunk(self, rng: np.random.Generator, n: int):
        o = make_chunk(rng, n, self.obs_dim, self.act_dim)
        return {"obs": o[0], "act": o[1], "rew": o[2], "next_obs": o[3], "done": o[4]}

    def fill(self, rng: np.random.Generator) -> None:
        chunk = self.make_chunk(rng, 65536)
        for _ in range(self.capacity // 65536 + 1):
            self.insert(chunk)

    def insert(self, chunk) -> object:
        return self.rb.add(**chunk)

    def sample(self, n: int):
        return self.rb.sample(n, beta=BETA)

    def sample_for_update(self, n: int):
        return self.rb.sample(n, beta=BETA)

    def update(self, sampled, td: np.ndarray) -> object:
        return self.rb.update_priorities(sampled["indexes"], np.abs(td))


class TorchRLPeer:
    """TorchRL's TensorDictPrioritizedReplayBuffer over a LazyTensorStorage (C++ segment trees)."""

    path = (
        "TensorDictPrioritizedReplayBuffer(LazyTensorStorage) with the C++ SumSegmentTreeFp32/MinSegmentTreeFp32 "
        "of torchrl._torchrl"
    )

    def __init__(self, capacity: int, obs_dim: int, act_dim: int) -> None:
        try:
            import torchrl._torchrl  # noqa: F401  (the C++ segment trees)
        except ImportError as exc:
            raise ImportError(f"torchrl's C++ extension does not load ({exc})") from exc
        import torch
        from tensordict import TensorDict
        from torchrl.data import LazyTensorStorage, TensorDictPrioritizedReplayBuffer

        self.torch, self.TensorDict = torch, TensorDict
        self.rb = TensorDictPrioritizedReplayBuffer(
            alpha=ALPHA, beta=BETA, eps=EPS, storage=LazyTensorStorage(capacity), priority_key="td_error"
        )
        self.capacity, self.obs_dim, self.act_dim = capacity, obs_dim, act_dim

    def make_chunk(self, rng: np.random.Generator, n: int):
        o = make_chunk(rng, n, self.obs_dim, self.act_dim)
        t = self.torch.from_numpy
        data = {"obs": t(o[0]), "action": t(o[1]), "reward": t(o[2]), "next_obs": t(o[3]), "terminated": t(o[4])}
        return self.TensorDict(data, batch_size=[n])

    def fill(self, rng: np.random.Generator) -> None:
        chunk = self.make_chunk(rng, 65536)
        for _ in range(self.capacity // 65536 + 1):
            self.insert(chunk)

    def insert(self, chunk) -> object:
        return self.rb.extend(chunk)

    def sample(self, n: int):
        return self.rb.sample(n)  # carries "priority_weight" and "index"

    sample_for_update = sample

    def update(self, sampled, td: np.ndarray) -> object:
        return self.rb.update_priority(sampled["index"], self.torch.from_numpy(np.abs(td)))


def inserter_main(names, capacity: int, obs_dim: int, act_dim: int, stop, go, rate) -> None:
    """A second process inserting 256-chunks into ours' shared storage and tree while ``go`` is set,
    until ``stop``; ``rate`` is its insert rate while running (transitions/s)."""
    from spreeze_like.replay import PrioritizedConfig, PrioritizedSampler, ReplayStorage, SumTree

    storage = ReplayStorage(attach(names[0]), capacity, obs_dim, act_dim, create=False)
    tree = SumTree(attach(names[1]), capacity, create=False)
    sampler = PrioritizedSampler(storage, tree, PrioritizedConfig(alpha=ALPHA, eps=EPS))
    rng = np.random.default_rng(9)
    chunks = [make_chunk(rng, 256, obs_dim, act_dim) for _ in range(4)]
    while not stop.is_set():
        go.wait()
        n, t0 = 0, time.perf_counter()
        while go.is_set() and not stop.is_set():
            sampler.add(*chunks[n % 4])
            n += 1
            if n % 16 == 0:
                rate.value = n * 256 / (time.perf_counter() - t0)
