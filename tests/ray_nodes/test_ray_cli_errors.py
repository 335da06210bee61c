"""``--ray`` failures that must be one ``error:`` line and exit 2 before any Ray process starts.

Not marked ``ray``: the missing-Ray case is the one every machine without Ray must get right, so it runs
everywhere (Ray is hidden from the CLI's interpreter). The refused-port case needs Ray installed (the
start-up check looks for Ray first) but starts no Ray process, so it needs no network namespace.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from remote.loopback import refusing_port
from remote_harness import TINY, hidden_ray_argv, one_error_line, ray_installed

ENV = {**{k: v for k, v in os.environ.items() if not k.startswith("RAY_")}, "PYTHONWARNINGS": "ignore"}


def test_ray_flag_without_ray_installed_names_the_extra(tmp_path):
    done = subprocess.run(hidden_ray_argv("--ray", "127.0.0.1:6379", "--remote-samplers", "1", *TINY,
                                          "--total-steps", "1000", "--logdir", str(tmp_path / "runs")),
                          capture_output=True, text=True, timeout=120, env=ENV, check=False)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    line = one_error_line(done.stderr)
    assert 'pip install "spreeze_like[ray]"' in line, line


def test_hidden_ray_is_really_hidden():
    # the check above is only worth something if the wrapper hides an installed Ray
    code = "import importlib.util, sys; sys.modules['ray'] = None; print(importlib.util.find_spec('ray'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.strip() == "None"


@pytest.mark.skipif(not ray_installed(), reason='Ray is not installed (pip install -e ".[test,ray]")')
def test_cluster_address_that_refuses_fails_in_one_line_within_30_s(tmp_path):
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "spreeze_like.run", "--ray", f"127.0.0.1:{refusing_port()}",
                           "--samplers", "1", "--remote-samplers", "1", *TINY, "--total-steps", "1000",
                           "--logdir", str(tmp_path / "runs")],
                          capture_output=True, text=True, timeout=120, env=ENV, check=False)
    took = time.monotonic() - t0
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    line = one_error_line(done.stderr)
    assert "127.0.0.1" in line, line
    assert took < 30.0, f"took {took:.1f} s"
