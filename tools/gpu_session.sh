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
# Order: a 75 s smoke of the capture paths (-x); the timings (critic at batch 256 first, then the peer)
# on a quiet machine; then the GPU tests (pytest-xdist, 8 workers: the leak checks are per process;
# the kill -9 test runs alone after them, since a killed run's segments would be seen by a neighbouring
# worker's check until the next start sweeps them); then the autotune plan.
# Seen on the H100 (2026-11-26): setup 10 s, the bench ~150 s with every section (four inductor compiles
# included), the tests: 100 s were not enough on 8 workers once the real compiled-graph runs joined.
# The limits here add up to 10 + 75 + 200 + 170 + 60 + 45 = 560 s, inside one 600 s call; pass a
# second argument for more test time, SECTIONS="steps critic peer dual sampling" for every section.
#
# Not in this script (too long for one 15-minute lease beside it): learning against SB3 and SBX on
# the GPU, in a call of its own, e.g.
#   python3 tools/bench_vs_sb3.py --env HalfCheetah-v5 --seeds 1 2 --stop-when-reached --wall-budget 300 \
#     --eval-every 5000 --eval-episodes 10 --peers sb3 sbx --peer-device cuda --device cuda:0 \
#     --set algo='"sac"' --json "$OUT/hc_gpu.json"
set -u
out=${1:?usage: tools/gpu_session.sh OUTDIR [SECONDS_FOR_TESTS]}
test_s=${2:-170}
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

# a smoke of the capture paths first, stopping at the first failure: a capture bug then costs seconds
# (and a failed capture leaves the process's generators marked as capturing, so under -n 8 one bug
# would show as many failures: read the first error in tests.log, not the count)
timeout 75 python3 -m pytest -x -q -m gpu -p no:cacheprovider --timeout 60 tests/trainer/test_gpu_steps.py \
  -k "mirror_batches or blocks_of_updates or graph_replays_the_eager or round_trip" > "$out/smoke.log" 2>&1
tail -4 "$out/smoke.log"
stamp "smoke done"

# SECTIONS: steps, dual and sampling were measured on 2026-11-26 (steps and sampling code unchanged since;
# the weight transfer that dual uses changed, and the GPU tests run it)
timeout 200 python3 tools/bench_gpu.py --sections ${SECTIONS:-critic peer} --json "$out/bench_gpu.json" \
  2>&1 | tee "$out/bench.log"
stamp "bench_gpu done"

timeout "$test_s" python3 -m pytest -q -m gpu -p no:cacheprovider -n 8 --timeout 150 -k "not sigkilled" tests \
  > "$out/tests.log" 2>&1
tail -25 "$out/tests.log"
timeout 60 python3 -m pytest -q -m gpu -p no:cacheprovider --timeout 55 -k sigkilled tests >> "$out/tests.log" 2>&1
tail -3 "$out/tests.log"
stamp "tests done"

timeout 45 python3 -m spreeze_like.run --env HalfCheetah-v5 --plan-only --reprobe --probe-budget 15 \
  --logdir /tmp/gpu_runs > "$out/autotune_plan.txt" 2>&1
tail -40 "$out/autotune_plan.txt"
stamp "autotune plan done"
ls /dev/shm | grep -c '^spz\.\|^sem\.spz\.' | sed 's/^/segments of ours left in \/dev\/shm: /'
