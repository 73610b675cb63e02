"""The MCP ``sql`` tool's engine (jobs/agent/sql_engine.py) on the corpus warehouse: bounded answers, hostile queries
refused before anything runs, and a query past its time limit really stopped (its process killed), with the next
query and the other engine answering at once (issue 33)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import psutil
import pytest

from jobs.agent.paging import BadCursor, decode_cursor
from jobs.agent.readonly_sql import QueryTimeout, UnsafeQuery
from jobs.agent.sql_engine import MAX_CELL_CHARS, EngineError, SqlEngines
from jobs.sql import readme_examples

pytestmark = pytest.mark.integration
README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.fixture(scope="module")
def engines(corpus_warehouse):
    e = SqlEngines(str(corpus_warehouse[0]), n=2)
    yield e
    e.close()


def test_answers_are_bounded_and_json_safe(engines):
    r = engines.run("SELECT job_id, count(*) AS n_steps FROM steps GROUP BY job_id ORDER BY job_id")
    assert r.columns == ["job_id", "n_steps"] and r.n_rows >= 1 and not r.truncated
    capped = engines.run("SELECT * FROM events", max_rows=2)
    assert capped.n_rows == 2 and capped.truncated and len(capped.columns) == len(capped.rows[0])
    big = engines.run("SELECT repeat('x', 5000000) AS big")
    assert len(big.rows[0][0]) < MAX_CELL_CHARS + 40 and big.rows[0][0].endswith("…[cut: 5000000 characters]")
    for query in readme_examples(README.read_text(encoding="utf-8")):
        rows = engines.run(query, max_rows=5).rows
        assert rows, query
        json.dumps(rows, allow_nan=False)


@pytest.mark.parametrize(
    "query,why",
    [
        ("DROP VIEW steps", "only SELECT"),
        ("SELECT * FROM read_csv('/etc/passwd')", "table-valued function read_csv"),
        ("SELECT current_setting('memory_limit')", "reveals the server"),
        ("SELECT sequence(1, 1e9)", "would generate 999,999,999"),
        ("SELECT count(*) FROM events a CROSS JOIN events b", "without an equality condition"),
        ("SELECT " + "(" * 10000 + "1" + ")" * 10000, "nests too deeply"),
    ],
)
def test_hostile_queries_are_refused_in_one_line(engines, query, why):
    t0 = time.monotonic()
    with pytest.raises(UnsafeQuery, match=why) as e:
        engines.run(query)
    assert "\n" not in str(e.value) and time.monotonic() - t0 < 5


def test_a_bad_column_is_one_or_two_lines_with_the_nearest_name(engines):
    with pytest.raises(EngineError) as e:
        engines.run("SELECT step_time FROM steps")
    assert len(str(e.value).splitlines()) <= 2 and "step_time_ns" in str(e.value)


def test_a_query_past_its_time_limit_is_stopped_and_the_engines_answer_again(engines):
    slow = "SELECT count(*) AS n FROM events a JOIN events b ON a.job_id = b.job_id AND a.name <> b.name"
    before = {e.proc.pid for e in engines._all if e.proc is not None}
    t0 = time.monotonic()
    with pytest.raises(QueryTimeout, match="ran past 1 s and was stopped"):
        engines.run(slow, timeout_s=1)
    assert time.monotonic() - t0 < 10

    def gone(pid):
        return not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE

    now = {e.proc.pid for e in engines._all if e.proc is not None}
    assert any(gone(pid) for pid in before - now) or len(now) < len(before)  # killed: its CPU and memory freed
    t1 = time.monotonic()
    assert engines.run("SELECT count(*) AS n FROM steps", timeout_s=60).rows[0][0] > 0
    assert engines.run("SELECT count(*) AS n FROM ranks", timeout_s=60).rows[0][0] > 0
    assert time.monotonic() - t1 < 30


def test_a_forged_cursor_is_a_clear_error():
    import base64

    for forged in ("[" * 100_000, base64.urlsafe_b64encode(b"[" * 5000).decode(), "not-a-cursor"):
        with pytest.raises(BadCursor, match="is not a cursor of this server"):
            decode_cursor(forged, "q")
