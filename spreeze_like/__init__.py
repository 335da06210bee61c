"""spreeze_like: a single-desktop, high-throughput off-policy actor-critic trainer.

Process layout, shared-memory rules and the sum tree design: see README.md and
docs/ (the agreed architecture). The compiled core is ``spreeze_like._native``;
import it through :mod:`spreeze_like.native`, which fails loudly when it is missing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["Policy", "TrainConfig", "TrainResult", "__version__", "load_policy", "train"]

if TYPE_CHECKING:
    from spreeze_like.config import TrainConfig
    from spreeze_like.policy import Policy, load_policy
    from spreeze_like.training import TrainResult, train


def __getattr__(name: str) -> Any:
    """Lazy exports: ``import spreeze_like`` stays light (no torch, no gymnasium) until ``train`` is used."""
    if name == "train":
        from spreeze_like.training import train

        return train
    if name == "TrainConfig":
        from spreeze_like.config import TrainConfig

        return TrainConfig
    if name == "TrainResult":
        from spreeze_like.training import TrainResult

        return TrainResult
    if name in ("load_policy", "Policy"):
        from spreeze_like import policy

        return getattr(policy, name)
    raise AttributeError(f"module 'spreeze_like' has no attribute {name!r}")
