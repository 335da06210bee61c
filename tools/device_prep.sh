#!/usr/bin/env bash
# Prepare on this CPU machine, in one command, the ignored folder .whl/ that a lent GPU machine's call of
# tools/gpu_session.sh carries (`carry: [".whl"]`): the wheels the device image lacks, for its Python 3.12
# (../shared/tools/device-wheels.sh: gymnasium, MuJoCo, posix_ipc, SB3, SBX and what SBX needs), and our
# native core built for Python 3.12 (`_native.cpython-312-x86_64-linux-gnu.so`, out of a wheel of this
# checkout). Device minutes are scarce: this runs before the first call, never on the device.
#
#   bash tools/device_prep.sh [PYTHON3.12]        # default: the first python3.12 found that runs
#
# It writes what the core was built from (.whl/native.sha256, tools/native_hash.sh; gpu_session.sh refuses a core
# built from other sources), then loads the built core with that Python and prints the size of .whl/ (the whole working
# tree that travels must stay under 64 MiB). Creates .whl/ (listed in .git/info/exclude) and a scratch
# folder for the wheel build, which it removes.
set -euo pipefail
cd "$(dirname "$0")/.."
is312() { "$1" -c 'import sys; raise SystemExit(sys.version_info[:2] != (3, 12))' >/dev/null 2>&1; }
py=""
# the argument, else the first that runs as 3.12 (a pyenv shim on PATH may exist and fail)
for candidate in ${1:-python3.12 /root/.pyenv/versions/3.12*/bin/python3.12 /usr/bin/python3.12}; do
  if is312 "$candidate"; then py=$candidate; break; fi
done
[ -n "$py" ] || { echo "error: no working Python 3.12 (${1:-none found}); pass a 3.12 interpreter's path" >&2; exit 2; }
fetch=../shared/tools/device-wheels.sh
[ -f "$fetch" ] || { echo "error: $fetch not found (the shared folder beside this checkout)" >&2; exit 2; }

bash "$fetch" .whl
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$py" -m pip wheel -q --no-deps . -w "$scratch"
unzip -o -q -j "$scratch"/spreeze_like-*.whl '*/_native.cpython-312*.so' -d .whl
so=$(ls .whl/_native.cpython-312-*.so)
"$py" - "$so" <<'EOF'
import importlib.machinery, importlib.util, sys
loader = importlib.machinery.ExtensionFileLoader("spreeze_like._native", sys.argv[1])
module = importlib.util.module_from_spec(importlib.util.spec_from_loader("spreeze_like._native", loader))
loader.exec_module(module)
print(f"native core for {sys.version.split()[0]}: {sys.argv[1]} loads ({len(dir(module))} names)")
EOF
bash tools/native_hash.sh > .whl/native.sha256  # what it was built from: gpu_session.sh checks it on the device
du -sh .whl
