"""Benchmark: the autotuned run vs a grid of manual settings vs the defaults, at a fixed wall time.

For each env (Pendulum-v1 and HalfCheetah-v5 by default) it trains, one run after another, each for
the same wall time (``--wall`` seconds from process start to Ctrl-C):

* the **grid**: every ``--samplers`` in 1..cores times every ``--batch-sizes`` in 256..4096;
* the **autotuned** run: ``--autotune`` (probe results cached beforehand, so probing is not timed);
* the **defaults**: no setting flags at all.

With ``--rounds N`` every configuration runs N times, in a shuffled order per round, and the table
shows medians: on a shared machine the load drifts over a benchmark of this length, and a fixed
order would hand that drift to whichever configuration runs last.

Every run is ``python -m spreeze_like.run`` in a subprocess with a huge ``--total-steps``, stopped with
SIGINT at the wall time (both modes stop cleanly on it). It reads the run's TensorBoard events:

* **return at the wall time**: the mean of ``charts/episodic_return`` points written in the last 20%
  of the wall time (training episodes; at least the last 3 points);
* **update frames/s**: the mean of ``perf/update_frames_hz`` from the first update on.

Returns are compared as progress over a random policy, ``(R - R_random) / (R_best - R_random)``,
because "90% of a negative return" means nothing; ``R_random`` is measured here (10 episodes of
uniform random actions). Acceptance (issue 5): autotuned >= 90% of the grid's best on both
figures, on both envs, and better than the defaults.

    python tools/bench_autotune.py --wall 120                   # full grid, both envs (~50 min here)
    python tools/bench_autotune.py --quick                      # smoke test: 2 cells, 60 s each, Pendulum

Works with whichever ``train()`` mode exists: the autotuner picks serial or parallel itself, grid
cells and the defaults run in the default mode (parallel when built).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

RUN = [sys.executable, "-m", "spreeze_like.run"]
QUIET = ["--total-steps", "10000000", "--eval-every", "0", "--checkpoint-every", "0", "--log-interval", "0",
         "--eval-episodes", "1"]


def random_return(env_id: str, episodes: int = 10) -> float:
    """Mean return of uniform random actions (the zero of the progress scale)."""
    import numpy as np

    from spreeze_like.envs import make_env

    env = make_env(env_id)
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


def run_cell(env_id: str, flags: list[str], wall_s: float, logdir: Path, xdg: str) -> dict[str, Any]:
    """Train for ``wall_s`` seconds, stop with SIGINT, and read the two figures."""
    logdir.mkdir(parents=True, exist_ok=True)
    cmd = [*RUN, "--env", env_id, *QUIET, "--logdir", str(logdir), *flags]
    t0 = time.time()
    out = open(logdir / "stdout.txt", "w")  # noqa: SIM115 - closed below, after the process
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "XDG_CACHE_HOME": xdg})
    try:
        proc.wait(timeout=wall_s)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    finally:
        out.close()
    runs = [p for p in logdir.iterdir() if p.is_dir()]
    if not runs:
        return {"flags": flags, "error": (logdir / "stdout.txt").read_text()[-500:]}
    events = read_events(runs[0])
    deadline = t0 + wall_s
    returns = [(w, v) for w, _, v in events.get("charts/episodic_return", []) if w <= deadline]
    tail = [v for w, v in returns if w >= t0 + 0.8 * wall_s] or [v for _, v in returns[-3:]]
    if len(tail) < 3:
        tail = [v for _, v in returns[-3:]]
    frames = [v for w, _, v in events.get("perf/update_frames_hz", []) if w <= deadline]
    while frames and frames[0] <= 0:
        frames.pop(0)
    steps = [s for w, s, _ in events.get("charts/SPS", []) if w <= deadline]
    config = json.loads((runs[0] / "config.json").read_text())
    return {
        "flags": flags,
        "return": statistics.fmean(tail) if tail else float("nan"),
        "update_frames_hz": statistics.fmean(frames) if frames else 0.0,
        "env_steps": steps[-1] if steps else 0,
        "serial": config["serial"], "samplers": config["samplers"], "batch_size": config["batch_size"],
        "envs_per_sampler": config["envs_per_sampler"],
        "run_dir": str(runs[0]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", nargs="+", default=["Pendulum-v1", "HalfCheetah-v5"])
    parser.add_argument("--wall", type=float, default=120.0, help="seconds per run (default 120)")
    parser.add_argument("--samplers", type=int, nargs="+", default=None, help="default: 1..usable cores")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096])
    parser.add_argument("--cells", nargs="+", default=None, metavar="S:B",
                        help="only these grid cells (samplers:batch), e.g. 2:256 2:2048, instead of the full grid")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run every configuration this many times, in a shuffled order per round, and report "
                             "medians (a shared machine's load drifts over a long benchmark)")
    parser.add_argument("--out", default="", help="output folder (default runs/bench_autotune__<unixtime>)")
    parser.add_argument("--quick", action="store_true", help="smoke test: Pendulum, 2 cells, 60 s each")
    parser.add_argument("--report", default="", metavar="RESULTS_JSON", help="only print the table of a past run")
    args = parser.parse_args()
    if args.report:
        report(json.loads(Path(args.report).read_text()))
        return
    from spreeze_like.autotune.hardware import usable_cores

    cores = usable_cores()
    grid = [(s, b) for s in (args.samplers or range(1, cores + 1)) for b in args.batch_sizes]
    if args.cells:
        grid = [tuple(int(x) for x in c.split(":")) for c in args.cells]
    if args.quick:
        args.envs, args.wall, grid = ["Pendulum-v1"], 60.0, [(1, 256), (1, 1024)]
    out = Path(args.out or f"runs/bench_autotune__{int(time.time())}")
    out.mkdir(parents=True, exist_ok=True)
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    results: dict[str, Any] = {"wall_s": args.wall, "cores": cores, "rounds": args.rounds,
                               "load_before": os.getloadavg(), "envs": {}}
    for env_id in args.envs:
        plan = subprocess.run([*RUN, "--env", env_id, "--plan-only"], capture_output=True, text=True, check=True,
                              env={**os.environ, "XDG_CACHE_HOME": xdg})  # probes now (cached), not in the timed run
        print(plan.stdout, flush=True)
        configs = {f"samplers={s} batch={b}": ["--samplers", str(s), "--batch-size", str(b)] for s, b in grid}
        configs.update(autotuned=["--autotune"], defaults=[])
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in configs}
        for r in range(args.rounds):
            order = list(configs)
            random.Random(r).shuffle(order)  # so that a drifting load hits no configuration systematically
            for name in order:
                cell = run_cell(env_id, configs[name], args.wall, out / env_id / f"round{r}" / _slug(name), xdg)
                cell["load"] = os.getloadavg()[0]
                runs[name].append(cell)
                print(f"{env_id} round {r} {name}: {cell}", flush=True)
        merged = {name: _median(cells) for name, cells in runs.items()}
        results["envs"][env_id] = {"random_return": random_return(env_id), "plan": plan.stdout, "runs": runs,
                                   "grid": {k: v for k, v in merged.items() if k not in ("autotuned", "defaults")},
                                   "autotuned": merged["autotuned"], "defaults": merged["defaults"]}
    results["load_after"] = os.getloadavg()
    report(results)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    print(f"\nresults: {out / 'results.json'}")


def _slug(name: str) -> str:
    return name.replace("samplers=", "s").replace(" batch=", "_b")


def _median(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """One configuration's runs as one row: median return and frames/s (the first run's settings)."""
    ok = [c for c in cells if "error" not in c]
    if not ok:
        return cells[0]
    row = dict(ok[0])
    for key in ("return", "update_frames_hz", "env_steps", "load"):
        row[key] = statistics.median(c[key] for c in ok)
    row["env_steps"] = int(row["env_steps"])
    return row


def report(results: dict[str, Any]) -> None:
    """Print the table and the acceptance lines."""
    print(f"\nautotune benchmark: {results['wall_s']:.0f} s per run, {results.get('rounds', 1)} round(s) (medians), "
          f"{results['cores']} cores, load average "
          f"{results['load_before'][0]:.1f} before, {results['load_after'][0]:.1f} after")
    for env_id, r in results["envs"].items():
        zero = r["random_return"]
        ok = {k: c for k, c in r["grid"].items() if "error" not in c}
        # a run with no finished episode before the deadline has no return (nan): it cannot be the best
        best_ret = max((c["return"] for c in ok.values() if c["return"] == c["return"]), default=float("nan"))
        best_fr = max(c["update_frames_hz"] for c in ok.values())

        def score(c: dict[str, Any], zero: float = zero, best_ret: float = best_ret) -> float:
            return (c["return"] - zero) / (best_ret - zero) if best_ret != zero else float("nan")

        print(f"\n{env_id} (random policy {zero:,.1f})")
        print(f"  {'run':<26}{'mode':>9}{'samplers':>9}{'batch':>7}{'env steps':>11}{'return':>10}{'progress':>9}"
              f"{'frames/s':>11}{'load':>6}")
        rows = [*ok.items(), ("autotuned", r["autotuned"]), ("defaults", r["defaults"])]
        for name, c in rows:
            if "error" in c:
                print(f"  {name:<26} failed: {c['error'][-200:]}")
                continue
            mode = "serial" if c["serial"] else "parallel"
            print(f"  {name:<26}{mode:>9}{c['samplers']:>9}{c['batch_size']:>7}{c['env_steps']:>11,}"
                  f"{c['return']:>10,.1f}{score(c):>9.0%}{c['update_frames_hz']:>11,.0f}{c.get('load', 0):>6.1f}")
        a, d = r["autotuned"], r["defaults"]
        if "error" in a or "error" in d or best_fr <= 0:
            print("  (no comparison: a run failed or no cell made an update within the wall time)")
            continue
        ret_ok, fr_ok = score(a) >= 0.9, a["update_frames_hz"] >= 0.9 * best_fr
        beats = score(a) > score(d) and a["update_frames_hz"] > d["update_frames_hz"]
        print(f"  autotuned vs grid best: return progress {score(a):.0%} ({'PASS' if ret_ok else 'FAIL'} >= 90%), "
              f"update frames/s {a['update_frames_hz'] / best_fr:.0%} ({'PASS' if fr_ok else 'FAIL'} >= 90%)")
        print(f"  autotuned vs defaults: return {a['return']:,.1f} vs {d['return']:,.1f}, frames/s "
              f"{a['update_frames_hz']:,.0f} vs {d['update_frames_hz']:,.0f} ({'beats' if beats else 'does NOT beat'})")


if __name__ == "__main__":
    main()
