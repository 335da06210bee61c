"""Per-update cost on the CPU: the autograd step against the explicit step (gradients written out by hand).

    python tools/bench_explicit_grad.py                                   # SAC, TD3, DDPG at four sizes
    python tools/bench_explicit_grad.py --algos sac --sizes 96x96@256     # one row
    python tools/bench_explicit_grad.py --algos crossq --sizes 256x256@256:17:6   # CrossQ, both phases
    python tools/bench_explicit_grad.py --json out.json

For each algorithm and size it builds two pairs of halves (critic, actor) from one seed, fp32, and times
``step`` (autograd, what ``--learner-step eager`` runs) against ``explicit_step`` (what ``auto`` runs on a
CPU now; algos/explicit_grad.py) in ``--rounds`` interleaved rounds, so a drift of the machine's load hits
both sides. Each step is the half's whole update: Q target, losses, gradients, fused Adam, target update.
The first step of the two sides, from the same state on the same batch, computes the same gradients to float
rounding: the largest relative difference (per tensor, against its largest entry) is printed beside the
times. (Not the parameters after several steps: Adam's normalised step turns the rounding noise of a gradient
that is zero in exact arithmetic into a whole step of ``lr``, e.g. CrossQ's bias before a batch norm through a
ReLU active on every row, and the two copies drift apart as any two runs would.)

CrossQ (algos/explicit_renorm.py) is timed twice: in its batch renormalisation's warm-up (plain batch norm,
its first 100,000 updates: the whole of a HalfCheetah-v5 run to 1500) and after it (``renorm``: the warm-up
set to 0, so ``r`` and ``d`` are computed from the first step).

One torch thread, as the learners run on a small machine. The load average is printed before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_precision import random_batch, time_steps

from spreeze_like.algos import make_actor_part, make_critic_part
from spreeze_like.algos.base import AlgoSpec
from spreeze_like.algos.crossq_critic import BatchRenorm
from spreeze_like.console import run_tool
from spreeze_like.write_guard import tool_output

# (hidden, batch, obs_dim, act_dim): RLtools' Pendulum sizes, our Pendulum preset, SB3's, HalfCheetah's
DEFAULT_SIZES = ("64x64@100:3:1", "96x96@256:3:1", "256x256@256:3:1", "256x256@256:17:6")


def parse_size(text: str) -> tuple[tuple[int, ...], int, int, int]:
    """``64x64@100`` (Pendulum's 3 obs and 1 action dims), or ``256x256@256:17:6`` (obs and action dims)."""
    layers, _, rest = text.partition("@")
    batch, *dims = rest.split(":")
    bad = argparse.ArgumentTypeError(f"{text!r} is not HIDDENxHIDDEN@BATCH[:OBS:ACT], e.g. 256x256@256:17:6")
    try:  # an argparse type: a size it cannot read is argparse's one error line, not a ValueError mid-measuring
        obs_dim, act_dim = (int(d) for d in dims) if dims else (3, 1)  # two dims, or none
        hidden, n = tuple(int(w) for w in layers.split("x")), int(batch)
    except ValueError:
        raise bad from None
    if min(*hidden, n, obs_dim, act_dim) < 1:
        raise bad
    return hidden, n, obs_dim, act_dim


def checked_size(text: str) -> str:
    """``--sizes``' argparse type: the text, once :func:`parse_size` reads it."""
    parse_size(text)
    return text


def largest_grad_difference(a, b) -> float:
    """The largest relative difference between the gradients the two halves' optimisers hold (0: bitwise equal)."""
    worst = 0.0
    for name, optimizer in a.optimizers.items():
        theirs = [p for group in b.optimizers[name].param_groups for p in group["params"]]
        ours = [p for group in optimizer.param_groups for p in group["params"]]
        for p, q in zip(ours, theirs):
            if p.grad is None and q.grad is None:
                continue
            worst = max(worst, ((p.grad - q.grad).abs().max() / p.grad.abs().max().clamp_min(1e-12)).item())
    return worst


def no_warmup(part) -> None:
    """Batch renormalisation from the first update (CrossQ's phase after its warm-up)."""
    for m in part.critic.modules():
        if isinstance(m, BatchRenorm):
            m.warmup = 0


def measure(algo: str, size: str, steps: int, rounds: int, phase: str = "") -> list[dict]:
    hidden, n, obs_dim, act_dim = parse_size(size)
    spec = AlgoSpec(algo=algo, obs_dim=obs_dim, act_dim=act_dim, hidden_sizes=hidden, precision="fp32",
                    policy_delay=2 if algo == "td3" else 1)
    batch = random_batch(n, obs_dim, act_dim, "cpu")
    rows = []
    # the actor reads its critic copy in eval mode, the same in both phases: timed once
    halves = [("critic", make_critic_part)] if phase == "renorm" else [("critic", make_critic_part),
                                                                       ("actor", make_actor_part)]
    for half, make in halves:
        autograd, explicit = make(spec, "cpu"), make(spec, "cpu")
        if phase == "renorm":
            no_warmup(autograd)
            no_warmup(explicit)
        autograd.step(batch)
        explicit.explicit_step(batch)
        difference = largest_grad_difference(autograd, explicit)
        for _ in range(4):  # warm-up: the optimiser's state, the allocator, the chains' views
            autograd.step(batch)
            explicit.explicit_step(batch)
        times: dict[str, list[float]] = {"autograd": [], "explicit": []}
        for _ in range(rounds):
            times["autograd"].append(time_steps(autograd, batch, steps, autograd.step))
            times["explicit"].append(time_steps(explicit, batch, steps, explicit.explicit_step))
        a_ms, e_ms = statistics.median(times["autograd"]), statistics.median(times["explicit"])
        rows.append({"algo": algo + (f"/{phase}" if phase else ""), "half": half, "hidden": list(hidden), "batch": n, "obs_dim": obs_dim,
                     "act_dim": act_dim, "autograd_ms": round(a_ms, 4), "explicit_ms": round(e_ms, 4),
                     "explicit_over_autograd": round(e_ms / a_ms, 3),
                     "max_rel_grad_diff": difference})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algos", nargs="+", default=["sac", "td3", "ddpg"], choices=["sac", "td3", "ddpg", "crossq"])
    parser.add_argument("--sizes", nargs="+", type=checked_size, default=list(DEFAULT_SIZES),
                        help="HIDDENxHIDDEN@BATCH[:OBS:ACT] (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=200, help="timed steps per round and side")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args()
    tool_output(parser, args.json)  # tried now, not after the measuring
    from spreeze_like.cpu_math import set_learner_math

    set_learner_math(1)  # one thread, subnormals flushed: as the learners run
    load_before = os.getloadavg()[0]
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}  load {load_before:.2f}  torch {torch.__version__}  one thread, fp32")
    print(f"{'algo':13} {'half':6} {'hidden':>9} {'batch':>5} {'obs/act':>7} {'autograd ms':>11} {'explicit ms':>11} "
          f"{'explicit/autograd':>17} {'grad diff':>10}")
    rows = []
    runs = [(algo, phase) for algo in args.algos for phase in (("", "renorm") if algo == "crossq" else ("",))]
    for algo, phase in runs:
        for size in args.sizes:
            for row in measure(algo, size, args.steps, args.rounds, phase):
                rows.append(row)
                print(f"{row['algo']:13} {row['half']:6} {'x'.join(map(str, row['hidden'])):>9} {row['batch']:>5} "
                      f"{row['obs_dim']:>3}/{row['act_dim']:<3} {row['autograd_ms']:>11.3f} {row['explicit_ms']:>11.3f} "
                      f"{row['explicit_over_autograd']:>17.2f} {row['max_rel_grad_diff']:>10.1e}", flush=True)
    load_after = os.getloadavg()[0]
    print(f"# load {load_before:.2f} before, {load_after:.2f} after")
    if args.json:
        args.json.write_text(json.dumps({"load": [load_before, load_after], "rows": rows}, indent=1))


if __name__ == "__main__":
    run_tool(main)
