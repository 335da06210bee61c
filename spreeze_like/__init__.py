"""spreeze_like: a single-desktop, high-throughput off-policy actor-critic trainer.

Process layout, shared-memory rules and the sum tree design: see README.md and
docs/ (the agreed architecture). The compiled core is ``spreeze_like._native``;
import it through :mod:`spreeze_like.native`, which fails loudly when it is missing.
"""

__version__ = "0.1.0"
