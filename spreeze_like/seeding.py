"""Seeds derived from the run seed, one stream per (role, index, generation).

Every random stream of a run (each env, each sampler's warm-up and exploration noise, each
learner's sampling noise, network initialisation, the replay samplers) gets its own seed from
``derive_seed(run_seed, role, index, generation)``. Streams therefore do not depend on how many
other roles exist or in which process they run, which is what makes the serial mode reproducible
and lets the parallel mode give every process the same seeds the serial mode would.
``generation`` counts resumes, so a resumed run does not replay the first run's episodes.
One exception: the first reset of the first generation's envs follows gymnasium's ``seed + i``
(:func:`env_seed`), so that a peer run with the same seed starts from the same states.
"""

from __future__ import annotations

import random
import zlib

import numpy as np


def derive_seed(run_seed: int, role: str, index: int = 0, generation: int = 0) -> int:
    """A 31-bit seed for one stream; stable across Python versions (no ``hash()``)."""
    words = [run_seed & 0xFFFFFFFF, zlib.crc32(role.encode()), index, generation]
    return int(np.random.SeedSequence(words).generate_state(1)[0] & 0x7FFFFFFF)


def env_seed(run_seed: int, env_index: int, generation: int = 0) -> int:
    """The seed of an env's first reset: env ``env_index`` (global over the run's samplers) of a run.

    The first generation follows gymnasium's vector-env convention, which SB3, SBX and CleanRL use
    too: env ``i`` of a run seeded ``s`` is reset first with ``s + i``, later resets continue the env's
    own RNG. A run and a peer's run with the same seed therefore play episodes from the same initial
    states, which makes a per-seed comparison a paired one (on Pendulum-v1 the initial states are the
    largest source of spread in the training return). The convention's known cost, kept for that:
    with several envs, runs seeded ``s`` and ``s + 1`` share all but one env's episodes. A resumed
    generation takes a derived seed, so it does not replay the first generation's episodes.
    """
    if generation == 0:
        return (run_seed + env_index) & 0x7FFFFFFF
    return derive_seed(run_seed, "env", env_index, generation)


def eval_seed(run_seed: int, env_index: int) -> int:
    """The seed every evaluation resets evaluator env ``env_index`` with: the same start states each
    time, so the eval curve moves only with the policy. The benchmark's peers evaluate from these too."""
    return derive_seed(run_seed, "evaluator", env_index)


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
