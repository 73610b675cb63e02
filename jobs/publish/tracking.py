"""Log analysis results to MLflow: one run per (job, attempt) in experiment ``tracelake``.

Metric names are stable so that MLflow's run comparison lines up across jobs:

- headline (:mod:`jobs.publish.headline`: ``jobs.fleet.stats.run_summary``, the one definition every surface
  shows): ``step_time_p50_ms``, ``step_time_p90_ms``, ``step_time_p99_ms`` (job step time: per ProfilerStep the
  slowest rank's), ``idle_pct``, ``compute_pct`` (% of the GPU's active span, HTA temporal breakdown,
  time-weighted), ``exposed_comm_pct``, ``cpu_bound_pct``, ``dataloader_pct`` (% of rank step time), ``n_ranks``,
  ``n_steps`` (job steps), ``n_rank_steps`` (rank-steps);
- also: ``non_compute_pct`` (100 − idle − compute), ``step_time_max_ms`` (longest job step), ``overlap_pct`` (mean
  over ranks), ``idle_pct_max`` (worst rank), ``n_events``, ``n_quarantined``, ``n_cataloged``;
- verdict (:mod:`jobs.publish.verdict`): tags ``tracelake.verdict`` and ``tracelake.top_finding``, metrics
  ``coverage/n_rules_ran|ran_on_trace|not_applicable|not_run``;
- collectives and stragglers (:func:`collective_metrics`): ``collectives/…``,
  ``straggler/rank``, ``straggler/last_arrival_pct``; regressions against previous runs of the same
  job name (:func:`regression_metrics`): ``regression/<metric>/change_pct|delta|p_value``;
- first by name (:data:`LEAD_METRICS`): ``1_job_step_p50_ms``, ``2_job_step_p90_ms``, ``3_gpu_idle_pct``,
  ``4_exposed_comm_pct``, ``5_top_finding_ms_per_step`` (repeats, so MLflow's tables open on them); the run's
  description (``mlflow.note.content``) is the verdict in words with the top findings (:func:`run_description`), and
  its start and end are the profiled window's (:func:`captured_window_ms`);
- per rank: ``rank/<r>/step_time_p50_ms``, ``rank/<r>/step_time_max_ms``, ``rank/<r>/idle_pct``,
  ``rank/<r>/compute_pct``, ``rank/<r>/overlap_pct``.

Re-running on the same job replaces its run (:func:`replace_run`: found by the ``tracelake.job_id`` and
``tracelake.attempt`` tags; a new run, the old one deleted, restorable, its id in ``tracelake.replaces``), so a
job never has two runs and each metric one point: what was logged before (a finding since cleared, a
changed param) never lingers.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import fsspec
import pandas as pd

from jobs.analyze.findings.neuron import neuron_findings
from jobs.common.ids import safe_id
from jobs.fleet.stats import job_step_times
from jobs.normalize.neuron.metrics import neuron_metrics_for_mlflow
from jobs.publish.headline import headline, one_headline
from jobs.publish.verdict import job_verdict

EXPERIMENT = "tracelake"
_EPOCH_MIN_NS = 1_420_070_400 * 10**9  # 2015-01-01: smaller trace times are a relative clock


def default_tracking_uri(warehouse: str) -> str:
    """``sqlite:///<warehouse>/mlflow.db`` for a local warehouse (the embedded default)."""
    return "sqlite:///" + str(Path(warehouse).resolve() / "mlflow.db")


def client_for(tracking_uri: str):
    """An ``MlflowClient`` of ``tracking_uri``, its store opened (and on first use created) safely: a new SQLite store
    is built whole in a temporary file and moved into place (:func:`sqlite_store_ready`), so a process killed while
    MLflow creates its tables never leaves a half-made ``mlflow.db`` behind. Every MLflow client of tracelake comes
    from here."""
    if tracking_uri.startswith("sqlite:///"):
        sqlite_store_ready(Path(tracking_uri[len("sqlite:///") :]))
    from mlflow.tracking import MlflowClient  # heavy: mlflow

    return MlflowClient(tracking_uri=tracking_uri)  # builds the store; mlflow caches it per URI


def sqlite_store_ready(path: Path) -> None:
    """Make ``path`` a complete MLflow SQLite store: when it is missing, built in ``.<name>.<pid>.creating`` beside it
    and renamed into place; when it is half-made (tables without MLflow's schema version: a run killed during an
    earlier creation), moved aside to ``<name>.broken-<epoch s>`` and built again."""
    import sqlite3  # why: only for a local SQLite store

    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        try:
            with sqlite3.connect(path) as con:
                ok = con.execute("SELECT count(*) FROM alembic_version").fetchone()[0] > 0
        except sqlite3.DatabaseError:
            ok = False
        if ok:
            return
        path.rename(path.with_name(f"{path.name}.broken-{int(time.time())}"))
    tmp = path.with_name(f".{path.name}.{os.getpid()}.creating")
    tmp.unlink(missing_ok=True)
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore  # heavy: mlflow

    store = SqlAlchemyStore(f"sqlite:///{tmp}", str(path.parent / "mlartifacts"))
    store.engine.dispose()
    os.replace(tmp, path)


def open_store_in_background(tracking_uri: str) -> threading.Thread:
    """Open the MLflow tracking store of ``tracking_uri`` in a daemon thread: import mlflow and open the store
    (creating a new SQLite store's tables), so that ``publish`` finds it ready.

    ``tracelake run`` starts it while its fork server imports the workers' modules and the first stages run in the
    workers. Join the returned thread before any other use of MLflow in the process. A failure is left for
    ``publish`` to raise when it opens the store itself.
    """

    def open_store() -> None:
        try:
            client_for(tracking_uri)
        except Exception:  # noqa: BLE001 — publish opens the store again and reports what is wrong
            pass

    thread = threading.Thread(target=open_store, name="tracelake-mlflow-store", daemon=True)
    thread.start()
    return thread


#: MLflow 3's experiment kind tag: ``custom_model_development`` makes the UI a classic ML experiment (runs, metrics,
#: charts to compare), not a GenAI one (Traces / Evaluations).
EXPERIMENT_KIND_TAG, EXPERIMENT_KIND = "mlflow.experimentKind", "custom_model_development"


def rounded(name: str, value: float) -> float:
    """A metric rounded to its unit's precision: ``*_ms`` 3 decimals (µs), ``*_pct`` 2, ``*_gbps`` 2, others 4
    significant decimals; counts stay whole."""
    v = float(value)
    if not math.isfinite(v) or v.is_integer():
        return v
    digits = 3 if name.endswith("_ms") or "_ms_" in name else 2 if name.endswith(("_pct", "_gbps")) else 4
    return round(v, digits)


def experiment_id(client, name: str, tracking_uri: str, warehouse: str | None) -> str:
    """Id of experiment ``name``, created with artifacts under ``{warehouse}/mlartifacts`` for local stores, and
    marked a classic ML experiment (:data:`EXPERIMENT_KIND`) if it is not yet."""
    exp = client.get_experiment_by_name(name)
    if exp is None:
        loc = None
        if (
            warehouse
            and (tracking_uri.startswith("sqlite:") or tracking_uri.startswith("file:"))
            and "://" not in warehouse
        ):
            loc = (Path(warehouse).resolve() / "mlartifacts").as_uri()
        exp_id = client.create_experiment(name, artifact_location=loc, tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})
        return exp_id
    if exp.tags.get(EXPERIMENT_KIND_TAG) != EXPERIMENT_KIND:
        client.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
    return exp.experiment_id


def run_link(tracking_uri: str, experiment: str, run_id: str, artifact: str | None = None) -> str:
    """Where a person opens an MLflow run (or one artifact of it): the run's page of an ``http(s)://`` tracking
    server's UI, else ``run <id> of <tracking_uri>`` (open with ``mlflow ui --backend-store-uri <tracking_uri>``).

    Args:
        experiment: the run's experiment id.
        artifact: a path inside the run's artifacts (e.g. ``report/job_report.html``), or ``None``.
    """
    if tracking_uri.startswith(("http://", "https://")):
        page = f"{tracking_uri.rstrip('/')}/#/experiments/{experiment}/runs/{run_id}"
        return f"{page}/artifacts/{artifact}" if artifact else page
    return f"run {run_id} of {tracking_uri}" + (f", artifact {artifact}" if artifact else "")


def replace_run(client, exp_id: str, filter_string: str, run_name: str, start_time: int | None = None) -> str:
    """A new run in ``exp_id`` that replaces the active runs matching ``filter_string``: they are deleted
    (MLflow's soft delete: ``mlflow runs restore`` brings one back) once the new run exists, and their ids
    are kept in its tag ``tracelake.replaces``. ``start_time``: the run's start, epoch ms (default now). Returns the
    new run id (status ``RUNNING``).

    Metric histories are append-only in MLflow: a fresh run is how a re-run overwrites its metrics."""
    from mlflow.entities import RunTag  # heavy: mlflow

    old = [r.info.run_id for r in client.search_runs([exp_id], filter_string=filter_string)]
    run_id = client.create_run(exp_id, run_name=run_name, start_time=start_time).info.run_id
    if old:
        client.log_batch(run_id, tags=[RunTag("tracelake.replaces", ",".join(old)[:5000])])
        for rid in old:
            client.delete_run(rid)
    return run_id


def _finite(v) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def _param(v) -> str:
    """A param value as text; integral floats (pandas upcasts nullable ints) print as ints."""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def job_metrics(
    ranks: pd.DataFrame, steps: pd.DataFrame, captures: pd.DataFrame | None = None, head: dict[str, float] | None = None
) -> dict[str, float]:
    """The aggregate and per-rank metrics of one job (names in the module docstring).

    The headline numbers are :func:`jobs.publish.headline.one_headline` (``run_summary``, the one definition the
    report, CLI, compare and MCP show): ``step_time_p50_ms``/``p90``/``p99``, ``idle_pct``, ``compute_pct``,
    ``exposed_comm_pct``, ``cpu_bound_pct``, ``dataloader_pct``, ``n_ranks``, ``n_steps`` (job steps),
    ``n_rank_steps``; ``non_compute_pct`` = 100 − idle − compute (HTA's three shares of the GPU's active span sum to
    100). Also ``step_time_max_ms`` (the longest job step), ``overlap_pct`` (mean over ranks with GPU activity of
    HTA's comm/compute overlap), ``idle_pct_max`` (the worst rank's whole-trace GPU idle %) and the per-rank metrics.

    Args:
        ranks: ``ranks`` rows of the job; steps: ``steps`` rows of the job; captures: its ``captures`` rows (None:
            every rank capture counts as ingested).
        head: the job's headline metrics when already computed (:func:`jobs.publish.headline.headline` of many
            jobs at once, one ``run_summary``); default computed here from the rows.

    Returns:
        ``{metric name: value}``; metrics without data (e.g. GPU % on a CPU-only trace) are omitted.
    """
    m: dict[str, float] = {"n_ranks": float(ranks["rank"].nunique())}
    m.update(one_headline(steps, ranks, captures) if head is None else head)
    if "idle_pct" in m and "compute_pct" in m:
        m["non_compute_pct"] = max(0.0, 100.0 - m["idle_pct"] - m["compute_pct"])
    job_step = job_step_times(steps) if len(steps) and "step" in steps.columns else pd.Series(dtype=float)
    if len(job_step):  # the longest job step: per ProfilerStep the slowest rank's (as run_summary's percentiles)
        m["step_time_max_ms"] = float(job_step.max()) / 1e6
    if "overlap_pct" in ranks.columns and ranks["overlap_pct"].notna().any():
        m["overlap_pct"] = float(ranks["overlap_pct"].dropna().mean())
    if "idle_pct" in ranks.columns and ranks["idle_pct"].notna().any():
        m["idle_pct_max"] = float(ranks["idle_pct"].max())
    for _, r in ranks.iterrows():
        rs = steps[steps["rank"] == r["rank"]] if len(steps) else steps
        p = f"rank/{int(r['rank'])}/"
        if len(rs):
            m[p + "step_time_p50_ms"] = float(rs["step_time_ns"].median()) / 1e6
            m[p + "step_time_max_ms"] = float(rs["step_time_ns"].max()) / 1e6
        for col in ("idle_pct", "compute_pct", "overlap_pct"):
            if col in r and _finite(r[col]):
                m[p + col] = float(r[col])
    return m


def collective_metrics(collectives: pd.DataFrame, steps: pd.DataFrame) -> tuple[dict[str, float], dict[str, str]]:
    """Collective and straggler metrics of one job (from the ``collectives`` and ``steps`` rows of the job).

    Metrics (``exposed_comm_pct`` is a headline number of :func:`job_metrics`, not logged here): with matched
    collectives: ``collectives/n_calls`` (distinct calls),
    ``collectives/wait_ms_mean`` and ``collectives/wait_ms_p90`` (per rank and call: last arrival − own
    arrival), ``collectives/skew_ms_max`` (last − first arrival), ``collectives/busbw_gbps_p50`` (NCCL-tests
    bus bandwidth), ``straggler/rank`` (the rank most often last to arrive among calls matched on ≥ 2
    ranks) and ``straggler/last_arrival_pct`` (its share of those calls, %).

    Returns:
        ``(metrics, tags)``; tags: ``tracelake.straggler_rank`` when a straggler is found.
    """
    m: dict[str, float] = {}
    tags: dict[str, str] = {}
    if collectives is None or not len(collectives):
        return m, tags
    c = collectives
    m["collectives/n_calls"] = float(c["match_key"].nunique())
    wait = c["wait_ns"].dropna().astype(float)
    if len(wait):
        m["collectives/wait_ms_mean"] = float(wait.mean()) / 1e6
        m["collectives/wait_ms_p90"] = float(wait.quantile(0.9)) / 1e6
    if c["skew_ns"].notna().any():
        m["collectives/skew_ms_max"] = float(c["skew_ns"].max()) / 1e6
    bw = c["busbw_gbps"].dropna()
    if len(bw):
        m["collectives/busbw_gbps_p50"] = float(bw.median())
    multi = c[(c["n_ranks_matched"].fillna(0) >= 2)]
    last = multi[multi["is_last_arrival"].fillna(False).astype(bool)]
    if len(last):
        counts = last.groupby("rank")["match_key"].nunique().sort_index()
        rank = int(counts.idxmax())
        m["straggler/rank"] = float(rank)
        m["straggler/last_arrival_pct"] = float(counts.max()) / float(multi["match_key"].nunique()) * 100
        tags["tracelake.straggler_rank"] = str(rank)
    return m, tags


def regression_metrics(regressions: pd.DataFrame) -> tuple[dict[str, float], dict[str, str]]:
    """MLflow metrics/tags of one run's ``regressions`` rows (:mod:`jobs.fleet.regressions`).

    Metrics ``regression/<metric>/change_pct``, ``regression/<metric>/delta`` and
    ``regression/<metric>/p_value`` where defined; tag ``tracelake.regression``: ``regression`` when any
    metric regressed, else ``improvement`` when any improved, else ``inconclusive`` when any could not be decided,
    else ``unchanged`` or ``no_baseline``; ``regression/<metric>/change_ci_low_pct`` / ``change_ci_high_pct`` and
    ``p_adjusted`` too where defined. Tag ``tracelake.regression_summary``: the job step p50 row in words
    (``regressions.summary``: change, interval, verdict, reason and what would decide, steps compared).
    """
    m: dict[str, float] = {}
    if regressions is None or not len(regressions):
        return m, {}
    for r in regressions.itertuples():
        for col in ("change_pct", "delta", "p_value", "p_adjusted", "change_ci_low_pct", "change_ci_high_pct"):
            v = getattr(r, col, None)
            if _finite(v):
                m[f"regression/{r.metric}/{col}"] = float(v)
    verdicts = set(regressions["verdict"])
    overall = next(
        (v for v in ("regression", "improvement", "inconclusive", "unchanged") if v in verdicts), "no_baseline"
    )
    tags = {"tracelake.regression": overall}
    if "summary" in regressions.columns:
        p50 = regressions[regressions["metric"] == "step_time_p50_ns"]["summary"].dropna()
        if len(p50):
            tags["tracelake.regression_summary"] = str(p50.iloc[0])[:4000]  # MLflow tag values: ≤ 5,000 chars
    return m, tags


def _run_rows(df: pd.DataFrame | None, job_id, attempt) -> pd.DataFrame | None:
    """The rows of one run (job_id, attempt) of an optional table; None when the table is None or empty."""
    if df is None or not len(df):
        return None
    return df[(df["job_id"] == job_id) & (df["attempt"] == attempt)]


def finding_metrics(
    findings: pd.DataFrame | None, coverage: pd.DataFrame | None = None
) -> tuple[dict[str, float], dict[str, str]]:
    """MLflow metrics and tags of one run's ``findings`` and ``rule_coverage`` rows.

    Metrics: ``finding/<rule>/lost_ms_per_step`` (the rule's largest ``est_time_lost_per_step_ns``, ms, 3 decimals)
    and ``coverage/n_rules_ran|ran_on_trace|not_applicable|not_run`` (rules per coverage status; left out when the
    warehouse has no coverage for the run). Tags (:func:`jobs.publish.verdict.job_verdict`): ``tracelake.verdict``
    (``ok``, ``findings``, ``partly_judged``, ``not_judged``, ``coverage_unknown``) and ``tracelake.top_finding``
    (the rule of ``rank_order`` 1; ``none`` only when the verdict is ``ok``; otherwise the verdict).
    """
    v = job_verdict(findings, coverage)
    metrics: dict[str, float] = dict(v.coverage_metrics())
    if findings is not None and len(findings):
        lost = pd.to_numeric(findings["est_time_lost_per_step_ns"], errors="coerce")
        metrics.update(
            {
                f"finding/{rule}/lost_ms_per_step": round(float(x) / 1e6, 3)
                for rule, x in lost.groupby(findings["rule"]).max().items()
                if x == x
            }
        )
    return metrics, {"tracelake.top_finding": v.top_finding_tag, "tracelake.verdict": v.status}


#: Metrics under names that sort before every other (digits first), so MLflow's runs table and its compare view,
#: which list metrics by name, open on what a performance engineer reads first; each repeats a metric of the run.
LEAD_METRICS = {
    "1_job_step_p50_ms": "step_time_p50_ms",
    "2_job_step_p90_ms": "step_time_p90_ms",
    "3_gpu_idle_pct": "idle_pct",
    "4_exposed_comm_pct": "exposed_comm_pct",
}
#: … and the top finding's estimated time lost per step, ms (its rule in the tag ``tracelake.top_finding``).
TOP_FINDING_METRIC = "5_top_finding_ms_per_step"


def lead_metrics(metrics: dict[str, float], findings: pd.DataFrame | None) -> dict[str, float]:
    """:data:`LEAD_METRICS` from a run's ``metrics`` (those it has) and :data:`TOP_FINDING_METRIC` from the finding of
    ``rank_order`` 1 (ms; left out without a finding with an estimate)."""
    out = {k: metrics[m] for k, m in LEAD_METRICS.items() if m in metrics}
    if findings is not None and len(findings) and "est_time_lost_per_step_ns" in findings.columns:
        top = findings.sort_values("rank_order") if "rank_order" in findings.columns else findings
        est = pd.to_numeric(top["est_time_lost_per_step_ns"], errors="coerce").dropna()
        if len(est):
            out[TOP_FINDING_METRIC] = round(float(est.iloc[0]) / 1e6, 3)
    return out


def run_description(
    metrics: dict[str, float], findings: pd.DataFrame | None, coverage: pd.DataFrame | None, top: int = 3
) -> str:
    """The run's description (MLflow tag ``mlflow.note.content``, Markdown): the verdict in words
    (:func:`jobs.publish.verdict.job_verdict`), the job step time and GPU idle, and the ``top`` findings with their
    estimated time lost per step and what to do."""
    v = job_verdict(findings, coverage)
    n = len(findings) if findings is not None else 0
    said = f"{n} finding(s), the largest estimated loss first." if n else v.headline
    lines = [f"**{v.status.replace('_', ' ')}**: {said}", ""]
    if n and v.unknown:
        lines += [f"Not judged: {'; '.join(v.unknown)}.", ""]
    if n and v.uncertain:
        lines += [f"Uncertain, because the profiler warned about its own data: {'; '.join(v.uncertain)}.", ""]
    facts = []
    if "step_time_p50_ms" in metrics:
        facts.append(f"job step time p50 {metrics['step_time_p50_ms']:,.2f} ms")
    if "step_time_p90_ms" in metrics:
        facts.append(f"p90 {metrics['step_time_p90_ms']:,.2f} ms")
    if "idle_pct" in metrics:
        facts.append(f"GPU idle {metrics['idle_pct']:.1f} % of its active span")
    if "n_ranks" in metrics:
        facts.append(f"{int(metrics['n_ranks'])} rank(s)")
    if facts:
        lines += ["; ".join(facts) + ".", ""]
    if findings is not None and len(findings):
        f = findings.sort_values("rank_order") if "rank_order" in findings.columns else findings
        for i, r in enumerate(f.head(top).itertuples(), 1):
            est = pd.to_numeric(getattr(r, "est_time_lost_per_step_ns", None), errors="coerce")
            lost = f" (~{est / 1e6:,.2f} ms per step)" if pd.notna(est) else ""
            lines.append(f"{i}. {r.title}{lost}. {getattr(r, 'recommendation', '') or ''}".rstrip())
    return "\n".join(lines).strip()[:4900]


def captured_window_ms(captures: pd.DataFrame) -> tuple[int, int] | None:
    """``(start, end)`` of the profiled window in epoch ms: the earliest ``trace_start_ns`` and the latest
    ``trace_end_ns`` of the ingested captures, when they are wall-clock times (after 2015-01-01); else ``None``
    (a relative clock: the run keeps its logging time)."""
    ing = captures[captures["status"] == "ingested"] if "status" in captures.columns else captures
    if not {"trace_start_ns", "trace_end_ns"} <= set(ing.columns) or not len(ing):
        return None
    start = pd.to_numeric(ing["trace_start_ns"], errors="coerce").min()
    end = pd.to_numeric(ing["trace_end_ns"], errors="coerce").max()
    if pd.isna(start) or pd.isna(end) or start < _EPOCH_MIN_NS or end < start or end > time.time_ns() + 86_400e9:
        return None
    return int(start // 10**6), int(end // 10**6)


@dataclass
class RunExtras:
    """What a caller adds to a run of :func:`log_jobs`, in the same calls: ``metrics`` and ``tags`` (with the run's
    own, one ``log_batch``), ``files`` (``{artifact path: UTF-8 text}``, e.g. ``report/job_report.html``, with the
    run's own artifacts, one ``log_artifacts``) and ``failed`` (the run ends ``FAILED``)."""

    metrics: dict[str, float] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    files: Callable[[], dict[str, str]] | None = None  # called when the run's artifacts are written
    failed: bool = False


def log_jobs(
    tracking_uri: str,
    warehouse: str,
    captures: pd.DataFrame,
    ranks: pd.DataFrame,
    steps: pd.DataFrame,
    neuron_summary: pd.DataFrame | None = None,
    failed_jobs: frozenset = frozenset(),
    collectives: pd.DataFrame | None = None,
    regressions: pd.DataFrame | None = None,
    findings: pd.DataFrame | None = None,
    client=None,
    rule_coverage: pd.DataFrame | None = None,
    heads: dict | None = None,
    extras: Callable[[tuple[str, int]], RunExtras] | None = None,
) -> dict[tuple[str, int], str]:
    """Log one MLflow run per (job_id, attempt) found in ``captures``, replacing an earlier one (:func:`replace_run`).

    Params: ``world_size``, ``device_name``, ``torch_version``, ``runtime_version``, ``trace_format``, ``n_captures``.
    Jobs with Neuron device profiles also get the ``neuron/…`` hardware metrics
    (:func:`jobs.normalize.neuron.metrics.neuron_metrics_for_mlflow`) and a ``neuron_findings.json``
    artifact (:func:`jobs.analyze.findings.neuron.neuron_findings`).
    Tags: ``tracelake.job_id``, ``tracelake.attempt``, ``tracelake.capture_uris`` (first 20;
    all of them in the ``captures.json`` artifact). Artifacts: ``steps.csv``, ``ranks.csv``,
    ``captures.json`` and ``findings.json`` (schema ``schemas/findings.v1.json``).

    Runs of ``failed_jobs`` (failed validation) end ``FAILED`` instead of ``FINISHED``.
    With ``collectives`` (the ``collectives`` rows), the collective and straggler metrics of
    :func:`collective_metrics`; with ``regressions`` (``regressions`` rows), :func:`regression_metrics`
    and the tags ``tracelake.job_name`` / ``tracelake.model`` from ``captures``. With ``findings``
    and ``rule_coverage`` (:func:`finding_metrics`, always logged: without findings rows the verdict is still
    earned from the coverage): the tags ``tracelake.verdict`` and ``tracelake.top_finding`` (the rule that loses
    the most time; ``none`` only when the verdict is ``ok``), ``finding/<rule>/lost_ms_per_step`` and the
    ``coverage/…`` counts.
    ``client``: an ``MlflowClient`` of ``tracking_uri`` to reuse (default: a new one), so that one publish
    run sets up one client (:func:`jobs.publish.job_runs.publish_jobs`). ``heads``: ``{(job_id, attempt): headline
    metrics}`` (:func:`jobs.publish.headline.headline` of these rows) when the caller made it; default: made here.
    ``extras``: ``(job_id, attempt)`` → :class:`RunExtras` (the validation report, the job report) logged in the
    run's own calls.

    Every run is made and its metrics logged first, then each run's artifacts go in one ``log_artifacts`` call
    and the run ends (``FINISHED`` once everything is attached): five tracking calls a run, whatever it carries.

    Returns:
        ``{(job_id, attempt): run_id}``.

    Raises:
        jobs.common.ids.DiscoveryError: a ``job_id`` that is not path-safe.
    """
    from mlflow.entities import Metric, Param, RunTag  # heavy: mlflow

    client = client or client_for(tracking_uri)
    exp_id = experiment_id(client, EXPERIMENT, tracking_uri, warehouse)
    out, logged = {}, []
    # every job's headline in one run_summary (not one per job), unless the caller has it
    heads = headline(steps, ranks, captures) if heads is None else heads
    for (job_id, attempt), cap in captures.groupby(["job_id", "attempt"], sort=True):
        safe_id(job_id, "job_id", "captures")  # quoted into an MLflow filter and a findings_json path below
        jr = ranks[(ranks["job_id"] == job_id) & (ranks["attempt"] == attempt)]
        js = steps[(steps["job_id"] == job_id) & (steps["attempt"] == attempt)]
        window = captured_window_ms(cap)
        run_id = replace_run(
            client,
            exp_id,
            f"tags.`tracelake.job_id` = '{job_id}' and tags.`tracelake.attempt` = '{attempt}'",
            f"{job_id}#{attempt}",
            start_time=window[0] if window else None,
        )
        ingested = cap[cap["status"] == "ingested"]
        first = lambda col, ingested=ingested: next(  # noqa: E731
            (_param(v) for v in ingested[col] if v is not None and v == v), "unknown"
        )
        params = {
            "world_size": first("world_size"),
            "device_name": first("device_name"),
            "torch_version": first("torch_version"),
            "runtime_version": first("runtime_version"),
            "trace_format": first("format"),
            "n_captures": str(len(cap)),
        }
        metrics = job_metrics(jr, js, cap, head=heads.get((str(job_id), int(attempt)), {}))
        neuron_rows = _run_rows(neuron_summary, job_id, attempt)
        if neuron_rows is not None and len(neuron_rows):
            metrics.update(neuron_metrics_for_mlflow(neuron_rows))
        else:
            neuron_rows = None
        extra_tags: dict[str, str] = {}
        cm, ct = collective_metrics(_run_rows(collectives, job_id, attempt), js)
        metrics.update(cm)
        extra_tags.update(ct)
        jr_regressions = _run_rows(regressions, job_id, attempt)
        if jr_regressions is not None:
            rm, rt = regression_metrics(jr_regressions)
            metrics.update(rm)
            extra_tags.update(rt)
        jf, jc = _run_rows(findings, job_id, attempt), _run_rows(rule_coverage, job_id, attempt)
        fm, ft = finding_metrics(jf, jc)
        metrics.update(fm)
        extra_tags.update(ft)
        metrics.update(lead_metrics(metrics, jf))
        extra_tags["mlflow.note.content"] = run_description(metrics, jf, jc)
        for col in ("job_name", "model"):
            if col in ingested and ingested[col].notna().any():
                extra_tags[f"tracelake.{col}"] = str(ingested[col].dropna().iloc[0])[:5000]
        metrics["n_events"] = float(ingested["n_events"].sum())
        metrics["n_quarantined"] = float((cap["status"] == "quarantined").sum())
        metrics["n_cataloged"] = float((cap["status"] == "cataloged").sum())
        more = extras((str(job_id), int(attempt))) if extras is not None else RunExtras()
        metrics.update(more.metrics)
        uris = sorted(cap["uri"])
        tags = {
            "tracelake.job_id": job_id,
            "tracelake.attempt": str(attempt),
            "tracelake.capture_uris": ",".join(uris[:20])[:4000],
            "tracelake.warehouse": str(warehouse),
            **extra_tags,
            **more.tags,
        }
        now = int(time.time() * 1000)
        client.log_batch(
            run_id,
            metrics=[Metric(k, rounded(k, v), now, 0) for k, v in sorted(metrics.items())],
            params=[Param(k, v) for k, v in params.items()],
            tags=[RunTag(k, v) for k, v in tags.items()],
        )  # MLflow splits it into batches it accepts
        logged.append((job_id, attempt, run_id, js, jr, cap, neuron_rows, more, window))
        out[(job_id, int(attempt))] = run_id
    # the artifacts after every run's metrics: a caller's files (job reports rendered meanwhile) are ready by then
    for job_id, attempt, run_id, js, jr, cap, neuron_rows, more, window in logged:
        with tempfile.TemporaryDirectory() as tmp:
            _run_files(tmp, warehouse, job_id, attempt, js, jr, cap, neuron_rows)
            write_texts(tmp, more.files() if more.files is not None else {})
            client.log_artifacts(run_id, tmp)  # every file in one call: one artifact-store lookup, not one each
        failed = job_id in failed_jobs or more.failed
        # the run spans the profiled window: MLflow's "Duration" is the captured time, not the logging time
        client.set_terminated(run_id, status="FAILED" if failed else "FINISHED", end_time=window[1] if window else None)
    return out


def write_texts(folder: str, texts: dict[str, str]) -> None:
    """Write each ``{path relative to folder: text}`` (UTF-8) under ``folder``, its subfolders made."""
    for rel, text in texts.items():
        path = Path(folder, rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def log_texts(client, run_id: str, texts: dict[str, str]) -> None:
    """Log each ``{artifact path: text}`` (UTF-8, e.g. ``report/job_report.html``) to the run in one artifact call
    (one artifact-store lookup for them all)."""
    with tempfile.TemporaryDirectory() as tmp:
        write_texts(tmp, texts)
        client.log_artifacts(run_id, tmp)


def _run_files(tmp: str, warehouse: str, job_id, attempt, js, jr, cap, neuron_rows) -> None:
    """Write a run's own artifacts (:func:`log_jobs`) into folder ``tmp``."""
    js.sort_values(["rank", "step"]).to_csv(os.path.join(tmp, "steps.csv"), index=False)
    jr.sort_values(["rank"]).to_csv(os.path.join(tmp, "ranks.csv"), index=False)
    Path(tmp, "captures.json").write_text(
        json.dumps(cap.drop(columns=["flags"], errors="ignore").to_dict(orient="records"), indent=1, default=str)
    )
    fs, fj = fsspec.core.url_to_fs(
        "/".join([str(warehouse).rstrip("/"), "findings_json", str(job_id), str(attempt), "findings.json"])
    )
    if fs.exists(fj):  # local disk or an object store alike
        Path(tmp, "findings.json").write_bytes(fs.cat_file(fj))
    if neuron_rows is not None:
        neuron_rows.to_csv(os.path.join(tmp, "neuron_summary.csv"), index=False)
        Path(tmp, "neuron_findings.json").write_text(
            json.dumps(neuron_findings(neuron_rows).to_pylist(), indent=1, default=str)
        )
