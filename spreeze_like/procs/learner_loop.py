"""What the two learner processes' loops share: restoring on resume, idling, serving checkpoints.

:class:`LearnerLoop` is the base of ``CriticLoop`` (critic_learner_proc.py) and ``ActorLoop``
(actor_learner_proc.py); each subclass writes its own ``run`` (when to update, when to wait) and
names what its checkpoint part holds besides the learner (:meth:`LearnerLoop.part_extras`).

Checkpoint protocol (the supervisor's side is in ``supervisor.py``): the supervisor raises the
request counter in the control block; a learner, between two updates, checks its state is finite,
writes its part file and acknowledges the request in its stats row. Creates nothing shared; the
part files belong to the run folder (``procs/parts.py`` says who removes them).
"""

from __future__ import annotations

from typing import Any

from spreeze_like.checkpoint import LOAD_MISMATCH, load_checkpoint, mismatch_error
from spreeze_like.procs.control import DONE, ChildArgs, Control, Napper, set_state
from spreeze_like.procs.parts import write_part


def restore(learner: Any, args: ChildArgs, role: str) -> None:
    """Load ``role``'s state from the resumed checkpoint; a mismatch is a one-line CheckpointError."""
    if not args.checkpoint_path:
        return
    try:
        learner.load_state_dict(load_checkpoint(args.checkpoint_path)["roles"][role])
    except LOAD_MISMATCH as exc:  # other hidden sizes, say
        raise mismatch_error(args.checkpoint_path, exc) from None


class LearnerLoop:
    """Idle and checkpoint handling of a learner process (see the module docstring)."""

    def __init__(self, args: ChildArgs, learner: Any, control: Control, row: Any) -> None:
        self.args, self.learner, self.control, self.row = args, learner, control, row
        self.ckpt_ack = 0

    def part_extras(self) -> dict[str, Any]:
        """What the checkpoint part holds besides the learner's state (the critic: its session count)."""
        return {}

    def _idle(self, flushed: bool, napper: Napper) -> bool:
        """Nothing to do: flush the metrics once and report ``DONE``, then nap. Returns ``flushed``."""
        if not flushed:
            self.learner.flush()
            set_state(self.row, DONE)
        napper.nap()
        return True

    def _serve_checkpoint(self) -> None:
        request = self.control.ckpt_request()
        if request > self.ckpt_ack:
            self.learner.check_finite()  # NonFiniteError (run ends) rather than a part from a diverged state
            write_part(self.args.run_dir, request, self.args.role,
                       {"learner": self.learner.state_dict(), **self.part_extras()})
            self.ckpt_ack = request
            self.row.set("ckpt_ack", float(request))
