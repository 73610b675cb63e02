#!/usr/bin/env bash
# Airflow 3 for people: `airflow standalone` (api-server + UI, scheduler, dag-processor, triggerer) with
# tracelake's DAGs (dags/) mounted. Not used by the tests (they call dag.test()).
#
#   infra/local/airflow.sh [start] [--port P]  # foreground; Ctrl-C stops everything. UI: http://127.0.0.1:P (8080)
#   eval "$(infra/local/airflow.sh env)"       # this shell's `airflow` CLI on the same home, e.g.
#                                              #   airflow dags trigger tracelake_ingest
#                                              #   airflow dags test tracelake_ingest 2026-03-01T10:00:00+00:00
#
# Home: $TRACELAKE_AIRFLOW_HOME (default ${TMPDIR:-/tmp}/tracelake-airflow; SQLite metadata DB). The admin
# login (simple auth manager) is printed by standalone at start and kept under the home.
# Configuration (jobs/pipeline/settings.py; Airflow Variables, or these environment variables, which win):
#   TRACELAKE_RAW           -> tracelake_raw            landing zone    (default <home>/tracelake/landing)
#   TRACELAKE_WAREHOUSE     -> tracelake_warehouse      warehouse root  (default <home>/tracelake/warehouse)
#   TRACELAKE_TRACKING_URI  -> tracelake_tracking_uri   MLflow          (default: infra/local/mlflow.sh's server
#                                                       when it runs, else sqlite:///<warehouse>/mlflow.db)
#   TRACELAKE_SPARK_MASTER  -> connection spark_tracelake (default: not defined = local[*] on this machine)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv_bin="${VENV_BIN:-$repo/.venv/bin}"

action="${1:-start}"; [ $# -gt 0 ] && shift
port="${TRACELAKE_AIRFLOW_PORT:-8080}"
while [ $# -gt 0 ]; do
  case "$1" in
    --port) port="$2"; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

export AIRFLOW_HOME="${TRACELAKE_AIRFLOW_HOME:-${TMPDIR:-/tmp}/tracelake-airflow}"
export AIRFLOW__CORE__DAGS_FOLDER="$repo/dags"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__API__PORT="$port"
export AIRFLOW__API__HOST="${AIRFLOW__API__HOST:-127.0.0.1}"   # loopback only (set 0.0.0.0 to share the UI)
export PATH="$venv_bin:$PATH"                      # airflow, spark-submit and the stages' python
export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
[ -n "${TRACELAKE_RAW:-}" ] && export AIRFLOW_VAR_TRACELAKE_RAW="$TRACELAKE_RAW"
[ -n "${TRACELAKE_WAREHOUSE:-}" ] && export AIRFLOW_VAR_TRACELAKE_WAREHOUSE="$TRACELAKE_WAREHOUSE"
if [ -z "${TRACELAKE_TRACKING_URI:-}" ] && uri="$("$here/mlflow.sh" uri 2>/dev/null)"; then
  TRACELAKE_TRACKING_URI="$uri"
fi
[ -n "${TRACELAKE_TRACKING_URI:-}" ] && export AIRFLOW_VAR_TRACELAKE_TRACKING_URI="$TRACELAKE_TRACKING_URI"
[ -n "${TRACELAKE_SPARK_MASTER:-}" ] && export AIRFLOW_CONN_SPARK_TRACELAKE="{\"conn_type\": \"spark\", \"host\": \"$TRACELAKE_SPARK_MASTER\"}"

case "$action" in
  start)
    mkdir -p "$AIRFLOW_HOME"
    echo "AIRFLOW_HOME=$AIRFLOW_HOME  DAGs: $AIRFLOW__CORE__DAGS_FOLDER  UI: http://127.0.0.1:$port" >&2
    exec "$venv_bin/airflow" standalone
    ;;
  env)
    for v in AIRFLOW_HOME AIRFLOW__CORE__DAGS_FOLDER AIRFLOW__CORE__LOAD_EXAMPLES AIRFLOW__API__PORT AIRFLOW__API__HOST PATH SPARK_LOCAL_IP \
             AIRFLOW_VAR_TRACELAKE_RAW AIRFLOW_VAR_TRACELAKE_WAREHOUSE AIRFLOW_VAR_TRACELAKE_TRACKING_URI AIRFLOW_CONN_SPARK_TRACELAKE; do
      if [ -n "${!v:-}" ]; then printf 'export %s=%q\n' "$v" "${!v}"; fi
    done
    ;;
  *) echo "usage: $0 [start|env] [--port P]" >&2; exit 2 ;;
esac
