"""A stand-in for a command of ours, started by tests/test_run_launch.py through ``run_launch.start_run``.

``python -m launch_stub FOLDER MODE``: writes ``FOLDER/started`` (its pid and its group's), then
- ``stubborn``: ignores SIGTERM and starts a grandchild in its process group that does the same (a run's
  roles), both sleeping until killed;
- ``printing``: prints the launcher's pid it was given (``-`` for none) to stdout and a line to stderr, and
  exits 3;
- ``counting``: appends its number to ``FOLDER/signals`` per SIGTERM or SIGINT and exits 143 half a second after
  the first (a run's orderly stop, which a second signal would force).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def main() -> None:
    folder, mode = Path(sys.argv[1]), sys.argv[2]
    if mode == "printing":
        print(os.environ.get("SPREEZE_DIE_WITH_PARENT", "-"))
        print("to stderr", file=sys.stderr)
        sys.exit(3)
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        code = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(600)"
        child = subprocess.Popen([sys.executable, "-c", code])
        (folder / "started").write_text(f"{os.getpid()} {os.getpgid(0)} {child.pid}")
        time.sleep(600)
    else:
        got: list[float] = []

        def on_term(signum: int, frame: object) -> None:
            got.append(time.monotonic())
            with open(folder / "signals", "a") as file:
                file.write(f"{signum}\n")

        signal.signal(signal.SIGTERM, on_term)
        signal.signal(signal.SIGINT, on_term)
        (folder / "started").write_text(f"{os.getpid()} {os.getpgid(0)}")
        while not got or time.monotonic() - got[0] < 0.5:
            time.sleep(0.02)
        sys.exit(143)


if __name__ == "__main__":
    main()
