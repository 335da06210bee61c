"""Replay: columnar transition storage, the native K-ary sum tree, and the samplers over them.

Everything here works on memory it is handed, so one storage and one tree in shared memory serve
every process of a run. See storage.py and sum_tree.py for the concurrency protocol, samplers.py for
the learner's two-line use, and docs/replay.md for the design and measurements.
"""

from spreeze_like.replay.samplers import Batch, PrioritizedConfig, PrioritizedSampler, UniformSampler
from spreeze_like.replay.storage import ReplayStorage, Rows
from spreeze_like.replay.sum_tree import DEFAULT_K, KS, SumTree

__all__ = [
    "DEFAULT_K",
    "KS",
    "Batch",
    "PrioritizedConfig",
    "PrioritizedSampler",
    "ReplayStorage",
    "Rows",
    "SumTree",
    "UniformSampler",
]
