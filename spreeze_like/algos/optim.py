"""Adam for the learners: torch's fused Adam kernel, driven without ``torch.optim``.

Why not ``torch.optim.Adam(fused=True)``: building any ``torch.optim`` optimiser imports
``torch._dynamo`` (``Optimizer.add_param_group`` is wrapped in ``torch._disable_dynamo``, which
imports it on the first call). That import is 1.0-1.3 s of CPU, paid by each learner process at
start, exactly when both learners, the sampler and the evaluator compete for the cores; a short run
(Pendulum learns in ~15 s here) loses a tenth of its wall time to it. Nothing here needs dynamo.

What :class:`FusedAdam` keeps identical to ``torch.optim.Adam(fused=True)``:

* the update: the same kernel (``torch._fused_adam_``) with the same arguments, after the same
  step-count increment, so parameters and moments after a step are bitwise equal
  (``tests/trainer/test_optim.py`` checks this against ``torch.optim.Adam``);
* skipped steps: ``found_inf`` (GradScaler's protocol, a 0-dim float tensor on the parameters'
  device). When it is 1 the kernel leaves parameters and moments unchanged and the step count is
  taken back, so a skipped step changes nothing (see ``roles/nonfinite.py``);
* the state dict layout (``state`` by parameter index, ``param_groups`` with ``params`` indices), so a
  checkpoint's optimiser state loads into either;
* ``register_step_pre_hook``, ``zero_grad(set_to_none=True)``, ``param_groups``, ``state``.

What it does not do: weight decay, AMSGrad, ``maximize``, sparse or complex parameters, parameters
on several devices or of several dtypes in one optimiser (a learner's networks share both, so each
group is one kernel call). Those are rejected at construction. Owns no process or shared resource.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

StepHook = Callable[[Any, tuple, dict], None]


class FusedAdam:
    """Adam over one or more parameter groups (each with its own ``lr``); see the module docstring.

    Args:
        params: the parameters of the first group.
        lr: learning rate of the first group.
        betas: Adam's moment decay rates (one pair for all groups).
        eps: term added to the denominator.
    """

    def __init__(self, params: Iterable[torch.Tensor], lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:
        self.defaults = {"lr": lr, "betas": betas, "eps": eps}
        self.param_groups: list[dict[str, Any]] = []
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}
        self.found_inf: torch.Tensor | None = None
        self._pre_hooks: list[StepHook] = []
        self.add_param_group({"params": list(params)})

    def add_param_group(self, group: dict[str, Any]) -> None:
        params = list(group["params"])
        if not params:
            raise ValueError("a FusedAdam group needs at least one parameter")
        for p in params:
            if not isinstance(p, torch.Tensor) or not p.is_leaf or not p.requires_grad:
                raise ValueError("FusedAdam optimises leaf tensors that require grad")
            if p.is_complex() or p.is_sparse:
                raise ValueError("FusedAdam does not take complex or sparse parameters")
            if any(p is q for g in self.param_groups for q in g["params"]):
                raise ValueError("a parameter appears in two FusedAdam groups")
            first = self.param_groups[0]["params"][0] if self.param_groups else params[0]
            if (p.device, p.dtype) != (first.device, first.dtype):  # a learner's networks share both
                raise ValueError("FusedAdam takes parameters of one device and dtype (one kernel call per group)")
        extra = set(group) - {"params", *self.defaults}
        if extra:
            raise ValueError(f"FusedAdam groups take lr, betas and eps only, not {sorted(extra)}")
        self.param_groups.append({**self.defaults, **group, "params": params})

    def register_step_pre_hook(self, hook: StepHook) -> None:
        """``hook(optimizer, args, kwargs)`` runs before every ``step`` (as torch.optim's does)."""
        self._pre_hooks.append(hook)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if set_to_none:
                    p.grad = None
                elif p.grad is not None:
                    p.grad.zero_()

    def _state_of(self, p: torch.Tensor) -> dict[str, torch.Tensor]:
        state = self.state.get(p)
        if state is None:
            # torch keeps the fused step count as a float32 tensor on the parameter's device
            state = {
                "step": torch.zeros((), dtype=torch.float32, device=p.device),
                "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
            }
            self.state[p] = state
        return state

    @torch.no_grad()
    def step(self) -> None:
        for hook in self._pre_hooks:
            hook(self, (), {})
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            states = [self._state_of(p) for p in params]
            steps = [s["step"] for s in states]
            found = self.found_inf
            if found is not None and found.device != params[0].device:
                found = found.to(params[0].device)
            beta1, beta2 = group["betas"]
            torch._foreach_add_(steps, 1)
            torch._fused_adam_(
                params,
                [p.grad for p in params],
                [s["exp_avg"] for s in states],
                [s["exp_avg_sq"] for s in states],
                [],
                steps,
                lr=group["lr"], beta1=beta1, beta2=beta2, weight_decay=0.0, eps=group["eps"],
                amsgrad=False, maximize=False, grad_scale=None, found_inf=found,
            )
            if found is not None:
                torch._foreach_sub_(steps, [found] * len(steps))

    # --- checkpoints: torch.optim's state-dict layout -----------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            ids = []
            for p in group["params"]:
                index[id(p)] = len(index)
                ids.append(index[id(p)])
            groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": ids})
        state = {index[id(p)]: dict(s) for p, s in self.state.items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a state dict of this layout (ours or ``torch.optim.Adam``'s), copying its tensors.

        Raises ValueError if the groups or parameter counts differ (the checkpoint is of other networks).
        """
        saved = state_dict["param_groups"]
        if len(saved) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        by_index: dict[int, torch.Tensor] = {}
        for group, saved_group in zip(self.param_groups, saved):
            if len(group["params"]) != len(saved_group["params"]):
                raise ValueError("loaded state dict contains a parameter group that doesn't match the size of "
                                 "optimizer's group")
            by_index.update(zip(saved_group["params"], group["params"]))
        new_state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}
        for key, values in state_dict["state"].items():
            p = by_index[int(key)]
            s = {}
            for name in ("step", "exp_avg", "exp_avg_sq"):
                t = values[name]
                if name == "step":
                    s[name] = torch.as_tensor(t, dtype=torch.float32).detach().clone().to(p.device)
                else:
                    if t.shape != p.shape:
                        raise ValueError(f"loaded {name} has shape {tuple(t.shape)}, the parameter {tuple(p.shape)}")
                    s[name] = t.detach().to(device=p.device, dtype=p.dtype, copy=True)
            new_state[p] = s
        for group, saved_group in zip(self.param_groups, saved):
            group.update({key: saved_group[key] for key in self.defaults if key in saved_group})  # floats, a tuple
        self.state = new_state
