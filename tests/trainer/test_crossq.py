"""CrossQ (algos/crossq.py): Batch Renormalization against torch's batch norm, the running statistics in
the critic vector through a real weight board, the joint forward pass, no targets, the numpy policy
against the trained actor, the non-finite guard, state-dict round trips, and a serial run that learns
Pendulum-v1 (measured: docs/trainer.md, "CrossQ")."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from spreeze_like.algos import make_actor_part, make_critic_part
from spreeze_like.algos.base import AlgoSpec, Batch
from spreeze_like.algos.crossq_critic import BatchRenorm, CrossQCritic, running_statistics
from spreeze_like.algos.networks import get_flat
from spreeze_like.algos.numpy_policy import NumpyPolicy
from spreeze_like.config import TrainConfig
from spreeze_like.ipc import WeightBoard, new_run_id, segment_name
from spreeze_like.metrics import stats_schema
from spreeze_like.procs.segments import vector_sizes
from spreeze_like.roles.actor_learner import ActorLearner
from spreeze_like.roles.critic_learner import CriticLearner
from spreeze_like.roles.ports import LocalBoard, LocalStatsBlock
from spreeze_like.training import train

from .tb import scalars
from .test_gpu_steps import learners, storage_with
from .test_nonfinite import ScriptedReplay, changed, snapshot
from .test_serial import tiny

CUDA = torch.cuda.is_available()


def spec(**kw) -> AlgoSpec:
    return AlgoSpec(**{"algo": "crossq", "obs_dim": 3, "act_dim": 2, "hidden_sizes": (16, 16), "policy_delay": 3,
                       **kw})


def batch(n: int = 32, seed: int = 0, next_shift: float = 0.0) -> Batch:
    g = torch.Generator().manual_seed(seed)
    return Batch(torch.randn(n, 3, generator=g), torch.rand(n, 2, generator=g) * 2 - 1, torch.randn(n, generator=g),
                 torch.randn(n, 3, generator=g) + next_shift, torch.randint(0, 2, (n,), generator=g).float())


def brn_layers(module: torch.nn.Module) -> list[BatchRenorm]:
    return [m for m in module.modules() if isinstance(m, BatchRenorm)]


# --- Batch Renormalization ----------------------------------------------------------------------------------
def test_batch_renorm_is_batch_norm_during_warmup_and_renormalises_after_it():
    layer = BatchRenorm(4, warmup=3)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([1.0, 2.0, 0.5, -1.0]))
        layer.bias.copy_(torch.tensor([0.0, 1.0, -1.0, 0.5]))
    g = torch.Generator().manual_seed(0)
    running_mean, running_var = torch.zeros(4), torch.ones(4)
    for _ in range(3):  # warm-up: exactly torch's batch norm on the batch statistics
        x = torch.randn(64, 4, generator=g) * 3 + 2
        expected = F.batch_norm(x, None, None, layer.weight, layer.bias, training=True, eps=1e-3)
        torch.testing.assert_close(layer(x), expected, rtol=1e-5, atol=1e-5)
        layer.commit()
        running_mean = 0.99 * running_mean + 0.01 * x.mean(0)
        running_var = 0.99 * running_var + 0.01 * x.var(0, unbiased=False)
    torch.testing.assert_close(layer.running_mean, running_mean)
    torch.testing.assert_close(layer.running_var, running_var)
    assert layer.steps.item() == 3

    # warmed up: corrected by r and d; features 1 and 2 far enough from the running statistics to be clipped
    x = torch.randn(64, 4, generator=g) * torch.tensor([3.0, 5.0, 3.0, 1.0]) + torch.tensor([2.0, 2.0, 10.0, 0.0])
    mean, var = x.mean(0), x.var(0, unbiased=False)
    std, running_std = (var + 1e-3).sqrt(), (running_var + 1e-3).sqrt()
    r = (std / running_std).clamp(1 / 3, 3)
    d = ((mean - running_mean) / running_std).clamp(-5, 5)
    assert (r == 3).any() and (d.abs() == 5).any() and (d.abs() < 5).any()  # clipped and unclipped both seen
    torch.testing.assert_close(layer(x), ((x - mean) / std * r + d) * layer.weight + layer.bias, rtol=1e-5, atol=1e-5)

    layer.eval()  # eval mode: torch's batch norm on the running statistics
    expected = F.batch_norm(x, running_mean, running_var, layer.weight, layer.bias, training=False, eps=1e-3)
    torch.testing.assert_close(layer(x), expected, rtol=1e-5, atol=1e-5)


def test_batch_renorm_computes_its_statistics_in_fp32_under_bf16_autocast():
    critic = CrossQCritic(3, 2, (16, 16))
    b = batch()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        x = torch.cat([b.obs, b.action], -1).t().expand(2, -1, -1)
        hidden = critic.layers[0](critic.norms[0](x.reshape(1, -1, x.shape[-1])).view(2, -1, x.shape[-1]))
        q1, q2 = critic(b.obs, b.action)
    assert hidden.dtype == torch.bfloat16 and q1.dtype == q2.dtype == torch.float32
    assert all(m._batch_stats[0].dtype == torch.float32 for m in brn_layers(critic))


# --- the halves ---------------------------------------------------------------------------------------------
def test_no_target_networks_and_the_paper_s_optimiser_settings():
    critic_part, actor_part = make_critic_part(spec(), "cpu"), make_actor_part(spec(), "cpu")
    assert set(critic_part.modules) == {"critic", "actor_copy"} and not hasattr(critic_part, "critic_target")
    assert critic_part.critic_target_params == []
    critic_group, alpha_group = critic_part.q_optimizer.param_groups
    assert critic_group["betas"] == (0.5, 0.999) and critic_group["params"] == critic_part.critic_params
    assert alpha_group["betas"] == (0.9, 0.999) and alpha_group["params"] == [critic_part.log_alpha]
    assert actor_part.actor_optimizer.param_groups[0]["betas"] == (0.5, 0.999)
    assert critic_part.critic.training and not actor_part.critic.training  # the actor loss reads running stats
    assert dataclasses.replace(TrainConfig(), algo="crossq").resolve().policy_delay == 3


def test_one_critic_step_is_one_joint_forward_pass_with_its_own_target():
    part = make_critic_part(spec(gamma=0.9), "cpu")
    b = batch(next_shift=4.0)  # next states far from current ones: a joint batch has other statistics
    before = copy.deepcopy(part.critic)  # the weights the step computes with (train mode)
    generator = torch.Generator().set_state(part.generator.get_state())
    with torch.no_grad():
        next_actions, next_log_pi = part.actor.sample(b.next_obs, generator)
        joint = before(torch.cat([b.obs, b.next_obs]), torch.cat([b.action, next_actions]))
        alone = before(b.obs, b.action)
    alpha = part.log_alpha.exp().item()
    target = b.reward + (1 - b.terminated) * 0.9 * (torch.min(joint[0][32:], joint[1][32:]) - alpha * next_log_pi)
    expected = torch.max((joint[0][:32] - target).abs(), (joint[1][:32] - target).abs())
    separate = torch.max((alone[0] - target).abs(), (alone[1] - target).abs())

    td_errors, metrics = part.step(b)
    torch.testing.assert_close(td_errors, expected, rtol=1e-5, atol=1e-5)
    assert (td_errors - separate).abs().max() > 0.01  # a separate current-state pass would differ
    assert part.updates == 1 and all(torch.isfinite(v) for v in metrics.values())
    # the input layer's running statistics took the statistics of [obs; next_obs], both halves
    inputs = torch.cat([b.obs, b.next_obs])
    first = part.critic.norms[0]  # channels 0-2: the first network's three input features
    torch.testing.assert_close(first.running_mean[:3], 0.01 * inputs.mean(0))
    torch.testing.assert_close(first.running_var[:3], 0.99 + 0.01 * inputs.var(0, unbiased=False))
    assert all(m.steps.item() == 1 for m in brn_layers(part.critic))


def test_critic_fits_a_fixed_batch_and_the_actor_improves_its_eval_mode_q():
    critic_part = make_critic_part(spec(gamma=0.0), "cpu")  # gamma 0: the target is the reward
    b = batch()
    first = critic_part.step(b)[1]["qf1_loss"].item()
    for _ in range(200):
        last = critic_part.step(b)[1]["qf1_loss"].item()
    assert last < 0.2 * first
    actor_part = make_actor_part(spec(), "cpu")
    actor_part.load_critic_vector(critic_part.critic_vector())
    losses = [actor_part.step(batch(seed=1))["actor_loss"].item() for _ in range(100)]
    assert losses[-1] < losses[0]
    assert all(m._batch_stats is None for m in brn_layers(actor_part.critic))  # eval mode: no batch statistics


def test_bn_statistics_travel_with_the_critic_vector_through_a_weight_board():
    s = spec(obs_dim=3, act_dim=2)
    actor_n, critic_n = vector_sizes(s)  # what the supervisor sizes the boards with
    stats = LocalStatsBlock(stats_schema(1))
    board = WeightBoard.create(segment_name(new_run_id(), "w-critic"), critic_n, role="writer")
    reader = WeightBoard.attach(board.name, "reader")
    try:
        actor_board = LocalBoard()
        critic = CriticLearner(s, "cpu", ScriptedReplay(), actor_board, board, stats.role("critic-learner"), 32)
        actor = ActorLearner(s, "cpu", ScriptedReplay(), reader, actor_board, stats.role("actor-learner"), 32)
        assert len(critic.part.critic_vector()) == critic_n == actor.part.critic_vector_size
        assert len(actor.part.actor_vector()) == actor_n == critic.part.actor_vector_size
        for _ in range(6):
            critic.update()
        actor.update()  # refreshes its critic copy from the board first
        own, copied = brn_layers(critic.part.critic), brn_layers(actor.part.critic)
        assert len(own) == len(copied) == 3  # the input + two hidden layers, each layer for both networks
        for a, b in zip(own, copied):
            assert not torch.equal(a.running_mean, torch.zeros_like(a.running_mean))  # they did move
            torch.testing.assert_close(b.running_mean, a.running_mean, rtol=0, atol=0)
            torch.testing.assert_close(b.running_var, a.running_var, rtol=0, atol=0)
        assert actor.part.log_alpha.item() == pytest.approx(critic.part.log_alpha.item())
        # so the copy evaluates exactly what the critic learner's critic evaluates in eval mode
        probe = batch(seed=5)
        evaluated = copy.deepcopy(critic.part.critic).eval()
        with torch.no_grad():
            for q_own, q_copy in zip(evaluated(probe.obs, probe.action), actor.part.critic(probe.obs, probe.action)):
                torch.testing.assert_close(q_copy, q_own, rtol=0, atol=0)
    finally:
        reader.close()
        board.close()
        board.unlink()


@pytest.mark.parametrize("hidden", [(16, 16), (64, 32, 48)])
def test_the_samplers_numpy_policy_equals_the_learners_actor(hidden):
    s = spec(obs_dim=5, act_dim=3, hidden_sizes=hidden, seed=4)
    critic_part, actor_part = make_critic_part(s, "cpu"), make_actor_part(s, "cpu")
    g = torch.Generator().manual_seed(2)
    for i in range(30):  # a trained actor, not its initialisation
        b = Batch(torch.randn(64, 5, generator=g) * 2, torch.rand(64, 3, generator=g) * 2 - 1,
                  torch.randn(64, generator=g), torch.randn(64, 5, generator=g) * 2, torch.zeros(64))
        critic_part.step(b)
        actor_part.load_critic_vector(critic_part.critic_vector())
        actor_part.step(b)
    numpy_policy = NumpyPolicy(s)
    numpy_policy.load(actor_part.actor_vector())
    assert numpy_policy.size == len(actor_part.actor_vector()) == vector_sizes(s)[0]
    obs = np.random.default_rng(0).normal(size=(9, 5)).astype(np.float32) * 2
    with torch.no_grad():
        mean, log_std = actor_part.actor(torch.from_numpy(obs))
        expected = torch.tanh(mean).numpy()
        eps = np.random.default_rng(7).standard_normal((9, 3), dtype=np.float32)
        explored = torch.tanh(mean + log_std.exp() * torch.from_numpy(eps)).numpy()
    np.testing.assert_allclose(numpy_policy.act_deterministic(obs), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(numpy_policy.explore(obs, np.random.default_rng(7), 0.0), explored, rtol=1e-5,
                               atol=1e-5)
    assert np.abs(expected).max() > 0.05


@pytest.mark.parametrize("kind", ["critic", "actor"])
def test_a_poisoned_step_changes_nothing_not_even_the_running_statistics(kind):
    s = spec(policy_delay=1)
    stats = LocalStatsBlock(stats_schema(1))
    replay, board_a, board_c = ScriptedReplay(), LocalBoard(), LocalBoard()
    if kind == "critic":
        learner = CriticLearner(s, "cpu", replay, board_a, board_c, stats.role("critic-learner"), 32)
    else:
        learner = ActorLearner(s, "cpu", replay, board_c, board_a, stats.role("actor-learner"), 32)
    for _ in range(3):
        learner.update()
    before = snapshot(learner)
    replay.poison = "obs"  # an inf in the batch: NaN batch statistics, NaN gradients
    learner.update()
    assert changed(before, learner, ignore=("generator",)) == []  # no targets to move: nothing else may change
    replay.poison = None
    learner.update()
    moved = changed(before, learner, ignore=("generator",))
    assert moved
    if kind == "critic":
        assert any("running_mean" in k for k in moved) and any("steps" in k for k in moved)
        assert all(m.steps.item() == 4 for m in brn_layers(learner.part.critic))  # 3 + 1 applied steps
    learner.flush()
    assert stats.role(f"{kind}-learner").get("nonfinite_steps") == 1
    learner.check_finite()


def test_state_dicts_round_trip_the_running_statistics_and_continue_exactly():
    a, b = make_critic_part(spec(), "cpu"), make_critic_part(spec(), "cpu")
    for i in range(4):
        a.step(batch(seed=i))
    b.load_state_dict(a.state_dict())
    b.updates = a.updates
    for x, y in zip(brn_layers(a.critic), brn_layers(b.critic)):
        assert torch.equal(x.running_mean, y.running_mean) and torch.equal(x.running_var, y.running_var)
        assert x.steps.item() == y.steps.item() == 4
    td_a, _ = a.step(batch(seed=9))
    td_b, _ = b.step(batch(seed=9))
    torch.testing.assert_close(td_a, td_b, rtol=0, atol=0)
    np.testing.assert_array_equal(a.critic_vector(), b.critic_vector())

    actor_a, actor_b = make_actor_part(spec(), "cpu"), make_actor_part(spec(), "cpu")
    actor_a.load_critic_vector(a.critic_vector())
    actor_a.step(batch(seed=3))
    actor_b.load_state_dict(actor_a.state_dict())
    assert not actor_b.critic.training  # loading weights does not put the copy back in train mode
    assert all(torch.equal(x, y) for x, y in zip(running_statistics(actor_a.critic), running_statistics(actor_b.critic)))
    np.testing.assert_array_equal(get_flat(actor_a.copy_tensors()), get_flat(actor_b.copy_tensors()))


# --- a whole run ------------------------------------------------------------------------------------------------
def test_crossq_learns_pendulum_in_serial_mode(tmp_path):
    """Measured (docs/trainer.md, "CrossQ"): seeds 1-5 reached final evaluation returns of -168, -250, -168,
    -100 and -172 after 5000 env steps with these settings (a random policy scores about -1200 to -1600)."""
    config = dataclasses.replace(
        TrainConfig(), algo="crossq", serial=True, logdir=str(tmp_path), seed=1, total_steps=5000,
        learning_starts=500, hidden_sizes=(64, 64), batch_size=128, eval_every=0, eval_episodes=5,
        log_interval=0, tb_interval=0.5, checkpoint_every=0, precision="fp32",
    )
    result = train(config, print_fn=lambda line: None)
    assert (result.critic_updates, result.actor_updates) == (4501, 4501 // 3)  # policy delay 3
    assert result.final_eval_return > -400, result.final_eval_returns
    tags = scalars(result.run_dir)
    for tag in ("losses/qf1_loss", "losses/qf2_loss", "losses/alpha", "losses/alpha_loss", "losses/actor_loss",
                "eval/episodic_return", "charts/episodic_return"):
        assert tag in tags, tag


def test_crossq_checkpoints_and_resumes(tmp_path):
    first = train(tiny(tmp_path, algo="crossq", checkpoint_every=300), print_fn=lambda line: None)
    assert (first.critic_updates, first.actor_updates) == (401, 401 // 3)
    second = train(tiny(tmp_path, algo="crossq", resume=str(first.run_dir), total_steps=900),
                   print_fn=lambda line: None)
    assert second.run_dir == first.run_dir and second.env_steps == 900 and np.isfinite(second.final_eval_return)
    # replay is not checkpointed: learning resumes once learning_starts new transitions are in
    assert second.critic_updates == first.critic_updates + (300 - 199)
    assert second.actor_updates == second.critic_updates // 3


# --- CUDA graphs (skipped without a GPU) ------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_graph_replays_the_eager_crossq_update_running_statistics_included():
    from .test_gpu_steps import eager_and_graphed

    parts = eager_and_graphed(spec())
    eager, graphed = parts["eager"][0], parts["cuda-graph"][0]
    assert parts["cuda-graph"][1].captures == 1 and eager.updates == graphed.updates == 12  # one variant
    for a, b in zip(eager.published_tensors(), graphed.published_tensors()):  # parameters, running stats, alpha
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert all(m.steps.item() == 12 for m in brn_layers(graphed.critic))


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_a_poisoned_graph_replay_leaves_the_running_statistics_alone():
    critic, actor, stats = learners("cuda:0", algo="crossq", storage=storage_with(), device_replay="on")
    for _ in range(10):  # warm-up and capture on finite data
        critic.update()
        actor.update()
    critic.flush()
    before = critic.part.critic_vector()
    critic.batches.mirror.column("obs").fill_(float("inf"))  # NaN batch statistics from now on
    for _ in range(5):
        critic.update()
    critic.metrics.flush()
    critic.guard.check()
    np.testing.assert_array_equal(before, critic.part.critic_vector())
    assert stats.snapshot()["critic-learner"]["nonfinite_steps"] == 5
