"""With a CUDA device: the profile shows its update rates and the plan puts the learners on it.

Skipped cleanly on machines without CUDA (the development machine has none; see the synthetic 1-
and 2-GPU fixtures in test_plan.py for the planning rules).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from spreeze_like.autotune.plan import make_plan
from spreeze_like.autotune.replay_ratio import in_band
from spreeze_like.autotune.results import ProbeResults
from spreeze_like.config import TrainConfig

from .helpers import run_module

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device; this machine has none"),
]


def test_profile_measures_the_gpu_and_the_plan_uses_it(tmp_path):
    proc = run_module("spreeze_like.profile", "--budget", "20", "--devices", "cpu", "cuda:0",
                      "--logdir", str(tmp_path / "runs"), xdg=tmp_path / "xdg", timeout=400)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "GPU       cuda:0" in proc.stdout and "cuda:0, 1 torch thread(s)" in proc.stdout
    (out_dir,) = (tmp_path / "runs").glob("profile__*")
    results = ProbeResults.load(out_dir / "profile.json")
    gpu_curve = results.curve("cuda:0")
    assert gpu_curve.points and all(p.critic.value > 0 and p.peak_memory > 0 for p in gpu_curve.points)
    plan = make_plan(results, TrainConfig(), (), parallel_available=True)
    assert plan.value("critic_device") == "cuda:0" and plan.value("actor_device") == "cuda:0"
    point = gpu_curve.point(plan.value("batch_size"))
    assert point is not None and point.peak_memory <= 0.8 * results.hardware.gpus[0].total_memory
    # a run bounded by wall time: the replay-ratio rule, from this machine's measured sampler curve
    assert results.env.parallel, results.env.parallel_note
    long = make_plan(results, dataclasses.replace(TrainConfig(), total_steps=10_000_000), (), parallel_available=True)
    assert long.value("critic_device") == "cuda:0"
    assert in_band(long.value("batch_size") * long.value("utd"))
    assert long.predicted["sample_hz"] <= long.predicted["sampler_capacity_hz"] * 1.001
