#!/usr/bin/env bash
# The whole GPU check of one lent-device session, in one call (device minutes are scarce: one machine
# start, every figure in it). Run from the project's root on the GPU machine:
#
#   bash tools/gpu_session.sh OUTDIR [SECONDS_FOR_TESTS]
#
# It expects the ignored folder .whl/ (carried to the device) to hold what the machine lacks:
#   ../shared/tools/device-wheels.sh .whl            # gymnasium, MuJoCo, posix_ipc, SB3, SBX (cp312)
#   the native core built for its Python 3.12, `_native.cpython-312-x86_64-linux-gnu.so`, from
#   `python3.12 -m pip wheel --no-deps . -w /tmp/w` and unzipped out of that wheel.
# Each step has its own time limit so that a hang in one keeps the figures of the others; every
# output lands in OUTDIR: bench_gpu.json (+ bench_sampler.json), the console logs, the test log.
# Order: the timings first, on a quiet machine; then the GPU tests (pytest-xdist, 8 workers: the
# leak checks are per process; the kill -9 test runs alone after them, since a killed run's
# segments would be seen by a neighbouring worker's check until the next start sweeps them).
# Seen on the H100 (2026-11-26): setup 10 s, the bench ~150 s (four inductor compiles included),
# the tests: 100 s were not enough on 8 workers once the real compiled-graph runs joined (220 s here; the limits add up to 560 s, plus the install).
#
# Not in this script (too long for one 15-minute lease beside it): learning against SB3 and SBX on
# the GPU, in a call of its own, e.g.
#   python3 tools/bench_vs_sb3.py --env HalfCheetah-v5 --seeds 1 2 --stop-when-reached --wall-budget 300 \
#     --eval-every 5000 --eval-episodes 10 --peers sb3 sbx --peer-device cuda --device cuda:0 \
#     --set algo='"sac"' --json "$OUT/hc_gpu.json"
set -u
out=${1:?usage: tools/gpu_session.sh OUTDIR [SECONDS_FOR_TESTS]}
test_s=${2:-220}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
t0=$(date +%s)
stamp() { echo "[gpu_session +$(( $(date +%s) - t0 )) s] $*"; }

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "error: wheel install failed" >&2; exit 3; }
cp .whl/_native.cpython-312-*.so spreeze_like/ || { echo "error: no native core for cp312 in .whl/" >&2; exit 3; }
export PYTHONPATH="$PWD:/tmp/site"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nproc; uptime;
  python3 -c "import torch, gymnasium, mujoco, posix_ipc, spreeze_like._native as n; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gymnasium', gymnasium.__version__, 'mujoco', mujoco.__version__)"; } \
  2>&1 | tee "$out/machine.txt"
stamp "setup done"

timeout 200 python3 tools/bench_gpu.py --sections steps critic peer dual sampling --json "$out/bench_gpu.json" \
  2>&1 | tee "$out/bench.log"
stamp "bench_gpu done"

timeout "$test_s" python3 -m pytest -q -m gpu -p no:cacheprovider -n 8 --timeout 150 -k "not sigkilled" tests \
  > "$out/tests.log" 2>&1
tail -25 "$out/tests.log"
timeout 80 python3 -m pytest -q -m gpu -p no:cacheprovider --timeout 70 -k sigkilled tests >> "$out/tests.log" 2>&1
tail -3 "$out/tests.log"
stamp "tests done"

timeout 60 python3 -m spreeze_like.run --env HalfCheetah-v5 --plan-only --reprobe --probe-budget 20 \
  --logdir /tmp/gpu_runs > "$out/autotune_plan.txt" 2>&1
tail -40 "$out/autotune_plan.txt"
stamp "autotune plan done"
ls /dev/shm | grep -c '^spz\.\|^sem\.spz\.' | sed 's/^/segments of ours left in \/dev\/shm: /'
