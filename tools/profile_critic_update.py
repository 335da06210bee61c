"""Where one ``CriticLearner.update()`` spends its time: torch.profiler over N updates, top ops by host time.

    python tools/profile_critic_update.py --device cuda:0 --batch 256 --step-mode compiled-graph
    python tools/profile_critic_update.py --device cpu --batch 256 --updates 50

The learner is the one tools/gpu_rates.py times (HalfCheetah sizes, SAC 256x256, synthetic replay,
the device mirror on a GPU). Prints the wall time per update without the profiler, then the
profiler's table: host-side ops (the Python launches, the batch draw, the publish) and the device
kernels, so the gap between "the step alone" and "the whole update" in bench_gpu.py has names.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from spreeze_like.console import run_tool

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto", help="auto (cuda:0 when CUDA is available, else cpu), cuda:N or cpu")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--step-mode", default="auto", help="auto, eager, cuda-graph or compiled-graph")
    parser.add_argument("--updates", type=int, default=200, help="profiled updates (after 30 warm-up ones)")
    parser.add_argument("--rows", type=int, default=100_000, help="synthetic replay rows")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--device-replay", default="auto", choices=["auto", "on", "off"],
                        help="the learner's device mirror (on also works on the CPU, as a GPU runs it)")
    parser.add_argument("--sync-period", type=int, default=1, help="--weight-sync-period of the learner")
    parser.add_argument("--host-only", action="store_true",
                        help="stub the step out (each update returns the last TD errors): what is timed is the "
                             "host's own work per update (mirror sync, counters, stats, weight polls and transfers)")
    args = parser.parse_args(argv)
    from spreeze_like.devices import tool_device

    args.device = tool_device(parser, args.device)
    from gpu_rates import _sync, make_critic, random_storage
    from torch.profiler import ProfilerActivity, profile

    from spreeze_like.cpu_math import set_learner_math

    set_learner_math(1)  # one thread, subnormals flushed: as the learners run
    critic = make_critic(args.device, args.batch, random_storage(args.rows), step_mode=args.step_mode,
                         device_replay=args.device_replay, sync_period=args.sync_period)
    for _ in range(30):
        critic.update()
    if args.host_only:
        last = critic.runner.run()
        critic.runner.run = lambda batch=None: last
    _sync(args.device)
    t0 = time.perf_counter()
    for _ in range(args.updates):
        critic.update()
    _sync(args.device)
    per_update = (time.perf_counter() - t0) / args.updates
    what = "host only (step stubbed)" if args.host_only else critic.runner.mode
    print(f"{args.device} batch {args.batch} {what}, {type(critic.batches).__name__}, weight sync every "
          f"{args.sync_period}: {per_update * 1e6:.1f} us per update "
          f"({1 / per_update:,.0f} updates/s) without the profiler")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device.startswith("cuda") else [])
    with profile(activities=activities) as prof:
        for _ in range(args.updates):
            critic.update()
        _sync(args.device)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top, max_name_column_width=60))
    if args.device.startswith("cuda"):
        print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=args.top,
                                        max_name_column_width=60))
    critic.flush()


if __name__ == "__main__":
    run_tool(main)
