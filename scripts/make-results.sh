#!/usr/bin/env bash
# The reference results: an A/B of every bundled scenario. `make results` writes them to results/reference/;
# tests/test_reference_results.py regenerates the tables into a temporary folder and diffs them with the
# committed ones, so any change in behaviour shows up as a diff in review.
#   scripts/make-results.sh [OUT] [extra simlab ab flags, e.g. --no-figures]
# Works from any folder and any clone: OUT is taken relative to where you are, everything else to the
# checkout this script belongs to; simlab is this checkout's (its .venv, else the python on PATH with simlab).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
out="${1:-$repo/results/reference}"
shift || true
mkdir -p "$out"
out="$(cd "$out" && pwd -P)"
if [ -x "$repo/.venv/bin/python" ]; then
  python="$repo/.venv/bin/python"
else
  python="$(command -v python3 || command -v python)"
fi
cd "$repo"  # scenarios are named relative to the checkout; `python -m simlab` runs this checkout's code
run() {  # scenario, replications
  local name=$1 reps=$2; shift 2
  "$python" -m simlab ab "scenarios/$name.toml" --out "$out/$name" --replications "$reps" --workers 2 --quiet "$@" >/dev/null
  find "$out/$name" -type d -name runs -prune -exec rm -rf {} +  # run caches (also the frontier's)
  rm -rf "$out/$name"/figures/*.svg
  echo "$out/$name"
}
run seed-article 5 "$@"
run nightly-backfill 5 "$@"
run eval-sweep 3 "$@"
run provider-quota 3 "$@"
run bursty-chat 3 "$@"
run bench-1h 2 --no-frontier "$@"  # the performance scenario: a static-cap sweep of one-hour runs is not the point
run real-engine 2 "$@"
run real-engine-priority 2 --no-frontier "$@"  # its real-engine measurements: scripts/real-engine-priority-results.sh
run gpu-kv-pressure 3 --no-frontier "$@"  # KV cache and engine scheduling: the static-cap sweep is docs/kv-cache-backend.md's
run gpu-kv-pressure-priority 3 --no-frontier "$@"
run many-gateways 3 --no-frontier "$@"  # gateway instances (docs/many-instances.md): the static-cap sweep is not the point
run gateway-restarts 3 --no-frontier "$@"
