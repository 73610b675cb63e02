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
