"""The two executors (jobs/executor.py) leave identical warehouses.

The same landing zones run once on Spark (``local[2]``, the session shared by the test run) and once on
the embedded local executor (worker processes, pyarrow writes, no JVM); every table normalize, analyze
and fleet write is compared row by row per partition (:mod:`warehouse_digest`), with the
``findings.json`` documents and the run record's counts. The landings cover what differs in how the
executors move data: the whole torch corpus (DLRM's 8 ranks, the largest traces split over many Spark
tasks), quarantined files, a bare folder with two files of one rank (renamed jobs: their events move to
another partition), Neuron device profiles (``neuron_summary``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from warehouse_digest import WAREHOUSE_TABLES, warehouse_digests

from jobs.warehouse import read_arrow
from schemas import stage_tables

pytestmark = pytest.mark.integration

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
NEURON = SHARED / "corpus" / "neuron" / "AnchovyPark__npu_profiling_code"
DLRM = "param/dlrm_kineto/worker{r}_step_12.*.pt.trace.json"
FLEET_TABLES = tuple(stage_tables("fleet"))


def _fleet_rows(warehouse: Path, table: str) -> list[str]:
    t = read_arrow(str(warehouse), table)  # the storage seam: the Delta table's live rows
    if t is None:
        return []
    return sorted(json.dumps(r, sort_keys=True, default=repr) for r in t.select(sorted(t.column_names)).to_pylist())


def _findings_docs(warehouse: Path) -> dict[str, dict]:
    out = {}
    for p in sorted((warehouse / "findings_json").glob("*/*/findings.json")):
        out[str(p.relative_to(warehouse))] = json.loads(p.read_text())
    return out


def assert_same_warehouse(a: Path, b: Path) -> None:
    """Every table of ``a`` and ``b`` holds the same rows in the same partitions."""
    da, db = warehouse_digests(a), warehouse_digests(b)
    for t in WAREHOUSE_TABLES:
        assert da[t].keys() == db[t].keys(), f"{t}: partitions differ: {sorted(set(da[t]) ^ set(db[t]))}"
        diff = [k for k in da[t] if da[t][k] != db[t][k]]
        assert not diff, f"{t}: rows differ in partitions {diff[:5]}"
    for t in FLEET_TABLES:
        assert _fleet_rows(a, t) == _fleet_rows(b, t), f"{t}: rows differ"
    assert _findings_docs(a) == _findings_docs(b)


def _counts(record: dict) -> dict:
    keep = (
        "job_ids",
        "ingested_job_ids",
        "n_captures",
        "n_quarantined",
        "analyze_counts",
        "fleet_counts",
        "n_regressions",
        "n_discovered",
    )
    return {k: record.get(k) for k in keep}


def test_the_torch_corpus_gives_identical_tables(corpus_warehouse, torch_corpus, tmp_path):
    from jobs.pipeline.run import run_pipeline

    spark_wh, spark_res = corpus_warehouse
    res = run_pipeline(str(torch_corpus), str(tmp_path / "wh"), log_to_mlflow=False, executor="local")
    assert res.validation.success and spark_res.validation.success
    assert _counts(res.record) == _counts(spark_res.record)
    assert res.record["analyze_counts"]["critical_path"] > 100_000  # the corpus, not an empty run
    assert_same_warehouse(spark_wh, tmp_path / "wh")
    assert not list((tmp_path / "wh" / "_commit" / "work").iterdir())  # the run's work folder is gone


@pytest.fixture(scope="module")
def edge_landing(tmp_path_factory, torch_corpus) -> Path:
    """Quarantined files, a bare folder with two files of one rank, Neuron device profiles."""
    root = tmp_path_factory.mktemp("edges")
    mixed = root / "mixed"
    mixed.mkdir()
    for r in (0, 1):
        src = next(torch_corpus.glob(DLRM.format(r=r)))
        shutil.copyfile(src, mixed / src.name)
    good = next(torch_corpus.glob(DLRM.format(r=2))).read_bytes()
    (mixed / "truncated.json").write_bytes(good[: len(good) // 2])
    (mixed / "notjson.json").write_bytes(b"this is not json at all")
    dup = root / "dup"
    dup.mkdir()
    src = next(torch_corpus.glob(DLRM.format(r=3)))
    shutil.copyfile(src, dup / "a.pt.trace.json")
    shutil.copyfile(src, dup / "b.pt.trace.json")
    for src in NEURON.rglob("*"):  # file by file: discovery does not follow a linked folder
        if src.is_file():
            dst = root / "neuron" / src.relative_to(NEURON)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
    return root


def test_quarantine_renamed_jobs_and_neuron_give_identical_tables(spark, edge_landing, tmp_path):
    from jobs.pipeline.run import run_pipeline

    local = run_pipeline(str(edge_landing), str(tmp_path / "local"), log_to_mlflow=False, executor="local")
    on_spark = run_pipeline(str(edge_landing), str(tmp_path / "spark"), spark=spark, log_to_mlflow=False)
    assert _counts(local.record) == _counts(on_spark.record)
    caps = local.captures
    assert (caps["status"] == "quarantined").sum() == 1  # not JSON; the cut file keeps its complete events
    cut = caps[caps["uri"].str.endswith("truncated.json")].iloc[0]
    assert cut["status"] == "ingested" and "truncated_tail" in list(cut["flags"])
    assert any(j.startswith("dup-") for j in caps["job_id"])  # the two rank-3 files became two jobs
    assert len(local.neuron_summary) > 0
    # every declared job table is written by each executor (torch ranks with collectives, Neuron profiles,
    # quarantined files): a table one executor leaves out fails here, not in a later run's lost rows
    for executor in ("spark", "local"):
        digests = warehouse_digests(tmp_path / executor)
        assert [t for t in WAREHOUSE_TABLES if not digests[t]] == [], executor
    assert_same_warehouse(tmp_path / "spark", tmp_path / "local")


def test_tracelake_run_needs_no_java(edge_landing, tmp_path):
    """``tracelake run`` (default executor) on a machine without Java: no JVM is started."""
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "SPARK_HOME", "PYSPARK_SUBMIT_ARGS")}
    java = shutil.which("java")
    if java:
        env["PATH"] = os.pathsep.join(
            p for p in env["PATH"].split(os.pathsep) if not os.path.exists(os.path.join(p, "java"))
        )
    env["JAVA_HOME"] = str(tmp_path / "no-java")
    wh = tmp_path / "wh"
    proc = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "run", "--raw", str(edge_landing), "--warehouse", str(wh), "--no-mlflow"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    steps = read_arrow(str(wh), "steps")
    assert steps.num_rows > 0 and isinstance(steps, pa.Table)
