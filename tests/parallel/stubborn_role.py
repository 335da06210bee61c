"""A stand-in role body for RoleProcess tests: it says it started, then sleeps until stopped; its ``finally``
leaves a file, so a test can see that the supervisor's stop unwound it rather than killing it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any


def run(args: Any) -> None:
    folder = Path(args.run_dir)
    (folder / "started").write_text("")
    try:
        while True:
            time.sleep(0.1)
    finally:
        (folder / "unwound").write_text("")
