# Two commands on a fresh machine: `make demo` and `make test`. Both set up .venv when missing or stale.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench results lock clean real-engine real-engine-results

$(STAMP): pyproject.toml requirements.lock
	@$(BIN)/python -c "" 2>/dev/null || { rm -rf $(VENV); $(PYTHON) -m venv $(VENV); }
	$(BIN)/python -m pip install -q --disable-pip-version-check -r requirements.lock
	$(BIN)/python -m pip install -q --disable-pip-version-check --no-deps -e '.[test]'
	@touch $(STAMP)

# The main job on a bundled realistic scenario: an A/B of four policies over 10 seeds, table + report + figures.
demo: $(STAMP)
	$(BIN)/simlab ab scenarios/nightly-backfill.toml --out results/demo --workers 2

test: $(STAMP)
	$(BIN)/python -m pytest -q

# The committed reference set (tables, figures, reports of every bundled scenario); a test diffs the tables.
results: $(STAMP)
	scripts/make-results.sh results/reference

# The real vLLM CPU engine for `simlab loadtest` / `validate-real` (own venv .venv-vllm, ~3.5 GB; README "Sim-to-real").
real-engine:
	scripts/real-engine.sh start

# Regenerates results/reference/real-engine/ measured parts on the real engine (~50 min; scripts/real-engine-results.sh).
real-engine-results: $(STAMP)
	scripts/real-engine-results.sh

# Timings: never two at once on a shared machine (the lock), medians and spreads of repeats, ratios to floors.
BENCH_LOCK ?= $(or $(SIMLAB_BENCH_LOCK),$(or $(TMPDIR),/tmp)/simlab-bench.lock)
bench: $(STAMP)
	flock $(BENCH_LOCK) $(BIN)/python benchmarks/run.py

lock:
	$(PYTHON) -m venv /tmp/simlab-lock && /tmp/simlab-lock/bin/pip install -q . '.[test]' && \
	  { head -2 requirements.lock; /tmp/simlab-lock/bin/pip freeze | grep -v '^simlab'; } > requirements.lock.new && \
	  mv requirements.lock.new requirements.lock && rm -rf /tmp/simlab-lock

clean:
	rm -rf $(VENV) results/demo
