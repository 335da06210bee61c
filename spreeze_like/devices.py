"""Device choice for the two learners.

``auto`` follows the agreed layout: two or more GPUs put the actor learner on ``cuda:0`` and the
critic learner on ``cuda:1`` (each gets a whole device); one GPU holds both; no GPU means CPU.
An explicit device that this machine does not have is a ConfigError, not a silent fallback: a
user who asked for a GPU and silently got the CPU would only find out from a slow run.

``precision auto`` picks bfloat16 mixed precision only where it is known to pay: CPU learners on a
CPU with native bf16 dot products (x86 ``avx512_bf16`` or AMX). There a 256-wide SAC critic update
runs about 1.9x faster than in fp32 (BENCHMARKS.md, "Mixed precision"); on CPUs without them bf16
is not known to pay (not measured: no such CPU here). On a GPU, fp32 learners use TF32 matmuls
(algos/base.py: the batch-65536 critic step 259 -> 389 updates/s across two calls on an H100, not
an A/B in one run); bf16 there is not measured,
so both keep fp32 unless asked.

The GPU count comes from :func:`cuda_device_count`, one function, so tests can mock it.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path
from typing import Any

from spreeze_like.errors import ConfigError


def build_has_gpu_backend(version_py: str) -> bool:
    """False when a torch ``version.py`` says the build has neither CUDA nor ROCm (``cuda = None``, ``hip = None``)."""
    return not all(re.search(rf"^{name}\b[^=\n]*= None\s*$", version_py, re.MULTILINE) for name in ("cuda", "hip"))


def _torch_version_file() -> str | None:
    """The text of the installed torch's ``version.py``, found without importing torch (None if unreadable)."""
    spec = importlib.util.find_spec("torch")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    try:
        return (Path(locations[0]) / "version.py").read_text() if locations else None
    except OSError:
        return None


def cuda_device_count() -> int:
    """Number of usable CUDA devices (0 when torch has no CUDA), asked without CUDA in this process.

    The supervisor resolves the devices before it spawns the roles, and it never initialises CUDA
    (``torch.cuda.is_available()`` initialises the driver) nor imports torch (~0.8 s of every
    parallel run's start on a CPU machine, docs/startup.md). A CPU-only torch build is recognised
    from its ``version.py``; a CUDA or ROCm build is asked in a subprocess
    (:func:`spreeze_like.autotune.hardware.count_gpus`), once per process. A subprocess that fails
    or hangs reads as "no GPU", said in one warning line; an explicit ``--*-device cuda`` then
    stops with the usual error.
    """
    text = _torch_version_file()
    if text is not None and not build_has_gpu_backend(text):
        return 0
    visible = tuple(os.environ.get(name) for name in _VISIBILITY)
    if visible not in _counted:
        from spreeze_like.autotune.hardware import count_gpus

        count, note = count_gpus()
        if count is None:  # the probe failed, not merely found no GPU
            print(f"warning: counting GPUs failed ({note}); the learners use the CPU", file=sys.stderr, flush=True)
        _counted[visible] = count or 0
    return _counted[visible]


# cuda_device_count's answers in this process, by the variables that choose the GPUs a process sees (the
# subprocess inherits them; the tests hide GPUs from the CPU tests with CUDA_VISIBLE_DEVICES)
_VISIBILITY = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")
_counted: dict[tuple[str | None, ...], int] = {}


def bind_learner_device(device: str) -> None:
    """Make a learner process's GPU its current CUDA device, before it makes any CUDA object.

    Without it a learner on ``cuda:1`` keeps ``cuda:0`` current: a CUDA context and pinned-memory
    bookkeeping there, and every call that means "the current device" (an event recorded without a
    stream, a graph's generator state) on the other GPU. Nothing to do on the CPU.
    """
    if device.startswith("cuda"):
        import torch

        torch.cuda.set_device(torch.device(device))


def cpu_has_native_bf16() -> bool:
    """True when /proc/cpuinfo lists avx512_bf16 or amx_bf16 (False where there is no /proc/cpuinfo)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"avx512_bf16", "amx_bf16"})
    except OSError:
        pass
    return False


# bf16 autocast pays on a CPU only for updates with enough arithmetic per layer: it casts every hidden layer's
# input and weight each step, a fixed cost that a small matmul does not repay. Measured with
# tools/bench_precision.py on a 2-vCPU AMD EPYC with avx512_bf16 (2026-11-29; fp32 time / bf16 time, critic and
# actor steps, batch x widest hidden width squared): 64@100 0.54-0.63, 96@256 0.68-0.70 (Pendulum-v1's preset),
# 256@100 0.92-0.95, 256@128 1.09, 128@512 1.06, 192@256 1.04, 256@256 1.30-1.32, 128@1024 1.40-1.44.
BF16_MIN_WORK = 2**23  # batch x width^2 from which bf16 is the faster (8.4 M: 256@128, 128@512)
# Against the explicit fp32 step of SAC, TD3 and DDPG (algos/explicit_grad.py), 0.5-0.9x autograd's time,
# bf16 (autograd's step under autocast) pays later. tools/bench_precision.py (its fp32 side: the explicit step) on the
# same machine, 2026-11-29, critic and actor: 256@128 0.81-0.85, 128@512 0.86-1.00, 96@1024 0.69-0.81 (8.4-9.4 M),
# 256@192 0.95-0.98, 128@768 0.77-0.91, 192@384 0.97-1.03, 96@1536 1.00-1.07 (12.6-14.2 M), 256@256 1.04-1.16,
# 128@1024 0.93-1.22 (16.8 M), 96@2048 1.27-1.30 (18.9 M). Not CrossQ's (algos/explicit_renorm.py): its critic step,
# the one that runs three times as often, tied with bf16 at BF16_MIN_WORK and lost above it (HalfCheetah sizes,
# 2026-11-29: 256@128 0.92-0.97, 128@512 1.08, 256@160 1.16, 256@192 1.09-1.18), so config.BF16_LATE_ALGOS leaves it out.
BF16_MIN_WORK_EXPLICIT = 2**24


def bf16_min_work(explicit: bool = False) -> int:
    """Batch x widest layer^2 from which bf16 is faster than fp32 (``explicit``: fp32 would run the explicit step,
    else autograd's)."""
    return BF16_MIN_WORK_EXPLICIT if explicit else BF16_MIN_WORK


def bf16_pays(batch_size: int, widest: int, explicit: bool = False) -> bool:
    """Whether a CPU update of ``batch_size`` rows through hidden layers up to ``widest`` wide is faster in bf16
    than in fp32 (``explicit``: see :func:`bf16_min_work`)."""
    return batch_size * widest * widest >= bf16_min_work(explicit)


def resolve_precision(precision: str, devices: tuple[str, ...], native_bf16: bool | None = None,
                      update: tuple[int, int] | None = None, explicit: bool = False) -> str:
    """``auto`` -> ``bf16`` when every learner is on a CPU with native bf16 and the update is large enough for
    it to pay (``update``: batch size and widest hidden layer; None: any size; ``explicit``: fp32 would run the
    explicit step), else ``fp32``; others unchanged."""
    if precision != "auto":
        return precision
    native = cpu_has_native_bf16() if native_bf16 is None else native_bf16
    big = update is None or bf16_pays(*update, explicit=explicit)
    return "bf16" if native and big and all(d == "cpu" for d in devices) else "fp32"


def _check(name: str, device: str, count: int) -> str:
    if device == "cuda":
        device = "cuda:0"
    if device.startswith("cuda:"):
        index = int(device.split(":", 1)[1])
        if count == 0:
            raise ConfigError(f"--{name} {device}: CUDA is not available on this machine; use --{name} cpu or auto")
        if index >= count:
            raise ConfigError(f"--{name} {device}: this machine has {count} GPU(s) (cuda:0..cuda:{count - 1})")
    if device == "mps":
        import torch

        if not torch.backends.mps.is_available():
            raise ConfigError(f"--{name} mps: MPS is not available on this machine; use --{name} cpu or auto")
    return device


def tool_device(parser: Any, device: str | None, flag: str = "device") -> str:
    """A benchmark tool's ``--<flag>``: ``auto`` (or None) is ``cuda:0`` when there is a GPU, else ``cpu``; a
    device this machine lacks ends the tool before it makes anything, with one ``error:`` line and exit status
    2 (``parser.exit``, the tool's argparse parser), not a traceback from deep inside torch."""
    if device in (None, "auto"):
        return "cuda:0" if cuda_device_count() else "cpu"
    try:
        return _check(flag, device, cuda_device_count() if device.startswith("cuda") else 0)
    except ConfigError as exc:
        parser.exit(2, f"error: {exc}\n")


def resolve_devices(actor_device: str, critic_device: str, count: int | None = None) -> tuple[str, str]:
    """Resolve ``auto`` and check explicit devices; returns (actor_device, critic_device)."""
    if count is None:  # not asked when neither learner can be on a GPU (the ask may cost a subprocess)
        needs = any(d == "auto" or d.startswith("cuda") for d in (actor_device, critic_device))
        count = cuda_device_count() if needs else 0
    if count >= 2:
        auto_actor, auto_critic = "cuda:0", "cuda:1"
    elif count == 1:
        auto_actor = auto_critic = "cuda:0"
    else:
        auto_actor = auto_critic = "cpu"
    actor = auto_actor if actor_device == "auto" else _check("actor-device", actor_device, count)
    critic = auto_critic if critic_device == "auto" else _check("critic-device", critic_device, count)
    return actor, critic
