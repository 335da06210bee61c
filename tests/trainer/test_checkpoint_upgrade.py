"""Older checkpoints load into today's stacked critics with the same Q values and Adam moments, and
resume from the CLI: format 1 (separate Q networks, written by 907d1e4: tests/trainer/fixtures/checkpoint_v1)
and, for CrossQ, format 2 (8a9cfc5: fixtures/checkpoint_v2), whose critic format 3 stacked."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from spreeze_like.algos import make_actor_part, make_critic_part
from spreeze_like.algos.base import AlgoSpec, Batch
from spreeze_like.algos.layout_v1 import stacked_optimizer
from spreeze_like.checkpoint import FORMAT_VERSION, load_checkpoint
from spreeze_like.errors import CheckpointError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from bench_critic_layout import SeparateCrossQCritic  # the critic formats 1 and 2 held

FIXTURES = Path(__file__).parent / "fixtures" / "checkpoint_v1"
ALGOS = ("sac", "td3", "ddpg")


def fixture(algo: str, version: int = 1) -> Path:
    return FIXTURES.parent / f"checkpoint_v{version}" / algo / "ckpt_0000000400.pt"


def raw_v1(algo: str, version: int = 1) -> dict:
    return torch.load(fixture(algo, version), map_location="cpu", weights_only=True)


def spec_of(payload: dict) -> AlgoSpec:
    config = payload["config"]
    return AlgoSpec(algo=config["algo"], obs_dim=3, act_dim=1, hidden_sizes=tuple(config["hidden_sizes"]),
                    policy_delay=config["policy_delay"], precision="fp32", seed=config["seed"])


def loaded(algo: str, version: int) -> tuple[dict, AlgoSpec, Any, Any, tuple[torch.Tensor, torch.Tensor]]:
    """The fixture of ``version`` as saved, its spec, both halves loaded from it as today's code upgrades
    it, and 16 Pendulum-sized probe inputs."""
    old = raw_v1(algo, version)
    assert old["format_version"] == version
    payload = load_checkpoint(fixture(algo, version))
    assert payload["format_version"] == FORMAT_VERSION
    spec = spec_of(payload)
    critic_part, actor_part = make_critic_part(spec, "cpu"), make_actor_part(spec, "cpu")
    critic_part.load_state_dict(payload["roles"]["critic-learner"]["part"])
    actor_part.load_state_dict(payload["roles"]["actor-learner"]["part"])
    g = torch.Generator().manual_seed(0)
    return old, spec, critic_part, actor_part, (torch.randn(16, 3, generator=g), torch.rand(16, 1, generator=g) * 2 - 1)


def q_by_hand(state: dict, obs: torch.Tensor, action: torch.Tensor) -> list[torch.Tensor]:
    """Q values from a format-1 critic state dict, computed from its own per-network tensors."""
    x0 = torch.cat([obs, action], -1)
    out = []
    for q in range(1 + max(int(k.split(".")[1]) for k in state)):
        layers = sorted({int(k.split(".")[2]) for k in state if k.startswith(f"qs.{q}.")})
        x = x0
        for i, index in enumerate(layers):
            x = F.linear(x, state[f"qs.{q}.{index}.weight"], state[f"qs.{q}.{index}.bias"])
            x = F.relu(x) if i < len(layers) - 1 else x
        out.append(x.squeeze(-1))
    return out


@pytest.mark.parametrize("algo", ALGOS)
def test_a_format1_checkpoint_loads_with_the_same_q_values_and_moments(algo):
    old, spec, critic_part, actor_part, (obs, action) = loaded(algo, 1)
    assert "qs.0.0.weight" in old["roles"]["critic-learner"]["part"]["modules"]["critic"]
    old_modules = old["roles"]["critic-learner"]["part"]["modules"]
    for network, saved in ((critic_part.critic, old_modules["critic"]), (critic_part.critic_target, old_modules["critic_target"]),
                           (actor_part.critic, old["roles"]["actor-learner"]["part"]["modules"]["critic_copy"])):
        for got, expected in zip(network(obs, action), q_by_hand(saved, obs, action), strict=True):
            torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)

    # Adam's moments of Q2's first layer moved with the weights; the step count came along
    old_opt = old["roles"]["critic-learner"]["part"]["optimizers"]["q_optimizer"]
    n_q = spec.n_q
    per_q = len(old_opt["param_groups"][0]["params"]) // n_q
    first = critic_part.critic.layers[0].weight
    state = critic_part.q_optimizer.state[first]
    q = n_q - 1
    torch.testing.assert_close(state["exp_avg"][q], old_opt["state"][q * per_q]["exp_avg"].t(), rtol=0, atol=0)
    torch.testing.assert_close(state["exp_avg_sq"][q], old_opt["state"][q * per_q]["exp_avg_sq"].t(), rtol=0, atol=0)
    assert float(state["step"]) == float(old_opt["state"][0]["step"]) > 0
    if algo == "sac":  # log_alpha, the second group, kept its moments at its new index
        alpha_state = critic_part.q_optimizer.state[critic_part.log_alpha]
        torch.testing.assert_close(alpha_state["exp_avg"], old_opt["state"][n_q * per_q]["exp_avg"])
    critic_part.step(_batch())  # and it trains on from there
    actor_part.step(_batch())


def _batch() -> Batch:
    g = torch.Generator().manual_seed(1)
    return Batch(torch.randn(8, 3, generator=g), torch.rand(8, 1, generator=g), torch.randn(8, generator=g),
                 torch.randn(8, 3, generator=g), torch.zeros(8))


def test_an_optimiser_state_of_the_wrong_shape_is_refused_not_guessed():
    opt = raw_v1("sac")["roles"]["critic-learner"]["part"]["optimizers"]["q_optimizer"]
    with pytest.raises(ValueError, match="does not split"):
        stacked_optimizer(opt, n_q=5)


def test_a_format1_checkpoint_with_a_foreign_critic_is_one_line(tmp_path):
    payload = raw_v1("td3")
    payload["roles"]["critic-learner"]["part"]["modules"]["critic"] = {"net.0.weight": torch.zeros(2, 2)}
    path = tmp_path / "ckpt_0000000400.pt"
    torch.save(payload, path)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    assert "\n" not in str(info.value) and "format-1" in str(info.value)


@pytest.mark.parametrize(("version", "algo"), [(1, "sac"), (2, "crossq")])  # the other algos: the load tests
def test_an_older_run_resumes_from_the_cli(tmp_path, version, algo):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    shutil.copy(fixture(algo, version).with_name("config.json"), run / "config.json")
    shutil.copy(fixture(algo, version), run / "checkpoints" / fixture(algo, version).name)
    proc = subprocess.run(
        [sys.executable, "-m", "spreeze_like.run", "--resume", str(run), "--total-steps", "700"],
        capture_output=True, text=True, check=False, timeout=180, env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "final evaluation" in proc.stdout and "after 700 env steps" in proc.stdout, proc.stdout[-2000:]
    newest = max((run / "checkpoints").glob("ckpt_*.pt"))
    assert newest.name == "ckpt_0000000700.pt"
    assert torch.load(newest, weights_only=True)["format_version"] == FORMAT_VERSION


# --- CrossQ: formats 1 and 2 held one nn.Sequential per network; format 3 stacks them (algos/layout_v2.py) ---
@pytest.mark.parametrize("version", [1, 2])
def test_a_crossq_checkpoint_of_format_1_or_2_loads_with_the_same_q_values_and_moments(version):
    old, spec, critic_part, actor_part, (obs, action) = loaded("crossq", version)
    old_critic = old["roles"]["critic-learner"]["part"]["modules"]["critic"]
    assert "qs.1.3.running_mean" in old_critic
    for network, saved, train in ((critic_part.critic, old_critic, True),
                                  (actor_part.critic, old["roles"]["actor-learner"]["part"]["modules"]["critic_copy"], False)):
        reference = SeparateCrossQCritic(3, 1, spec.hidden_sizes, spec.n_q).train(train)
        reference.load_state_dict(saved)
        with torch.no_grad():
            for mode in (True, False):  # the batch's statistics, then the running ones the file kept
                network.train(mode), reference.train(mode)
                for got, expected in zip(network(obs, action), reference(obs, action), strict=True):
                    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
        network.train(train)
    steps = old_critic["qs.0.0.steps"]
    assert steps > 0 and all(int(norm.steps) == int(steps) for norm in critic_part.critic.norms)

    # Adam's moments moved with their parameters: network 2's input norm and first layer; alpha's group
    old_opt = old["roles"]["critic-learner"]["part"]["optimizers"]["q_optimizer"]
    per_q = len(old_opt["param_groups"][0]["params"]) // spec.n_q  # (weight, bias) of BRN, Linear, BRN, ...
    norm, layer = critic_part.critic.norms[0], critic_part.critic.layers[0]
    width = norm.weight.numel() // spec.n_q
    norm_moment = critic_part.q_optimizer.state[norm.weight]["exp_avg_sq"][width:]
    torch.testing.assert_close(norm_moment, old_opt["state"][per_q]["exp_avg_sq"], rtol=0, atol=0)
    layer_moment = critic_part.q_optimizer.state[layer.weight]["exp_avg"][1]
    torch.testing.assert_close(layer_moment, old_opt["state"][per_q + 2]["exp_avg"], rtol=0, atol=0)
    alpha_state = critic_part.q_optimizer.state[critic_part.log_alpha]
    torch.testing.assert_close(alpha_state["exp_avg"], old_opt["state"][spec.n_q * per_q]["exp_avg"])
    critic_part.step(_batch())  # and it trains on from there
    actor_part.step(_batch())


def test_a_crossq_checkpoint_whose_networks_counted_different_updates_is_one_line(tmp_path):
    payload = raw_v1("crossq", 2)
    payload["roles"]["critic-learner"]["part"]["modules"]["critic"]["qs.1.3.steps"] += 1
    path = tmp_path / "ckpt_0000000400.pt"
    torch.save(payload, path)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    assert "\n" not in str(info.value) and "format-2" in str(info.value) and "8a9cfc5" in str(info.value)
