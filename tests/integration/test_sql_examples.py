"""Every SQL example in the README runs against the corpus warehouse and returns rows, the same on Spark and on
the embedded engine (DuckDB); the sql shell's commands and errors as a user sees them."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from jobs.sql import readme_examples, run_duckdb, run_sql
from jobs.warehouse import register_views

pytestmark = pytest.mark.integration
README = Path(__file__).resolve().parents[2] / "README.md"
TRACELAKE = Path(sys.executable).with_name("tracelake")
EXAMPLES = readme_examples(README.read_text())


def test_readme_has_ten_examples():
    assert len(EXAMPLES) >= 10


@pytest.mark.parametrize("query", EXAMPLES, ids=[f"example{i}" for i in range(len(EXAMPLES))])
def test_readme_example_runs(spark, corpus_warehouse, query):
    wh, _ = corpus_warehouse
    rows = run_sql(spark, str(wh), query).collect()
    assert len(rows) > 0, query


def test_all_written_tables_are_registered(spark, corpus_warehouse):
    wh, _ = corpus_warehouse
    assert {"captures", "events", "steps", "ranks"} <= set(register_views(spark, str(wh)))


def test_every_documented_table_is_a_view_even_without_rows(spark, tmp_path):
    """A table with no rows (never written, or written empty: ``fleet_findings`` when no finding is in the
    window) is an empty view of its declared schema, not TABLE_OR_VIEW_NOT_FOUND."""
    from schemas import FLEET_TABLES, TABLES

    (tmp_path / "fleet_findings").mkdir()  # written with no rows: the folder, no Parquet file
    assert register_views(spark, str(tmp_path)) == [*TABLES, *FLEET_TABLES]
    for name in ("fleet_findings", "host_health", "steps"):
        df = run_sql(spark, str(tmp_path), f"SELECT * FROM {name}")
        assert df.collect() == [] and df.columns == TABLES.get(name, FLEET_TABLES.get(name)).names
    assert run_sql(spark, str(tmp_path), "SELECT count(*) AS n FROM fleet_findings").collect()[0]["n"] == 0


def _value(v):
    """A cell both engines agree on: numbers to 12 significant digits, lists as sorted tuples, nulls as None."""
    if isinstance(v, (list, tuple, np.ndarray)):
        return tuple(sorted(_value(x) for x in v))
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, float, np.integer, np.floating)):
        return float(f"{float(v):.12g}")
    return str(v)


@pytest.mark.parametrize("query", EXAMPLES, ids=[f"example{i}" for i in range(len(EXAMPLES))])
def test_readme_example_answers_the_same_on_the_embedded_engine(spark, corpus_warehouse, query):
    """DuckDB over the same snapshots (the query translated from Spark SQL) gives Spark's columns and rows (as a
    multiset: rows that tie on the ORDER BY keys may come in either order). Spark's ``percentile_approx`` is an
    approximation (a rank within 1/10000 of the group's rows; DuckDB's translation is exact): its numbers agree
    within 1 %."""
    wh, _ = corpus_warehouse
    s = run_sql(spark, str(wh), query).toPandas()
    d = run_duckdb(str(wh), query).to_pandas()
    assert list(d.columns) == list(s.columns)
    rows = lambda df: sorted((tuple(_value(v) for v in r) for r in df.itertuples(index=False)), key=repr)  # noqa: E731
    if "percentile_approx" not in query:
        assert rows(d) == rows(s), query
        return
    key = [c for c in d.columns if d[c].dtype.kind not in "fiu"]  # the group columns
    a, b = d.sort_values(key).reset_index(drop=True), s.sort_values(key).reset_index(drop=True)
    assert a[key].astype(str).equals(b[key].astype(str)), query
    for c in set(d.columns) - set(key):
        assert np.allclose(a[c].astype(float), b[c].astype(float), rtol=0.01, equal_nan=True), (query, c)


def test_exact_percentiles_answer_the_same_on_both_engines(spark, corpus_warehouse):
    """Spark's exact ``percentile`` interpolates; the embedded engine's translation (``quantile_cont``) too."""
    wh, _ = corpus_warehouse
    q = (
        "SELECT job_id, percentile(step_time_ns, 0.5) AS p50, percentile(step_time_ns, 0.9) AS p90 "
        "FROM steps GROUP BY job_id ORDER BY job_id"
    )
    s = run_sql(spark, str(wh), q).toPandas()
    d = run_duckdb(str(wh), q).to_pandas()
    assert list(d["job_id"]) == list(s["job_id"])
    assert np.allclose(d[["p50", "p90"]].astype(float), s[["p50", "p90"]].astype(float), rtol=1e-12)


def test_every_documented_table_answers_on_the_embedded_engine_even_without_rows(tmp_path):
    from schemas import FLEET_TABLES, TABLES

    for name, t in {**TABLES, **FLEET_TABLES}.items():
        out = run_duckdb(str(tmp_path), f"SELECT * FROM {name}")
        assert out.num_rows == 0 and out.column_names == t.names, name


def _cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(TRACELAKE), *args], input=stdin, capture_output=True, text=True, timeout=120,
        env={**os.environ, "COLUMNS": "100"},
    )  # fmt: skip


def test_the_sql_shell_answers_like_a_database_shell(corpus_warehouse):
    """tables / describe, a mistyped column or table in one or two lines with the right name suggested, a
    compact form when piped, and the prompt."""
    wh = str(corpus_warehouse[0])
    listed = _cli("tables", "--warehouse", wh)
    assert listed.returncode == 0 and listed.stdout.startswith("name,stage,columns,rows,description\n")
    assert "fleet_ops,fleet," in listed.stdout and "\nsteps,analyze,40," in listed.stdout
    desc = _cli("describe", "steps")
    assert desc.returncode == 0 and "\nstep_time_ns,int64,ns,True,\"Duration of the CPU `ProfilerStep#N`" in desc.stdout
    bad = _cli("sql", "SELECT job_id, step_time FROM steps", "--warehouse", wh)
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) <= 2, bad.stderr
    assert "step_time" in bad.stderr and "did you mean step_time_ns" in bad.stderr.lower(), bad.stderr
    assert bad.stdout == ""
    typo = _cli("sql", "SELECT count(*) FROM kernel", "--warehouse", wh)
    assert typo.returncode == 1 and "no table 'kernel'; did you mean kernels" in typo.stderr, typo.stderr
    syntax = _cli("sql", "SELECT job_id FROM steps WHERE", "--warehouse", wh)
    assert syntax.returncode == 1 and syntax.stderr.count("\n") <= 2 and "syntax error" in syntax.stderr
    top = _cli("sql", "SELECT name, count(*) AS n FROM kernels GROUP BY name ORDER BY n DESC, name", "--warehouse", wh,
               "--limit", "10")  # fmt: skip
    lines = top.stdout.splitlines()
    assert top.returncode == 0 and lines[0] == "name,n" and len(lines) == 11  # piped: csv, one line per row
    # nanosecond integers stay integers beside a null (a LEFT JOIN); a cut answer says so on stderr
    ns = _cli("sql", "SELECT s.step_start_ns, c.trace_start_ns FROM steps s LEFT JOIN captures c ON 1 = 0 "
              "ORDER BY s.step_start_ns", "--warehouse", wh, "--limit", "2")  # fmt: skip
    first = ns.stdout.splitlines()[1]
    assert re.fullmatch(r"\d{13,},", first), ns.stdout
    assert "the first 2 rows; more with --limit" in ns.stderr
    shell = _cli(
        "sql", "--warehouse", wh, stdin="SELECT count(*) AS n\nFROM captures;\n\\d ranks\nSELECT nope;\nexit\n"
    )  # piped: the answers alone on stdout (csv), the error on stderr, and rc 1 after the input
    assert shell.returncode == 1, shell.stderr
    assert shell.stdout.startswith("n\n") and "step_time_p50_ns" in shell.stdout and "tracelake>" not in shell.stdout
    assert shell.stderr.startswith("error:") and "nope" in shell.stderr
