"""The numpy policy of samplers and the evaluator computes what the torch actor computes."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from spreeze_like.algos import make_policy
from spreeze_like.algos.networks import get_flat
from spreeze_like.algos.numpy_policy import NumpyPolicy
from spreeze_like.algos.spec import AlgoSpec


def trained_like(spec: AlgoSpec) -> tuple[torch.nn.Module, NumpyPolicy]:
    """A torch policy with non-trivial weights (log_std spread out) and a numpy policy loaded from its vector."""
    policy = make_policy(spec)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    numpy_policy = NumpyPolicy(spec)
    numpy_policy.load(get_flat([policy]))
    return policy, numpy_policy


@pytest.mark.parametrize("algo", ["sac", "td3", "ddpg"])
@pytest.mark.parametrize("hidden", [(64,), (256, 256), (32, 48, 16)])
def test_deterministic_action_matches_torch(algo: str, hidden: tuple[int, ...]) -> None:
    spec = AlgoSpec(algo=algo, obs_dim=5, act_dim=3, hidden_sizes=hidden, seed=3)
    policy, numpy_policy = trained_like(spec)
    obs = np.random.default_rng(0).normal(size=(7, 5)).astype(np.float32)
    with torch.no_grad():
        expected = policy.act_deterministic(torch.from_numpy(obs)).numpy()
    got = numpy_policy.act_deterministic(obs)
    assert got.dtype == np.float32 and got.shape == (7, 3)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    assert np.abs(expected).max() > 0.05  # the comparison is not between two near-zero outputs


@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_exploration_matches_torch_for_the_same_noise(algo: str) -> None:
    spec = AlgoSpec(algo=algo, obs_dim=4, act_dim=2, hidden_sizes=(32, 32), exploration_noise=0.3, seed=5)
    policy, numpy_policy = trained_like(spec)
    obs = np.random.default_rng(1).normal(size=(6, 4)).astype(np.float32)
    got = numpy_policy.explore(obs, np.random.default_rng(9), spec.exploration_noise)
    eps = torch.from_numpy(np.random.default_rng(9).standard_normal((6, 2), dtype=np.float32))  # the same draws
    with torch.no_grad():
        x = torch.from_numpy(obs)
        if algo == "sac":
            mean, log_std = policy(x)
            expected = torch.tanh(mean + log_std.exp() * eps)
        else:
            expected = (policy(x) + spec.exploration_noise * eps).clamp(-1.0, 1.0)
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-5, atol=1e-5)
    assert np.all(np.abs(got) <= 1.0)


def test_a_vector_of_the_wrong_size_is_refused() -> None:
    numpy_policy = NumpyPolicy(AlgoSpec(algo="sac", obs_dim=3, act_dim=1, hidden_sizes=(8,)))
    with pytest.raises(ValueError, match="actor vector has shape"):
        numpy_policy.load(np.zeros(numpy_policy.size + 1, dtype=np.float32))


def test_sampler_evaluator_and_monitor_modules_do_not_import_torch() -> None:
    """The point of the numpy policy (and of the event writer): only the learner processes import torch."""
    code = (
        "import sys\n"
        "from spreeze_like.procs import sampler_proc, evaluator_proc, monitor_proc\n"
        "from spreeze_like.roles import build\n"
        "from spreeze_like.roles.sampler import SamplerWorker\n"
        "from spreeze_like.roles.evaluator import Evaluator\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
