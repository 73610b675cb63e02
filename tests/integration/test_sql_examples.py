"""Every SQL example in the README runs against the corpus warehouse and returns rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.sql import readme_examples, run_sql
from jobs.warehouse import register_views

pytestmark = pytest.mark.integration
README = Path(__file__).resolve().parents[2] / "README.md"
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
