"""Several seeds of one experiment: ``python -m spreeze_like.seeds`` against running them one after another.

Without the seeds command a person runs ``python -m spreeze_like.run --seed S`` for each seed in turn
(a shell loop). This benchmark times, for the same seeds and run flags:

* ``loop``: that shell loop, the baseline;
* ``seeds``: ``python -m spreeze_like.seeds`` with ``--jobs auto`` (how many at once, from this
  machine's cores and the processes one run keeps busy);
* ``seeds-serial``: the same with ``--serial`` runs (one process each, so ``auto`` runs as many as
  there are cores).

For each it reports the wall time for all the seeds (process start to the last exit, everything
included), the ratio to the loop's, the jobs ``auto`` chose, and the mean of the seeds' final
evaluations (the same seeds in every mode, so a faster mode that learns worse shows here). The
modes run one after another on an otherwise idle machine; the load average before and after is
printed and saved. Nothing runs in parallel with a mode but that mode.

    python tools/bench_seeds.py --seeds 1 2 3 4                          # Pendulum-v1, SAC, 20,000 steps
    python tools/bench_seeds.py --seeds 1-8 -- --env HalfCheetah-v5 --total-steps 50000
    python tools/bench_seeds.py --modes loop seeds --json seeds.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from scratch import runs_folder

from spreeze_like.console import run_tool
from spreeze_like.curves import read_curves
from spreeze_like.errors import SpreezeError
from spreeze_like.run_launch import run_captured
from spreeze_like.seeds_cli import checked_run_config, parse_seed_list
from spreeze_like.write_guard import tool_output

MODES = ("loop", "seeds", "seeds-serial")
QUIET = ["--log-interval", "0"]


def run_loop(seeds: list[int], run_args: list[str], logdir: Path) -> dict:
    finals = []
    for seed in seeds:
        out = logdir / f"seed_{seed}"
        proc = run_captured([*run_args, *QUIET, "--seed", str(seed), "--logdir", str(out)])
        if proc.returncode != 0:
            raise SystemExit(f"error: seed {seed} of the loop ended with {proc.returncode}: {proc.stderr[-500:]}")
        run_dir = next(p for p in out.iterdir() if p.is_dir())
        finals.append(read_curves(run_dir).eval[-1].episode_return)
    return {"finals": finals, "jobs": 1}


def run_seeds(seeds: list[int], run_args: list[str], logdir: Path) -> dict:
    proc = run_captured(["--seeds", *map(str, seeds), "--logdir", str(logdir), "--progress-every", "0", *run_args,
                         *QUIET], module="spreeze_like.seeds")
    if proc.returncode != 0:
        raise SystemExit(f"error: the seeds command ended with {proc.returncode}: {proc.stdout[-800:]}"
                         f"{proc.stderr[-500:]}")
    folder = next(logdir.glob("seeds__*"))
    record = json.loads((folder / "seeds.json").read_text())
    return {"finals": [s["final_return"] for s in record["seeds"]], "jobs": record["jobs"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", default=["1-4"], help="seeds and ranges, as the seeds command takes them")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--logdir", default="", help="keep the runs here, a folder per mode (default: scratch folders, "
                        "removed at the end)")
    parser.add_argument("run_args", nargs="*", help="python -m spreeze_like.run flags for every run (after --)")
    args = parser.parse_args()
    tool_output(parser, args.json)  # tried now, not after the measuring
    try:  # the seeds, the run flags and the env, as the seeds command checks them: one line now, not a failed run
        seeds = parse_seed_list(args.seeds)
        checked_run_config(args.run_args)
    except SpreezeError as exc:
        parser.exit(2, f"error: {exc}\n")
    load_before = os.getloadavg()
    print(f"# load before: {' '.join(f'{x:.2f}' for x in load_before)}; cores {len(os.sched_getaffinity(0))}; seeds "
          f"{seeds}; run flags {args.run_args or '(defaults)'}", flush=True)
    rows = []
    for mode in args.modes:
        with runs_folder(args.logdir and Path(args.logdir) / mode, f"bench_seeds_{mode}_") as logdir:
            t0 = time.perf_counter()
            if mode == "loop":
                row = run_loop(seeds, args.run_args, logdir)
            else:
                row = run_seeds(seeds, [*args.run_args, *(["--serial"] if mode == "seeds-serial" else [])], logdir)
            wall_s = time.perf_counter() - t0  # before the scratch folder's removal
        row.update(mode=mode, wall_s=wall_s, mean_final=statistics.fmean(row["finals"]),
                   load_after=os.getloadavg()[0])
        rows.append(row)
        print(f"{mode:13s} jobs {row['jobs']}  {row['wall_s']:7.1f} s  mean final {row['mean_final']:9.1f}  "
              f"(finals {', '.join(f'{f:.1f}' for f in row['finals'])}; load {row['load_after']:.2f})", flush=True)
    base = next((r["wall_s"] for r in rows if r["mode"] == "loop"), None)
    if base:
        for row in rows:
            row["vs_loop"] = row["wall_s"] / base
        print("wall time / the loop's: " + ", ".join(f"{r['mode']} {r['vs_loop']:.2f}" for r in rows))
    result = {"date": time.strftime("%Y-%m-%d %H:%M"), "seeds": seeds, "run_args": args.run_args,
              "cores": len(os.sched_getaffinity(0)), "load_before": load_before, "load_after": os.getloadavg(),
              "rows": rows}
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    run_tool(main)
