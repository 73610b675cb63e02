"""A real Spark standalone cluster for integration tests: ``infra/local/spark.sh`` on loopback.

Import the fixture into a test module (``from spark_cluster import cluster  # noqa: F401``): each module
gets its own master and two workers (1 core, 2 GiB each) from the pyspark package's jars, in the test's
temp folder; ``spark.sh stop`` at the end, then SIGKILL by pid for any process group still alive (every
master and worker pid the cluster ever had, restarted workers included).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SPARK_SH = REPO / "infra" / "local" / "spark.sh"


@dataclass
class Cluster:
    """A running ``spark.sh`` cluster: master URL, state dir, the env its commands run with."""

    url: str
    dir: Path
    env: dict
    seen: set[int] = field(default_factory=set)  # every master/worker pid read so far (for the last-resort kill)
    connect_url: str = ""  # sc://… of its Spark Connect server, once ``script("connect")`` started one

    def ports(self) -> dict[str, int]:
        """``{name: port}`` from the state dir's ``ports`` file (``master``, ``webui``, ``worker-I``, …)."""
        return {n: int(p) for n, p in (line.split() for line in (self.dir / "ports").read_text().splitlines())}

    def pids(self) -> list[int]:
        """Pids of the master and the workers now (each leads its own process group)."""
        pids = [int(f.read_text()) for f in sorted(self.dir.glob("*.pid"))]
        self.seen.update(pids)
        return pids

    def pid_of(self, name: str) -> int:
        """Pid of ``master`` or ``worker-I``."""
        pid = int((self.dir / f"{name}.pid").read_text())
        self.seen.add(pid)
        return pid

    def master_state(self) -> dict:
        """The master's ``/json/`` (workers, active and completed applications)."""
        return get_json(f"http://127.0.0.1:{self.ports()['webui']}/json/")

    def script(self, *args: str, timeout: float = 90) -> subprocess.CompletedProcess:
        """Run ``spark.sh ARGS --dir STATE``."""
        res = subprocess.run(
            [str(SPARK_SH), *args, "--dir", str(self.dir)],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if self.dir.joinpath("ports").exists():
            self.pids()
        return res


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)


def group_alive(pid: int) -> bool:
    """Whether any process of the process group ``pid`` runs."""
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - a recycled pid of someone else's process
        return True
    return True


def cluster_env() -> dict:
    """This interpreter for the workers and the drivers, this checkout first on the path, loopback only."""
    return {
        **os.environ,
        "PYTHON": sys.executable,
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "TRACELAKE_SPARK_TIMEOUT": "150",
        "TRACELAKE_SPARK_MASTER_PORT": "0",  # a free port, not 7077: test modules start their clusters side by side
        "TRACELAKE_SPARK_CONNECT_PORT": "0",  # nor 15002
        "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Start master + 2 workers with ``spark.sh start``; ``stop`` at the end, and kill by pid whatever is left."""
    with running_cluster(tmp_path_factory.mktemp("spark-cluster")) as c:
        yield c


@contextmanager
def running_cluster(folder: Path, extra_env: dict | None = None):
    """A started :class:`Cluster` in ``folder`` whose daemons (so executors and Python workers) also get
    ``extra_env`` (e.g. a warehouse's ``AWS_*`` credentials, as a worker machine's own would be)."""
    c = Cluster(url="", dir=folder, env={**cluster_env(), **(extra_env or {})})
    try:
        started = c.script("start", timeout=180)
        assert started.returncode == 0, started.stderr[-3000:]
        c.url = started.stdout.strip().splitlines()[-1]
        assert c.url == f"spark://127.0.0.1:{c.ports()['master']}"
        yield c
    finally:
        try:
            c.script("stop")
        finally:
            for pid in sorted(
                c.seen
            ):  # last resort when stop failed: the whole group (worker, executors, Python workers)
                if group_alive(pid):
                    os.killpg(pid, signal.SIGKILL)
