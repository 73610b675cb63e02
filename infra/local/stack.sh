#!/usr/bin/env bash
# The whole local stack of tracelake in one command, wired the way a team deploys it:
# S3 (SeaweedFS, s3.sh) → Airflow (airflow.sh: scheduler, dag-processor, triggerer, api-server) → Spark standalone
# cluster (spark.sh: a master and two workers, and a Spark Connect server on it) → MLflow server (mlflow.sh).
# Everything on 127.0.0.1.
#
#   infra/local/stack.sh start [--port P]   # start what is not running (each part waits until it is ready);
#                                           # Airflow's UI and REST API on P (default 8080)
#   eval "$(infra/local/stack.sh env)"      # this shell: AWS_* of the S3 server, MLFLOW_TRACKING_URI,
#                                           # TRACELAKE_SPARK_MASTER and the `airflow` CLI of the running home
#   infra/local/stack.sh status             # every part's status; exit 0 when all run, 3 otherwise
#   infra/local/stack.sh stop               # Airflow, Spark, MLflow, S3, each by its pid (data is kept)
#
# The DAGs read the landing zone $TRACELAKE_RAW (default s3://tracelake/raw, the capture hooks' sink:
# TRACELAKE_SINK=s3://tracelake/raw) with the S3 server's credentials, run every Spark stage as a client of the
# Connect server (connection spark_tracelake = its sc:// URL: no JVM starts per task) and log to the MLflow server.
# Each part keeps its own state folder and options:
# $TRACELAKE_S3_DIR, $TRACELAKE_MLFLOW_DIR / $TRACELAKE_MLFLOW_PORT, $TRACELAKE_SPARK_DIR, $TRACELAKE_AIRFLOW_HOME
# (see each script's header and infra/local/README.md).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
python="${PYTHON:-$repo/.venv/bin/python}"
[ -x "$python" ] || python="$(command -v python3)"
export PYTHON="$python"

action="${1:-}"; shift || true
airflow_args=("$@")

storage_options() {  # fsspec options of the landing zone from the S3 server's AWS_* variables (JSON)
  "$python" -c 'import json, os; print(json.dumps({"endpoint_url": os.environ["AWS_ENDPOINT_URL"],
    "key": os.environ["AWS_ACCESS_KEY_ID"], "secret": os.environ["AWS_SECRET_ACCESS_KEY"],
    "client_kwargs": {"region_name": os.environ.get("AWS_DEFAULT_REGION", "us-east-1")}}))'
}

wire() {  # wire S3_EXPORTS MLFLOW_URI SPARK_URL: the DAGs' configuration (airflow.sh reads it) from the parts
  eval "$1"
  export TRACELAKE_RAW="${TRACELAKE_RAW:-s3://tracelake/raw}" TRACELAKE_STORAGE_OPTIONS="$(storage_options)" \
    TRACELAKE_TRACKING_URI="$2" MLFLOW_TRACKING_URI="$2" TRACELAKE_SPARK_MASTER="$3"
}

case "$action" in
  start)
    s3_env="$("$here/s3.sh" start)"
    tracking="$("$here/mlflow.sh" start | tail -1)"
    "$here/spark.sh" start >/dev/null
    master="$("$here/spark.sh" connect | tail -1)"
    wire "$s3_env" "$tracking" "$master"
    ui="$("$here/airflow.sh" start "${airflow_args[@]}" | tail -1)"
    cat >&2 <<EOF
tracelake local stack:
  S3       $AWS_ENDPOINT_URL   landing zone ${TRACELAKE_RAW:-s3://tracelake/raw}
  MLflow   $tracking
  Spark    $master
  Airflow  $ui   (unpause tracelake_ingest and tracelake_fleet_report in the UI, or:
           eval "\$($0 env)"; airflow dags unpause tracelake_ingest)
EOF
    echo "$ui"
    ;;
  env)
    s3_env="$("$here/s3.sh" env)" || { echo "the stack's S3 server has no state; $0 start" >&2; exit 3; }
    tracking="$("$here/mlflow.sh" uri)" && master="$("$here/spark.sh" connect-url)" || { echo "$0 start first" >&2; exit 3; }
    wire "$s3_env" "$tracking" "$master"
    echo "$s3_env" | grep '^export '
    for v in MLFLOW_TRACKING_URI TRACELAKE_SPARK_MASTER; do printf 'export %s=%q\n' "$v" "${!v}"; done
    "$here/airflow.sh" env
    ;;
  status)
    rc=0
    for part in s3 mlflow spark airflow; do
      out="$("$here/$part.sh" status 2>&1)" || rc=3
      printf '%-8s %s\n' "$part" "$(echo "$out" | tr '\n' ' ')"
    done
    exit $rc
    ;;
  stop)
    rc=0
    "$here/airflow.sh" stop || rc=1
    "$here/spark.sh" stop >/dev/null || rc=1
    "$here/mlflow.sh" stop >/dev/null || rc=1
    if "$here/s3.sh" status >/dev/null 2>&1; then "$here/s3.sh" stop || rc=1; fi
    echo "stopped" >&2
    exit $rc
    ;;
  *) echo "usage: $0 start|env|status|stop [--port P]" >&2; exit 2 ;;
esac
