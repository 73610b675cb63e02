"""Compare two jobs (or two MLflow job runs): ``tracelake compare <A> <B>``.

In the spirit of HTA's ``TraceDiff.compare_traces`` (per-op counts and durations of a control and a
test trace, ops added and deleted), but for whole multi-rank jobs:

* **metric deltas**: every metric of :func:`jobs.publish.tracking.job_metrics` (the MLflow names; the headline
  numbers are :func:`jobs.fleet.stats.run_summary`'s, as in the job report, MLflow, ``tracelake run`` and MCP) on
  both jobs, plus ``n_events`` and ``n_quarantined``; Δ = B − A. Each metric is shown with its label in words
  (:data:`jobs.publish.headline.METRIC_LABELS`).
* **kernels and ops**: from ``events`` (``ph`` X with a duration), per name: kernels = device activity
  (``is_gpu``, not the ``gpu_user_annotation`` spans nor ``cuda_sync`` records), ops = host ``cpu_op``
  events (not ``ProfilerStep#N``). Time per step is **per rank**: Σ duration ÷ the rank's steps, then the
  mean over ranks (``*_ns_per_step``: Σ over ranks ÷ Σ steps over ranks; a rank without the name counts 0)
  and the max over ranks (``*_max_rank_ns_per_step``). Only events inside a ProfilerStep count when the
  job has steps (warm-up and tail excluded); a job without steps is compared per trace. Status:
  ``added`` (only in B), ``removed`` (only in A), ``slower``/``faster`` (|Δ mean per step| ≥ both
  ``min_rel`` × A and ``min_abs_ns``), else ``unchanged``.
* **findings**: by ``finding_id`` (rule + scope): ``appeared`` in B, ``cleared`` in B, ``persisting``.

:func:`compare_jobs` is pure (pandas in, :class:`Comparison` out); :func:`compare_command` is the
CLI (reads the warehouse with Spark, prints tables, logs a comparison run with its HTML report).
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from dataclasses import dataclass, field
from typing import Annotated

import numpy as np
import pandas as pd
import typer
from rich.console import Console
from rich.markup import escape  # names, labels and titles come from traces: text, never console markup
from rich.table import Table

from jobs.publish.headline import METRIC_LABELS
from jobs.publish.report.blocks import fmt_ms, fmt_num, fmt_smart
from jobs.publish.report.html import render_comparison_report
from jobs.publish.reports import COMPARE_EXPERIMENT, load_job_tables
from jobs.publish.tracking import default_tracking_uri, experiment_id, job_metrics
from jobs.spark import get_spark
from jobs.warehouse import read_spark

OPS_COLUMNS = [
    "group",
    "name",
    "status",
    "a_n",
    "b_n",
    "a_total_ns",
    "b_total_ns",
    "a_n_per_step",
    "b_n_per_step",
    "a_ns_per_step",
    "b_ns_per_step",
    "a_max_rank_ns_per_step",
    "b_max_rank_ns_per_step",
    "delta_ns_per_step",
    "delta_pct",
]
#: Device rows that are not activity of their own: annotation spans over other activity, sync records.
NOT_KERNEL_CATEGORIES = ("gpu_user_annotation", "cuda_sync")
#: Host rows named like this are the step annotations themselves, not ops.
STEP_PREFIX = "ProfilerStep#"
_RUN_ID = re.compile(r"^[0-9a-f]{32}$")


@dataclass
class Comparison:
    """Result of :func:`compare_jobs`.

    Attributes:
        metrics: metric, a, b, delta (b − a), delta_pct (Δ / |a| × 100).
        ops: one row per (group, name) in either job, columns :data:`OPS_COLUMNS`
            (``group``: ``kernel`` or ``op``; ``*_n_per_step``, ``*_ns_per_step``: per rank and step, mean
            over ranks; ``*_max_rank_ns_per_step``: the max over ranks; ns).
        findings: finding_id, rule, title, status (appeared/cleared/persisting), a_est_ns, b_est_ns;
            ``None`` when neither job has findings.
        a_steps, b_steps: steps per rank used to normalize (1 when a job has no ProfilerStep).
        a_ranks, b_ranks: ranks with events.
        notes: how the numbers were computed, caveats (e.g. "job A has no ProfilerStep").
    """

    a_label: str
    b_label: str
    metrics: pd.DataFrame
    ops: pd.DataFrame
    findings: pd.DataFrame | None
    a_steps: float
    b_steps: float
    a_ranks: int
    b_ranks: int
    min_rel: float = 0.05
    min_abs_ns: float = 1000.0
    notes: list[str] = field(default_factory=list)

    def _ops(self, status: str) -> pd.DataFrame:
        d = self.ops[self.ops["status"] == status]
        return d.reindex(d["delta_ns_per_step"].abs().sort_values(ascending=False).index)

    def added(self) -> pd.DataFrame:
        """Kernels/ops only in B, largest per-step time first."""
        return self._ops("added")

    def removed(self) -> pd.DataFrame:
        """Kernels/ops only in A."""
        return self._ops("removed")

    def slower(self) -> pd.DataFrame:
        """Kernels/ops in both that take more time per step in B."""
        return self._ops("slower")

    def faster(self) -> pd.DataFrame:
        """Kernels/ops in both that take less time per step in B."""
        return self._ops("faster")

    def summary_metrics(self) -> dict[str, float]:
        """Stable MLflow metrics of the comparison run: ``compare/n_added``, ``compare/n_removed``,
        ``compare/n_slower``, ``compare/n_faster``, ``compare/findings_appeared``,
        ``compare/findings_cleared``, and ``delta/<job metric>`` for every metric on both sides."""
        counts = self.ops["status"].value_counts()
        m = {f"compare/n_{s}": float(counts.get(s, 0)) for s in ("added", "removed", "slower", "faster")}
        fc = self.findings["status"].value_counts() if self.findings is not None else {}
        m["compare/findings_appeared"] = float(fc.get("appeared", 0))
        m["compare/findings_cleared"] = float(fc.get("cleared", 0))
        for r in self.metrics.itertuples():
            if pd.notna(r.delta):
                m[f"delta/{r.metric}"] = float(r.delta)
        return m


def _frame(tables: dict, name: str) -> pd.DataFrame | None:
    df = tables.get(name)
    return df if isinstance(df, pd.DataFrame) and len(df) else None


def op_summary(events: pd.DataFrame) -> pd.DataFrame:
    """Per (group, name): ``n``, ``total_ns`` (Σ dur over ranks), ``max_rank_ns_per_step`` (max over
    ranks of the rank's Σ dur ÷ its steps), with ``n_ranks``, ``n_steps`` (distinct (rank, step); the
    ranks when the job has no steps) and ``has_steps`` on every row.

    ``events``: rows of one job with at least ``rank``, ``name``, ``dur_ns``, ``is_gpu``,
    ``category``, ``ph``, ``step``. Events inside a ProfilerStep only, when the job has any.
    """
    e = events[(events["ph"] == "X") & events["dur_ns"].notna()]
    has_steps = bool(e["step"].notna().any()) if "step" in e.columns else False
    if has_steps:
        e = e[e["step"].notna()]
    n_ranks = int(events["rank"].nunique())
    rank_steps = (
        e[["rank", "step"]].drop_duplicates().groupby("rank").size()
        if has_steps
        else pd.Series(1, index=pd.Index(events["rank"].unique(), name="rank"))
    )
    kernel = e["is_gpu"].fillna(False).astype(bool) & ~e["category"].isin(NOT_KERNEL_CATEGORIES)
    op = (e["category"] == "cpu_op") & ~e["name"].astype(str).str.startswith(STEP_PREFIX)
    e = e.assign(group=np.where(kernel, "kernel", np.where(op, "op", None)))
    e = e[e["group"].notna()]
    per_rank = (
        e.assign(dur_ns=pd.to_numeric(e["dur_ns"]).astype("int64"))
        .groupby(["group", "name", "rank"], dropna=False)
        .agg(n=("dur_ns", "size"), total_ns=("dur_ns", "sum"))
        .reset_index()
    )
    per_rank["ns_per_step"] = per_rank["total_ns"] / per_rank["rank"].map(rank_steps).astype(float)
    g = (
        per_rank.groupby(["group", "name"], dropna=False)
        .agg(n=("n", "sum"), total_ns=("total_ns", "sum"), max_rank_ns_per_step=("ns_per_step", "max"))
        .reset_index()
    )
    return g.assign(n_ranks=n_ranks, n_steps=int(rank_steps.sum()), has_steps=has_steps)


def op_summary_spark(events_sdf) -> pd.DataFrame:
    """:func:`op_summary` computed by Spark on one job's ``events`` (only the small result is collected)."""
    from pyspark.sql import functions as F  # heavy: pyspark

    e = events_sdf.filter((F.col("ph") == "X") & F.col("dur_ns").isNotNull())
    has_steps = e.filter(F.col("step").isNotNull()).limit(1).count() > 0
    if has_steps:
        e = e.filter(F.col("step").isNotNull())
        rank_steps = e.select("rank", "step").distinct().groupBy("rank").agg(F.count(F.lit(1)).alias("rank_steps"))
    else:
        rank_steps = events_sdf.select("rank").distinct().withColumn("rank_steps", F.lit(1))
    n_ranks = events_sdf.select("rank").distinct().count()
    n_steps = rank_steps.agg(F.sum("rank_steps")).collect()[0][0] or 0
    kernel = F.coalesce(F.col("is_gpu"), F.lit(False)) & ~F.col("category").isin(*NOT_KERNEL_CATEGORIES)
    op = (F.col("category") == "cpu_op") & ~F.col("name").startswith(STEP_PREFIX)
    grp = F.when(kernel, F.lit("kernel")).when(op, F.lit("op"))
    g = (
        e.withColumn("group", grp)
        .filter(F.col("group").isNotNull())
        .groupBy("group", "name", "rank")
        .agg(F.count(F.lit(1)).alias("n"), F.sum("dur_ns").alias("total_ns"))
        .join(F.broadcast(rank_steps), "rank")
        .groupBy("group", "name")
        .agg(
            F.sum("n").alias("n"),
            F.sum("total_ns").alias("total_ns"),
            F.max(F.col("total_ns") / F.col("rank_steps")).alias("max_rank_ns_per_step"),
        )
        .toPandas()
    )
    return g.assign(n_ranks=n_ranks, n_steps=int(n_steps), has_steps=has_steps)


def _summary(tables: dict) -> pd.DataFrame | None:
    s = _frame(tables, "op_summary")
    if s is not None:
        return s
    ev = _frame(tables, "events")
    return op_summary(ev) if ev is not None else None


def _metrics(tables: dict) -> dict[str, float]:
    ranks, steps, caps = _frame(tables, "ranks"), _frame(tables, "steps"), _frame(tables, "captures")
    m: dict[str, float] = {}
    if ranks is not None:
        m = job_metrics(ranks, steps if steps is not None else pd.DataFrame(columns=["rank", "step_time_ns"]), caps)
    if caps is not None:
        m["n_events"] = float(pd.to_numeric(caps.loc[caps["status"] == "ingested", "n_events"]).sum())
        m["n_quarantined"] = float((caps["status"] == "quarantined").sum())
    return m


def _metric_deltas(a: dict, b: dict) -> pd.DataFrame:
    def order(k: str):
        return (k.startswith("rank/"), int(k.split("/")[1]) if k.startswith("rank/") else 0, k)

    rows = []
    for k in sorted(set(a) | set(b), key=order):
        va, vb = a.get(k, np.nan), b.get(k, np.nan)
        d = vb - va
        rows.append(
            {
                "metric": k,
                "label": METRIC_LABELS.get(k, ""),
                "a": va,
                "b": vb,
                "delta": d,
                "delta_pct": d / abs(va) * 100 if va == va and va != 0 and d == d else np.nan,
            }
        )
    return pd.DataFrame(rows, columns=["metric", "label", "a", "b", "delta", "delta_pct"])


def _ops(sa: pd.DataFrame | None, sb: pd.DataFrame | None, min_rel: float, min_abs_ns: float):
    def side(s):
        """(steps per rank, ranks, has steps, rank-steps: the divisor of the mean per rank and step)."""
        if s is None or not len(s):
            return 1.0, 0, False, 1.0
        n_ranks, n_steps, has = (
            max(int(s["n_ranks"].iloc[0]), 1),
            float(s["n_steps"].iloc[0]),
            bool(s["has_steps"].iloc[0]),
        )
        return n_steps / n_ranks, n_ranks, has, max(n_steps, 1.0)

    (a_steps, a_ranks, a_has, a_div), (b_steps, b_ranks, b_has, b_div) = side(sa), side(sb)
    cols = ["group", "name", "n", "total_ns", "max_rank_ns_per_step"]
    empty = pd.DataFrame(columns=cols)
    a = (sa if sa is not None else empty).reindex(columns=cols)
    b = (sb if sb is not None else empty).reindex(columns=cols)
    m = a.merge(b, on=["group", "name"], how="outer", suffixes=("_a", "_b"))
    m = m.rename(
        columns={
            "n_a": "a_n",
            "n_b": "b_n",
            "total_ns_a": "a_total_ns",
            "total_ns_b": "b_total_ns",
            "max_rank_ns_per_step_a": "a_max_rank_ns_per_step",
            "max_rank_ns_per_step_b": "b_max_rank_ns_per_step",
        }
    )
    for c in ("a_n", "b_n", "a_total_ns", "b_total_ns"):
        m[c] = pd.to_numeric(m[c]).fillna(0).astype("int64")
    for c in ("a_max_rank_ns_per_step", "b_max_rank_ns_per_step"):
        m[c] = pd.to_numeric(m[c]).astype(float).fillna(0.0)
    m["a_n_per_step"] = m["a_n"] / a_div
    m["b_n_per_step"] = m["b_n"] / b_div
    m["a_ns_per_step"] = m["a_total_ns"] / a_div
    m["b_ns_per_step"] = m["b_total_ns"] / b_div
    m["delta_ns_per_step"] = m["b_ns_per_step"] - m["a_ns_per_step"]
    m["delta_pct"] = np.where(
        m["a_ns_per_step"] > 0, m["delta_ns_per_step"] / m["a_ns_per_step"].where(m["a_ns_per_step"] > 0) * 100, np.nan
    )
    threshold = np.maximum(min_rel * m["a_ns_per_step"], min_abs_ns)
    m["status"] = np.select(
        [
            (m["a_n"] == 0) & (m["b_n"] > 0),
            (m["a_n"] > 0) & (m["b_n"] == 0),
            m["delta_ns_per_step"] >= threshold,
            m["delta_ns_per_step"] <= -threshold,
        ],
        ["added", "removed", "slower", "faster"],
        default="unchanged",
    )
    m = m.sort_values(["group", "name"], kind="stable").reset_index(drop=True)
    return m[OPS_COLUMNS], (a_steps, a_ranks, a_has), (b_steps, b_ranks, b_has)


def _findings(fa: pd.DataFrame | None, fb: pd.DataFrame | None) -> pd.DataFrame | None:
    if fa is None and fb is None:
        return None
    cols = ["finding_id", "rule", "title", "est_time_lost_per_step_ns"]
    a = (fa if fa is not None else pd.DataFrame(columns=cols)).reindex(columns=cols)
    b = (fb if fb is not None else pd.DataFrame(columns=cols)).reindex(columns=cols)
    m = a.merge(b, on="finding_id", how="outer", suffixes=("_a", "_b"), indicator=True)
    status = m["_merge"].map({"left_only": "cleared", "right_only": "appeared", "both": "persisting"}).astype(str)
    return (
        pd.DataFrame(
            {
                "finding_id": m["finding_id"],
                "rule": m["rule_b"].fillna(m["rule_a"]),
                "title": m["title_b"].fillna(m["title_a"]),
                "status": status,
                "a_est_ns": pd.to_numeric(m["est_time_lost_per_step_ns_a"]),
                "b_est_ns": pd.to_numeric(m["est_time_lost_per_step_ns_b"]),
            }
        )
        .sort_values(["status", "finding_id"])
        .reset_index(drop=True)
    )


def compare_jobs(
    a_tables: dict,
    b_tables: dict,
    a_label: str = "A",
    b_label: str = "B",
    min_rel: float = 0.05,
    min_abs_ns: float = 1000.0,
) -> Comparison:
    """Compare job B against job A (pure).

    Args:
        a_tables, b_tables: ``{table: pandas DataFrame}`` of each job: ``ranks``, ``steps``,
            ``captures``, ``findings`` (each optional) and either ``events`` or a precomputed
            ``op_summary`` (:func:`op_summary` / :func:`op_summary_spark`).
        a_label, b_label: names shown in the report (job ids or run ids).
        min_rel: relative change (of A's per-step time) a kernel/op needs to count as slower/faster.
        min_abs_ns: absolute change per step, ns, it needs too (filters noise on tiny ops).

    Returns:
        :class:`Comparison`.
    """
    ops, (a_steps, a_ranks, a_has), (b_steps, b_ranks, b_has) = _ops(
        _summary(a_tables), _summary(b_tables), min_rel, min_abs_ns
    )
    notes = [
        "kernels = device activity (events.is_gpu, not gpu_user_annotation spans), ops = host cpu_op "
        "events (not ProfilerStep#N); X events with a duration.",
        f"ms/step = per rank and ProfilerStep, mean over ranks (max rank: the slowest rank's); "
        f"A: {a_steps:g} step(s)/rank over {a_ranks} rank(s), B: {b_steps:g} step(s)/rank over {b_ranks} rank(s).",
        f"slower/faster: |Δ mean ms/step| ≥ max({min_rel:g} × A, {min_abs_ns / 1e3:g} µs).",
    ]
    for label, has, n in ((a_label, a_has, a_ranks), (b_label, b_has, b_ranks)):
        if n and not has:
            notes.append(f"{label} has no ProfilerStep: its numbers are per trace, not per step.")
        if not n:
            notes.append(f"{label} has no events: its side is empty.")
    return Comparison(
        a_label,
        b_label,
        _metric_deltas(_metrics(a_tables), _metrics(b_tables)),
        ops,
        _findings(_frame(a_tables, "findings"), _frame(b_tables, "findings")),
        a_steps,
        b_steps,
        a_ranks,
        b_ranks,
        min_rel,
        min_abs_ns,
        notes,
    )


# ----------------------------------------------------------------------------- I/O: warehouse, MLflow, CLI


def resolve_ref(ref: str, warehouse: str, tracking_uri: str | None, spark=None) -> tuple[str, int | None, str | None]:
    """``(job_id, attempt, run_id)`` for a CLI argument.

    ``ref`` is an MLflow run id (32 hex digits, looked up in ``tracking_uri``: its
    ``tracelake.job_id``/``tracelake.attempt`` tags), ``<job_id>#<attempt>``, or a job id (its
    latest attempt in ``captures``).

    Raises:
        ValueError: naming ``ref`` when no such run or job exists.
    """
    if _RUN_ID.match(ref) and tracking_uri:
        from mlflow.exceptions import MlflowException  # heavy: mlflow
        from mlflow.tracking import MlflowClient  # heavy: mlflow

        try:
            run = MlflowClient(tracking_uri=tracking_uri).get_run(ref)
        except MlflowException:
            run = None
        if run is not None:
            tags = run.data.tags
            if "tracelake.job_id" not in tags:
                raise ValueError(f"MLflow run {ref} is not a tracelake job run (no tracelake.job_id tag)")
            return tags["tracelake.job_id"], int(tags.get("tracelake.attempt", 0)), ref
    job, attempt = (ref.rsplit("#", 1) + [None])[:2] if "#" in ref else (ref, None)

    caps = read_spark(spark, warehouse, "captures", [job]) if spark is not None else None
    if caps is None or caps.limit(1).count() == 0:
        raise ValueError(f"{ref}: no MLflow run with that id and no job {job!r} in {warehouse}/captures")
    if attempt is None:
        from pyspark.sql import functions as F  # heavy: pyspark

        attempt = caps.agg(F.max("attempt")).collect()[0][0]
    return job, int(attempt), None


def load_compare_tables(spark, warehouse: str, job_id: str, attempt: int | None) -> dict[str, pd.DataFrame]:
    """A job's ``captures``, ``ranks``, ``steps``, ``findings`` (pandas) and its ``op_summary`` (Spark aggregate)."""
    from pyspark.sql import functions as F  # heavy: pyspark

    tables = load_job_tables(warehouse, job_id, attempt, names=("captures", "ranks", "steps", "findings"))
    ev = read_spark(spark, warehouse, "events", [job_id])
    if ev is not None:
        if attempt is not None:
            ev = ev.filter(F.col("attempt") == int(attempt))
        tables["op_summary"] = op_summary_spark(ev)
    return tables


def log_comparison(
    tracking_uri: str,
    comparison: Comparison,
    warehouse: str | None = None,
    run_ids: tuple[str | None, str | None] = (None, None),
) -> str:
    """Log a comparison run (experiment ``tracelake-comparisons``): metrics of
    :meth:`Comparison.summary_metrics`, tags ``tracelake.kind=comparison``, ``tracelake.compare.a/b``
    (and ``.a_run``/``.b_run``), artifacts ``report/comparison.html``, ``ops.csv``, ``metrics.csv``,
    ``findings.csv``. Returns the run id."""
    from mlflow.entities import Metric, RunTag  # heavy: mlflow
    from mlflow.tracking import MlflowClient  # heavy: mlflow

    client = MlflowClient(tracking_uri=tracking_uri)
    exp = experiment_id(client, COMPARE_EXPERIMENT, tracking_uri, warehouse)
    run_id = client.create_run(exp, run_name=f"{comparison.a_label} → {comparison.b_label}"[:250]).info.run_id
    now = int(time.time() * 1000)
    tags = {
        "tracelake.kind": "comparison",
        "tracelake.compare.a": comparison.a_label[:5000],
        "tracelake.compare.b": comparison.b_label[:5000],
    }
    for side, rid in zip(("a_run", "b_run"), run_ids):
        if rid:
            tags[f"tracelake.compare.{side}"] = rid
    metrics = [Metric(k, v, now, 0) for k, v in sorted(comparison.summary_metrics().items())]
    client.log_batch(run_id, metrics=metrics, tags=[RunTag(k, v) for k, v in tags.items()])
    with tempfile.TemporaryDirectory() as tmp:
        p = os.path.join(tmp, "comparison.html")
        with open(p, "w", encoding="utf-8") as f:
            f.write(render_comparison_report(comparison))
        client.log_artifact(run_id, p, artifact_path="report")
        for name, df in (
            ("ops.csv", comparison.ops),
            ("metrics.csv", comparison.metrics),
            ("findings.csv", comparison.findings),
        ):
            if df is not None:
                df.to_csv(os.path.join(tmp, name), index=False)
                client.log_artifact(run_id, os.path.join(tmp, name))
    client.set_terminated(run_id, status="FINISHED")
    return run_id


def print_comparison(c: Comparison, console=None, limit: int = 10) -> None:
    """Print metric deltas and the top kernels/ops added, removed, slower, faster, and findings."""
    console = console or Console()

    def ms(ns):
        return fmt_ms(ns, 3)

    t = Table(title=f"compare {escape(c.a_label)} → {escape(c.b_label)}: metrics", title_justify="left")
    t.add_column("metric")
    t.add_column("what it is", overflow="fold")
    for col in ("A", "B", "Δ", "Δ %"):
        t.add_column(col, justify="right")
    for r in c.metrics.itertuples():
        if not r.metric.startswith("rank/"):
            t.add_row(
                escape(r.metric),
                escape(str(r.label or "")),
                fmt_smart(r.a),
                fmt_smart(r.b),
                fmt_smart(r.delta),
                fmt_num(r.delta_pct, 1),
            )
    console.print(t)
    for status, rows in (
        ("added", c.added()),
        ("removed", c.removed()),
        ("slower", c.slower()),
        ("faster", c.faster()),
    ):
        if not len(rows):
            console.print(f"{status} in B: no kernel or op", highlight=False)
            continue
        t = Table(
            title=f"{status} in B: {len(rows)} kernel(s)/op(s), ms per rank and step (A, B: mean over ranks; "
            "max: the slowest rank)",
            title_justify="left",
        )
        t.add_column("kind")
        t.add_column("name", overflow="fold", min_width=16)
        for col in ("A", "B", "Δ", "Δ %", "A max", "B max"):
            t.add_column(col, justify="right", no_wrap=True)
        for r in rows.head(limit).itertuples():
            t.add_row(
                r.group,
                escape(str(r.name)[:100]),
                ms(r.a_ns_per_step),
                ms(r.b_ns_per_step),
                ms(r.delta_ns_per_step),
                fmt_num(r.delta_pct, 1),
                ms(r.a_max_rank_ns_per_step),
                ms(r.b_max_rank_ns_per_step),
            )
        console.print(t)
    if c.findings is not None:
        for status in ("appeared", "cleared"):
            f = c.findings[c.findings["status"] == status]
            console.print(
                f"findings {status}: {len(f)}" + "".join(f"\n  {r.finding_id}: {r.title}" for r in f.itertuples()),
                markup=False,
                highlight=False,
            )
    for n in c.notes:
        console.print(f"[dim]{escape(n)}[/dim]", highlight=False, markup=True)


def compare_command(
    a: Annotated[str, typer.Argument(help="Job A: an MLflow run id, a job id, or <job_id>#<attempt>.")],
    b: Annotated[str, typer.Argument(help="Job B (compared against A).")],
    warehouse: Annotated[str, typer.Option(help="Warehouse folder.")],
    tracking_uri: Annotated[
        str | None, typer.Option(help="MLflow tracking URI (default: sqlite:///<warehouse>/mlflow.db).")
    ] = None,
    no_mlflow: Annotated[bool, typer.Option("--no-mlflow", help="Print only; log no comparison run.")] = False,
    html: Annotated[str | None, typer.Option(help="Also write the HTML report to this file.")] = None,
) -> Comparison:
    """Compare two jobs: metric deltas, kernels/ops added, removed, slower and faster, findings.

    Prints the tables and logs a comparison run with its HTML report to MLflow (unless --no-mlflow).
    """
    # From Python: returns the Comparison; raises typer.Exit(2) when A or B cannot be resolved.
    console = Console()
    uri = tracking_uri or (default_tracking_uri(warehouse) if "://" not in warehouse else None)
    spark = get_spark()
    sides = []
    for ref in (a, b):
        try:
            job, attempt, run_id = resolve_ref(ref, warehouse, uri, spark)
        except ValueError as exc:
            console.print(f"[red]error:[/red] {exc}")
            raise typer.Exit(2) from None
        sides.append((job, attempt, run_id, load_compare_tables(spark, warehouse, job, attempt)))
    (ja, aa, ra, ta), (jb, ab, rb, tb) = sides
    c = compare_jobs(ta, tb, a_label=f"{ja}#{aa}", b_label=f"{jb}#{ab}")
    print_comparison(c, console)
    if html:
        with open(html, "w", encoding="utf-8") as f:
            f.write(render_comparison_report(c))
        console.print(f"HTML report: {html}")
    if not no_mlflow and uri:
        run_id = log_comparison(uri, c, warehouse, (ra, rb))
        console.print(f"MLflow comparison run: {run_id} (experiment tracelake-comparisons)")
    return c
