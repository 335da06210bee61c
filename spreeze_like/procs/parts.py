"""Checkpoints of a parallel run: learners write parts, the supervisor writes the checkpoint last.

Protocol (coordinated through the control row, see :mod:`spreeze_like.procs.control`):

1. The supervisor raises ``ckpt_request`` to ``k``.
2. Each learner, between two updates, writes its part ``checkpoints/parts/<k>/<role>.pt``
   atomically (tmp file, fsync, rename; :func:`write_part`), then sets ``ckpt_ack = k`` in its row.
   Every tensor is moved to the CPU first, so the supervisor can read the part without CUDA.
3. Once both acks reached ``k`` the supervisor assembles the serial mode's payload
   (:func:`assemble_payload`: the learners' parts, the samplers' counters from the stats block,
   the evaluation history), writes it with :func:`spreeze_like.checkpoint.save_checkpoint`
   (atomic again, the newest ``keep_checkpoints`` kept) and deletes ``parts/<k>``.

So ``--resume RUN_DIR`` loads a parallel run's checkpoint exactly like a serial one (and a serial
run's checkpoint resumes in parallel). A crash at any step leaves the previous checkpoint intact:
parts are not checkpoints, the loader never looks at them, and the next save removes stale ones.

Samplers write no part: their state is two counters, which the stats block already holds, and RNG
states, which a resumed session re-derives from the run seed and its generation (a resumed sampler
must not replay the previous session's random streams anyway). Their entries in the payload carry
freshly derived RNG states only to keep the serial format.

Replay contents are not saved (docs/parallel.md says why); a resumed run refills replay with the
restored policy before its learners continue.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from spreeze_like.checkpoint import atomic_torch_save, capture_process_rng, checkpoint_dir
from spreeze_like.seeding import derive_seed


def parts_dir(run_dir: str | Path, request: int) -> Path:
    return checkpoint_dir(run_dir) / "parts" / str(request)


def to_cpu(obj: Any) -> Any:
    """A copy of a nested state dict with every tensor on the CPU (the supervisor never touches CUDA)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_cpu(v) for v in obj)
    return obj


def write_part(run_dir: str | Path, request: int, role: str, state: dict[str, Any]) -> Path:
    """Write one learner's part of checkpoint ``request`` atomically; returns its path."""
    folder = parts_dir(run_dir, request)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{role}.pt"
    atomic_torch_save(to_cpu(state), path)
    return path


def read_part(run_dir: str | Path, request: int, role: str) -> dict[str, Any]:
    return torch.load(parts_dir(run_dir, request) / f"{role}.pt", map_location="cpu", weights_only=True)


def remove_parts(run_dir: str | Path, up_to: int | None = None) -> None:
    """Delete part folders (all, or those numbered ``<= up_to``)."""
    root = checkpoint_dir(run_dir) / "parts"
    if not root.is_dir():
        return
    for folder in root.iterdir():
        if up_to is None or (folder.name.isdigit() and int(folder.name) <= up_to):
            shutil.rmtree(folder, ignore_errors=True)
    if up_to is None:
        shutil.rmtree(root, ignore_errors=True)


def sampler_state(seed: int, index: int, generation: int, env_steps: int, episodes: int) -> dict[str, Any]:
    """A sampler's entry in the serial payload: its counters and RNG states derived like SamplerWorker's."""
    rng = np.random.default_rng(derive_seed(seed, "sampler/actions", index, generation))
    noise = torch.Generator().manual_seed(derive_seed(seed, "sampler/noise", index, generation))
    return {"env_steps": int(env_steps), "episodes": int(episodes), "rng": rng.bit_generator.state,
            "noise": noise.get_state()}


def assemble_payload(
    config: dict[str, Any],
    critic_part: dict[str, Any],
    actor_part: dict[str, Any],
    samplers: list[tuple[int, int]],
    env_steps: int,
    generation: int,
    evals: list[tuple[int, float]],
    seed: int,
) -> dict[str, Any]:
    """The serial mode's checkpoint payload from the parallel run's pieces.

    Args:
        config: the resolved config as a dict.
        critic_part, actor_part: the learners' parts (``{"learner": state_dict, ...}``).
        samplers: per sampler, (env steps, episodes) over the whole run.
        env_steps: global env step of the checkpoint.
        generation: this session's resume count.
        evals: (env step, mean return) of every evaluation so far.
        seed: the run seed.
    """
    roles: dict[str, Any] = {
        f"sampler-{i}": sampler_state(seed, i, generation, steps, episodes)
        for i, (steps, episodes) in enumerate(samplers)
    }
    roles["critic-learner"] = critic_part["learner"]
    roles["actor-learner"] = actor_part["learner"]
    return {
        "config": config, "env_steps": int(env_steps), "generation": generation,
        "critic_updates": int(critic_part["learner"]["updates"]), "actor_updates": int(actor_part["learner"]["updates"]),
        "episodes": int(sum(e for _, e in samplers)), "update_credit": 0.0,
        "evals": [[int(s), float(r)] for s, r in evals], "roles": roles, "process_rng": capture_process_rng(),
        "saved_at": time.time(), "mode": "parallel",
    }
