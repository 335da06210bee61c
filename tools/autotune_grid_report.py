"""The tables of tools/bench_autotune.py: one configuration's runs as one row, several results files (parts
of one grid, or a call cut short) as one, the acceptance figures, and the printed report.

Kept apart from the runner so that ``--report`` of saved files, the merge and the acceptance arithmetic
read (and are tested) without the code that starts runs.
"""

from __future__ import annotations

import json
import math
import statistics
from typing import Any

ACCEPT = 0.9  # the autotuned run's share of the grid's best return progress


def median_row(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """One configuration's runs as one row: median return and frames/s (the first run's settings)."""
    ok = [c for c in cells if "error" not in c]
    if not ok:
        return cells[0]
    row = dict(ok[0])
    for key in ("return", "update_frames_hz", "env_steps", "load"):
        if all(key in c for c in ok):
            row[key] = statistics.median(c[key] for c in ok)
    row["env_steps"] = int(row["env_steps"])
    return row


def merge(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Several results files (parts of one grid) as one: grid rows united, autotuned/defaults from any part."""
    merged: dict[str, Any] = {"wall_s": results[0]["wall_s"], "cores": results[0]["cores"],
                              "rounds": max(r.get("rounds", 1) for r in results),
                              "load_before": results[0]["load_before"], "load_after": results[-1]["load_after"],
                              "parts": len(results), "partial": sum(bool(r.get("partial")) for r in results),
                              "envs": {}}
    if len({r["wall_s"] for r in results}) > 1:
        raise ValueError(f"the parts ran for different wall times ({sorted({r['wall_s'] for r in results})} s): "
                         "returns at different times do not compare")
    # returns at a wall time compare only on one kind of machine; files older than the "machine" field
    # (before 2026-11-28's H200 grid) say nothing, and the report says how many
    machines = sorted({r["machine"] for r in results if r.get("machine")})
    if len(machines) > 1:
        raise ValueError(f"the files ran on different machines ({' | '.join(machines)}): returns at a wall time do "
                         "not compare across them; report each machine's files apart")
    merged["machine"] = machines[0] if machines else ""
    kwargs = {json.dumps(r.get("env_kwargs") or {}, sort_keys=True) for r in results}  # older files: none
    if len(kwargs) > 1:
        raise ValueError(f"the files ran envs made with different --env-kwargs ({' | '.join(sorted(kwargs))}): "
                         "returns of different envs do not compare; report each set of kwargs apart")
    merged["env_kwargs"] = results[0].get("env_kwargs") or {}
    merged["machine_unrecorded"] = sum(not r.get("machine") for r in results)
    for r in results:
        for env_id, e in r["envs"].items():
            into = merged["envs"].setdefault(env_id, {"random_return": e["random_return"], "plan": "", "runs": {},
                                                      "grid": {}})
            into["grid"].update(e["grid"])
            into["runs"].update(e.get("runs", {}))
            for key in ("autotuned", "defaults"):
                if e.get(key):
                    into[key] = e[key]
            into["plan"] = into["plan"] or e.get("plan", "")
    return merged


def compare(env: dict[str, Any]) -> dict[str, Any]:
    """The acceptance figures of one env: each row's return progress, and the autotuned run's share of the best."""
    zero = env["random_return"]
    ok = {k: c for k, c in env["grid"].items() if "error" not in c and c["return"] == c["return"]}
    best_name = max(ok, key=lambda k: ok[k]["return"], default="")
    best = ok[best_name]["return"] if best_name else float("nan")

    def progress(c: dict[str, Any]) -> float:
        if "error" in c or not best > zero:  # no cell beat a random policy (or none finished an episode)
            return float("nan")
        return (c["return"] - zero) / (best - zero)

    out: dict[str, Any] = {"best_cell": best_name, "best_return": best,
                           "progress": {k: progress(c) for k, c in env["grid"].items()}}
    for key in ("autotuned", "defaults"):
        if env.get(key):
            out[f"{key}_progress"] = progress(env[key])
    a = out.get("autotuned_progress", float("nan"))
    out["autotuned_pass"] = bool(not math.isnan(a) and a >= ACCEPT)
    return out


def report(results: dict[str, Any]) -> None:
    """Print the table and the acceptance lines."""
    print(f"\nautotune benchmark: {results['wall_s']:.0f} s per run, {results.get('rounds', 1)} round(s) (medians), "
          f"{results['cores']} cores, load average {results['load_before'][0]:.1f} before, "
          f"{results['load_after'][0]:.1f} after"
          + (f", merged from {results['parts']} parts" if results.get("parts") else ""))
    if results.get("machine"):
        print(f"  machine: {results['machine']}")
    if results.get("env_kwargs"):
        print(f"  envs made with --env-kwargs {json.dumps(results['env_kwargs'])}")
    if results.get("machine_unrecorded"):
        print(f"  {results['machine_unrecorded']} of the files do not say which machine ran them (older than the "
              "record): merge only files of one kind of machine")
    if results.get("partial"):
        print(f"  {results['partial']} of the files cut short (a time limit): only the runs that finished are below")
    for env_id, r in results["envs"].items():
        c = compare(r)
        print(f"\n{env_id} (random policy {r['random_return']:,.1f}; grid best {c['best_cell'] or '-'})")
        print(f"  {'run':<40}{'mode':>9}{'samp':>5}{'envs':>5}{'batch':>6}{'utd':>8}{'R':>6}{'env steps':>11}"
              f"{'return':>10}{'progress':>9}{'frames/s':>11}")
        rows = [*r["grid"].items()] + [(k, r[k]) for k in ("autotuned", "defaults") if r.get(k)]
        for name, row in rows:
            if "error" in row:
                print(f"  {name:<40} failed: {row['error'][-200:]}")
                continue
            p = c["progress"].get(name, c.get(f"{name}_progress", float("nan")))
            mode = "serial" if row["serial"] else "parallel"
            print(f"  {name:<40}{mode:>9}{row['samplers']:>5}{row['envs_per_sampler']:>5}{row['batch_size']:>6}"
                  f"{row['utd']:>8.4g}{row['replay_ratio']:>6.0f}{row['env_steps']:>11,}{row['return']:>10,.1f}"
                  f"{p:>9.0%}{row['update_frames_hz']:>11,.0f}")
        if "autotuned_progress" not in c:
            print("  (no autotuned run in these results)")
        elif not c["best_cell"]:
            print("  (no comparison: no grid cell finished an episode within the wall time)")
        elif not c["best_return"] > r["random_return"]:
            print("  (no comparison: no grid cell beat a random policy within the wall time)")
        else:
            print(f"  autotuned vs the grid's best at {results['wall_s']:.0f} s: return progress "
                  f"{c['autotuned_progress']:.0%} ({'PASS' if c['autotuned_pass'] else 'FAIL'} >= {ACCEPT:.0%})")
        if "defaults_progress" in c and "autotuned_progress" in c:
            print(f"  autotuned vs defaults: return {r['autotuned']['return']:,.1f} vs {r['defaults']['return']:,.1f}")
