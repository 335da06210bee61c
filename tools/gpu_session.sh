#!/usr/bin/env bash
# The whole GPU check of one lent-device session, in one call (device minutes are scarce: one machine
# start, every figure in it). Run from the project's root on the GPU machine:
#
#   bash tools/gpu_session.sh OUTDIR [SECONDS_FOR_TESTS]              # PHASE=core, the default
#   PHASE=learn bash tools/gpu_session.sh OUTDIR                      # one phase per call, see below
#
# It expects the ignored folder .whl/ (carried to the device) to hold what the machine lacks; on the CPU
# machine, before the first call, `bash tools/device_prep.sh` makes it:
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
# Seen on the H200 (2026-11-27, all passing): the whole core phase 296 s (smoke 43, bench 82, tests 91 + 30
# for kill -9, plan 30), the machine's start and transfers about 35 s more; in the evening 349 s (smoke 58,
# bench 98, tests 148, plan 33), the lease's clock at 383 s after it.
# The limits here add up to 10 + 75 + 200 + 170 + 60 + 45 = 560 s, inside one 600 s call; pass a
# second argument for more test time, SECTIONS="steps critic peer dual sampling" for every section.
#
# A lease is 15 device minutes with the machine's start, and one call at most 600 s, so the issue's
# figures take several sessions; PHASE picks what one call measures (each fits one call):
#   core    the smoke, the critic/peer bench, the GPU tests, the kill -9 test, the autotune plan (above);
#           first whenever the code has changed since the last clean GPU test run
#   learn   HalfCheetah-v5 SAC, ours vs SBX (JAX on the GPU) and SB3 (device cuda), seeds 1 and 2 in one
#           call; learn1 / learn2: one seed (learn2 after a learn call that was cut during seed 2).
#           --json is rewritten after each run: a cut call keeps the runs that finished. One report of
#           several calls' files (each seed's runs from the last file holding it, so a re-run seed replaces
#           a cut one): python tools/bench_vs_sb3.py --report hc_gpu_learn.json hc_gpu_learn2.json
#           Each run stops at evaluation 1500 or 240 s, and a peer also at T / R s (--peer-stop-ratio, T our time
#           to 1500 on that seed; R 0.25 for SB3 and 0.5 for SBX, the targets): a peer still short of
#           1500 there proves ours / peer <= R, printed '<=R': the peers' clocks stop at 2 T and 4 T s instead of
#           240 s each (their evaluations and start-ups come on top). Both seeds took 368 s on the H200 (T 15-18 s)
#           LEARNER_STEP=compiled-graph: ours with that learner step (its compile inside the run's wall time), the
#           file hc_gpu_<phase>_compiled-graph.json: whether the faster step at batch 256 (3,642-3,796 updates/s
#           against the default cuda-graph's 2,776-2,962 on the H200) still meets the targets in a learning run
#   grid1   the autotune grid on HalfCheetah-v5 (tools/bench_autotune.py, 90 s a run), the 1st of two
#           parts: three grid cells and the autotuned run with its probe; grid2: the other three cells (no
#           defaults run: it would repeat the cell 1 sampler x batch 256 x UTD 1). GRID_S: the call's own limit
#           (575 s). Merge here: python tools/bench_autotune.py --report grid_part1.json grid_part2.json
#           (the --json is rewritten after each run: a cut call keeps the runs that finished)
# Which phase next: what BENCHMARKS.md and the last closing note list as not measured on a GPU.
# Two phases in one 15-minute lease: core then learn on the still warm machine (call again within its 30 s
# idle window) with LEARN_S set to what the lease has left less about 60 s (the evening of 2026-11-27 on the
# H200: core 349 s, then LEARN_S=455 with 517 s left; learn took 368 s). A cut learn call keeps in its --json
# the runs that finished, seed 2's too where it got that far; learn2 in a later lease re-runs seed 2 whole,
# and --report above joins the two files. grid1 then grid2 in one lease (the H200 on 2026-11-28: grid1 451 s
# with the 60 s probe, grid2 288 s; the lease had held the machine 780 s after them): grid2 with GRID_S = what
# is left less ~50 s, its --json keeps the runs that finished if that cuts it.
#   autotuned  the autotuned run (its 60 s probe first) and the grid's two best cells again, in one call
#           (366 s on the H200, 2026-11-28 17:07; then core with 150 s of tests, 314 s: the lease held 721 s)
set -u
out=${1:?usage: [PHASE=core|learn|learn1|learn2|grid1|grid2|autotuned] tools/gpu_session.sh OUTDIR [SECONDS_FOR_TESTS]}
test_s=${2:-170}
phase=${PHASE:-core}
case "$phase" in core|learn|learn1|learn2|grid1|grid2|autotuned) ;;
  *) echo "error: PHASE=$phase: use core, learn, learn1, learn2, grid1, grid2 or autotuned" >&2; exit 2;; esac
# a core built from other C++ than the carried native/ would be measured as this code's (tools/native_hash.sh)
[ "$(cat .whl/native.sha256 2>/dev/null)" = "$(bash tools/native_hash.sh)" ] \
  || { echo "error: .whl/'s native core was not built from these native/ sources; run bash tools/device_prep.sh first" >&2; exit 3; }
mkdir -p "$out"
export PYTHONUNBUFFERED=1
t0=$(date +%s)
stamp() { echo "[gpu_session +$(( $(date +%s) - t0 )) s] $*"; }
# the autotuner's probe files (its cache) come back too: a recorded GPU probe is a planner fixture
# (tests/autotune/fixtures; the grid of 2026-11-28 had to be transcribed from the printed lines)
keep_probes() { cp "${1:-${XDG_CACHE_HOME:-$HOME/.cache}}"/spreeze_like/probes/*.json "$out/" 2>/dev/null || true; }
# every prefix of ours (spreeze_like/ipc/naming.py): the xdist workers' tests name theirs spzgw<N><session>.
segments_left() { ls /dev/shm | grep -cE '^(sem\.)?spz[a-z0-9]*\.' | sed 's/^/segments of ours left in \/dev\/shm: /'; }

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "error: wheel install failed" >&2; exit 3; }
cp .whl/_native.cpython-312-*.so spreeze_like/ || { echo "error: no native core for cp312 in .whl/" >&2; exit 3; }
export PYTHONPATH="$PWD:/tmp/site"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nproc; uptime;
  python3 -c "import torch, gymnasium, mujoco, posix_ipc, spreeze_like._native as n; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gymnasium', gymnasium.__version__, 'mujoco', mujoco.__version__)"; } \
  2>&1 | tee "$out/machine.txt"
stamp "setup done (phase $phase)"

if [ "${phase#learn}" != "$phase" ]; then
  seeds=${phase#learn}; seeds=${seeds:-1 2}
  sets=('algo="sac"'); tag=$phase
  if [ -n "${LEARNER_STEP:-}" ]; then sets+=("learner_step=\"$LEARNER_STEP\""); tag=${phase}_$LEARNER_STEP; fi
  python3 -c "import jax, sbx, stable_baselines3; print('jax devices', jax.devices())" 2>&1 | tee -a "$out/machine.txt"
  # shellcheck disable=SC2086  # the seeds are words
  timeout "${LEARN_S:-570}" python3 tools/bench_vs_sb3.py --env HalfCheetah-v5 --seeds $seeds --stop-when-reached \
    --wall-budget 240 --eval-every 5000 --eval-episodes 10 --peers sbx sb3 --peer-device cuda --device cuda:0 \
    --peer-stop-ratio sb3=0.25 --peer-stop-ratio sbx=0.5 --set "${sets[@]}" \
    --json "$out/hc_gpu_${tag}.json" 2>&1 | tee "$out/learn.log" | tail -40
  # cut by LEARN_S: the report of the runs that finished (the file holds their records)
  if grep -q '"partial"' "$out/hc_gpu_${tag}.json" 2>/dev/null; then
    timeout 30 python3 tools/bench_vs_sb3.py --report "$out/hc_gpu_${tag}.json" --no-png 2>&1 | tee -a "$out/learn.log" | tail -25
  fi
  stamp "learning seeds $seeds done"
elif [ "$phase" = grid1 ] || [ "$phase" = grid2 ] || [ "$phase" = autotuned ]; then
  if [ "$phase" = autotuned ]; then
    # the autotuned run again (after a change of the plan's rules) beside the 16-core grid's two best cells of
    # 2026-11-28 (13 samplers at R 256), in one call. Its file names its machine; the parts of 2026-11-28 ran on
    # an H200 and predate that record. On an H200, merge with them, this file last (its rows win):
    # python tools/bench_autotune.py --report grid_part1.json grid_part2.json grid_check.json
    # on another card, report it alone (the autotuned run against the two cells, one card, one call)
    k=check; file=grid_check.json; which=(--cells 13:8192:0.03125 13:2048:0.125)
  else
    k=${phase#grid}; file=grid_part$k.json; which=(--part "$k/2")
  fi
  # --no-defaults: a run with no setting flags is the grid's first cell (1 sampler, batch 256, UTD 1) again
  timeout "${GRID_S:-575}" python3 tools/bench_autotune.py --wall 90 "${which[@]}" --no-defaults --out /tmp/grid \
    --json "$out/$file" 2>&1 | tee "$out/grid.log" | tail -30
  # cut by the limit: the report of the runs that finished (the file is rewritten after each run)
  if grep -q '"partial"' "$out/$file" 2>/dev/null; then
    timeout 20 python3 tools/bench_autotune.py --report "$out/$file" 2>&1 | tee -a "$out/grid.log" | tail -20
  fi
  keep_probes
  stamp "grid part $k done"
fi
if [ "$phase" != core ]; then
  segments_left
  exit 0
fi

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

# its own cache: a 15 s probe left in the machine's cache would be what a later autotuned phase on the still warm
# machine plans from, instead of the default 60 s probe a user's --autotune makes
XDG_CACHE_HOME=/tmp/core_probe_cache timeout 45 python3 -m spreeze_like.run --env HalfCheetah-v5 --plan-only --reprobe \
  --probe-budget 15 --logdir /tmp/gpu_runs > "$out/autotune_plan.txt" 2>&1
tail -40 "$out/autotune_plan.txt"
keep_probes /tmp/core_probe_cache
stamp "autotune plan done"
segments_left
