"""Env steps and wall seconds the --serial mode needs to reach an evaluation return.

    python tools/bench_learning.py --algo sac --seeds 1 2 --threshold -200 --total-steps 20000
    python tools/bench_learning.py --algo td3 --seeds 1 2 --threshold -300 --total-steps 30000

Runs the defaults (plus any ``--set key=value`` overrides) with an evaluation every ``--eval-every``
env steps and stops a run at the first evaluation whose mean return reaches the threshold. Prints,
per seed, that env step and the wall time since the run started, and the median over seeds.
Wall times depend on the machine's load: the script prints the load average before and after.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics

from spreeze_like.config import TrainConfig
from spreeze_like.console import run_tool
from spreeze_like.envs import tool_env
from spreeze_like.training import train


def parse_override(text: str) -> tuple[str, object]:
    key, _, value = text.partition("=")
    return key, json.loads(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", default="sac")
    parser.add_argument("--env", default="Pendulum-v1")
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--threshold", type=float, default=-200.0)
    parser.add_argument("--total-steps", type=int, default=20_000)
    parser.add_argument("--eval-every", type=int, default=1000)
    parser.add_argument("--logdir", default="runs/bench_learning")
    parser.add_argument("--set", nargs="*", default=[], type=parse_override, help="extra TrainConfig fields, key=json")
    args = parser.parse_args()
    tool_env(parser, args.env, dict(args.set).get("env_kwargs"))
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average before: {load}")
    rows = []
    for seed in args.seeds:
        config = dataclasses.replace(
            TrainConfig(),
            env=args.env,
            algo=args.algo,
            seed=seed,
            total_steps=args.total_steps,
            serial=True,
            eval_every=args.eval_every,
            stop_at_return=args.threshold,
            logdir=args.logdir,
            log_interval=0,
            checkpoint_every=0,
            **dict(args.set),
        )
        result = train(config, print_fn=lambda line: None)
        hit = next(((s, r, w) for s, r, w in result.evals if r >= args.threshold), None)
        curve = ", ".join(f"{s}:{r:.0f}" for s, r, _ in result.evals)
        if hit:
            print(
                f"{args.algo} seed {seed}: eval {hit[1]:.1f} >= {args.threshold} at {hit[0]} env steps, "
                f"{hit[2]:.0f} s   [{curve}]",
                flush=True,
            )
        else:
            print(
                f"{args.algo} seed {seed}: not reached in {result.env_steps} env steps ({result.wall_s:.0f} s)   "
                f"[{curve}]",
                flush=True,
            )
        rows.append(hit)
    reached = [h for h in rows if h]
    if len(reached) == len(rows):
        print(
            f"median over {len(rows)} seeds: {statistics.median(h[0] for h in reached):.0f} env steps, "
            f"{statistics.median(h[2] for h in reached):.0f} s"
        )
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    run_tool(main)
