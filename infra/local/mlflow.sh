#!/usr/bin/env bash
# Local MLflow tracking server for tracelake: `mlflow server` on 127.0.0.1 with a SQLite store.
#
#   infra/local/mlflow.sh start [--port P] [--dir D]  # start in the background, wait for /health, print the URI
#   infra/local/mlflow.sh uri   [--dir D]             # print the tracking URI of the running server
#   infra/local/mlflow.sh status [--dir D]            # exit 0 when running and healthy, 3 when stopped
#   infra/local/mlflow.sh stop  [--dir D]             # SIGTERM, wait (SIGKILL after 30 s); data is kept
#
# State and data in D = $TRACELAKE_MLFLOW_DIR (default ${TMPDIR:-/tmp}/tracelake-mlflow): mlflow.db (runs),
# artifacts/ (served by the server: clients need no access to it), server.log, mlflow.pid, port.
# Port: --port or $TRACELAKE_MLFLOW_PORT (default 5000). Start timeout: $TRACELAKE_MLFLOW_TIMEOUT s (default 120).
# Then: tracelake run --raw R --warehouse W --tracking-uri "$(infra/local/mlflow.sh uri)"
#       or the Airflow Variable tracelake_tracking_uri (infra/local/airflow.sh sets it when the server runs).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
python="${PYTHON:-$repo/.venv/bin/python}"
[ -x "$python" ] || python="$(command -v python3)"
mlflow_bin="$(dirname "$python")/mlflow"
[ -x "$mlflow_bin" ] || mlflow_bin="$(command -v mlflow || true)"

action="${1:-}"; shift || true
dir="${TRACELAKE_MLFLOW_DIR:-${TMPDIR:-/tmp}/tracelake-mlflow}"
port="${TRACELAKE_MLFLOW_PORT:-5000}"
timeout="${TRACELAKE_MLFLOW_TIMEOUT:-120}"
while [ $# -gt 0 ]; do
  case "$1" in
    --port) port="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
pidfile="$dir/mlflow.pid"

healthy() {  # healthy PORT: /health answers OK
  "$python" - "$1" <<'PY' >/dev/null 2>&1
import sys, urllib.request
with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/health", timeout=2) as r:
    sys.exit(0 if r.status == 200 else 1)
PY
}
running_pid() {  # print the server's pid when its process is alive
  [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null && cat "$pidfile"
}

case "$action" in
  start)
    if pid="$(running_pid)"; then
      p="$(cat "$dir/port")"
      healthy "$p" && { echo "http://127.0.0.1:$p"; exit 0; }
      echo "mlflow server (pid $pid) is running but not healthy on port $p; see $dir/server.log" >&2; exit 1
    fi
    [ -n "$mlflow_bin" ] || { echo "mlflow not found (expected next to $python)" >&2; exit 1; }
    mkdir -p "$dir/artifacts"
    echo "$port" > "$dir/port"
    # tracelake logs runs only: no server-side job runner (huey consumers) unless asked for.
    export MLFLOW_SERVER_ENABLE_JOB_EXECUTION="${MLFLOW_SERVER_ENABLE_JOB_EXECUTION:-false}"
    # own session (setsid): `stop` signals the whole process group (uvicorn worker and any children)
    setsid "$mlflow_bin" server --backend-store-uri "sqlite:///$dir/mlflow.db" \
      --artifacts-destination "$dir/artifacts" --host 127.0.0.1 --port "$port" --workers 1 \
      > "$dir/server.log" 2>&1 < /dev/null &
    echo $! > "$pidfile"
    deadline=$(( $(date +%s) + timeout ))
    until healthy "$port"; do
      if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
        echo "mlflow server exited during start; last lines of $dir/server.log:" >&2; tail -20 "$dir/server.log" >&2
        rm -f "$pidfile"; exit 1
      fi
      if [ "$(date +%s)" -ge "$deadline" ]; then
        echo "mlflow server not healthy after ${timeout} s; see $dir/server.log" >&2; "$0" stop --dir "$dir" >&2 || true; exit 1
      fi
      sleep 0.2
    done
    echo "http://127.0.0.1:$port"
    ;;
  uri)
    running_pid >/dev/null || { echo "mlflow server not running (dir $dir)" >&2; exit 3; }
    echo "http://127.0.0.1:$(cat "$dir/port")"
    ;;
  status)
    if pid="$(running_pid)" && healthy "$(cat "$dir/port")"; then
      echo "running: pid $pid, http://127.0.0.1:$(cat "$dir/port"), store $dir"; exit 0
    fi
    echo "stopped (dir $dir)"; exit 3
    ;;
  stop)
    pid="$(running_pid)" || { rm -f "$pidfile"; echo "not running"; exit 0; }
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 300); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true; fi
    rm -f "$pidfile"
    echo "stopped"
    ;;
  *) echo "usage: $0 start|stop|uri|status [--port P] [--dir D]" >&2; exit 2 ;;
esac
