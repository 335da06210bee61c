"""The autotuner: measure this desktop (probes), then choose the parallel settings from it (plan).

``probe`` measures (hardware facts, memcpy, ring, env and update rates) and caches the results per
machine and env; ``plan`` turns probe results into settings with a reason each; ``apply`` merges a
plan into a run's config, where every flag the user set explicitly wins. See docs/autotune.md.
"""

from __future__ import annotations
