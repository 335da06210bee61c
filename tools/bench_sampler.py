"""Sampler throughput: total env steps/s of N sampler processes x K envs each, all stepping at once.

Each process runs what a run's sampler process runs (:mod:`spreeze_like.autotune.sampler_scaling`):
a ``SamplerWorker`` with K envs and its numpy policy (SAC 256x256 by default, random weights: the
cost of a forward pass does not depend on them), one batched policy inference for its K envs per
step -- policy actions, not random ones --, each env stepped and reset by hand, rows packed and
checked for non-finite values (with ``--n-step`` folded, with ``--her-goals`` relabelled at each episode's
end, as a run's sampler does); the rows are then dropped instead of written to a ring (the ring's
cost: ``tools/bench_ipc.py``, millions of rows/s). Processes are spawned with one BLAS thread, like
a run's samplers, and never import torch. Every point starts its N processes at one wall time and
sums their rates over the same window; building the envs and warming up are not timed.

    python tools/bench_sampler.py --quick --json sampler_curve.json   # HalfCheetah-v5: N 1,2,4,..,cores x K 1,4,16
    python tools/bench_sampler.py --envs HalfCheetah-v5 --procs 1 2 4 8 16 --ks 1 4 16 --seconds 2
    python tools/bench_sampler.py --envs Pendulum-v1 --procs 1 --ks 1 2 4 8 16   # one sampler, K envs
    python tools/bench_sampler.py --procs 1 2 --ks 1 4 --n-step 3                # what folding n-step returns costs

Prints the curve (total env steps/s, and per process), the best point, and the setup the autotuner
would plan for the most env steps/s on this machine from such a curve (at most
``layout.max_samplers(cores)`` processes: the learners' cores and a support core are left). Timings
on a shared machine are noisy: the load average is printed before and after, and ``--repeats``
keeps the best of several windows per point.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from spreeze_like.console import run_tool
from spreeze_like.write_guard import tool_output

QUICK_SECONDS = 1.0
QUICK_KS = (1, 4, 16)


def measure(env_id: str, procs: list[int], ks: list[int], seconds: float, repeats: int, algo: str,
            hidden: tuple[int, ...], n_step: int = 1, her_goals: int = 0) -> dict[int, dict[int, Any]]:
    """``{N: {K: Rate}}``, the best of ``repeats`` windows per point."""
    from spreeze_like.autotune.sampler_scaling import measure_scaling
    from spreeze_like.roles.her import checked_env_info

    info = checked_env_info(env_id, None, her_goals)  # a bad env fails here, in one line, before anything is spawned
    spec = {"algo": algo, "obs_dim": info.obs_dim, "act_dim": info.act_dim, "hidden_sizes": hidden,
            "n_step": n_step, "her_goals": her_goals}
    best: dict[int, dict[int, Any]] = {}
    for r in range(repeats):
        tag = f"[{env_id} window {r + 1}/{repeats}] " if repeats > 1 else f"[{env_id}] "
        curve = measure_scaling(env_id, spec, procs, ks, seconds, lambda line, tag=tag: print(tag + line, flush=True))
        for n, by_k in curve.items():
            for k, rate in by_k.items():
                if k not in best.setdefault(n, {}) or rate.value > best[n][k].value:
                    best[n][k] = rate
    return best


def planned_setup(env_id: str, curve: dict[int, dict[int, Any]], cores: int) -> dict[str, Any]:
    """The most env steps/s the autotuner would plan from this curve on ``cores`` (its sampler_supply rule)."""
    from spreeze_like.autotune import sampler_supply
    from spreeze_like.autotune.layout import max_samplers
    from spreeze_like.autotune.results import EnvRates, Rate

    ones = curve.get(1, {})
    zero = Rate(0.0, "steps/s")
    env = EnvRates(env_id, 0, 0, zero, ones.get(1, zero), dict(ones), curve)
    limit = max_samplers(cores)
    setup = sampler_supply.best_setup(env, limit)
    return {"max_samplers": limit, "samplers": setup.samplers, "envs_per_sampler": setup.envs_per_sampler,
            "steps_per_s": setup.steps_hz, "how": setup.how}


def print_curve(env_id: str, curve: dict[int, dict[int, Any]], plan: dict[str, Any]) -> None:
    ks = sorted({k for by_k in curve.values() for k in by_k})
    print(f"\n{env_id}: total env steps/s with policy inference (per process in brackets), N processes x K envs each")
    print(f"  {'N':>4}" + "".join(f"{'K=' + str(k):>22}" for k in ks))
    for n, by_k in sorted(curve.items()):
        cells = "".join(f"{by_k[k].value:>12,.0f} ({by_k[k].value / n:>6,.0f})" if k in by_k else f"{'-':>22}"
                        for k in ks)
        print(f"  {n:>4}{cells}")
    n, k, rate = max(((n, k, r) for n, by_k in curve.items() for k, r in by_k.items()), key=lambda t: t[2].value)
    print(f"  best: {n} processes x {k} envs = {rate.value:,.0f} env steps/s")
    print(f"  the autotuner's most-throughput setup from this curve (at most {plan['max_samplers']} samplers): "
          f"{plan['samplers']} x {plan['envs_per_sampler']} envs = {plan['steps_per_s']:,.0f} env steps/s "
          f"({plan['how']})")


def main(argv: list[str] | None = None) -> int:
    from spreeze_like.autotune.hardware import usable_cores
    from spreeze_like.autotune.sampler_scaling import sampler_counts

    cores = usable_cores()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", nargs="+", default=["HalfCheetah-v5"], help="gymnasium ids (default HalfCheetah-v5)")
    parser.add_argument("--procs", nargs="+", type=int, default=None,
                        help=f"sampler process counts N (default: powers of two and the {cores} usable cores)")
    parser.add_argument("--ks", nargs="+", type=int, default=[1, 4, 16], help="envs per sampler K (default 1 4 16)")
    parser.add_argument("--seconds", type=float, default=2.0, help="timed window per point (default 2)")
    parser.add_argument("--repeats", type=int, default=1, help="windows per point; the best is kept (default 1)")
    parser.add_argument("--algo", default="sac", choices=["sac", "td3", "ddpg", "crossq"])
    parser.add_argument("--hidden-sizes", nargs="+", type=int, default=[256, 256])
    parser.add_argument("--n-step", type=int, default=1, help="the samplers fold n-step returns (--n-step; default 1)")
    parser.add_argument("--her-goals", type=int, default=0, help="the samplers relabel goals, K rows more per step at "
                        "each episode's end (--her-goals; a goal env; default 0)")
    parser.add_argument("--json", default="", metavar="PATH", help="write the curve and the machine facts here")
    parser.add_argument("--quick", action="store_true",
                        help=f"K {' '.join(map(str, QUICK_KS))}, {QUICK_SECONDS:g} s per point, one window: "
                             "under a minute on a 16-core machine")
    args = parser.parse_args(argv)
    tool_output(parser, args.json)  # tried now, not after the measuring
    if args.quick:
        args.ks, args.seconds, args.repeats = list(QUICK_KS), QUICK_SECONDS, 1
    procs = args.procs or sampler_counts(cores)
    if (min(procs) < 1 or min(args.ks) < 1 or args.seconds <= 0 or args.repeats < 1 or args.n_step < 1
            or args.her_goals < 0):
        print("error: --procs, --ks, --repeats and --n-step need whole numbers >= 1, --her-goals >= 0 and --seconds a "
              "time > 0", file=sys.stderr)
        return 2
    from spreeze_like.errors import SpreezeError

    load_before = os.getloadavg()
    print(f"{platform.node()}: {cores} usable cores, load average {' '.join(f'{x:.2f}' for x in load_before)}; "
          f"{args.algo} numpy policy {args.hidden_sizes}; N {procs} x K {args.ks}, {args.seconds:g} s per point, "
          f"best of {args.repeats}; n-step {args.n_step}, HER goals {args.her_goals}", flush=True)
    t0 = time.monotonic()
    results: dict[str, Any] = {"date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
                               "host": platform.node(), "usable_cores": cores, "cpu_count": os.cpu_count(),
                               "algo": args.algo, "hidden_sizes": args.hidden_sizes, "seconds": args.seconds,
                               "repeats": args.repeats, "n_step": args.n_step, "her_goals": args.her_goals,
                               "load_before": load_before, "envs": {}}
    for env_id in args.envs:
        try:
            curve = measure(env_id, procs, args.ks, args.seconds, args.repeats, args.algo, tuple(args.hidden_sizes),
                            args.n_step, args.her_goals)
        except SpreezeError as exc:
            print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
            return 2
        plan = planned_setup(env_id, curve, cores)
        print_curve(env_id, curve, plan)
        results["envs"][env_id] = {
            "points": [{"processes": n, "envs_per_sampler": k, "steps_per_s": r.value, "per_process": r.value / n,
                        "steps": r.ops, "seconds": r.seconds, "estimate": r.estimate}
                       for n, by_k in sorted(curve.items()) for k, r in sorted(by_k.items())],
            "autotuner_setup": plan,
        }
    results["load_after"] = os.getloadavg()
    results["elapsed_s"] = time.monotonic() - t0
    print(f"\n{results['elapsed_s']:.0f} s; load average after {' '.join(f'{x:.2f}' for x in results['load_after'])}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
        print(f"curve: {args.json}")
    return 0


if __name__ == "__main__":
    run_tool(main)
