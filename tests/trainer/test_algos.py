"""Algorithm halves: flat vectors, identical initial copies, the TD target, IS weights, TD3 delays."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from spreeze_like.algos import make_actor_part, make_critic_part, make_policy
from spreeze_like.algos.base import AlgoSpec, Batch
from spreeze_like.algos.networks import StackedQ, get_flat, set_flat

ALGOS = ("sac", "td3", "ddpg")


def spec(algo: str, **kw) -> AlgoSpec:
    return AlgoSpec(
        algo=algo, obs_dim=3, act_dim=2, hidden_sizes=(16, 16), policy_delay=2 if algo == "td3" else 1, **kw
    )


def batch(n: int = 32, seed: int = 0, terminated: float | None = None, weights=None) -> Batch:
    g = torch.Generator().manual_seed(seed)
    term = torch.randint(0, 2, (n,), generator=g).float() if terminated is None else torch.full((n,), terminated)
    return Batch(
        torch.randn(n, 3, generator=g),
        torch.rand(n, 2, generator=g) * 2 - 1,
        torch.randn(n, generator=g),
        torch.randn(n, 3, generator=g),
        term,
        weights,
    )


@pytest.mark.parametrize("algo", ALGOS)
def test_halves_start_from_identical_copies(algo):
    critic_part, actor_part = make_critic_part(spec(algo), "cpu"), make_actor_part(spec(algo), "cpu")
    np.testing.assert_array_equal(get_flat([critic_part.actor]), actor_part.actor_vector())
    np.testing.assert_array_equal(get_flat([make_policy(spec(algo))]), actor_part.actor_vector())
    np.testing.assert_array_equal(
        critic_part.critic_vector()[: actor_part._critic_numel], get_flat([actor_part.critic])
    )
    assert len(critic_part.critic_vector()) == actor_part.critic_vector_size
    assert critic_part.actor_vector_size == len(actor_part.actor_vector())


def test_flat_vectors_round_trip_without_aliasing():
    policy = make_policy(spec("sac"))
    vec = np.arange(len(get_flat([policy])), dtype=np.float32)
    set_flat([policy], vec)
    vec[:] = -1.0  # the caller's array (a board view, say) changes afterwards
    np.testing.assert_array_equal(get_flat([policy]), np.arange(len(vec), dtype=np.float32))
    with pytest.raises(ValueError, match="shape"):
        set_flat([policy], vec[:-1])


@pytest.mark.parametrize("algo", ALGOS)
def test_steps_run_and_return_priorities(algo):
    critic_part, actor_part = make_critic_part(spec(algo), "cpu"), make_actor_part(spec(algo), "cpu")
    td, metrics = critic_part.step(batch())
    assert td.shape == (32,) and torch.all(td >= 0)
    assert all(torch.isfinite(v) for v in metrics.values()) and "qf1_loss" in metrics
    actor_part.load_critic_vector(critic_part.critic_vector())
    before = actor_part.actor_vector()
    assert "actor_loss" in actor_part.step(batch(seed=1))
    assert not np.array_equal(before, actor_part.actor_vector())


@pytest.mark.parametrize("algo", ALGOS)
def test_critic_fits_a_fixed_batch(algo):
    part = make_critic_part(spec(algo, gamma=0.0), "cpu")  # gamma 0: the target is the reward
    b = batch()
    first = part.step(b)[1]["qf1_loss"].item()
    for _ in range(200):
        last = part.step(b)[1]["qf1_loss"].item()
    assert last < 0.2 * first


def test_target_bootstraps_on_terminated_only():
    part = make_critic_part(spec("ddpg", gamma=0.5), "cpu")
    part.critic_target = lambda obs, act: [torch.full((len(obs),), 10.0)]  # a known next-state value
    b = batch(n=8)
    with torch.no_grad():
        q = part.critic(b.obs, b.action)[0]
    td, _ = part.step(b)
    expected = (q - (b.reward + (1 - b.terminated) * 0.5 * 10.0)).abs()
    torch.testing.assert_close(td, expected)
    assert 0 < b.terminated.sum() < 8  # both cases present


@pytest.mark.parametrize("algo", ALGOS)
def test_importance_weights_scale_the_critic_loss(algo):
    part = make_critic_part(spec(algo), "cpu")
    before = get_flat([part.critic])
    _, metrics = part.step(batch(weights=torch.zeros(32)))
    assert metrics["qf1_loss"].item() == 0.0
    np.testing.assert_array_equal(before, get_flat([part.critic]))  # zero weights: no gradient
    part2 = make_critic_part(spec(algo), "cpu")
    loss_w2 = part2.step(batch(weights=torch.full((32,), 2.0)))[1]["qf1_loss"].item()
    part3 = make_critic_part(spec(algo), "cpu")
    loss_w1 = part3.step(batch())[1]["qf1_loss"].item()
    assert loss_w2 == pytest.approx(2.0 * loss_w1, rel=1e-5)


def test_sac_alpha_travels_with_the_critic_vector():
    critic_part, actor_part = make_critic_part(spec("sac", alpha_init=0.5), "cpu"), make_actor_part(spec("sac"), "cpu")
    for i in range(5):
        critic_part.step(batch(seed=i))
    actor_part.load_critic_vector(critic_part.critic_vector())
    assert actor_part.log_alpha.item() == pytest.approx(critic_part.log_alpha.item())
    assert critic_part.log_alpha.item() != pytest.approx(math.log(0.5))  # alpha is being tuned


def test_td3_targets_move_every_policy_delay_updates():
    part = make_critic_part(spec("td3"), "cpu")
    target0 = get_flat([part.critic_target])
    part.step(batch(seed=0))
    np.testing.assert_array_equal(target0, get_flat([part.critic_target]))  # update 1 of 2: targets still
    part.step(batch(seed=1))
    assert not np.array_equal(target0, get_flat([part.critic_target]))


@pytest.mark.parametrize("algo", ALGOS)
def test_state_dict_restores_the_exact_continuation(algo):
    a, b = make_critic_part(spec(algo), "cpu"), make_critic_part(spec(algo), "cpu")
    for i in range(3):
        a.step(batch(seed=i))
    b.load_state_dict(a.state_dict())
    b.updates = a.updates
    td_a, _ = a.step(batch(seed=9))
    td_b, _ = b.step(batch(seed=9))
    torch.testing.assert_close(td_a, td_b, rtol=0, atol=0)
    np.testing.assert_array_equal(get_flat([a.critic]), get_flat([b.critic]))


def test_a_cuda_generator_state_resumes_on_the_cpu_reproducibly():
    """A GPU checkpoint's noise state (Philox, 16 bytes) cannot continue on the CPU's Mersenne Twister:
    loading it seeds the CPU generator from it (seen failing on the H100: 'Expected a
    CPUGeneratorImplState of size 5056'), the same way every time, and differently per saved state."""
    state = make_critic_part(spec("sac"), "cpu").state_dict()
    draws = []
    for philox in (torch.arange(16, dtype=torch.uint8), torch.arange(16, dtype=torch.uint8),
                   torch.arange(1, 17, dtype=torch.uint8)):
        part = make_critic_part(spec("sac"), "cpu")
        part.load_state_dict({**state, "generator": philox, "generator_device": "cuda"})
        draws.append(torch.randn(4, generator=part.generator))
    torch.testing.assert_close(draws[0], draws[1], rtol=0, atol=0)
    assert not torch.equal(draws[0], draws[2])
    # a CPU checkpoint (and one written before the device was recorded) continues its stream exactly
    a = make_critic_part(spec("sac"), "cpu")
    torch.randn(3, generator=a.generator)
    saved = a.state_dict()
    del saved["generator_device"]
    b = make_critic_part(spec("sac"), "cpu")
    b.load_state_dict(saved)
    torch.testing.assert_close(torch.randn(4, generator=a.generator), torch.randn(4, generator=b.generator),
                               rtol=0, atol=0)


# --- bf16 mixed precision ---------------------------------------------------------------------------
def test_precision_auto_picks_bf16_only_for_cpu_learners_with_native_bf16():
    from spreeze_like.devices import resolve_precision

    assert resolve_precision("auto", ("cpu", "cpu"), native_bf16=True) == "bf16"
    assert resolve_precision("auto", ("cpu", "cpu"), native_bf16=False) == "fp32"
    assert resolve_precision("auto", ("cpu", "cuda:0"), native_bf16=True) == "fp32"
    assert resolve_precision("fp32", ("cpu", "cpu"), native_bf16=True) == "fp32"
    assert resolve_precision("bf16", ("cuda:0", "cuda:0"), native_bf16=False) == "bf16"



@pytest.mark.parametrize("batch, widest, algo, expected", [
    (100, 64, "sac", "fp32"), (256, 96, "sac", "fp32"), (128, 256, "sac", "fp32"), (512, 128, "td3", "fp32"),
    (1024, 96, "sac", "fp32"), (256, 256, "sac", "bf16"), (1024, 128, "ddpg", "bf16"),
    (100, 256, "crossq", "fp32"), (128, 256, "crossq", "bf16"), (512, 128, "crossq", "bf16")])
def test_precision_auto_keeps_fp32_for_updates_too_small_for_bf16(batch, widest, algo, expected, monkeypatch):
    """Measured (devices.BF16_MIN_WORK): bf16 autocast ran 0.54-0.95x as fast as autograd's fp32 step below batch x
    width^2 of 8.4 M (Pendulum-v1's preset, 96x96 at batch 256, among them) and 1.04-1.44x from there; against the
    explicit fp32 step of SAC, TD3 and DDPG (BF16_MIN_WORK_EXPLICIT) it gains from 16.8 M."""
    from spreeze_like import devices
    from spreeze_like.config import TrainConfig
    from spreeze_like.devices import resolve_precision

    explicit = algo != "crossq"
    assert resolve_precision("auto", ("cpu", "cpu"), native_bf16=True, update=(batch, widest),
                             explicit=explicit) == expected
    monkeypatch.setattr(devices, "cpu_has_native_bf16", lambda: True)
    config = TrainConfig(env="Pendulum-v1", algo=algo, batch_size=batch, hidden_sizes=(widest, widest),
                         actor_device="cpu", critic_device="cpu")
    assert config.resolve().precision == expected
    wide_critic = dataclasses.replace(config, critic_hidden_sizes=(2048, 2048))
    assert wide_critic.resolve().precision == "bf16"  # the widest layer sets the cost
    if explicit:  # autograd's step asked for: the threshold measured against it
        eager = dataclasses.replace(config, learner_step="eager").resolve().precision
        assert eager == ("bf16" if batch * widest * widest >= devices.BF16_MIN_WORK else "fp32")
        # the explicit step asked for: fp32 whatever the size (it has no bf16 path)
        assert dataclasses.replace(wide_critic, learner_step="explicit").resolve().precision == "fp32"


class MatmulDtypes(TorchDispatchMode):
    """Records the output dtype of every matmul (the critic's layers) run under it."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[torch.dtype] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket in (torch.ops.aten.addmm, torch.ops.aten.baddbmm, torch.ops.aten.mm, torch.ops.aten.bmm):
            self.seen.append(out.dtype)
        return out


@pytest.mark.parametrize("batched", [False, True], ids=["one-by-one", "batched"])
@pytest.mark.parametrize("algo", ALGOS)
def test_bf16_heads_stay_fp32_and_the_critic_still_fits(algo, batched, monkeypatch):
    monkeypatch.setattr(StackedQ, "batched_on_cpu", batched)  # the GPU's batched layers, or the CPU's one by one
    part = make_critic_part(spec(algo, gamma=0.0, precision="bf16"), "cpu")
    b = batch()
    with part.autocast(), MatmulDtypes() as mode:
        q_values = part.critic(b.obs, b.action)
    per_network = len(mode.seen) // (1 if batched and algo != "ddpg" else spec(algo).n_q)
    # the hidden layers really run in bf16 (2 of 16x16), the Q heads in fp32
    assert per_network == 3 and mode.seen.count(torch.bfloat16) == 2 * len(mode.seen) // 3, mode.seen
    with part.autocast():
        td, metrics = part.step(b)
    first = metrics["qf1_loss"].item()
    for _ in range(200):
        with part.autocast():  # one region per step: autocast caches the weights' bf16 casts until it exits
            last = part.step(b)[1]["qf1_loss"].item()
    assert all(q.dtype == torch.float32 for q in q_values)
    assert td.dtype == torch.float32 and all(p.dtype == torch.float32 for p in part.critic.parameters())
    assert last < 0.2 * first


def test_bf16_actor_step_changes_the_actor_with_fp32_outputs():
    part = make_actor_part(spec("sac", precision="bf16"), "cpu")
    before = part.actor_vector()
    with part.autocast():
        action, log_prob = part.actor.sample(batch().obs)
        metrics = part.step(batch(seed=1))
    assert action.dtype == torch.float32 and log_prob.dtype == torch.float32
    assert torch.isfinite(metrics["actor_loss"]) and not np.array_equal(before, part.actor_vector())


@pytest.mark.parametrize("batched", [False, True], ids=["one-by-one", "batched"])
@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_one_critic_step_equals_the_per_network_losses_written_out(algo, batched, monkeypatch):
    """The step computes every network's loss, the target's min and the TD errors as one op over the [2, B]
    Q values (base.weighted_mse, base.q_report); here they are written out per network, as CleanRL does."""
    import copy

    monkeypatch.setattr(StackedQ, "batched_on_cpu", batched)
    part = make_critic_part(spec(algo, gamma=0.9), "cpu")
    b = batch(weights=torch.linspace(0.5, 2.0, 32))
    critic, s = copy.deepcopy(part.critic), part.spec
    g = torch.Generator().set_state(part.generator.get_state())
    with torch.no_grad():
        if algo == "sac":
            alpha = part.log_alpha.exp()
            next_actions, next_log_pi = part.actor.sample(b.next_obs, g)
            q1_next, q2_next = part.critic_target(b.next_obs, next_actions)
            next_v = torch.min(q1_next, q2_next) - alpha * next_log_pi
        else:
            noise = (torch.randn(b.action.shape, generator=g) * s.policy_noise).clamp(-s.noise_clip, s.noise_clip)
            next_actions = (part.actor_target(b.next_obs) + noise).clamp(-1.0, 1.0)
            q1_next, q2_next = part.critic_target(b.next_obs, next_actions)
            next_v = torch.min(q1_next, q2_next)
        target = b.reward + (1.0 - b.terminated) * 0.9 * next_v
    q1, q2 = critic(b.obs, b.action)
    loss1, loss2 = (b.weights * (q1 - target) ** 2).mean(), (b.weights * (q2 - target) ** 2).mean()
    (loss1 + loss2).backward()

    td_errors, metrics = part.step(b)
    torch.testing.assert_close(metrics["qf1_loss"], loss1.detach(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(metrics["qf2_loss"], loss2.detach(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(metrics["qf2_values"], q2.detach().mean(), rtol=1e-6, atol=1e-6)
    expected_td = torch.max((q1 - target).abs(), (q2 - target).abs()).detach()
    torch.testing.assert_close(td_errors, expected_td, rtol=1e-6, atol=1e-6)
    assert loss1.item() != pytest.approx(loss2.item())  # two different networks, two different losses
    for (name, p), ref in zip(part.critic.named_parameters(), critic.parameters(), strict=True):
        torch.testing.assert_close(p.grad, ref.grad, rtol=1e-5, atol=1e-6, msg=name)


def test_the_squashed_gaussian_log_prob_is_the_change_of_variables_of_a_normal():
    """log pi(a|s) of a = tanh(x), x ~ N(mean, std): the Normal's log density minus log(1 - tanh(x)^2), per
    action dim, summed; computed by torch.distributions in float64 from the same noise."""
    actor = make_actor_part(spec("sac"), "cpu").actor
    obs = torch.randn(64, 3, generator=torch.Generator().manual_seed(4)) * 3  # wide: some |x| large, tanh saturated
    g = torch.Generator().manual_seed(9)
    action, log_prob = actor.sample(obs, torch.Generator().set_state(g.get_state()))
    with torch.no_grad():
        mean, log_std = (t.double() for t in actor(obs))
        eps = torch.randn(mean.shape, generator=g).double()
        x = mean + log_std.exp() * eps
        expected = torch.distributions.Normal(mean, log_std.exp()).log_prob(x).sum(-1)
        expected = expected - torch.log1p(-torch.tanh(x).pow(2)).sum(-1)
    torch.testing.assert_close(action.double(), torch.tanh(x), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(log_prob.double(), expected, rtol=1e-5, atol=1e-4)
    assert (log_std > -5).all() and (log_std < 2).all()  # the soft clamp into [LOG_STD_MIN, LOG_STD_MAX]
