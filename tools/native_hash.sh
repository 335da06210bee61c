#!/usr/bin/env bash
# Prints a short hash of what the native core is built from (native/'s sources, CMakeLists included, and
# pyproject.toml's build settings), the same on this machine and on a lent GPU machine (no git there: the files
# themselves, in a fixed order). tools/device_prep.sh writes it beside the core it builds (.whl/native.sha256);
# tools/gpu_session.sh refuses a carried core whose hash is not that of the carried sources, so that a lease
# never measures a core built from older C++.
set -euo pipefail
cd "$(dirname "$0")/.."
{ find native -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name 'CMakeLists.txt' \) -print0 \
    | LC_ALL=C sort -z | xargs -0 sha256sum; sha256sum pyproject.toml; } | sha256sum | cut -c1-16
