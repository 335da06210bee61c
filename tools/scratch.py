"""Where a benchmark's own runs go: a folder the user names, kept; else a scratch folder under the temporary
directory, removed when the benchmark ends well and kept (with its path printed) when it fails, so that the logs
its error points at are still there.

Before this, bench_resume, bench_seeds, bench_learner_rate and bench_parallel_vs_serial left a folder in /tmp per
call; the smoke tests of the first two run them in every CI run, which left three folders each time (bench_seeds makes one per mode).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def runs_folder(keep_in: str | Path | None, prefix: str) -> Iterator[Path]:
    """``keep_in`` (made if missing, never removed) when given, else a fresh ``tempfile.mkdtemp(prefix=prefix)``
    removed on a clean exit of the block; an exception (a failed run's ``SystemExit`` too) keeps it and says where."""
    if keep_in:
        path = Path(keep_in)
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    except BaseException:
        print(f"# the runs' folder is kept for a look: {path}", file=sys.stderr, flush=True)
        raise
    shutil.rmtree(path, ignore_errors=True)
