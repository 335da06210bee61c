"""Learners with subnormal floats flushed to zero (the default) against without: the A/B of ``cpu_math.py``.

    python tools/bench_flush_denormal.py                              # Pendulum-v1's preset, seeds 1 and 2
    python tools/bench_flush_denormal.py --env HalfCheetah-v5 --total-steps 15000

Two parts, each side in processes of its own (``SPREEZE_FLUSH_DENORMAL=0`` for "off"):

1. **The update alone**: a critic learner of the env's default settings (its preset; CPU, one thread)
   over a replay of random transitions, timed over ``--window`` updates after each of ``--points``
   updates. Reported: ms per whole ``CriticLearner.update()``, and the share of its Adam moments that
   are subnormal (0 with flushing: it is what the flag removes).
2. **Whole runs**: the default parallel run (the env's preset, ``--total-steps`` env steps, evaluation
   every ``--eval-every``) per seed, off and on alternating which goes first. Reported: wall time, the
   critic's updates/s over its learning window, the env step and wall time of the first evaluation
   reaching ``--threshold``, and the final evaluation (learning is not bitwise the same: flushing
   changes values below 1.2e-38).

The machine's load before and after is printed: a 2-core machine is ruined by any other load.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_learner_rate import result_of
from scratch import runs_folder

from spreeze_like.console import run_tool
from spreeze_like.envs import tool_env
from spreeze_like.write_guard import tool_output

SIDES = ("off", "on")


def default_config(env: str, **fields: Any) -> Any:
    """The env's default run (its preset laid under ``fields``), resolved."""
    from spreeze_like.config import TrainConfig
    from spreeze_like.layering import lay_presets

    config = dataclasses.replace(TrainConfig(), env=env, **fields)
    config, _ = lay_presets(config, dict.fromkeys(["env", *fields], "python"))
    return config.resolve()


def subnormal_share(critic: Any) -> float:
    """The share of the critic learner's Adam moments (its part's optimisers) below float32's smallest normal."""
    import torch

    from spreeze_like.algos.optim import FusedAdam

    tiny = torch.finfo(torch.float32).tiny
    found = total = 0
    for opt in (v for v in vars(critic.part).values() if isinstance(v, FusedAdam)):
        for state in opt.state.values():
            for name in ("exp_avg", "exp_avg_sq"):
                a = state[name].detach().float().abs()
                found += int(((a > 0) & (a < tiny)).sum())
                total += a.numel()
    return found / max(total, 1)


def _update_side(side: str, env: str, points: list[int], window: int, queue: multiprocessing.Queue) -> None:
    os.environ["SPREEZE_FLUSH_DENORMAL"] = "1" if side == "on" else "0"
    from bench_learner_rate import alone_critic

    from spreeze_like.cpu_math import set_learner_math

    config = default_config(env, critic_device="cpu", actor_device="cpu")
    flushing = set_learner_math(config.torch_threads)
    critic = alone_critic(config)
    done, rows = 0, []
    for point in points:
        while done < point:
            critic.update()
            done += 1
        t0 = time.perf_counter()
        for _ in range(window):
            critic.update()
        done += window
        rows.append({"after": point, "ms": 1e3 * (time.perf_counter() - t0) / window,
                     "subnormal": subnormal_share(critic)})
    queue.put({"side": side, "flushing": flushing, "points": rows})


def update_part(args: argparse.Namespace) -> list[dict]:
    ctx = multiprocessing.get_context("spawn")
    results = []
    for side in SIDES:
        queue = ctx.Queue()
        proc = ctx.Process(target=_update_side, args=(side, args.env, args.points, args.window, queue))
        proc.start()
        results.append(result_of(proc, queue, 3600))
    print(f"\n== the update alone: {args.env}'s default critic learner, CPU, one thread, {args.window} updates timed "
          "after each point")
    print(f"{'after':>7} " + " ".join(f"{s + ' ms':>9} {s + ' subn.':>10}" for s in SIDES) + "   on/off")
    for i, point in enumerate(args.points):
        off, on = (r["points"][i] for r in results)
        print(f"{point:7d} {off['ms']:9.3f} {off['subnormal']:10.2%} {on['ms']:9.3f} {on['subnormal']:10.2%}   "
              f"{on['ms'] / off['ms']:.2f}")
    return results


def run_side(side: str, config: Any, given: list[str]) -> dict:
    from spreeze_like.training import train

    os.environ["SPREEZE_FLUSH_DENORMAL"] = "1" if side == "on" else "0"  # the learner processes inherit it
    try:  # ``given``: set by this tool even where equal to the default (else the preset's total_steps wins)
        result = train(config, print_fn=lambda line: None, explicit=given)
    finally:
        os.environ.pop("SPREEZE_FLUSH_DENORMAL", None)
    c = json.loads((Path(result.run_dir) / "status.json").read_text())["counters"]["critic-learner"]
    return {"side": side, "seed": config.seed, "wall_s": result.wall_s, "env_steps": result.env_steps,
            "updates_per_s": (c["total_updates"] - 1) / (c["learn_t1"] - c["learn_t0"]),
            "final_eval": result.final_eval_return, "evals": result.evals, "run_dir": str(result.run_dir)}


def run_part(args: argparse.Namespace, logdir: str) -> list[dict]:
    from spreeze_like.config import TrainConfig
    from spreeze_like.seed_runs import SeedRecord, read_reach

    rows = []
    print(f"\n== whole runs: {args.env}'s default parallel run, {args.total_steps:,} env steps, evaluation every "
          f"{args.eval_every:,}; first evaluation >= {args.threshold}")
    print(f"{'seed':>4} {'side':>4} {'wall s':>7} {'upd/s':>7} {'reach step':>10} {'reach s':>7} {'final':>8}")
    for k, seed in enumerate(args.seeds):
        fields = {"env": args.env, "seed": seed, "total_steps": args.total_steps, "eval_every": args.eval_every,
                  "log_interval": 0, "logdir": logdir}
        config = dataclasses.replace(TrainConfig(), **fields)
        for side in (SIDES if k % 2 == 0 else SIDES[::-1]):
            row = run_side(side, config, list(fields))
            reach = SeedRecord(seed)
            read_reach(reach, Path(row["run_dir"]), args.threshold)  # the seeds command's rule, from curves.csv
            row["reach_step"], row["reach_s"] = reach.reached_steps, reach.reached_s
            rows.append(row)
            reach = (f"{row['reach_step']:10,d} {row['reach_s']:7.1f}" if row["reach_step"] is not None
                     else f"{'-':>10} {'-':>7}")
            print(f"{seed:4d} {side:>4} {row['wall_s']:7.1f} {row['updates_per_s']:7.1f} {reach} "
                  f"{row['final_eval']:8.1f}", flush=True)
    for what in ("wall_s", "updates_per_s", "reach_s"):
        by_side = {(r["seed"], r["side"]): r[what] for r in rows}
        ratios = [by_side[s, "on"] / by_side[s, "off"] for s in args.seeds if by_side[s, "on"] and by_side[s, "off"]]
        if ratios:
            print(f"on / off {what}: per seed {' '.join(f'{r:.2f}' for r in ratios)} "
                  f"(median {statistics.median(ratios):.2f})")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="Pendulum-v1")
    parser.add_argument("--points", type=int, nargs="+", default=[200, 1000, 3000],
                        help="updates after which the update alone is timed")
    parser.add_argument("--window", type=int, default=300, help="updates timed at each point")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--total-steps", type=int, default=10_000, help="env steps of each whole run (0: no runs)")
    parser.add_argument("--eval-every", type=int, default=1000)
    parser.add_argument("--threshold", type=float, default=-200.0, help="evaluation return the runs are timed to")
    parser.add_argument("--json", default="", help="also write the results to this file")
    parser.add_argument("--logdir", default="", help="keep the runs here (default: a scratch folder)")
    args = parser.parse_args(argv)
    tool_output(parser, args.json)  # tried now, not after the measuring
    if args.window < 1 or min(args.points) < 0 or args.total_steps < 0 or args.eval_every < 1 or min(args.seeds) < 0:
        parser.exit(2, "error: --window and --eval-every need whole numbers >= 1, --points, --total-steps and --seeds "
                       ">= 0\n")
    tool_env(parser, args.env)
    load0 = os.getloadavg()
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}  cpus={os.cpu_count()}  load {load0[0]:.2f} before", flush=True)
    out: dict[str, Any] = {"update": update_part(args)}
    if args.total_steps:
        with runs_folder(args.logdir, "bench_flush_denormal_") as logdir:
            out["runs"] = run_part(args, str(logdir))
    load1 = os.getloadavg()
    print(f"# load {load1[0]:.2f} after")
    if args.json:
        Path(args.json).write_text(json.dumps({**out, "load": [load0, load1]}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    run_tool(main)
