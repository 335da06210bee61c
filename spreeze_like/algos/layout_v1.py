"""Checkpoints of format 1: what their plain critics become in format 2, so that older runs resume.

Format 1 (spreeze_like up to 907d1e4) held each Q network of SAC's, TD3's and DDPG's critic as an
MLP of its own (``qs.<q>.<index>.weight``, ``nn.Linear`` layout ``[out, in]``). Format 2 stacks the
networks layer by layer (``layers.<k>.weight`` of shape ``[n_q, in, out]``, ``layers.<k>.bias`` of
``[n_q, 1, out]``; ``networks.EnsembleLinear``), which changes three things in a learner's state:

* the critic modules' state dicts (the critic, its target, the actor learner's copy);
* the critic optimiser's per-parameter moments: the same numbers, stacked as the parameters are;
* the parameter indices of that optimiser's groups: group 0 has ``n_q`` times fewer entries, so the
  indices of later groups (SAC's ``log_alpha``) move down.

The numbers are only moved, never changed: an upgraded checkpoint computes the same Q values and
continues with the same Adam moments (tests/trainer/test_checkpoint_upgrade.py checks both against
the format-1 fixtures). CrossQ's critic did not change in format 2; format 3 stacks it
(``algos/layout_v2.py``, which uses this module's optimiser restacking). Called by
``checkpoint.load_checkpoint`` for format-1 payloads only; a pure function of the payload, which it
updates in place. Owns no process or shared resource.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import torch

CRITIC_MODULES = ("critic", "critic_target", "critic_copy")
_KEY = re.compile(r"^qs\.(\d+)\.(\d+)\.(weight|bias)$")


def upgrade_payload(payload: dict[str, Any]) -> None:
    """Rewrite a format-1 payload's plain-critic state into format 2's stacked layout, in place.

    Raises ValueError if a critic's state is not the per-network layout format 1 wrote.
    """
    if payload.get("config", {}).get("algo") == "crossq":
        return
    for role in payload["roles"].values():
        part = role.get("part") if isinstance(role, dict) else None
        if not isinstance(part, dict) or "modules" not in part:
            continue  # a sampler's state: no networks
        n_q = 0
        for name in CRITIC_MODULES:
            if name in part["modules"]:
                part["modules"][name], n_q = stacked_critic(part["modules"][name])
        optimizer = part.get("optimizers", {}).get("q_optimizer")
        if optimizer is not None:
            part["optimizers"]["q_optimizer"] = stacked_optimizer(optimizer, n_q)


def per_network(state: dict[str, torch.Tensor], key: re.Pattern[str],
                layout: str) -> tuple[dict[tuple[int, int, str], torch.Tensor], int, list[int]]:
    """A per-network critic state dict (``qs.<q>.<index>.<kind>``, matched by ``key``) by ``(q, index,
    kind)``, with its number of networks and the sorted module indices; ValueError names ``layout``."""
    found: dict[tuple[int, int, str], torch.Tensor] = {}
    for name, tensor in state.items():
        match = key.match(name)
        if match is None:
            raise ValueError(f"critic state key {name!r} is not {layout}")
        found[(int(match[1]), int(match[2]), match[3])] = tensor
    return found, 1 + max(q for q, _, _ in found), sorted({i for _, i, _ in found})


def stacked_critic(state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], int]:
    """A format-1 critic state dict in format 2's layout, and its number of Q networks."""
    # indices: the Linear layers' places in each nn.Sequential
    found, n_q, indices = per_network(state, _KEY, "format 1's per-network layout")
    out = {f"layers.{k}.{kind}": _stack_like_parameters([found[(q, index, kind)] for q in range(n_q)])
           for k, index in enumerate(indices) for kind in ("weight", "bias")}
    return out, n_q


def _stack_like_parameters(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Stack the networks' tensors of one layer (parameters, or their Adam moments) as EnsembleLinear
    holds them: weights ``[out, in]`` transposed to ``[n, in, out]``, biases to ``[n, 1, out]``."""
    if tensors[0].dim() == 2:
        return torch.stack([t.t() for t in tensors]).contiguous()
    return torch.stack(tensors).unsqueeze(1)


# How one stacked parameter is made from the networks' own ones: (its place among each network's
# parameters, the function that joins the ``n_q`` tensors). The same join serves its Adam moments.
Plan = list[tuple[int, Callable[[list[torch.Tensor]], torch.Tensor]]]


def stacked_optimizer(state: dict[str, Any], n_q: int, plan: Plan | None = None) -> dict[str, Any]:
    """A critic optimiser state (torch.optim layout) of separate networks in a stacked layout.

    Group 0 held the ``n_q`` networks' parameters one network after another (``per_q`` each); the
    stacked critic holds ``per_q`` parameters, made as ``plan`` says (format 2's plain critic, the
    default: the same order, :func:`_stack_like_parameters`). Later groups keep their parameters, at
    indices moved down.
    """
    groups = [dict(g) for g in state["param_groups"]]
    old_ids = list(groups[0]["params"])
    if n_q < 1 or len(old_ids) % n_q:
        raise ValueError(f"critic optimiser group of {len(old_ids)} parameters does not split into {n_q} networks")
    per_q = len(old_ids) // n_q
    plan = [(j, _stack_like_parameters) for j in range(per_q)] if plan is None else plan
    if sorted(j for j, _ in plan) != list(range(per_q)):
        raise ValueError(f"critic optimiser group of {per_q} parameters per network does not fit the critic's layout")
    shift = len(old_ids) - per_q
    new_state: dict[int, dict[str, torch.Tensor]] = {}
    for new_id, (j, join) in enumerate(plan):
        olds = [state["state"].get(old_ids[q * per_q + j]) for q in range(n_q)]
        if all(s is None for s in olds):
            continue  # no update yet: Adam creates the moments at the first step
        if any(s is None for s in olds):
            raise ValueError("critic optimiser state holds moments for some networks only")
        new_state[new_id] = {
            "step": olds[0]["step"],
            "exp_avg": join([s["exp_avg"] for s in olds]),
            "exp_avg_sq": join([s["exp_avg_sq"] for s in olds]),
        }
    for group in groups[1:]:
        for old_id in group["params"]:
            if old_id in state["state"]:
                new_state[old_id - shift] = state["state"][old_id]
        group["params"] = [old_id - shift for old_id in group["params"]]
    groups[0]["params"] = list(range(per_q))
    return {"state": new_state, "param_groups": groups}
