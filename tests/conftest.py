"""Shared pytest fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

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
