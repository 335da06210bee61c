"""What this desktop can do for spreeze_like: a thin wrapper of ``python -m spreeze_like.profile``.

    python tools/profile_hardware.py                      # Pendulum-v1, about 1.5 minutes
    python tools/profile_hardware.py --env HalfCheetah-v5 --budget 90
    python tools/profile_hardware.py --help

Prints a report, writes profile.json and TensorBoard curves to runs/profile__<unixtime>/, and
refreshes the probe cache that ``python -m spreeze_like.run --autotune`` uses.
"""

from __future__ import annotations

import sys

from spreeze_like.profile import main

if __name__ == "__main__":
    sys.exit(main())
