"""The table contract: derived Arrow/Spark schemas and the generated README reference."""

from __future__ import annotations

import pyarrow as pa

from schemas import CAPTURES, EVENTS, RANKS, STEPS, TABLES
from schemas.docs import main as docs_main


def test_column_names_are_snake_case_and_unique():
    for t in TABLES.values():
        assert len(set(t.names)) == len(t.names), t.name
        for n in t.names:
            assert n == n.lower() and " " not in n, n


def test_time_columns_are_integer_ns():
    for t in (EVENTS, STEPS, RANKS, CAPTURES):
        for c in t.columns:
            if c.name.endswith("_ns"):
                assert c.type == pa.int64(), (t.name, c.name)
            if c.name.endswith("_pct"):
                assert c.type == pa.float64(), (t.name, c.name)


def test_partition_and_key_columns_exist_and_are_not_nullable():
    for t in TABLES.values():
        schema = t.arrow_schema()
        for k in (*t.partition_by, *t.key):
            assert not schema.field(k).nullable, (t.name, k)


def test_readme_table_reference_is_current():
    assert docs_main(["--check"]) == 0
