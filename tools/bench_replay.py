"""Prioritized replay benchmark: ours against cpprb and TorchRL, in one run, at capacity 2^20.

HalfCheetah-sized transitions (obs 17, action 6). Every buffer is filled to capacity first. Ops:
insert (chunks of 1 and 256), sample with data and weights (256 and 4096), priority update (256
and 4096, on indexes from 64 earlier samples of the same buffer, cycled: repeating one batch would
time an all-in-cache artifact), the learner loop (sample 256 + update 256), and ours' learner loop
while another process inserts 256-chunks into the same shared storage and tree; plus the sweep of
the tree's K and the gather floor (a random gather of 256 rows from a 2^20-row array).

cpprb runs twice: ``cpprb`` with ``check_for_update=True`` (it then ignores updates for slots
rewritten since the last sample, like ours) and ``cpprb-nochk`` without (its fastest setting); the
"faster peer" of each row is the fastest of all peer columns. Peers run in interleaved blocks
(ours, cpprb, ..., TorchRL, ours, ...) so that load from other processes falls on all of them
alike; figures are medians per call. Ours runs on POSIX shared
memory, as in training. TorchRL is measured through ``TensorDictPrioritizedReplayBuffer`` with a
``LazyTensorStorage``, i.e. its C++ ``SumSegmentTreeFp32``/``MinSegmentTreeFp32``; if that
extension does not load the benchmark stops with the reason (rebuild it with
``tools/build_torchrl_ext.py``) unless ``--without-torchrl`` is given, which is then printed.

    python tools/bench_replay.py            # full run, ~5 minutes on 2 cores
    python tools/bench_replay.py --quick    # fewer repeats
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # before numpy/torch load: no BLAS threads spinning on 2 cores

import argparse
import importlib.util
import multiprocessing as mp
import platform
import sys
import time
from collections.abc import Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from spreeze_like.console import run_tool
from spreeze_like.replay import DEFAULT_K
from tools.bench_replay_peers import CpprbPeer, OursPeer, TorchRLPeer, inserter_main

OBS, ACT = 17, 6


def median_us(fn: Callable[[], object], calls: int) -> list[float]:
    """Per-call times (us) of ``calls`` calls."""
    out = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e6)
    return out


def interleaved(ops: dict[str, Callable[[], object]], rounds: int, calls: int) -> dict[str, float]:
    """Median per-call time of each op, run in alternating blocks after one warm-up block each."""
    for fn in ops.values():
        median_us(fn, max(1, calls // 4))
    times: dict[str, list[float]] = {k: [] for k in ops}
    for _ in range(rounds):
        for name, fn in ops.items():
            times[name] += median_us(fn, calls)
    return {k: float(np.median(v)) for k, v in times.items()}


def update_op(peer, n: int, rng: np.random.Generator) -> Callable[[], object]:
    batches = [peer.sample_for_update(n) for _ in range(64)]
    tds = [rng.standard_normal(n).astype(np.float32) for _ in range(8)]
    state = {"i": 0}

    def run() -> object:
        i = state["i"] = state["i"] + 1
        return peer.update(batches[i % 64], tds[i % 8])

    return run


def learner_op(peer, rng: np.random.Generator) -> Callable[[], object]:
    tds = [rng.standard_normal(256).astype(np.float32) for _ in range(8)]
    state = {"i": 0}

    def run() -> object:
        i = state["i"] = state["i"] + 1
        return peer.update(peer.sample(256), tds[i % 8])

    return run


def insert_op(peer, n: int, rng: np.random.Generator) -> Callable[[], object]:
    chunk = peer.make_chunk(rng, n)
    return lambda: peer.insert(chunk)


def tree_ops(tree, slots256: list, slots4096: list, td: np.ndarray) -> dict[str, Callable[[], object]]:
    """The tree-only ops of the K sweep; updates cycle through earlier samples' slots."""
    it = iter(range(10**9))

    def loop() -> object:
        slots, _, _ = tree.sample_weighted(256, 0.4)
        return tree.update_from_td(slots, td[:256], 0.6, 1e-6)

    return {
        "sample 256": lambda: tree.sample_weighted(256, 0.4),
        "sample 4096": lambda: tree.sample_weighted(4096, 0.4),
        "update 256": lambda: tree.update_from_td(slots256[next(it) % 64], td[:256], 0.6, 1e-6),
        "update 4096": lambda: tree.update_from_td(slots4096[next(it) % 16], td, 0.6, 1e-6),
        "sample+update 256": loop,
    }


def k_sweep(capacity: int, rounds: int) -> dict[int, dict[str, float]]:
    """Tree-only timings for every compiled K, all interleaved in one measurement."""
    from spreeze_like.replay import KS, SumTree

    rng = np.random.default_rng(5)
    ops = {}
    trees = []
    for k in KS:
        tree = SumTree.local(capacity, k=k, seed=k)
        tree.update(np.arange(capacity), rng.random(capacity) + 0.01)
        trees.append(tree)
        slots256 = [tree.sample(256)[0] for _ in range(64)]
        slots4096 = [tree.sample(4096)[0] for _ in range(16)]
        for name, fn in tree_ops(tree, slots256, slots4096, rng.standard_normal(4096)).items():
            ops[(k, name)] = fn
    res = interleaved(ops, rounds, 10)
    return {k: {name: res[(kk, name)] for (kk, name) in ops if kk == k} for k in KS}


def gather_floor(capacity: int) -> tuple[float, float]:
    """np.take of 256 random rows of one (capacity, 42) float32 array, and our columnar gather."""
    from spreeze_like.replay import ReplayStorage

    rng = np.random.default_rng(1)
    rows = rng.random((capacity, 2 * OBS + ACT + 2), dtype=np.float32)
    storage = ReplayStorage.local(capacity, OBS, ACT)
    for start in range(0, capacity, 65536):
        n = min(65536, capacity - start)
        storage.add(rows[:n, :OBS], rows[:n, :ACT], rows[:n, 0], rows[:n, :OBS], rows[:n, 1])
    idx = [rng.integers(0, capacity, 256) for _ in range(4000)]
    it1, it2 = iter(idx), iter(idx[::-1])
    res = interleaved(
        {"floor": lambda: np.take(rows, next(it1), axis=0), "ours": lambda: storage.gather(next(it2))}, 10, 150
    )
    return res["floor"], res["ours"]


def fmt(x: float | None) -> str:
    return "-" if x is None else (f"{x:9.1f}" if x < 1e4 else f"{x:9.0f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--capacity", type=int, default=2**20)
    ap.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run, not for BENCHMARKS.md)")
    ap.add_argument("--without-torchrl", action="store_true", help="run without TorchRL (printed in the output)")
    args = ap.parse_args()
    if importlib.util.find_spec("cpprb") is None:  # the peer: one line before the header, not an ImportError later
        ap.exit(2, "error: cpprb, the peer this benchmark measures against, is not installed: "
                   "pip install -e \".[bench]\"\n")
    rounds = 3 if args.quick else 10
    import torch

    torch.set_num_threads(1)
    print(
        f"# bench_replay  capacity={args.capacity}  obs={OBS} act={ACT}  {platform.processor() or platform.machine()}"
    )
    print(f"# cpus={os.cpu_count()}  load(1,5,15)={os.getloadavg()}  python={platform.python_version()}")
    torchrl_note = "TorchRL: not run (--without-torchrl)"
    peers = {}
    rng = np.random.default_rng(0)
    ours = OursPeer(args.capacity, OBS, ACT)
    try:
        peers["ours"] = ours
        peers["cpprb"] = CpprbPeer(args.capacity, OBS, ACT, check_for_update=True)
        peers["cpprb-nochk"] = CpprbPeer(args.capacity, OBS, ACT, check_for_update=False)
        if not args.without_torchrl:
            try:
                peers["torchrl"] = TorchRLPeer(args.capacity, OBS, ACT)
                torchrl_note = f"TorchRL: {peers['torchrl'].path}"
            except ImportError as exc:
                print(f"error: TorchRL UNAVAILABLE: {exc}", file=sys.stderr)
                print(
                    "  rebuild its C++ extension: python tools/build_torchrl_ext.py, or pass --without-torchrl",
                    file=sys.stderr,
                )
                return 2
        print("# " + torchrl_note)
        for name, peer in peers.items():
            t = time.perf_counter()
            peer.fill(rng)
            print(f"# filled {name} in {time.perf_counter() - t:.1f} s")

        table: dict[str, dict[str, float]] = {}
        specs = [
            ("insert 1", lambda p: insert_op(p, 1, rng), 100),
            ("insert 256", lambda p: insert_op(p, 256, rng), 30),
            ("sample 256 (data+weights)", lambda p: lambda: p.sample(256), 30),
            ("sample 4096 (data+weights)", lambda p: lambda: p.sample(4096), 4),
            ("update 256", lambda p: update_op(p, 256, rng), 30),
            ("update 4096", lambda p: update_op(p, 4096, rng), 4),
            ("learner loop (sample 256 + update 256)", lambda p: learner_op(p, rng), 30),
        ]
        for label, make, calls in specs:
            ops = {name: make(peer) for name, peer in peers.items()}
            table[label] = interleaved(ops, rounds, calls)
            print(f"#   {label}: " + "  ".join(f"{k}={v:.1f}us" for k, v in table[label].items()), flush=True)

        # Ours while another process inserts 256-chunks flat out into the same shared segments,
        # alternating with the inserter paused, so that both see the same background load.
        ctx = mp.get_context("spawn")
        stop, go, rate = ctx.Event(), ctx.Event(), ctx.Value("d", 0.0)
        proc = ctx.Process(target=inserter_main, args=(ours.names, args.capacity, OBS, ACT, stop, go, rate))
        ours.storage.release_writer()
        proc.start()
        loop = learner_op(ours, rng)
        go.set()
        time.sleep(3.0)  # let it import and reach full speed
        alone_t: list[float] = []
        contended_t: list[float] = []
        rates = []
        for _ in range(3 * rounds):
            go.clear()
            time.sleep(0.02)  # the inserter finishes its chunk and waits
            alone_t += median_us(loop, 100)
            go.set()
            time.sleep(0.02)
            contended_t += median_us(loop, 100)
            rates.append(rate.value)
        stop.set()
        go.set()
        proc.join(30)
        alone, contended = float(np.median(alone_t)), float(np.median(contended_t))
        print(f"# inserter process: {np.median(rates):,.0f} transitions/s in 256-chunks while running")

        sweep = k_sweep(args.capacity, max(2, rounds // 2))
        floor, ours_gather = gather_floor(args.capacity)
    finally:
        ours.close()

    names = list(peers)
    print()
    print(f"{'op (us per call, median)':42s}" + "".join(f"{n:>12s}" for n in names) + "   ours vs fastest peer")
    ratios = {}
    for label, row in table.items():
        peer_best = min(v for k, v in row.items() if k != "ours")
        ratios[label] = peer_best / row["ours"]
        print(f"{label:42s}" + "".join(f"{fmt(row.get(n)):>12s}" for n in names) + f"   {ratios[label]:6.2f}x faster")
    print(
        f"{'learner loop while another process inserts':42s}{fmt(contended):>10s}   = {alone / contended:.0%} of ours alone ({alone:.1f} us)"
    )
    print()
    print("K sweep (tree only, us per call):  " + "".join(f"{k:>18s}" for k in next(iter(sweep.values()))))
    for k, row in sweep.items():
        print(f"  K={k:<3d}" + " " * 27 + "".join(f"{v:18.1f}" for v in row.values()))
    best = min(sweep, key=lambda k: sweep[k]["sample+update 256"])
    print(f"fastest learner-step K: {best} (compiled default: {DEFAULT_K})")
    print(
        f"gather floor: np.take of 256 random rows of a (2^20, 42) float32 array: {floor:.1f} us;"
        f" ours (5 columns, seqlock-checked): {ours_gather:.1f} us"
    )
    print()
    checks = [
        ("learner loop >= 3x faster peer", ratios["learner loop (sample 256 + update 256)"] >= 3),
        ("sample 4096 with data >= 2x faster peer", ratios["sample 4096 (data+weights)"] >= 2),
        ("update 4096 >= 2x faster peer", ratios["update 4096"] >= 2),
        ("learner loop with a concurrent inserter >= 70% of alone", alone / contended >= 0.7),
    ]
    for text, ok in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {text}")
    print("# " + torchrl_note)
    print(f"# load(1,5,15) at the end={os.getloadavg()}")
    return 0


if __name__ == "__main__":
    run_tool(main)
