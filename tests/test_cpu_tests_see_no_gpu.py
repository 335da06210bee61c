"""The CPU tests see no GPU, on any machine (tests/conftest.py, ``pytest_runtest_protocol``); the GPU tests see theirs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

CUDA = torch.cuda.is_available()


def test_a_cpu_test_and_its_processes_resolve_auto_devices_to_the_cpu():
    assert os.environ.get("CUDA_VISIBLE_DEVICES") == ""
    code = "from spreeze_like.devices import resolve_devices; print(*resolve_devices('auto', 'auto'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.split() == ["cpu", "cpu"]


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_a_gpu_test_keeps_the_gpus():
    assert os.environ.get("CUDA_VISIBLE_DEVICES") != ""
    code = "from spreeze_like.devices import resolve_devices; print(*resolve_devices('auto', 'auto'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.split()[0] == "cuda:0"
