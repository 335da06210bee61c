"""The critic steps as torch.compile sees them (``--learner-step compiled-graph`` on a GPU compiles them).

A draw from a ``torch.Generator`` is a graph break for Dynamo. Inside a called function (the target's
``q_target``), such a break splits the caller's graph at the call too, so the target and the Q regression
after it were compiled as two graphs, not one. That happened to SAC's and TD3's critic steps on 2026-11-29
(a032dcd moved the target into ``q_target``); the next H200 lease measured the compiled update at batch 256
at 2,550-2,721 updates/s, against 3,642-3,796 before (the likely cause, inferred from the graphs; the fix is
not yet measured on a GPU). The steps now draw first, in their own frame. Dynamo's tracing (``explain``, no
inductor compile) runs on the CPU, so this is checked here: both critic forwards, the target's on the next
observations and the critic's on the batch, each starting with the ``cat`` of observation and action, must
be in one graph.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

from spreeze_like.algos import make_critic_part
from spreeze_like.algos.base import Batch
from spreeze_like.algos.spec import AlgoSpec


def cats_per_graph(algo: str) -> list[int]:
    spec = AlgoSpec(algo=algo, obs_dim=5, act_dim=2, hidden_sizes=(16, 16))
    part = make_critic_part(spec, "cpu")
    g = torch.Generator().manual_seed(0)
    b = Batch(torch.randn(32, 5, generator=g), torch.rand(32, 2, generator=g) * 2 - 1, torch.randn(32, generator=g),
              torch.randn(32, 5, generator=g), torch.zeros(32))
    for _ in range(2):  # the optimiser's state exists, as in a learner's steady state
        part.step(b)
    torch._dynamo.reset()
    try:
        explained = torch._dynamo.explain(part.step)(b)
    finally:
        torch._dynamo.reset()
    return [sum(1 for n in graph.graph.nodes if n.target in (torch.cat, torch.concat)) for graph in explained.graphs]


@pytest.mark.parametrize("algo", ["sac", "td3", "ddpg"])
def test_the_target_and_the_q_regression_are_one_compiled_graph(algo):
    cats = cats_per_graph(algo)
    assert max(cats) == 2, f"critic forwards per graph: {cats} (a graph break between the target and the regression)"
