"""Critic-learner update rate: the update loop alone vs the same loop inside a parallel run.

Issue 4's acceptance: during a run the critic learner's update rate is >= 90 % of the same update
loop alone on the same machine and device (the data path never starves it). In one invocation:

1. **alone**: a spawned process (same torch threads as the critic learner) runs
   ``CriticLearner.update()`` over a local replay filled with random transitions; its actor source
   publishes a new version before every update, as the actor learner does in a run, so the
   alone loop also copies the actor weights in every update.
2. **in run**: ``spreeze_like.train`` in parallel mode with the same network, batch and device,
   once per feeder mode (``SPREEZE_FEEDER=inline|thread``). The rate is the critic's updates over
   its learning window (first to last update, from the final counters in ``status.json``).
3. **alone** again, so that a drift of the machine's load shows up.

Reported per run: the rate and its ratio to the median alone rate (the acceptance figure), and
where the critic's time went (inside ``update()``, draining rings, waiting for data, waiting for
the actor) plus the share of a core its process got. On a machine with fewer free cores than busy
processes the wall-clock ratio also measures CPU contention, not only the data path, so a second
ratio compares updates per CPU-second of the critic process (feeder included) with the alone
loop's: it is what the data path costs in work, whatever the scheduler does.

    python tools/bench_learner_rate.py                       # Pendulum-v1, 256x256, batch 256, CPU
    python tools/bench_learner_rate.py --total-steps 20000 --batch-size 1024 --device cuda:0
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import queue as queue_module
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
from scratch import runs_folder

from spreeze_like.console import run_tool
from spreeze_like.write_guard import tool_output


class _PublishingSource:
    """A weights source that has a new version at every look, as a busy actor learner's board has."""

    def __init__(self, vector: np.ndarray) -> None:
        self.vector, self.v = vector, 0

    def version(self) -> int:
        self.v += 1
        return self.v

    def read(self, out: np.ndarray) -> int:
        out[...] = self.vector
        return self.v


def alone_critic(config: Any) -> Any:
    """A ``CriticLearner`` for the resolved ``config`` over a local replay of random transitions, its actor source
    publishing a new version at every look (as a busy actor learner's board has), in this process."""
    from spreeze_like.algos import make_critic_part
    from spreeze_like.algos.base import AlgoSpec
    from spreeze_like.algos.networks import get_flat
    from spreeze_like.envs import env_info
    from spreeze_like.metrics import stats_schema
    from spreeze_like.replay import ReplayStorage, UniformSampler
    from spreeze_like.roles.critic_learner import CriticLearner
    from spreeze_like.roles.ports import LocalBoard, LocalStatsBlock

    info = env_info(config.env)
    spec = AlgoSpec.from_config(config, info.obs_dim, info.act_dim)
    n = max(10 * config.batch_size, 10_000)
    rng = np.random.default_rng(0)
    storage = ReplayStorage.local(n, info.obs_dim, info.act_dim)
    storage.add(rng.normal(size=(n, info.obs_dim)), rng.uniform(-1, 1, (n, info.act_dim)), rng.normal(size=n),
                rng.normal(size=(n, info.obs_dim)), np.zeros(n))
    stats = LocalStatsBlock(stats_schema(1))
    source = _PublishingSource(get_flat([make_critic_part(spec, "cpu").actor]))
    return CriticLearner(spec, config.critic_device, UniformSampler(storage, seed=0),
                         source, LocalBoard(), stats.role("critic-learner"), config.batch_size,
                         config.weight_sync_period, config.prioritized, step_mode=config.learner_step,
                         device_replay=config.device_replay)


def _alone(config_dict: dict, seconds: float, warmup: int, queue: multiprocessing.Queue) -> None:
    from spreeze_like.config import TrainConfig
    from spreeze_like.cpu_math import set_learner_math

    config = TrainConfig.from_dict(config_dict)
    set_learner_math(config.torch_threads)  # as the critic learner process does
    critic = alone_critic(config)
    for _ in range(warmup):
        critic.update()
    t0, cpu0, updates = time.perf_counter(), time.process_time(), 0
    while time.perf_counter() - t0 < seconds:
        critic.update()
        updates += 1
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    queue.put({"updates": updates, "wall_s": wall, "rate": updates / wall, "cpu_share": cpu / wall,
               "rate_per_cpu_s": updates / cpu})


def measure_alone(config, seconds: float) -> dict:
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_alone, args=(config.to_dict(), seconds, 30, queue))
    proc.start()
    return result_of(proc, queue, seconds + 600)


def result_of(proc: Any, queue: Any, timeout_s: float) -> Any:
    """The one result a measuring child puts on ``queue``; if the child dies without one (its traceback is above),
    the tool ends now with one line instead of waiting out ``timeout_s`` (up to an hour in bench_flush_denormal)."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive = proc.is_alive()  # read before the get: a result put just before the child exited is still taken
        try:
            result = queue.get(timeout=1.0)
        except queue_module.Empty:
            if not alive:
                proc.join()
                raise SystemExit(f"error: the measuring process exited with status {proc.exitcode} before it gave "
                                 "its result (its error is above)") from None
            if time.monotonic() > deadline:
                proc.kill()
                proc.join()
                raise SystemExit(f"error: the measuring process gave no result in {timeout_s:.0f} s") from None
            continue
        proc.join()
        return result


def measure_run(config, feeder: str) -> dict:
    from spreeze_like.training import train

    os.environ["SPREEZE_FEEDER"] = feeder
    try:
        result = train(config, print_fn=lambda line: None)
    finally:
        os.environ.pop("SPREEZE_FEEDER", None)
    counters = json.loads((Path(result.run_dir) / "status.json").read_text())["counters"]
    c = counters["critic-learner"]
    window = c["learn_t1"] - c["learn_t0"]
    updates = result.critic_updates
    return {
        "feeder": feeder, "updates": updates, "window_s": window, "rate": (updates - 1) / window,
        "update_frac": c["update_s"] / window, "drain_frac": c["drain_s"] / window,
        "data_wait_frac": c["data_wait_s"] / window, "actor_wait_frac": c["actor_wait_s"] / window,
        "cpu_share": c["learn_cpu_s"] / window, "rate_per_cpu_s": (updates - 1) / c["learn_cpu_s"],
        "drained_rows": c["drained_rows"], "drain_us_per_row": 1e6 * c["drain_s"] / max(1.0, c["drained_rows"]),
        "env_steps": result.env_steps, "wall_s": result.wall_s, "final_eval": result.final_eval_return,
        "run_dir": str(result.run_dir),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="Pendulum-v1")
    parser.add_argument("--total-steps", type=int, default=6000, help="env steps of each parallel run")
    parser.add_argument("--learning-starts", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--hidden-sizes", type=int, nargs="+", default=[256, 256])
    parser.add_argument("--device", default="cpu", help="critic and actor device: cpu (default), cuda:N or auto")
    parser.add_argument("--samplers", type=int, default=1)
    parser.add_argument("--alone-seconds", type=float, default=20.0)
    parser.add_argument("--feeders", nargs="+", default=["inline", "thread"], choices=["inline", "thread"])
    parser.add_argument("--repeats", type=int, default=1, help="rounds of (runs, alone), for medians")
    parser.add_argument("--json", default="", help="also write the results to this file")
    parser.add_argument("--logdir", default="", help="keep the runs here (default: a scratch folder, removed at the end)")
    args = parser.parse_args(argv)
    tool_output(parser, args.json)  # tried now, not after the measuring
    from spreeze_like.devices import tool_device
    from spreeze_like.envs import tool_env
    from spreeze_like.errors import SpreezeError

    args.device = tool_device(parser, args.device)
    if args.alone_seconds <= 0 or args.repeats < 1:
        parser.exit(2, "error: --alone-seconds needs a time > 0 and --repeats a whole number >= 1\n")
    tool_env(parser, args.env)
    try:  # the run settings, as the trainer checks them: one line now, before a folder or a process exists
        run_config(args, args.logdir or "scratch")  # a logdir to check with: the scratch folder is made later
    except SpreezeError as exc:
        parser.exit(2, f"error: {exc}\n")

    with runs_folder(args.logdir, "bench_learner_rate_") as logdir:
        return bench(args, str(logdir))


def run_config(args: argparse.Namespace, logdir: str) -> Any:
    """The TrainConfig of the tool's runs (raises ConfigError for settings the trainer refuses)."""
    from spreeze_like.config import TrainConfig

    return dataclasses.replace(
        TrainConfig(), env=args.env, total_steps=args.total_steps, learning_starts=args.learning_starts,
        batch_size=args.batch_size, hidden_sizes=tuple(args.hidden_sizes), actor_device=args.device,
        critic_device=args.device, samplers=args.samplers, eval_every=0, eval_episodes=2, log_interval=0,
        checkpoint_every=0, logdir=logdir, buffer_size=max(100_000, args.total_steps)).resolve()


def bench(args: argparse.Namespace, logdir: str) -> int:
    """The runs and their report, with the runs' folder ``logdir``."""
    config = run_config(args, logdir)
    load0 = os.getloadavg()
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}  cpus={os.cpu_count()}  load={load0[0]:.2f},{load0[1]:.2f}  "
          f"{config.env} hidden={config.hidden_sizes} batch={config.batch_size} device={config.critic_device} "
          f"samplers={config.samplers}", flush=True)
    alone, runs = [], []

    def run_alone(label: str) -> None:
        a = measure_alone(config, args.alone_seconds)
        alone.append(a)
        print(f"{label:15s} {a['rate']:8.1f} updates/s  (cpu share {a['cpu_share']:.2f}, "
              f"{a['rate_per_cpu_s']:.1f} updates per cpu-s)", flush=True)

    run_alone("alone:")
    for _ in range(args.repeats):
        for feeder in args.feeders:
            r = measure_run(config, feeder)
            runs.append(r)
            print(f"in run ({feeder:6s}): {r['rate']:8.1f} updates/s over {r['window_s']:.0f} s; time: update "
                  f"{r['update_frac']:.0%}, drain {r['drain_frac']:.1%} ({r['drain_us_per_row']:.1f} us/row), wait "
                  f"data {r['data_wait_frac']:.1%}, wait actor {r['actor_wait_frac']:.1%}; cpu share "
                  f"{r['cpu_share']:.2f} ({r['rate_per_cpu_s']:.1f} updates per cpu-s); final eval {r['final_eval']:.0f}",
                  flush=True)
        run_alone("alone (again):")
    base = statistics.median(a["rate"] for a in alone)
    base_cpu = statistics.median(a["rate_per_cpu_s"] for a in alone)
    for feeder in args.feeders:
        mine = [r for r in runs if r["feeder"] == feeder]
        for r in mine:
            r["ratio"], r["cpu_ratio"] = r["rate"] / base, r["rate_per_cpu_s"] / base_cpu
        print(f"median ratio in run / alone ({feeder}): wall {statistics.median(r['ratio'] for r in mine):.2f}   "
              f"per cpu-second {statistics.median(r['cpu_ratio'] for r in mine):.2f}   "
              f"(alone median {base:.1f} updates/s, {base_cpu:.1f} per cpu-s)")
    load1 = os.getloadavg()
    print(f"# load after: {load1[0]:.2f},{load1[1]:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"alone": alone, "runs": runs, "load": [load0, load1]}, indent=2))
    return 0


if __name__ == "__main__":
    run_tool(main)
