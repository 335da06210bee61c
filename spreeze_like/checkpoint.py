"""Checkpoints: written atomically, loaded safely, refused when they belong to another run kind.

Layout: ``<run_dir>/checkpoints/ckpt_<env_step, at least 10 digits>.pt``; the newest ``keep`` are kept
(ordered by the step number, not the name, so a run past 10^10 steps keeps finding its newest).
A write goes to a temporary file in the same folder, is flushed and fsynced, renamed over the final
name with ``os.replace`` (atomic on POSIX) and the folder is fsynced, so a crash at any moment leaves
either the previous checkpoint set or the new one, never a torn file under a final name. Leftover
temporary files of a killed writer are ignored by the loader and removed by the next save.

Payload (a plain dict, loadable with ``torch.load(weights_only=True)``): ``format_version``, the
resolved ``config``, counters (``env_steps``, ``updates``, ...), the ``generation`` (resume count),
every role's ``state_dict`` (networks, optimisers, SAC's log_alpha, per-role RNG generators,
sampler counters) and the process RNG states (python, numpy, torch). The replay buffer is not in
it (it can be GBs): ``--save-replay`` writes it beside the final checkpoint of a session
(:mod:`spreeze_like.replay.persist`); without one a resumed run refills it before the learners continue.

Every way a checkpoint can be unusable is a one-line :class:`~spreeze_like.errors.CheckpointError`.
A payload holding a NaN or inf tensor is never written (:class:`~spreeze_like.errors.NonFiniteError`):
the last good checkpoint stays the newest.
"""

from __future__ import annotations

import json
import os
import random
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from spreeze_like.errors import CheckpointError, NonFiniteError, first_line

# 2: plain critics stack their Q networks layer by layer (algos/networks.EnsembleLinear); 3: CrossQ's critic
# too (algos/crossq_critic.CrossQCritic). Format 1 loads through algos/layout_v1.py and then layout_v2.py,
# format 2 through layout_v2.py; an older spreeze_like refuses a newer format in one line.
FORMAT_VERSION = 3
_LAST_READER = {1: "907d1e4", 2: "8a9cfc5"}  # the last spreeze_like that wrote each older format
_NAME = re.compile(r"^ckpt_(\d{10,})\.pt$")


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def make_run_subfolder(run_dir: str | Path, *names: str) -> Path:
    """``run_dir/names...`` created level by level, never ``run_dir`` itself (no ``parents=True``).

    A run folder deleted or moved mid-run must not come back as a folder holding only checkpoints,
    which ``--resume`` then refuses for its missing config.json (review finding 15): that is a
    one-line CheckpointError instead, and so is any other failure to create the folder (a full disk).
    """
    folder = Path(run_dir)
    try:
        for name in names:
            folder = folder / name
            folder.mkdir(exist_ok=True)
    except FileNotFoundError:
        raise CheckpointError(f"run folder {run_dir} was deleted or moved while this run used it: no checkpoint can "
                              "be written there; the run stopped") from None
    except OSError as exc:
        raise CheckpointError(f"cannot create {folder}: {exc.strerror or exc}; free space there (or pick another "
                              "--logdir), then --resume the run from its last good checkpoint") from None
    return folder


def checkpoint_step(path: str | Path) -> int:
    """The env step in a checkpoint's file name (``ckpt_<env_step>.pt``)."""
    match = _NAME.match(Path(path).name)
    if match is None:
        raise ValueError(f"{path} is not named like a checkpoint (ckpt_<env step>.pt)")
    return int(match.group(1))


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Final-named checkpoints of a run, oldest first."""
    folder = checkpoint_dir(run_dir)
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found)]


def fsync_dir(folder: Path) -> None:
    """Make a rename or a new entry in ``folder`` durable (also the replay folders', :mod:`spreeze_like.replay.persist`)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_torch_save(obj: Any, path: Path) -> None:
    """``torch.save`` to ``path`` via tmp file + fsync + ``os.replace`` + folder fsync.

    A failed write (a full disk, a quota, a folder gone) leaves no temporary file and no partial
    checkpoint, and raises a one-line :class:`CheckpointError`: the previous checkpoint stays.
    """
    import torch  # here, not at the top: the supervisor imports this module long before it saves (docs/startup.md)

    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except (OSError, RuntimeError) as exc:
        # torch's zip writer reports a failed file write as a RuntimeError: on a full disk its message is
        # "[enforce fail at inline_container.cc:...] . unexpected pos ..." with the OSError only as the
        # context; a RuntimeError with no OSError behind it and no word of writing is a bug, re-raised
        cause = _os_error_in(exc)
        if isinstance(exc, RuntimeError) and cause is None and "write" not in str(exc).lower():
            raise
        why = cause.strerror if cause is not None and cause.strerror else first_line(exc, 200)
        raise CheckpointError(f"cannot write checkpoint {path}: {why}; free space there (or pick another --logdir), "
                              "then --resume the run from its last good checkpoint") from None
    finally:
        if tmp.exists():
            tmp.unlink()
    fsync_dir(path.parent)


def _os_error_in(exc: BaseException) -> OSError | None:
    """The OSError in ``exc``'s chain (itself, its cause or its context), if any."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, OSError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return None


# Exceptions a state_dict load raises when the checkpoint's shapes or layout differ from the networks
# built from this config (other hidden sizes, another spreeze_like version's optimiser groups).
LOAD_MISMATCH = (RuntimeError, KeyError, ValueError)


def mismatch_error(path: str | Path, exc: Exception) -> CheckpointError:
    """The one-line error for a checkpoint whose state does not load into this config's networks."""
    return CheckpointError(f"{path} does not fit this config ({first_line(exc, 200)}); resume with the settings and the "
                           "spreeze_like version of the run that wrote it")


def resume_hint(checkpoint: str | Path | None, run_dir: str | Path) -> str:
    """The end of every "the run stopped" message: where to continue from (a run stopped before its first
    checkpoint has nothing to resume: ``--resume`` would refuse its folder)."""
    if checkpoint is None:
        return f"no checkpoint was written, so {run_dir} holds nothing to resume: start the run again"
    return f"the last good checkpoint is {checkpoint}; resume with --resume {run_dir}"


def run_dir_hint(run_dir: str | Path) -> str:
    """:func:`resume_hint` for the newest checkpoint in ``run_dir`` (none: nothing to resume)."""
    found = list_checkpoints(run_dir)
    return resume_hint(found[-1] if found else None, run_dir)


def interrupted_before_training(run_dir: str | Path) -> KeyboardInterrupt:
    """What a Ctrl-C / SIGTERM raises between the run folder's making and a mode's own stop handlers (importing
    the trainer, building envs and networks, loading a resume's replay): the line says what the folder holds,
    and the CLI prints it (:func:`spreeze_like.console.exit_status`)."""
    return KeyboardInterrupt(f"interrupted before training began; {run_dir_hint(run_dir)}")


@contextmanager
def stop_before_training_says_so(run_dir: str | Path) -> Iterator[None]:
    """A Ctrl-C / SIGTERM (as KeyboardInterrupt) inside leaves with :func:`interrupted_before_training`'s line."""
    try:
        yield
    except KeyboardInterrupt:
        raise interrupted_before_training(run_dir) from None


def interrupted_line(env_steps: int, checkpoint: str | Path | None, run_dir: str | Path) -> str:
    """What both modes print after an orderly stop on Ctrl-C / SIGTERM."""
    return (f"[spreeze] interrupted at {env_steps:,} env steps; checkpoint {checkpoint}; "
            f"resume with: python -m spreeze_like.run --resume {run_dir}")


def nonfinite_tensors(obj: Any, prefix: str = "") -> list[str]:
    """Paths of the floating-point tensors in a nested dict/list that hold a NaN or inf."""
    import torch

    if isinstance(obj, torch.Tensor):
        return [prefix] if obj.is_floating_point() and not bool(torch.isfinite(obj).all()) else []
    if isinstance(obj, dict):
        return [p for k, v in obj.items() for p in nonfinite_tensors(v, f"{prefix}/{k}")]
    if isinstance(obj, (list, tuple)):
        return [p for i, v in enumerate(obj) for p in nonfinite_tensors(v, f"{prefix}/{i}")]
    return []


def save_checkpoint(run_dir: str | Path, payload: dict[str, Any], env_step: int, keep: int = 2) -> Path:
    """Write one checkpoint atomically and delete all but the newest ``keep``.

    Raises NonFiniteError, writing nothing, if a tensor of the payload is NaN or inf.
    """
    bad = nonfinite_tensors(payload)
    if bad:
        raise NonFiniteError(f"refused to write checkpoint at env step {env_step}: {', '.join(bad[:3])} hold NaN/inf; "
                             "the previous checkpoint stays the newest")
    folder = make_run_subfolder(run_dir, checkpoint_dir(run_dir).name)
    for stale in folder.glob(".ckpt_*.tmp.*"):  # a killed writer's leftovers
        stale.unlink(missing_ok=True)
    path = folder / f"ckpt_{env_step:010d}.pt"
    atomic_torch_save({"format_version": FORMAT_VERSION, **payload}, path)
    for old in list_checkpoints(run_dir)[:-keep]:
        old.unlink(missing_ok=True)
    return path


def load_latest(run_dir: str | Path) -> tuple[dict[str, Any], Path]:
    """The newest checkpoint of a run folder. Raises CheckpointError if there is none or it is unusable."""
    found = list_checkpoints(run_dir)
    if not found:
        raise CheckpointError(f"no checkpoint in {checkpoint_dir(run_dir)}; nothing to resume (start a new run)")
    return load_checkpoint(found[-1]), found[-1]


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    import torch

    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - zip/pickle/EOF errors all mean "unreadable"
        raise CheckpointError(
            f"checkpoint {path} is corrupt or unreadable ({type(exc).__name__}); delete it to resume from an older one"
        ) from None
    version = payload.get("format_version") if isinstance(payload, dict) else None
    if version not in (*_LAST_READER, FORMAT_VERSION) or not isinstance(payload.get("roles"), dict):
        raise CheckpointError(f"{path} is not a spreeze_like checkpoint of format {FORMAT_VERSION}; start a new run")
    if version != FORMAT_VERSION:
        from spreeze_like.algos import layout_v1, layout_v2

        try:
            if version == 1:
                layout_v1.upgrade_payload(payload)
            layout_v2.upgrade_payload(payload)
        except (ValueError, KeyError, TypeError, IndexError, RuntimeError) as exc:
            raise CheckpointError(f"{path} is a format-{version} checkpoint whose critic cannot be converted ({exc}); "
                                  f"resume it with spreeze_like {_LAST_READER[version]} or start a new run") from None
        payload["format_version"] = FORMAT_VERSION
    return payload


def check_compatible(payload: dict[str, Any], env: str, algo: str, path: str | Path,
                     hidden_sizes: tuple[int, ...] | None = None, env_kwargs: dict[str, Any] | None = None,
                     critic_hidden_sizes: tuple[int, ...] | None = None, n_step: int | None = None) -> None:
    """Refuse a checkpoint made for another env, algorithm or network shape (its networks would not fit
    or mean anything), naming the setting, before any process starts.

    Other ``--env-kwargs`` make another env (its observation size may differ, its dynamics or rewards do), so
    they are refused as another env id is; a checkpoint from before the flag was made with none."""
    saved = payload.get("config", {})
    if saved.get("env") != env or saved.get("algo") != algo:
        raise CheckpointError(
            f"checkpoint {path} is from env {saved.get('env')!r} with algo {saved.get('algo')!r}, not {env!r} with "
            f"{algo!r}; resume with the same --env/--algo or start a new run without --resume"
        )
    then_kwargs = saved.get("env_kwargs") or {}
    if env_kwargs is not None and then_kwargs != env_kwargs:
        raise CheckpointError(
            f"checkpoint {path} was trained with --env-kwargs {json.dumps(then_kwargs)}, not {json.dumps(env_kwargs)}: "
            "another env; resume without --env-kwargs (the run's own are kept) or start a new run without --resume"
        )
    then = saved.get("hidden_sizes")
    if hidden_sizes is not None and isinstance(then, (list, tuple)) and tuple(then) != tuple(hidden_sizes):
        widths = " ".join(map(str, then))
        raise CheckpointError(
            f"checkpoint {path} holds networks with --hidden-sizes {widths}, not {' '.join(map(str, hidden_sizes))}; "
            f"resume without --hidden-sizes (or with --hidden-sizes {widths}), or start a new run without --resume"
        )
    # the critic's widths as built: its own, else the actor's (a checkpoint from before the flag: the actor's)
    then_critic = tuple(saved.get("critic_hidden_sizes") or (then if isinstance(then, (list, tuple)) else ()))
    now_critic = tuple(critic_hidden_sizes or hidden_sizes or ())
    if then_critic and now_critic and then_critic != now_critic:
        widths = " ".join(map(str, then_critic))
        raise CheckpointError(
            f"checkpoint {path} holds critics with hidden widths {widths}, not {' '.join(map(str, now_critic))}; "
            f"resume without --critic-hidden-sizes (or with --critic-hidden-sizes {widths}), or start a new run "
            "without --resume"
        )
    # a saved replay's rows hold returns of the run's N and bootstrap with gamma^N: another N would misread them
    then_n = int(saved.get("n_step") or 1)  # a checkpoint from before the flag: one-step rows
    if n_step is not None and then_n != n_step:
        raise CheckpointError(
            f"checkpoint {path} was trained with --n-step {then_n}, not {n_step} (its replay rows hold {then_n}-step "
            f"returns); resume without --n-step (or with --n-step {then_n}), or start a new run without --resume"
        )


def capture_process_rng() -> dict[str, Any]:
    """Process-global RNG states in a weights_only-loadable form."""
    import torch

    name, key, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": {"name": name, "key": key.tolist(), "pos": pos, "has_gauss": has_gauss, "cached": cached},
        "torch": torch.get_rng_state(),
    }


def restore_process_rng(state: dict[str, Any]) -> None:
    import torch

    random.setstate(state["python"])
    n = state["numpy"]
    np.random.set_state((n["name"], np.array(n["key"], dtype=np.uint32), n["pos"], n["has_gauss"], n["cached"]))
    torch.set_rng_state(state["torch"])
