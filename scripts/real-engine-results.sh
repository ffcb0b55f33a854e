#!/usr/bin/env bash
# Regenerates results/reference/real-engine/ (about 45 minutes plus the engine's setup). Measures first, fits after:
#   load test A; open-loop calibration traffic A (the scenario's workloads at another seed, one run per policy);
#   the validation (the scenario's own seed, --repeats runs per policy, plus the article's Node scheduler);
#   open-loop calibration traffic B (a third seed); load test B; a prompt-length sweep (what a request joining
#   costs at 32-1024 prompt tokens: the diagnostic of why a load test with only 32 and 1024 misprices the
#   scenario's prompts); the engine stops.
# Then the step-time model is fitted on both load tests (prefill per token, the front end) and refitted on both
# open-loop calibrations (the decode step and the cost of a request joining, as open-loop traffic pays them), and
# the validation is re-simulated with that fit (the measured runs are kept). A and B bracket the validation in
# time, so a slow drift of this shared machine's speed does not bias the prediction; the validation's own runs are
# never fitted. The held-out step-time check fits load test A alone and checks it on B (A vs B: test-retest).
# Measurements take an exclusive lock if FLOCK is set (e.g. FLOCK="$TMPDIR/simlab-bench.lock", the lock make bench takes). FITS_ONLY=1 skips the
# measurements and redoes the fits and reports from the kept runs. After the measurements the engine is stopped, so
# every later validate-real re-simulates from the kept runs (--kept-runs-only: the server is not contacted).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-results/reference/real-engine}"
SIMLAB="${SIMLAB:-.venv/bin/simlab}"
lock() { if [ -n "${FLOCK:-}" ]; then flock "$FLOCK" "$@"; else "$@"; fi; }
URL=http://127.0.0.1:8011  # with FITS_ONLY the runs are kept and no request is sent
if [ -z "${FITS_ONLY:-}" ]; then
  URL="$(bash scripts/real-engine.sh start | tail -1)"
  trap 'bash scripts/real-engine.sh stop >/dev/null 2>&1 || true' EXIT
fi
VR=(scenarios/real-engine.toml --url "$URL" --repeats 4 --node-policies adaptive --max-seconds 400
    --out "$OUT/validate-real")
OL=(scenarios/real-engine.toml --url "$URL" --repeats 1 --max-seconds 400 --no-figures)
KEPT=(--kept-runs-only)
if [ -z "${FITS_ONLY:-}" ]; then
  rm -rf "$OUT/loadtest-a" "$OUT/loadtest-b" "$OUT/loadtest-prompts" "$OUT/open-loop-a" "$OUT/open-loop-b" \
    "$OUT/calibration" "$OUT/validate-real" "$OUT/step-time-check"
  LT=(--concurrency 1,2,4,8,12,16 --prompt-tokens 32,1024 --output-tokens 16,64 --requests 32 --max-seconds 8 --rounds 3)
  lock "$SIMLAB" loadtest "$URL" "${LT[@]}" --out "$OUT/loadtest-a"
  lock "$SIMLAB" validate-real "${OL[@]}" --seed 1001 --out "$OUT/open-loop-a" --calibration "$OUT/loadtest-a/backend.toml"
  lock "$SIMLAB" validate-real "${VR[@]}" --calibration "$OUT/loadtest-a/backend.toml"
  lock "$SIMLAB" validate-real "${OL[@]}" --seed 1002 --out "$OUT/open-loop-b" --calibration "$OUT/loadtest-a/backend.toml"
  lock "$SIMLAB" loadtest "$URL" "${LT[@]}" --out "$OUT/loadtest-b"
  lock "$SIMLAB" loadtest "$URL" --concurrency 1,8,16 --prompt-tokens 32,128,256,512,1024 --output-tokens 16,64 \
    --requests 32 --max-seconds 8 --rounds 2 --out "$OUT/loadtest-prompts"
  bash scripts/real-engine.sh stop
fi
# the open-loop calibration runs' reports, as measured (kept runs; simulated with load test A, as then)
"$SIMLAB" validate-real "${OL[@]}" "${KEPT[@]}" --seed 1001 --out "$OUT/open-loop-a" \
  --calibration "$OUT/loadtest-a/backend.toml" >/dev/null
"$SIMLAB" validate-real "${OL[@]}" "${KEPT[@]}" --seed 1002 --out "$OUT/open-loop-b" \
  --calibration "$OUT/loadtest-a/backend.toml" >/dev/null
# the calibration: both load tests' tables, refitted on both open-loop calibrations' measured runs
"$SIMLAB" calibrate-gpu "$OUT/loadtest-a/loadtest.csv" "$OUT/loadtest-b/loadtest.csv" \
  --open-loop "$OUT"/open-loop-a/measured/*-run1.csv "$OUT"/open-loop-b/measured/*-run1.csv --out "$OUT/calibration"
"$SIMLAB" validate-real "${VR[@]}" "${KEPT[@]}" --calibration "$OUT/calibration/step.toml"
# the prompt-length sweep's own fit and report (join-cost.csv: what one joining request costs, by prompt length)
"$SIMLAB" calibrate-gpu "$OUT/loadtest-prompts/loadtest.csv" --out "$OUT/loadtest-prompts/fit"
# held out: A's fit on B's table (and the A-vs-B test-retest difference)
"$SIMLAB" calibrate-gpu "$OUT/loadtest-a/loadtest.csv" --check "$OUT/loadtest-b/loadtest.csv" \
  --out "$OUT/step-time-check" --no-figures
