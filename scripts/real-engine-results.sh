#!/usr/bin/env bash
# Regenerates results/reference/real-engine/ (about 30 minutes plus the engine's setup): starts the real engine,
# load-tests it (A), validates the bundled scenario through simlab.runtime (unscheduled/static/adaptive) and the
# article's Node scheduler (adaptive), load-tests it again (B), then fits the step-time model on A and B together
# (they bracket the validation in time, so a slow drift of this shared machine's speed does not bias the
# prediction) and re-simulates the validation with that fit (the measured runs are kept). The held-out
# step-time check fits A alone and checks it on B; A vs B is the test-retest noise floor. Stops the engine.
# Measurements take an exclusive lock if FLOCK is set (e.g. FLOCK=/work/.quiet.lock).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-results/reference/real-engine}"
SIMLAB="${SIMLAB:-.venv/bin/simlab}"
lock() { if [ -n "${FLOCK:-}" ]; then flock "$FLOCK" "$@"; else "$@"; fi; }
URL="$(bash scripts/real-engine.sh start | tail -1)"
trap 'bash scripts/real-engine.sh stop >/dev/null 2>&1 || true' EXIT
rm -rf "$OUT/loadtest" "$OUT/loadtest-check" "$OUT/loadtest-waiting" "$OUT/loadtest-a" "$OUT/loadtest-b" \
  "$OUT/calibration" "$OUT/validate-real" "$OUT/step-time-check" "$OUT/step-time-check.md"
LT=(--concurrency 1,2,4,8,12,16 --prompt-tokens 32,1024 --output-tokens 16,64 --requests 32 --max-seconds 8 --rounds 3)
VR=(scenarios/real-engine.toml --url "$URL" --repeats 3 --node-policies adaptive --max-seconds 400
    --out "$OUT/validate-real")
lock "$SIMLAB" loadtest "$URL" "${LT[@]}" --out "$OUT/loadtest-a"
lock "$SIMLAB" validate-real "${VR[@]}" --calibration "$OUT/loadtest-a/backend.toml"
lock "$SIMLAB" loadtest "$URL" "${LT[@]}" --out "$OUT/loadtest-b"
bash scripts/real-engine.sh stop
# the calibration: both load tests' tables, one fit; the validation re-simulated with it
"$SIMLAB" calibrate-gpu "$OUT/loadtest-a/loadtest.csv" "$OUT/loadtest-b/loadtest.csv" --out "$OUT/calibration"
"$SIMLAB" validate-real "${VR[@]}" --calibration "$OUT/calibration/step.toml"
# held out: A's fit on B's table (and the A-vs-B test-retest difference)
"$SIMLAB" calibrate-gpu "$OUT/loadtest-a/loadtest.csv" --check "$OUT/loadtest-b/loadtest.csv" \
  --out "$OUT/step-time-check" --no-figures
