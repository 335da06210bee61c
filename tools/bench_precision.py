"""Learner update time in fp32 vs bf16 mixed precision, on one device, same networks and batch.

    python tools/bench_precision.py                               # Pendulum sizes, batch 256, CPU
    python tools/bench_precision.py --obs-dim 17 --act-dim 6 --batch-sizes 256 1024 --device cpu

For each batch size it times the algorithm's critic step and actor step (one torch thread, a
fixed random batch, each step in its own autocast region as the learners run it) in both
precisions, interleaved over ``--rounds`` rounds so that a drift of the machine's load hits both,
and prints the median milliseconds per step and the ratio fp32 / bf16 (above 1: bf16 is faster).
The fp32 side runs the step a run's ``--learner-step auto`` gives it: on the CPU the explicit step
(algos/explicit_grad.py, explicit_renorm.py) for SAC, TD3, DDPG and CrossQ; ``--fp32-step eager`` times autograd's step instead
(the comparison ``devices.BF16_MIN_WORK`` was measured with; ``BF16_MIN_WORK_EXPLICIT`` with the default).

Whether bf16 learns as well is a separate question, answered per env step by
``tools/bench_learning.py --set precision='"bf16"'`` against ``'"fp32"'`` (BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from spreeze_like.algos import make_actor_part, make_critic_part
from spreeze_like.algos.base import AlgoSpec, Batch
from spreeze_like.console import run_tool
from spreeze_like.devices import cpu_has_native_bf16, tool_device


def random_batch(n: int, obs_dim: int, act_dim: int, device: str) -> Batch:
    g = torch.Generator().manual_seed(0)
    return Batch(
        torch.randn(n, obs_dim, generator=g).to(device),
        (torch.rand(n, act_dim, generator=g) * 2 - 1).to(device),
        torch.randn(n, generator=g).to(device),
        torch.randn(n, obs_dim, generator=g).to(device),
        torch.zeros(n).to(device),
    )


def time_steps(part, batch: Batch, steps: int, step=None) -> float:
    """Milliseconds per step over ``steps`` steps (after a short warm-up); ``step``: default ``part.step``."""
    sync = torch.cuda.synchronize if part.device.type == "cuda" else (lambda: None)
    step = step or part.step
    for _ in range(5):
        with part.autocast():
            step(batch)
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        with part.autocast():
            step(batch)
    sync()
    return 1e3 * (time.perf_counter() - t0) / steps


def add_step_args(parser: argparse.ArgumentParser, batch_sizes: list[int]) -> None:
    """The flags every learner-step timing tool shares (this one and tools/bench_cpu_compile.py)."""
    parser.add_argument("--algo", default="sac", choices=["sac", "td3", "ddpg", "crossq"])
    parser.add_argument("--obs-dim", type=int, default=3)
    parser.add_argument("--act-dim", type=int, default=1)
    parser.add_argument("--hidden-sizes", type=int, nargs="+", default=[256, 256])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=batch_sizes)
    parser.add_argument("--steps", type=int, default=100, help="timed steps per measurement")
    parser.add_argument("--rounds", type=int, default=3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_step_args(parser, [256])
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda:N or auto")
    parser.add_argument("--fp32-step", choices=("auto", "eager"), default="auto",
                        help="the fp32 side's step: auto = a run's (explicit where it applies), eager = autograd's")
    args = parser.parse_args()
    args.device = tool_device(parser, args.device)
    from spreeze_like.cpu_math import set_learner_math

    set_learner_math(1)  # one thread, subnormals flushed: as the learners run
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}  load {load}  device {args.device}  native CPU bf16: "
          f"{cpu_has_native_bf16()}  {args.algo} {tuple(args.hidden_sizes)} obs {args.obs_dim} act {args.act_dim}  "
          f"fp32 step: {args.fp32_step}")
    for n in args.batch_sizes:
        batch = random_batch(n, args.obs_dim, args.act_dim, args.device)
        times: dict[tuple[str, str], list[float]] = {}
        parts = {}
        for precision in ("fp32", "bf16"):
            spec = AlgoSpec(algo=args.algo, obs_dim=args.obs_dim, act_dim=args.act_dim,
                            hidden_sizes=tuple(args.hidden_sizes), precision=precision)
            parts[precision] = {"critic": make_critic_part(spec, args.device), "actor": make_actor_part(spec, args.device)}
        for _ in range(args.rounds):
            for precision in ("fp32", "bf16"):
                for half, part in parts[precision].items():
                    explicit = args.fp32_step == "auto" and part.explicit_ok()  # never in bf16
                    step = part.explicit_step if explicit else part.step
                    times.setdefault((precision, half), []).append(time_steps(part, batch, args.steps, step))
        for half in ("critic", "actor"):
            fp32 = statistics.median(times[("fp32", half)])
            bf16 = statistics.median(times[("bf16", half)])
            print(f"batch {n:>5} {half:<6}  fp32 {fp32:7.2f} ms   bf16 {bf16:7.2f} ms   fp32/bf16 {fp32 / bf16:5.2f}x")
    print(f"# load after {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    run_tool(main)
