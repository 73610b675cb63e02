#!/usr/bin/env bash
# Airflow 3 for tracelake's DAGs (dags/) on loopback, the way a team runs it: scheduler, dag-processor,
# triggerer and api-server as separate background processes on one metadata DB.
#
#   infra/local/airflow.sh start  [--port P]   # `airflow db migrate`, start the four processes, wait until the
#                                              # api-server answers and the scheduler heartbeats; UI http://127.0.0.1:P
#                                              # (when some of them run: start only the ones that died, e.g. a
#                                              # scheduler killed with -9; its orphaned tasks finish or are reset)
#   infra/local/airflow.sh status              # exit 0 when all four run and the scheduler heartbeats, 3 otherwise
#   infra/local/airflow.sh stop                # SIGTERM each running process (it ends its children) and the
#                                              # groups of dead ones (<home>/<name>.groups: a restarted
#                                              # scheduler's predecessor), every group again after half the
#                                              # grace, SIGKILL after $TRACELAKE_AIRFLOW_STOP_GRACE_S s (default 90;
#                                              # a dead one's group after $TRACELAKE_AIRFLOW_ORPHAN_GRACE_S s, 10)
#   infra/local/airflow.sh standalone [--port P]  # foreground `airflow standalone`; Ctrl-C stops everything
#   eval "$(infra/local/airflow.sh env)"       # this shell's `airflow` CLI on the same home, e.g.
#                                              #   airflow dags unpause tracelake_ingest
#                                              #   airflow backfill create --dag-id tracelake_ingest \
#                                              #     --from-date 2026-03-01T10:00:00+00:00 --to-date 2026-03-01T12:00:00+00:00
#
# Ports: P (api-server, default 8080; kept in <home>/port for status/stop/env), P+1 and P+2 (the scheduler's and
# triggerer's log servers).
# Home: $TRACELAKE_AIRFLOW_HOME (default ${TMPDIR:-/tmp}/tracelake-airflow; SQLite metadata DB <home>/airflow.db in WAL
# mode, writers wait 60 s for its lock; LocalExecutor). AIRFLOW__DATABASE__SQL_ALCHEMY_CONN chooses another DB.
# Each process keeps <home>/<name>.pid and <home>/<name>.log (scheduler, dag-processor, triggerer, api-server).
# Login: the simple auth manager with every user admin (loopback only; set AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS
# =False for a password login). Start timeout: $TRACELAKE_AIRFLOW_TIMEOUT s (default 300).
# DAGs folder: $TRACELAKE_DAGS_FOLDER (default <repo>/dags).
# Configuration (jobs/pipeline/settings.py; Airflow Variables, or these environment variables, which win):
#   TRACELAKE_RAW           -> tracelake_raw            landing zone    (default <home>/tracelake/landing)
#   TRACELAKE_WAREHOUSE     -> tracelake_warehouse      warehouse root  (default <home>/tracelake/warehouse)
#   TRACELAKE_TRACKING_URI  -> tracelake_tracking_uri   MLflow          (default: infra/local/mlflow.sh's server
#                                                       when it runs, else sqlite:///<warehouse>/mlflow.db)
#   TRACELAKE_STORAGE_OPTIONS -> tracelake_storage_options  fsspec options of the landing zone and an s3:// warehouse (JSON)
#   TRACELAKE_SPARK_CONF    -> tracelake_spark_conf     extra Spark properties (JSON)
#   TRACELAKE_LOCAL_MAX_BYTES -> tracelake_local_max_bytes  intervals below it run on the local executor in each task
#                                                       (default 64000000; 0: always Spark)
#   TRACELAKE_SPARK_MASTER  -> connection spark_tracelake (default: not defined = local[*] on this machine)
#   TRACELAKE_INGEST_SCHEDULE, TRACELAKE_INGEST_START, TRACELAKE_INGEST_END  the ingest DAG's cron and bounds
#   TRACELAKE_TASK_RETRIES, TRACELAKE_TASK_RETRY_DELAY_S                     task retries (default 2, 300 s)
# PYSPARK_PYTHON defaults to the venv's python: the Spark stages' Python workers, also on a local cluster
# (infra/local/spark.sh runs its workers with the same venv).
# The processes read these when they start: `stop` then `start` to change them.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv_bin="${VENV_BIN:-$repo/.venv/bin}"

action="${1:-start}"; [ $# -gt 0 ] && shift
port="${TRACELAKE_AIRFLOW_PORT:-}"
timeout="${TRACELAKE_AIRFLOW_TIMEOUT:-300}"
while [ $# -gt 0 ]; do
  case "$1" in
    --port) port="$2"; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

export AIRFLOW_HOME="${TRACELAKE_AIRFLOW_HOME:-${TMPDIR:-/tmp}/tracelake-airflow}"
# status/stop/env (and start while part of it runs) without --port: the port the home was started on
# (kept in <home>/port), else 8080
[ -z "$port" ] && [ -s "$AIRFLOW_HOME/port" ] && { [ "$action" != start ] || [ -n "$(for n in scheduler \
  dag-processor triggerer api-server; do f="$AIRFLOW_HOME/$n.pid"; [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null \
  && echo "$n"; done)" ]; } && port="$(cat "$AIRFLOW_HOME/port")"
port="${port:-8080}"
export AIRFLOW__CORE__DAGS_FOLDER="${TRACELAKE_DAGS_FOLDER:-$repo/dags}"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__EXECUTOR="${AIRFLOW__CORE__EXECUTOR:-LocalExecutor}"
# task slots (the LocalExecutor's worker processes): one per core, at least 2 — Airflow's default 32 workers on a
# laptop are 32 idle Python processes to start and to stop, and a small interval's stage task computes on the
# machine's cores itself (the local executor in the task: jobs.pipeline.stages.choose_engine)
cores="$(nproc 2>/dev/null || echo 2)"
export AIRFLOW__CORE__PARALLELISM="${AIRFLOW__CORE__PARALLELISM:-$(( cores > 2 ? cores : 2 ))}"
# an idle scheduler loops every 0.25 s (Airflow's default 1 s): a task's successor starts ~0.4 s sooner on average,
# which is most of the gap between the stage tasks of a small interval's run
export AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME="${AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME:-0.25}"
# the SQLite metadata DB: a writer waits up to 60 s for the lock (sqlite3's default 5 s fails "database is locked"
# while the scheduler, dag-processor, api-server and tasks write at once on a loaded machine); WAL after migrate
sqlite_db="$AIRFLOW_HOME/airflow.db"
sqlite_conn="sqlite:///$sqlite_db?timeout=60"
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="${AIRFLOW__DATABASE__SQL_ALCHEMY_CONN:-$sqlite_conn}"
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS:-True}"
export AIRFLOW__API__PORT="$port"
export AIRFLOW__API__HOST="${AIRFLOW__API__HOST:-127.0.0.1}"   # loopback only (set 0.0.0.0 to share the UI)
export AIRFLOW__API__BASE_URL="http://127.0.0.1:$port"
# the scheduler's and triggerer's log servers (fixed 8793/8794 by default): next to the api-server's port
export AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT="${AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT:-$((port + 1))}"
export AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT="${AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT:-$((port + 2))}"
# task processes reach the scheduler's work through the api-server's execution API
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="http://127.0.0.1:$port/execution/"
export PATH="$venv_bin:$PATH"                      # airflow, spark-submit and the stages' python
export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
export PYSPARK_PYTHON="${PYSPARK_PYTHON:-$venv_bin/python}"
[ -n "${TRACELAKE_RAW:-}" ] && export AIRFLOW_VAR_TRACELAKE_RAW="$TRACELAKE_RAW"
[ -n "${TRACELAKE_WAREHOUSE:-}" ] && export AIRFLOW_VAR_TRACELAKE_WAREHOUSE="$TRACELAKE_WAREHOUSE"
[ -n "${TRACELAKE_STORAGE_OPTIONS:-}" ] && export AIRFLOW_VAR_TRACELAKE_STORAGE_OPTIONS="$TRACELAKE_STORAGE_OPTIONS"
[ -n "${TRACELAKE_SPARK_CONF:-}" ] && export AIRFLOW_VAR_TRACELAKE_SPARK_CONF="$TRACELAKE_SPARK_CONF"
[ -n "${TRACELAKE_LOCAL_MAX_BYTES:-}" ] && export AIRFLOW_VAR_TRACELAKE_LOCAL_MAX_BYTES="$TRACELAKE_LOCAL_MAX_BYTES"
if [ -z "${TRACELAKE_TRACKING_URI:-}" ] && uri="$("$here/mlflow.sh" uri 2>/dev/null)"; then
  TRACELAKE_TRACKING_URI="$uri"
fi
[ -n "${TRACELAKE_TRACKING_URI:-}" ] && export AIRFLOW_VAR_TRACELAKE_TRACKING_URI="$TRACELAKE_TRACKING_URI"
[ -n "${TRACELAKE_SPARK_MASTER:-}" ] && export AIRFLOW_CONN_SPARK_TRACELAKE="{\"conn_type\": \"spark\", \"host\": \"$TRACELAKE_SPARK_MASTER\"}"

components=(scheduler dag-processor triggerer api-server)

secret() {  # secret NAME: a random value kept in <home>/NAME (mode 0600), the same for every process
  local f="$AIRFLOW_HOME/$1"
  [ -s "$f" ] || (umask 077; "$venv_bin/python" -c 'import secrets; print(secrets.token_urlsafe(32))' > "$f")
  cat "$f"
}
pid_of() {  # pid_of NAME: print the pid of a running component
  local f="$AIRFLOW_HOME/$1.pid"
  [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null && cat "$f"
}
api_answers() {  # the api-server's health endpoint answers 200
  "$venv_bin/python" - "$port" <<'PY' >/dev/null 2>&1
import sys, urllib.request
with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/api/v2/monitor/health", timeout=3) as r:
    sys.exit(0 if r.status == 200 else 1)
PY
}
scheduler_heartbeats() {
  "$venv_bin/airflow" jobs check --job-type SchedulerJob --local >/dev/null 2>&1
}
stop_all() {  # one component after the other (the scheduler first: its executor's workers still reach the
  # api-server while they end): SIGTERM to the running process itself, which stops its own children (the
  # scheduler ends its LocalExecutor workers through their queue: a SIGTERM to every worker at once can kill the one
  # that holds the queue's read lock, and a worker that ran a task, whose SIGTERM the task supervisor took over, then
  # waits on that lock for ever), and to the groups of earlier processes that died (their workers have no one to
  # ask); SIGTERM to every group after half the grace (a scheduler waiting for its running tasks stops waiting:
  # "Signal again if you don't want to wait"), SIGKILL after $TRACELAKE_AIRFLOW_STOP_GRACE_S s (default 90: a loaded
  # scheduler took over 30 s), naming the processes still there. A dead process's group gets SIGKILL after
  # $TRACELAKE_AIRFLOW_ORPHAN_GRACE_S s (default 10): its idle LocalExecutor workers and log server ignore SIGTERM
  # (they wait for their parent's queue), which held every `stop` after a scheduler restart for the full grace
  local name pid groups g t left orphans grace="${TRACELAKE_AIRFLOW_STOP_GRACE_S:-90}" started
  local orphan_grace="${TRACELAKE_AIRFLOW_ORPHAN_GRACE_S:-10}"
  for name in "${components[@]}"; do
    pid="$(pid_of "$name")" || pid=""
    groups="$( { [ -n "$pid" ] && echo "$pid"; cat "$AIRFLOW_HOME/$name.groups" 2>/dev/null || true; } | sort -u)"
    started=$SECONDS
    for g in $groups; do
      if [ "$g" = "$pid" ]; then kill -TERM "$g" 2>/dev/null || true; else kill -TERM -- "-$g" 2>/dev/null || true; fi
    done
    for t in $(seq 1 $((grace * 5))); do
      left=""; for g in $groups; do kill -0 -- "-$g" 2>/dev/null && left="$left $g"; done
      [ -z "$left" ] && break
      if [ "$t" -eq $((orphan_grace * 5)) ]; then
        orphans=""; for g in $left; do [ "$g" != "$pid" ] && orphans="$orphans $g"; done
        if [ -n "$orphans" ]; then
          echo "airflow $name: process groups$orphans of a dead $name still running after $orphan_grace s: SIGKILL" >&2
          for g in $orphans; do kill -KILL -- "-$g" 2>/dev/null || true; done
        fi
      fi
      if [ "$t" -eq $((grace * 5 / 2)) ]; then
        echo "airflow $name: process groups$left still running after $((grace / 2)) s: SIGTERM again" >&2
        for g in $left; do kill -TERM -- "-$g" 2>/dev/null || true; done
      fi
      sleep 0.2
    done
    if [ -n "$left" ]; then
      echo "airflow $name: process groups$left still running after $grace s: SIGKILL" >&2
      for g in $left; do ps -o pid=,stat=,etime=,args= -g "$g" 2>/dev/null | cut -c1-200 | sed 's/^/  /' >&2 || true; done
      for g in $left; do kill -KILL -- "-$g" 2>/dev/null || true; done
    fi
    rm -f "$AIRFLOW_HOME/$name.pid" "$AIRFLOW_HOME/$name.groups"
    [ -n "$pid" ] && echo "stopped airflow $name (pid $pid) in $((SECONDS - started)) s" >&2
  done
  return 0
}

if [ "$action" = start ] || [ "$action" = standalone ] || [ "$action" = status ]; then
  mkdir -p "$AIRFLOW_HOME"
  # one JWT secret for the api-server and the task processes it authenticates (else each process draws its own)
  AIRFLOW__API_AUTH__JWT_SECRET="${AIRFLOW__API_AUTH__JWT_SECRET:-$(secret jwt_secret)}"
  export AIRFLOW__API_AUTH__JWT_SECRET
fi

case "$action" in
  start)
    running=(); missing=()
    for name in "${components[@]}"; do
      if pid_of "$name" >/dev/null; then running+=("$name"); else missing+=("$name"); fi
    done
    if [ ${#missing[@]} -eq 0 ]; then
      echo "already running: ${running[*]} (home $AIRFLOW_HOME)" >&2; echo "http://127.0.0.1:$port"; exit 0
    fi
    if [ ${#running[@]} -gt 0 ]; then
      if [ "$port" != "$(cat "$AIRFLOW_HOME/port" 2>/dev/null)" ]; then
        echo "${running[*]} run on port $(cat "$AIRFLOW_HOME/port" 2>/dev/null), not $port (home $AIRFLOW_HOME)" >&2; exit 1
      fi
      echo "running: ${running[*]}; starting again: ${missing[*]} (home $AIRFLOW_HOME)" >&2
    else
      echo "AIRFLOW_HOME=$AIRFLOW_HOME  DAGs: $AIRFLOW__CORE__DAGS_FOLDER  UI: http://127.0.0.1:$port" >&2
      echo "$port" > "$AIRFLOW_HOME/port"
      "$venv_bin/airflow" db migrate > "$AIRFLOW_HOME/db-migrate.log" 2>&1 \
        || { echo "airflow db migrate failed; see $AIRFLOW_HOME/db-migrate.log" >&2; tail -20 "$AIRFLOW_HOME/db-migrate.log" >&2; exit 1; }
      # write-ahead log: readers (the api-server, the scheduler's queries) no longer block a writer's commit
      if [ "$AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" = "$sqlite_conn" ]; then
        "$venv_bin/python" -c 'import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute("PRAGMA journal_mode=WAL")' "$sqlite_db"
      fi
    fi
    for name in "${missing[@]}"; do
      # own session (setsid): `stop` signals the whole process group (the scheduler's executor workers too)
      setsid "$venv_bin/airflow" "$name" >> "$AIRFLOW_HOME/$name.log" 2>&1 < /dev/null &
      echo $! > "$AIRFLOW_HOME/$name.pid"
      # every group this home started, for `stop`: a dead scheduler's executor workers go on with the tasks they
      # run (and report them through the api-server), so its group outlives it
      echo $! >> "$AIRFLOW_HOME/$name.groups"
    done
    deadline=$(( $(date +%s) + timeout ))
    until api_answers && scheduler_heartbeats; do
      for name in "${components[@]}"; do
        if ! pid_of "$name" >/dev/null; then
          echo "airflow $name exited during start; last lines of $AIRFLOW_HOME/$name.log:" >&2
          tail -20 "$AIRFLOW_HOME/$name.log" >&2; stop_all; exit 1
        fi
      done
      if [ "$(date +%s)" -ge "$deadline" ]; then
        echo "airflow not ready after ${timeout} s (api-server answers and scheduler heartbeats); logs in $AIRFLOW_HOME" >&2
        stop_all; exit 1
      fi
      sleep 1
    done
    for name in "${components[@]}"; do echo "airflow $name pid $(pid_of "$name")  log $AIRFLOW_HOME/$name.log" >&2; done
    echo "http://127.0.0.1:$port"
    ;;
  status)
    rc=0
    for name in "${components[@]}"; do
      if pid="$(pid_of "$name")"; then echo "$name: running (pid $pid)"; else echo "$name: stopped"; rc=3; fi
    done
    if [ $rc -eq 0 ]; then
      api_answers && echo "api-server: answers on http://127.0.0.1:$port" || { echo "api-server: not answering"; rc=3; }
      scheduler_heartbeats && echo "scheduler: heartbeats" || { echo "scheduler: no recent heartbeat"; rc=3; }
    fi
    exit $rc
    ;;
  stop)
    stop_all
    ;;
  standalone)
    echo "AIRFLOW_HOME=$AIRFLOW_HOME  DAGs: $AIRFLOW__CORE__DAGS_FOLDER  UI: http://127.0.0.1:$port" >&2
    exec "$venv_bin/airflow" standalone
    ;;
  env)
    for v in AIRFLOW_HOME AIRFLOW__CORE__DAGS_FOLDER AIRFLOW__CORE__LOAD_EXAMPLES AIRFLOW__CORE__EXECUTOR AIRFLOW__CORE__PARALLELISM \
             AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME AIRFLOW__DATABASE__SQL_ALCHEMY_CONN \
             AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS AIRFLOW__API__PORT AIRFLOW__API__HOST AIRFLOW__API__BASE_URL \
             AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT \
             AIRFLOW__CORE__EXECUTION_API_SERVER_URL PATH SPARK_LOCAL_IP \
             AIRFLOW_VAR_TRACELAKE_RAW AIRFLOW_VAR_TRACELAKE_WAREHOUSE AIRFLOW_VAR_TRACELAKE_TRACKING_URI \
             AIRFLOW_VAR_TRACELAKE_STORAGE_OPTIONS AIRFLOW_VAR_TRACELAKE_SPARK_CONF AIRFLOW_VAR_TRACELAKE_LOCAL_MAX_BYTES \
             AIRFLOW_CONN_SPARK_TRACELAKE; do
      if [ -n "${!v:-}" ]; then printf 'export %s=%q\n' "$v" "${!v}"; fi
    done
    ;;
  *) echo "usage: $0 start|stop|status|env|standalone [--port P]" >&2; exit 2 ;;
esac
