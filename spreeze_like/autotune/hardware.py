"""Static facts about this machine: CPU, cores, memory, /dev/shm, GPUs, and a fingerprint.

GPUs are listed by a short-lived subprocess (``python -c ...`` importing torch), never in the
calling process: initialising CUDA in the supervisor before it spawns the learners would pin a
CUDA context (hundreds of MB of GPU memory) in a process that never uses it, and a broken driver
could hang or crash the caller. The subprocess reports through one JSON line on stdout; anything
else (a timeout, a crash, a torch without CUDA) becomes an empty list plus a note saying why.

Cores: ``usable_cores`` is what the planner budgets with -- the CPU affinity mask of this process
and a cgroup v2 CPU quota (containers) both cap it below the machine's logical cores.

The fingerprint names the probe cache file. It changes when anything that moves the measured rates
changes (CPU model, core count or quota, memory size, the visible GPUs, the torch version), and is
cheap: no torch import, no CUDA (GPUs are read from /proc/driver/nvidia and CUDA_VISIBLE_DEVICES).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import re
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import psutil

from spreeze_like.autotune.results import GpuInfo, Hardware

GPU_PROBE_TIMEOUT_S = 90.0  # a first CUDA init on a big box can take tens of seconds

_GPU_SCRIPT = r"""
import json, sys
out = {"gpus": [], "count": 0, "note": ""}
try:
    import torch
    if torch.version.cuda is None and torch.version.hip is None:
        out["note"] = f"torch {torch.__version__} is a CPU-only build (no CUDA)"
    elif not torch.cuda.is_available():
        out["note"] = "torch has CUDA but no usable GPU (no device, driver missing, or CUDA_VISIBLE_DEVICES empty)"
    else:
        out["count"] = torch.cuda.device_count()
        for i in range(out["count"] if "count-only" not in sys.argv else 0):
            p = torch.cuda.get_device_properties(i)
            free, total = torch.cuda.mem_get_info(i)
            out["gpus"].append({"index": i, "name": p.name, "total_memory": int(total),
                                "free_memory": int(free), "capability": f"{p.major}.{p.minor}"})
except Exception as exc:  # report, never crash the caller
    out["note"], out["failed"] = f"GPU probe failed: {type(exc).__name__}: {exc}", True
print("SPZ-GPU " + json.dumps(out))
"""


def _run_gpu_script(timeout_s: float, *args: str) -> tuple[dict | None, str]:
    """The GPU subprocess's report, or ``(None, why there is none)``."""
    try:
        proc = subprocess.run([sys.executable, "-c", _GPU_SCRIPT, *args], check=False, capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None, f"GPU probe subprocess timed out after {timeout_s:.0f} s (driver hang?)"
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("SPZ-GPU ")), None)
    if line is None:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"GPU probe subprocess exited {proc.returncode} ({tail})"
    data = json.loads(line[len("SPZ-GPU "):])
    return data, data["note"]


def probe_gpus(timeout_s: float = GPU_PROBE_TIMEOUT_S) -> tuple[list[GpuInfo], str]:
    """GPUs seen by torch in a subprocess: ``(gpus, note)``; ``note`` says why the list is empty."""
    data, note = _run_gpu_script(timeout_s)
    if data is None:
        return [], f"{note}; planning for no GPU"
    return [GpuInfo(**g) for g in data["gpus"]], note


def count_gpus(timeout_s: float = GPU_PROBE_TIMEOUT_S) -> tuple[int | None, str]:
    """How many GPUs torch sees, asked of a subprocess as :func:`probe_gpus` does, without their properties
    (those make a CUDA context per GPU in the subprocess): ``(count, note)``; the note says why 0, and
    the count is None when the probe itself failed (a timeout, a crash, an exception inside it)."""
    data, note = _run_gpu_script(timeout_s, "count-only")
    return (None if data is None or data.get("failed") else int(data["count"])), note


def cpu_model() -> str:
    """The CPU's marketing name (``/proc/cpuinfo`` on Linux, ``platform`` elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def cgroup_cpu_limit() -> float | None:
    """CPUs allowed by a cgroup v2 quota (``/sys/fs/cgroup/cpu.max``), or None when unlimited/unknown."""
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    return int(quota) / int(period)


def usable_cores() -> int:
    """Cores this process may use: the affinity mask, capped by a cgroup quota (rounded up, >= 1)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS/Windows
        cores = os.cpu_count() or 1
    limit = cgroup_cpu_limit()
    if limit is not None:
        cores = min(cores, max(1, math.ceil(limit)))
    return max(1, cores)


def driver_gpu_models() -> list[str]:
    """GPU model lines from the NVIDIA driver's /proc files (no CUDA init)."""
    base = Path("/proc/driver/nvidia/gpus")
    names = []
    try:
        for info in sorted(base.glob("*/information")):
            model = re.search(r"Model:\s*(.+)", info.read_text())
            names.append(model.group(1).strip() if model else info.parent.name)
    except OSError:
        pass
    return names


def _torch_version() -> str:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "none"


def fingerprint() -> str:
    """``<host>-<12 hex>``: stable while the hardware and torch stay the same (see the module docstring)."""
    mem_gib = round(psutil.virtual_memory().total / 2**30)
    parts = [socket.gethostname(), cpu_model(), str(psutil.cpu_count()), str(usable_cores()), f"{mem_gib}GiB",
             _torch_version(), os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"), *driver_gpu_models()]
    digest = hashlib.sha1("|".join(parts).encode()).hexdigest()[:12]
    host = re.sub(r"[^A-Za-z0-9_.-]+", "_", socket.gethostname())[:32] or "host"
    return f"{host}-{digest}"


def machine_kind() -> str:
    """``"<CPU model>, <N> cores; GPUs: <models>"``: what a benchmark's figures compare across (no CUDA init in
    this process: the driver's files, else the GPU subprocess, as a container may hide the driver's /proc).

    Not the host name: a lent machine gets a new one each lease, and two leases of one card compare.
    """
    models = driver_gpu_models() or [g.name for g in probe_gpus()[0]]
    return f"{cpu_model()}, {usable_cores()} cores; GPUs: {', '.join(models) or 'none'}"


def probe_hardware(with_gpus: bool = True) -> Hardware:
    """Collect the static facts (runs the GPU subprocess unless ``with_gpus`` is False)."""
    vm = psutil.virtual_memory()
    try:
        st = os.statvfs("/dev/shm")
        shm_total, shm_free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
    except OSError:  # no /dev/shm (macOS): the ring/replay segments then live in memory the OS gives
        shm_total = shm_free = 0
    gpus, note = probe_gpus() if with_gpus else ([], "GPU probe skipped")
    return Hardware(
        hostname=socket.gethostname(),
        cpu_model=cpu_model(),
        physical_cores=psutil.cpu_count(logical=False) or psutil.cpu_count() or 1,
        logical_cores=psutil.cpu_count() or 1,
        usable_cores=usable_cores(),
        memory_total=vm.total,
        memory_available=vm.available,
        shm_total=shm_total,
        shm_free=shm_free,
        gpus=gpus,
        gpu_note=note,
        torch_version=_torch_version(),
        load_average=os.getloadavg()[0],
    )
