"""Per-update cost on the CPU: today's eager step against ``torch.compile`` (inductor) of the same step.

    python tools/bench_cpu_compile.py                                  # SAC, Pendulum sizes, batch 256 and 1024
    python tools/bench_cpu_compile.py --obs-dim 17 --act-dim 6         # HalfCheetah sizes
    python tools/bench_cpu_compile.py --algo crossq --json out.json

Issue 18 asks whether compiling the critic and actor steps pays on this machine, with the compile
time counted in the run's wall time. For each batch size and half (critic, actor) it builds two
fresh parts with the same seed, one stepped eagerly as the learners do today (each step in its own
autocast region: bf16 where the CPU has native bf16), the other through ``torch.compile(part.step)``
in the same autocast region. It reports:

* ``compile_s``: the first compiled call (tracing, inductor's C++ build), which a run would pay once
  per learner process (the two learners compile in parallel, each its own half);
* the median milliseconds per step over ``--rounds`` interleaved rounds (a drift of the machine's
  load hits both);
* ``break_even_updates``: updates after which the compiled step has paid for its compile time
  (``compile_s / (eager_ms - compiled_ms)``), or none when it is not faster.

One torch thread, as the learners run on a small machine. Whether to adopt it is decided from
these figures (BENCHMARKS.md), not assumed: a Pendulum run does about 4,000 updates per half.
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
from bench_precision import add_step_args, random_batch, time_steps

from spreeze_like.algos import make_actor_part, make_critic_part
from spreeze_like.algos.base import AlgoSpec
from spreeze_like.console import run_tool
from spreeze_like.devices import cpu_has_native_bf16
from spreeze_like.write_guard import tool_output


class CompiledStep:
    """Wraps a part so that ``time_steps`` calls the compiled ``step`` (autocast stays outside, as in a learner)."""

    def __init__(self, part, mode: str | None) -> None:
        self.part, self.device = part, part.device
        # Our fused Adam (algos/optim.py) calls torch._fused_adam_ on lazily created state, which
        # inductor's functionalization refuses; the optimiser step stays eager (it is one fused
        # kernel per group already) and the losses' forward and backward are compiled.
        for optimizer in part.optimizers.values():
            optimizer.step = torch._dynamo.disable(optimizer.step)
        self.compiled = torch.compile(part.step, mode=mode)

    def autocast(self):
        return self.part.autocast()

    def step(self, batch):
        return self.compiled(batch)


def first_call_s(part, batch) -> float:
    t0 = time.perf_counter()
    with part.autocast():
        part.step(batch)
    return time.perf_counter() - t0


def measure(args: argparse.Namespace, precision: str, n: int) -> list[dict]:
    spec = AlgoSpec(algo=args.algo, obs_dim=args.obs_dim, act_dim=args.act_dim,
                    hidden_sizes=tuple(args.hidden_sizes), precision=precision)
    batch = random_batch(n, args.obs_dim, args.act_dim, "cpu")
    rows = []
    for half, make in (("critic", make_critic_part), ("actor", make_actor_part)):
        eager = make(spec, "cpu")
        compiled = CompiledStep(make(spec, "cpu"), args.mode)
        compile_s = first_call_s(compiled, batch)
        times: dict[str, list[float]] = {"eager": [], "compiled": []}
        for _ in range(args.rounds):
            times["eager"].append(time_steps(eager, batch, args.steps))
            times["compiled"].append(time_steps(compiled, batch, args.steps))
        eager_ms, compiled_ms = statistics.median(times["eager"]), statistics.median(times["compiled"])
        gain_ms = eager_ms - compiled_ms
        rows.append({"batch": n, "half": half, "precision": precision, "eager_ms": eager_ms,
                     "compiled_ms": compiled_ms, "compile_s": compile_s,
                     "break_even_updates": (1e3 * compile_s / gain_ms) if gain_ms > 0 else None})
        be = rows[-1]["break_even_updates"]
        print(f"batch {n:>5} {half:<6} {precision}  eager {eager_ms:7.2f} ms   compiled {compiled_ms:7.2f} ms   "
              f"eager/compiled {eager_ms / compiled_ms:5.2f}x   compile {compile_s:6.1f} s   "
              f"break-even {'never' if be is None else f'{be:,.0f} updates'}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_step_args(parser, [256, 1024])
    parser.add_argument("--precision", nargs="+", default=None,
                        help="fp32 and/or bf16 (default: what a run uses here: bf16 with native CPU bf16, else fp32)")
    parser.add_argument("--mode", default=None, help="torch.compile mode (default: inductor's default)")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args()
    tool_output(parser, args.json)  # tried now, not after the measuring
    torch.set_num_threads(1)
    precisions = args.precision or (["bf16"] if cpu_has_native_bf16() else ["fp32"])
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}  load {load}  torch {torch.__version__}  native CPU bf16: "
          f"{cpu_has_native_bf16()}  {args.algo} {tuple(args.hidden_sizes)} obs {args.obs_dim} act {args.act_dim}")
    rows = [r for n in args.batch_sizes for p in precisions for r in measure(args, p, n)]
    print(f"# load after {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json is not None:
        args.json.write_text(json.dumps({"load": load, "rows": rows}, indent=2))


if __name__ == "__main__":
    run_tool(main)
