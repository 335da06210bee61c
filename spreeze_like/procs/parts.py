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

Samplers write no part: their state is two counters, which the stats block already holds (a remote
sampler's row too: the Ray bridge writes it, and its counters go into the payload like a local one's), and RNG
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

from spreeze_like.checkpoint import (
    atomic_torch_save,
    capture_process_rng,
    checkpoint_dir,
    make_run_subfolder,
    resume_hint,
)
from spreeze_like.errors import CheckpointError
from spreeze_like.seeding import derive_seed

LEARNERS = ("critic-learner", "actor-learner")  # the roles that write parts


def parts_dir(run_dir: str | Path, request: int) -> Path:
    return checkpoint_dir(run_dir) / "parts" / str(request)


def to_cpu(obj: Any) -> Any:
    """A copy of a nested state dict with every tensor on the CPU (the supervisor never touches CUDA)."""
    import torch  # here and below, not at the top: the supervisor imports torch only to assemble a checkpoint

    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_cpu(v) for v in obj)
    return obj


def write_part(run_dir: str | Path, request: int, role: str, state: dict[str, Any]) -> Path:
    """Write one learner's part of checkpoint ``request`` atomically; returns its path.

    The folders below the run folder are created one by one, never the run folder itself: a run
    folder deleted mid-run is a one-line CheckpointError here, not re-created (review finding 15).
    """
    folder = make_run_subfolder(run_dir, checkpoint_dir(run_dir).name, "parts", str(request))
    path = folder / f"{role}.pt"
    atomic_torch_save(to_cpu(state), path)
    return path


def read_part(run_dir: str | Path, request: int, role: str) -> dict[str, Any]:
    """One learner's part of checkpoint ``request``; missing or unreadable is a one-line CheckpointError."""
    import torch

    path = parts_dir(run_dir, request) / f"{role}.pt"
    try:
        part = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - missing file, torn zip, refused pickle: all "cannot use this part"
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise CheckpointError(f"cannot read the {role}'s part of checkpoint {request} ({path}: {why})") from None
    if not isinstance(part, dict):
        raise CheckpointError(f"the {role}'s part of checkpoint {request} ({path}) holds no state dict")
    return part


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
    import torch

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
    evals: list[tuple[int, float, float]],
    seed: int,
) -> dict[str, Any]:
    """The serial mode's checkpoint payload from the parallel run's pieces.

    Args:
        config: the resolved config as a dict.
        critic_part, actor_part: the learners' parts (``{"learner": state_dict, ...}``).
        samplers: per sampler, (env steps, episodes) over the whole run.
        env_steps: global env step of the checkpoint.
        generation: this session's resume count.
        evals: (env step, mean return, wall seconds into its session) of every evaluation so far.
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
        "evals": [[int(s), float(r), float(w)] for s, r, w in evals], "roles": roles, "process_rng": capture_process_rng(),
        "saved_at": time.time(), "mode": "parallel",
    }


class CheckpointCoordinator:
    """The supervisor's side of the protocol above: request, wait for the learners' acks, assemble, save.

    Args:
        run_dir: the run folder.
        control: the stats block's ``control`` row (only the supervisor writes it).
        config: the resolved config.
        generation: this session's resume count.
        restored: per sampler row, local and remote, (env steps, episodes) restored from the resumed checkpoint.
        last: the newest checkpoint so far (the resumed one, or None).
    """

    def __init__(self, run_dir: Path, control: Any, config: Any, generation: int, restored: list[tuple[int, int]],
                 last: Path | None) -> None:
        self.run_dir, self.control, self.config = run_dir, control, config
        self.generation, self.restored, self.last = generation, restored, last
        self.request = 0
        self.saved = 0  # checkpoints written this session: one may rewrite the path of the last (same env step)
        self.pending_since: float | None = None

    @property
    def pending(self) -> bool:
        return self.pending_since is not None

    def ask(self) -> None:
        """Raise ``ckpt_request``: the learners write their parts between two updates."""
        self.request += 1
        self.control.set("ckpt_request", float(self.request))
        self.pending_since = time.monotonic()

    def try_finish(self, snap: dict[str, dict[str, float]], env_step: int, evals: list[tuple[int, float, float]],
                   timeout_s: float) -> str:
        """``"saved"`` once written, ``"waiting"`` for acks, ``"skipped"`` after ``timeout_s`` without them."""
        from spreeze_like.checkpoint import save_checkpoint

        k, cfg = self.request, self.config
        if any(snap[r]["ckpt_ack"] < k for r in LEARNERS):
            if time.monotonic() - (self.pending_since or 0.0) > timeout_s:
                self.pending_since = None
                return "skipped"
            return "waiting"
        samplers = [(self.restored[i][0] + int(snap[f"sampler-{i}"]["env_steps"]),
                     self.restored[i][1] + int(snap[f"sampler-{i}"]["episodes"])) for i in range(cfg.sampler_rows)]
        try:
            parts = [read_part(self.run_dir, k, role) for role in LEARNERS]
            for role, part in zip(LEARNERS, parts):
                if not isinstance(part.get("learner"), dict) or "updates" not in part["learner"]:
                    raise CheckpointError(f"the {role}'s part of checkpoint {k} holds no learner state")
        except CheckpointError as exc:
            raise CheckpointError(f"{exc}; the run stopped; {resume_hint(self.last, self.run_dir)}") from None
        payload = assemble_payload(cfg.to_dict(), parts[0], parts[1], samplers, env_step, self.generation, evals,
                                   cfg.seed)
        self.last = save_checkpoint(self.run_dir, payload, env_step, keep=cfg.keep_checkpoints)
        self.saved += 1
        remove_parts(self.run_dir, up_to=k)
        self.pending_since = None
        return "saved"
