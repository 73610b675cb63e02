"""The warehouse on S3 (a real server: SeaweedFS on loopback, ``s3_server.py``): ``tracelake run --warehouse s3://…``
on both executors, ``tracelake sql`` and ``history`` over it, two runs at once into one warehouse, and an S3
outage in the middle of a commit.

Two runs at once (different landing folders that share one job) must leave every job table equal to the two runs
one after the other: the commits of one table conflict, and the loser retries with fresh removes. An outage
right before the log entry must fail the write with an error that names the table, leave the table at its old
version, and the same write must succeed once S3 is back.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import fsspec
import pyarrow as pa
import pytest
from s3_server import s3, s3_env  # noqa: F401 - fixture
from warehouse_digest import WAREHOUSE_TABLES, warehouse_digests

from jobs.warehouse import history, read_pandas

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TRACELAKE = Path(sys.executable).parent / "tracelake"
PAIR = "HolisticTraceAnalysis/trace_filter/sampled_rank-{r}.json.gz"
DLRM = "param/dlrm_kineto/worker{r}_step_12.*.pt.trace.json"
ALEXNET = "HolisticTraceAnalysis/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"


def _zone(root: Path, corpus: Path, jobs: dict[str, list[Path]]) -> Path:
    for job, srcs in jobs.items():
        (root / job).mkdir(parents=True, exist_ok=True)
        for src in srcs:
            shutil.copyfile(src, root / job / src.name)
    return root


@pytest.fixture(scope="module")
def zones(torch_corpus, tmp_path_factory):
    """Two landing zones sharing the job ``solo``: A = pair + solo, B = dlrm (2 ranks) + solo."""
    base = tmp_path_factory.mktemp("s3zones")
    pair = [torch_corpus / PAIR.format(r=r) for r in range(2)]
    dlrm = [next(torch_corpus.glob(DLRM.format(r=r))) for r in range(2)]
    solo = [torch_corpus / ALEXNET]
    return _zone(base / "a", torch_corpus, {"pair": pair, "solo": solo}), _zone(
        base / "b", torch_corpus, {"dlrm": dlrm, "solo": solo}
    )


#: Two hourly ingest intervals [T0, T1) and [T1, T2) of :func:`dated_zone`.
T0 = datetime(2026, 1, 5, 10, tzinfo=UTC)
T1, T2 = T0 + timedelta(hours=1), T0 + timedelta(hours=2)


@pytest.fixture(scope="module")
def dated_zone(torch_corpus, tmp_path_factory):
    """One landing zone of bare traces (copies: a file's commit time is its mtime) landed in two intervals:
    [T0, T1) pair rank 0 and solo; [T1, T2) pair rank 1 and dlrm's two ranks. Both intervals touch ``pair``, so
    both runs rebuild it (from both ranks: a backfill finds every file landed)."""
    root = tmp_path_factory.mktemp("dated")
    dlrm = [next(torch_corpus.glob(DLRM.format(r=r))) for r in range(2)]
    plan = {
        "pair": [(torch_corpus / PAIR.format(r=0), T0), (torch_corpus / PAIR.format(r=1), T1)],
        "solo": [(torch_corpus / ALEXNET, T0 + timedelta(minutes=20))],
        "dlrm": [(dlrm[0], T1 + timedelta(minutes=20)), (dlrm[1], T1 + timedelta(minutes=25))],
    }
    for job, files in plan.items():
        (root / job).mkdir()
        for src, t in files:
            dst = root / job / src.name
            shutil.copyfile(src, dst)
            os.utime(dst, (t.timestamp() + 60, t.timestamp() + 60))
    return root


@pytest.fixture(scope="module")
def alone(s3, zones):  # noqa: F811
    """Zone A alone into ``wh-a`` and zone B alone into ``wh-b``: their digests (each job's rows as one run)."""
    env = _env(s3)
    a, b = zones
    _ok(_run(env, a, "s3://tracelake/wh-a"))
    _ok(_run(env, b, "s3://tracelake/wh-b"))
    with s3_env(s3):
        return warehouse_digests("s3://tracelake/wh-a"), warehouse_digests("s3://tracelake/wh-b")


def _run(env: dict, raw: Path, warehouse: str, executor: str = "local", *more: str) -> subprocess.Popen:
    cmd = [str(TRACELAKE), "run", "--raw", str(raw), "--warehouse", warehouse, "--no-mlflow", "--executor", executor]
    cmd += more
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _ok(p: subprocess.Popen) -> str:
    out, _ = p.communicate(timeout=600)
    assert p.returncode == 0, out[-4000:]
    return out


def _env(server) -> dict:
    return {
        **os.environ,
        **server.env,
        "COLUMNS": "200",
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }


def test_both_executors_write_the_same_tables_to_s3_and_sql_reads_them(s3, zones, monkeypatch):  # noqa: F811
    env = _env(s3)
    a, _ = zones
    out = _ok(_run(env, a, "s3://tracelake/wh-local"))
    assert "captures: 3 (3 ingested" in out and "warehouse: s3://tracelake/wh-local" in out
    _ok(_run(env, a, "s3://tracelake/wh-spark", "spark"))  # Spark's tasks write to S3 with pyarrow
    for k, v in s3.env.items():  # the seam's readers here take the credentials from the environment
        monkeypatch.setenv(k, v)
    local = warehouse_digests("s3://tracelake/wh-local")
    assert all(local[t] for t in ("captures", "events", "steps", "kernels"))
    assert warehouse_digests("s3://tracelake/wh-spark") == local
    # Spark SQL over the S3 warehouse (no Hadoop S3 connector: the snapshot's files read through pyarrow)
    sql = subprocess.run(
        [str(TRACELAKE), "sql", "SELECT job_id, count(*) AS n FROM steps GROUP BY job_id ORDER BY job_id",
         "--warehouse", "s3://tracelake/wh-spark", "--format", "csv"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    steps = read_pandas("s3://tracelake/wh-local", ["steps"])["steps"]
    want = "".join(f"{j},{n}\n" for j, n in sorted(steps.groupby("job_id").size().items()))
    assert sql.returncode == 0 and want in sql.stdout.replace("\r", ""), sql.stdout[-2000:] + sql.stderr[-2000:]
    hist = history("s3://tracelake/wh-local", "steps")
    assert [h["operation"] for h in hist] == ["WRITE", "CREATE TABLE"] and hist[0]["files_added"] >= 2


def test_two_runs_at_once_equal_the_two_runs_one_after_the_other(s3, zones, alone, monkeypatch):  # noqa: F811
    """A and B at once into one warehouse. Job tables hold each job's rows alone, so one run after the other
    gives, per job, the rows of the run that had it last: the jobs only one zone has must equal that zone's run
    alone; the job both rebuild (``solo``, from their own landing folders) must be, in every table, whole from A
    or whole from B — never both, never a mix."""
    env = _env(s3)
    a, b = zones
    both = [_run(env, a, "s3://tracelake/wh-par"), _run(env, b, "s3://tracelake/wh-par")]
    outs = [_ok(p) for p in both]
    assert all("validation: passed" in o for o in outs), outs
    for k, v in s3.env.items():
        monkeypatch.setenv(k, v)
    par = warehouse_digests("s3://tracelake/wh-par")
    only_a, only_b = alone
    for t in WAREHOUSE_TABLES:
        assert set(par[t]) == set(only_a[t]) | set(only_b[t]), t  # the same partitions: nothing lost
        for part, rows in par[t].items():
            alone = [d[t][part] for d in (only_a, only_b) if part in d[t]]
            assert rows in alone, (t, part)  # whole from one run: nothing doubled, nothing mixed
    caps = read_pandas("s3://tracelake/wh-par", ["captures"])["captures"]
    assert sorted(caps["job_id"].unique()) == ["dlrm", "pair", "solo"] and caps["uri"].is_unique
    # the commits raced: the history of a table both wrote shows both writes, none lost
    writes = [h for h in history("s3://tracelake/wh-par", "captures") if h["operation"] == "WRITE"]
    assert len(writes) == 2


@pytest.mark.parametrize("where", ["local", "s3"])
def test_two_interval_runs_at_once_equal_them_one_after_the_other(s3, dated_zone, where, tmp_path):  # noqa: F811
    """The ingest runs of [T0, T1) and [T1, T2) at the same time (a backfill beside the schedule, or
    ``max_active_runs > 1``) leave every table equal to the two runs one after the other, on local disk and on S3:
    the job both rebuild is whole once, nothing lost or duplicated, each run's ingest record its own."""
    env = _env(s3)
    base = str(tmp_path) if where == "local" else f"s3://tracelake/wh-intervals-{where}"
    at_once, in_order = f"{base}/at-once", f"{base}/in-order"
    intervals = [
        ("--since", T0.isoformat(), "--until", T1.isoformat()),
        ("--since", T1.isoformat(), "--until", T2.isoformat()),
    ]
    outs = [_ok(p) for p in [_run(env, dated_zone, at_once, "local", *i) for i in intervals]]
    assert all("validation: passed" in o for o in outs), outs
    for i in intervals:
        _ok(_run(env, dated_zone, in_order, "local", *i))
    with s3_env(s3):
        par, seq = warehouse_digests(at_once), warehouse_digests(in_order)
        assert all(seq[t] for t in ("captures", "steps", "kernels", "ranks"))
        assert par == seq
        caps = read_pandas(at_once, ["captures"])["captures"]
        assert sorted(caps["job_id"].unique()) == ["dlrm", "pair", "solo"] and caps["uri"].is_unique
        assert (caps["job_id"] == "pair").sum() == 2
        # both runs wrote (the table's history names two writes), each recorded its own interval's jobs
        assert sum(h["operation"] == "WRITE" for h in history(at_once, "captures")) == 2
        fs, root = fsspec.core.url_to_fs(f"{at_once}/_runs/ingest")
        records = sorted(json.loads(fs.cat_file(p))["job_ids"] for p in fs.glob(f"{root}/*.json"))
        assert records == [["dlrm", "pair"], ["pair", "solo"]], records


def test_an_s3_outage_during_a_commit_fails_clearly_and_the_retry_succeeds(s3, monkeypatch):  # noqa: F811
    from jobs import commit

    for k, v in s3.env.items():
        monkeypatch.setenv(k, v)
    wh = "s3://tracelake/wh-outage"
    rows = lambda v: pa.table({"date": ["2024-01-01"] * 3, "job_id": ["a"] * 3, "i": [0, 1, 2], "v": [v] * 3})  # noqa: E731
    commit.write_partitions(rows(1), wh, "t", ("date", "job_id"))

    def outage(point):
        if point == "t:committing":
            s3.stop()  # S3 goes away after the data files are in, before the log entry

    monkeypatch.setattr(commit, "_crash_point", outage)
    with pytest.raises(commit.CommitError, match=r"s3://tracelake/wh-outage/t: the commit of write .* failed"):
        commit.write_partitions(rows(2), wh, "t", ("date", "job_id"))
    s3.start()
    monkeypatch.setattr(commit, "_crash_point", lambda point: None)
    assert commit.open_table(f"{wh}/t").to_pyarrow_table()["v"].to_pylist() == [1, 1, 1]  # unchanged
    res = commit.write_partitions(rows(2), wh, "t", ("date", "job_id"))
    assert res.version == 2 and commit.open_table(f"{wh}/t").to_pyarrow_table()["v"].to_pylist() == [2, 2, 2]


#: Moments of a commit at which a `tracelake run` into the S3 warehouse is killed (``jobs.commit`` crash points).
S3_KILL_POINTS = ("events:committing", "events:committed", "kernels:committing")


@pytest.mark.parametrize("point", S3_KILL_POINTS)
def test_a_run_killed_mid_commit_on_s3_leaves_whole_versions_and_the_rerun_is_clean(s3, zones, alone, point):  # noqa: F811
    """Warehouse = zone A's run (copied on S3); zone B's run into it is SIGKILLed at ``point``: every table reads
    as A's version or as the version B's commit made, whole; running B again gives A then B."""
    import signal

    import s3fs

    env = _env(s3)
    _, b = zones
    only_a, only_b = alone
    wh = f"tracelake/wh-kill-{point.replace(':', '-')}"
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **s3.storage_options)
    fs.copy("tracelake/wh-a", wh, recursive=True)
    cmd = [str(TRACELAKE), "run", "--raw", str(b), "--warehouse", f"s3://{wh}", "--no-mlflow"]
    p = subprocess.run(
        cmd, cwd=REPO, env={**env, "TRACELAKE_TEST_CRASH_AT": point}, capture_output=True, text=True,
        start_new_session=True, timeout=600,
    )  # fmt: skip
    assert p.returncode == -signal.SIGKILL, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    expected = {t: {**only_a[t], **only_b[t]} for t in WAREHOUSE_TABLES}  # A then B: B's rows of its jobs
    with s3_env(s3):
        seen = warehouse_digests(f"s3://{wh}")
        table = point.split(":")[0]
        for t in WAREHOUSE_TABLES:
            assert seen[t] in (only_a[t], expected[t]), t  # A's version or A-then-B's, whole
        assert seen[table] == (expected[table] if point.endswith(":committed") else only_a[table]), point
        _ok(_run(env, b, f"s3://{wh}"))
        assert warehouse_digests(f"s3://{wh}") == expected
