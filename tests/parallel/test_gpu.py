"""Parallel runs with learners on GPUs: skipped cleanly on a machine without CUDA."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest
import torch

from spreeze_like.checkpoint import load_latest

from .helpers import (
    TINY_ARGS,
    assert_nothing_left,
    only_run_dir,
    run_cli,
    run_segments,
    start_long_run,
    survivors,
    wait_status,
)

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0

pytestmark = pytest.mark.gpu


@pytest.mark.skipif(GPUS < 1, reason="needs a CUDA device")
@pytest.mark.parametrize("actor, critic", [("cpu", "cuda:0"), ("cuda:0", "cuda:0"), ("auto", "auto")])
def test_parallel_run_with_learners_on_the_gpu(tmp_path, actor, critic):
    proc = run_cli(*TINY_ARGS, "--total-steps", "1500", "--actor-device", actor, "--critic-device", critic,
                   "--batch-size", "1024", "--logdir", str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    want_actor = "cuda:0" if actor == "auto" else actor
    want_critic = ("cuda:1" if GPUS >= 2 else "cuda:0") if critic == "auto" else critic
    assert f"actor on {want_actor}, critic on {want_critic}" in proc.stdout
    run_dir = only_run_dir(tmp_path)
    payload, _ = load_latest(run_dir)  # parts were moved to the CPU: loadable without CUDA state
    assert payload["critic_updates"] == 1500 - 1023
    assert all(t.device.type == "cpu" for t in payload["roles"]["critic-learner"]["part"]["modules"]["critic"].values())
    assert_nothing_left(run_dir)


@pytest.mark.skipif(GPUS < 1, reason="needs a CUDA device")
def test_blocks_of_updates_per_graph_in_a_real_run(tmp_path):
    """--updates-per-graph 4 with both learners on the GPU: the block graphs run in the learner processes,
    the pacing and the final flush keep the update counts exact (UTD 1), and nothing outlives the run."""
    proc = run_cli(*TINY_ARGS, "--total-steps", "1500", "--actor-device", "cuda:0", "--critic-device", "cuda:0",
                   "--updates-per-graph", "4", "--logdir", str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = only_run_dir(tmp_path)
    payload, _ = load_latest(run_dir)
    assert payload["critic_updates"] == 1500 - 299 and payload["actor_updates"] == 1500 - 299
    assert_nothing_left(run_dir)


@pytest.mark.skipif(GPUS < 2, reason="needs two CUDA devices")
def test_two_gpus_put_actor_and_critic_on_different_devices(tmp_path):
    proc = run_cli(*TINY_ARGS, "--total-steps", "1000", "--logdir", str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "actor on cuda:0, critic on cuda:1" in proc.stdout


@pytest.mark.skipif(GPUS < 1, reason="needs a CUDA device")
@pytest.mark.parametrize("algo", ["sac", "crossq"])
def test_compiled_graph_learners_run_and_leave_nothing(tmp_path, algo):
    """--learner-step compiled-graph in a real run: both learners compile their steps (inductor starts
    compile workers in the learner processes), train, checkpoint, and nothing outlives the run."""
    proc = run_cli(*TINY_ARGS, "--algo", algo, "--total-steps", "1200", "--actor-device", "cuda:0",
                   "--critic-device", "cuda:0", "--learner-step", "compiled-graph", "--logdir", str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    payload, _ = load_latest(only_run_dir(tmp_path))
    assert payload["critic_updates"] > 0
    assert_nothing_left(only_run_dir(tmp_path))


@pytest.mark.skipif(GPUS < 1, reason="needs a CUDA device")
def test_gpu_checkpoint_resumes_on_the_cpu_and_back(tmp_path):
    """A run with both learners on the GPU (CUDA graphs, device mirror) is stopped, resumed on the CPU,
    stopped again and resumed on the GPU: counts continue, and every part loads on either device."""
    logdir = tmp_path / "runs"
    first = run_cli(*TINY_ARGS, "--total-steps", "900", "--actor-device", "cuda:0", "--critic-device", "cuda:0",
                    "--logdir", str(logdir))
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    run_dir = only_run_dir(logdir)
    payload, _ = load_latest(run_dir)
    assert payload["critic_updates"] == 900 - 299
    on_cpu = run_cli("--resume", str(run_dir), "--total-steps", "1600", "--actor-device", "cpu", "--critic-device",
                     "cpu")
    assert on_cpu.returncode == 0, on_cpu.stdout[-3000:] + on_cpu.stderr[-3000:]
    assert "actor on cpu, critic on cpu" in on_cpu.stdout
    payload, _ = load_latest(run_dir)
    # a resumed run refills an empty replay: it learns again after learning_starts (as test_parallel_run checks)
    assert payload["critic_updates"] == 900 - 299 + 700 - 299
    back = run_cli("--resume", str(run_dir), "--total-steps", "2300", "--actor-device", "cuda:0", "--critic-device",
                   "cuda:0")
    assert back.returncode == 0, back.stdout[-3000:] + back.stderr[-3000:]
    payload, _ = load_latest(run_dir)
    assert payload["critic_updates"] == 900 - 299 + 2 * (700 - 299)
    assert_nothing_left(run_dir)


@pytest.mark.skipif(GPUS < 1, reason="needs a CUDA device")
def test_sigkilled_gpu_run_leaves_no_process_segment_or_cuda_context(tmp_path):
    """kill -9 of the supervisor of a GPU run: the learners (holding CUDA contexts, pinned buffers and
    captured graphs) die with it, and the next start sweeps the segments."""
    logdir, log = tmp_path / "runs", tmp_path / "killed.log"
    proc, run_dir = start_long_run(logdir, log, "--actor-device", "cuda:0", "--critic-device", "cuda:0")
    # every role started (on the H100 two roles had no pid yet at 350 env steps; a None pid made the
    # survivor check look at the test process itself)
    status = wait_status(run_dir, lambda s: all(r.get("pid") for r in s["roles"].values()), timeout=120, proc=proc,
                         log=log)
    children = [r["pid"] for r in status["roles"].values()]
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert not survivors(children, 15.0), "children outlived the SIGKILLed supervisor by 15 s"
    # no process of ours holds the GPU any more (nvidia-smi lists compute processes by pid). The driver
    # drops a dead process's context a little after the process is gone: on the H100 nvidia-smi still
    # listed two learners once the survivor check had passed, so it gets a grace period too.
    deadline = time.monotonic() + 15.0
    while True:
        smi = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                             capture_output=True, text=True, check=False)
        held = {int(p) for p in smi.stdout.split() if p.strip().isdigit()} & set(children)
        if not held or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    assert not held, f"GPU still held by {held} 15 s after the survivor check"
    nxt = run_cli(*TINY_ARGS, "--total-steps", "400", "--logdir", str(tmp_path / "next"))
    assert nxt.returncode == 0, nxt.stdout[-3000:] + nxt.stderr[-3000:]
    assert not run_segments(run_dir)
