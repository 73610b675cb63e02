"""Fleet-wide statistics: the per-step metrics of every job grouped by job, job name, model tag,
hardware, torch version and date (``fleet_stats``), and the top kernels of each group
(``fleet_kernels``).

Two halves: Spark reduces the big tables to one row per job step (:func:`job_steps`) and one row per
(job run, date, kernel name) (:func:`job_kernels`) — the shape that scales with the fleet; on the local
executor pandas does the same (:func:`job_steps_frame`, :func:`job_kernels_frame`) —, then pure
pandas functions group those small frames (:func:`fleet_stats`, :func:`fleet_kernels`) on the driver: a
fleet of 10,000 runs × 100 steps is 10⁶ job-step rows, and a handful of Spark jobs instead of one per
grouping keeps the stage at seconds.

Definitions (column docs in ``schemas/tables.py``):

* **job step time**: per (job_id, attempt, step) the slowest rank's ``ProfilerStep`` duration — the
  time the job as a whole spent on the step (a synchronous-training step is as long as its slowest
  rank). p50/p90/p99 are exact percentiles (numpy, linear interpolation between closest ranks),
  rounded to whole ns.
* **idle % / compute %**: HTA temporal breakdown (``idle_time_pctg``, ``compute_time_pctg``) made
  time-weighted over the group: Σ idle_time_ns / Σ kernel_time_ns × 100 over every rank-step, so a
  long step weighs more than a short one (a plain mean of per-step percentages would not).
* **exposed communication %**: Σ exposed_comm_ns / Σ step_time_ns × 100 over rank-steps (share of wall
  step time spent in communication that no computation overlaps), likewise CPU-bound % and data-loader %.

Groups: each ``dimension`` (:data:`DIMENSIONS`) over all dates (``date = 'all'``) and per capture date.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

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


# ------------------------------------------------------------------------------------------ Spark half


def run_metadata(captures):
    """One row per job run (job_id, attempt) with its grouping values (Spark).

    Args:
        captures: the ``captures`` table (only ``ingested`` rows are used).

    Returns:
        Columns ``job_id, attempt, job_name, job, model, hardware, torch_version, run_key, run_date,
        world_size`` (the largest of its captures');
        ``hardware`` is the device name (``cpu`` when no capture names an accelerator); ``run_key``
        orders the runs of a job name (manifest ``created_at``, else the capture date).
    """
    from pyspark.sql import functions as F  # heavy: pyspark

    ing = captures.filter(F.col("status") == "ingested")
    return (
        ing.groupBy("job_id", "attempt")
        .agg(
            F.min("job_name").alias("job_name"),
            F.min("model").alias("model"),
            F.min("device_name").alias("device_name"),
            F.min("torch_version").alias("torch_version"),
            F.min("created_at").alias("created_at"),
            F.min("date").alias("first_date"),
            F.max("world_size").alias("world_size"),
        )
        .select(
            "job_id",
            "attempt",
            F.coalesce("job_name", "job_id").alias("job_name"),
            F.concat_ws("#", "job_id", F.col("attempt").cast("string")).alias("job"),
            F.coalesce("model", F.lit(NONE_VALUE)).alias("model"),
            F.coalesce("device_name", F.lit("cpu")).alias("hardware"),
            F.coalesce("torch_version", F.lit(NONE_VALUE)).alias("torch_version"),
            F.coalesce("created_at", "first_date").alias("run_key"),
            F.col("first_date").alias("run_date"),
            "world_size",
        )
    )


def job_steps(steps, captures):
    """``steps`` (one row per rank and step) → one row per job step, with the run's grouping values (Spark).

    Returns:
        ``job_id, attempt, step, date, step_time_ns`` (max over ranks), the rank sums
        ``rank_step_time_ns, kernel_time_ns, idle_time_ns, compute_time_ns, exposed_comm_ns,
        cpu_bound_time_ns, dataloader_time_ns`` (ns), ``n_rank_steps``, ``ranks`` (array of ranks) and the
        :func:`run_metadata` columns. Steps outside any ProfilerStep (``step`` < 0) are left out.
    """
    from pyspark.sql import functions as F  # heavy: pyspark

    s = steps.filter(F.col("step") >= 0)
    js = s.groupBy("job_id", "attempt", "step").agg(
        F.min("date").alias("date"),
        F.max("step_time_ns").alias("step_time_ns"),
        F.sum("step_time_ns").alias("rank_step_time_ns"),
        *[F.sum(c).alias(c) for c in _SUMS if c != "rank_step_time_ns"],
        F.count(F.lit(1)).alias("n_rank_steps"),
        F.sort_array(F.collect_set("rank")).alias("ranks"),
    )
    return js.join(run_metadata(captures), on=["job_id", "attempt"], how="inner")


def job_kernels(kernels, captures):
    """``kernels`` (per rank, step, name) → one row per (job run, date, kernel name) with the run's
    grouping values (Spark): ``n``, ``total_ns``, ``kernel_type``."""
    from pyspark.sql import functions as F  # heavy: pyspark

    k = kernels.groupBy("job_id", "attempt", "date", "name").agg(
        F.first("kernel_type", ignorenulls=True).alias("kernel_type"),
        F.sum("n").alias("n"),
        F.sum("total_ns").alias("total_ns"),
    )
    return k.join(run_metadata(captures), on=["job_id", "attempt"], how="inner")


# ------------------------------------------------------------------ the same reduction in pandas (local executor)


def _min(grouped) -> pd.Series:
    """Spark's ``min`` per group of a text column: the smallest non-null value, ``None`` when all are null."""
    return grouped.agg(lambda v: min((x for x in v if x is not None and x == x), default=None))


def run_metadata_frame(captures: pd.DataFrame) -> pd.DataFrame:
    """:func:`run_metadata` on a pandas ``captures`` frame (the local executor's reduction; same rows)."""
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


def job_step_times(steps: pd.DataFrame) -> pd.Series:
    """The job step time of each (attempt, ProfilerStep N ≥ 0) of one job's ``steps`` rows: the slowest rank's
    ``step_time_ns``, ns (the definition of :func:`job_steps`, ``fleet_stats`` and ``regressions``)."""
    s = steps[steps["step"] >= 0]
    keys = ["attempt", "step"] if "attempt" in s.columns else ["step"]
    return s.groupby(keys, sort=True)["step_time_ns"].max()


def job_steps_frame(steps: pd.DataFrame, captures: pd.DataFrame) -> pd.DataFrame:
    """:func:`job_steps` on pandas frames (the local executor's reduction; same rows and columns)."""
    s = steps[steps["step"] >= 0]
    g = s.groupby(["job_id", "attempt", "step"], sort=True)
    js = pd.DataFrame(
        {
            "date": g["date"].min(),
            "step_time_ns": g["step_time_ns"].max(),
            "rank_step_time_ns": g["step_time_ns"].sum(min_count=1),
            **{c: g[c].sum(min_count=1) for c in _SUMS if c != "rank_step_time_ns"},
            "n_rank_steps": g.size(),
            "ranks": _sorted_sets(g["rank"], ["job_id", "attempt", "step"]),
        }
    ).reset_index()
    return js.merge(run_metadata_frame(captures), on=["job_id", "attempt"], how="inner")


def _sorted_sets(grouped, names: list[str]) -> pd.Series:
    """Spark's ``sort_array(collect_set(col))`` per group of ``grouped`` (a SeriesGroupBy on ``names``):
    sorted distinct non-null values (int32 arrays)."""
    out = {key: np.array(sorted(set(v.dropna().astype(int))), dtype="int32") for key, v in grouped}
    return pd.Series(
        list(out.values()),
        index=pd.MultiIndex.from_tuples(list(out.keys()), names=names) if out else None,
        dtype=object,
    )


def job_kernels_frame(kernels: pd.DataFrame, captures: pd.DataFrame) -> pd.DataFrame:
    """:func:`job_kernels` on pandas frames (the local executor's reduction; same rows and columns)."""
    g = kernels.groupby(["job_id", "attempt", "date", "name"], sort=True)
    k = pd.DataFrame(
        {
            "kernel_type": g["kernel_type"].first(),
            "n": g["n"].sum(min_count=1),
            "total_ns": g["total_ns"].sum(min_count=1),
        }
    ).reset_index()
    return k.merge(run_metadata_frame(captures), on=["job_id", "attempt"], how="inner")


# ----------------------------------------------------------------------------------------- pandas half


def _stack(df: pd.DataFrame) -> pd.DataFrame:
    """One copy of ``df`` per dimension (``dimension``/``value`` columns), per date and for ``all`` dates."""
    parts = []
    for d in DIMENSIONS:
        value = "all" if d == "fleet" else df[d].astype(object).where(df[d].notna(), NONE_VALUE).astype(str)
        parts.append(df.assign(dimension=d, value=value))
    stacked = pd.concat(parts, ignore_index=True)
    stacked["date"] = stacked["date"].astype(str)
    return pd.concat([stacked, stacked.assign(date="all")], ignore_index=True)


def _ratio_pct(num: pd.Series, den: pd.Series) -> pd.Series:
    num, den = num.astype("float64"), den.astype("float64")
    return (num / den * 100.0).where(den > 0)


def fleet_stats(job_steps: pd.DataFrame) -> pd.DataFrame:
    """The ``fleet_stats`` table (columns of :data:`schemas.FLEET_STATS`).

    Args:
        job_steps: :func:`job_steps` rows as pandas.

    Returns:
        One row per (dimension, value, date), sorted; empty when ``job_steps`` is.
    """
    if job_steps is None or not len(job_steps):
        return pd.DataFrame(columns=FLEET_STATS.names)
    js = job_steps.copy()
    for c in _SUMS:
        js[c] = js[c].astype("float64").fillna(0.0) if c != "kernel_time_ns" else js[c].astype("float64")
    st = _stack(js)
    g = st.groupby(_GROUP, sort=True)
    qs = g["step_time_ns"].quantile([0.5, 0.9, 0.99]).unstack()
    out = pd.DataFrame(
        {
            "n_runs": g[["job_id", "attempt"]].apply(lambda f: len(f.drop_duplicates())),
            "n_steps": g.size(),
            "n_rank_steps": g["n_rank_steps"].sum(),
            "step_time_p50_ns": qs[0.5].round(),
            "step_time_p90_ns": qs[0.9].round(),
            "step_time_p99_ns": qs[0.99].round(),
            "step_time_mean_ns": g["step_time_ns"].mean(),
            **{c: g[c].sum(min_count=1) for c in _SUMS},
        }
    )
    ranks = st[_GROUP + ["job_id", "attempt", "ranks"]].explode("ranks").dropna(subset=["ranks"])
    out["n_ranks"] = ranks.drop_duplicates().groupby(_GROUP).size().reindex(out.index).fillna(0)
    out = out.reset_index()
    out["idle_pct"] = _ratio_pct(out["idle_time_ns"], out["kernel_time_ns"])
    out["compute_pct"] = _ratio_pct(out["compute_time_ns"], out["kernel_time_ns"])
    for col, num in (
        ("exposed_comm_pct", "exposed_comm_ns"),
        ("cpu_bound_pct", "cpu_bound_time_ns"),
        ("dataloader_pct", "dataloader_time_ns"),
    ):
        out[col] = _ratio_pct(out[num], out["rank_step_time_ns"])
    return _typed(out, FLEET_STATS)


def fleet_kernels(job_kernels: pd.DataFrame, top: int = TOP_KERNELS) -> pd.DataFrame:
    """The ``fleet_kernels`` table: the ``top`` kernels by total time per (dimension, value, date).

    Args:
        job_kernels: :func:`job_kernels` rows as pandas.
        top: kernels kept per group.

    Returns:
        Columns of :data:`schemas.FLEET_KERNELS`; ties in total time are broken by name.
    """
    if job_kernels is None or not len(job_kernels):
        return pd.DataFrame(columns=FLEET_KERNELS.names)
    st = _stack(job_kernels)
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
