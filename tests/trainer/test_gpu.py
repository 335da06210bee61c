"""GPU placement of the learners (skipped cleanly without CUDA; the choice logic itself is tested in
test_config.py with a mocked GPU count)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from spreeze_like.config import TrainConfig
from spreeze_like.training import train

from .test_serial import TINY

pytestmark = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
needs_two = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")


def run(tmp_path, **changes):
    config = dataclasses.replace(TrainConfig(), logdir=str(tmp_path), **{**TINY, **changes})
    return train(config, print_fn=lambda line: None)


@needs_cuda
@pytest.mark.parametrize("algo", ["sac", "td3", "ddpg"])
def test_both_learners_on_one_gpu(tmp_path, algo):
    result = run(tmp_path, algo=algo, actor_device="cuda:0", critic_device="cuda:0")
    assert np.isfinite(result.final_eval_return) and result.critic_updates == 401


@needs_cuda
def test_actor_on_cpu_critic_on_gpu(tmp_path):
    result = run(tmp_path, actor_device="cpu", critic_device="cuda:0", prioritized=True)
    assert np.isfinite(result.final_eval_return) and result.actor_updates == 401


@needs_cuda
def test_auto_puts_learners_on_gpus():
    config = TrainConfig().resolve()
    expected = ("cuda:0", "cuda:1") if torch.cuda.device_count() >= 2 else ("cuda:0", "cuda:0")
    assert (config.actor_device, config.critic_device) == expected


@needs_two
def test_two_gpu_run(tmp_path):
    result = run(tmp_path, actor_device="cuda:0", critic_device="cuda:1")
    assert np.isfinite(result.final_eval_return)
