"""CrossQ's explicit step (algos/explicit_renorm.py) makes autograd's updates, through the warm-up and after it.

As tests/trainer/test_explicit_grad.py does for SAC, TD3 and DDPG: two halves from one seed, one stepped with
``step`` (autograd, the reference), the other with ``explicit_step`` on the same batches; every parameter,
Adam moment, running statistic, metric and TD error is compared. The warm-up is shortened to a few updates so
that the batch renormalisation's ``r`` and ``d`` (clipped) take part, and the running statistics are moved off
their initial values so that the clipping bites.
"""

from __future__ import annotations

import pytest
import torch

from spreeze_like.algos import make_actor_part, make_critic_part
from spreeze_like.algos.crossq_critic import BatchRenorm
from spreeze_like.algos.explicit_renorm import RenormChain
from tests.trainer.test_explicit_grad import SHAPES, assert_same_metrics, assert_same_state, batch, spec

WARMUP = 3
STEPS = 7  # three in the warm-up, four after it
# Gradients agree to ~1e-7 of their scale (~1); Adam's first moment, at beta1 0.5, is on that scale. A wrong
# term or sign differs by ~0.1.
MOMENT_ATOL = 1e-6


def short_warmup(part) -> None:
    for m in part.critic.modules():
        if isinstance(m, BatchRenorm):
            m.warmup = WARMUP


@pytest.mark.parametrize("weighted", [False, True], ids=["uniform", "is-weights"])
@pytest.mark.parametrize("shape", SHAPES, ids=["16x16", "8", "12x10x6"])
def test_crossq_critic_explicit_step_is_the_autograd_step(shape, weighted):
    s = spec("crossq", *shape)
    reference, explicit = make_critic_part(s, "cpu"), make_critic_part(s, "cpu")
    assert explicit.explicit_ok()
    for part in (reference, explicit):
        short_warmup(part)
    for i in range(STEPS):
        # batches far from the running statistics' start (mean 0, var 1): r and d hit their clips after the warm-up
        b = batch(s.obs_dim, s.act_dim, seed=i, weighted=weighted)
        b = b._replace(obs=b.obs * 6 + 4, next_obs=b.next_obs * 6 + 4)
        td_ref, metrics_ref = reference.step(b)
        td_exp, metrics_exp = explicit.explicit_step(b)
        torch.testing.assert_close(td_exp, td_ref.detach(), rtol=1e-5, atol=1e-5)
        assert_same_metrics(metrics_ref, metrics_exp)
        assert explicit.updates == reference.updates == i + 1
    # the running statistics and their step counts are buffers: compared too
    assert_same_state(reference, explicit, moment_atol=MOMENT_ATOL)
    assert int(explicit.critic.norms[0].steps) == STEPS
    assert all(p.grad is None for p in explicit.actor.parameters())


@pytest.mark.parametrize("shape", SHAPES, ids=["16x16", "8", "12x10x6"])
def test_crossq_actor_explicit_step_is_the_autograd_step(shape):
    """The actor reads its critic copy in eval mode: the running statistics, as the critic half publishes them."""
    s = spec("crossq", *shape)
    reference, explicit = make_actor_part(s, "cpu"), make_actor_part(s, "cpu")
    assert explicit.explicit_ok()
    g = torch.Generator().manual_seed(5)
    for part in (reference, explicit):
        part.log_alpha.fill_(-1.3)
    for m_ref, m_exp in zip(reference.critic.norms, explicit.critic.norms):  # trained statistics, not 0 and 1
        mean, var = torch.randn(m_ref.running_mean.shape, generator=g), torch.rand(m_ref.running_var.shape, generator=g)
        for m in (m_ref, m_exp):
            m.running_mean.copy_(mean)
            m.running_var.copy_(var + 0.2)
            m.weight.data.copy_(1.0 + 0.3 * mean)
    for i in range(STEPS):
        b = batch(s.obs_dim, s.act_dim, seed=20 + i, weighted=False)
        assert_same_metrics(reference.step(b), explicit.explicit_step(b))
    assert_same_state(reference, explicit, moment_atol=MOMENT_ATOL)
    assert all(p.grad is None for p in explicit.critic.parameters())


def test_a_frozen_eval_chain_refuses_to_write_gradients():
    s = spec("crossq", 3, 1, (8,))
    actor = make_actor_part(s, "cpu")
    chain = RenormChain(actor.critic, 0)
    acts = chain.forward(torch.randn(5, 4))
    with pytest.raises(RuntimeError, match="frozen copy"):
        chain.backward(acts, torch.ones(5, 1))
