#!/usr/bin/env bash
# Regenerates results/reference/real-engine-priority/ (about 15 minutes plus the engine's start-up): the real vLLM
# engine started with --scheduling-policy priority, against the simulation of scenarios/real-engine-priority.toml
# (the KV backend with scheduling = "priority" and the cache size the server logs). Measured, in this order:
#   engine.txt            the server's KV cache size in tokens, from its start-up log (the scenario must carry it)
#   fcfs-control/         the same server and arrivals with every request at priority 0 (so in arrival order, as
#                         FCFS), simulated with scenarios/real-engine.toml: the step model's error on the day of
#                         the measurement without priority; runs 1-2 before the priority arm, 3-4 after it
#   validate-real/        the priority arm: chat sent with priority 0, batch with 1 (validate-real --engine-priority),
#                         no gateway cap (unscheduled) and with the article's adaptive gateway cap, simulated with
#                         the step model the scenario carries (results/reference/real-engine/calibration/step.toml,
#                         measured on another day)
#   loadtest/             a short load test of the same server, right after
# Then fitted: calibration/step.toml, the step model refitted on this session (the load test, its decode step and
# admit cost refitted on the FCFS control's runs: the priority arm's own runs are never fitted), and
# validate-real-recalibrated/, the priority arm's kept runs re-simulated with it.
# Measurements take an exclusive lock if FLOCK is set (e.g. FLOCK="$TMPDIR/simlab-bench.lock", the lock make bench takes).
# FITS_ONLY=1 skips the measurements and redoes the fits, comparisons and reports from the kept runs (no server).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-results/reference/real-engine-priority}"
SIMLAB="${SIMLAB:-.venv/bin/simlab}"
export SIMLAB_VLLM_PORT="${SIMLAB_VLLM_PORT:-8031}"  # the kept runs' key holds the server's address
lock() { if [ -n "${FLOCK:-}" ]; then flock "$FLOCK" "$@"; else "$@"; fi; }
URL="http://127.0.0.1:$SIMLAB_VLLM_PORT"  # with FITS_ONLY the runs are kept and no request is sent
if [ -z "${FITS_ONLY:-}" ]; then
  bash scripts/real-engine.sh stop >/dev/null  # a server started otherwise (FCFS, another log level) goes first
  URL="$(SIMLAB_VLLM_SCHEDULING=priority SIMLAB_VLLM_LOG_LEVEL=INFO bash scripts/real-engine.sh start | tail -1)"
  trap 'bash scripts/real-engine.sh stop >/dev/null 2>&1 || true' EXIT
  mkdir -p "$OUT"
  rm -rf "$OUT/fcfs-control" "$OUT/validate-real" "$OUT/loadtest" "$OUT/calibration" "$OUT/validate-real-recalibrated"
  echo "kv_cache_tokens = $(bash scripts/real-engine.sh kv)" > "$OUT/engine.txt"
fi
PRIO=(scenarios/real-engine-priority.toml --url "$URL" --engine-priority --policies unscheduled,adaptive
      --repeats 3 --max-seconds 400 --out "$OUT/validate-real")
CTRL=(scenarios/real-engine.toml --url "$URL" --policies unscheduled --max-seconds 400 --out "$OUT/fcfs-control")
if [ -z "${FITS_ONLY:-}" ]; then
  lock "$SIMLAB" validate-real "${CTRL[@]}" --repeats 2 --no-figures
  lock "$SIMLAB" validate-real "${PRIO[@]}"
  lock "$SIMLAB" validate-real "${CTRL[@]}" --repeats 4  # runs 1-2 kept, 3-4 measured
  lock "$SIMLAB" loadtest "$URL" --concurrency 1,4,8,16 --prompt-tokens 32,1024 --output-tokens 16,64 --requests 32 \
    --max-seconds 8 --rounds 2 --out "$OUT/loadtest"
  bash scripts/real-engine.sh stop
fi
"$SIMLAB" validate-real "${CTRL[@]}" --repeats 4 --kept-runs-only >/dev/null
"$SIMLAB" validate-real "${PRIO[@]}" --kept-runs-only >/dev/null
"$SIMLAB" calibrate-gpu "$OUT/loadtest/loadtest.csv" --open-loop "$OUT"/fcfs-control/measured/unscheduled-run*.csv \
  --max-num-seqs 16 --out "$OUT/calibration" >/dev/null
mkdir -p "$OUT/validate-real-recalibrated"
rm -rf "$OUT/validate-real-recalibrated/measured"
cp -r "$OUT/validate-real/measured" "$OUT/validate-real-recalibrated/measured"
"$SIMLAB" validate-real "${PRIO[@]}" --kept-runs-only --calibration "$OUT/calibration/step.toml" \
  --out "$OUT/validate-real-recalibrated" >/dev/null
echo "written: $OUT/engine.txt, $OUT/fcfs-control/, $OUT/validate-real/, $OUT/calibration/, $OUT/validate-real-recalibrated/"
