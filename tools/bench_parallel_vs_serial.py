"""Parallel mode vs the --serial baseline: wall time to an evaluation return, same seeds, interleaved.

The serial mode runs every role in one process and is the baseline the parallel mode must beat.
For each seed this runs the serial mode and then the parallel mode with the same settings, each
stopping at the first evaluation whose mean return reaches ``--threshold``, and reports the env
steps and wall seconds to it, the critic's update rate, and the ratio parallel/serial of the wall
times. Wall times are from the session's start: the parallel mode's include starting its
processes, the serial mode's exclude building its roles (a few seconds in its favour).

    python tools/bench_parallel_vs_serial.py                            # SAC, Pendulum-v1, seeds 1 2, -200
    python tools/bench_parallel_vs_serial.py --set samplers=2 --seeds 1 2 3
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics

from scratch import runs_folder

from spreeze_like.config import TrainConfig
from spreeze_like.console import run_tool
from spreeze_like.envs import tool_env
from spreeze_like.training import train


def one_run(config: TrainConfig, threshold: float) -> dict:
    result = train(config, print_fn=lambda line: None)
    hit = next(((s, w) for s, r, w in result.evals if r >= threshold), None)
    return {
        "mode": result.mode, "reached": hit is not None, "env_steps": hit[0] if hit else result.env_steps,
        "wall_s": hit[1] if hit else result.wall_s, "updates": result.critic_updates, "total_wall_s": result.wall_s,
        "curve": [(s, round(r)) for s, r, _ in result.evals],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", default="sac")
    parser.add_argument("--env", default="Pendulum-v1")
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--threshold", type=float, default=-200.0)
    parser.add_argument("--total-steps", type=int, default=20_000)
    parser.add_argument("--eval-every", type=int, default=1000)
    parser.add_argument("--set", nargs="*", default=[], help="extra TrainConfig fields, key=json (both modes)")
    parser.add_argument("--logdir", default="", help="keep the runs here (default: a scratch folder, removed at the end)")
    args = parser.parse_args()
    extra = {k: json.loads(v) for k, _, v in (s.partition("=") for s in args.set)}
    tool_env(parser, args.env, extra.get("env_kwargs"))
    with runs_folder(args.logdir, "bench_parallel_vs_serial_") as logdir:
        bench(args, extra, str(logdir))


def bench(args: argparse.Namespace, extra: dict, logdir: str) -> None:
    """Each seed serial then parallel, the runs in ``logdir``; prints the report."""
    print(f"# load before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; cpus={os.cpu_count()}; {args.algo} on "
          f"{args.env}, threshold {args.threshold}, seeds {args.seeds}, extra {extra}", flush=True)
    ratios = []
    for seed in args.seeds:
        runs = {}
        for serial in (True, False):
            config = dataclasses.replace(
                TrainConfig(), env=args.env, algo=args.algo, seed=seed, total_steps=args.total_steps,
                eval_every=args.eval_every, stop_at_return=args.threshold, logdir=logdir, log_interval=0,
                checkpoint_every=0, serial=serial, **extra)
            r = runs[serial] = one_run(config, args.threshold)
            rate = r["updates"] / max(r["total_wall_s"], 1e-9)
            print(f"seed {seed} {r['mode']:8s}: {'reached' if r['reached'] else 'NOT reached'} at {r['env_steps']} env "
                  f"steps, {r['wall_s']:.0f} s ({rate:.0f} critic updates/s over the run)  {r['curve']}", flush=True)
        if runs[True]["reached"] and runs[False]["reached"]:
            ratios.append(runs[False]["wall_s"] / runs[True]["wall_s"])
            print(f"seed {seed}: parallel / serial wall time to {args.threshold}: {ratios[-1]:.2f}", flush=True)
    if ratios:
        print(f"median parallel / serial wall time over {len(ratios)} seeds: {statistics.median(ratios):.2f}")
    print(f"# load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    run_tool(main)
