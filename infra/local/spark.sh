#!/usr/bin/env bash
# Local Spark standalone cluster for tracelake: one master and two workers on 127.0.0.1, from the pyspark package's jars.
#
#   infra/local/spark.sh start  [--dir D] [--workers N]  # start in the background, wait until every worker is
#                                                      # registered, print the master URL (last stdout line);
#                                                      # while the master runs: start again the workers that
#                                                      # died (same ports), e.g. one killed with -9
#   infra/local/spark.sh url    [--dir D]             # print the master URL of the running cluster
#   infra/local/spark.sh status [--dir D]             # exit 0 when master and all workers run, 3 when stopped,
#                                                      # 1 when only part of it runs (then `stop`, `start`)
#   infra/local/spark.sh connect [--dir D] [--master M]  # a Spark Connect server (SparkConnectServer from the same
#                                                      # jars) on master M (default: this cluster's when it runs,
#                                                      # else local[*]); waits until it listens; last stdout line:
#                                                      # its URL sc://127.0.0.1:15002 (else a free port);
#                                                      # `tracelake run --master local-connect` finds it;
#                                                      # executors idle $TRACELAKE_SPARK_IDLE_TIMEOUT_S s (30)
#                                                      # are given back to the cluster
#   infra/local/spark.sh connect-url [--dir D]        # print the sc:// URL of the running Connect server
#   infra/local/spark.sh stop   [--dir D]             # SIGTERM the Connect server, workers (with their executors),
#                                                      # then the master; wait (SIGKILL after 30 s)
#
# Processes: `spark-class org.apache.spark.deploy.master.Master` and `…deploy.worker.Worker spark://127.0.0.1:P`
# (Java 17), every port on 127.0.0.1 (SPARK_LOCAL_IP=127.0.0.1): the master's 7077 ($TRACELAKE_SPARK_MASTER_PORT) when it
# is free, else one picked free (start says which); the others picked free. Nothing is downloaded.
# State in D = $TRACELAKE_SPARK_DIR (default ${TMPDIR:-/tmp}/tracelake-spark): master.pid, worker-I.pid, ports
# (master, webui, worker-I, worker-I-webui: one `name port` a line), master.log, worker-I.log, work/ (executor logs:
# work/<app id>/<executor id>/stderr). Worker size: $TRACELAKE_SPARK_WORKER_CORES (1) cores and
# $TRACELAKE_SPARK_WORKER_MEMORY (2g) each. Start timeout: $TRACELAKE_SPARK_TIMEOUT s (default 120).
# Workers' Python: PYSPARK_PYTHON = $PYTHON (default the repo's .venv/bin/python); they import tracelake as installed
# in it, with this checkout first on their PYTHONPATH (infra/local/README.md, "Spark standalone cluster").
# Then: tracelake run --master local-cluster --raw R --warehouse W   (jobs/spark.py reads D's master.pid and ports;
# the same as --master "$(infra/local/spark.sh url)")
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
python="${PYTHON:-$repo/.venv/bin/python}"
[ -x "$python" ] || python="$(command -v python3)"

action="${1:-}"; shift || true
dir="${TRACELAKE_SPARK_DIR:-${TMPDIR:-/tmp}/tracelake-spark}"
workers=2
timeout="${TRACELAKE_SPARK_TIMEOUT:-120}"
connect_master=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir="$2"; shift 2 ;;
    --master) connect_master="$2"; shift 2 ;;
    --workers) workers="$2"; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

port_of() {  # port_of NAME [FILE]: the port recorded for NAME at start (in ports, or connect.port)
  [ -f "$dir/${2:-ports}" ] && awk -v n="$1" '$1 == n { print $2 }' "$dir/${2:-ports}"
}
alive() {  # alive PIDFILE: print the pid when its process runs
  [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null && cat "$1"
}
worker_pidfiles() {  # every worker-I.pid of the state dir (whatever --workers was at start)
  compgen -G "$dir/worker-*.pid" || true
}
alive_workers() {  # alive_workers WEBUI_PORT: number of ALIVE workers the master's /json/ reports (fails if no answer)
  "$python" - "$1" <<'PY' 2>/dev/null
import json, sys, urllib.request
with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/json/", timeout=2) as r:
    state = json.load(r)
print(sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE"))
PY
}
stop_group() {  # stop_group PIDFILE: SIGTERM the process group (setsid) of the pid, wait until it is empty
  local pid
  pid="$(alive "$1")" || { rm -f "$1"; return 0; }
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 300); do
    kill -0 -- "-$pid" 2>/dev/null || kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 -- "-$pid" 2>/dev/null || kill -0 "$pid" 2>/dev/null; then
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$1"
}

start_worker() {  # start_worker I: worker I in its own session on its recorded ports, pid in worker-I.pid
  setsid "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.worker.Worker "spark://127.0.0.1:$(port_of master)" \
    --host 127.0.0.1 --port "$(port_of "worker-$1")" --webui-port "$(port_of "worker-$1-webui")" \
    --cores "${TRACELAKE_SPARK_WORKER_CORES:-1}" --memory "${TRACELAKE_SPARK_WORKER_MEMORY:-2g}" \
    --work-dir "$dir/work" >> "$dir/worker-$1.log" 2>&1 < /dev/null &
  echo $! > "$dir/worker-$1.pid"
}
wait_registered() {  # wait_registered N: until the master reports N ALIVE workers; stop everything on failure
  local deadline=$(( $(date +%s) + timeout )) f log
  until [ "$(alive_workers "$(port_of webui)" || echo 0)" -ge "$1" ]; do
    for f in "$dir/master.pid" $(worker_pidfiles); do
      if ! alive "$f" >/dev/null; then
        log="${f%.pid}.log"
        echo "$(basename "${f%.pid}") exited during start; last lines of $log:" >&2; tail -20 "$log" >&2
        "$0" stop --dir "$dir" >&2 || true; exit 1
      fi
    done
    if [ "$(date +%s)" -ge "$deadline" ]; then
      echo "not all $1 workers registered after ${timeout} s; see $dir/*.log" >&2
      "$0" stop --dir "$dir" >&2 || true; exit 1
    fi
    sleep 0.5
  done
}
spark_env() {  # the environment of the daemons (and so of the executors and their Python workers)
  SPARK_HOME="$("$python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')" \
    || { echo "pyspark not importable by $python (set PYTHON)" >&2; exit 1; }
  export SPARK_HOME SPARK_LOCAL_IP=127.0.0.1 PYSPARK_PYTHON="$python"
  export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"  # executors import this checkout's tracelake first
}

case "$action" in
  start)
    if mpid="$(alive "$dir/master.pid")"; then
      expected="$(worker_pidfiles | wc -l)"
      dead=()
      for f in $(worker_pidfiles); do alive "$f" >/dev/null || dead+=("$(basename "$f" .pid)"); done
      if [ ${#dead[@]} -gt 0 ]; then  # the master runs: start the dead workers again on their ports
        spark_env
        echo "spark master (pid $mpid) runs; starting again: ${dead[*]}" >&2
        for w in "${dead[@]}"; do start_worker "${w#worker-}"; done
      fi
      n="$(alive_workers "$(port_of webui)" || echo 0)"
      [ "$n" -ge "$expected" ] || wait_registered "$expected"
      echo "spark://127.0.0.1:$(port_of master)"; exit 0
    fi
    spark_env
    mkdir -p "$dir/work"
    rm -f "$dir"/worker-*.pid
    # 2 + 2N distinct free loopback ports, bound together so that none is handed out twice; the master on
    # $TRACELAKE_SPARK_MASTER_PORT (default 7077, Spark's own) when it is free
    "$python" - "$workers" "${TRACELAKE_SPARK_MASTER_PORT:-7077}" > "$dir/ports" <<'PY'
import socket, sys
n, wanted = int(sys.argv[1]), int(sys.argv[2])
names = ["master", "webui"] + [f"worker-{i}{s}" for i in range(1, n + 1) for s in ("", "-webui")]
socks = [socket.socket() for _ in names]
try:
    socks[0].bind(("127.0.0.1", wanted))
except OSError:
    socks[0].bind(("127.0.0.1", 0))
    print(f"port {wanted} is taken: the master listens on {socks[0].getsockname()[1]} "
          "(--master local-cluster, or `infra/local/spark.sh url`, finds it)", file=sys.stderr)
for s in socks[1:]:
    s.bind(("127.0.0.1", 0))
for name, s in zip(names, socks):
    print(name, s.getsockname()[1])
for s in socks:
    s.close()
PY
    master_url="spark://127.0.0.1:$(port_of master)"
    # own session (setsid) per daemon: `stop` signals the whole group (a worker's executors and their Python workers)
    setsid "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.master.Master --host 127.0.0.1 \
      --port "$(port_of master)" --webui-port "$(port_of webui)" > "$dir/master.log" 2>&1 < /dev/null &
    echo $! > "$dir/master.pid"
    for i in $(seq 1 "$workers"); do : > "$dir/worker-$i.log"; start_worker "$i"; done
    wait_registered "$workers"
    echo "master web UI: http://127.0.0.1:$(port_of webui) ($workers workers, logs in $dir)" >&2
    echo "$master_url"
    ;;
  url)
    alive "$dir/master.pid" >/dev/null || { echo "spark master not running (dir $dir)" >&2; exit 3; }
    echo "spark://127.0.0.1:$(port_of master)"
    ;;
  connect-url)
    alive "$dir/connect.pid" >/dev/null || { echo "no Spark Connect server running (dir $dir)" >&2; exit 3; }
    echo "sc://127.0.0.1:$(port_of connect connect.port)"
    ;;
  status)
    mpid="$(alive "$dir/master.pid")" || {
      [ -z "$(for f in $(worker_pidfiles); do alive "$f"; done)" ] || { echo "master stopped, workers running (dir $dir)"; exit 1; }
      echo "stopped (dir $dir)"; exit 3; }
    expected="$(worker_pidfiles | wc -l)"
    n="$(alive_workers "$(port_of webui)" || echo 0)"
    if [ "$expected" -ge 1 ] && [ "$n" -eq "$expected" ]; then
      echo "running: master pid $mpid, spark://127.0.0.1:$(port_of master), web UI http://127.0.0.1:$(port_of webui), $n workers, dir $dir"
      exit 0
    fi
    echo "degraded: master pid $mpid, $n of $expected workers alive (dir $dir)"; exit 1
    ;;
  connect)
    if alive "$dir/connect.pid" >/dev/null; then exec "$0" connect-url --dir "$dir"; fi
    spark_env
    mkdir -p "$dir"
    if [ -z "$connect_master" ]; then
      connect_master="local[*]"
      alive "$dir/master.pid" >/dev/null && connect_master="spark://127.0.0.1:$(port_of master)"
    fi
    "$python" - "${TRACELAKE_SPARK_CONNECT_PORT:-15002}" > "$dir/connect.port" <<'PY'
import socket, sys
wanted = int(sys.argv[1])
s = socket.socket()
try:
    s.bind(("127.0.0.1", wanted))
except OSError:
    s.bind(("127.0.0.1", 0))
    print(f"port {wanted} is taken: the Connect server listens on {s.getsockname()[1]}", file=sys.stderr)
print("connect", s.getsockname()[1])
s.close()
PY
    cport="$(port_of connect connect.port)"
    # on a cluster the server is one long-running application: it gives its executors back after
    # $TRACELAKE_SPARK_IDLE_TIMEOUT_S s idle (default 30), those holding shuffle or cached data too (dynamic allocation
    # with shuffle tracking: no external shuffle service), so other applications get cores too; a longer timeout
    # keeps them for the next stage of a DAG run (each new executor is a JVM and Python workers to start)
    idle="${TRACELAKE_SPARK_IDLE_TIMEOUT_S:-30}s"
    setsid "$SPARK_HOME/bin/spark-submit" --class org.apache.spark.sql.connect.service.SparkConnectServer \
      --name tracelake-connect --master "$connect_master" \
      --conf spark.connect.grpc.binding.address=127.0.0.1 --conf spark.connect.grpc.binding.port="$cport" \
      --conf spark.ui.enabled=false --conf spark.driver.host=127.0.0.1 --conf spark.driver.bindAddress=127.0.0.1 \
      --conf spark.executor.memory="${TRACELAKE_EXECUTOR_MEMORY:-1g}" --conf spark.executor.cores="${TRACELAKE_EXECUTOR_CORES:-1}" \
      --conf spark.dynamicAllocation.enabled=true --conf spark.dynamicAllocation.shuffleTracking.enabled=true \
      --conf spark.dynamicAllocation.executorIdleTimeout="$idle" --conf spark.dynamicAllocation.shuffleTracking.timeout="$idle" \
      --conf spark.dynamicAllocation.cachedExecutorIdleTimeout="$idle" \
      ${TRACELAKE_CONNECT_JAVA_OPTIONS:+--driver-java-options "$TRACELAKE_CONNECT_JAVA_OPTIONS"} \
      > "$dir/connect.log" 2>&1 < /dev/null &
    echo $! > "$dir/connect.pid"
    deadline=$(( $(date +%s) + timeout ))
    until grep -q "Spark Connect server started" "$dir/connect.log" 2>/dev/null; do
      if ! alive "$dir/connect.pid" >/dev/null; then
        echo "the Connect server exited during start; last lines of $dir/connect.log:" >&2; tail -20 "$dir/connect.log" >&2
        rm -f "$dir/connect.pid"; exit 1
      fi
      if [ "$(date +%s)" -ge "$deadline" ]; then
        echo "the Connect server did not start in ${timeout} s; see $dir/connect.log" >&2; stop_group "$dir/connect.pid"; exit 1
      fi
      sleep 0.3
    done
    echo "Spark Connect server on $connect_master (log $dir/connect.log)" >&2
    echo "sc://127.0.0.1:$cport"
    ;;
  stop)
    stop_group "$dir/connect.pid"
    for f in $(worker_pidfiles); do stop_group "$f"; done
    stop_group "$dir/master.pid"
    echo "stopped"
    ;;
  *) echo "usage: $0 start|connect|stop|url|connect-url|status [--dir D] [--workers N] [--master M]" >&2; exit 2 ;;
esac
