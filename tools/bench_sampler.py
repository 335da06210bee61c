"""Sampler throughput: env steps/s of one SamplerWorker for several envs-per-sampler counts.

One sampler process steps ``k`` envs per ``step()`` with one batched policy forward (torch, one
thread). More envs per sampler amortise the forward's fixed cost over ``k`` env steps; this script
measures whether that pays on this machine, for each env given.

    python tools/bench_sampler.py --envs Pendulum-v1 HalfCheetah-v5 --ks 1 2 4 8 --steps 4000

Reports env steps/s per k and the ratio to k = 1 (the same run, one after the other). Timings on a
shared machine are noisy: read the ratios, and check ``uptime`` first.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

from spreeze_like.algos import make_policy
from spreeze_like.algos.base import AlgoSpec
from spreeze_like.algos.networks import get_flat
from spreeze_like.envs import env_info
from spreeze_like.metrics import stats_schema
from spreeze_like.roles.ports import LocalBoard, LocalStatsBlock
from spreeze_like.roles.sampler import SamplerWorker


class NullSink:
    def write(self, rows: np.ndarray) -> None:
        pass


def bench(env: str, k: int, steps: int, algo: str, hidden: tuple[int, ...], repeats: int) -> float:
    info = env_info(env)
    spec = AlgoSpec(algo=algo, obs_dim=info.obs_dim, act_dim=info.act_dim, hidden_sizes=hidden)
    board = LocalBoard()
    board.publish(get_flat([make_policy(spec)]))
    stats = LocalStatsBlock(stats_schema(1))
    worker = SamplerWorker(env, spec, 0, k, 0, NullSink(), board, stats.role("sampler-0"))
    for _ in range(max(1, 200 // k)):  # warm up (first forward, allocations)
        worker.step()
    best = 0.0
    for _ in range(repeats):
        n_calls = max(1, steps // k)
        t0 = time.perf_counter()
        for _ in range(n_calls):
            worker.step()
        best = max(best, n_calls * k / (time.perf_counter() - t0))
    worker.close()
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=["Pendulum-v1", "HalfCheetah-v5"])
    parser.add_argument("--ks", nargs="+", type=int, default=[1, 2, 4, 8])
    parser.add_argument("--steps", type=int, default=4000, help="env steps per measurement")
    parser.add_argument("--repeats", type=int, default=3, help="measurements per point; the best is kept")
    parser.add_argument("--algo", default="sac")
    parser.add_argument("--hidden-sizes", nargs="+", type=int, default=[256, 256])
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(
        f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; torch threads 1; "
        f"{args.algo} policy {args.hidden_sizes}; best of {args.repeats} x {args.steps} env steps"
    )
    for env in args.envs:
        base = None
        for k in args.ks:
            hz = bench(env, k, args.steps, args.algo, tuple(args.hidden_sizes), args.repeats)
            base = base or hz
            print(f"{env:>16}  envs/sampler {k:>2}: {hz:8.0f} env steps/s  ({hz / base:.2f}x of k={args.ks[0]})")


if __name__ == "__main__":
    main()
