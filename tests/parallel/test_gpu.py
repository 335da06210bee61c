"""Parallel runs with learners on GPUs: skipped cleanly on a machine without CUDA."""

from __future__ import annotations

import pytest
import torch

from spreeze_like.checkpoint import load_latest

from .helpers import TINY_ARGS, assert_nothing_left, only_run_dir, run_cli

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


@pytest.mark.skipif(GPUS < 2, reason="needs two CUDA devices")
def test_two_gpus_put_actor_and_critic_on_different_devices(tmp_path):
    proc = run_cli(*TINY_ARGS, "--total-steps", "1000", "--logdir", str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "actor on cuda:0, critic on cuda:1" in proc.stdout
