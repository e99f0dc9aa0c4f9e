#!/usr/bin/env bash
# One call on the H200 (through the device tool), at most ~9 minutes: install spec_hal without touching
# the image's torch, smoke-test the import, prove fork safety, run the conformance suite on cuda and
# the benchmarks. Reports land in $OUT; so does a tar of the Triton cache, which the next call can
# carry back (as .cache/triton.tgz) to skip recompiling. Later issues extend this script, not copy it.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/spec_hal_out}
mkdir -p "$OUT"
if [ -f .cache/triton.tgz ]; then mkdir -p ~/.triton && tar -xzf .cache/triton.tgz -C ~/.triton; fi
step() { echo; echo "=== $* ($(date +%T))"; }

step install
python3 -m pip install -q --no-deps --no-build-isolation . 2>&1 | tail -2 || export PYTHONPATH=$PWD
python3 -c "import torch, triton, spec_hal; print('torch', torch.__version__, 'triton', triton.__version__, 'spec_hal', spec_hal.__version__, 'device', spec_hal.current_device().name)" || exit 1

step fork-safety
python3 tools/fork_check.py 2>&1 | tee "$OUT/fork_check.log"

step "spec-hal info"
python3 -m spec_hal info > "$OUT/info.txt" 2>&1; tail -n +1 "$OUT/info.txt" | head -20

step conformance
timeout "${CHECK_TIMEOUT:-300}" python3 -m spec_hal check --device cuda --report "$OUT/conformance-cuda.json" \
    --inductor-ops assign_extend_cache_locs,move_kv_cache,verify_tree_greedy,draft_topk1_postprocess,generate_simulated_accept_index,verify_commit_step_indices,commit_mamba_states_after_verify 2>&1 | tee "$OUT/check.log" | tail -60

step bench
timeout "${BENCH_TIMEOUT:-200}" python3 -m spec_hal bench --device cuda --sizes "${BENCH_SIZES:-full}" \
    --json "$OUT/bench-h200.json" --plot "$OUT/bench-h200.png" 2>"$OUT/bench.err" | tee "$OUT/bench.log" | tail -80
tail -5 "$OUT/bench.err"

step demo
timeout "${DEMO_TIMEOUT:-150}" python3 -m spec_hal demo ${DEMO_ARGS:-} 2>&1 | tee "$OUT/demo.log" | tail -12

step triton-cache
tar -czf "$OUT/triton-cache.tgz" -C ~/.triton cache 2>/dev/null; ls -la "$OUT"
