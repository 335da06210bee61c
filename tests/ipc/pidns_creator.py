"""A live segment creator inside its own PID namespace, for the finding-6 tests (test_ipc_sweep_findings.py).

    unshare --pid --fork --mount-proc python pidns_creator.py init <run-id> <pid>

``init`` runs as pid 1 of the new namespace. It sets ``ns_last_pid`` so that the next process it
starts gets ``<pid>`` *in that namespace*, and starts this script again as the creator. The creator
makes ``/spz.<run-id>.<pid>.ring.0`` with :meth:`Segment.create` (so the name carries its pid as the
namespace sees it, exactly like a supervisor in a container with ``--ipc=host``), writes a marker
into it, prints ``{"pid": ..., "name": ...}`` and then obeys one line on stdin:

- ``die``: SIGKILL itself, leaving the segment behind for a later sweep;
- ``exit`` (or end of input): a normal exit, whose atexit hook unlinks the segment.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

MARKER = b"live creator in another pid namespace"


def init(run_id: str, pid: int) -> int:
    with open("/proc/sys/kernel/ns_last_pid", "w") as f:  # the next fork in this namespace gets `pid`
        f.write(str(pid - 1))
    return subprocess.run([sys.executable, __file__, "creator", run_id], check=False).returncode


def creator(run_id: str) -> int:
    from spreeze_like.ipc import Segment, segment_name

    seg = Segment.create(segment_name(run_id, "ring", 0), 4096)
    seg.buf[: len(MARKER)] = MARKER
    print(json.dumps({"pid": os.getpid(), "name": seg.name}), flush=True)
    if sys.stdin.readline().strip() == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "init":
        sys.exit(init(sys.argv[2], int(sys.argv[3])))
    sys.exit(creator(sys.argv[2]))
