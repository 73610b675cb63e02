"""Unit tests of the agent interface's pieces: paging and cursors, the published answer schemas, HTTP binding."""

from __future__ import annotations

import asyncio
import json

import pytest

from jobs.agent.paging import BadCursor, answer_chars, bounded, decode_cursor, encode_cursor, fingerprint
from jobs.agent.server import BearerAuth, is_loopback, parse_bind
from schemas import agent as A


def _rows_answer(rows, page):
    return A.Regressions(regressions=rows, page=page)


def _row(i: int, note: str = "") -> A.RegressionRow:
    return A.RegressionRow(
        job_name="j" + note,
        job_id=f"job{i}",
        attempt=0,
        date="2026-01-01",
        metric="idle_pct",
        value=float(i),
        baseline=None,
        change_pct=None,
        p_value=None,
        verdict="no_baseline",
        baseline_runs=[],
    )


def test_published_schemas_are_current():
    assert json.loads(A.SCHEMAS_FILE.read_text()) == json.loads(json.dumps(A.tool_schemas(), sort_keys=True)), (
        "schemas/mcp_tools.v1.json is stale: run python -m schemas.agent"
    )


def test_job_validation_over_its_table_marks():
    from jobs.agent.queries import _overall

    assert _overall({"steps": "passed", "ranks": "failed", "findings": "unvalidated"}) == "failed"
    assert _overall({"steps": "passed", "findings": "unvalidated"}) == "passed"
    assert _overall({"steps": "unvalidated"}) == _overall({}) == "unvalidated"


def _write_table(warehouse, name: str, rows: list[dict]) -> None:
    """``rows`` as ``{warehouse}/{name}``, hive-partitioned as the warehouse."""
    import pyarrow as pa

    from jobs.warehouse import write_table
    from schemas.tables import TABLES

    decl = TABLES[name]
    schema = pa.schema([f.with_nullable(True) for f in decl.arrow_schema()])  # the columns not given are null
    table = pa.Table.from_pylist([{c: r.get(c) for c in schema.names} for r in rows], schema=schema)
    write_table(table, str(warehouse), name)


def test_job_listing_step_time_is_the_job_step_time(tmp_path):
    """list_jobs' step_time_p50_ns is the job step time (slowest rank per ProfilerStep) of MLflow and fleet_stats,
    not the median of the ranks' medians (here 20 ms)."""
    import pandas as pd

    from jobs.agent.queries import list_jobs
    from jobs.publish.tracking import job_metrics

    ms = 1_000_000
    times = {0: [10 * ms, 30 * ms, 10 * ms], 1: [30 * ms, 10 * ms, 30 * ms]}  # rank medians 10 and 30 ms
    key = {"date": "2026-01-01", "job_id": "job-a", "attempt": 0}
    _write_table(tmp_path, "captures", [{**key, "rank": r, "status": "ingested"} for r in times])
    steps = [{**key, "rank": r, "step": s, "step_time_ns": t} for r, ts in times.items() for s, t in enumerate(ts)]
    steps.append({**key, "rank": 0, "step": -1, "step_time_ns": 99 * ms})  # not a ProfilerStep N >= 0
    _write_table(tmp_path, "steps", steps)
    _write_table(tmp_path, "ranks", [{**key, "rank": r, "step_time_p50_ns": sorted(ts)[1]} for r, ts in times.items()])
    (job,) = list_jobs(str(tmp_path)).jobs
    assert job.step_time_p50_ns == 30 * ms
    mlflow = job_metrics(
        pd.DataFrame(
            [{"rank": r, **dict.fromkeys(("idle_pct", "compute_pct", "non_compute_pct", "overlap_pct"))} for r in times]
        ),
        pd.DataFrame(steps),
    )
    assert job.step_time_p50_ns == mlflow["step_time_p50_ms"] * 1e6


def test_job_validation_from_the_table_marks(tmp_path):
    from jobs.agent.queries import job_summary, list_jobs

    key = {"date": "2026-01-01", "job_id": "job-a", "attempt": 0}
    _write_table(tmp_path, "captures", [{**key, "rank": 0, "status": "ingested"}])
    _write_table(tmp_path, "steps", [{**key, "rank": 0, "step": 0, "step_time_ns": 1000}])
    _write_table(tmp_path, "ranks", [{**key, "rank": 0, "n_steps": 1}])
    assert list_jobs(str(tmp_path)).jobs[0].validation == "unvalidated"
    assert job_summary(str(tmp_path), "job-a").data_quality.tables == {}
    (tmp_path / "steps" / "_validation.json").write_text(json.dumps({"jobs": {"job-a": {"status": "failed"}}}))
    (tmp_path / "ranks" / "_validation.json").write_text(json.dumps({"jobs": {"job-a": {"status": "passed"}}}))
    assert list_jobs(str(tmp_path)).jobs[0].validation == "failed"
    assert job_summary(str(tmp_path), "job-a").data_quality.tables == {"steps": "failed", "ranks": "passed"}


def test_cursor_round_trip_and_refusals():
    q = fingerprint("kernels", {"job_id": "a", "cursor": "x", "limit": 3})
    assert q == fingerprint("kernels", {"job_id": "a"})  # cursor and limit are not part of the question
    assert decode_cursor(encode_cursor(17, q), q) == 17 and decode_cursor(None, q) == 0
    with pytest.raises(BadCursor, match="another question"):
        decode_cursor(encode_cursor(3, q), fingerprint("kernels", {"job_id": "b"}))
    with pytest.raises(BadCursor, match="not a cursor"):
        decode_cursor("%%%", q)


def test_pages_cover_every_row_once():
    rows = [_row(i) for i in range(23)]
    q, got, cursor = "q", [], None
    while True:
        a = bounded(rows, _rows_answer, q, cursor, 5)
        assert a.page.offset == len(got) and a.page.total == 23 and a.page.returned == len(a.regressions) <= 5
        got += a.regressions
        cursor = a.page.next_cursor
        assert a.page.truncated == (cursor is not None)
        if cursor is None:
            break
    assert got == rows


def test_character_cap_shortens_the_page():
    rows = [_row(i, "x" * 1000) for i in range(100)]
    a = bounded(rows, _rows_answer, "q", None, 100, max_chars=5000)
    assert answer_chars(a) <= 5000 and 1 <= a.page.returned < 100 and a.page.truncated
    one_more = bounded(rows, _rows_answer, "q", None, a.page.returned + 1, max_chars=10**9)
    assert answer_chars(one_more) > 5000  # the largest page that fits
    one = bounded(rows, _rows_answer, "q", None, 100, max_chars=10)  # never an empty page while rows remain
    assert one.page.returned == 1


@pytest.mark.parametrize(
    "text,expect", [("127.0.0.1:8765", ("127.0.0.1", 8765)), ("[::1]:80", ("::1", 80)), ("0.0.0.0:1", ("0.0.0.0", 1))]
)
def test_parse_bind(text, expect):
    assert parse_bind(text) == expect


@pytest.mark.parametrize("text", ["8765", "host:", ":80", "h:0", "h:70000", "h:x"])
def test_parse_bind_refuses(text):
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_bind(text)


def test_is_loopback():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost") and is_loopback("127.1.2.3")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.5") and not is_loopback("example.com")


def _call(app, headers):
    sent = []

    async def send(msg):
        sent.append(msg)

    async def receive():
        return {"type": "http.request", "body": b""}

    asyncio.run(app({"type": "http", "headers": headers}, receive, send))
    return sent


def test_bearer_auth():
    reached = []

    async def inner(scope, receive, send):
        reached.append(scope)

    app = BearerAuth(inner, "tok")
    assert _call(app, [(b"authorization", b"Bearer tok")]) == [] and len(reached) == 1
    for bad in (
        [],
        [(b"authorization", b"Bearer nope")],
        [(b"authorization", b"Basic tok")],
        [(b"authorization", b"Bearer tok2")],
    ):
        sent = _call(app, bad)
        assert sent[0]["status"] == 401 and len(reached) == 1
