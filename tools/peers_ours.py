"""Our side of ``tools/bench_vs_sb3.py``: one ``spreeze_like.train`` run per seed and mode, recorded.

Runs in the benchmark's own process tree (our serial mode in the benchmark process, the parallel
mode's roles in the processes our supervisor spawns). Our learners' devices: ``--device`` sets both
(``--set actor_device=...`` / ``critic_device`` one by one; ``--set`` wins); the devices
``TrainConfig.resolve()`` picks are stored per run, and a device this machine lacks is a ConfigError
before any run. Our settings are a default run's on the *base* env: its algorithm (``presets/algos.toml``)
and that algorithm's preset, laid here because the run itself sees the recording wrapper's env id,
which no preset knows; the benchmark's shared settings and ``--set`` win over them.

Stopping: a watcher thread sends SIGINT to this process at ``--wall-budget`` or, with
``--stop-when-reached``, once both thresholds are reached (read from the episode files every 0.5 s);
both of our modes stop cleanly on SIGINT. An interrupted run's counters are read back from its run
folder (``status.json``, the evaluator's results). Creates: the run's episode folder in the scratch
folder, and our run folder under ``--logdir`` (scratch by default); the benchmark removes the scratch.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import threading
import time
from pathlib import Path

from peers_record import EPISODE_DIR_VAR, MODULE, RECORDED_ID, RunRecord, both_reached, read_episodes, train_curve


def ours_config(args: argparse.Namespace, seed: int, serial: bool):  # -> TrainConfig
    """What a default run on the *base* env gets (its algorithm from ``presets/algos.toml`` and that
    algorithm's preset, as :func:`spreeze_like.layering.lay_presets` lays them), under the benchmark's
    shared settings and ``--set``; then the env becomes the recording wrapper, whose id no preset knows."""
    from spreeze_like.config import TrainConfig, auto_actor_lr
    from spreeze_like.layering import lay_presets

    extra = dict(args.set)
    devices = {"actor_device": args.device, "critic_device": args.device} if args.device else {}
    shared = {"seed": seed, "total_steps": args.total_steps, "serial": serial, "learning_starts": args.learning_starts,
              "eval_every": args.eval_every, "eval_episodes": args.eval_episodes, "logdir": args.logdir,
              "log_interval": 0, "checkpoint_every": 0, "her_goals": getattr(args, "her_goals", 0),
              "her_strategy": getattr(args, "her_strategy", "future"), **devices, **extra}
    config = dataclasses.replace(TrainConfig(), env=args.env, **shared)
    config, _ = lay_presets(config, dict.fromkeys(["env", *shared], "python"))
    # ``auto`` looked up on the base env, for the same reason
    actor_lr = config.actor_lr if config.actor_lr is not None else auto_actor_lr(args.env, config.algo, config.presets)
    return dataclasses.replace(config, env=f"{MODULE}:{RECORDED_ID}", actor_lr=actor_lr)


def ours_device(config) -> str:
    """Our learners' devices as ``resolve()`` fills them in (a ConfigError for a device this machine lacks)."""
    resolved = config.resolve()
    step = getattr(resolved, "learner_step", None)
    return (f"actor {resolved.actor_device}, critic {resolved.critic_device}, {resolved.precision}"
            + (f", learner step {step}" if step else ""))


def run_ours(args: argparse.Namespace, seed: int, serial: bool, scratch: Path) -> RunRecord:
    from spreeze_like.training import train

    name = f"ours-{'serial' if serial else 'parallel'}"
    folder = scratch / f"{name}-{seed}"
    folder.mkdir(parents=True)
    config = ours_config(args, seed, serial)
    record = RunRecord(name, seed, device=ours_device(config), algo=config.algo, budget_s=args.wall_budget)
    os.environ[EPISODE_DIR_VAR] = str(folder)
    t0 = time.time()
    stop = threading.Event()

    def watch() -> None:  # Ctrl-C to ourselves at the budget or once reached: both modes stop cleanly on SIGINT
        while not stop.wait(0.5):
            over = args.wall_budget and time.time() - t0 >= args.wall_budget
            if over or (args.stop_when_reached and reached(folder, t0, args)):
                record.note = "stopped at the wall budget" if over else "stopped once both thresholds were reached"
                os.kill(os.getpid(), signal.SIGINT)
                return

    watcher = threading.Thread(target=watch, daemon=True)
    result = None
    try:
        watcher.start()
        result = train(config, print_fn=lambda line: None)
    except KeyboardInterrupt:
        if not record.note:  # not the watcher's stop but the user's Ctrl-C: our run stopped cleanly, now the bench
            raise
    finally:
        stop.set()
        os.environ.pop(EPISODE_DIR_VAR, None)
    record.wall_s = time.time() - t0
    record.train = train_curve(folder, t0)
    if result is not None:
        record.env_steps, record.updates = result.env_steps, result.critic_updates
        known = [(int(s), float(r)) for s, r, *_ in result.evals]
    else:  # interrupted: the run folder's status.json / evals file hold the counters and the eval steps
        record.env_steps, record.updates, known = interrupted_counters(Path(args.logdir), record)
    # evaluation k = the k-th episode of each evaluator env; its result is known when the last one ends
    per_env = read_episodes(folder, "eval")
    rounds = min((len(e) for e in per_env), default=0)
    groups = [[e[k] for e in per_env] for k in range(rounds)]
    means = [sum(r for _, r, _ in group) / len(group) for group in groups]
    for group, mean, step in zip(groups, means, eval_steps(means, known)):
        record.evals.append((max(t for t, _, _ in group) - t0, step, mean))
    return record


def eval_steps(means: list[float], known: list[tuple[int, float]]) -> list[int]:
    """The env step of each recorded evaluation round (-1 where the run's own list has no match).

    ``known`` is the run's evaluations in the order they finished, ``means`` the rounds' mean returns read
    from the episode files, also in order. Matching walks both lists forward: once a policy has learned,
    successive evaluations often return the same mean to within 0.1 %, and matching each round against
    the whole list would stamp it with the first such evaluation's step.
    """
    steps, start = [], 0
    for mean in means:
        match = next((i for i in range(start, len(known))
                      if abs(known[i][1] - mean) < 1e-3 * max(1.0, abs(mean))), None)
        steps.append(-1 if match is None else known[match][0])
        start = start if match is None else match + 1
    return steps


def reached(folder: Path, t0: float, args: argparse.Namespace) -> bool:
    """Both thresholds reached, judged from the episode files written so far."""
    per_env = read_episodes(folder, "eval")
    rounds = min((len(e) for e in per_env), default=0)
    evals = [sum(e[k][1] for e in per_env) / len(per_env) for k in range(rounds)]
    return both_reached(train_curve(folder, t0), evals, args.threshold_train, args.threshold_eval, args.window)


def interrupted_counters(logdir: Path, record: RunRecord) -> tuple[int, int, list[tuple[int, float]]]:
    """(env steps, critic updates, [(eval env step, mean return)]) of the newest run folder under logdir."""
    from spreeze_like.procs.evaluator_proc import read_results

    runs = sorted(logdir.glob("*/"), key=lambda p: p.stat().st_mtime)
    if not runs:
        return (record.train[-1][1] if record.train else 0), 0, []
    run_dir = runs[-1]
    known = [(int(r["env_step"]), float(r["mean_return"])) for r in read_results(run_dir)]
    try:
        status = json.loads((run_dir / "status.json").read_text())
        counters = status.get("counters", {})
        return int(status["env_steps"]), int(counters.get("critic-learner", {}).get("total_updates", 0)), known
    except (OSError, ValueError, KeyError):
        return (record.train[-1][1] if record.train else 0), 0, known
