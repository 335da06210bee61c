"""Seeds derived from the run seed, one stream per (role, index, generation).

Every random stream of a run (each env, each sampler's warm-up and exploration noise, each
learner's sampling noise, network initialisation, the replay samplers) gets its own seed from
``derive_seed(run_seed, role, index, generation)``. Streams therefore do not depend on how many
other roles exist or in which process they run, which is what makes the serial mode reproducible
and lets the parallel mode give every process the same seeds the serial mode would.
``generation`` counts resumes, so a resumed run does not replay the first run's episodes.
"""

from __future__ import annotations

import random
import zlib

import numpy as np


def derive_seed(run_seed: int, role: str, index: int = 0, generation: int = 0) -> int:
    """A 31-bit seed for one stream; stable across Python versions (no ``hash()``)."""
    words = [run_seed & 0xFFFFFFFF, zlib.crc32(role.encode()), index, generation]
    return int(np.random.SeedSequence(words).generate_state(1)[0] & 0x7FFFFFFF)


def seed_process(run_seed: int, role: str, index: int = 0) -> None:
    """Seed the process-global generators (python, numpy, torch) for one role's process.

    Roles draw from their own generators; this only pins whatever library code draws from the
    globals, so that two runs of the same process do the same thing.
    """
    import torch

    seed = derive_seed(run_seed, role + "/process", index)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
