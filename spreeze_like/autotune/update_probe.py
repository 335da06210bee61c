"""Update-rate probes: critic and actor updates/s across batch sizes on one device.

Runs inside the probe worker process (never in the caller: a CUDA device would otherwise be
initialised in the supervisor). Each point times the loop a learner runs, with the project's own
code: ``CriticLearner.update()`` and ``ActorLearner.update()`` over a uniform
:class:`~spreeze_like.replay.ReplayStorage` filled with random rows of the env's width, with the
step mode and batch source a run would use on that device (CUDA graphs and the device replay
mirror on a GPU; eager steps on host batches on the CPU). Random data is fine here: the cost of an update does not depend on
the values.

Batch sizes double from 256. The doubling stops at the first of:

* **memory** -- a CUDA out-of-memory error, or a projected peak for the next size above 90% of
  the device's memory (the peak grows about linearly in the batch);
* **time budget** -- the next point would not fit in what is left of this curve's budget;
* **size cap** -- ``max_batch``;
* **flat curve** -- past 4096, update frames/s grew less than 10% on the last doubling: larger
  batches would only cost update rate.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import numpy as np

from spreeze_like.algos.base import AlgoSpec
from spreeze_like.autotune.measure import time_rate
from spreeze_like.autotune.results import UpdateCurve, UpdatePoint

MIN_BATCH = 256
MAX_BATCH = 65536
FLAT_FROM = 4096
FLAT_GAIN = 1.10
MEMORY_FRACTION = 0.9
WARMUP_UPDATES = 5  # covers a CUDA graph's warm-up and capture (algos/graphed.py)
MIN_TIMED_UPDATES = 3


def _filled_replay(spec: AlgoSpec, rows: int, seed: int = 0):  # -> UniformSampler
    from spreeze_like.replay import ReplayStorage, UniformSampler

    rng = np.random.default_rng(seed)
    storage = ReplayStorage.local(rows, spec.obs_dim, spec.act_dim)
    chunk = 8192
    for start in range(0, rows, chunk):
        n = min(chunk, rows - start)
        storage.add(rng.standard_normal((n, spec.obs_dim), dtype=np.float32),
                    rng.uniform(-1, 1, (n, spec.act_dim)).astype(np.float32),
                    rng.standard_normal(n, dtype=np.float32),
                    rng.standard_normal((n, spec.obs_dim), dtype=np.float32),
                    (rng.random(n) < 0.01).astype(np.float32))
    return UniformSampler(storage, seed=seed)


def _learners(spec: AlgoSpec, device: str, batch_size: int, replay) -> tuple:  # (CriticLearner, ActorLearner)
    """The two learner roles over ``replay`` with in-process boards: the loop a learner process runs."""
    from spreeze_like.metrics import stats_schema
    from spreeze_like.replay import UniformSampler
    from spreeze_like.roles.actor_learner import ActorLearner
    from spreeze_like.roles.critic_learner import CriticLearner
    from spreeze_like.roles.ports import LocalBoard, LocalStatsBlock

    stats = LocalStatsBlock(stats_schema(1))
    actor_board, critic_board = LocalBoard(), LocalBoard()
    critic = CriticLearner(spec, device, replay, actor_board, critic_board, stats.role("critic-learner"), batch_size)
    actor = ActorLearner(spec, device, UniformSampler(replay.storage, seed=1), critic_board, actor_board,
                         stats.role("actor-learner"), batch_size)
    return critic, actor


def _measure_point(spec: AlgoSpec, device: str, batch_size: int, budget_s: float, replay) -> UpdatePoint:
    import torch

    cuda = device.startswith("cuda")
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else None
    if cuda:
        # the caching allocator exists only after CUDA's lazy init: before it, resetting its statistics
        # raises "Invalid device argument" (seen on the H100 when the probe's first CUDA call was this)
        torch.cuda.init()
        torch.cuda.reset_peak_memory_stats(device)
    # The learners as a run builds them (``auto`` step mode and device replay): on a GPU the timed
    # updates replay captured CUDA graphs on batches gathered from the device mirror, the weight
    # publish included; the warm-up covers the capture (algos/graphed.py: 3 eager updates, then one).
    critic, actor = _learners(spec, device, batch_size, replay)
    # the critic update is the larger one (twin Q forward/backward plus a target pass): 60% of the time
    kw = {"warmup": WARMUP_UPDATES, "min_ops": MIN_TIMED_UPDATES, "sync": sync}
    critic_rate = time_rate(critic.update, 0.6 * budget_s, "updates/s", **kw)
    actor_rate = time_rate(actor.update, 0.4 * budget_s, "updates/s", **kw)
    peak = int(torch.cuda.max_memory_allocated(device)) if cuda else 0
    del critic, actor  # free the device memory before the next (twice as large) point
    if cuda:
        torch.cuda.empty_cache()
    return UpdatePoint(batch_size, critic_rate, actor_rate, peak, spec.precision)


def at_batch(spec: AlgoSpec, batch_size: int) -> AlgoSpec:
    """``spec`` in the arithmetic a run's ``--precision auto`` gives this batch: a bf16 curve (a CPU with native
    bf16) runs the batches too small for bf16 to pay in fp32, so each point's rate is the rate a run gets."""
    from spreeze_like.config import BF16_LATE_ALGOS
    from spreeze_like.devices import bf16_pays

    widest = max((*spec.hidden_sizes, *spec.critic_widths), default=1)
    if spec.precision == "bf16" and not bf16_pays(batch_size, widest, explicit=spec.algo in BF16_LATE_ALGOS):
        return dataclasses.replace(spec, precision="fp32")
    return spec


def _point_cost_s(point: UpdatePoint) -> float:
    """Seconds one point at this size takes at the minimum repetitions (warm-up + timed, both halves)."""
    per_pair = 1.0 / point.critic.value + 1.0 / point.actor.value
    return (WARMUP_UPDATES + MIN_TIMED_UPDATES) * per_pair


def probe_updates(
    spec: AlgoSpec,
    device: str,
    threads: int,
    budget_s: float,
    progress: Callable[[str], None],
    max_batch: int = MAX_BATCH,
    memory_total: int = 0,
) -> UpdateCurve:
    """The update curve for ``device`` with ``threads`` torch threads, within about ``budget_s`` seconds.

    Args:
        spec: algorithm and network sizes (the env's obs/act dims).
        device: ``"cpu"`` or ``"cuda:N"``.
        threads: torch CPU threads for this curve.
        budget_s: seconds for the whole curve.
        progress: receives one line per measured point.
        max_batch: largest batch size to try.
        memory_total: device memory in bytes (CUDA), for the projected-peak stop.
    """
    import torch

    from spreeze_like.cpu_math import flushed_subnormals

    torch.set_num_threads(threads)
    curve = UpdateCurve(device=device, threads=threads, precision=spec.precision)
    t_start = time.perf_counter()
    replay = _filled_replay(spec, max(max_batch, MIN_BATCH))
    sizes = []
    b = MIN_BATCH
    while b <= max_batch:
        sizes.append(b)
        b *= 2
    for i, batch_size in enumerate(sizes):
        left = budget_s - (time.perf_counter() - t_start)
        prev = curve.points[-1] if curve.points else None
        if prev is not None:
            # the next size costs about twice the last one per update
            if 2.0 * _point_cost_s(prev) > left:
                curve.stop_reason = f"time budget: batch {batch_size} would not fit in the {max(left, 0):.1f} s left"
                break
            if memory_total and prev.peak_memory and 2 * prev.peak_memory > MEMORY_FRACTION * memory_total:
                curve.stop_reason = (f"memory: batch {batch_size} would need about {2 * prev.peak_memory / 2**30:.1f} GiB "
                                     f"of the {memory_total / 2**30:.1f} GiB on {device}")
                break
        # an even share of what is left, but never less than the minimum repetitions need at this size
        point_budget = max(left, 0.0) / (len(sizes) - i)
        if prev is not None:
            point_budget = min(max(point_budget, 2.0 * _point_cost_s(prev)), max(left, 0.0))
        try:
            with flushed_subnormals():  # as the learners run; the caller's thread as it was after (cpu_math.py)
                point = _measure_point(at_batch(spec, batch_size), device, batch_size, point_budget, replay)
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            curve.stop_reason = f"memory: out of memory on {device} at batch {batch_size}"
            break
        curve.points.append(point)
        mem = f", peak {point.peak_memory / 2**20:,.0f} MiB" if point.peak_memory else ""
        progress(f"updates on {device} ({threads} thread{'s' if threads > 1 else ''}, {point.precision}) batch {batch_size}: "
                 f"critic {point.critic.text(digits=1)}, actor {point.actor.text(digits=1)}, "
                 f"{point.critic_frames:,.0f} critic frames/s{mem}")
        if prev is not None and batch_size > FLAT_FROM and point.critic_frames < FLAT_GAIN * prev.critic_frames:
            curve.stop_reason = (f"flat curve: critic frames/s grew {point.critic_frames / prev.critic_frames - 1:+.0%} "
                                 f"from batch {prev.batch_size} to {batch_size}")
            break
    else:
        curve.stop_reason = f"size cap: reached batch {sizes[-1]}"
    return curve

