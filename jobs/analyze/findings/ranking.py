"""Ranked bottleneck findings per job: the ``findings`` table and ``findings.json``.

:func:`job_findings` runs the rules of :mod:`jobs.analyze.findings.rules` (GPU / Kineto) and
:func:`jobs.analyze.findings.neuron.neuron_findings` (Trainium / Inferentia) over the analysis
tables of a job and ranks every finding of a (job_id, attempt) by estimated time lost per step
(``rank_order`` 1 = most; unknown last; ties: higher confidence, then ``finding_id``).
:func:`findings_document` turns the rows of one job into the ``findings.json`` document
(JSON Schema ``schemas/findings.v1.json``, draft 2020-12), for people and automated agents.

Rules (thresholds and rationale: :mod:`jobs.analyze.findings.rules`):

=========================  ================================  ===========  =========================================
rule                       metric                            fires at     time lost per step
=========================  ================================  ===========  =========================================
``host_bound_launch``      cpu_bound_pct_of_step             ≥ 10 %       ``cpu_bound_time_ns``
``many_tiny_kernels``      short_kernel_pct_of_launches      ≥ 50 %, ≥    launch time of short kernels, ≤ GPU idle
                                                             50 / step
``exposed_communication``  exposed_comm_pct_of_step          ≥ 10 %       Σ max(0, exposed − wait) of collectives
``straggler_rank``         last_arrival_pct                  ≥ 2/n,       Σ median wait of the others where last
                                                             ≥ 25 %
``dataloader_bound``       dataloader_pct_of_step            > 5 %        data-loader time, ≤ GPU idle
``blocking_sync``          sync_blocked_pct_of_step          ≥ 1 % or ≥   blocked time in sync calls, ≤ GPU idle
                                                             10 calls
``memcpy_bound``           memory_exposed_pct_of_step        ≥ 10 %       copy time not under compute/comm
``pageable_memcpy``        pageable_copy_pct_of_gpu_busy     ≥ 10 %       pageable copy time
``low_gpu_utilization``    gpu_busy_pct_of_step              < 50 %       GPU idle − CPU-bound − data loader
``kernels_below_peak``     recoverable_pct_of_step           ≥ 5 %        kernel time × (1 − roofline % / 70 %)
``neuron_*``               see :mod:`jobs.analyze.findings.neuron` (per profiled NEFF execution)
=========================  ================================  ===========  =========================================

Inputs (``tables``: table name → pandas DataFrame; missing keys and empty frames are allowed, a
rule without its inputs does not fire). Columns read (beyond job_id, attempt, rank; ``date`` is
taken from the first table that has it). The rules judge the job's *analysis windows*
(:func:`jobs.analyze.windows.analysis_windows` of ``steps``, ``ranks`` and ``captures``): a rank capture
without ProfilerStep is judged on its whole trace as one window (step -1):

* ``steps`` (STEPS): capture_id, step, step_time_ns, kernel_time_ns, idle_time_ns, n_kernels,
  compute_time_ns, comm_time_ns, overlap_pct, exposed_comm_ns, memory_time_ns, idle_*_ns,
  n_launches, launch_runtime_ns, launch_delay_p50_ns, n_short_kernels, memcpy_bytes,
  memcpy_bw_gbps, dataloader_time_ns, cpu_bound_time_ns, cpu_op_time_ns. Required for every rule
  but ``straggler_rank``.
* ``ranks`` (RANKS): the whole-trace window of a rank capture with no ``steps`` row (same columns).
* ``captures`` (CAPTURES), optional: capture_id, trace_start_ns, trace_end_ns — the span of a
  whole-trace window (without it, the GPU's active span).
* ``kernels`` (KERNELS): capture_id, step, name, kernel_type, n, total_ns, mean_ns — evidence, and the
  pageable copies of ``pageable_memcpy``.
* ``collectives`` (COLLECTIVES): capture_id, step, event_id, match_key, collective, name, dur_ns,
  wait_ns, skew_ns, exposed_ns, is_last_arrival, n_ranks_matched, msg_bytes, busbw_gbps.
* ``critical_path`` (CRITICAL_PATH): scope, path_rank, step, rank, capture_id, event_id, name,
  dur_ns, bound_by — corroboration and evidence.
* ``events``: a **reduced** EVENTS frame is enough — :data:`EVENTS_COLUMNS` of the rows
  :func:`rule_events_filter` keeps (host calls named in :data:`RULE_EVENT_NAMES`: synchronizations, host copies,
  CUDA-graph launches and captures; user annotations that declare a step synchronizes by design); rows with a null
  ``step`` are ignored, except on a capture judged on its whole trace, where they belong to that window.
  ``blocking_sync`` and ``host_bound_launch`` read it.
* ``neuron_summary`` (NEURON_SUMMARY), optional: passed to ``neuron_findings``.
* ``op_efficiency`` (OP_EFFICIENCY), optional: rank, op_name, shape_sig, dtype, kind, precision, bound,
  kernel_time_ns, roofline_pct — ``kernels_below_peak``.
* ``utilization_windows``, ``comm_sites``, optional: the drill-down rows each finding links to
  (``evidence.links``, :func:`evidence_links`).

Evidence (``evidence_json``, and ``evidence`` in findings.json) of the GPU rules: ``job_id``,
``attempt``, ``scope`` (``job`` | ``rank``), ``window`` (``step`` | ``trace`` | ``mixed``: ProfilerSteps,
whole traces of ranks without ProfilerStep, or both), ``rank`` (rank scope), ``threshold``, ``comparison``,
``n_rank_steps``, ``n_ranks``, ``per_rank`` (rank, n_steps, value, est_time_lost_per_step_ns,
steps), ``events`` (rank, capture_id, step, event_id, name, dur_ns, … of ``events``) and a
rule-specific ``details`` object whose times are sums over the scope's rank-steps (``*_per_step``,
``*_median`` and ``*_share`` keys say otherwise). Neuron evidence keeps its own keys (with job_id,
attempt, rank).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from jobs.analyze.findings.neuron import RULES as NEURON_RULES
from jobs.analyze.findings.neuron import neuron_findings
from jobs.analyze.findings.rules import BY_DESIGN_ANNOTATION, RULES, SYNC_NAMES, THRESHOLDS, JobTables
from jobs.analyze.findings.uncertainty import mark_uncertain, warned_rules
from jobs.analyze.trace.launches import GRAPH_CAPTURE_NAMES, GRAPH_LAUNCH_NAMES, HOST_COPY_NAMES
from jobs.analyze.windows import WHOLE_TRACE_STEP, WINDOW_TRACE, analysis_windows
from jobs.common.floats import finite_float
from schemas.tables import FINDINGS

__all__ = [
    "job_findings",
    "findings_document",
    "rank_findings",
    "SCHEMA_PATH",
    "SCHEMA_VERSION",
    "EVENTS_COLUMNS",
    "RULE_EVENT_NAMES",
    "rule_events_filter",
    "evidence_links",
    "RULE_NAMES",
    "SYNC_NAMES",
    "validate_document",
    "finding_window",
    "LOST_UNITS",
    "LOST_WORDS",
]

#: How a finding's ``est_time_lost_per_step_ns`` reads, by its evidence ``window``: per ProfilerStep, over the whole
#: trace (no ProfilerStep), or per window when a job mixes both.
LOST_UNITS = {"step": "ms/step", "trace": "ms over the trace", "mixed": "ms per window"}
#: The same in a sentence.
LOST_WORDS = {**LOST_UNITS, "step": "ms per step"}


def finding_window(evidence_json) -> str:
    """The ``window`` (``step`` | ``trace`` | ``mixed``) of a finding's ``evidence_json``; ``step`` when it does not
    say (Neuron findings, older rows)."""
    try:
        w = json.loads(evidence_json).get("window") if isinstance(evidence_json, str) and evidence_json else None
    except (ValueError, AttributeError):
        w = None
    return w if w in LOST_UNITS else "step"


#: JSON Schema of findings.json.
SCHEMA_PATH = Path(__file__).resolve().parents[3] / "schemas" / "findings.v1.json"
SCHEMA_VERSION = "1"
#: Columns of the reduced ``events`` frame ``blocking_sync`` reads (``capture_id``, ``tid``, ``event_id`` optional).
EVENTS_COLUMNS = (
    "job_id",
    "attempt",
    "rank",
    "capture_id",
    "step",
    "event_id",
    "category",
    "name",
    "ts_ns",
    "dur_ns",
    "tid",
)
#: Rows per drill-down table in a finding's ``evidence.links`` (:func:`evidence_links`).
MAX_LINKS = 10
#: Host call names the rules read from ``events`` (:func:`rule_events_filter`).
RULE_EVENT_NAMES: tuple[str, ...] = (*SYNC_NAMES, *HOST_COPY_NAMES, *GRAPH_LAUNCH_NAMES, *GRAPH_CAPTURE_NAMES)


def rule_events_filter():
    """The ``events`` rows the rules read, as a pyarrow dataset expression (also ``pa.Table.filter``-able): host
    calls (``cuda_runtime``, ``cpu_op``, ``cuda_driver``) named in :data:`RULE_EVENT_NAMES`, and user annotations
    matching :data:`jobs.analyze.findings.rules.BY_DESIGN_ANNOTATION`."""
    host = ds.field("category").isin(["cuda_runtime", "cpu_op", "cuda_driver"]) & ds.field("name").isin(
        list(RULE_EVENT_NAMES)
    )
    note = (ds.field("category") == "user_annotation") & pc.match_substring_regex(
        ds.field("name"), pattern=BY_DESIGN_ANNOTATION
    )
    return host | note


#: Every rule name (GPU rules, then Neuron rules).
RULE_NAMES: tuple[str, ...] = (*(r for r, _ in RULES), *NEURON_RULES)
_REQUIRED = {
    "steps": ("job_id", "attempt", "rank", "step", "step_time_ns", "kernel_time_ns", "idle_time_ns", "n_kernels"),
    "collectives": ("job_id", "attempt", "rank", "match_key", "is_last_arrival", "n_ranks_matched", "wait_ns"),
    "critical_path": ("job_id", "attempt", "scope", "path_rank", "step", "rank", "bound_by", "dur_ns"),
    "kernels": ("job_id", "attempt", "rank", "name", "n", "total_ns"),
    "events": ("job_id", "attempt", "rank", "step", "name", "ts_ns", "dur_ns"),
}
_META_KEY = b"tracelake.generated_from"


def _frame(tables: Mapping, name: str) -> pd.DataFrame:
    df = tables.get(name)
    if df is None:
        return pd.DataFrame()
    if isinstance(df, (pa.Table, pa.RecordBatch)):
        df = df.to_pandas()
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"job_findings: tables[{name!r}] must be a pandas DataFrame, got {type(df).__name__}")
    if len(df):
        missing = [c for c in _REQUIRED.get(name, ()) if c not in df.columns]
        if missing:
            raise ValueError(f"job_findings: table {name!r} lacks column(s) {missing}")
    return df


def _prepare_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """STEPS rows with busy_ns, gpu_idle_ns and has_gpu (finding_rules.JobTables)."""
    s = steps.copy()
    s["step_time_ns"] = pd.to_numeric(s["step_time_ns"], errors="coerce").fillna(0).astype(float)
    kt = pd.to_numeric(s["kernel_time_ns"], errors="coerce").fillna(0).astype(float)
    it = pd.to_numeric(s["idle_time_ns"], errors="coerce").fillna(0).astype(float)
    s["busy_ns"] = np.clip(kt - it, 0, s["step_time_ns"])
    s["gpu_idle_ns"] = s["step_time_ns"] - s["busy_ns"]
    s["has_gpu"] = pd.to_numeric(s["n_kernels"], errors="coerce").fillna(0) > 0
    return s


def job_windows(steps: pd.DataFrame, ranks: pd.DataFrame, captures: pd.DataFrame | None = None) -> pd.DataFrame:
    """The analysis windows the rules judge (:func:`jobs.analyze.windows.analysis_windows`: ProfilerSteps, or the
    whole trace of a rank capture without one), with the derived ``busy_ns``, ``gpu_idle_ns`` (ns) and ``has_gpu``
    of :class:`jobs.analyze.findings.rules.JobTables` and ``window`` (``"step"`` | ``"trace"``).

    A capture that ``captures`` says has ProfilerSteps (``n_profiler_steps`` > 0) gets no whole-trace window even
    when none of its steps is left (e.g. all cut short by a truncated trace: :func:`drop_truncated_steps`)."""
    if len(ranks) and captures is not None and len(captures) and "n_profiler_steps" in captures:
        stepped = captures.loc[pd.to_numeric(captures["n_profiler_steps"], errors="coerce").fillna(0) > 0, "capture_id"]
        ranks = ranks[~ranks["capture_id"].isin(set(stepped))]
    w = analysis_windows(steps if len(steps) else None, ranks if len(ranks) else None, captures)
    if w.empty:
        w = pd.DataFrame(columns=[*_REQUIRED["steps"], "window"])
    return _prepare_steps(w)


def events_in_windows(events: pd.DataFrame, windows: pd.DataFrame) -> pd.DataFrame:
    """``events`` with ``step`` = -1 (:data:`jobs.analyze.windows.WHOLE_TRACE_STEP`) on the rows outside any
    ProfilerStep of a capture judged on its whole trace (its window covers them); other rows unchanged."""
    if events.empty or windows.empty or "capture_id" not in events or "window" not in windows:
        return events
    whole = set(windows.loc[windows["window"] == WINDOW_TRACE, "capture_id"])
    if not whole:
        return events
    m = events["capture_id"].isin(whole) & events["step"].isna()
    if not m.any():
        return events
    ev = events.copy()
    ev["step"] = ev["step"].astype("Float64").mask(m, WHOLE_TRACE_STEP)
    return ev


#: The ``utilization_windows`` causes that show each rule's time in the step (``low_gpu_utilization``: every cause).
RULE_WINDOW_CAUSES: dict[str, tuple[str, ...] | None] = {
    "host_bound_launch": ("host",),
    "many_tiny_kernels": ("host",),
    "blocking_sync": ("sync",),
    "dataloader_bound": ("dataloader",),
    "memcpy_bound": ("memcpy",),
    "pageable_memcpy": ("memcpy",),
    "low_gpu_utilization": None,
}
#: Rules whose time is at collective call sites (``comm_sites``).
RULE_COMM_SITES = ("exposed_communication", "straggler_rank")


def evidence_links(rule: str, ranks, steps, job: Mapping[str, pd.DataFrame], limit: int = MAX_LINKS) -> dict:
    """The rows of the drill-down tables behind a finding (``evidence.links``): the longest ``utilization_windows``
    of its ranks and steps with the causes of :data:`RULE_WINDOW_CAUSES` (``rank``, ``step``, ``window_id`` — the
    table's key — ``dur_ns``, ``cause``, ``cause_op``), and for :data:`RULE_COMM_SITES` the ``comm_sites`` with the
    most exposed time (``step``, ``site``, ``exposed_max_ns``, ``wait_max_ns``, ``saving_ns``); at most ``limit``
    each. ``kernels_below_peak`` names its op groups in its details."""
    out: dict = {}
    ranks, steps = set(ranks or []), set(steps or [])
    w = job.get("utilization_windows", pd.DataFrame())
    if rule in RULE_WINDOW_CAUSES and len(w) and {"rank", "step", "window_id", "dur_ns", "cause"} <= set(w):
        causes = RULE_WINDOW_CAUSES[rule]
        m = w["rank"].isin(ranks) if ranks else pd.Series(True, index=w.index)
        if steps:
            m &= w["step"].isin(steps)
        if causes is not None:
            m &= w["cause"].isin(causes)
        top = w[m].sort_values(["dur_ns", "rank", "step", "window_id"], ascending=[False, True, True, True]).head(limit)
        out["utilization_windows"] = [
            {k: _plain(r.get(k)) for k in ("rank", "step", "window_id", "dur_ns", "cause", "cause_op")}
            for r in top.to_dict("records")
        ]
    c = job.get("comm_sites", pd.DataFrame())
    if rule in RULE_COMM_SITES and len(c) and {"step", "site", "exposed_max_ns"} <= set(c):
        m = c["step"].isin(steps) if steps else pd.Series(True, index=c.index)
        top = c[m].sort_values(["exposed_max_ns", "step", "site"], ascending=[False, True, True]).head(limit)
        out["comm_sites"] = [
            {k: _plain(r.get(k)) for k in ("step", "site", "exposed_max_ns", "wait_max_ns", "saving_ns")}
            for r in top.to_dict("records")
        ]
    return out


def _plain(v):
    """A JSON-ready scalar: a number as an int (every linked column is an id or ns; an engine may have read an
    integer column with nulls as floats), NaN / NA as None, text as text."""
    if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)):
        return None
    if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
        return int(round(float(v)))
    return v


def _of_job(df: pd.DataFrame, job_id, attempt) -> pd.DataFrame:
    if df.empty:
        return df
    return df[(df["job_id"] == job_id) & (df["attempt"] == attempt)]


def _date(frames: dict[str, pd.DataFrame], job_id, attempt) -> str:
    for df in frames.values():
        if not df.empty and "date" in df:
            d = _of_job(df, job_id, attempt)["date"].dropna()
            if len(d):
                return str(d.iloc[0])
    return "unknown"


def _json_default(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return finite_float(v)
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, np.ndarray):
        return v.tolist()
    raise TypeError(f"not JSON serializable: {type(v).__name__}")


def _clean(v):
    """NaN/inf → None, recursively (strict JSON)."""
    if isinstance(v, float):
        return finite_float(v)
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


def drop_truncated_steps(steps: pd.DataFrame, captures: pd.DataFrame | None) -> pd.DataFrame:
    """``steps`` without the rank-steps that a truncated trace cut short (bug case B22).

    A capture flagged ``partial_trace`` by normalize (events stop well before the last ProfilerStep
    ends, or the profiler reported dropped events) has no events for the tail of its last step(s); the
    rules would read that tail as GPU idle. Rank-steps of such a capture whose window
    (``step_start_ns + step_time_ns``) ends after the capture's ``trace_end_ns`` are dropped.

    Args:
        steps: ``steps`` rows; captures: ``captures`` rows (``capture_id``, ``flags``, ``trace_end_ns``) or None.
    """
    if captures is None or not len(captures) or not len(steps) or "flags" not in captures:
        return steps
    partial = captures[captures["flags"].map(lambda f: f is not None and "partial_trace" in list(f))]
    if not len(partial):
        return steps
    end = dict(zip(partial["capture_id"], partial["trace_end_ns"]))
    cut = steps["capture_id"].map(end)
    step_end = steps["step_start_ns"].astype("float64") + steps["step_time_ns"].astype("float64")
    return steps[~(cut.notna() & (step_end > cut.astype("float64")))]


def rank_findings(rows: list[dict]) -> list[dict]:
    """Set ``rank_order`` 1..n per (job_id, attempt): est_time_lost_per_step_ns descending (null last),
    then confidence descending, then finding_id. Returns the rows in that order."""
    groups: dict[tuple, list[dict]] = {}
    for f in rows:
        groups.setdefault((f["job_id"], f["attempt"]), []).append(f)
    out = []
    for key in sorted(groups, key=lambda k: (str(k[0]), int(k[1]))):
        fs = groups[key]
        fs.sort(
            key=lambda f: (
                f["est_time_lost_per_step_ns"] is None,
                -(f["est_time_lost_per_step_ns"] or 0),
                -(f["confidence"] or 0),
                f["finding_id"],
            )
        )
        for i, f in enumerate(fs, 1):
            f["rank_order"] = i
        out += fs
    return out


def job_findings(tables: Mapping[str, pd.DataFrame]) -> pa.Table:
    """Ranked findings of every (job_id, attempt) present in ``tables``.

    Args:
        tables: ``"steps"``, ``"ranks"``, ``"kernels"``, ``"collectives"``, ``"critical_path"``,
            ``"events"`` (reduced, see the module docstring) and optionally ``"neuron_summary"``:
            pandas DataFrames with the declared columns (Arrow tables are accepted too). Any key
            may be missing or empty.

    Returns:
        Arrow table with exactly the :data:`schemas.tables.FINDINGS` columns, in ``rank_order``
        per (job_id, attempt). The schema metadata ``tracelake.generated_from`` holds, per job,
        the row counts of the inputs (read by :func:`findings_document`).

    Raises:
        ValueError: a non-empty input table lacks a column a rule needs (the message names it).
        TypeError: a value of ``tables`` is not a DataFrame / Arrow table.
    """
    frames = {
        n: _frame(tables, n)
        for n in (
            "steps", "ranks", "kernels", "collectives", "critical_path", "events", "op_efficiency",
            "utilization_windows", "comm_sites",
        )
    }  # fmt: skip
    captures = _frame(tables, "captures")
    keys = set()
    for df in frames.values():
        if not df.empty and "job_id" in df and "attempt" in df:
            keys |= set(zip(df["job_id"], df["attempt"].astype(int)))
    found: list[dict] = []
    meta = []
    for job_id, attempt in sorted(keys, key=lambda k: (str(k[0]), k[1])):
        job = {n: _of_job(df, job_id, attempt) for n, df in frames.items()}
        steps = job_windows(job["steps"], job["ranks"], _of_job(captures, job_id, attempt))
        t = JobTables(
            job_id=job_id,
            attempt=int(attempt),
            steps=steps,
            kernels=job["kernels"],
            collectives=job["collectives"],
            critical_path=job["critical_path"],
            events=events_in_windows(job["events"], steps),
            captures=_of_job(captures, job_id, attempt),
            op_efficiency=job["op_efficiency"],
        )
        date = _date(frames, job_id, attempt)
        for rule, fn in RULES:
            for f in fn(t):
                ev = {"job_id": job_id, "attempt": int(attempt), **f.pop("evidence")}
                ev["links"] = evidence_links(rule, f["ranks"], f["steps"], job)
                f.update(
                    date=date,
                    job_id=job_id,
                    attempt=int(attempt),
                    rank_order=0,
                    evidence_json=json.dumps(_clean(ev), sort_keys=True, default=_json_default, allow_nan=False),
                )
                found.append(f)
        meta.append(
            {
                "job_id": job_id,
                "attempt": int(attempt),
                "date": date,
                "tables": {("events_host_sync" if n == "events" else n): int(len(df)) for n, df in job.items()},
                "n_ranks": int(steps["rank"].nunique()) if len(steps) else 0,
                "n_rank_steps": int((steps["window"] != WINDOW_TRACE).sum()) if len(steps) else 0,
                "n_whole_trace_windows": int((steps["window"] == WINDOW_TRACE).sum()) if len(steps) else 0,
            }
        )
    ns = tables.get("neuron_summary")
    if ns is not None and len(ns):
        found += neuron_findings(ns).to_pylist()
    by_job: dict[tuple, list[dict]] = {}
    for f in found:
        by_job.setdefault((f["job_id"], int(f["attempt"])), []).append(f)
    for (job_id, attempt), fs in by_job.items():  # the profiler's own warnings (uncertainty.py)
        mark_uncertain(fs, warned_rules(_of_job(captures, job_id, attempt)))
    rows = rank_findings(found)
    tbl = pa.Table.from_pylist(
        [{k: _clean(f[k]) for k in FINDINGS.names} for f in rows], schema=FINDINGS.arrow_schema()
    )
    md = dict(tbl.schema.metadata or {})
    md[_META_KEY] = json.dumps(meta, sort_keys=True).encode()
    return tbl.replace_schema_metadata(md)


def findings_document(
    job_id: str,
    attempt: int,
    findings_tbl: pa.Table,
    generated_from: dict | None = None,
    coverage: pa.Table | pd.DataFrame | None = None,
) -> dict:
    """The ``findings.json`` document of one (job_id, attempt) (schema ``schemas/findings.v1.json``).

    Args:
        job_id, attempt: the job; rows of other jobs in ``findings_tbl`` are ignored.
        findings_tbl: FINDINGS rows (Arrow table or pandas DataFrame), e.g. from :func:`job_findings`.
        generated_from: extra provenance merged into ``generated_from`` (e.g. warehouse URI,
            tracelake version, run id). By default ``generated_from`` holds the input row counts
            recorded by :func:`job_findings` (when the table still carries its metadata), the rule
            names and the thresholds.
        coverage: RULE_COVERAGE rows (:func:`jobs.analyze.findings.coverage.rule_coverage`; other jobs' rows are
            ignored): when given, the document gets ``coverage``, one object per rule (rule, status, reason,
            n_ranks, n_windows, n_findings) in evaluation order.

    Returns:
        ``{"schema_version": "1", "job_id", "attempt", "generated_from", "findings": [...]}`` (+ ``"coverage"``)
        with findings in ``rank_order``; each has ``evidence`` as an object (parsed ``evidence_json``).
        Strict JSON (no NaN).
    """
    if isinstance(findings_tbl, pd.DataFrame):
        rows = findings_tbl.astype(object).where(findings_tbl.notna(), None).to_dict("records")
        md = {}
    else:
        rows = findings_tbl.to_pylist()
        md = findings_tbl.schema.metadata or {}
    gen: dict = {"table": "findings", "rules": list(RULE_NAMES), "thresholds": dict(THRESHOLDS)}
    if _META_KEY in md:
        for m in json.loads(md[_META_KEY]):
            if m["job_id"] == job_id and int(m["attempt"]) == int(attempt):
                gen.update({k: m[k] for k in ("tables", "n_ranks", "n_rank_steps", "n_whole_trace_windows") if k in m})
    gen.update(generated_from or {})
    out = []
    for r in rows:
        if r["job_id"] != job_id or int(r["attempt"]) != int(attempt):
            continue
        out.append(
            {
                "finding_id": r["finding_id"],
                "rule": r["rule"],
                "rank_order": int(r["rank_order"]),
                "title": r["title"],
                "metric": r["metric"],
                "value": finite_float(r["value"]),
                "est_time_lost_per_step_ns": None
                if r["est_time_lost_per_step_ns"] is None
                else int(r["est_time_lost_per_step_ns"]),
                "confidence": finite_float(r["confidence"]),
                "ranks": [int(x) for x in (r["ranks"] if r["ranks"] is not None else [])],
                "steps": [int(x) for x in (r["steps"] if r["steps"] is not None else [])],
                "evidence": json.loads(r["evidence_json"])
                if r["evidence_json"]
                else {"job_id": job_id, "attempt": int(attempt)},
                "recommendation": r["recommendation"],
            }
        )
    out.sort(key=lambda f: f["rank_order"])
    doc = {
        "schema_version": SCHEMA_VERSION,
        "job_id": job_id,
        "attempt": int(attempt),
        "generated_from": gen,
        "findings": out,
    }
    if coverage is not None:
        cov = coverage.to_pylist() if isinstance(coverage, pa.Table) else coverage.to_dict("records")
        doc["coverage"] = [
            {
                "rule": c["rule"],
                "status": c["status"],
                "reason": None if c["reason"] is None or c["reason"] != c["reason"] else str(c["reason"]),
                "n_ranks": int(c["n_ranks"]),
                "n_windows": int(c["n_windows"]),
                "n_findings": int(c["n_findings"]),
                **({"uncertain": str(c["uncertain"])} if isinstance(c.get("uncertain"), str) else {}),
            }
            for c in cov
            if c["job_id"] == job_id and int(c["attempt"]) == int(attempt)
        ]
    return _clean(doc)


def validate_document(doc: dict) -> None:
    """Validate a findings.json document against ``schemas/findings.v1.json`` (needs ``jsonschema``).

    Raises:
        jsonschema.ValidationError: the document does not match (the message names the path).
    """
    import jsonschema  # heavy: jsonschema (~90 ms), only document validation needs it

    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).validate(doc)
