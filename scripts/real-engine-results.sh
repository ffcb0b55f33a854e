#!/usr/bin/env bash
# Regenerates results/reference/real-engine/ (about 30 minutes plus the engine's setup): starts the real engine,
# load-tests it twice (fit, then an independent check run), validates the bundled scenario against the fit
# (Python runtime for unscheduled/static/adaptive, and the article's Node scheduler for adaptive), stops it.
# Measurements take /work/.quiet.lock-style exclusive lock if FLOCK is set (e.g. FLOCK=/work/.quiet.lock).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-results/reference/real-engine}"
SIMLAB="${SIMLAB:-.venv/bin/simlab}"
lock() { if [ -n "${FLOCK:-}" ]; then flock "$FLOCK" "$@"; else "$@"; fi; }
URL="$(bash scripts/real-engine.sh start | tail -1)"
trap 'bash scripts/real-engine.sh stop >/dev/null 2>&1 || true' EXIT
rm -rf "$OUT/loadtest" "$OUT/loadtest-check" "$OUT/validate-real"
LT=(--concurrency 1,2,4,8,12,16 --prompt-tokens 32,1024 --output-tokens 64 --requests 32 --max-seconds 8 --rounds 3)
lock "$SIMLAB" loadtest "$URL" "${LT[@]}" --out "$OUT/loadtest"
lock "$SIMLAB" loadtest "$URL" "${LT[@]}" --out "$OUT/loadtest-check"
lock "$SIMLAB" validate-real scenarios/real-engine.toml --url "$URL" --calibration "$OUT/loadtest/backend.toml" \
  --repeats 2 --node-policies adaptive --max-seconds 400 --out "$OUT/validate-real"
.venv/bin/python scripts/step-time-check.py "$OUT/loadtest/fit/step.toml" "$OUT/loadtest-check/loadtest.csv" \
  > "$OUT/step-time-check.md"
cat "$OUT/step-time-check.md"
