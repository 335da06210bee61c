"""Benchmark: the autotuned run vs a grid of manual settings (samplers x batch x UTD), at equal wall time.

For each env it trains, one run after another, each for the same wall time (``--wall`` seconds from
process start to Ctrl-C; start-up counts, as it does for a user):

* the **grid**: by default six cells (:func:`default_cells`: SAC's defaults, the old
  update-frames plan, large batches at R = batch x UTD of 256 and 128); or every ``--samplers`` x
  ``--batch-sizes`` x ``--utds``; or the ``--cells`` S:B:U[:K] given -- with ``--envs-per-sampler``
  envs per sampler unless a cell names its own;
* the **autotuned** run: ``--autotune`` (probe results cached beforehand, so probing is not timed);
* the **defaults**: no setting flags at all (``--no-defaults`` leaves it out).

Every run is ``python -m spreeze_like.run`` in a subprocess with ``--total-steps 10000000`` (a
run bounded by wall time: the planner's run-length floor on the updates does not bind), stopped
with SIGTERM at the wall time (both modes stop cleanly on it). From the run's TensorBoard events:

* **return at the wall time**: the mean of ``charts/episodic_return`` points written in the last 20%
  of the wall time (training episodes; at least the last 3 points);
* **update frames/s**: the mean of ``perf/update_frames_hz`` from the first update on; env steps
  from ``charts/SPS``'s step; the settings (samplers, envs, batch, UTD, serial) from ``config.json``.

Returns are compared as progress over a random policy, ``(R - R_random) / (R_best - R_random)``,
because "90% of a negative return" means nothing; ``R_random`` is measured here (10 episodes of
uniform random actions). Acceptance (issue 15): the autotuned run reaches >= 90% of the grid's best
return progress at equal wall time (update frames/s are shown, no longer the goal).

With ``--rounds N`` every configuration runs N times, in a shuffled order per round, and the table
shows medians (a shared machine's load drifts over a long benchmark). A command may run for at most
a few minutes on some machines: split the grid over several invocations (``--cells``,
``--no-autotuned``, ``--no-defaults``), each writing its own JSON, and merge them with ``--report
A.json B.json ...`` (tables: ``tools/autotune_grid_report.py``). The JSON is rewritten after every run, marked
``partial`` until the last, so a call killed by a time limit keeps the runs that finished.

    python tools/bench_autotune.py --wall 90 --json all.json          # HalfCheetah-v5: default grid, autotuned, defaults
    python tools/bench_autotune.py --wall 90 --cells 1:256:1 1:8192:1 13:1024:0.25 --no-autotuned --no-defaults \\
        --json part1.json                                              # the same in parts of a few minutes each
    python tools/bench_autotune.py --wall 90 --cells 13:2048:0.125 13:8192:0.03125 13:8192:0.015625 --no-defaults \\
        --json part2.json
    python tools/bench_autotune.py --wall 90 --part 1/2 --json p1.json  # the default runs in two halves (then
    python tools/bench_autotune.py --wall 90 --part 2/2 --json p2.json  # --report p1.json p2.json)
    python tools/bench_autotune.py --samplers 1 13 --batch-sizes 256 8192 --utds 1 0.03125   # a product grid
    python tools/bench_autotune.py --report part1.json part2.json           # one table from several runs
    python tools/bench_autotune.py --quick                                  # smoke test: < 1 minute on 2 cores
    python tools/bench_autotune.py --envs Hopper-v5 --env-kwargs '{"ctrl_cost_weight": 0.002}'   # every run's env

``--env-kwargs`` reaches every run (the CLI's own ``--env-kwargs``, so the autotune probes too) and the
random-policy zero; the results keep them, and ``--report`` refuses to merge files made with others.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TOOLS_DIR = str(Path(__file__).resolve().parent)
if TOOLS_DIR not in sys.path:  # autotune_grid_report beside this file (also when loaded by path, as the tests do)
    sys.path.insert(0, TOOLS_DIR)

from autotune_grid_report import ACCEPT, compare, median_row, merge, report

from spreeze_like.config_fields import json_object
from spreeze_like.console import run_tool
from spreeze_like.envs import env_info
from spreeze_like.errors import SpreezeError
from spreeze_like.run_launch import run_captured, start_run, wait_run
from spreeze_like.write_guard import tool_output

__all__ = ["ACCEPT", "compare", "main", "merge", "report"]

LONG_STEPS = "10000000"
QUIET = ["--total-steps", LONG_STEPS, "--eval-every", "0", "--checkpoint-every", "0", "--log-interval", "0",
         "--eval-episodes", "1"]
# --quick: Pendulum, one grid cell and the autotuned run, short runs, a private probe cache probed briefly
QUICK_WALL_S = 12.0
QUICK_CELLS = ["1:256:1"]
QUICK_PROBE_BUDGET = "2"


def random_return(env_id: str, episodes: int = 10, env_kwargs: dict[str, Any] | None = None) -> float:
    """Mean return of uniform random actions (the zero of the progress scale)."""
    import numpy as np

    from spreeze_like.envs import make_env

    env = make_env(env_id, env_kwargs=env_kwargs)
    rng = np.random.default_rng(0)
    returns = []
    for i in range(episodes):
        env.reset(seed=i)
        total, done = 0.0, False
        while not done:
            _, r, term, trunc, _ = env.step(rng.uniform(-1, 1, env.action_space.shape).astype(np.float32))
            total += float(r)
            done = term or trunc
        returns.append(total)
    env.close()
    return statistics.fmean(returns)


def read_events(run_dir: Path) -> dict[str, list[tuple[float, int, float]]]:
    """``{tag: [(wall_time, step, value), ...]}`` from a run folder's TensorBoard files."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.wall_time, e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def parse_cell(text: str, utd: float = 1.0, envs: int = 1) -> tuple[int, int, float, int]:
    """``S:B[:U[:K]]`` -> (samplers, batch, utd, envs per sampler); a missing U or K takes the default given.

    Raises:
        ValueError: not two to four fields, or a value out of range.
    """
    parts = text.split(":")
    if not 2 <= len(parts) <= 4:
        raise ValueError(f"cell {text!r}: write samplers:batch[:utd[:envs per sampler]], e.g. 13:8192:0.0156:4")
    s, b = int(parts[0]), int(parts[1])
    u = float(parts[2]) if len(parts) > 2 else utd
    k = int(parts[3]) if len(parts) > 3 else envs
    if s < 1 or b < 1 or k < 1 or not u > 0:
        raise ValueError(f"cell {text!r}: samplers, batch and envs must be >= 1 and the UTD > 0")
    return s, b, u, k


def parse_part(text: str) -> tuple[int, int]:
    """``K/N`` -> (K, N), 1 <= K <= N: run the K-th of N interleaved parts of the configurations.

    Raises:
        ValueError: not K/N with 1 <= K <= N.
    """
    k, sep, n = text.partition("/")
    if not (sep and k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise ValueError(f"--part {text!r}: write K/N with 1 <= K <= N, e.g. 1/2")
    return int(k), int(n)


def part_of(names: list[str], k: int, n: int) -> list[str]:
    """The K-th of N parts of the configuration names: every N-th from the K-th (a part of a default grid
    then mixes small and large batches, so the parts take about the same time)."""
    return names[k - 1::n]


def cell_name(s: int, b: int, u: float, k: int) -> str:
    return f"samplers={s} envs={k} batch={b} utd={u:g}"


def cell_flags(s: int, b: int, u: float, k: int) -> list[str]:
    return ["--samplers", str(s), "--envs-per-sampler", str(k), "--batch-size", str(b), "--utd", f"{u:g}"]


def grid_cells(samplers: list[int], batch_sizes: list[int], utds: list[float],
               envs: int) -> list[tuple[int, int, float, int]]:
    return [(s, b, u, envs) for s, b, u in itertools.product(samplers, batch_sizes, utds)]


def default_cells(most: int, envs: int) -> list[tuple[int, int, float, int]]:
    """The small default grid: SAC's defaults, the old update-frames plan, and large batches at R 256 and 128.

    ``most`` samplers (what the planner may use here) for the large batches, one for the others:
    batch 256 at UTD 1 (SAC, R 256); batch 8192 at UTD 1 with one sampler (what the planner chose
    before the replay-ratio rule, R 8192); 1024 / 2048 / 8192 at R 256; 8192 at R 128.
    """
    return [(1, 256, 1.0, envs), (1, 8192, 1.0, envs), (most, 1024, 0.25, envs), (most, 2048, 0.125, envs),
            (most, 8192, 0.03125, envs), (most, 8192, 0.015625, envs)]


def summarise(events: dict[str, list[tuple[float, int, float]]], t0: float, wall_s: float) -> dict[str, Any]:
    """The figures of one run from its events: return at the wall time, update frames/s, env steps."""
    deadline = t0 + wall_s
    returns = [(w, v) for w, _, v in events.get("charts/episodic_return", []) if w <= deadline]
    tail = [v for w, v in returns if w >= t0 + 0.8 * wall_s]
    if len(tail) < 3:
        tail = [v for _, v in returns[-3:]]
    frames = [v for w, _, v in events.get("perf/update_frames_hz", []) if w <= deadline]
    while frames and frames[0] <= 0:
        frames.pop(0)
    steps = [s for w, s, _ in events.get("charts/SPS", []) if w <= deadline]
    return {"return": statistics.fmean(tail) if tail else float("nan"), "episodes_in_tail": len(tail),
            "update_frames_hz": statistics.fmean(frames) if frames else 0.0, "env_steps": steps[-1] if steps else 0}


def env_flags(env_id: str, env_kwargs: dict[str, Any]) -> list[str]:
    """The env's flags of every command this benchmark runs."""
    return ["--env", env_id, *(["--env-kwargs", json.dumps(env_kwargs)] if env_kwargs else [])]


def run_cell(env: list[str], flags: list[str], wall_s: float, logdir: Path, xdg: str) -> dict[str, Any]:
    """Train for ``wall_s`` seconds, stop with SIGTERM, and read the figures. ``env``: :func:`env_flags`."""
    logdir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    with open(logdir / "stdout.txt", "w") as out:
        proc = start_run([*env, *QUIET, "--logdir", str(logdir), *flags], out, XDG_CACHE_HOME=xdg)
    try:
        wait_run(proc, timeout_s=wall_s)
    except subprocess.TimeoutExpired:
        pass  # the cell's wall time is up: wait_run stopped it in order (SIGTERM)
    runs = [p for p in logdir.iterdir() if p.is_dir()]
    if not runs:
        return {"flags": flags, "error": (logdir / "stdout.txt").read_text()[-500:]}
    config = json.loads((runs[0] / "config.json").read_text())
    row = {"flags": flags, **summarise(read_events(runs[0]), t0, wall_s),
           "serial": config["serial"], "samplers": config["samplers"], "envs_per_sampler": config["envs_per_sampler"],
           "batch_size": config["batch_size"], "utd": config["utd"],
           "replay_ratio": config["batch_size"] * config["utd"], "run_dir": str(runs[0])}
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", nargs="+", default=["HalfCheetah-v5"])
    parser.add_argument("--wall", type=float, default=90.0, help="seconds per run (default 90)")
    parser.add_argument("--samplers", type=int, nargs="+", default=None,
                        help="grid samplers (with any of these three flags the grid is their product; missing ones "
                             "default to: 1 and the most the planner uses here)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=None, help="grid batch sizes (256 2048 8192)")
    parser.add_argument("--utds", type=float, nargs="+", default=None, help="grid UTDs (1 0.125 0.015625)")
    parser.add_argument("--envs-per-sampler", type=int, default=1, help="envs per sampler of the grid cells (default 1)")
    parser.add_argument("--cells", nargs="+", default=None, metavar="S:B[:U[:K]]",
                        help="only these grid cells, e.g. 1:256:1 13:8192:0.0156:4, instead of the product")
    parser.add_argument("--no-autotuned", action="store_true", help="leave the autotuned run out (a grid part)")
    parser.add_argument("--no-defaults", action="store_true", help="leave the defaults run out")
    parser.add_argument("--part", default="", metavar="K/N",
                        help="run only the K-th of N parts of the configurations (grid cells, autotuned, defaults: "
                             "every N-th from the K-th), for a machine that limits one command's time; merge the "
                             "parts' JSON files with --report")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run every configuration this many times, in a shuffled order per round, and report "
                             "medians (a shared machine's load drifts over a long benchmark)")
    parser.add_argument("--out", default="", help="output folder (default runs/bench_autotune__<unixtime>)")
    parser.add_argument("--json", default="", metavar="PATH", help="also write the results here (default: only "
                        "<out>/results.json)")
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke test: Pendulum, cell {' '.join(QUICK_CELLS)} and the autotuned run, "
                             f"{QUICK_WALL_S:g} s each, a private probe cache probed for {QUICK_PROBE_BUDGET} s")
    parser.add_argument("--report", nargs="+", default=None, metavar="RESULTS_JSON",
                        help="only print the table of past results (several: merged, e.g. parts of one grid)")
    parser.add_argument("--env-kwargs", type=json_object, default={}, metavar="JSON",
                        help="keyword arguments of gymnasium.make for every run's env and the random policy's "
                             "(the CLI's --env-kwargs), e.g. '{\"ctrl_cost_weight\": 0.002}'")
    args = parser.parse_args(argv)
    tool_output(parser, args.json)  # tried now, not after the measuring
    if args.report:
        try:
            report(merge([json.loads(Path(p).read_text()) for p in args.report]))
        except (OSError, ValueError, KeyError) as exc:
            print(f"error: --report: {exc}", file=sys.stderr)
            return 2
        return 0
    from spreeze_like.autotune.hardware import machine_kind, usable_cores
    from spreeze_like.autotune.layout import max_samplers

    cores = usable_cores()
    out = Path(args.out or f"runs/bench_autotune__{int(time.time())}")
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    probe_flags: list[str] = []
    try:
        if args.quick:
            args.envs, args.wall, args.no_defaults = ["Pendulum-v1"], QUICK_WALL_S, True
            cells = [parse_cell(c) for c in QUICK_CELLS]
            xdg = str((out / "xdg").resolve())  # a 2-second probe must not become this machine's cached one
            probe_flags = ["--probe-budget", QUICK_PROBE_BUDGET]
        elif args.cells:
            cells = [parse_cell(c, 1.0, args.envs_per_sampler) for c in args.cells]
        elif args.samplers or args.batch_sizes or args.utds:
            cells = grid_cells(args.samplers or sorted({1, max_samplers(cores)}), args.batch_sizes or [256, 2048, 8192],
                               args.utds or [1.0, 0.125, 0.015625], args.envs_per_sampler)
        else:
            cells = default_cells(max_samplers(cores), args.envs_per_sampler)
        part = parse_part(args.part) if args.part else (1, 1)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.wall <= 0 or args.rounds < 1:
        print("error: --wall must be > 0 seconds and --rounds >= 1", file=sys.stderr)
        return 2
    try:
        for env_id in args.envs:  # a bad env or kwargs: one line now, not a failed row per run
            env_info(env_id, args.env_kwargs, first_step=True)
    except SpreezeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"wall_s": args.wall, "cores": cores, "machine": machine_kind(), "rounds": args.rounds,
                               "part": args.part or "1/1", "load_before": os.getloadavg(),
                               "env_kwargs": args.env_kwargs, "envs": {}}
    for env_id in args.envs:
        configs = {cell_name(*c): cell_flags(*c) for c in cells}
        if not args.no_autotuned:
            configs["autotuned"] = ["--autotune", *probe_flags]
        if not args.no_defaults:
            configs["defaults"] = []
        configs = {name: configs[name] for name in part_of(list(configs), *part)}
        plan_text = ""
        if "autotuned" in configs:
            plan = run_captured([*env_flags(env_id, args.env_kwargs), "--total-steps", LONG_STEPS, "--plan-only",
                                 *probe_flags], XDG_CACHE_HOME=xdg)
            if plan.returncode != 0:  # probes now (cached), not in the timed run
                print(plan.stderr.strip().splitlines()[-1] if plan.stderr.strip() else "error: --plan-only failed",
                      file=sys.stderr)
                return 2
            plan_text = plan.stdout
            print(plan_text, flush=True)
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in configs}
        zero = random_return(env_id, env_kwargs=args.env_kwargs)  # before the runs: each snapshot can be reported
        for r in range(args.rounds):
            order = list(configs)
            random.Random(r).shuffle(order)  # so that a drifting load hits no configuration systematically
            for name in order:
                cell = run_cell(env_flags(env_id, args.env_kwargs), configs[name], args.wall,
                                out / env_id / f"round{r}" / _slug(name), xdg)
                cell["load"] = os.getloadavg()[0]
                runs[name].append(cell)
                print(f"{env_id} round {r} {name}: {cell}", flush=True)
                results["envs"][env_id] = env_results(zero, plan_text, runs)
                # a call cut by a time limit (a lent machine's 600 s) keeps the runs finished so far
                write_results(results, out, args.json, partial=True)
        results["envs"][env_id] = env_results(zero, plan_text, runs)
    results["load_after"] = os.getloadavg()
    report(results)
    write_results(results, out, args.json, partial=False)
    print(f"\nresults: {out / 'results.json'}" + (f" and {args.json}" if args.json else ""))
    return 0


def env_results(zero: float, plan_text: str, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """One env's entry of the results from the runs finished so far (configurations not run yet left out)."""
    merged = {name: median_row(cells) for name, cells in runs.items() if cells}
    entry = {"random_return": zero, "plan": plan_text, "runs": {k: v for k, v in runs.items() if v},
             "grid": {k: v for k, v in merged.items() if k not in ("autotuned", "defaults")},
             "autotuned": merged.get("autotuned"), "defaults": merged.get("defaults")}
    entry["comparison"] = compare(entry)
    return entry


def write_results(results: dict[str, Any], out: Path, json_path: str, partial: bool) -> None:
    """``<out>/results.json`` (and ``--json``): the whole results, or with ``partial`` set the runs so far."""
    snapshot = {**results, "partial": True, "load_after": os.getloadavg()} if partial else results
    from spreeze_like.rundir import write_text_atomic

    text = json.dumps(snapshot, indent=2)
    for path in filter(None, [out / "results.json", json_path and Path(json_path)]):
        write_text_atomic(path, text)  # a kill mid-write leaves the previous snapshot whole


def _slug(name: str) -> str:
    return (name.replace("samplers=", "s").replace(" envs=", "_k").replace(" batch=", "_b").replace(" utd=", "_u")
            .replace(".", "p"))


if __name__ == "__main__":
    run_tool(main)
