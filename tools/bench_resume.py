"""Benchmark: what a resume costs in learning, with the saved replay (--save-replay) and without it.

For each seed: one run to ``--first`` env steps with ``--save-replay``; its run folder is copied and
the copy's replay folder deleted; then both are resumed to ``--total`` env steps, one after the
other (each alone on the machine), the original continuing with its replay, the copy with an empty
buffer (it refills ``max(batch_size, learning_starts)`` transitions with the restored policy, as
every resume did before --save-replay). Both second sessions start from the same checkpoint, so the
difference is the replay alone. Reported: the evaluation returns at the env steps both reached,
the mean of each second session's evaluations, and each second session's critic updates and wall
time. ``--undisturbed`` also runs the same seed to ``--total`` in one session, as a reference (the
parallel mode is not bit-reproducible, so it differs by run-to-run noise as well).

    python tools/bench_resume.py                                  # HalfCheetah-v5 (CrossQ), seeds 1 2, 30k + 15k
    python tools/bench_resume.py --env Pendulum-v1 --first 4000 --total 8000 --eval-every 1000
    python tools/bench_resume.py --json resume.json --set samplers=2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from scratch import runs_folder

from spreeze_like.checkpoint import load_latest
from spreeze_like.console import run_tool
from spreeze_like.envs import tool_env
from spreeze_like.replay.persist import replay_folders
from spreeze_like.run_launch import run_to_end
from spreeze_like.write_guard import tool_output


def cli(args: list[str], log: Path) -> float:
    """Run ``python -m spreeze_like.run ARGS`` to its end; its wall seconds (exit status checked)."""
    t0 = time.monotonic()
    with open(log, "w") as out:
        code = run_to_end(args, out)
    if code != 0:
        raise SystemExit(f"error: `spreeze_like.run {' '.join(args)}` exited {code}; see {log}")
    return time.monotonic() - t0


def evals(run_dir: Path, after: int = 0) -> list[tuple[int, float]]:
    """(env step, mean return) of the run's evaluations past ``after``: the parallel mode's evals.jsonl (its final
    checkpoint is written before the final evaluation), else the serial mode's history in its final checkpoint."""
    path = run_dir / "evals.jsonl"
    if path.exists():
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        found = [(int(r["env_step"]), float(r["mean_return"])) for r in rows]
    else:
        found = [(int(s), float(r)) for s, r, _ in load_latest(run_dir)[0]["evals"]]
    return [(s, r) for s, r in found if s > after]


def critic_updates(run_dir: Path) -> int:
    return int(load_latest(run_dir)[0]["critic_updates"])


def one_seed(args: argparse.Namespace, seed: int, root: Path, extra: list[str]) -> dict[str, Any]:
    common = ["--env", args.env, "--seed", str(seed), "--eval-every", str(args.eval_every), "--eval-episodes",
              str(args.eval_episodes), "--log-interval", "0", *extra]
    logdir = root / f"seed{seed}"
    first_s = cli([*common, "--total-steps", str(args.first), "--save-replay", "--logdir", str(logdir)],
                  root / f"seed{seed}_first.log")
    (kept,) = [p for p in logdir.iterdir() if p.is_dir()]
    empty = logdir / f"{kept.name}_empty"
    shutil.copytree(kept, empty)
    for folder in replay_folders(empty / "checkpoints"):
        shutil.rmtree(folder)
    updates0 = critic_updates(kept)
    row: dict[str, Any] = {"seed": seed, "first_s": first_s, "updates_at_first": updates0}
    for name, run_dir in (("with_replay", kept), ("empty_replay", empty)):
        wall = cli(["--resume", str(run_dir), "--total-steps", str(args.total)], root / f"seed{seed}_{name}.log")
        row[name] = {"wall_s": wall, "updates": critic_updates(run_dir) - updates0,
                     "evals": evals(run_dir, after=args.first)}
    if args.undisturbed:
        one = logdir / "undisturbed"
        wall = cli([*common, "--total-steps", str(args.total), "--logdir", str(one)], root / f"seed{seed}_one.log")
        (run_dir,) = [p for p in one.iterdir() if p.is_dir()]
        row["undisturbed"] = {"wall_s": wall, "evals": evals(run_dir, after=args.first)}
    return row


def report(rows: list[dict[str, Any]]) -> None:
    """The k-th evaluation of each second session side by side (the parallel mode's evaluations land a few env steps
    past each multiple of --eval-every, so the steps are shown with the returns), then each session's summary."""
    names = [n for n in ("with_replay", "empty_replay", "undisturbed") if n in rows[0]]
    print(f"\n| seed | evaluation | {' | '.join(f'{n}: env step, return' for n in names)} |\n|---|---:|"
          f"{'---:|' * len(names)}")
    for row in rows:
        for k in range(max(len(row[n]["evals"]) for n in names)):
            cells = [f"{row[n]['evals'][k][0]:,}: {row[n]['evals'][k][1]:,.1f}" if k < len(row[n]["evals"]) else "-"
                     for n in names]
            print(f"| {row['seed']} | {k + 1} | {' | '.join(cells)} |")
    print("\n| seed | second session | mean of its evaluations | critic updates | wall s |\n|---|---|---:|---:|---:|")
    for row in rows:
        for n in names:
            part = row[n]
            mean = statistics.fmean(r for _, r in part["evals"]) if part["evals"] else float("nan")
            updates = f"{part['updates']:,}" if "updates" in part else "-"
            print(f"| {row['seed']} | {n} | {mean:,.1f} | {updates} | {part['wall_s']:.1f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="HalfCheetah-v5")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--first", type=int, default=30_000, help="env steps of the first session (default 30,000)")
    parser.add_argument("--total", type=int, default=45_000, help="env steps at the resumed sessions' end")
    parser.add_argument("--eval-every", type=int, default=2_500)
    parser.add_argument("--eval-episodes", type=int, default=5)
    parser.add_argument("--undisturbed", action="store_true", help="also one session to --total per seed")
    parser.add_argument("--set", nargs="*", default=[], metavar="FLAG=VALUE",
                        help="more run flags for every session, e.g. samplers=2 (as --samplers 2), hidden_sizes='64 64'")
    parser.add_argument("--json", default="", metavar="PATH", help="also write the results here")
    parser.add_argument("--logdir", default="", help="keep the runs here (default: a scratch folder, removed at the end)")
    args = parser.parse_args(argv)
    tool_output(parser, args.json)  # tried now, not after the measuring
    tool_env(parser, args.env)
    if not 0 < args.first < args.total:
        print("error: --first must be > 0 and below --total", file=sys.stderr)
        return 2
    if min(args.seeds) < 0:
        print("error: --seeds must be whole numbers >= 0", file=sys.stderr)
        return 2
    extra = [part for item in args.set for part in (f"--{item.partition('=')[0].replace('_', '-')}",
                                                     *item.partition("=")[2].split())]
    rows = []
    with runs_folder(args.logdir, "bench_resume_") as root:
        print(f"# load before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; cpus {os.cpu_count()}; {args.env}, "
              f"seeds {args.seeds}, {args.first:,} then {args.total:,} env steps; runs in {root}", flush=True)
        for seed in args.seeds:
            rows.append(one_seed(args, seed, root, extra))
            print(json.dumps(rows[-1]), flush=True)
            if args.json:
                from spreeze_like.rundir import write_text_atomic

                write_text_atomic(Path(args.json), json.dumps({"args": vars(args), "rows": rows}, indent=1))
    print(f"# load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    report(rows)
    return 0


if __name__ == "__main__":
    run_tool(main)
