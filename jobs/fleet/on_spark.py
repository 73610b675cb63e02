"""The fleet transforms of a whole derivation on Spark's executors: no frame of the history on the driver.

A first fleet run, a ``--rebuild`` or a run without stored partials makes every row of ``fleet_stats``,
``fleet_kernels``, their partials and ``regressions``. On the local executor that is pandas over every stored
reduction (:func:`jobs.fleet.job.derive_stats`, :func:`jobs.fleet.regressions.find_regressions`); on Spark the stored
reductions are read by Spark (:func:`jobs.warehouse.read_spark`) and the same pure pandas functions run per group on
the executors (``applyInPandas``), each group holding every row its output depends on:

* per run date (a run's first capture date: each run in exactly one) → the partials
  (:func:`jobs.fleet.partials.stats_partials`, :func:`jobs.fleet.partials.kernel_partials`) and the ``job`` rows
  of its runs (:func:`jobs.fleet.partials.run_stats`, :func:`jobs.fleet.partials.run_kernels`);
* per capture date → the dated rows (:func:`jobs.fleet.partials.dated_stats`,
  :func:`jobs.fleet.partials.dated_kernels`);
* per job name → the regression tests (:func:`jobs.fleet.regressions.compare_runs`).

The driver collects the outputs only — summary rows: one per (dimension, value, date), per run, per (run, metric) —
merges the wide groups' ``all`` rows from the partials (:func:`jobs.fleet.partials.merge_stats`) and applies the
Benjamini–Hochberg correction, which spans one capture day's runs of every job name
(:func:`jobs.fleet.regressions.decide`). The rows equal the local executor's (tests/integration/test_executors.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import pandas as pd
import pyarrow as pa

from jobs.analyze.windows import WINDOW_TRACE
from jobs.fleet.partials import (
    as_table,
    dated_kernels,
    dated_stats,
    fleet_rows,
    kernel_partials,
    merge_kernels,
    merge_stats,
    run_kernels,
    run_stats,
    stats_partials,
)
from jobs.fleet.reduced import JOB_KERNELS, JOB_STEPS, KERNEL_PARTIALS, SCHEMAS, STATS_PARTIALS
from jobs.fleet.regressions import DECIDE_COLUMNS, INPUT_COLUMNS, METRICS, OUTPUT_COLUMNS, compare_runs, decide
from jobs.warehouse import read_spark
from schemas import FLEET_KERNELS, FLEET_STATS, REGRESSIONS


@dataclass
class Whole:
    """What :func:`derive_whole` made: ``partials`` (``{name: Arrow}``, per run date: every stored run date's),
    ``tables`` (``{"fleet_stats"|"fleet_kernels": Arrow}``: every row, the wide groups' ``all`` rows merged from
    ``partials``) and ``regressions`` (every run compared, pandas, without ``changes_json``; ``None`` when not
    asked)."""

    partials: dict
    tables: dict
    regressions: pd.DataFrame | None = None


def derive_whole(spark, warehouse: str, compare: dict | None = None) -> Whole:
    """Every ``fleet_stats`` and ``fleet_kernels`` row and every partial, from the stored reductions of
    ``warehouse`` (:data:`jobs.fleet.reduced.JOB_STEPS`, :data:`jobs.fleet.reduced.JOB_KERNELS`, written by
    :func:`jobs.fleet.reduced.update`), per group on the executors (module docstring); with ``compare`` (the
    regression options: ``baseline_runs``, ``threshold_pct``, ``threshold_pp``, ``alpha``), every run compared too
    (:func:`_regressions`).

    Raises:
        pyspark's exceptions for a read error of the stored reductions.
    """
    js, jk = (_cached(read_spark(spark, warehouse, n)) for n in (JOB_STEPS, JOB_KERNELS))
    try:
        sp = _by(js, ["run_date"], stats_partials, SCHEMAS[STATS_PARTIALS])
        kp = _by(jk, ["run_date"], kernel_partials, SCHEMAS[KERNEL_PARTIALS])
        ss, ks = FLEET_STATS.arrow_schema(), FLEET_KERNELS.arrow_schema()
        stats = [_by(js, ["date"], dated_stats, ss), _by(js, ["run_date"], run_stats, ss)]
        kernels = [_by(jk, ["date"], dated_kernels, ks), _by(jk, ["run_date"], run_kernels, ks)]
        regressions = None if compare is None else _regressions(js, **compare)
    finally:
        for df in (js, jk):
            if df is not None:
                df.unpersist()
    return Whole(
        {STATS_PARTIALS: sp, KERNEL_PARTIALS: kp},
        {
            "fleet_stats": fleet_rows([*stats, merge_stats(sp)], FLEET_STATS),
            "fleet_kernels": fleet_rows([*kernels, merge_kernels(kp)], FLEET_KERNELS),
        },
        regressions,
    )


def _regressions(js, baseline_runs: int, threshold_pct: float, threshold_pp: float, alpha: float) -> pd.DataFrame:
    """Every run of the job steps ``js`` (Spark) compared (:func:`jobs.fleet.regressions.find_regressions`): the
    tests per job name on the executors (:func:`jobs.fleet.regressions.compare_runs`), the correction and verdicts
    on the driver (:func:`jobs.fleet.regressions.decide`); ``regressions`` rows (:data:`OUTPUT_COLUMNS`) in job name,
    run and :data:`METRICS` order."""
    if js is None:
        return decide(pd.DataFrame(columns=[*OUTPUT_COLUMNS, *DECIDE_COLUMNS]))
    steps = js.where(js["window"].isNull() | (js["window"] != WINDOW_TRACE)).select(*INPUT_COLUMNS)
    test = partial(compare_runs, baseline_runs=baseline_runs, alpha=alpha)
    raw = _by(steps, ["job_name"], test, _compared_schema()).to_pandas()
    raw = raw.assign(_m=raw["metric"].map({m: i for i, m in enumerate(METRICS)}))
    raw = raw.sort_values(["job_name", "run_index", "_m"], kind="stable").drop(columns="_m")
    return decide(raw, threshold_pct, threshold_pp, alpha)


def _cached(df):
    """``df`` kept in the executors' memory (and disk) for the groupings that read it: its files read once."""
    from pyspark import StorageLevel  # heavy: pyspark, only on the Spark path

    return None if df is None else df.persist(StorageLevel.MEMORY_AND_DISK)


def _by(df, keys, fn, schema: pa.Schema) -> pa.Table:
    """``fn`` (pandas → pandas of ``schema``'s columns) applied per group of ``keys`` of the Spark DataFrame ``df``
    on the executors, the outputs collected as Arrow (``schema``'s empty table when ``df`` is ``None``)."""
    from pyspark.sql.pandas.types import from_arrow_schema  # heavy: pyspark, only on the Spark path

    if df is None:
        return schema.empty_table()
    names = schema.names
    out = df.groupBy(*keys).applyInPandas(lambda g: fn(g).reindex(columns=names), from_arrow_schema(schema))
    return as_table(out.toArrow(), schema)


def _compared_schema() -> pa.Schema:
    """:func:`compare_runs`' rows: the ``regressions`` columns it fills (every one nullable until decided), and
    :data:`DECIDE_COLUMNS`."""
    table = REGRESSIONS.arrow_schema()
    fields = [table.field(c).with_nullable(True) for c in OUTPUT_COLUMNS]
    return pa.schema([*fields, *(pa.field(c, pa.bool_()) for c in DECIDE_COLUMNS)])
