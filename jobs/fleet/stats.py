"""Fleet-wide statistics: the per-step metrics of every job grouped by job, job name, model tag,
hardware, torch version and date (``fleet_stats``), and the top kernels of each group
(``fleet_kernels``).

Two halves: one pandas transform reduces the big tables to one row per job step (:func:`reduce_job_steps`) and
one row per (job run, date, kernel name) (:func:`reduce_job_kernels`) — the shape that scales with the fleet;
the local executor runs it on the whole frame, Spark per job run (``applyInPandas``) —, then pure pandas
functions group those small frames, joined with each run's metadata (:func:`run_metadata_frame`), on the
driver (:func:`fleet_stats`, :func:`fleet_kernels`) — the fleet stage over the jobs of the dates a run touches
only (:func:`jobs.fleet.job.derive_stats`).

Definitions (column docs in ``schemas/tables.py``):

* **analysis windows** (:func:`jobs.analyze.windows.analysis_windows`): a rank's ProfilerSteps, or — for a rank
  capture without ProfilerStep — one window over its whole trace (``window = "trace"``, ``step = -1``). The
  reduction takes ``steps`` rows or analysis windows; a job step is one (job_id, attempt, step) of them, a
  whole-trace job window being the job's ranks' whole traces together.
* **job step time**: per (job_id, attempt, step) the slowest rank's ``ProfilerStep`` duration — the
  time the job as a whole spent on the step (a synchronous-training step is as long as its slowest
  rank). p50/p90/p99 are exact percentiles (numpy, linear interpolation between closest ranks),
  rounded to whole ns — in the fleet stage's table, the ``all`` rows of the wide dimensions come from merged
  sketches instead (:mod:`jobs.fleet.partials`, bound stated there). Only ProfilerSteps count: a whole-trace window is no step, so it is left out of
  the step-time percentiles and ``n_steps`` (a job with only whole-trace windows has null step time).
* **idle % / compute %**: HTA temporal breakdown (``idle_time_pctg``, ``compute_time_pctg``) made
  time-weighted over the group: Σ idle_time_ns / Σ kernel_time_ns × 100 over every rank-step, so a
  long step weighs more than a short one (a plain mean of per-step percentages would not).
* **exposed communication %**: Σ exposed_comm_ns / Σ step_time_ns × 100 over rank-steps (share of wall
  step time spent in communication that no computation overlaps), likewise CPU-bound % and data-loader %.
  These sums run over every analysis window, whole traces included (a trace-only job has a GPU idle %),
  as do ``n_runs``, ``n_ranks`` and ``n_rank_steps``.

Groups: each ``dimension`` (:data:`DIMENSIONS`) over all dates (``date = 'all'``) and per capture date.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from jobs.analyze.windows import WINDOW_STEP, WINDOW_TRACE, analysis_windows
from schemas import FLEET_KERNELS, FLEET_STATS

#: Grouping dimensions of ``fleet_stats`` / ``fleet_kernels`` (``fleet`` = everything together).
DIMENSIONS = ("fleet", "job_name", "job", "model", "hardware", "torch_version")
NONE_VALUE = "(none)"
TOP_KERNELS = 10
_SUMS = (
    "rank_step_time_ns",
    "kernel_time_ns",
    "idle_time_ns",
    "compute_time_ns",
    "exposed_comm_ns",
    "cpu_bound_time_ns",
    "dataloader_time_ns",
)
_GROUP = ["dimension", "value", "date"]


# ------------------------------------------------------------ the reduction: one pandas transform, both executors


def _min(grouped) -> pd.Series:
    """The smallest non-null value per group of a text column, ``None`` when all are null (SQL's ``min``)."""
    return grouped.agg(lambda v: min((x for x in v if x is not None and x == x), default=None))


#: The columns of :func:`run_metadata_frame` after ``job_id, attempt`` (how the fleet stage stores them).
RUN_METADATA_SCHEMA = pa.schema(
    [
        ("job_name", pa.string()),
        ("job", pa.string()),
        ("model", pa.string()),
        ("hardware", pa.string()),
        ("torch_version", pa.string()),
        ("run_key", pa.string()),
        ("run_date", pa.string()),
        ("world_size", pa.int64()),
    ]
)


def run_metadata_frame(captures: pd.DataFrame) -> pd.DataFrame:
    """One row per job run (job_id, attempt) with its grouping values, from its ``ingested`` captures.

    Returns:
        Columns ``job_id, attempt, job_name, job, model, hardware, torch_version, run_key, run_date,
        world_size`` (the largest of its captures'); ``hardware`` is the device name (``cpu`` when no capture
        names an accelerator); ``run_key`` orders the runs of a job name (manifest ``created_at``, else the
        capture date). Reads :data:`RUN_COLUMNS` of ``captures``.
    """
    ing = captures[captures["status"] == "ingested"]
    g = ing.groupby(["job_id", "attempt"], sort=True)
    m = pd.DataFrame(
        {
            "job_name": _min(g["job_name"]),
            "model": _min(g["model"]),
            "device_name": _min(g["device_name"]),
            "torch_version": _min(g["torch_version"]),
            "created_at": _min(g["created_at"]),
            "first_date": _min(g["date"]),
            "world_size": g["world_size"].max() if "world_size" in ing.columns else None,
        }
    ).reset_index()
    return pd.DataFrame(
        {
            "job_id": m["job_id"],
            "attempt": m["attempt"],
            "job_name": m["job_name"].where(m["job_name"].notna(), m["job_id"]),
            "job": m["job_id"].astype(str) + "#" + m["attempt"].astype(str),
            "model": m["model"].where(m["model"].notna(), NONE_VALUE),
            "hardware": m["device_name"].where(m["device_name"].notna(), "cpu"),
            "torch_version": m["torch_version"].where(m["torch_version"].notna(), NONE_VALUE),
            "run_key": m["created_at"].where(m["created_at"].notna(), m["first_date"]),
            "run_date": m["first_date"],
            "world_size": m["world_size"],
        }
    )


#: The ``captures`` columns :func:`run_metadata_frame` reads.
RUN_COLUMNS = (
    "job_id",
    "attempt",
    "status",
    "job_name",
    "model",
    "device_name",
    "torch_version",
    "created_at",
    "date",
    "world_size",
)


def job_step_times(steps: pd.DataFrame) -> pd.Series:
    """The job step time of each (attempt, ProfilerStep N ≥ 0) of one job's ``steps`` rows: the slowest rank's
    ``step_time_ns``, ns (the definition of :func:`job_steps_frame`, ``fleet_stats`` and ``regressions``)."""
    s = steps[steps["step"] >= 0]
    keys = ["attempt", "step"] if "attempt" in s.columns else ["step"]
    return s.groupby(keys, sort=True)["step_time_ns"].max()


#: What :func:`reduce_job_steps` returns (the Spark executor's ``applyInPandas`` schema).
JOB_STEPS_SCHEMA = pa.schema(
    [
        ("job_id", pa.string()),
        ("attempt", pa.int32()),
        ("step", pa.int64()),
        ("date", pa.string()),
        ("step_time_ns", pa.int64()),
        *[(c, pa.int64()) for c in _SUMS],
        ("n_rank_steps", pa.int64()),
        ("ranks", pa.list_(pa.int32())),
        ("window", pa.string()),
    ]
)
#: The ``steps`` columns :func:`reduce_job_steps` reads.
STEP_COLUMNS = (
    "job_id",
    "attempt",
    "step",
    "date",
    "rank",
    "step_time_ns",
    *[c for c in _SUMS if c != "rank_step_time_ns"],
)


def reduce_job_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """``steps`` rows or analysis windows (one row per rank and step, of any number of runs) → one row per job
    step.

    The one reduction both executors run: the local executor on the whole frame, Spark per (job_id, attempt)
    group (``applyInPandas``, :data:`JOB_STEPS_SCHEMA`).

    Args:
        steps: ``steps`` rows, or :func:`jobs.analyze.windows.analysis_windows` rows (with ``window``); rows
            without ``window`` are ProfilerSteps.

    Returns:
        ``job_id, attempt, step, date, step_time_ns`` (max over ranks: the job step time; for a whole-trace
        window the longest rank trace), the rank sums ``rank_step_time_ns, kernel_time_ns, idle_time_ns,
        compute_time_ns, exposed_comm_ns, cpu_bound_time_ns, dataloader_time_ns`` (ns; null when no rank has a
        value), ``n_rank_steps``, ``ranks`` (sorted distinct ranks, int32 arrays), ``window`` (``"step"`` or
        ``"trace"``). ProfilerStep rows with ``step`` < 0 (outside any ProfilerStep) are left out.
    """
    window = steps["window"] if "window" in steps.columns else pd.Series(WINDOW_STEP, index=steps.index)
    trace = (window == WINDOW_TRACE).to_numpy(dtype=bool)
    s = steps.assign(window=window)[trace | (steps["step"] >= 0).to_numpy(dtype=bool)]
    g = s.groupby(["job_id", "attempt", "step"], sort=True)
    return pd.DataFrame(
        {
            "date": g["date"].min(),
            "step_time_ns": g["step_time_ns"].max(),
            "rank_step_time_ns": g["step_time_ns"].sum(min_count=1),
            **{c: g[c].sum(min_count=1) for c in _SUMS if c != "rank_step_time_ns"},
            "n_rank_steps": g.size(),
            "ranks": _sorted_sets(g["rank"], ["job_id", "attempt", "step"]),
            "window": g["window"].first(),
        }
    ).reset_index()[JOB_STEPS_SCHEMA.names]


def profiler_steps(job_steps: pd.DataFrame) -> pd.DataFrame:
    """The ProfilerStep rows of :func:`reduce_job_steps` / :func:`job_steps_frame` rows (whole-trace windows
    left out): what step-based consumers (regressions, per-step kernel deltas) read."""
    if "window" not in job_steps.columns:
        return job_steps
    return job_steps[(job_steps["window"] != WINDOW_TRACE).to_numpy(dtype=bool)]


def job_steps_frame(steps: pd.DataFrame, captures: pd.DataFrame) -> pd.DataFrame:
    """:func:`reduce_job_steps` rows with their run's :func:`run_metadata_frame` columns (inner join)."""
    return reduce_job_steps(steps).merge(run_metadata_frame(captures), on=["job_id", "attempt"], how="inner")


def _sorted_sets(grouped, names: list[str]) -> pd.Series:
    """Sorted distinct non-null values (int32 arrays) per group of ``grouped`` (a SeriesGroupBy on ``names``)."""
    out = {key: np.array(sorted(set(v.dropna().astype(int))), dtype="int32") for key, v in grouped}
    return pd.Series(
        list(out.values()),
        index=pd.MultiIndex.from_tuples(list(out.keys()), names=names) if out else None,
        dtype=object,
    )


#: What :func:`reduce_job_kernels` returns (the Spark executor's ``applyInPandas`` schema).
JOB_KERNELS_SCHEMA = pa.schema(
    [
        ("job_id", pa.string()),
        ("attempt", pa.int32()),
        ("date", pa.string()),
        ("name", pa.string()),
        ("kernel_type", pa.string()),
        ("n", pa.int64()),
        ("total_ns", pa.int64()),
    ]
)


def reduce_job_kernels(kernels: pd.DataFrame) -> pd.DataFrame:
    """``kernels`` (per rank, step, name) → one row per (job run, date, kernel name): ``kernel_type`` (the
    first non-null), ``n`` and ``total_ns`` (sums, ns). Both executors run it, Spark per (job_id, attempt)."""
    g = kernels.groupby(["job_id", "attempt", "date", "name"], sort=True)
    return pd.DataFrame(
        {
            "kernel_type": g["kernel_type"].first(),
            "n": g["n"].sum(min_count=1),
            "total_ns": g["total_ns"].sum(min_count=1),
        }
    ).reset_index()[JOB_KERNELS_SCHEMA.names]


def job_kernels_frame(kernels: pd.DataFrame, captures: pd.DataFrame) -> pd.DataFrame:
    """:func:`reduce_job_kernels` rows with their run's :func:`run_metadata_frame` columns (inner join)."""
    return reduce_job_kernels(kernels).merge(run_metadata_frame(captures), on=["job_id", "attempt"], how="inner")


# ----------------------------------------------------------------------------------------- pandas half


def _stack(df: pd.DataFrame, dimensions=DIMENSIONS, dated: bool = True, overall: bool = True) -> pd.DataFrame:
    """One copy of ``df`` per dimension of ``dimensions`` (``dimension``/``value`` columns), per date (``dated``)
    and for ``all`` dates (``overall``)."""
    parts = []
    for d in dimensions:
        value = "all" if d == "fleet" else df[d].astype(object).where(df[d].notna(), NONE_VALUE).astype(str)
        parts.append(df.assign(dimension=d, value=value))
    stacked = pd.concat(parts, ignore_index=True)
    stacked["date"] = stacked["date"].astype(str)
    return pd.concat([stacked] * dated + [stacked.assign(date="all")] * overall, ignore_index=True)


def _ratio_pct(num: pd.Series, den: pd.Series) -> pd.Series:
    num, den = num.astype("float64"), den.astype("float64")
    return (num / den * 100.0).where(den > 0)


def fleet_stats(
    job_steps: pd.DataFrame, dimensions=DIMENSIONS, dated: bool = True, overall: bool = True
) -> pd.DataFrame:
    """The ``fleet_stats`` table (columns of :data:`schemas.FLEET_STATS`), exact.

    Args:
        job_steps: :func:`job_steps_frame` rows.
        dimensions, dated, overall: the groups made: these dimensions, per date and/or over ``all`` dates (the
            fleet stage makes the ``all`` rows of the wide dimensions from per-run-date partials instead:
            :mod:`jobs.fleet.partials`).

    Returns:
        One row per (dimension, value, date), sorted; empty when ``job_steps`` is.
    """
    if job_steps is None or not len(job_steps):
        return pd.DataFrame(columns=FLEET_STATS.names)
    js = step_values(job_steps)
    st = _stack(js, dimensions, dated, overall)
    g = st.groupby(_GROUP, sort=True)
    qs = g["_step_ns"].quantile([0.5, 0.9, 0.99]).unstack()
    pairs = st[_GROUP + ["job_id", "attempt"]].drop_duplicates()  # (group, run)
    out = pd.DataFrame(
        {
            "n_runs": pairs.groupby(_GROUP, sort=True).size(),
            "n_steps": g["_is_step"].sum(),
            "n_rank_steps": g["n_rank_steps"].sum(),
            "step_time_p50_ns": qs[0.5].round(),
            "step_time_p90_ns": qs[0.9].round(),
            "step_time_p99_ns": qs[0.99].round(),
            "step_time_mean_ns": g["_step_ns"].mean(),
            **{c: g[c].sum(min_count=1) for c in _SUMS},
        }
    )
    out["n_ranks"] = _group_ranks(js, pairs).reindex(out.index).fillna(0)
    return stats_columns(out.reset_index())


def step_values(job_steps: pd.DataFrame) -> pd.DataFrame:
    """``job_steps`` with the sums as float64 (null → 0, but ``kernel_time_ns`` stays null), ``_step_ns`` (the
    job step time of a ProfilerStep, null for a whole-trace window: no step) and ``_is_step`` (1 or 0): what
    :func:`fleet_stats` and :func:`jobs.fleet.partials.stats_partials` group."""
    js = job_steps.copy()
    for c in _SUMS:
        js[c] = js[c].astype("float64").fillna(0.0) if c != "kernel_time_ns" else js[c].astype("float64")
    is_step = (js["window"] != WINDOW_TRACE).to_numpy(dtype=bool) if "window" in js.columns else np.ones(len(js), bool)
    # a whole-trace window is no step: out of the step-time statistics and n_steps, in every sum and count
    js["_step_ns"] = js["step_time_ns"].astype("float64").where(is_step)
    js["_is_step"] = is_step.astype("int64")
    return js


def stats_columns(out: pd.DataFrame) -> pd.DataFrame:
    """``fleet_stats`` rows from the group columns, counts, step-time statistics and sums: the percentages added
    (HTA temporal breakdown, time-weighted), typed as :data:`schemas.FLEET_STATS`."""
    out = out.copy()
    out["idle_pct"] = _ratio_pct(out["idle_time_ns"], out["kernel_time_ns"])
    out["compute_pct"] = _ratio_pct(out["compute_time_ns"], out["kernel_time_ns"])
    for col, num in (
        ("exposed_comm_pct", "exposed_comm_ns"),
        ("cpu_bound_pct", "cpu_bound_time_ns"),
        ("dataloader_pct", "dataloader_time_ns"),
    ):
        out[col] = _ratio_pct(out[num], out["rank_step_time_ns"])
    return _typed(out, FLEET_STATS)


def _group_ranks(js: pd.DataFrame, pairs: pd.DataFrame) -> pd.Series:
    """Distinct (run, rank) per group: a run's distinct ranks on the group's date (on every date for ``all``),
    summed over the group's runs (the pairs of different runs never coincide). ``pairs``: distinct (group, run)."""
    run = ["job_id", "attempt"]
    ranks = _exploded_ranks(js)
    per_day = ranks.drop_duplicates().groupby([*run, "date"]).size().rename("n").reset_index()
    per_run = run_ranks(js, ranks).rename("n").reset_index()
    dated = pairs[pairs["date"] != "all"].merge(per_day, on=[*run, "date"], how="inner")
    every = pairs[pairs["date"] == "all"].merge(per_run, on=run, how="inner")
    return pd.concat([dated, every], ignore_index=True).groupby(_GROUP)["n"].sum()


def _exploded_ranks(js: pd.DataFrame) -> pd.DataFrame:
    """One row per (run, date, rank) entry of the job steps' ``ranks`` lists (int64 ranks, text dates)."""
    ranks = js[["job_id", "attempt", "date", "ranks"]].explode("ranks").dropna(subset=["ranks"])
    return ranks.assign(date=ranks["date"].astype(str), ranks=ranks["ranks"].astype("int64"))


def run_ranks(js: pd.DataFrame, exploded: pd.DataFrame | None = None) -> pd.Series:
    """Distinct ranks of each run (job_id, attempt) over all its dates, from job steps' ``ranks`` lists."""
    ranks = _exploded_ranks(js) if exploded is None else exploded
    return ranks.drop_duplicates(["job_id", "attempt", "ranks"]).groupby(["job_id", "attempt"]).size()


def fleet_kernels(
    job_kernels: pd.DataFrame, top: int = TOP_KERNELS, dimensions=DIMENSIONS, dated: bool = True, overall: bool = True
) -> pd.DataFrame:
    """The ``fleet_kernels`` table: the ``top`` kernels by total time per (dimension, value, date).

    Args:
        job_kernels: :func:`job_kernels_frame` rows.
        top: kernels kept per group.
        dimensions, dated, overall: the groups made (as :func:`fleet_stats`).

    Returns:
        Columns of :data:`schemas.FLEET_KERNELS`; ties in total time are broken by name.
    """
    if job_kernels is None or not len(job_kernels):
        return pd.DataFrame(columns=FLEET_KERNELS.names)
    st = _stack(job_kernels, dimensions, dated, overall)
    per = (
        st.groupby(_GROUP + ["name"], sort=False)
        .agg(
            kernel_type=("kernel_type", "first"),
            n=("n", "sum"),
            total_ns=("total_ns", "sum"),
            n_runs=("job", "nunique"),
        )
        .reset_index()
    )
    return top_kernels(per, top)


def top_kernels(per: pd.DataFrame, top: int = TOP_KERNELS) -> pd.DataFrame:
    """``fleet_kernels`` rows from one row per (dimension, value, date, name) with ``kernel_type, n, total_ns,
    n_runs``: each group's ``top`` kernels by total time (ties by name), ranked, with their share of the group's
    kernel time (%)."""
    per = per.sort_values(_GROUP + ["total_ns", "name"], ascending=[True, True, True, False, True], kind="stable")
    per["kernel_rank"] = per.groupby(_GROUP).cumcount() + 1
    tot = per.groupby(_GROUP)["total_ns"].transform("sum").astype("float64")
    per["share_pct"] = (per["total_ns"].astype("float64") / tot * 100.0).where(tot > 0)
    return _typed(per[per["kernel_rank"] <= top], FLEET_KERNELS)


def _typed(df: pd.DataFrame, table) -> pd.DataFrame:
    """``df`` with exactly ``table``'s columns, integer columns as nullable ints."""
    out = pd.DataFrame({c.name: df[c.name].to_numpy() for c in table.columns})
    for c in table.columns:
        if pa.types.is_integer(c.type):
            out[c.name] = pd.array(np.asarray(out[c.name], dtype="float64").round(), dtype="Int64")
        elif pa.types.is_floating(c.type):
            out[c.name] = out[c.name].astype("float64")
    return out.reset_index(drop=True)


def run_summary(steps: pd.DataFrame, ranks: pd.DataFrame | None, captures: pd.DataFrame) -> pd.DataFrame:
    """The headline numbers of each job run: its ``fleet_stats`` row of dimension ``job`` and date ``all``.

    The one definition the job report, MLflow, ``tracelake run``, ``compare`` and MCP show (the fleet report reads
    the same rows from the ``fleet_stats`` table): job step time p50/p90/p99 (slowest rank per ProfilerStep, ns),
    GPU idle/compute % (Σ over the run's analysis windows, HTA temporal breakdown, time-weighted), exposed
    communication, CPU-bound and data-loader % of rank step time, runs/ranks/steps counts.

    Args:
        steps, ranks, captures: the runs' ``steps``, ``ranks`` and ``captures`` rows (ranks may be None).

    Returns:
        ``fleet_stats`` columns plus ``job_id`` and ``attempt``, one row per run with analysis windows.
    """
    windows = analysis_windows(steps, ranks, captures)
    if not len(windows):
        return pd.DataFrame(columns=[*FLEET_STATS.names, "job_id", "attempt"])
    st = fleet_stats(job_steps_frame(windows, captures), ("job",), dated=False)  # the job rows of date all only
    out = st.copy()
    parts = out["value"].astype(str).str.rsplit("#", n=1)
    out["job_id"] = parts.str[0]
    out["attempt"] = pd.array(parts.str[1].astype(int), dtype="Int32")
    return out.reset_index(drop=True)
