"""Per-run-date partial aggregates: how the fleet stage keeps ``fleet_stats`` and ``fleet_kernels`` up to date
without reading the history.

The rows of a fleet table are of three kinds; a daily run recomputes only those its changed jobs touch
(:func:`made_again`; :func:`changed_stats`, :func:`changed_kernels`):

* **per capture date** (``date = YYYY-MM-DD``): exact (:func:`jobs.fleet.stats.fleet_stats`), recomputed for the
  dates a changed job has (or had) rows on, from the stored reductions of the jobs with rows on those dates;
* **one run over all dates** (dimension ``job``, ``date = 'all'``): exact, recomputed for the changed runs — the
  number ``run_summary``, the job report and MLflow show;
* **a wide group over all dates** (dimensions ``fleet``, ``job_name``, ``model``, ``hardware``,
  ``torch_version``, ``date = 'all'``): merged from one partial aggregate per (dimension, value, run date) — the
  run date is a run's first capture date, so each run lies in exactly one partial and the counts of runs and
  ranks add up exactly. Counts and sums (``n_*``, every ``*_ns`` sum, hence the percentages) and the mean are
  exact. The step-time percentiles come from a KLL sketch per partial (Apache DataSketches,
  ``kll_doubles_sketch``, k = :data:`SKETCH_K`), merged: while the merged sketch holds every step time (at most
  a few hundred steps in the group) the percentile is exact (linear interpolation, as the other rows); beyond,
  the value returned has a normalized rank error of at most :data:`RANK_ERROR` (≈1.65 %, at 99 % confidence:
  the p50 returned lies between the exact p48.35 and p51.65; the bound holds for any order of merges) — the
  sketch compacts at random, so two computations over the same rows may differ within that bound.

Partials of a run date are recomputed when a run of that date changed (:data:`jobs.fleet.reduced.STATS_PARTIALS`,
:data:`jobs.fleet.reduced.KERNEL_PARTIALS`). Beside them each wide group keeps a :data:`MERGED` row, the merge of
every run date's partials. A daily run whose changed runs all lie on run dates without stored partials (new runs:
the usual day) reads the merged rows and adds the new partials to them: O(groups) rows, not O(dates × groups).
A run that touches a run date with stored partials (a job re-ingested or dropped, a late rank) cannot take a
sketch out of a merge: it reads every run date's partials and merges them again. Either way it writes only the
rows it made again (:func:`made_again`, :func:`changed_stats`, :func:`changed_kernels`): the stored tables are
updated by key.
"""

from __future__ import annotations

import datasketches
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from jobs.fleet.stats import (
    _SUMS,
    DIMENSIONS,
    TOP_KERNELS,
    _stack,
    fleet_kernels,
    fleet_stats,
    run_ranks,
    stats_columns,
    step_values,
    top_kernels,
)
from schemas import FLEET_KERNELS, FLEET_STATS

#: The dimensions whose ``all`` rows are merged from partials (the ``job`` dimension's are exact per run).
WIDE = tuple(d for d in DIMENSIONS if d != "job")
#: KLL sketch size (DataSketches' default) and its normalized rank error at 99 % confidence (double-sided).
SKETCH_K = 200
RANK_ERROR = datasketches.kll_doubles_sketch.get_normalized_rank_error(SKETCH_K, True)
_KEY = ["dimension", "value", "run_date"]
#: ``run_date`` of a wide group's merged partial, stored beside the dated ones: every run date's partials of the
#: group merged (:func:`combine_stats`, :func:`combine_kernels`), so a day of new run dates adds to it instead of
#: merging the history again.
MERGED = "all"
_KEY_FIELDS = [(k, pa.string()) for k in _KEY]

#: One partial of ``fleet_stats`` per (dimension, value, run date): counts and sums (ns), the step-time sum and
#: count (the mean) and the serialized KLL sketch of the job step times (null without a ProfilerStep).
STATS_PARTIALS_SCHEMA = pa.schema(
    [
        *_KEY_FIELDS,
        ("n_runs", pa.int64()),
        ("n_ranks", pa.int64()),
        ("n_steps", pa.int64()),
        ("n_rank_steps", pa.int64()),
        *[(c, pa.float64()) for c in _SUMS],
        ("step_ns_sum", pa.float64()),
        ("step_ns_count", pa.int64()),
        ("step_ns_sketch", pa.binary()),
    ]
)
#: One partial of ``fleet_kernels`` per (dimension, value, run date, kernel name): sums and runs.
KERNEL_PARTIALS_SCHEMA = pa.schema(
    [
        *_KEY_FIELDS,
        ("name", pa.string()),
        ("kernel_type", pa.string()),
        ("n", pa.int64()),
        ("total_ns", pa.int64()),
        ("n_runs", pa.int64()),
    ]
)


def _by_run_date(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` stacked over :data:`WIDE` with ``date`` := the run's ``run_date``."""
    return _stack(
        df.drop(columns="run_date").assign(date=df["run_date"].astype(str)), WIDE, dated=True, overall=False
    ).rename(columns={"date": "run_date"})


def _sketch(values: np.ndarray) -> bytes | None:
    if not len(values):
        return None
    s = datasketches.kll_doubles_sketch(SKETCH_K)
    s.update(values)
    return s.serialize()


def stats_partials(job_steps: pd.DataFrame) -> pd.DataFrame:
    """:data:`STATS_PARTIALS_SCHEMA` rows of ``job_steps`` (:func:`jobs.fleet.stats.job_steps_frame` rows holding
    every row of their runs)."""
    if job_steps is None or not len(job_steps):
        return pd.DataFrame(columns=STATS_PARTIALS_SCHEMA.names)
    js = step_values(job_steps)
    js = js.merge(run_ranks(js).rename("_run_ranks").reset_index(), on=["job_id", "attempt"], how="left")
    st = _by_run_date(js)
    g = st.groupby(_KEY, sort=True)
    runs = st.drop_duplicates([*_KEY, "job_id", "attempt"]).groupby(_KEY, sort=True)
    out = pd.DataFrame(
        {
            "n_runs": runs.size(),
            "n_ranks": runs["_run_ranks"].sum(),
            "n_steps": g["_is_step"].sum(),
            "n_rank_steps": g["n_rank_steps"].sum(),
            **{c: g[c].sum(min_count=1) for c in _SUMS},
            "step_ns_sum": g["_step_ns"].sum(),
            "step_ns_count": g["_step_ns"].count(),
            "step_ns_sketch": g["_step_ns"].agg(lambda v: _sketch(v.dropna().to_numpy(dtype="float64"))),
        }
    )
    return out.reset_index()[STATS_PARTIALS_SCHEMA.names]


def combine_stats(partials: pd.DataFrame | pa.Table) -> pd.DataFrame:
    """One :data:`STATS_PARTIALS_SCHEMA` row per (dimension, value) of ``partials`` (any run dates, merged rows
    included), run date :data:`MERGED`: counts and sums added, the KLL sketches merged (in run-date order, a
    group's merged row first)."""
    if isinstance(partials, pa.Table):
        partials = partials.to_pandas()  # one row per (dimension, value, run date): the sketches merge in Python
    if partials is None or not len(partials):
        return pd.DataFrame(columns=STATS_PARTIALS_SCHEMA.names)
    p = partials.assign(_dated=partials["run_date"] != MERGED).sort_values(
        ["dimension", "value", "_dated", "run_date"], kind="stable"
    )
    g = p.groupby(["dimension", "value"], sort=True)
    out = pd.DataFrame(
        {
            "n_runs": g["n_runs"].sum(),
            "n_ranks": g["n_ranks"].sum(),
            "n_steps": g["n_steps"].sum(),
            "n_rank_steps": g["n_rank_steps"].sum(),
            **{c: g[c].sum(min_count=1) for c in _SUMS},
            "step_ns_sum": g["step_ns_sum"].sum(),
            "step_ns_count": g["step_ns_count"].sum(),
            "step_ns_sketch": g["step_ns_sketch"].agg(_merged_sketch),
        }
    )
    return out.reset_index().assign(run_date=MERGED)[STATS_PARTIALS_SCHEMA.names]


def merge_stats(partials: pd.DataFrame | pa.Table) -> pd.DataFrame:
    """The ``fleet_stats`` rows of date ``all`` of the :data:`WIDE` dimensions from ``partials``: every run date's,
    or each group's :data:`MERGED` row and the partials of run dates it does not hold (:func:`combine_stats`)."""
    m = combine_stats(partials)
    if not len(m):
        return pd.DataFrame(columns=FLEET_STATS.names)
    count = m["step_ns_count"].astype("float64")
    out = m.drop(columns=["run_date", "step_ns_sum", "step_ns_count", "step_ns_sketch"]).assign(
        step_time_mean_ns=(m["step_ns_sum"].astype("float64") / count).where(count > 0)
    )
    qs = [_quantiles(b) for b in m["step_ns_sketch"]]
    for i, col in enumerate(("step_time_p50_ns", "step_time_p90_ns", "step_time_p99_ns")):
        out[col] = [None if q is None else round(q[i]) for q in qs]
    return stats_columns(out.assign(date="all"))


def _merged_sketch(sketches) -> bytes | None:
    """The serialized merge of serialized KLL sketches (``None`` / NaN skipped; ``None`` when none is left)."""
    merged = None
    for b in sketches:
        if b is None or (isinstance(b, float) and b != b):
            continue
        s = datasketches.kll_doubles_sketch.deserialize(bytes(b))
        if merged is None:
            merged = s
        else:
            merged.merge(s)
    return None if merged is None else merged.serialize()


def _quantiles(sketch) -> tuple[float, float, float] | None:
    """p50, p90, p99 of a serialized KLL sketch: exact (linear interpolation) while it holds every item."""
    if sketch is None or (isinstance(sketch, float) and sketch != sketch):
        return None
    s = datasketches.kll_doubles_sketch.deserialize(bytes(sketch))
    if s.is_empty():
        return None
    if not s.is_estimation_mode():
        items = np.array([x for x, _ in s], dtype="float64")
        return tuple(float(x) for x in np.quantile(items, [0.5, 0.9, 0.99]))
    return tuple(float(s.get_quantile(q)) for q in (0.5, 0.9, 0.99))


def kernel_partials(job_kernels: pd.DataFrame) -> pd.DataFrame:
    """:data:`KERNEL_PARTIALS_SCHEMA` rows of ``job_kernels`` (:func:`jobs.fleet.stats.job_kernels_frame` rows
    holding every row of their runs)."""
    if job_kernels is None or not len(job_kernels):
        return pd.DataFrame(columns=KERNEL_PARTIALS_SCHEMA.names)
    st = _by_run_date(job_kernels)
    out = (
        st.groupby([*_KEY, "name"], sort=True)
        .agg(
            kernel_type=("kernel_type", "first"),
            n=("n", "sum"),
            total_ns=("total_ns", "sum"),
            n_runs=("job", "nunique"),
        )
        .reset_index()
    )
    return out[KERNEL_PARTIALS_SCHEMA.names]


def combine_kernels(partials: pd.DataFrame | pa.Table) -> pa.Table:
    """One :data:`KERNEL_PARTIALS_SCHEMA` row per (dimension, value, kernel name) of ``partials`` (any run dates,
    merged rows included), run date :data:`MERGED`: sums and runs added (exact), the kernel type of the first
    (a group's merged row, then by run date). Summed in Arrow: a year of partials is ~10^5 rows."""
    p = as_table(partials, KERNEL_PARTIALS_SCHEMA)
    p = p.append_column("_dated", pc.not_equal(p["run_date"], MERGED)).sort_by(
        [(k, "ascending") for k in ["dimension", "value", "_dated", "run_date", "name"]]
    )
    per = p.group_by(["dimension", "value", "name"], use_threads=False).aggregate(
        [("kernel_type", "first"), ("n", "sum"), ("total_ns", "sum"), ("n_runs", "sum")]
    )
    names = {"kernel_type_first": "kernel_type", "n_sum": "n", "total_ns_sum": "total_ns", "n_runs_sum": "n_runs"}
    per = per.rename_columns([names.get(c, c) for c in per.column_names])
    per = per.append_column("run_date", pa.array([MERGED] * per.num_rows, pa.string()))
    return as_table(per, KERNEL_PARTIALS_SCHEMA)


def merge_kernels(partials: pd.DataFrame | pa.Table, top: int = TOP_KERNELS) -> pd.DataFrame:
    """The ``fleet_kernels`` rows of date ``all`` of the :data:`WIDE` dimensions from ``partials`` (pandas or
    Arrow), as :func:`merge_stats` (:func:`combine_kernels`; exact: sums and runs add up over run dates)."""
    if partials is None or not len(partials):
        return pd.DataFrame(columns=FLEET_KERNELS.names)
    per = combine_kernels(partials).drop_columns(["run_date"]).to_pandas()
    return top_kernels(per.assign(date="all"), top)


def as_table(rows: pd.DataFrame | pa.Table, schema: pa.Schema) -> pa.Table:
    """``rows`` as an Arrow table of ``schema`` (pandas converted, Arrow cast; no pandas metadata)."""
    if isinstance(rows, pa.Table):
        return rows.select(schema.names).cast(schema)
    return pa.Table.from_pandas(rows[schema.names], schema=schema, preserve_index=False).replace_schema_metadata(None)


def made_again(dates, runs, groups: dict | None = None) -> list:
    """The rows of a fleet table a derivation over ``dates`` and ``runs`` (``job#attempt``) makes again, as a
    predicate in disjunctive normal form (:func:`jobs.warehouse.write_table`'s ``replace_rows``): the rows of those
    capture dates, the ``job`` dimension's ``all`` rows of those runs, and the ``all`` rows of the wide groups of
    ``groups`` (``{dimension: values}``; ``None``: of every wide group)."""
    wide = (
        [[("dimension", "!=", "job"), ("date", "=", "all")]]
        if groups is None
        else [[("dimension", "=", d), ("date", "=", "all"), ("value", "in", sorted(groups[d]))] for d in sorted(groups)]
    )
    return [
        [("date", "in", sorted(map(str, dates)))],
        [("dimension", "=", "job"), ("date", "=", "all"), ("value", "in", sorted(map(str, runs)))],
        *wide,
    ]


def groups_of(partials: pa.Table) -> dict[str, list[str]]:
    """``{dimension: [value, …]}``: the wide groups ``partials`` (Arrow, either partials schema) has rows of."""
    pairs = partials.select(["dimension", "value"]).group_by(["dimension", "value"]).aggregate([])
    out: dict[str, list[str]] = {}
    for d, v in zip(pairs["dimension"].to_pylist(), pairs["value"].to_pylist()):
        out.setdefault(d, []).append(v)
    return {d: sorted(vs) for d, vs in sorted(out.items())}


def fleet_rows(parts, table) -> pa.Table:
    """The fleet table ``table`` (:data:`schemas.FLEET_STATS` / :data:`schemas.FLEET_KERNELS`) of ``parts``
    (pandas or Arrow), sorted by (dimension, value, date), as Arrow."""
    schema = table.arrow_schema()
    parts = [as_table(p, schema) for p in parts if p is not None and len(p)]
    out = pa.concat_tables(parts) if parts else schema.empty_table()
    keys = ["dimension", "value", "date", *(["kernel_rank"] if "kernel_rank" in schema.names else [])]
    return out.sort_by([(k, "ascending") for k in keys])


def changed_stats(job_steps: pd.DataFrame, partials: pd.DataFrame | pa.Table, dates=None, runs=None) -> pa.Table:
    """The ``fleet_stats`` rows :func:`made_again` for ``dates`` and ``runs`` (``None``: every date and run of
    ``job_steps``, the whole table) — what a keyed write adds in place of the stored rows :func:`made_again`
    names (:func:`jobs.fleet.job.run_fleet`).

    Args:
        job_steps: :func:`jobs.fleet.stats.job_steps_frame` rows holding every row on ``dates`` and every row of
            the runs of ``runs`` (``dates`` ``None``: every row of the fleet).
        partials: :func:`stats_partials` rows (pandas or Arrow) whose merge per wide group is the group's
            ``all`` row (:func:`merge_stats`): every run date's, or the :data:`MERGED` rows and the new run dates'.

    Returns:
        Arrow (:data:`schemas.FLEET_STATS`), sorted by dimension, value and date.
    """
    js = job_steps if job_steps is not None else pd.DataFrame()
    if dates is None:
        on = mine = js
    else:
        on = js[js["date"].astype(str).isin({str(d) for d in dates})] if len(js) else js
        mine = js[js["job"].isin(set(runs))] if len(js) else js
    return fleet_rows([dated_stats(on), run_stats(mine), merge_stats(partials)], FLEET_STATS)


def dated_stats(job_steps: pd.DataFrame) -> pd.DataFrame:
    """The ``fleet_stats`` rows of each capture date of ``job_steps`` (every dimension; exact). A date's rows
    depend on that date's job steps only: the rows of several dates are those of each date, concatenated."""
    return fleet_stats(job_steps, overall=False)


def run_stats(job_steps: pd.DataFrame) -> pd.DataFrame:
    """The ``job`` dimension's ``all`` rows: one per run of ``job_steps`` (holding every row of those runs)."""
    return fleet_stats(job_steps, ("job",), dated=False)


def dated_kernels(job_kernels: pd.DataFrame, top: int = TOP_KERNELS) -> pd.DataFrame:
    """The ``fleet_kernels`` rows of each capture date of ``job_kernels``, as :func:`dated_stats`."""
    return fleet_kernels(job_kernels, top, overall=False)


def run_kernels(job_kernels: pd.DataFrame, top: int = TOP_KERNELS) -> pd.DataFrame:
    """The ``job`` dimension's ``all`` ``fleet_kernels`` rows of each run of ``job_kernels``, as :func:`run_stats`."""
    return fleet_kernels(job_kernels, top, ("job",), dated=False)


def changed_kernels(
    job_kernels: pd.DataFrame | None, partials: pd.DataFrame | pa.Table, dates=None, runs=None, top: int = TOP_KERNELS
) -> pa.Table:
    """The ``fleet_kernels`` rows :func:`made_again` for ``dates`` and ``runs``, as :func:`changed_stats`
    (``job_kernels``: :func:`jobs.fleet.stats.job_kernels_frame` rows; ``partials``: :func:`kernel_partials` rows, as
    :func:`changed_stats`'); Arrow, sorted by dimension, value, date and kernel rank."""
    jk = job_kernels if job_kernels is not None else pd.DataFrame()
    if dates is not None and len(jk):
        on, mine = jk[jk["date"].astype(str).isin({str(d) for d in dates})], jk[jk["job"].isin(set(runs))]
    else:
        on = mine = jk
    return fleet_rows([dated_kernels(on, top), run_kernels(mine, top), merge_kernels(partials, top)], FLEET_KERNELS)
