"""Learner step time and kernel count with the stacked twin critic against separate Q networks.

    python tools/bench_critic_layout.py --obs-dim 17 --act-dim 6 --batch-sizes 256 1024   # HalfCheetah sizes
    python tools/bench_critic_layout.py --algo td3 --obs-dim 17 --act-dim 6
    python tools/bench_critic_layout.py --algo crossq --obs-dim 17 --act-dim 6

Since 2026-11-27 a plain critic (SAC, TD3, DDPG) keeps its Q networks stacked layer by layer
(``algos/networks.Critic``), and CrossQ's critic too (``algos/crossq_critic.CrossQCritic``, features
first): on a GPU each layer is one batched matmul for all networks, on the CPU each network runs on its
own slices. This compares that with the layout before it, ``n_q`` separate networks
(:class:`SeparateCritic`, :class:`SeparateCrossQCritic`: the same function and the same initial
weights), in one process:

* **kernel ops** of one critic step and one actor step, counted under a dispatch mode (views and
  metadata ops excluded), for the separate networks and the stacked critic, each on its CPU path and
  its GPU path (``StackedQ.batched_on_cpu``; for CrossQ the GPU path knows the batch renorm's warm-up
  from the host's update count, the graph variant a GPU captures, where the CPU reads the layers' own
  count). On a GPU at batch 256 each op is a kernel of a few microseconds in the captured update, so
  the GPU path's count is what the stacking buys there. The steps counted fall in CrossQ's warm-up.
* **time per step** on ``--device`` (eager, one torch thread on the CPU), separate vs stacked,
  interleaved over ``--rounds`` rounds so that a drift of the machine's load hits both; the ratio is
  the median over rounds of stacked / separate (below 1: the stacked critic is faster).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from collections import Counter
from collections.abc import Iterator, Sequence

import torch
from bench_precision import add_step_args, random_batch, time_steps  # tools/ is the script's folder: on sys.path
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import spreeze_like.algos.base as algos_base
from spreeze_like.algos import make_actor_part, make_critic_part
from spreeze_like.algos.base import AlgoSpec, Batch
from spreeze_like.algos.crossq_critic import BatchRenorm, commit_statistics
from spreeze_like.algos.networks import FP32Linear, StackedQ, mlp
from spreeze_like.console import run_tool
from spreeze_like.devices import tool_device

VIEW_OPS = frozenset({"t", "detach", "view", "unsqueeze", "squeeze", "expand", "unbind", "select", "_unsafe_view",
                      "transpose", "permute", "alias", "as_strided", "slice", "split", "_reshape_alias", "reshape",
                      # a Python scalar operand (torch.where(c, x, 1.0)) wrapped as a 0-dim tensor: on a GPU a CPU
                      # tensor passed to the kernel as an argument, not a launch of its own
                      "scalar_tensor"})


class SeparateCritic(nn.Module):
    """The critic before the stacking: ``n_q`` independent MLPs, each run on its own."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: Sequence[int], n_q: int = 2) -> None:
        super().__init__()
        self.qs = nn.ModuleList(mlp(obs_dim + act_dim, hidden, 1) for _ in range(n_q))

    def forward(self, obs: torch.Tensor, action: torch.Tensor, members: int | None = None) -> torch.Tensor:
        x = torch.cat([obs, action], dim=-1)
        # every network ran, as before (TD3: Q2 too); one [n_q, B] tensor, as the critics return now
        return torch.stack([q(x).squeeze(-1) for q in self.qs])[:members]


class SeparateCrossQCritic(StackedQ):  # StackedQ: only for ``batched``, which CrossQ's step asks
    """CrossQ's critic before the stacking (checkpoint formats 1 and 2): per network an ``nn.Sequential``
    ``BRN -> [Linear -> ReLU -> BRN] x len(hidden) -> Linear`` over ``[B, features]`` rows."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: Sequence[int], n_q: int = 2) -> None:
        super().__init__()
        self.qs = nn.ModuleList(self._q(obs_dim + act_dim, hidden) for _ in range(n_q))

    @staticmethod
    def _q(in_dim: int, hidden: Sequence[int]) -> nn.Sequential:
        layers: list[nn.Module] = [BatchRenorm(in_dim)]
        for width in hidden:
            layers += [nn.Linear(in_dim, width), nn.ReLU(), BatchRenorm(width)]
            in_dim = width
        layers.append(FP32Linear(in_dim, 1))
        return nn.Sequential(*layers)

    @property
    def warmup(self) -> int:
        return self.qs[0][0].warmup

    def forward(self, obs: torch.Tensor, action: torch.Tensor, warming_up: bool | None = None) -> torch.Tensor:
        if self.batched(obs.device):
            warming_up = bool(warming_up)  # as the stacked critic's GPU path takes it
        out = []
        for q in self.qs:
            x = torch.cat([obs, action], dim=-1)
            for layer in q:
                x = layer(x, warming_up) if isinstance(layer, BatchRenorm) else layer(x)
            out.append(x.squeeze(-1))
        return torch.stack(out)

    def commit_statistics(self, keep: torch.Tensor | None = None) -> None:
        commit_statistics(self, keep)


class KernelOps(TorchDispatchMode):
    """Counts the ops that launch a kernel (views and metadata ops excluded)."""

    def __init__(self) -> None:
        super().__init__()
        self.count: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ not in VIEW_OPS:
            self.count[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def separate_critic_classes() -> Iterator[None]:
    """Parts built inside get :class:`SeparateCritic` for their plain critics (``build_critic`` reads
    ``algos.base.critic_class``); also used by ``gpu_rates.make_critic``."""
    original = algos_base.critic_class
    algos_base.critic_class = lambda algo: SeparateCrossQCritic if algo == "crossq" else SeparateCritic
    try:
        yield
    finally:
        algos_base.critic_class = original


def build_parts(spec: AlgoSpec, device: str, separate: bool) -> dict:
    """Both halves with the separate networks or the stacked critic."""
    with separate_critic_classes() if separate else contextlib.nullcontext():
        return {"critic": make_critic_part(spec, device), "actor": make_actor_part(spec, device)}


def kernel_ops(parts: dict, batch: Batch, batched: bool) -> dict[str, int]:
    """Ops of one steady-state step of each half (after two steps: the optimiser state exists)."""
    before = StackedQ.batched_on_cpu
    StackedQ.batched_on_cpu = batched
    try:
        out = {}
        for half, part in parts.items():
            for _ in range(2):
                part.step(batch)
            with KernelOps() as mode:
                part.step(batch)
            out[half] = sum(mode.count.values())
        return out
    finally:
        StackedQ.batched_on_cpu = before


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_step_args(parser, [256])
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda:N or auto")
    args = parser.parse_args(argv)
    args.device = tool_device(parser, args.device)
    torch.set_num_threads(1)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}  load {load}  device {args.device}  {args.algo} "
          f"{tuple(args.hidden_sizes)} obs {args.obs_dim} act {args.act_dim}  torch {torch.__version__}")
    spec = AlgoSpec(algo=args.algo, obs_dim=args.obs_dim, act_dim=args.act_dim, hidden_sizes=tuple(args.hidden_sizes),
                    policy_delay=1)
    cpu_batch = random_batch(256, args.obs_dim, args.act_dim, "cpu")
    for path, batched in (("CPU", False), ("GPU", True)):
        for layout, separate in (("separate", True), ("stacked", False)):
            counts = kernel_ops(build_parts(spec, "cpu", separate), cpu_batch, batched)
            print(f"kernel ops per step  {layout + ', ' + path + ' path':<18} critic {counts['critic']:>4}   "
                  f"actor {counts['actor']:>4}")
    for n in args.batch_sizes:
        batch = random_batch(n, args.obs_dim, args.act_dim, args.device)
        layouts = {"separate": build_parts(spec, args.device, True), "stacked": build_parts(spec, args.device, False)}
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.rounds):
            for layout, parts in layouts.items():
                for half, part in parts.items():
                    times.setdefault((layout, half), []).append(time_steps(part, batch, args.steps))
        for half in ("critic", "actor"):
            separate, stacked = times[("separate", half)], times[("stacked", half)]
            ratio = statistics.median(s / o for s, o in zip(stacked, separate))
            print(f"batch {n:>5} {half:<6}  separate {statistics.median(separate):7.2f} ms   stacked "
                  f"{statistics.median(stacked):7.2f} ms   stacked/separate {ratio:5.3f}")
    print(f"# load after {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    run_tool(main)
