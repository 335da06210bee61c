"""Remote samplers on Ray against local ones (issue 16's acceptance): overhead, scale-out, learning.

Every run is the real CLI (``python -m spreeze_like.run``) against a throwaway cluster from
``tools/ray_cluster.py`` (a head with no CPUs, one worker node), all inside a private network namespace
that has only loopback: the script re-runs itself under ``unshare -n`` (root) when it is not in one.

- **overhead** (HalfCheetah-v5, one sampler of 4 envs): env steps/s that one sampler delivers into its ring
  when it is a remote actor (``--samplers 0 --remote-samplers 1``) vs the same sampler as a local process
  (``--samplers 1``); target >= 80 %. And the ``ray-bridge`` process's CPU per 10,000 transitions/s
  (its ``cpu_s`` / ``rows_written`` x 10,000 over the steady window), target < 10 % of a core.
- **scale-out** (``spreeze_like.slow_envs:SlowPendulum-v1``: 2 ms of sleep per step, latency-bound): sample Hz
  of 1 local sampler alone vs 1 local + 2 remote (the worker node offers 2 CPUs); target >= 2.5x.
- **learning** (Pendulum-v1, 1 local + 1 remote, the preset's settings): the env step at which the
  evaluation first reaches -200; target within 20,000 steps.

Rates: the run's ``status.json`` (each sampler row's env steps and the bridge's counters, rewritten every
second) is polled, and rates are taken over the *steady window*: from the first poll at which every sampler
row is past 10 % of its final steps (every actor placed and stepping) to the last at which every row is
still below 90 % (none done yet, so none idles while others run). The bridge's CPU per 10,000 transitions/s
is taken over the same window (Ray's import and connect, ~0.5 s of CPU once per run, are outside it and
reported separately for the whole run). The overhead and
scale-out runs use ``--utd 0.05`` so that the learners, not the samplers, never set the pace (at UTD 1 on
two cores the learners bound sampling and the comparison would measure them).

    python tools/bench_remote.py --quick --json remote.json     # a few minutes; shorter runs
    python tools/bench_remote.py --json remote.json             # the acceptance figures
    python tools/bench_remote.py --only overhead --quick
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ray_cluster

from spreeze_like.console import run_tool
from spreeze_like.run_launch import start_run, stop_run
from spreeze_like.write_guard import tool_output

SLOW_ENV = "spreeze_like.slow_envs:SlowPendulum-v1"
LOW_UTD = "0.05"
QUIET = ["--eval-every", "0", "--eval-episodes", "1", "--log-interval", "0", "--tb-interval", "5"]
TARGETS = {"overhead_ratio": 0.80, "bridge_core_per_10k": 0.10, "scaleout_ratio": 2.5, "learn_step": 20_000}


def run_cli(args: list[str], env: dict[str, str], logdir: Path, timeout_s: float) -> dict[str, Any]:
    """One CLI run; returns its exit code, wall time, status.json polls, final counters and checkpoint evals."""
    logdir.mkdir(parents=True, exist_ok=True)
    log = logdir / "cli.log"
    t0 = time.monotonic()
    with open(log, "w") as out:
        proc = start_run([*args, "--logdir", str(logdir / "runs")], out, env=env, PYTHONWARNINGS="ignore")
    polls: list[tuple[float, int]] = []
    rows: list[tuple[float, dict[str, dict[str, float]]]] = []  # per poll: each sampler row's and the bridge's counters
    run_dir: Path | None = None
    try:
        while proc.poll() is None:
            if time.monotonic() - t0 > timeout_s:
                stop_run(proc, timeout_s=60)
                break
            if run_dir is None and (logdir / "runs").is_dir():
                run_dir = next((p for p in (logdir / "runs").iterdir() if p.is_dir()), None)
            if run_dir is not None:
                try:
                    st = json.loads((run_dir / "status.json").read_text())
                    polls.append((time.monotonic(), int(st["env_steps"])))
                    rows.append((time.monotonic(), {k: dict(v) for k, v in st.get("live", {}).items()}))
                except (OSError, ValueError, KeyError, TypeError):
                    pass
            time.sleep(0.25)
    except BaseException:  # this tool's Ctrl-C or SIGTERM (run_tool): the run is stopped in order, by one signal
        stop_run(proc)
        raise
    wall = time.monotonic() - t0
    result: dict[str, Any] = {"args": args, "rc": proc.returncode, "wall_s": round(wall, 1), "log": str(log)}
    if run_dir is None:
        result["error"] = log.read_text()[-1500:]
        return result
    status = json.loads((run_dir / "status.json").read_text())
    result.update(counters=status.get("counters", {}), remote=status.get("remote_samplers"), polls=polls,
                  rows=rows, run_dir=str(run_dir))
    evals = run_dir / "evals.jsonl"
    if evals.is_file():
        result["evals"] = [(int(r["env_step"]), float(r["mean_return"])) for r in map(json.loads, evals.open())]
    if proc.returncode != 0:
        result["error"] = log.read_text()[-1500:]
    return result


def steady_window(rows: list[tuple[float, dict[str, dict[str, float]]]], lo: float = 0.1,
                  hi: float = 0.9) -> tuple[int, int] | None:
    """Indices of the first and last poll while EVERY sampler row was past ``lo`` and below ``hi`` of its final
    env steps: all samplers running (actors placed, warm-up done on the local side), none done yet."""
    if len(rows) < 2:
        return None
    final = {k: v.get("env_steps", 0) for k, v in rows[-1][1].items() if k.startswith("sampler-")}
    inside = [i for i, (_, c) in enumerate(rows)
              if final and all(lo * f <= c.get(k, {}).get("env_steps", 0) <= hi * f for k, f in final.items() if f > 0)]
    if len(inside) < 2 or rows[inside[-1]][0] - rows[inside[0]][0] < 1.0:
        return None
    return inside[0], inside[-1]


def window_rate(rows: list[tuple[float, dict[str, dict[str, float]]]]) -> float | None:
    """Env steps/s of all sampler rows together over the steady window (:func:`steady_window`)."""
    w = steady_window(rows)
    if w is None:
        return None
    (t0, c0), (t1, c1) = rows[w[0]], rows[w[1]]
    total = lambda c: sum(v.get("env_steps", 0) for k, v in c.items() if k.startswith("sampler-"))
    return (total(c1) - total(c0)) / (t1 - t0)


def bridge_core_per_10k(rows: list[tuple[float, dict[str, dict[str, float]]]]) -> dict[str, float] | None:
    """The ray-bridge's CPU seconds per row over the steady window, as cores per 10,000 transitions/s
    (CPU s per s divided by rows per s, x 10,000): Ray's import and connect are outside the window."""
    w = steady_window(rows)
    if w is None:
        return None
    (t0, c0), (t1, c1) = rows[w[0]], rows[w[1]]
    b0, b1 = c0.get("ray-bridge", {}), c1.get("ray-bridge", {})
    rows_d = b1.get("rows_written", 0) - b0.get("rows_written", 0)
    cpu_d = b1.get("cpu_s", 0) - b0.get("cpu_s", 0)
    if rows_d <= 0:
        return None
    return {"window_s": t1 - t0, "rows": rows_d, "cpu_s": cpu_d, "core_per_10k": cpu_d / rows_d * 10_000,
            "rows_per_s": rows_d / (t1 - t0), "cpu_share": cpu_d / (t1 - t0)}


def with_cluster(worker_cpus: int, fn):
    with ray_cluster.LocalCluster(workers=1, worker_cpus=worker_cpus, first_port=24000, gcs_port=6600) as cluster:
        return fn(cluster)


def overhead(work: Path, quick: bool) -> dict[str, Any]:
    steps = 30_000 if quick else 100_000
    common = ["--env", "HalfCheetah-v5", "--utd", LOW_UTD, "--learning-starts", "2000", "--total-steps", str(steps),
              "--buffer-size", str(steps), *QUIET]

    def both(cluster):
        local = run_cli([*common, "--samplers", "1", "--envs-per-sampler", "4"], cluster.env(), work / "oh_local",
                        900)
        remote = run_cli([*common, "--ray", cluster.address, "--samplers", "0", "--remote-samplers", "1",
                          "--remote-envs-per-sampler", "4"], cluster.env(), work / "oh_remote", 900)
        return local, remote

    local, remote = with_cluster(1, both)
    out: dict[str, Any] = {"steps": steps, "local": _slim(local), "remote": _slim(remote)}
    rl, rr = window_rate(local.get("rows", [])), window_rate(remote.get("rows", []))
    out.update(local_steps_per_s=rl, remote_steps_per_s=rr, ratio=(rr / rl) if rl and rr else None)
    bridge = remote.get("counters", {}).get("ray-bridge", {})
    if bridge.get("rows_written"):  # the whole run, start-up and connect included: for the record
        out["bridge_cpu_s_run"] = bridge["cpu_s"]
        out["bridge_rows_run"] = bridge["rows_written"]
        out["bridge_calls_run"] = bridge.get("calls")
        out["bridge_core_per_10k_run"] = bridge["cpu_s"] / bridge["rows_written"] * 10_000
    steady = bridge_core_per_10k(remote.get("rows", []))
    if steady is not None:  # the acceptance figure: the steady window
        out["bridge_steady"] = steady
        out["bridge_core_per_10k"] = steady["core_per_10k"]
    return out


def scaleout(work: Path, quick: bool) -> dict[str, Any]:
    steps = 6_000 if quick else 20_000
    common = ["--env", SLOW_ENV, "--utd", LOW_UTD, "--learning-starts", "500", "--total-steps", str(steps),
              "--envs-per-sampler", "1", "--buffer-size", str(steps), *QUIET]

    def both(cluster):
        alone = run_cli([*common, "--samplers", "1"], cluster.env(), work / "so_alone", 900)
        spread = run_cli([*common, "--ray", cluster.address, "--samplers", "1", "--remote-samplers", "2",
                          "--remote-envs-per-sampler", "1"], cluster.env(), work / "so_spread", 900)
        return alone, spread

    alone, spread = with_cluster(2, both)
    ra, rs = window_rate(alone.get("rows", [])), window_rate(spread.get("rows", []))
    return {"steps": steps, "alone": _slim(alone), "spread": _slim(spread), "alone_hz": ra, "spread_hz": rs,
            "ratio": (rs / ra) if ra and rs else None}


def learning(work: Path, quick: bool) -> dict[str, Any]:
    steps = 8_000 if quick else 20_000
    args = ["--env", "Pendulum-v1", "--samplers", "1", "--remote-samplers", "1", "--total-steps", str(steps),
            "--eval-every", "1000", "--eval-episodes", "5", "--log-interval", "10"]
    run = with_cluster(1, lambda c: run_cli([*args, "--ray", c.address], c.env(), work / "learn", 1800))
    evals = run.get("evals", [])
    first = next((s for s, r in evals if r >= -200.0), None)
    return {"steps": steps, "run": _slim(run), "evals": evals, "first_step_at_minus_200": first}


def _slim(run: dict[str, Any]) -> dict[str, Any]:
    keep = {k: v for k, v in run.items() if k not in ("polls", "counters", "rows")}
    c = run.get("counters", {})
    keep["rows"] = {k: v.get("env_steps") for k, v in c.items() if k.startswith("sampler-")}
    return keep


def _fmt(x: float | None, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


def report(res: dict[str, Any]) -> str:
    lines = ["| measure | ours | target | verdict |", "|---|---|---|---|"]

    def row(name: str, value: float | None, spec: str, target: float, higher_is_better: bool) -> None:
        ok = None if value is None else (value >= target if higher_is_better else value < target)
        verdict = "n/a" if ok is None else ("met" if ok else "NOT met")
        lines.append(f"| {name} | {_fmt(value, spec)} | {'>=' if higher_is_better else '<'} {target:g} | {verdict} |")

    if "overhead" in res:
        o = res["overhead"]
        lines.append(f"| HalfCheetah-v5 one sampler, local env steps/s | {_fmt(o.get('local_steps_per_s'), '.0f')} | | |")
        lines.append(f"| HalfCheetah-v5 one sampler, remote env steps/s | {_fmt(o.get('remote_steps_per_s'), '.0f')} "
                     "| | |")
        row("remote / local", o.get("ratio"), ".2f", TARGETS["overhead_ratio"], True)
        row("bridge cores per 10k transitions/s", o.get("bridge_core_per_10k"), ".3f", TARGETS["bridge_core_per_10k"],
            False)
    if "scaleout" in res:
        s = res["scaleout"]
        lines.append(f"| SlowPendulum 1 local, sample Hz | {_fmt(s.get('alone_hz'), '.0f')} | | |")
        lines.append(f"| SlowPendulum 1 local + 2 remote, sample Hz | {_fmt(s.get('spread_hz'), '.0f')} | | |")
        row("scale-out ratio", s.get("ratio"), ".2f", TARGETS["scaleout_ratio"], True)
    if "learning" in res:
        step = res["learning"].get("first_step_at_minus_200")
        lines.append(f"| Pendulum-v1 1 local + 1 remote: first eval >= -200 at step | {step if step else 'never'} "
                     f"(of {res['learning']['steps']}) | <= {TARGETS['learn_step']} | "
                     f"{'met' if step and step <= TARGETS['learn_step'] else 'NOT met'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs (a few minutes in all)")
    parser.add_argument("--only", choices=["overhead", "scaleout", "learning"], action="append",
                        help="run only these parts (repeatable)")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--workdir", type=Path, help="keep the run folders here (default: a temp folder, removed)")
    args = parser.parse_args(argv)
    tool_output(parser, args.json)  # tried now, not after the measuring
    if not ray_cluster.in_private_netns():
        reason = ray_cluster.netns_unavailable_reason()
        if reason:
            print(f"error: the benchmark's Ray cluster needs a private network namespace: {reason}", file=sys.stderr)
            return 2
        return subprocess.call(ray_cluster.netns_argv([sys.executable, *sys.argv]))
    parts = args.only or ["overhead", "scaleout", "learning"]
    res: dict[str, Any] = {"date": dt.datetime.now().isoformat(timespec="seconds"), "machine": platform.node(),
                           "cpus": os.cpu_count(), "quick": args.quick, "load_before": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="bench_remote.") as tmp:
        work = args.workdir or Path(tmp)
        for part in parts:
            t0 = time.monotonic()
            print(f"[bench_remote] {part} ...", flush=True)
            res[part] = {"overhead": overhead, "scaleout": scaleout, "learning": learning}[part](work / part, args.quick)
            res[part]["bench_wall_s"] = round(time.monotonic() - t0, 1)
    res["load_after"] = os.getloadavg()
    print(report(res))
    print(f"load average before {res['load_before']}, after {res['load_after']}")
    if args.json:
        args.json.write_text(json.dumps(res, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    run_tool(main)
