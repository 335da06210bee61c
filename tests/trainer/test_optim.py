"""FusedAdam (algos/optim.py) makes the updates torch.optim.Adam(fused=True) makes, and never imports dynamo."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from spreeze_like.algos.optim import FusedAdam


def two_nets(seed: int) -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    scalar = torch.tensor([0.3], requires_grad=True)  # a second group, as SAC's log_alpha
    return net, scalar


def loss_of(net: torch.nn.Module, scalar: torch.Tensor, step: int) -> torch.Tensor:
    x = torch.randn(32, 4, generator=torch.Generator().manual_seed(step))
    return net(x).pow(2).mean() + (scalar * x.mean()).sum()


def run(optimizer_cls: str, steps: int, found_at: int = -1) -> tuple[list[torch.Tensor], object]:
    net, scalar = two_nets(0)
    if optimizer_cls == "torch":
        opt = torch.optim.Adam(net.parameters(), lr=1e-2, fused=True)
    else:
        opt = FusedAdam(net.parameters(), lr=1e-2)
    opt.add_param_group({"params": [scalar], "lr": 3e-2})
    found = torch.zeros(())
    opt.found_inf = found
    for i in range(steps):
        opt.zero_grad(set_to_none=True)
        loss_of(net, scalar, i).backward()
        found.fill_(1.0 if i == found_at else 0.0)
        opt.step()
    return [p.detach().clone() for p in [*net.parameters(), scalar]], opt


def test_updates_are_bitwise_those_of_torch_fused_adam() -> None:
    ours, ours_opt = run("ours", 25)
    theirs, theirs_opt = run("torch", 25)
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b)
    start, _ = run("ours", 0)
    assert not torch.equal(ours[0], start[0])  # the parameters moved: the comparison is not of two no-ops
    ours_state, theirs_state = ours_opt.state_dict()["state"], theirs_opt.state_dict()["state"]
    assert ours_state.keys() == theirs_state.keys()
    for k in ours_state:
        for name in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(ours_state[k][name], theirs_state[k][name])


def test_found_inf_skips_the_step_entirely() -> None:
    skipped, opt_skipped = run("ours", 6, found_at=5)
    five, opt_five = run("ours", 5)
    for a, b in zip(skipped, five):
        assert torch.equal(a, b)
    for k, s in opt_skipped.state_dict()["state"].items():
        assert float(s["step"]) == 5.0
        assert torch.equal(s["exp_avg_sq"], opt_five.state_dict()["state"][k]["exp_avg_sq"])


@pytest.mark.parametrize("source", ["ours", "torch"])
def test_state_dict_round_trip_continues_identically(source: str) -> None:
    """A state dict (ours, or torch.optim.Adam's: the checkpoint layout) loads and the next steps match."""
    _, src_opt = run(source, 10)
    saved = src_opt.state_dict()
    net, scalar = two_nets(0)
    expected, _ = run("ours", 13)
    # bring a fresh net to the 10-step parameters by replaying, then load the optimiser state
    replay, _ = run("ours", 10)
    with torch.no_grad():
        for p, v in zip([*net.parameters(), scalar], replay):
            p.copy_(v)
    opt = FusedAdam(net.parameters(), lr=1e-2)
    opt.add_param_group({"params": [scalar], "lr": 3e-2})
    opt.load_state_dict(saved)
    for i in range(10, 13):
        opt.zero_grad()
        loss_of(net, scalar, i).backward()
        opt.step()
    for a, b in zip([*net.parameters(), scalar], expected):
        assert torch.equal(a.detach(), b)
    # the loaded moments are copies: stepping this optimiser did not touch the source's
    assert float(next(iter(saved["state"].values()))["step"]) == 10.0


def test_mismatched_state_dict_raises_value_error() -> None:
    _, opt = run("ours", 2)
    net, _ = two_nets(0)
    one_group = FusedAdam(net.parameters(), lr=1e-2)
    with pytest.raises(ValueError, match="parameter groups"):
        one_group.load_state_dict(opt.state_dict())
    other = FusedAdam(torch.nn.Linear(4, 3).parameters(), lr=1e-2)
    other.add_param_group({"params": [torch.zeros(1, requires_grad=True)]})
    with pytest.raises(ValueError):
        other.load_state_dict(opt.state_dict())


def test_rejects_what_it_does_not_implement() -> None:
    with pytest.raises(ValueError, match="not"):
        FusedAdam(torch.nn.Linear(2, 2).parameters(), lr=1e-3).add_param_group(
            {"params": [torch.zeros(1, requires_grad=True)], "weight_decay": 0.1})
    p = torch.zeros(1, requires_grad=True)
    with pytest.raises(ValueError, match="two"):
        FusedAdam([p], lr=1e-3).add_param_group({"params": [p]})


def test_rejects_mixed_dtypes_and_empty_groups() -> None:
    opt = FusedAdam([torch.zeros(2, requires_grad=True)], lr=1e-3)
    with pytest.raises(ValueError, match="one device and dtype"):
        opt.add_param_group({"params": [torch.zeros(2, dtype=torch.float64, requires_grad=True)]})
    with pytest.raises(ValueError, match="at least one"):
        opt.add_param_group({"params": []})


def test_learner_halves_train_without_importing_dynamo() -> None:
    """The reason FusedAdam exists: a learner never pays torch._dynamo's import (1+ s of CPU at start)."""
    code = """
import sys, torch
from spreeze_like.algos import make_actor_part, make_critic_part
from spreeze_like.algos.base import Batch
from spreeze_like.algos.spec import AlgoSpec
for algo in ("sac", "td3", "ddpg"):
    for precision in ("fp32", "bf16"):
        spec = AlgoSpec(algo=algo, obs_dim=3, act_dim=1, hidden_sizes=(32, 32), precision=precision)
        parts = make_critic_part(spec, "cpu"), make_actor_part(spec, "cpu")
        b = Batch(torch.randn(8, 3), torch.rand(8, 1), torch.randn(8), torch.randn(8, 3), torch.zeros(8))
        for part in parts:
            for _ in range(3):
                with part.autocast():
                    part.step(b)
            part.load_state_dict(part.state_dict())
print("dynamo" if "torch._dynamo" in sys.modules else "clean")
"""
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "clean"
