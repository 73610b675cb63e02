"""The table contract: derived Arrow/Spark schemas and the generated README reference."""

from __future__ import annotations

import pyarrow as pa
import pytest

from schemas import CAPTURES, EVENTS, FLEET_TABLES, RANKS, STAGES, STEPS, TABLES, stage_tables
from schemas.docs import main as docs_main
from schemas.expectations import STAGE_TABLES


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


def test_every_table_declares_the_stage_that_writes_it():
    """The stage lists (validation suites, both executors' writes, the tests' digests) come from the declarations:
    every table is in exactly one stage's list, job tables in normalize or analyze, fleet tables in fleet."""
    everything = {**TABLES, **FLEET_TABLES}
    by_stage = {stage: stage_tables(stage) for stage in STAGES}
    assert sorted(n for tables in by_stage.values() for n in tables) == sorted(everything)
    assert set(by_stage["fleet"]) == set(FLEET_TABLES)
    assert STAGE_TABLES == {stage: tuple(tables) for stage, tables in by_stage.items()}
    with pytest.raises(ValueError, match="unknown stage 'publish'"):
        stage_tables("publish")


def test_the_local_executor_stages_every_analyze_output_it_does_not_write_on_the_driver(tmp_path):
    """A newly declared analyze table needs no list of its own: the workers stage every output table but the
    driver's (ranks), so none is written empty by the default executor."""
    from jobs.analyze import job

    assert set(job.OUTPUT_TABLES) == set(stage_tables("analyze")) - {"findings", "rule_coverage"}  # run_findings
    tables = {n: _one_row(t.empty()) for n, t in job.OUTPUT_TABLES.items()}
    counts = job._stage_outputs(tables, str(tmp_path))
    assert counts == {n: 1 for n in job.OUTPUT_TABLES}
    staged = {p.name for p in tmp_path.iterdir()}
    assert staged == set(job.OUTPUT_TABLES) - set(job._DRIVER_WRITES)


def _one_row(empty: pa.Table) -> pa.Table:
    """One row of ``empty``'s schema: "x" for strings, 0 for numbers, False for booleans, null otherwise."""
    values = {}
    for f in empty.schema:
        if pa.types.is_string(f.type) or pa.types.is_large_string(f.type):
            values[f.name] = ["x"]
        elif pa.types.is_integer(f.type) or pa.types.is_floating(f.type):
            values[f.name] = [0]
        elif pa.types.is_boolean(f.type):
            values[f.name] = [False]
        else:
            values[f.name] = [None]
    return pa.table(values, schema=empty.schema)
