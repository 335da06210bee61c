"""The explicit step (gradients written out by hand, algos/explicit_grad.py) makes the autograd step's updates.

Each test builds two halves from one seed, steps one with ``step`` (autograd: the reference) and the other
with ``explicit_step`` on the same batches, and compares every parameter, optimiser moment, metric and TD
error. A wrong sign, a missing term or a gradient written to the wrong network would differ by far more
than float rounding after a few Adam steps.
"""

from __future__ import annotations

import pytest
import torch

from spreeze_like.algos import make_actor_part, make_critic_part
from spreeze_like.algos.base import AlgoSpec, Batch
from spreeze_like.algos.graphed import resolve_step_mode
from spreeze_like.errors import ConfigError

SHAPES = [(3, 1, (16, 16)), (5, 2, (8,)), (4, 3, (12, 10, 6))]  # obs, act, hidden (one to three layers)
STEPS = 6


def spec(algo: str, obs_dim: int, act_dim: int, hidden: tuple[int, ...], **kw) -> AlgoSpec:
    return AlgoSpec(algo=algo, obs_dim=obs_dim, act_dim=act_dim, hidden_sizes=hidden,
                    policy_delay=2 if algo == "td3" else 1, precision="fp32", **kw)


def batch(obs_dim: int, act_dim: int, seed: int, weighted: bool, n: int = 48) -> Batch:
    g = torch.Generator().manual_seed(seed)
    return Batch(
        torch.randn(n, obs_dim, generator=g),
        torch.rand(n, act_dim, generator=g) * 2 - 1,
        torch.randn(n, generator=g),
        torch.randn(n, obs_dim, generator=g),
        (torch.rand(n, generator=g) < 0.25).float(),
        torch.rand(n, generator=g) + 0.1 if weighted else None,
    )


MOMENT_SCALE_RTOL = 1e-5  # of the moment tensor's largest entry: the floor of each entry's absolute tolerance


def assert_same_state(reference, explicit, moment_atol: float = 1e-9) -> None:
    """Every module's parameters and buffers, every optimiser moment and the extra tensors (log_alpha) agree.

    A moment's entry is a running sum of gradient entries, each a sum over the batch whose terms can cancel:
    its float32 rounding scales with those terms, not with the result, so an entry near zero can differ by more
    than any relative tolerance of itself. Each moment tensor's absolute tolerance is therefore
    ``MOMENT_SCALE_RTOL`` times its largest entry, or ``moment_atol`` where that is larger (a batch norm's bias
    gradient, whose exact value is zero, has no scale of its own). Seen on an Intel Xeon with AMX
    (2026-11-29): one entry of -1.886e-4 off by 1.5e-8 (relative 1.8e-5) in SAC's first Q layer; over every
    critic case of ``test_critic_explicit_step_is_the_autograd_step`` the largest error was 1.3e-6 of its
    tensor's largest entry. A wrong term of a gradient moves entries by their own size."""
    for name, module in reference.modules.items():
        for (key, a), (_, b) in zip(module.state_dict().items(), explicit.modules[name].state_dict().items()):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=f"{name}.{key}")
    for name, optimizer in reference.optimizers.items():
        theirs = explicit.optimizers[name].state_dict()["state"]
        for index, state in optimizer.state_dict()["state"].items():
            for key in ("exp_avg", "exp_avg_sq", "step"):
                atol = max(moment_atol, MOMENT_SCALE_RTOL * float(state[key].abs().max()))
                torch.testing.assert_close(theirs[index][key], state[key], rtol=1e-5, atol=atol,
                                           msg=f"{name}[{index}].{key}")
    for name, t in reference.tensors.items():
        torch.testing.assert_close(explicit.tensors[name], t, rtol=1e-5, atol=1e-6, msg=name)


def assert_same_metrics(reference: dict, explicit: dict) -> None:
    assert set(explicit) == set(reference)
    for key, value in reference.items():
        assert explicit[key].shape == value.shape, key
        torch.testing.assert_close(explicit[key], value.detach(), rtol=1e-5, atol=1e-6, msg=key)


@pytest.mark.parametrize("weighted", [False, True], ids=["uniform", "is-weights"])
@pytest.mark.parametrize("shape", SHAPES, ids=["16x16", "8", "12x10x6"])
@pytest.mark.parametrize("algo", ["sac", "td3", "ddpg"])
def test_critic_explicit_step_is_the_autograd_step(algo, shape, weighted):
    s = spec(algo, *shape)
    reference, explicit = make_critic_part(s, "cpu"), make_critic_part(s, "cpu")
    assert explicit.explicit_ok()
    for i in range(STEPS):
        b = batch(s.obs_dim, s.act_dim, seed=i, weighted=weighted)
        td_ref, metrics_ref = reference.step(b)
        td_exp, metrics_exp = explicit.explicit_step(b)
        torch.testing.assert_close(td_exp, td_ref.detach(), rtol=1e-5, atol=1e-6)
        assert_same_metrics(metrics_ref, metrics_exp)
        assert explicit.updates == reference.updates == i + 1
    assert_same_state(reference, explicit)
    # the copies of the other half's networks were read, not trained
    assert all(p.grad is None for p in explicit.actor.parameters())


@pytest.mark.parametrize("shape", SHAPES, ids=["16x16", "8", "12x10x6"])
@pytest.mark.parametrize("algo", ["sac", "td3", "ddpg"])
def test_actor_explicit_step_is_the_autograd_step(algo, shape):
    s = spec(algo, *shape)
    reference, explicit = make_actor_part(s, "cpu"), make_actor_part(s, "cpu")
    assert explicit.explicit_ok()
    if algo == "sac":  # an entropy coefficient other than 1, as the critic's copy carries after training
        for part in (reference, explicit):
            part.log_alpha.fill_(-1.7)
    for i in range(STEPS):
        b = batch(s.obs_dim, s.act_dim, seed=10 + i, weighted=False)
        assert_same_metrics(reference.step(b), explicit.explicit_step(b))
    assert_same_state(reference, explicit)
    assert all(p.grad is None for p in explicit.critic.parameters())


# CrossQ's moments: tests/trainer/test_explicit_renorm.py's MOMENT_ATOL (a batch norm's bias gradient near zero)
@pytest.mark.parametrize("algo, moment_atol", [("sac", 1e-9), ("crossq", 1e-6)])
def test_explicit_step_survives_grads_set_to_none(algo, moment_atol):
    """Something else may drop the gradients (``zero_grad(set_to_none=True)``, a checkpoint load): the next
    explicit step allocates them again instead of writing into tensors no parameter holds."""
    s = spec(algo, 3, 1, (16, 16))
    reference, explicit = make_critic_part(s, "cpu"), make_critic_part(s, "cpu")
    for i in range(3):
        b = batch(3, 1, seed=i, weighted=False)
        reference.step(b)
        explicit.explicit_step(b)
        explicit.q_optimizer.zero_grad(set_to_none=True)
    assert_same_state(reference, explicit, moment_atol=moment_atol)


def test_ties_in_the_smaller_q_share_the_gradient_as_autograd_does():
    """With both Q networks equal every row is a tie: autograd's ``amin`` gives each half the gradient."""
    s = spec("sac", 3, 1, (16, 16))
    reference, explicit = make_actor_part(s, "cpu"), make_actor_part(s, "cpu")
    for part in (reference, explicit):
        with torch.no_grad():
            for layer in part.critic.layers:
                layer.weight[1].copy_(layer.weight[0])
                layer.bias[1].copy_(layer.bias[0])
    for i in range(3):
        b = batch(3, 1, seed=i, weighted=False)
        assert_same_metrics(reference.step(b), explicit.explicit_step(b))
    assert_same_state(reference, explicit)


def test_where_the_explicit_step_applies():
    for algo in ("sac", "crossq"):
        assert make_critic_part(spec(algo, 3, 1, (8,)), "cpu").explicit_ok()
        assert make_actor_part(spec(algo, 3, 1, (8,)), "cpu").explicit_ok()
        bf16 = AlgoSpec(algo=algo, obs_dim=3, act_dim=1, hidden_sizes=(8,), precision="bf16")
        assert not make_actor_part(bf16, "cpu").explicit_ok()
        assert not make_critic_part(bf16, "cpu").explicit_ok()
    # a critic the algorithm does not build (a benchmark's): the chains would read the wrong layers
    sac_with_crossq_critic = make_critic_part(spec("sac", 3, 1, (8,)), "cpu")
    sac_with_crossq_critic.critic = make_critic_part(spec("crossq", 3, 1, (8,)), "cpu").critic
    assert not sac_with_crossq_critic.explicit_ok()


@pytest.mark.parametrize("algo", ["sac", "crossq"])
def test_separate_critics_built_through_a_patched_critic_class_take_autograd(algo, monkeypatch):
    """tools/bench_critic_layout.py builds separate Q networks by patching ``algos.base.critic_class``; a part
    asked inside that patch must not take those for the stacked critic its chains read (seen in bench_gpu.py's
    ``separate/...`` entries)."""
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "tools"))
    from bench_critic_layout import separate_critic_classes

    with separate_critic_classes():
        critic, actor = make_critic_part(spec(algo, 3, 1, (8,)), "cpu"), make_actor_part(spec(algo, 3, 1, (8,)), "cpu")
        assert not critic.explicit_ok() and not actor.explicit_ok()


def test_step_modes_on_the_cpu():
    assert resolve_step_mode("auto", "cpu", explicit_ok=True) == "explicit"
    assert resolve_step_mode("auto", "cpu", explicit_ok=False) == "eager"
    assert resolve_step_mode("eager", "cpu", explicit_ok=True) == "eager"
    assert resolve_step_mode("explicit", "cpu", explicit_ok=True) == "explicit"
    with pytest.raises(ConfigError, match="--learner-step explicit needs"):
        resolve_step_mode("explicit", "cpu", explicit_ok=False)


@pytest.mark.parametrize("algo", ["sac", "ddpg", "crossq"])
def test_config_refuses_explicit_where_it_does_not_apply(algo):
    import dataclasses

    from spreeze_like.config import TrainConfig

    config = dataclasses.replace(TrainConfig(), algo=algo, learner_step="explicit", precision="fp32")
    assert config.resolve().learner_step == "explicit"
    with pytest.raises(ConfigError, match="in fp32"):
        dataclasses.replace(config, precision="bf16").resolve()


def test_the_config_knows_which_algorithms_have_an_explicit_step():
    """``config.EXPLICIT_ALGOS`` (which the precision rule reads without building networks) is the list of the
    algorithms whose halves both have an ``explicit_step``."""
    from spreeze_like.config import ALGOS, EXPLICIT_ALGOS

    have = [a for a in ALGOS if make_critic_part(spec(a, 3, 1, (8,)), "cpu").explicit_step is not None
            and make_actor_part(spec(a, 3, 1, (8,)), "cpu").explicit_step is not None]
    assert tuple(have) == EXPLICIT_ALGOS
