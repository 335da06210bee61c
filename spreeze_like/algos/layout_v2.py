"""Checkpoints of formats 1 and 2: what their CrossQ critics become in format 3, so that older runs resume.

Formats 1 and 2 (spreeze_like up to 8a9cfc5) held each of CrossQ's Q networks as an ``nn.Sequential``
of its own: ``qs.<q>.<index>`` is a ``BatchRenorm`` (``weight``, ``bias`` and the buffers
``running_mean``, ``running_var``, ``steps``) or an ``nn.Linear`` (``weight [out, in]``, ``bias``),
``BRN, Linear, ReLU, BRN, ..., Linear``. Format 3 (``algos/crossq_critic.CrossQCritic``) stacks them:

* ``norms.<k>`` is the k-th Batch Renormalization of every network, ``n_q * width`` channels, network
  ``q``'s channels at ``q * width``: its parameters and running statistics are the networks' own,
  concatenated; its ``steps`` is their common count (they always committed together; counts that
  differ are refused, not guessed);
* ``layers.<k>`` is the k-th linear layer of every network, features first: ``weight [n_q, out, in]``
  (``nn.Linear``'s own layout, stacked), ``bias [n_q, out, 1]``;
* the critic optimiser's moments are joined as their parameters are, and its groups re-indexed
  (``layout_v1.stacked_optimizer``, with this layout's plan).

The numbers are only moved, never changed: an upgraded checkpoint computes the same Q values, in train
and eval mode, and continues with the same Adam moments (tests/trainer/test_checkpoint_upgrade.py,
against real format-1 and format-2 fixtures). Called by ``checkpoint.load_checkpoint`` for payloads of
format 1 or 2 (after ``layout_v1``, which leaves CrossQ alone); a pure function of the payload, which it
updates in place. Owns no process or shared resource.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from spreeze_like.algos.layout_v1 import CRITIC_MODULES, Plan, per_network, stacked_optimizer

_KEY = re.compile(r"^qs\.(\d+)\.(\d+)\.(weight|bias|running_mean|running_var|steps)$")
_PARAMETERS = ("weight", "bias")
_JOIN = {  # how the networks' tensors of one kind become the stacked one
    ("norms", "weight"): torch.cat, ("norms", "bias"): torch.cat,
    ("norms", "running_mean"): torch.cat, ("norms", "running_var"): torch.cat,
    ("layers", "weight"): torch.stack, ("layers", "bias"): lambda ts: torch.stack(ts).unsqueeze(-1),
}


def upgrade_payload(payload: dict[str, Any]) -> None:
    """Rewrite a CrossQ payload of format 1 or 2 into format 3's stacked critic, in place (other
    algorithms: nothing to do). Raises ValueError if a critic is not the per-network layout they wrote."""
    if payload.get("config", {}).get("algo") != "crossq":
        return
    for role in payload["roles"].values():
        part = role.get("part") if isinstance(role, dict) else None
        if not isinstance(part, dict) or "modules" not in part:
            continue  # a sampler's state: no networks
        n_q, plan = 0, None
        for name in CRITIC_MODULES:
            if name in part["modules"]:
                part["modules"][name], n_q, plan = stacked_crossq_critic(part["modules"][name])
        optimizer = part.get("optimizers", {}).get("q_optimizer")
        if optimizer is not None and plan is not None:
            part["optimizers"]["q_optimizer"] = stacked_optimizer(optimizer, n_q, plan)


def stacked_crossq_critic(state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], int, Plan]:
    """A per-network CrossQ critic state dict in format 3's layout, its number of Q networks, and the
    plan that stacks its optimiser's moments the same way."""
    # indices: the modules with state (norms and linear layers), in each nn.Sequential's order
    found, n_q, indices = per_network(state, _KEY, "the per-network layout of CrossQ's formats 1 and 2")
    is_norm = {i: (0, i, "running_mean") in found for i in indices}
    # each network's parameters, in its nn.Sequential's order: (weight, bias) of every module
    position = {(i, kind): 2 * rank + _PARAMETERS.index(kind) for rank, i in enumerate(indices) for kind in _PARAMETERS}
    out: dict[str, torch.Tensor] = {}
    plan: Plan = []
    for group in ("norms", "layers"):  # CrossQCritic registers its norms, then its layers
        for k, i in enumerate(i for i in indices if is_norm[i] == (group == "norms")):
            kinds = ("weight", "bias", "running_mean", "running_var") if group == "norms" else _PARAMETERS
            for kind in kinds:
                out[f"{group}.{k}.{kind}"] = _JOIN[(group, kind)]([found[(q, i, kind)] for q in range(n_q)])
                if kind in _PARAMETERS:
                    plan.append((position[(i, kind)], _JOIN[(group, kind)]))
            if group == "norms":
                steps = [found[(q, i, "steps")] for q in range(n_q)]
                if any(not torch.equal(s, steps[0]) for s in steps):
                    raise ValueError(f"the networks' batch renormalisations at layer {k} counted different updates")
                out[f"{group}.{k}.steps"] = steps[0]
    return out, n_q, plan
