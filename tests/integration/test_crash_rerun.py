"""``kill -9`` of the writer in the middle of normalize or analyze: every table reads as its old or its new
version, whole, and running again gives the tables of an uninterrupted run.

Landing zone v1 (4 DLRM ranks + alexnet) is normalized and analyzed into a warehouse; then v2 (8 DLRM
ranks, alexnet again, a 2-rank job and a bad file) is run on a copy of it — uninterrupted for the
reference, and in a subprocess (own JVM, own process group) killed with SIGKILL: deterministically at ten
moments of a table commit (``TRACELAKE_TEST_CRASH_AT``, :mod:`jobs.commit`: after the first staged data file
reached the table folder (the local executor's workers' files are moved in one by one; Spark's tasks write theirs
in place), with every file in and no log entry, with the removes computed, right after the log
entry), on Spark and on the local executor (:mod:`jobs.executor`); and once as soon as Spark starts writing
the events (the kill lands inside Spark's own task and job commit), once as soon as the local executor's
workers do. Right after each kill, every table a reader sees — the Delta snapshot through pyarrow and through
Spark's file list — must be the v1 or the v2 version, whole; then the stage is run again and every table must
equal the reference.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from warehouse_digest import (
    NORMALIZE_TABLES,
    WAREHOUSE_TABLES,
    spark_partition_counts,
    warehouse_digests,
)

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DLRM = "param/dlrm_kineto/worker{r}_step_12.*.pt.trace.json"
ALEXNET = "HolisticTraceAnalysis/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"
PAIR = "HolisticTraceAnalysis/trace_filter/sampled_rank-{r}.json.gz"

_STAGE = """
import sys
if sys.argv[4] == "spark":
    from jobs.spark import get_spark
    engine = get_spark(master="local[2]", driver_memory="2g")
else:
    from jobs.executor import LocalExecutor
    engine = LocalExecutor(2)
if sys.argv[1] == "normalize":
    from jobs.normalize.job import run_normalize
    run_normalize(engine, sys.argv[2], sys.argv[3])
else:
    from jobs.analyze.job import run_analyze
    run_analyze(engine, sys.argv[3])
print("stage finished", flush=True)
"""
ENGINES = ("spark", "local")  # jobs/executor.py: both stage into the same commit protocol


def _zone(root: Path, corpus: Path, dlrm_ranks: int, extra: bool) -> Path:
    for folder, srcs in (
        ("dlrm", [next(corpus.glob(DLRM.format(r=r))) for r in range(dlrm_ranks)]),
        ("solo", [corpus / ALEXNET]),
        ("pair", [corpus / PAIR.format(r=r) for r in range(2)] if extra else []),
    ):
        for src in srcs:
            (root / folder).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, root / folder / src.name)
    if extra:
        (root / "pair" / "notjson.json").write_bytes(b"not json")  # a quarantined captures row
    return root


@pytest.fixture(scope="module")
def setup(spark, torch_corpus, tmp_path_factory):
    """``(v2 zone, v1 warehouse, digests of v1, digests of the uninterrupted v2 run on v1, tmp factory)``."""
    from jobs.analyze.job import run_analyze
    from jobs.normalize.job import run_normalize

    base = tmp_path_factory.mktemp("crash")
    v1 = _zone(base / "v1", torch_corpus, 4, extra=False)
    v2 = _zone(base / "v2", torch_corpus, 8, extra=True)
    wh1 = base / "wh_v1"
    run_normalize(spark, str(v1), str(wh1))
    run_analyze(spark, str(wh1))
    ref = base / "wh_ref"
    shutil.copytree(wh1, ref, symlinks=True)
    run_normalize(spark, str(v2), str(ref))
    run_analyze(spark, str(ref))
    old, new = warehouse_digests(wh1), warehouse_digests(ref)
    assert all(new[t] for t in WAREHOUSE_TABLES if t != "neuron_summary")
    # the runs differ where it matters: DLRM's partitions change, the 2-rank job is new
    assert any(old["events"][k] != new["events"][k] for k in old["events"])
    assert set(new["events"]) - set(old["events"])
    return v2, wh1, old, new, base


def _stage_cmd(stage: str, raw: Path, wh: Path, engine: str = "spark") -> list[str]:
    return [sys.executable, "-c", _STAGE, stage, str(raw), str(wh), engine]


def _env(**extra) -> dict:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1", **extra)
    env.pop("PYSPARK_DRIVER_PYTHON", None)
    return env


def _run_killed_at(point: str, stage: str, raw: Path, wh: Path, engine: str = "spark") -> None:
    """Run ``stage`` in its own process group; the commit module SIGKILLs the group at ``point``."""
    p = subprocess.run(
        _stage_cmd(stage, raw, wh, engine),
        cwd=REPO,
        env=_env(TRACELAKE_TEST_CRASH_AT=point),
        capture_output=True,
        text=True,
        start_new_session=True,
        timeout=300,
    )
    assert p.returncode == -signal.SIGKILL, (p.returncode, p.stdout[-2000:], p.stderr[-4000:])
    assert "stage finished" not in p.stdout


def _assert_whole_versions(spark, wh: Path, old: dict, new: dict, tables=WAREHOUSE_TABLES) -> dict[str, str]:
    """Every table a reader sees is its old or its new version, whole. Returns ``{table: "old" | "new" |
    "same"}`` (``same``: the runs leave it equal)."""
    seen = warehouse_digests(wh, tables)
    out = {}
    for t in tables:
        assert seen[t] in (old[t], new[t]), f"{t}: neither the old nor the new version"
        out[t] = "same" if old[t] == new[t] else ("new" if seen[t] == new[t] else "old")
        # Spark's reader (the snapshot's file list) sees the same partitions with the same row counts as pyarrow
        assert spark_partition_counts(spark, wh, t) == {k: len(v) for k, v in seen[t].items()}, t
    return out


def _n_files(root: Path, pattern: str) -> int:
    try:
        return sum(1 for f in root.glob(pattern) if f.is_file())
    except OSError:  # a folder renamed or removed under the walk
        return 0


def _kill_when_files_appear(cmd: list[str], root: Path, pattern: str, timeout_s: float = 300) -> bool:
    """Run ``cmd`` in its own process group and SIGKILL the group as soon as one more file matches ``pattern``
    under ``root`` than before it started; whether it was killed (``False``: it ended first)."""
    before = _n_files(root, pattern)
    p = subprocess.Popen(
        cmd, cwd=REPO, env=_env(), start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    killed = False
    try:
        deadline = time.monotonic() + timeout_s
        while p.poll() is None and time.monotonic() < deadline:
            if _n_files(root, pattern) > before:
                os.killpg(p.pid, signal.SIGKILL)
                killed = True
                break
            time.sleep(0.002)
    finally:
        if p.poll() is None and not killed:
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    return killed


def _copy(src: Path, base: Path, name: str) -> Path:
    dst = base / name
    shutil.copytree(src, dst, symlinks=True)
    return dst


#: Ten moments of a commit: (point, stage, engine). ``<table>:staged-<n>`` — the n-th data file is in the table
#: folder, no log entry; ``staged`` — all files in; ``committing`` — removes computed, log entry not written;
#: ``committed`` — log entry written, the writer not yet returned.
KILL_POINTS = [
    ("events:staged-1", "normalize", "local"),
    ("events:staged", "normalize", "spark"),
    ("events:committing", "normalize", "local"),
    ("events:committed", "normalize", "spark"),
    ("captures:committing", "normalize", "local"),
    ("captures:committed", "normalize", "local"),
    ("kernels:staged-1", "analyze", "local"),
    ("kernels:committing", "analyze", "spark"),
    ("steps:committed", "analyze", "local"),
    ("findings:committing", "analyze", "local"),
]


@pytest.mark.parametrize(("point", "stage", "engine"), KILL_POINTS, ids=[f"{p}-{e}" for p, _, e in KILL_POINTS])
def test_killed_at_a_moment_of_a_commit_then_rerun(spark, setup, point, stage, engine):
    from jobs.analyze.job import run_analyze
    from jobs.normalize.job import run_normalize

    v2, wh1, old, new, base = setup
    wh = _copy(wh1, base, f"wh_kill_{point.replace(':', '_')}_{engine}")
    if stage == "analyze":
        run_normalize(spark, str(v2), str(wh))
    _run_killed_at(point, stage, v2, wh, engine)
    state = _assert_whole_versions(spark, wh, old, new)
    table = point.split(":")[0]
    assert state[table] == ("new" if point.endswith(":committed") else "old"), (point, state)
    if stage == "analyze":  # normalize's tables were already new
        assert all(state[t] in ("new", "same") for t in NORMALIZE_TABLES)
    run_normalize(spark, str(v2), str(wh)) if stage == "normalize" else run_analyze(spark, str(wh))
    tables = NORMALIZE_TABLES if stage == "normalize" else WAREHOUSE_TABLES
    got = warehouse_digests(wh, tables)
    assert got == {t: new[t] for t in tables}
    assert not list((wh / "_commit" / "work").glob("*"))  # the dead run's staging went with the next run


def test_kill_while_spark_writes_the_events(spark, setup):
    """No hook: SIGKILL the process group as soon as Spark's tasks write their first data file into the events
    table folder, i.e. inside Spark's own tasks (the files are not in the log yet)."""
    from jobs.normalize.job import run_normalize

    v2, wh1, old, new, base = setup
    wh = _copy(wh1, base, "wh_norm_spark_kill")
    killed = _kill_when_files_appear(_stage_cmd("normalize", v2, wh), wh / "events", "date=*/job_id=*/*.parquet")
    assert killed, "the stage ended before Spark wrote into the events folder"
    state = _assert_whole_versions(spark, wh, old, new)
    assert "new" not in state.values()  # nothing was committed
    run_normalize(spark, str(v2), str(wh))
    got = warehouse_digests(wh, NORMALIZE_TABLES)
    assert got == {t: new[t] for t in NORMALIZE_TABLES}
    assert not list((wh / "_commit" / "work").glob("*"))


def test_kill_while_local_workers_write_the_events(spark, setup):
    """No hook: SIGKILL the local executor's process group (driver and workers) as soon as a worker has
    written events into the run's work folder; nothing is published, and the next run removes the dead
    run's work folder (its lock is free)."""
    from jobs.executor import LocalExecutor
    from jobs.normalize.job import run_normalize

    v2, wh1, old, new, base = setup
    wh = _copy(wh1, base, "wh_norm_local_kill")
    work = wh / "_commit" / "work"
    killed = _kill_when_files_appear(_stage_cmd("normalize", v2, wh, "local"), work, "*/*/**/*.parquet")
    assert killed, "the stage ended before a worker wrote into the work folder"
    state = _assert_whole_versions(spark, wh, old, new)
    assert "new" not in state.values()  # nothing was committed
    assert list(work.glob("*.lock"))  # the dead run's folder is left behind
    with LocalExecutor(2) as ex:
        run_normalize(ex, str(v2), str(wh))
    got = warehouse_digests(wh, NORMALIZE_TABLES)
    assert got == {t: new[t] for t in NORMALIZE_TABLES}
    assert not list(work.iterdir())  # recovery removed it; this run removed its own
