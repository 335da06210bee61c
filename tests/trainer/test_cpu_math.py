"""``cpu_math.set_learner_math``: learners flush subnormal floats to zero, unless the benchmark knob turns it off."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from spreeze_like.cpu_math import FLUSH_ENV

pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                                reason="torch.set_flush_denormal works on x86 (SSE3) only")

# 1e-39 is subnormal in float32 (below 1.18e-38): with flushing on, the CPU reads it as 0 (DAZ) and writes
# subnormal results as 0 (FTZ); with it off, it stays 1e-39
PROBE = ("import torch; from spreeze_like.cpu_math import set_learner_math; on = set_learner_math(1); "
         "x = torch.tensor([1e-39], dtype=torch.float32); print(on, (x * 1.0).item(), torch.get_num_threads())")


def _probe(flush: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != FLUSH_ENV}
    if flush is not None:
        env[FLUSH_ENV] = flush
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=120, check=True)
    return out.stdout.split()


def test_a_learner_flushes_subnormals_by_default():
    on, value, threads = _probe(None)
    assert (on, float(value), threads) == ("True", 0.0, "1")


def test_the_benchmark_knob_turns_flushing_off():
    on, value, _ = _probe("0")
    assert on == "False" and float(value) == pytest.approx(1e-39, rel=1e-3)


def test_a_serial_run_flushes_while_it_trains_and_gives_the_callers_thread_back(tmp_path):
    # the time limit's line is printed from inside the training loop: flushing is read there, and after the run
    code = ("import torch, spreeze_like; from spreeze_like.cpu_math import flushing_now; seen = []; "
            "spreeze_like.train(serial=True, total_steps=10**6, time_limit_s=3.0, learning_starts=200, batch_size=32, "
            f"hidden_sizes=(16, 16), eval_episodes=1, log_interval=0, logdir={str(tmp_path)!r}, "
            "print_fn=lambda line: seen.append(flushing_now()) if 'time-limit' in line else None); "
            "print(seen, flushing_now())")
    env = {k: v for k, v in os.environ.items() if k != FLUSH_ENV}
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[-2] == "[True] False", out.stdout[-500:]


def _threads_probe(code: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k not in (FLUSH_ENV, "OMP_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", "import torch; from spreeze_like import cpu_math; " + code],
                         capture_output=True, text=True, env=env, timeout=120, check=True)
    return out.stdout.split()


def test_a_learner_flushes_in_every_torch_thread_when_it_sets_up_first():
    # as a learner process: set_learner_math before any torch op, so the pool's threads start flushing
    assert _threads_probe("cpu_math.set_learner_math(4); print(cpu_math.flushing_threads())") == ["4"]


def test_the_thread_count_sees_a_pool_started_before_flushing():
    # what the measure is for: threads created before the flush keep subnormals (a thread starts with its
    # creator's flags), and the count says so instead of assuming the learner's case above
    code = ("torch.set_num_threads(4); torch.ones(1 << 20).add_(1.0); cpu_math.set_learner_math(4); "
            "print(cpu_math.flushing_threads())")
    assert _threads_probe(code) == ["1"]


def test_no_torch_thread_flushes_with_the_knob_off():
    env_code = "import os; os.environ['SPREEZE_FLUSH_DENORMAL'] = '0'; "
    assert _threads_probe(env_code + "cpu_math.set_learner_math(4); print(cpu_math.flushing_threads())") == ["0"]


def test_a_flushed_block_leaves_no_thread_of_the_caller_flushing():
    # the block starts the pool first, so the threads it creates do not inherit its flags and keep them after
    code = ("torch.set_num_threads(4)\n"
            "with cpu_math.flushed_subnormals():\n"
            "    inside = cpu_math.flushing_threads()\n"
            "print(inside, cpu_math.flushing_threads(), cpu_math.flushing_now())")
    assert _threads_probe(code) == ["1", "0", "False"]
