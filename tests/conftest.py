"""Shared pytest fixtures, and how the suite is spread over pytest-xdist's workers.

``make test`` runs ``pytest -n 2 --dist loadgroup``, with the scheduler defined here
(:func:`pytest_xdist_make_scheduler`): every test file is one unit of work, so its module-scoped fixtures run
once, except the files of one of :data:`GROUPS`, which go to one worker together so that the session-scoped
fixture they share is built once. The units of :data:`FIRST` are handed out first, longest first, so that no
worker is left with a long tail. (xdist's own ``xdist_group`` marks do not group here: pytest 9 derives a test's
id from its collection tree, and xdist 3.8 renames ids to group them.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

#: Test files that run on one worker together: the tests over the whole torch corpus' warehouse
#: (``corpus_warehouse``, built once per worker that needs it).
GROUPS = {
    "corpus": (
        "test_compare_corpus",
        "test_executors",
        "test_fleet",
        "test_mcp",
        "test_pipeline_corpus",
        "test_readonly_sql_spark",
        "test_report_publish",
        "test_sql_examples",
    ),
    # the demo pair (``demo_run``): the demo's own checks, and every number of the stack agreeing over it
    "demo": ("test_demo", "test_one_answer"),
}
_GROUP_OF = {stem: group for group, stems in GROUPS.items() for stem in stems}

#: The longest units of work (a file's stem, or a group), handed out first in this order: the scheduler test
#: (Airflow driving a Spark cluster through faults), the corpus group, then the other files that start real
#: services. Measured with ``pytest --durations=80`` on one process (HEAD 733262e: 922, ~280, 157, 117, ~130,
#: ~100 s).
FIRST = ("test_scheduler", "corpus", "test_standalone_cluster", "test_dags", "test_local_stack", "test_crash_rerun")


def unit_of(nodeid: str) -> str:
    """The unit of work of a test id: its file's group in :data:`GROUPS`, else the file's stem."""
    stem = Path(nodeid.split("::", 1)[0]).stem
    return _GROUP_OF.get(stem, stem)


def pytest_collection_modifyitems(config, items):
    """Under ``--dist loadgroup`` (in each xdist worker), the units of :data:`FIRST` first, in that order."""
    if not getattr(config.option, "loadgroup", False):  # set in each xdist worker under --dist loadgroup
        return
    rank = {unit: i for i, unit in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(unit_of(item.nodeid), len(FIRST)))  # stable within a rank


try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # pragma: no cover - the suite runs on one process without pytest-xdist
    LoadScopeScheduling = None
else:

    class FileGroupScheduling(LoadScopeScheduling):
        """xdist's scope scheduling with :func:`unit_of` as the scope: whole files, and groups of files."""

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    def pytest_xdist_make_scheduler(config, log):
        """:class:`FileGroupScheduling` for ``--dist loadgroup``; xdist's own scheduler otherwise."""
        if config.getoption("dist") == "loadgroup":
            return FileGroupScheduling(config, log)
        return None


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
