"""Fixed cost of a run: seconds from the supervisor process's start to each start-up phase of each role.

Runs ``python -m spreeze_like.run`` (a short Pendulum-v1 run, parallel mode, the settings a default
run on that env uses: ``--autotune`` with the cached probe, which picks the parallel mode, 1 sampler
and batch 256 on a 2-core machine) ``--repeats`` times and reads the ``startup.json`` each run leaves
in its folder (written by the supervisor from the timestamps every role records in its stats row:
docs/startup.md). Every figure is seconds after the supervisor's process was created (its
/proc start time, 10 ms resolution), the median over the repeats (min-max beside it). The load
average (1 min) is printed before and after each repeat: the machine may be shared.

    python tools/bench_startup.py                      # 5 repeats, 2,000 steps each
    python tools/bench_startup.py --repeats 3 --json /tmp/startup.json
    python tools/bench_startup.py --no-autotune -- --samplers 2   # flags after -- go to the run

Phases (rows of the table):
- ``supervisor: run`` -- ``Supervisor.run`` entered: the CLI's imports, presets, the autotune plan and
  the run folder are done; ``segments`` -- every shared segment created; ``spawned <role>`` -- its
  ``Process.start()`` returned.
- per role: ``exec`` (its process created), ``main`` (``child_main`` entered: interpreter up, arguments
  unpickled), ``imported`` (its module imported: torch for the learners), ``ready`` (its objects built,
  entering its loop), ``first`` (its first env step, or first update done); the critic's ``data``
  (the first update's data is in replay: ``learning_starts`` reached, drained).
- the end of the run, for scale: ``supervisor: sampled`` (every sampler's quota done), ``learned``
  (the learners caught up to the UTD budget), ``checkpointed`` (final checkpoint assembled: the
  supervisor's torch import is here), ``evaluated`` (final evaluation), ``joined`` (every child
  exited), and ``exit`` (the CLI process ended).

Creates a scratch log folder (removed at the end unless ``--logdir`` is given). Writes nothing else.
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
from spreeze_like.envs import tool_env
from spreeze_like.run_launch import run_captured
from spreeze_like.write_guard import tool_output

ROLE_PHASES = ("t_exec", "t_main", "t_imported", "t_ready", "t_data", "t_first")
ROLE_ORDER = ("critic-learner", "actor-learner", "sampler-0", "evaluator", "monitor")


def run_once(args: argparse.Namespace, logdir: Path, extra: list[str]) -> dict:
    """One run; its phases in seconds after the supervisor's process start, plus the load around it."""
    cmd = ["--env", args.env, "--total-steps", str(args.total_steps),
           "--eval-every", "0", "--log-interval", "0", "--checkpoint-every", "0", "--logdir", str(logdir),
           *(["--autotune"] if args.autotune else []), *extra]
    load_before = os.getloadavg()[0]
    t_popen = time.monotonic()
    proc = run_captured(cmd, timeout_s=args.timeout)
    t_exit = time.monotonic()
    load_after = os.getloadavg()[0]
    if proc.returncode != 0:
        raise SystemExit(f"error: the run failed (exit status {proc.returncode}):\n{proc.stderr[-2000:]}")
    folders = sorted(p for p in logdir.iterdir() if p.is_dir())
    record = json.loads((folders[-1] / "startup.json").read_text())
    sup = record["supervisor"]
    t0 = sup["t_exec"] or t_popen
    phases: dict[str, float] = {"supervisor: popen": t_popen - t0}
    for key, t in sup.items():
        if key == "torch_at_spawn":
            phases["supervisor: torch loaded at spawn (0/1)"] = t
        if not key.startswith("t_") or key == "t_exec":
            continue
        name = key.removeprefix("t_").replace("spawned/", "spawned ")
        phases[f"supervisor: {name}"] = t - t0
    for role in sorted(record["roles"], key=lambda r: ROLE_ORDER.index(r) if r in ROLE_ORDER else 99):
        slots = record["roles"][role]
        for key in ROLE_PHASES:
            if slots.get(key):
                phases[f"{role}: {key.removeprefix('t_')}"] = slots[key] - t0
        if "torch_loaded" in slots:
            phases[f"{role}: torch loaded (0/1)"] = slots["torch_loaded"]
        if "flushing_threads" in slots:
            phases[f"{role}: torch threads flushing subnormals"] = slots["flushing_threads"]
    phases["exit"] = t_exit - t0
    return {"phases": phases, "load_before": load_before, "load_after": load_after,
            "plan_line": next((line for line in proc.stdout.splitlines() if "mode" in line and "run folder" in line), "")}


def table(runs: list[dict]) -> list[str]:
    names: list[str] = []
    for run in runs:
        names += [n for n in run["phases"] if n not in names]
    width = max(len(n) for n in names)
    lines = [f"{'phase':<{width}}  {'median s':>9}  {'min-max s':>13}"]
    for name in names:
        values = [r["phases"][name] for r in runs if name in r["phases"]]
        if "(0/1)" in name:
            lines.append(f"{name:<{width}}  {statistics.median(values):>9.0f}  {min(values):>6.0f}-{max(values):<6.0f}")
        else:
            lines.append(f"{name:<{width}}  {statistics.median(values):>9.2f}  {min(values):>6.2f}-{max(values):<6.2f}")
    return lines


def summary(runs: list[dict]) -> dict[str, float]:
    names = {n for r in runs for n in r["phases"]}
    return {n: statistics.median([r["phases"][n] for r in runs if n in r["phases"]]) for n in sorted(names)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="Pendulum-v1")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--total-steps", type=int, default=2000, help="env steps per run (learning starts at 1,000)")
    parser.add_argument("--autotune", action=argparse.BooleanOptionalAction, default=True,
                        help="plan with --autotune as the README's default command does (cached probe)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per run before it counts as failed")
    parser.add_argument("--logdir", default=None, help="keep the run folders here (default: a scratch folder)")
    parser.add_argument("--json", default=None, help="also write every run's phases and the medians here")
    parser.add_argument("run_args", nargs="*", help="after --: more flags for every run")
    args = parser.parse_args()
    tool_output(parser, args.json)  # tried now, not after the measuring
    if args.repeats < 1 or args.total_steps < 1 or args.timeout <= 0:
        parser.error("--repeats and --total-steps must be >= 1, --timeout > 0 seconds")
    tool_env(parser, args.env)
    runs = []
    with runs_folder(args.logdir, "bench_startup.") as scratch:
        for i in range(args.repeats):
            logdir = scratch / f"run-{i}"
            logdir.mkdir(parents=True, exist_ok=True)
            run = run_once(args, logdir, args.run_args)
            runs.append(run)
            print(f"run {i + 1}/{args.repeats}: first critic update at "
                  f"{run['phases'].get('critic-learner: first', float('nan')):.2f} s, exit at {run['phases']['exit']:.2f} s; "
                  f"load {run['load_before']:.2f} -> {run['load_after']:.2f}", flush=True)
    print(runs[0]["plan_line"])
    print(f"{args.env}, {args.total_steps:,} steps, {args.repeats} repeats; seconds after the supervisor process "
          f"started; load (1 min) {min(r['load_before'] for r in runs):.2f}-{max(r['load_after'] for r in runs):.2f}")
    print("\n".join(table(runs)))
    if args.json:
        Path(args.json).write_text(json.dumps({"env": args.env, "total_steps": args.total_steps,
                                               "autotune": args.autotune, "run_args": args.run_args,
                                               "median": summary(runs), "runs": runs}, indent=1))


if __name__ == "__main__":
    run_tool(main)
