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
CLI (reads the two jobs with pyarrow, prints the headline and tables in 80 columns, logs a comparison run with its HTML
report to the tracking URI the user configured: :func:`tracking_uri_of`).
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
from rich import box
from rich.console import Console
from rich.markup import escape  # names, labels and titles come from traces: text, never console markup
from rich.table import Table

from jobs.common.ids import DiscoveryError, printable, safe_id
from jobs.publish.headline import METRIC_LABELS
from jobs.publish.report.blocks import fmt_ms, fmt_num, fmt_smart
from jobs.publish.report.html import render_comparison_report
from jobs.publish.report.sections import CARD_ORDER
from jobs.publish.reports import COMPARE_EXPERIMENT, load_job_tables
from jobs.publish.tracking import client_for, default_tracking_uri, experiment_id, job_metrics
from jobs.warehouse import NoWarehouse, read_arrow, require_warehouse

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
        warnings: how the two jobs differ in what makes them comparable (world size, device, model, captured
            steps: :func:`_unlike`); empty when they are alike.
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
    warnings: list[str] = field(default_factory=list)

    def headline(self, top: int = 3) -> list[str]:
        """What a reader needs first, in lines: the job step time p50 on both sides with its change, then the
        findings on both sides whose estimated time lost per step grew or shrank by :data:`FINDING_CHANGE_PCT` % and
        :data:`FINDING_CHANGE_MS` ms or more (largest change first), then the findings that appeared and cleared
        (``top`` of each, largest estimated time lost first)."""
        m = self.metrics.set_index("metric") if len(self.metrics) else pd.DataFrame()
        lines = []
        if "step_time_p50_ms" in m.index:
            r = m.loc["step_time_p50_ms"]
            change = f" ({r['delta_pct']:+,.1f} %)" if pd.notna(r["delta_pct"]) else ""
            lines.append(f"job step time p50: {fmt_smart(r['a'])} ms → {fmt_smart(r['b'])} ms{change}")
        else:
            lines.append("job step time: not on both sides (no ProfilerStep)")
        if self.findings is not None:
            lines += _changed_findings(self.findings, top)
            for status, est in (("appeared", "b_est_ns"), ("cleared", "a_est_ns")):
                f = self.findings[self.findings["status"] == status].sort_values(est, ascending=False)
                if len(f):
                    titles = "; ".join(str(t) for t in f["title"].head(top))
                    more = f" (+{len(f) - top} more)" if len(f) > top else ""
                    lines.append(f"findings {status} in B: {titles}{more}")
            if not (self.findings["status"] != "persisting").any():
                lines.append("findings: the same rules fired on both sides")
        return lines

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


#: A finding on both sides is named in the headline when its estimated time lost per step changed by at least this
#: share of A's and at least :data:`FINDING_CHANGE_MS`.
FINDING_CHANGE_PCT = 10.0
FINDING_CHANGE_MS = 0.1


def _changed_findings(findings: pd.DataFrame, top: int) -> list[str]:
    """Headline lines for the findings on both sides that grew / shrank (:meth:`Comparison.headline`)."""
    p = findings[findings["status"] == "persisting"].copy()
    if not len(p):
        return []
    p["_d"] = p["b_est_ns"] - p["a_est_ns"]
    big = (p["_d"].abs() >= FINDING_CHANGE_PCT / 100 * p["a_est_ns"].abs()) & (p["_d"].abs() >= FINDING_CHANGE_MS * 1e6)
    out = []
    for word, sign in (("grew", 1), ("shrank", -1)):
        f = p[big & (sign * p["_d"] > 0)]
        f = f.loc[(sign * f["_d"]).sort_values(ascending=False).index]
        if len(f):
            items = "; ".join(
                f"{t} ({a / 1e6:,.1f} → {b / 1e6:,.1f} ms/step)"
                for t, a, b in zip(f["title"].head(top), f["a_est_ns"], f["b_est_ns"])
            )
            more = f" (+{len(f) - top} more)" if len(f) > top else ""
            out.append(f"findings that {word} in B: {items}{more}")
    return out


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
            ``op_summary`` (:func:`op_summary`).
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
        _unlike(a_tables, b_tables, (a_steps, a_ranks), (b_steps, b_ranks)),
    )


def _sides_of(tables: dict, ranks: int) -> dict[str, str]:
    """What makes a job comparable, in words: world size, device, model (from its ``captures``)."""
    caps = _frame(tables, "captures")
    caps = caps[caps["status"] == "ingested"] if caps is not None and "status" in caps.columns else caps

    def values(col):
        if caps is None or col not in caps.columns:
            return "?"
        v = sorted({str(x) for x in caps[col].dropna()})
        return ", ".join(v) if v else "?"

    world = values("world_size")
    return {
        "world size": world if world != "?" else str(ranks),
        "device": values("device_name"),
        "model": values("model"),
    }


def _unlike(a_tables: dict, b_tables: dict, a: tuple[float, int], b: tuple[float, int]) -> list[str]:
    """How jobs A and B differ in world size, device, model and captured steps per rank, one clause each
    (``world size 8 vs 1``); empty when alike. A delta between unlike jobs measures the difference, not a change."""
    sa, sb = _sides_of(a_tables, a[1]), _sides_of(b_tables, b[1])
    out = [f"{k} {sa[k]} vs {sb[k]}" for k in sa if sa[k] != sb[k] and "?" not in (sa[k], sb[k])]
    if a[0] != b[0]:
        out.append(f"captured steps per rank {a[0]:g} vs {b[0]:g}")
    return out


# ----------------------------------------------------------------------------- I/O: warehouse, MLflow, CLI


def resolve_ref(ref: str, warehouse: str, tracking_uri: str | None) -> tuple[str, int | None, str | None]:
    """``(job_id, attempt, run_id)`` for a CLI argument.

    ``ref`` is an MLflow run id (32 hex digits, looked up in ``tracking_uri``: its
    ``tracelake.job_id``/``tracelake.attempt`` tags), ``<job_id>#<attempt>``, or a job id (its
    latest attempt in ``captures``).

    Raises:
        ValueError: naming ``ref`` when no such run or job exists.
    """
    if _RUN_ID.match(ref) and tracking_uri:
        from mlflow.exceptions import MlflowException  # heavy: mlflow

        try:
            run = client_for(tracking_uri).get_run(ref)
        except MlflowException:
            run = None
        if run is not None:
            tags = run.data.tags
            if "tracelake.job_id" not in tags:
                raise ValueError(f"MLflow run {ref} is not a tracelake job run (no tracelake.job_id tag)")
            return tags["tracelake.job_id"], int(tags.get("tracelake.attempt", 0)), ref
    job, attempt = (ref.rsplit("#", 1) + [None])[:2] if "#" in ref else (ref, None)
    caps = read_arrow(warehouse, "captures", [job], columns=["attempt"]) if safe_job(job) else None
    if caps is None or caps.num_rows == 0:
        raise ValueError(f"{ref}: no MLflow run with that id and no job {job!r} in {warehouse}/captures")
    attempts = sorted(set(caps.column("attempt").to_pylist()))
    if attempt is None:
        return job, int(attempts[-1]), None
    if not str(attempt).isdigit() or int(attempt) not in attempts:
        raise ValueError(
            f"{ref}: job {job!r} has no attempt {attempt!r} (its attempts: {', '.join(map(str, attempts))})"
        )
    return job, int(attempt), None


def safe_job(job: str) -> bool:
    """Whether ``job`` can be a warehouse job id (a partition value): else no read is tried."""
    try:
        safe_id(job, "job_id", "compare")
    except DiscoveryError:
        return False
    return True


#: What the kernel/op comparison reads of ``events`` (:func:`op_summary`).
EVENT_COLUMNS = ["attempt", "rank", "step", "ph", "name", "category", "is_gpu", "dur_ns"]


def load_compare_tables(warehouse: str, job_id: str, attempt: int | None) -> dict[str, pd.DataFrame]:
    """A job's ``captures``, ``ranks``, ``steps``, ``findings`` and the :func:`op_summary` of its ``events`` (the
    columns of :data:`EVENT_COLUMNS` of its partition, read with pyarrow: no Spark session)."""
    tables = load_job_tables(warehouse, job_id, attempt, names=("captures", "ranks", "steps", "findings"))
    ev = read_arrow(warehouse, "events", [job_id], columns=EVENT_COLUMNS)
    if ev is not None:
        e = ev.to_pandas()
        if attempt is not None:
            e = e[(e["attempt"] == int(attempt)).to_numpy(dtype=bool)]
        tables["op_summary"] = op_summary(e)
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

    client = client_for(tracking_uri)
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


#: The width the printed comparison fits (a narrower terminal wraps nothing: the names are cut instead).
PRINT_WIDTH = 80
#: The printed tables' number columns (A, B, Δ %) and what the table's frame takes besides its columns' widths (a
#: space of padding each side of each of the 4 columns, the 2 edges and the 3 column separators of box.SIMPLE_HEAD).
_NUMBER_WIDTHS, _FRAME = (10, 10, 9), 13


def shorten_distinct(names: list[str], width: int) -> list[str]:
    """``names`` cut to ``width`` characters each, distinct names staying distinct.

    A name that fits is kept whole; a longer one is cut at the end with ``…``. Names whose end cuts would read the
    same (two kernels of one template, ``void at::native::vectorized_el…`` twice) are cut in the middle instead,
    keeping their ends (``void at::native::vec…Array<char*, 2>)``); where the ends are the same too, the part where
    they differ is shown between two ellipses; as the last resort they are numbered. Equal names give equal texts.
    """
    width = max(width, 4)

    def end_cut(n: str) -> str:
        return n if len(n) <= width else n[: width - 1] + "…"

    def middle_cut(n: str, tail: int) -> str:
        return n if len(n) <= width else n[: width - 1 - tail] + "…" + n[len(n) - tail :]

    def window_cut(n: str, group: list[str]) -> str:
        """The head, then the part from where ``n`` first differs from the other names of its group."""
        if len(n) <= width:
            return n
        differs = max((_common_prefix(n, m) for m in group if m != n), default=0)
        head = width // 4
        room = width - head - 2  # two ellipses
        start = min(max(head, differs - room // 4), len(n) - room)
        if start + room >= len(n):  # the window reaches the end: one ellipsis
            return n[:head] + "…" + n[len(n) - (width - head - 1) :]
        return n[:head] + "…" + n[start : start + room] + "…"

    unique = list(dict.fromkeys(names))
    shown = {n: end_cut(n) for n in unique}
    by_text: dict[str, list[str]] = {}
    for n in unique:
        by_text.setdefault(shown[n], []).append(n)

    def tries(group: list[str]):
        """The group's texts cut in the middle (a third of the width kept at the end first), then by window."""
        for tail in sorted(range(1, width - 1), key=lambda t: abs(t - width // 3)):
            yield [middle_cut(n, tail) for n in group]
        yield [window_cut(n, group) for n in group]

    for group in by_text.values():
        if len(group) < 2:
            continue
        others = {shown[n] for n in unique if n not in group}  # as cut so far: a group cut before is avoided too
        texts = next(
            (ts for ts in tries(group) if len(set(ts)) == len(ts) and not others & set(ts)),
            [f"{end_cut(n)[: width - len(str(i)) - 2]}…#{i}" for i, n in enumerate(group, start=1)],
        )
        shown.update(zip(group, texts))
    return [shown[n] for n in names]


def _common_prefix(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def print_comparison(c: Comparison, console=None, limit: int = 10) -> None:
    """Print, within :data:`PRINT_WIDTH` columns: first that A and B are the same run when they are, how the jobs
    differ when they are unlike (a warning), then the headline (:meth:`Comparison.headline`), the main metric deltas
    and the top ``limit`` kernels/ops added, removed, slower and faster by their change Δ ms (ms per rank and step,
    mean over ranks; the
    slowest rank's is in the HTML report and ops.csv), with how many more each has. Names too long for the table are
    cut so that no two shown names read the same (:func:`shorten_distinct`)."""
    console = console or Console()
    width = min(console.width, PRINT_WIDTH)
    first_width = max(width - sum(_NUMBER_WIDTHS) - _FRAME, 8)

    def say(text: str, style: str = "") -> None:
        for part in str(text).splitlines():
            line = escape(printable(part))
            console.print(f"[{style}]{line}[/{style}]" if style else line, highlight=False, width=width)

    if c.a_label == c.b_label:
        say(f"A and B are the same run ({c.a_label}): every difference below is 0", "yellow")
    if c.warnings:
        say(f"warning: the jobs differ in {'; '.join(c.warnings)}: the deltas compare unlike runs", "yellow")
    say(f"compare {c.a_label} → {c.b_label}", "bold")
    for line in c.headline():
        say(line)

    def table(title: str, first: str, delta: str = "Δ %") -> Table:
        t = Table(title=escape(printable(title)), title_justify="left", box=box.SIMPLE_HEAD, width=width)
        t.add_column(first, no_wrap=True, overflow="ellipsis", width=first_width)
        for col, w in zip(("A", "B", delta), _NUMBER_WIDTHS):
            t.add_column(col, justify="right", no_wrap=True, width=w)
        return t

    t = table("metrics (MLflow names; Δ = B − A)", "metric")
    first = {m: i for i, m in enumerate(CARD_ORDER)}  # the job report's headline metrics first
    for r in sorted(c.metrics.itertuples(), key=lambda r: first.get(r.metric, len(first))):
        if not r.metric.startswith("rank/"):
            t.add_row(escape(str(r.metric)), fmt_smart(r.a), fmt_smart(r.b), fmt_num(r.delta_pct, 1))
    console.print(t, width=width)
    changes = [
        ("added", c.added()),
        ("removed", c.removed()),
        ("slower", c.slower()),
        ("faster", c.faster()),
    ]
    # every shown name cut once over the four tables: a kernel renamed between A and B (added and removed) reads as two
    keys = [(r.group, r.name) for _, rows in changes for r in rows.head(limit).itertuples()]
    texts = shorten_distinct([f"{'k' if g == 'kernel' else 'op'} {printable(str(n))}" for g, n in keys], first_width)
    labels = dict(zip(keys, texts))
    for status, rows in changes:
        if not len(rows):
            say(f"{status} in B: no kernel or op")
            continue
        t = table(
            f"{status} in B: {len(rows)} kernel(s)/op(s), ms per rank and step, largest Δ ms first",
            "kernel or op",
            "Δ ms",
        )
        for r in rows.head(limit).itertuples():
            name = labels[(r.group, r.name)]
            t.add_row(
                escape(name), fmt_ms(r.a_ns_per_step, 3), fmt_ms(r.b_ns_per_step, 3), fmt_ms(r.delta_ns_per_step, 3)
            )
        console.print(t, width=width)
        if len(rows) > limit:
            say(f"  … {len(rows) - limit} more {status} in B not shown (the largest {limit} are)")
    if c.findings is not None:
        for status in ("appeared", "cleared"):
            f = c.findings[c.findings["status"] == status]
            say(f"findings {status}: {len(f)}" + "".join(f"\n  {r.finding_id}: {r.title}" for r in f.itertuples()))
    for n in c.notes:
        say(n, "dim")


def tracking_uri_of(flag: str | None, warehouse: str) -> tuple[str | None, str]:
    """``(uri, where it came from)``: the ``--tracking-uri`` flag, else ``$MLFLOW_TRACKING_URI``, else the
    warehouse's default store (:func:`jobs.publish.tracking.default_tracking_uri`; none for a remote warehouse)."""
    if flag:
        return flag, "--tracking-uri"
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"], "MLFLOW_TRACKING_URI"
    if "://" not in warehouse:
        return default_tracking_uri(warehouse), "the warehouse default"
    return None, "no tracking URI: set --tracking-uri or MLFLOW_TRACKING_URI"


def compare_command(
    a: Annotated[str, typer.Argument(help="Job A: an MLflow run id, a job id, or <job_id>#<attempt>.")],
    b: Annotated[str, typer.Argument(help="Job B (compared against A).")],
    warehouse: Annotated[str, typer.Option(help="Warehouse folder.")],
    tracking_uri: Annotated[
        str | None,
        typer.Option(
            help="MLflow tracking URI.", show_default="$MLFLOW_TRACKING_URI, else sqlite:///<warehouse>/mlflow.db"
        ),
    ] = None,
    no_mlflow: Annotated[bool, typer.Option("--no-mlflow", help="Print only; log no comparison run.")] = False,
    html: Annotated[str | None, typer.Option(help="Also write the HTML report to this file.")] = None,
) -> Comparison:
    """Compare two jobs: metric deltas, kernels/ops added, removed, slower and faster, findings.

    Prints the tables and logs a comparison run with its HTML report to MLflow (unless --no-mlflow).
    """
    # From Python: returns the Comparison; raises typer.Exit(2) when A or B cannot be resolved.
    console = Console()
    try:
        require_warehouse(warehouse)
    except NoWarehouse as exc:
        console.print(f"[red]error:[/red] {escape(printable(str(exc)))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    uri, source = tracking_uri_of(tracking_uri, warehouse)
    sides = []
    for ref in (a, b):
        try:
            job, attempt, run_id = resolve_ref(ref, warehouse, uri)
        except ValueError as exc:
            console.print(f"[red]error:[/red] {escape(printable(str(exc)))}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
        sides.append((job, attempt, run_id, load_compare_tables(warehouse, job, attempt)))
    (ja, aa, ra, ta), (jb, ab, rb, tb) = sides
    c = compare_jobs(ta, tb, a_label=f"{ja}#{aa}", b_label=f"{jb}#{ab}")
    print_comparison(c, console)
    if html:
        with open(html, "w", encoding="utf-8") as f:
            f.write(render_comparison_report(c))
        console.print(f"HTML report: {escape(html)}", highlight=False)
    if not no_mlflow and uri:
        run_id = log_comparison(uri, c, warehouse, (ra, rb))
        console.print(f"MLflow: {escape(uri)} (from {source}); comparison run {run_id}", highlight=False)
    elif not no_mlflow:
        console.print(f"MLflow: not logged ({source})", highlight=False)
    return c
