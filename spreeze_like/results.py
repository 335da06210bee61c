"""What a finished run reports: :class:`TrainResult`.

A module of its own that imports nothing from spreeze_like, so that both modes (``serial`` and
``supervisor``) can build a result, and ``training`` can return one, without any of them importing
another upward. It owns no files, processes or segments.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["TrainResult"]


@dataclass
class TrainResult:
    """What a finished run reports (``spreeze_like.train`` returns it; the CLI prints it)."""

    run_dir: Path
    env_steps: int
    critic_updates: int
    actor_updates: int
    episodes: int
    final_eval_return: float
    final_eval_returns: tuple[float, ...]
    # (env step, mean eval return, wall seconds since this session started) of every evaluation
    evals: list[tuple[int, float, float]] = field(default_factory=list)
    # why it ended before config.total_steps: "return" (an evaluation reached stop_at_return), "time limit"
    # (time_limit_s), or "" (it ran to its last step); see spreeze_like/early_stop.py
    stop_reason: str = ""
    wall_s: float = 0.0
    mode: str = "serial"
    # per episode of the final evaluation, when the env says (info["is_success"] or info["success"]); else None
    final_eval_successes: tuple[bool, ...] | None = None

    @property
    def stopped_early(self) -> bool:
        """Whether the run ended before ``config.total_steps`` (``stop_reason`` says why)."""
        return bool(self.stop_reason)
