"""The figures and the printed report of ``tools/bench_vs_sb3.py``, from the runs' records.

Per run and seed: wall time, env steps, env steps/s and updates/s, the wall time and env step at
which the training return first reaches ``--threshold-train`` and an evaluation first reaches
``--threshold-eval``, the returns at a fixed wall time, the device. Per peer and per mode of ours:
the ratios ours / peer per seed, their median and the ratio of the medians (time: below 1 favours
ours; rates: above 1 does). Last, a summary of the headline figure: per peer, ours / peer wall time
to each threshold per seed and the median. A seed where either side did not reach a threshold has
no ratio (``-``), and its median is then ``-`` too: a missing value is not "fast". Where the peer's
run stopped at its wall budget short of a threshold that ours reached, ours / budget is an upper
bound of that ratio, printed ``<=x`` (``at_most_per_seed``; ``median_at_most`` when every seed has a
ratio or a bound).

:func:`load_results` reads the records back from ``--json`` files (a finished invocation's, or one cut
short by a time limit, which holds the runs finished by then) for ``bench_vs_sb3.py --report``: the
runs of a lent GPU machine come in several calls, and one report must be made of them.

Pure functions of the records, and a reader of JSON files: creates and removes nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
from pathlib import Path
from typing import Any

from peers_record import RunRecord
from peers_runners import PEERS

from spreeze_like.errors import ConfigError

RATIO_KEYS = (("t_train", "wall to train threshold"), ("t_eval", "wall to eval threshold"),
              ("steps_per_s", "env steps/s"), ("updates_per_s", "updates/s"))


# what a report of a results file needs beside its runs (``settings`` in every --json file); files
# reported together must agree on these, since the figures of each run are measured against them
SAME_IN_EVERY_FILE = ("env", "threshold_train", "threshold_eval", "window")
# the arguments a report (and its curves) reads, kept in the file and set back from it by --report
REPORT_SETTINGS = (*SAME_IN_EVERY_FILE, "eval_episodes")


def settings_of(args: argparse.Namespace, machine: str) -> dict[str, Any]:
    """The ``settings`` a --json file keeps: what its runs are reported against, its ``--env-kwargs`` and the
    machine in words."""
    return {**{k: getattr(args, k) for k in REPORT_SETTINGS}, "env_kwargs": dict(getattr(args, "env_kwargs", {})),
            "her_goals": getattr(args, "her_goals", 0), "her_strategy": getattr(args, "her_strategy", "future"),
            "machine": machine}


def results_json(records: list[RunRecord], settings: dict[str, Any], figures: dict | None = None) -> str:
    """A --json file's text: the runs' records (``partial`` while the invocation goes on, ``records`` with
    the figures at its end) and the settings, so that ``--report`` can make the report again."""
    runs = [dataclasses.asdict(r) for r in records]
    body = {"partial": runs} if figures is None else {**figures, "records": runs}
    return json.dumps({**body, "settings": settings}, indent=None if figures is None else 1, default=str)


def load_results(paths: list[str]) -> tuple[list[RunRecord], dict[str, Any], list[str]]:
    """The records of several --json files as one report's: ``(records, settings, notes)``.

    A seed's runs come from one file, the last one given that holds the seed (its runs replace the
    seed's runs of the files before it: a seed re-run after a call cut it short), so that every ratio
    pairs runs of one invocation on one machine. The notes say which file gave which seeds, on which
    machine, and what was replaced. Files whose ``SAME_IN_EVERY_FILE`` settings differ are refused.
    """
    by_seed: dict[int, tuple[str, list[RunRecord]]] = {}
    first: dict[str, Any] = {}
    notes: list[str] = []
    machines: dict[str, None] = {}
    for path in paths:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"--report {path}: cannot read it ({exc}); give the --json files of this "
                              f"benchmark") from None
        settings, runs = (data.get("settings"), data.get("records", data.get("partial"))) \
            if isinstance(data, dict) else (None, None)
        if not isinstance(settings, dict) or not isinstance(runs, list):
            raise ConfigError(f"--report {path}: no settings and records in it (not a --json file of "
                              f"tools/bench_vs_sb3.py, or one written before --report existed)")
        missing = [k for k in REPORT_SETTINGS if k not in settings]
        if missing:
            raise ConfigError(f"--report {path}: its settings lack {', '.join(missing)}; give the --json files "
                              f"of this benchmark as it wrote them")
        first = first or settings
        differ = [k for k in SAME_IN_EVERY_FILE if settings.get(k) != first.get(k)]
        if (settings.get("env_kwargs") or {}) != (first.get("env_kwargs") or {}):  # a file from before it: none
            differ.append("env_kwargs")
        if differ:
            raise ConfigError(f"--report {path}: its {', '.join(differ)} differ from {paths[0]}'s "
                              f"({', '.join(f'{k} {settings.get(k)} vs {first.get(k)}' for k in differ)}); "
                              f"report runs made with the same settings together")
        try:
            records = [RunRecord(**{**r, "train": [tuple(x) for x in r["train"]],
                                    "evals": [tuple(x) for x in r["evals"]]}) for r in runs]
        except (TypeError, KeyError) as exc:
            raise ConfigError(f"--report {path}: a run record is not this benchmark's ({exc})") from None
        seeds = sorted({r.seed for r in records})
        for seed in seeds:
            if seed in by_seed:
                notes.append(f"seed {seed}: the runs of {path} replace those of {by_seed[seed][0]}")
            by_seed[seed] = (path, [r for r in records if r.seed == seed])
        machine = str(settings.get("machine", "?"))
        machines[machine] = None
        state = "cut short" if "partial" in data else "finished"
        notes.append(f"{path}: seeds {', '.join(map(str, seeds)) or 'none'} ({state}), on {machine}")
    records = [r for seed in sorted(by_seed) for r in by_seed[seed][1]]
    if len(machines) > 1:
        notes.append("note: the files come from different machines; each seed's ratios pair runs of one machine, "
                     "but the median over seeds mixes them")
    return records, {**first, "machine": "; ".join(machines)}, notes


def fmt(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def median(values: list[float | None]) -> float | None:
    """Median over seeds, or None if any seed did not reach (a missing value is not 'fast')."""
    if not values or any(v is None or math.isnan(v) for v in values):
        return None
    return statistics.median(values)


def figures_of(r: RunRecord, args: argparse.Namespace, t_fixed: float) -> dict:
    """One run's row of figures."""
    hit_train = r.first_train(args.threshold_train, args.window)
    hit_eval = r.first_eval(args.threshold_eval)
    return {
        "wall_s": r.wall_s, "env_steps": r.env_steps, "updates": r.updates,
        "steps_per_s": r.env_steps / r.wall_s if r.wall_s > 0 else math.nan,
        "updates_per_s": r.updates / r.wall_s if r.wall_s > 0 else math.nan,
        "t_train": hit_train[0] if hit_train else None, "step_train": hit_train[1] if hit_train else None,
        "t_eval": hit_eval[0] if hit_eval else None, "step_eval": hit_eval[1] if hit_eval else None,
        "train_at": r.train_at(t_fixed, args.window), "eval_at": r.eval_at(t_fixed),
        "final_eval": r.evals[-1][2] if r.evals else math.nan, "episodes": len(r.train), "note": r.note,
        "evals": [(round(t, 1), s, round(m, 1)) for t, s, m in r.evals], "device": r.device, "algo": r.algo,
        # short of a threshold at its budget: ours / this run's time to it is below ours / budget
        "unreached_by": r.budget_s if r.note == "stopped at the wall budget" and r.budget_s > 0 else None,
    }


def print_rows(rows: dict[str, dict[int, dict]]) -> None:
    head = (f"{'run':<15} {'seed':>4} {'wall s':>7} {'steps':>7} {'steps/s':>8} {'upd/s':>7} "
            f"{'train-thr s':>11} {'@step':>6} {'eval-thr s':>10} {'@step':>6} {'train@T':>8} {'eval@T':>7} "
            f"{'final ev':>8}")
    print(head)
    for name, per_seed in rows.items():
        for seed, v in per_seed.items():
            print(f"{name:<15} {seed:>4} {v['wall_s']:>7.1f} {v['env_steps']:>7} {v['steps_per_s']:>8.1f} "
                  f"{v['updates_per_s']:>7.1f} {fmt(v['t_train']):>11} {fmt(v['step_train'], 'd'):>6} "
                  f"{fmt(v['t_eval']):>10} {fmt(v['step_eval'], 'd'):>6} {fmt(v['train_at']):>8} "
                  f"{fmt(v['eval_at']):>7} {fmt(v['final_eval']):>8} {v['note']}")
        med = {k: median([v[k] for v in per_seed.values()]) for k in
               ("wall_s", "steps_per_s", "updates_per_s", "t_train", "t_eval", "train_at", "eval_at", "step_eval")}
        print(f"{name + ' median':<20} {fmt(med['wall_s']):>7} {'':>7} {fmt(med['steps_per_s']):>8} "
              f"{fmt(med['updates_per_s']):>7} {fmt(med['t_train']):>11} {'':>6} {fmt(med['t_eval']):>10} "
              f"{fmt(med['step_eval'], '.0f'):>6} {fmt(med['train_at']):>8} {fmt(med['eval_at']):>7}")
    for name, per_seed in rows.items():
        for seed, v in per_seed.items():
            print(f"  {name} seed {seed} evals (wall s, env step, mean return): {v['evals']}")


def peer_ratios(rows: dict[str, dict[int, dict]], ours: str, peer: str, key: str) -> dict:
    """Ours / peer for ``key``: per seed of ours (None where either side lacks it), their median, and the
    ratio of the two medians."""
    per, at_most = [], []
    for seed, v in rows[ours].items():
        row = rows[peer].get(seed, {})
        theirs = row.get(key)
        per.append(v[key] / theirs if v[key] is not None and theirs not in (None, 0) else None)
        # a wall-time threshold the peer had not reached when its budget stopped it: an upper bound
        bound = key.startswith("t_") and v[key] is not None and theirs is None and row.get("unreached_by")
        at_most.append(v[key] / row["unreached_by"] if bound else None)
    ours_med, peer_med = (median([v[key] for v in rows[n].values()]) for n in (ours, peer))
    # the median of values and upper bounds is an upper bound of the median (it is monotone in each value)
    either = [p if p is not None else b for p, b in zip(per, at_most)]
    return {"per_seed": per, "median": median(per),
            "of_medians": ours_med / peer_med if ours_med is not None and peer_med else None,
            "at_most_per_seed": at_most, "median_at_most": median(either) if any(at_most) else None}


def fmt_ratios(figures: dict) -> str:
    """Per-seed ratios, an upper bound as ``<=x`` where the peer's budget stopped it short."""
    bounds = figures.get("at_most_per_seed") or [None] * len(figures["per_seed"])
    cells = [fmt(p, ".2f") if p is not None or b is None else f"<={b:.2f}" for p, b in zip(figures["per_seed"], bounds)]
    at_most = figures.get("median_at_most")
    med = fmt(figures["median"], ".2f") if at_most is None else f"<={at_most:.2f}"
    return f"{' '.join(cells)} (median {med})"


def report(records: list[RunRecord], args: argparse.Namespace) -> dict:
    """Prints the report and returns the figures: ``t_fixed``, ``rows`` (per run name, per seed),
    ``ratios`` (per peer, per ``<our run>/<key>``), ``devices`` (per run name) and ``summary``
    (per our run, per peer, per threshold: seeds, per-seed ratios and their median)."""
    finished = [r for r in records if r.train or r.evals]
    t_fixed = args.fixed_wall or (min(r.wall_s for r in finished) if finished else math.nan)
    rows: dict[str, dict[int, dict]] = {}
    for r in records:
        rows.setdefault(r.name, {})[r.seed] = figures_of(r, args, t_fixed)
    print(f"\n== {args.env}: training return = mean of the last {args.window} training episodes; thresholds "
          f"train {args.threshold_train:g}, eval {args.threshold_eval:g}; fixed wall time {fmt(t_fixed, '.0f')} s")
    print_rows(rows)
    devices = {name: sorted({v["device"] for v in per_seed.values()}) for name, per_seed in rows.items()}
    print("\ndevices: " + "; ".join(f"{name} {' / '.join(d)}" for name, d in devices.items()))
    ours_runs = [n for n in rows if n not in PEERS]
    peers = [p for p in PEERS if p in rows]
    ratios: dict[str, dict] = {}
    for peer in peers:
        ratios[peer] = {}
        print(f"\nratios ours / {PEERS[peer].label} (time: lower is better; rates: higher is better)")
        for name in ours_runs:
            for key, label in RATIO_KEYS:
                figures = ratios[peer][f"{name}/{key}"] = peer_ratios(rows, name, peer, key)
                print(f"  {name:<15} {label:<24} per seed {fmt_ratios(figures)}; "
                      f"of the medians {fmt(figures['of_medians'], '.2f')}")
    summary = summarise(rows, ours_runs, peers, ratios)
    return {"t_fixed": t_fixed, "rows": rows, "ratios": ratios, "devices": devices, "summary": summary}


def summarise(rows: dict[str, dict[int, dict]], ours_runs: list[str], peers: list[str], ratios: dict) -> dict:
    """The headline: per our run and peer, ours / peer wall time to each threshold per seed and the median."""
    summary: dict[str, dict] = {}
    if not peers or not ours_runs:
        return summary
    print("\nsummary: ours / peer wall time to the threshold (below 1: ours is faster; '-': a side did not reach it)")
    for name in ours_runs:
        seeds = list(rows[name])
        summary[name] = {}
        print(f"  {name} (seeds {', '.join(str(s) for s in seeds)}):")
        for peer in peers:
            entry = summary[name][peer] = {"seeds": seeds}
            cells = []
            for key, label in (("t_train", "train"), ("t_eval", "eval")):
                figures = ratios[peer][f"{name}/{key}"]
                bounded = any(figures["at_most_per_seed"])  # the bounds' keys only where there is one
                entry[key] = {k: figures[k] for k in ("per_seed", "median", "at_most_per_seed", "median_at_most")
                              if bounded or "at_most" not in k}
                cells.append(f"{label} {fmt_ratios(figures)}")
            print(f"    vs {PEERS[peer].label:<11} {'; '.join(cells)}")
    return summary
