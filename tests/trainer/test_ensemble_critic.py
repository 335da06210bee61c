"""The stacked critic (algos/networks.Critic, EnsembleLinear): the same networks as separate MLPs, on
both of its paths (batched layers on a GPU, one network at a time on the CPU), and fewer kernels."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from spreeze_like.algos import make_actor_part, make_critic_part
from spreeze_like.algos.base import AlgoSpec, Batch
from spreeze_like.algos.crossq_critic import CrossQCritic
from spreeze_like.algos.networks import Critic, StackedQ

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from bench_critic_layout import KernelOps, SeparateCritic  # the benchmark's count: one definition of "a kernel op"

OBS, ACT, HIDDEN = 5, 3, (16, 16)


def separate_mlps(n_q: int, seed: int) -> list[nn.Sequential]:
    """What the critic was before it was stacked: ``n_q`` MLPs built one after the other."""
    torch.manual_seed(seed)
    return list(SeparateCritic(OBS, ACT, HIDDEN, n_q).qs)


def stacked(n_q: int, seed: int, batched: bool) -> Critic:
    torch.manual_seed(seed)
    critic = Critic(OBS, ACT, HIDDEN, n_q)
    critic.batched_on_cpu = batched
    return critic


def inputs(n: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    return torch.randn(n, OBS, generator=g), torch.rand(n, ACT, generator=g) * 2 - 1


@pytest.mark.parametrize("n_q", [1, 2, 3])
def test_initial_weights_are_those_of_separate_networks_built_in_turn(n_q):
    reference = separate_mlps(n_q, seed=11)
    critic = stacked(n_q, seed=11, batched=False)
    for k, layer in enumerate(critic.layers):
        for q, net in enumerate(reference):
            linear = [m for m in net if isinstance(m, nn.Linear)][k]
            torch.testing.assert_close(layer.weight[q], linear.weight.t(), rtol=0, atol=0)
            torch.testing.assert_close(layer.bias[q, 0], linear.bias, rtol=0, atol=0)


@pytest.mark.parametrize("batched", [False, True], ids=["one-by-one", "batched"])
@pytest.mark.parametrize("n_q", [1, 2])
def test_q_values_and_gradients_match_separate_networks(n_q, batched):
    reference = separate_mlps(n_q, seed=3)
    critic = stacked(n_q, seed=3, batched=batched)
    obs, action = inputs()
    action_ref = action.clone().requires_grad_(True)
    action_new = action.clone().requires_grad_(True)
    expected = [net(torch.cat([obs, action_ref], -1)).squeeze(-1) for net in reference]
    got = critic(obs, action_new)
    assert len(got) == n_q and all(q.shape == (64,) for q in got)
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)
    # a loss weighting the networks differently: every network's own gradient, and the action's
    sum((i + 1) * (q**2).mean() for i, q in enumerate(expected)).backward()
    sum((i + 1) * (q**2).mean() for i, q in enumerate(got)).backward()
    torch.testing.assert_close(action_new.grad, action_ref.grad, rtol=1e-4, atol=1e-6)
    for k, layer in enumerate(critic.layers):
        for q, net in enumerate(reference):
            linear = [m for m in net if isinstance(m, nn.Linear)][k]
            torch.testing.assert_close(layer.weight.grad[q], linear.weight.grad.t(), rtol=1e-4, atol=1e-6)
            torch.testing.assert_close(layer.bias.grad[q, 0], linear.bias.grad, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("batched", [False, True], ids=["one-by-one", "batched"])
def test_members_computes_the_first_networks_only(batched):
    critic = stacked(2, seed=5, batched=batched)
    obs, action = inputs()
    both = critic(obs, action)
    (first,) = critic(obs, action, members=1)
    torch.testing.assert_close(first, both[0], rtol=1e-6, atol=1e-6)
    # Q1's loss leaves Q2's slices without a gradient of any size but zero
    action = action.clone().requires_grad_(True)
    critic(obs, action, members=1)[0].mean().backward()
    assert all(float(layer.weight.grad[1].abs().max()) == 0.0 for layer in critic.layers)
    assert all(float(layer.weight.grad[0].abs().max()) > 0.0 for layer in critic.layers)


def test_the_fp32_head_keeps_float32_in_a_bf16_region_on_both_paths():
    obs, action = inputs()
    for batched in (False, True):
        critic = stacked(2, seed=1, batched=batched)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert all(q.dtype == torch.float32 for q in critic(obs, action))
            assert critic.layers[0](torch.cat([obs, action], -1)).dtype == torch.bfloat16


def separate_critic_step_matmuls(spec: AlgoSpec, b: Batch) -> int:
    """Matmul-family ops of a twin-Q critic forward + backward written as separate MLPs."""
    nets = separate_mlps(spec.n_q, seed=0)
    with KernelOps() as mode:
        qs = [net(torch.cat([b.obs, b.action], -1)).squeeze(-1) for net in nets]
        sum(F.mse_loss(q, b.reward) for q in qs).backward()
    return sum(mode.count[n] for n in ("addmm", "mm", "bmm", "baddbmm"))


def test_the_batched_path_halves_a_twin_critics_matmuls_and_cuts_the_sac_steps_kernels(monkeypatch):
    """Why the stacking exists: on a GPU at batch 256 the update's rate is set by its kernel count.
    Counted on the CPU with the GPU's path; the same ops are the kernels a CUDA graph replays."""
    spec = AlgoSpec(algo="sac", obs_dim=OBS, act_dim=ACT, hidden_sizes=HIDDEN)
    g = torch.Generator().manual_seed(0)
    b = Batch(torch.randn(32, OBS, generator=g), torch.rand(32, ACT, generator=g), torch.randn(32, generator=g),
              torch.randn(32, OBS, generator=g), torch.zeros(32))
    counts = {}
    for batched in (False, True):
        monkeypatch.setattr(StackedQ, "batched_on_cpu", batched)
        torch.manual_seed(0)
        critic_part, actor_part = make_critic_part(spec, "cpu"), make_actor_part(spec, "cpu")
        critic_part.step(b), actor_part.step(b)  # optimiser state created: the steps counted are steady ones
        with KernelOps() as mode:
            critic_part.step(b)
        counts[batched] = mode.count
    matmuls = {k: sum(c[n] for n in ("addmm", "mm", "bmm", "baddbmm")) for k, c in counts.items()}
    critic_matmuls_before = separate_critic_step_matmuls(spec, b)
    # the one-by-one path issues what separate networks did; the batched one half of the critic's
    assert matmuls[False] - matmuls[True] == critic_matmuls_before // 2 + 3  # + the target critic's forward (3)
    assert sum(counts[True].values()) <= 0.85 * sum(counts[False].values())


def test_a_gpu_runs_the_twin_critic_one_by_one_at_large_batches(monkeypatch):
    """The GPU's rule (Critic.batched_max_rows): batched below the limit, each network on its own slices
    from it on, with the same Q values; CrossQ's critic has no limit; the CPU runs one by one unless
    told to run the GPU's rule."""
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    critic = Critic(5, 2, (16, 16))
    limit = Critic.batched_max_rows
    assert limit is not None and critic.batched(cuda, limit - 1) and not critic.batched(cuda, limit)
    assert CrossQCritic(5, 2, (16, 16)).batched(cuda, 10 * limit)
    assert not critic.batched(cpu, 1)
    monkeypatch.setattr(StackedQ, "batched_on_cpu", True)
    assert critic.batched(cpu, 1) and not critic.batched(cpu, limit)
    obs, act = torch.randn(64, 5), torch.rand(64, 2) * 2 - 1
    batched = critic(obs, act)
    monkeypatch.setattr(Critic, "batched_max_rows", 64)
    one_by_one = critic(obs, act)
    assert torch.allclose(batched, one_by_one, atol=1e-5)
    calls = []
    monkeypatch.setattr(torch, "baddbmm", lambda *a, **k: calls.append(1))  # the batched path's matmul
    critic(obs, act)
    assert not calls
