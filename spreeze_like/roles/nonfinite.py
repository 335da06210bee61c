"""Learner guard against NaN and inf: skip a non-finite step, stop after several in a row.

A :class:`NonFiniteGuard` is attached to one learner half (:class:`~spreeze_like.algos.base.CriticPart`
or :class:`~spreeze_like.algos.base.ActorPart`) by its role. Where the check lives, and why:

- **Gradients, just before each optimiser step.** A step pre-hook on every optimiser of the part
  runs the fused non-finite check that ``torch.amp.GradScaler`` uses
  (``torch._amp_foreach_non_finite_check_and_unscale_`` with scale 1) and ORs the result into one
  0-dim ``found_inf`` tensor shared by the part's optimisers. The fused Adam the algorithms use
  reads that tensor (its ``found_inf`` attribute, GradScaler's protocol) and, when it is 1, leaves
  parameters, moments and step counts exactly as they were. So a skipped step changes no
  parameter and no optimiser state, and needs no copy of the networks and no host-device sync.
  Gradients catch every source: a NaN row in the batch, a reward so large that the loss overflows,
  a diverged copy of the other learner's network.
- What a skipped step still does: the soft target update (targets move toward the unchanged
  parameters, a step they would take anyway), the algorithm's ``updates`` count (pacing counts
  the batch as consumed), the generator draws. Its metrics are masked out of the TensorBoard means;
  with prioritized replay its TD errors are not written as priorities.
- Each algorithm half has one optimiser (SAC's critic: the Q networks and ``log_alpha`` as two
  parameter groups of one Adam), so a step is applied or skipped as a whole.

Counting: skipped steps, and the longest run of consecutive skipped steps, accumulate in device
tensors; :meth:`NonFiniteGuard.check` reads them (one sync) every ``check_every`` steps and before
each checkpoint part, adds the skipped steps to the role's ``nonfinite_steps`` counter
(TensorBoard ``stats/nonfinite_steps``) and raises :class:`~spreeze_like.errors.NonFiniteError`
once ``max_in_row`` steps in a row were skipped (``--max-nonfinite-steps``). The stop may thus come
up to ``check_every - 1`` steps late; those steps were skipped too, so nothing changed meanwhile.

:meth:`NonFiniteGuard.assert_finite_state` checks every parameter, buffer, optimiser tensor and
extra tensor of the part; learners call it before writing a checkpoint part, so a non-finite state
ends the run instead of replacing the last good checkpoint.

Owns no process and no shared resource: tensors on the learner's device, dropped with the learner.
"""

from __future__ import annotations

from typing import Any

import torch

from spreeze_like.checkpoint import nonfinite_tensors
from spreeze_like.errors import NonFiniteError


class NonFiniteGuard:
    """See the module docstring.

    Args:
        part: the learner half whose optimisers are guarded (each a
            :class:`~spreeze_like.algos.optim.FusedAdam`, which honours ``found_inf``).
        role: role name for messages (``critic-learner``, ``actor-learner``).
        stats: the role's stats writer (counter ``nonfinite_steps``).
        max_in_row: consecutive skipped steps that end the run.
        check_every: steps between reads of the device counters.
    """

    def __init__(self, part: Any, role: str, stats: Any, max_in_row: int, check_every: int = 20) -> None:
        self.part, self.role, self.stats = part, role, stats
        self.max_in_row, self.check_every = max_in_row, check_every
        device = part.device
        self.found = torch.zeros((), device=device)  # 1.0 once a guarded optimiser saw a non-finite gradient
        self._one = torch.ones((), device=device)
        self._skipped = torch.zeros((), device=device)  # skipped steps since the last check
        self._run = torch.zeros((), device=device)  # current run of consecutive skipped steps
        self._worst = torch.zeros((), device=device)  # longest run since the last check
        self._pending = 0
        self.total_skipped = 0
        for optimizer in part.optimizers.values():
            optimizer.found_inf = self.found
            optimizer.register_step_pre_hook(self._check_gradients)

    def _check_gradients(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        if grads:
            torch._amp_foreach_non_finite_check_and_unscale_(grads, self.found, self._one)

    def begin(self) -> None:
        """Before a step: no non-finite gradient seen yet."""
        self.found.zero_()

    def end(self) -> torch.Tensor:
        """After a step: count it; returns a 0-dim float tensor, 1.0 if the step was applied, 0.0 if skipped."""
        applied = self.count()
        self.tick()
        return applied

    def count(self) -> torch.Tensor:
        """The device half of :meth:`end` (no host work: a CUDA graph captures it with the step)."""
        found = self.found
        self._skipped.add_(found)
        self._run.add_(found).mul_(found)
        torch.maximum(self._worst, self._run, out=self._worst)
        return 1.0 - found

    def tick(self) -> None:
        """The host half of :meth:`end`: one more step counted; read the counters every ``check_every``."""
        self._pending += 1
        if self._pending >= self.check_every:
            self.check()

    def check(self) -> None:
        """Read the counters (one sync); add skipped steps to stats; raise after ``max_in_row`` in a row."""
        if self._pending == 0:
            return
        skipped, worst = torch.stack([self._skipped, self._worst]).tolist()
        self._skipped.zero_()
        self._worst.copy_(self._run)
        self._pending = 0
        if skipped:
            self.total_skipped += int(skipped)
            self.stats.add("nonfinite_steps", skipped)
        if worst >= self.max_in_row:
            raise NonFiniteError(
                f"{self.role}: {int(worst)} updates in a row had NaN/inf gradients (limit --max-nonfinite-steps "
                f"{self.max_in_row}); the networks diverged or the data is broken: check the env's rewards and "
                "observations, or lower the learning rates"
            )

    def assert_finite_state(self) -> None:
        """Raise NonFiniteError if any parameter, buffer or optimiser tensor of the part is NaN or inf."""
        state = {
            **{name: module.state_dict() for name, module in self.part.modules.items()},
            **{name: list(optimizer.state.values()) for name, optimizer in self.part.optimizers.items()},
            **self.part.tensors,
        }
        bad = [path.lstrip("/") for path in nonfinite_tensors(state)]
        if bad:
            raise NonFiniteError(
                f"{self.role}: non-finite values in {', '.join(bad[:3])}{' ...' if len(bad) > 3 else ''}; no "
                "checkpoint was written from this state: check the env's rewards and observations, or lower the "
                "learning rates"
            )
