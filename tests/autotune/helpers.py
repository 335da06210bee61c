"""Shared by the autotune tests: the recorded probe fixtures and a probe-free cache seed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from spreeze_like.autotune.results import SCHEMA_VERSION, ProbeResults

FIXTURES = Path(__file__).parent / "fixtures"
REAL = FIXTURES / "probes_real_2core_cpu.json"  # recorded on the 2-core development machine
ONE_GPU = FIXTURES / "probes_synthetic_1gpu.json"  # edited variants, see fixtures/make_synthetic.py
TWO_GPU = FIXTURES / "probes_synthetic_2gpu.json"
H200 = FIXTURES / "probes_h200_halfcheetah.json"  # the lent H200's printed probe, see fixtures/transcribe_probe_text.py
# the probe file itself, recorded by --autotune's 60 s probe on the lent H200 (2026-11-28, 17:08 UTC) and brought back
H200_RECORDED = FIXTURES / "probes_h200_halfcheetah_recorded.json"
ALL = {"0gpu-real": REAL, "1gpu-synthetic": ONE_GPU, "2gpu-synthetic": TWO_GPU, "1gpu-h200-transcribed": H200,
       "1gpu-h200-recorded": H200_RECORDED}


def load(path: Path) -> ProbeResults:
    return ProbeResults.load(path)


def seed_cache(xdg: Path, fixture: Path = REAL, env_id: str = "Pendulum-v1",
               hidden: tuple[int, ...] | None = None) -> Path:
    """Put ``fixture`` where this machine's cache file for ``env_id`` (SAC, ``hidden``) would be.

    ``hidden`` None: the hidden sizes a default run on ``env_id`` gets from its preset (Pendulum-v1: 96 x 96).
    """
    from spreeze_like.autotune import hardware
    from spreeze_like.autotune.cache import cache_path
    from spreeze_like.config import TrainConfig
    from spreeze_like.layering import lay_presets

    if hidden is None:
        hidden = lay_presets(TrainConfig(env=env_id, algo="sac"), {"env": "flag", "algo": "flag"})[0].hidden_sizes

    old = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(xdg)
    try:
        path = cache_path(hardware.fingerprint(), env_id, "sac", hidden)
    finally:
        if old is None:
            del os.environ["XDG_CACHE_HOME"]
        else:
            os.environ["XDG_CACHE_HOME"] = old
    path.parent.mkdir(parents=True, exist_ok=True)
    # as the current schema: the cache would measure a recording of an older one again (the planner
    # reads it either way; a schema-2 recording just has no multi-process sampler curve)
    data = json.loads(fixture.read_text())
    data["schema"] = SCHEMA_VERSION
    path.write_text(json.dumps(data))
    return path


def run_module(module: str, *args: str, xdg: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_CACHE_HOME": str(xdg), "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", module, *args], check=False, capture_output=True, text=True, timeout=timeout,
                          env=env)


def assert_one_line_error(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr + proc.stdout
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
