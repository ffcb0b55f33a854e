#!/usr/bin/env bash
# The reference results: an A/B of every bundled scenario. `make results` writes them to results/reference/;
# tests/test_reference_results.py regenerates the tables into a temporary folder and diffs them with the
# committed ones, so any change in behaviour shows up as a diff in review.
#   scripts/make-results.sh [OUT] [extra simlab ab flags, e.g. --no-figures]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-results/reference}"
shift || true
simlab=".venv/bin/simlab"
run() {  # scenario, replications
  local name=$1 reps=$2; shift 2
  "$simlab" ab "scenarios/$name.toml" --out "$out/$name" --replications "$reps" --workers 2 --quiet "$@" >/dev/null
  rm -rf "$out/$name/runs" "$out/$name"/figures/*.svg
  echo "$out/$name"
}
run seed-article 5 "$@"
run nightly-backfill 5 "$@"
run eval-sweep 3 "$@"
run provider-quota 3 "$@"
run bench-1h 2 "$@"
