"""Finding the Spark master (jobs/spark.py): ``--master local-cluster`` resolved from ``infra/local/spark.sh``'s state
folder, and a ``spark://`` master nothing listens on refused in seconds with one line, before any JVM starts — also
through ``tracelake run`` itself (a subprocess: its whole terminal output)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.spark import LOCAL_CLUSTER, SparkUnavailable, check_master, resolve_master

TRACELAKE = Path(sys.executable).parent / "tracelake"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _state(folder: Path, pid: int, master_port: int) -> None:
    """The two files of spark.sh's state folder that name the running master."""
    (folder / "master.pid").write_text(f"{pid}\n")
    (folder / "ports").write_text(f"master {master_port}\nwebui 1\nworker-1 2\nworker-1-webui 3\n")


def test_local_cluster_is_the_running_masters_url(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACELAKE_SPARK_DIR", str(tmp_path))
    _state(tmp_path, os.getpid(), 7123)
    assert resolve_master(LOCAL_CLUSTER) == "spark://127.0.0.1:7123"
    assert resolve_master("spark://10.0.0.1:7077") == "spark://10.0.0.1:7077"
    assert resolve_master("local[2]") == "local[2]"


def test_local_cluster_not_running_names_the_folder_and_how_to_start(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACELAKE_SPARK_DIR", str(tmp_path / "never"))
    with pytest.raises(SparkUnavailable, match=r"no local Spark cluster runs \(state folder .*never\); start one with"):
        resolve_master(LOCAL_CLUSTER)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    monkeypatch.setenv("TRACELAKE_SPARK_DIR", str(tmp_path))
    _state(tmp_path, dead.pid, 7123)  # a stale pid file: the master was killed
    with pytest.raises(SparkUnavailable, match="infra/local/spark.sh start"):
        resolve_master(LOCAL_CLUSTER)


def test_unreachable_master_fails_at_once_with_its_url():
    port = _closed_port()
    url = f"spark://127.0.0.1:{port}"
    with pytest.raises(SparkUnavailable) as err:
        check_master(url)
    assert str(err.value).startswith(f"cannot reach the Spark master {url} (127.0.0.1:{port}: ")
    assert "\n" not in str(err.value) and "infra/local/spark.sh start" in str(err.value)
    check_master("local[2]")  # left to Spark
    with socket.socket() as listening:  # one of two addresses answers: reachable
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        check_master(f"spark://127.0.0.1:{port},127.0.0.1:{listening.getsockname()[1]}")


def test_tracelake_run_on_an_unreachable_master_prints_one_line(tmp_path):
    """No green check, no Python or Java stack trace, exit 1, in seconds."""
    (tmp_path / "raw").mkdir()
    url = f"spark://127.0.0.1:{_closed_port()}"
    env = {**os.environ, "TERM": "dumb", "COLUMNS": "200"}
    start = time.monotonic()
    out = subprocess.run(
        [str(TRACELAKE), "run", "--raw", str(tmp_path / "raw"), "--warehouse", str(tmp_path / "wh"), "--master", url],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 1, out
    assert time.monotonic() - start < 60  # a JVM's connect retries take about a minute; this fails before any JVM
    errors = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith(f"tracelake run: cannot reach the Spark master {url}"), out.stderr
    assert "✓" not in out.stdout and "✗ Starting Spark" in out.stdout, out.stdout
    assert "Traceback" not in out.stdout + out.stderr and "at org.apache" not in out.stdout + out.stderr


def test_local_connect_and_sc_urls(tmp_path, monkeypatch):
    from jobs.spark import LOCAL_CONNECT, is_connect_master

    monkeypatch.setenv("TRACELAKE_SPARK_DIR", str(tmp_path))
    with pytest.raises(SparkUnavailable, match=r"no Spark Connect server runs .*infra/local/spark.sh connect"):
        resolve_master(LOCAL_CONNECT)
    (tmp_path / "connect.pid").write_text(f"{os.getpid()}\n")
    (tmp_path / "connect.port").write_text("connect 15123\n")
    assert resolve_master(LOCAL_CONNECT) == "sc://127.0.0.1:15123"
    assert is_connect_master("sc://h:1") and is_connect_master(LOCAL_CONNECT) and not is_connect_master("local[2]")
    port = _closed_port()
    with pytest.raises(SparkUnavailable, match=rf"cannot reach the Spark master sc://127.0.0.1:{port}/;user_id=a "):
        check_master(f"sc://127.0.0.1:{port}/;user_id=a")
