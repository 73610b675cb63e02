"""Fixtures for integration tests: one real Spark session (local[2]) per test run."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
TORCH_CORPUS = SHARED / "corpus" / "torch"


@pytest.fixture(scope="session")
def spark():
    """A real SparkSession, ``local[2]``, shared by the whole test run (~10 s to start)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from jobs.spark import get_spark

    session = get_spark(master="local[2]", driver_memory="3g")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def benchmark():
    """``benchmark(name)``: the module ``benchmarks/<name>.py`` (the simulated fleets benchmarks and tests share)."""
    folder = str(Path(__file__).resolve().parents[2] / "benchmarks")

    def load(name: str):
        sys.path.insert(0, folder)
        try:
            return importlib.import_module(name)
        finally:
            sys.path.remove(folder)

    return load


@pytest.fixture(scope="session")
def torch_corpus() -> Path:
    """``../shared/corpus/torch`` (read-only; never copied into the project)."""
    assert TORCH_CORPUS.is_dir(), f"corpus not found at {TORCH_CORPUS}"
    return TORCH_CORPUS


@pytest.fixture(scope="session")
def corpus_warehouse(spark, torch_corpus, tmp_path_factory):
    """The whole torch corpus normalized and analyzed once (no MLflow) into a temp warehouse."""
    from jobs.pipeline.run import run_pipeline

    wh = tmp_path_factory.mktemp("corpus_wh")
    result = run_pipeline(str(torch_corpus), str(wh), spark=spark, log_to_mlflow=False)
    return wh, result


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory):
    """``tracelake demo`` run once (two real 2-rank gloo DDP trainings, the second with a planted straggler, then the
    main job on them): ``(workdir, stdout)``; the warehouse is ``workdir / "warehouse"``, MLflow its ``mlflow.db``."""
    work = tmp_path_factory.mktemp("demo")
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "demo", "--workdir", str(work)],
        cwd=str(Path(__file__).resolve().parents[2]),
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": "160"},
    )
    print(f"tracelake demo: {time.perf_counter() - start:.1f} s")
    assert out.returncode == 0, out.stderr[-3000:]
    return work, out.stdout
