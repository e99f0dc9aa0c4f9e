#!/usr/bin/env bash
# The one accelerator runner (one call on the H200 through the device tool, at most ~9 minutes):
# install spec_hal without touching the image's torch, smoke-test the import, run the GPU tests
# (tests/gpu: fork safety; multi-GPU where two GPUs are visible), the conformance suite on cuda,
# the benchmarks and the demo. Reports land in $OUT; so does a tar of the Triton cache, which the
# next call can carry back (as .cache/triton.tgz) to skip recompiling. Later issues extend this
# script, not copy it.
#
# Stages: GPU_TESTS_TIMEOUT, CHECK_TIMEOUT, BENCH_TIMEOUT, SWEEP_TIMEOUT and DEMO_TIMEOUT bound the GPU
# tests, the conformance suite, the bench, the launch-configuration sweep (off unless set) and the
# demo (seconds); 0 skips that stage. AB_BASE (a folder holding another checkout) adds a same-run
# A/B of the bench on AB_OPS at AB_SIZES (default full), AB_ROUNDS rounds, bounded per side and
# round by AB_TIMEOUT. CHECK_OPS (comma-separated op names) narrows the conformance suite;
# CHECK_BASE (another carried checkout)
# runs that checkout's conformance suite beside this one's, in parallel (correctness only: nothing
# is timed while they run). A full-size bench takes longer than fits beside the conformance suite in
# one call: run them in two calls (CHECK_TIMEOUT=0 BENCH_TIMEOUT=540 for the bench).
#
# SPEC_HAL_COMMIT names the commit measured in every report. The copy on the device machine has no
# .git, so pass it in: SPEC_HAL_COMMIT=$(git rev-parse --short HEAD) bash tools/h200_run.sh
# (without it, and outside a git checkout, reports say commit "unknown").
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=$(realpath -m "${OUT:-/tmp/spec_hal_out}")  # absolute: base checkouts run from their own folder
mkdir -p "$OUT"
if [ -f .cache/triton.tgz ]; then mkdir -p ~/.triton && tar -xzf .cache/triton.tgz -C ~/.triton; fi
step() { echo; echo "=== $* ($(date +%T))"; }

SPEC_HAL_COMMIT=${SPEC_HAL_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
export SPEC_HAL_COMMIT
echo "$SPEC_HAL_COMMIT" > "$OUT/commit.txt"
echo "commit measured: $SPEC_HAL_COMMIT"

step install
python3 -m pip install -q --no-deps --no-build-isolation . 2>&1 | tail -2 || export PYTHONPATH=$PWD
python3 -c "import torch, triton, spec_hal; print('torch', torch.__version__, 'triton', triton.__version__, 'spec_hal', spec_hal.__version__, 'device', spec_hal.current_device().name)" || exit 1

step "GPU tests (tests/gpu)"
if [ "${GPU_TESTS_TIMEOUT:-90}" = 0 ]; then
    echo "GPU_TESTS_TIMEOUT=0: tests/gpu not run" | tee "$OUT/gpu-tests.log"
elif python3 -c "import pytest" 2>/dev/null; then
    timeout "${GPU_TESTS_TIMEOUT:-90}" python3 -m pytest tests/gpu -p no:cacheprovider -q -rs 2>&1 | tee "$OUT/gpu-tests.log" | tail -25
else
    echo "pytest is not installed here: tests/gpu not run" | tee "$OUT/gpu-tests.log"
fi

step "spec-hal info"
python3 -m spec_hal info > "$OUT/info.txt" 2>&1; tail -n +1 "$OUT/info.txt" | head -20

if [ "${CHECK_TIMEOUT:-300}" != 0 ]; then
    step conformance
    check() {  # check ROOT NAME: the conformance suite of the checkout at ROOT, reported as NAME
        # Run from ROOT: python -m puts the working directory first on the path, before PYTHONPATH.
        (cd "$1" && PYTHONPATH=$1 timeout "${CHECK_TIMEOUT:-300}" python3 -m spec_hal check --device cuda --report "$OUT/$2.json" \
            ${CHECK_OPS:+--ops "$CHECK_OPS"} --inductor-ops assign_extend_cache_locs,move_kv_cache,verify_tree_greedy,draft_topk1_postprocess,generate_simulated_accept_index,verify_commit_step_indices,commit_mamba_states_after_verify > "$OUT/$2.log" 2>&1)
    }
    if [ -n "${CHECK_BASE:-}" ]; then
        SPEC_HAL_COMMIT=$(basename "$CHECK_BASE") check "$(realpath "$CHECK_BASE")" conformance-cuda-base &
    fi
    check "$PWD" conformance-cuda
    wait
    tail -40 "$OUT/conformance-cuda.log"
    [ -n "${CHECK_BASE:-}" ] && { echo "--- $CHECK_BASE"; tail -8 "$OUT/conformance-cuda-base.log"; }
fi

if [ "${BENCH_TIMEOUT:-200}" != 0 ]; then
    step bench
    timeout "${BENCH_TIMEOUT:-200}" python3 -m spec_hal bench --device cuda --sizes "${BENCH_SIZES:-full}" \
        --json "$OUT/bench-h200.json" --plot "$OUT/bench-h200.png" 2>"$OUT/bench.err" | tee "$OUT/bench.log" | tail -80
    tail -5 "$OUT/bench.err"
fi

if [ "${SWEEP_TIMEOUT:-0}" != 0 ]; then
    # Launch-configuration sweep (SWEEP_OPS, SWEEP_KIB, SWEEP_WARPS, SWEEP_ROW_PROGRAMS choose it).
    step sweep
    timeout "$SWEEP_TIMEOUT" python3 -m spec_hal bench --sweep --device cuda ${SWEEP_OPS:+--ops "$SWEEP_OPS"} \
        --json "$OUT/sweep-h200.json" 2>&1 | tee "$OUT/sweep.log" | tail -80
fi

if [ -n "${AB_BASE:-}" ]; then
    # A same-run A/B: AB_BASE is another checkout of spec_hal carried with the call (say a worktree of
    # the commit before a kernel change, in a folder .git/info/exclude ignores, named in carry); each
    # side is benched in its own process on AB_OPS at AB_SIZES, AB_ROUNDS times (default 2) in the
    # order base, new, new, base, ...: the process benched first in a lease was seen to time eager
    # host calls slower, and the alternation cancels that drift. Reports: ab-<side>-<round>.json.
    step "A/B: $AB_BASE against this checkout (${AB_OPS:-all ops}, ${AB_ROUNDS:-2} rounds)"
    for round in $(seq "${AB_ROUNDS:-2}"); do
        order="base new"; [ $((round % 2)) = 0 ] && order="new base"
        for side in $order; do
            root=$PWD commit=$SPEC_HAL_COMMIT
            [ "$side" = base ] && root=$(realpath "$AB_BASE") commit=$(basename "$AB_BASE")
            (cd "$root" && SPEC_HAL_COMMIT=$commit PYTHONPATH=$root timeout "${AB_TIMEOUT:-240}" python3 -m spec_hal bench \
                --device cuda --sizes "${AB_SIZES:-full}" ${AB_OPS:+--ops "$AB_OPS"} --json "$OUT/ab-$side-$round.json" \
                2>&1 | tee "$OUT/ab-$side-$round.log" | tail -40)
        done
    done
fi

if [ "${DEMO_TIMEOUT:-150}" != 0 ]; then
    step demo
    timeout "${DEMO_TIMEOUT:-150}" python3 -m spec_hal demo ${DEMO_ARGS:-} 2>&1 | tee "$OUT/demo.log" | tail -12
fi

# The device tool returns at most 8 files: the logs travel together in one archive.
step reports
tar -czf "$OUT/triton-cache.tgz" -C ~/.triton cache 2>/dev/null
(cd "$OUT" && tar -czf logs.tgz --exclude=triton-cache.tgz --exclude=logs.tgz -- * && find . -type f ! -name logs.tgz ! -name triton-cache.tgz -delete)
ls -la "$OUT"
