"""What a tool in tools/ accepts, from its own ``--help`` (shared by the tests that check commands
written down for later: BENCHMARKS.md's command column, tools/gpu_session.sh's calls)."""

from __future__ import annotations

import functools
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@functools.cache
def help_text(script: str) -> str:
    """``python <script> --help``'s output (``script`` relative to the repository); asserts it ran."""
    done = subprocess.run([sys.executable, script, "--help"], cwd=REPO, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, f"`python {script} --help` failed:\n{done.stderr[-2000:]}"
    return done.stdout


def accepts(script: str, flag: str) -> bool:
    """Whether ``flag`` (``--name``, an ``=value`` part ignored) stands in the script's ``--help``."""
    flag = flag.split("=", 1)[0]
    return re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_text(script)) is not None
