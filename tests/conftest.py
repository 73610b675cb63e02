"""Shared pytest fixtures, and how the suite is spread over pytest-xdist's workers.

``make test`` runs ``pytest -n 2 --dist loadgroup``: every test file is one unit of work (its module-scoped
fixtures run once), except the files marked ``pytest.mark.xdist_group(NAME)``, which share one worker with the
other files of that group, so that a session-scoped fixture they share is built once. The groups in
:data:`FIRST` are handed out first (the longest work first, so that no worker is left with a long tail).
"""

from __future__ import annotations

from pathlib import Path

import pytest

#: The longest units of work (a file's stem, or an xdist group), handed out first in this order: the scheduler test
#: (Airflow driving a Spark cluster through faults), the tests over the whole torch corpus' warehouse (group
#: ``corpus``: ``corpus_warehouse`` is built once), then the other files that start real services. Measured
#: with ``pytest --durations=80`` on one process (HEAD 733262e: 922, ~280, 157, 117, ~130, ~100 s).
FIRST = ("test_scheduler", "corpus", "test_standalone_cluster", "test_dags", "test_local_stack", "test_crash_rerun")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which appends the group to each test's id
def pytest_collection_modifyitems(config, items):
    """One xdist group per test file unless the file names one; the groups of :data:`FIRST` first."""
    if not config.pluginmanager.hasplugin("xdist") or config.getoption("dist", "no") != "loadgroup":
        return
    for item in items:
        if not any(item.iter_markers("xdist_group")):
            item.add_marker(pytest.mark.xdist_group(item.path.stem))

    def order(item) -> int:
        mark = next(item.iter_markers("xdist_group"))
        group = mark.args[0] if mark.args else mark.kwargs.get("name")
        return FIRST.index(group) if group in FIRST else len(FIRST)

    items.sort(key=order)  # stable: collection order within each rank


#: Read-only corpus of real traces (../shared/corpus relative to the repo root); never copied into the repo.
CORPUS_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"


@pytest.fixture(scope="session")
def CORPUS() -> Path:
    """Path of ``shared/corpus`` (skips the test when the corpus is not available)."""
    if not CORPUS_DIR.is_dir():
        pytest.skip(f"corpus not found at {CORPUS_DIR}")
    return CORPUS_DIR


#: HTA's ``trace_filter`` example: 2 small real ranks, the base of the report tests.
TRACE_FILTER = (
    "HolisticTraceAnalysis/trace_filter/sampled_rank-0.json.gz",
    "HolisticTraceAnalysis/trace_filter/sampled_rank-1.json.gz",
)


@pytest.fixture(scope="session")
def trace_filter_tables(CORPUS) -> dict:
    """``captures``, ``events``, ``steps``, ``ranks`` (pandas, nullable ints) of the ``trace_filter`` job:
    the real normalize + analyze output of its two ranks (no Spark)."""
    import pandas as pd
    import pyarrow as pa

    from jobs.analyze.hta.breakdown import analyze_rank
    from jobs.landing.discover import CaptureFile
    from jobs.normalize.job import captures_table, normalize_file

    caps, events, steps, ranks = [], [], [], []
    for rel in TRACE_FILTER:
        p = CORPUS / "torch" / rel
        task = CaptureFile(
            uri=str(p), capture_id=p.name[:16], job_id="trace_filter", size_bytes=p.stat().st_size
        ).to_dict()
        cap, ev = normalize_file(task, p.read_bytes())
        s, r = analyze_rank(ev)
        caps.append(cap)
        events.append(ev)
        steps.append(s)
        ranks.append(r)
    ints = {pa.int32(): pd.Int32Dtype(), pa.int64(): pd.Int64Dtype()}
    pdf = lambda t: t.to_pandas(types_mapper=ints.get)  # noqa: E731
    return {
        "captures": pdf(captures_table(caps)),
        "events": pdf(pa.concat_tables(events)),
        "steps": pdf(pa.concat_tables(steps)),
        "ranks": pdf(pa.concat_tables(ranks)),
    }
