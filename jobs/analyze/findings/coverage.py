"""Which bottleneck rules judged a job, on what windows, and why a rule did not: the ``rule_coverage`` table.

A job without findings is only "fine" when the rules could judge it. :func:`rule_coverage` gives one row per
(job_id, attempt, rule) — every GPU rule of :data:`jobs.analyze.findings.rules.RULES` for every job, plus the
Neuron rules (:data:`jobs.analyze.findings.neuron.RULES`) for a job with ``neuron_summary`` rows — with
``status`` (:data:`schemas.tables.COVERAGE_STATUSES`):

=================  ==============================================================================================
status             when
=================  ==============================================================================================
``ran``            the rule judged the job's ProfilerSteps (Neuron: its profiled executions)
``ran_on_trace``   the rule judged at least one rank on its whole trace as one window (no ProfilerStep,
                   :func:`jobs.analyze.windows.analysis_windows`); ``reason`` says on how many ranks
``not_applicable`` what the rule judges is absent: ``straggler_rank`` with one rank or no collective matched across
                   ranks, ``exposed_communication`` without communication, ``memcpy_bound`` / ``pageable_memcpy``
                   without copies, ``kernels_below_peak`` without an op whose shapes were recorded on a device
                   with a datasheet peak, GPU rules on a job of Neuron device profiles only
``not_run``        the data the rule needs is missing: no GPU activity (CPU-only trace), no host runtime events
                   (``many_tiny_kernels``, ``blocking_sync``), no host-side attribution of idle time
                   (``host_bound_launch``), no per-kernel statistics (``pageable_memcpy``), no analyzed trace
=================  ==============================================================================================

``uncertain`` names the profiler's own warnings about the data a rule that judged the job reads
(:mod:`jobs.analyze.findings.uncertainty`). ``n_ranks`` / ``n_windows`` count the ranks and windows (rank-steps or whole traces) the rule judged (0 when it
did not run); ``n_findings`` the findings it produced for the job. Reasons are plain words (no column names):
they are shown to people as the answer to "why is there no finding about X?".
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
import pyarrow as pa

from jobs.analyze.findings.neuron import RULES as NEURON_RULES
from jobs.analyze.findings.ranking import _date, _frame, _of_job, events_in_windows, job_windows
from jobs.analyze.findings.rules import RULES
from jobs.analyze.findings.uncertainty import uncertain_words, warned_rules
from jobs.analyze.windows import WINDOW_TRACE
from schemas.tables import COVERAGE_STATUSES, RULE_COVERAGE

__all__ = ["rule_coverage", "coverage_by_job", "GPU_RULES", "CPU_ONLY_REASON", "WHOLE_TRACE_REASON"]

#: The GPU / Kineto rules, in evaluation order.
GPU_RULES: tuple[str, ...] = tuple(r for r, _ in RULES)
#: Rules that judge host-side windows and need no GPU activity.
_HOST_RULES = {"dataloader_bound", "straggler_rank"}
CPU_ONLY_REASON = "CPU-only trace: no GPU activity, GPU rules skipped"
#: Start of the reason of a ``ran_on_trace`` row (followed by "(k of n ranks)").
WHOLE_TRACE_REASON = "no ProfilerStep: whole trace as one window"
_NO_TRACE_REASON = "no analyzed trace for this job (no steps and no rank statistics)"
_NEURON_ONLY_REASON = "Neuron device profiles only: GPU rules do not apply (see the Neuron rules)"


def _row(status: str, reason: str | None, windows: pd.DataFrame | None) -> dict:
    assert status in COVERAGE_STATUSES, status
    w = windows if windows is not None and status in ("ran", "ran_on_trace") else None
    return {
        "status": status,
        "reason": reason,
        "n_ranks": int(w["rank"].nunique()) if w is not None and len(w) else 0,
        "n_windows": int(len(w)) if w is not None else 0,
    }


def _ran(windows: pd.DataFrame) -> dict:
    """``ran`` or ``ran_on_trace`` over ``windows`` (reason names the ranks judged on their whole trace)."""
    trace = windows[windows["window"] == WINDOW_TRACE] if "window" in windows else windows.iloc[:0]
    if trace.empty:
        return _row("ran", None, windows)
    k, n = int(trace["rank"].nunique()), int(windows["rank"].nunique())
    return _row("ran_on_trace", f"{WHOLE_TRACE_REASON} ({k} of {n} rank{'s' if n != 1 else ''})", windows)


def _total(df: pd.DataFrame, col: str) -> float:
    return float(pd.to_numeric(df[col], errors="coerce").fillna(0).sum()) if col in df and len(df) else 0.0


def _gpu_rule(rule: str, win: pd.DataFrame, job: dict[str, pd.DataFrame]) -> dict:
    """Coverage of one GPU rule over a job's windows (some with GPU activity)."""
    gpu = win[win["has_gpu"] & (win["step_time_ns"] > 0)]
    if gpu.empty:
        return _row("not_run", CPU_ONLY_REASON, None)
    kernels, events = job["kernels"], job["events"]
    if rule in ("many_tiny_kernels", "blocking_sync") and _total(gpu, "n_launches") <= 0 and events.empty:
        return _row(
            "not_run", "no CUDA runtime events traced on the host: kernel launches and synchronizations unseen", None
        )
    if rule == "host_bound_launch" and ("cpu_bound_time_ns" not in gpu or gpu["cpu_bound_time_ns"].isna().all()):
        return _row("not_run", "no host-side events to attribute the GPU idle time to", None)
    if rule == "exposed_communication" and _total(gpu, "comm_time_ns") <= 0 and _total(gpu, "exposed_comm_ns") <= 0:
        return _row("not_applicable", "no communication kernels on the GPU", None)
    if rule == "memcpy_bound" and _total(gpu, "memory_time_ns") <= 0:
        return _row("not_applicable", "no memory copies or sets on the GPU", None)
    if rule == "kernels_below_peak":
        oe = job.get("op_efficiency", pd.DataFrame())
        if oe.empty or "roofline_pct" not in oe or oe["roofline_pct"].isna().all():
            return _row(
                "not_applicable",
                "no op with recorded shapes on a device with a datasheet peak (turn on the profiler's shape recording)",
                None,
            )
    if rule == "pageable_memcpy":
        if kernels.empty or "name" not in kernels:
            return _row("not_run", "no per-kernel statistics to tell pageable copies from pinned ones", None)
        if not kernels["name"].astype(str).str.startswith("Memcpy").any():
            return _row("not_applicable", "no memory copies on the GPU", None)
    return _ran(gpu)


def _straggler(win: pd.DataFrame, coll: pd.DataFrame) -> dict:
    ranks = set(win["rank"]) if len(win) else set()
    if not coll.empty and "rank" in coll:
        ranks |= set(coll["rank"])
    if len(ranks) < 2:
        return _row("not_applicable", "one rank: no other rank to compare arrival times with", None)
    matched = (
        coll[pd.to_numeric(coll["n_ranks_matched"], errors="coerce").fillna(0) >= 2]
        if not coll.empty and "n_ranks_matched" in coll
        else coll.iloc[:0]
    )
    if matched.empty:
        return _row("not_applicable", "no collective matched across ranks", None)
    judged = win[win["rank"].isin(set(matched["rank"]))] if len(win) else win
    if judged.empty:  # collectives without windows: count the ranks only
        return {"status": "ran", "reason": None, "n_ranks": int(matched["rank"].nunique()), "n_windows": 0}
    return _ran(judged)


def coverage_by_job(
    job_id: str, attempt: int, job: dict[str, pd.DataFrame], windows: pd.DataFrame, neuron: pd.DataFrame
) -> list[dict]:
    """The coverage rows (without identity columns and ``n_findings``) of one job.

    Args:
        job: the job's frames (``kernels``, ``collectives``, ``events``; possibly empty).
        windows: the job's analysis windows (:func:`jobs.analyze.findings.ranking.job_windows`).
        neuron: the job's ``neuron_summary`` rows (possibly empty).

    Returns:
        ``{"rule", "status", "reason", "n_ranks", "n_windows"}`` per GPU rule, then per Neuron rule when ``neuron``
        has rows.
    """
    del job_id, attempt
    out = []
    has_neuron = not neuron.empty
    for rule in GPU_RULES:
        if windows.empty:
            r = (
                _row("not_applicable", _NEURON_ONLY_REASON, None)
                if has_neuron
                else _row("not_run", _NO_TRACE_REASON, None)
            )
        elif rule == "straggler_rank":
            r = _straggler(windows, job["collectives"])
        elif rule in _HOST_RULES:
            r = _ran(windows[windows["step_time_ns"] > 0])
            if r["n_windows"] == 0:
                r = _row("not_run", "no window with a positive duration", None)
        else:
            r = _gpu_rule(rule, windows, job)
        out.append({"rule": rule, **r})
    if has_neuron:
        for rule in NEURON_RULES:
            out.append(
                {
                    "rule": rule,
                    "status": "ran",
                    "reason": None,
                    "n_ranks": int(neuron["rank"].nunique()) if "rank" in neuron else 0,
                    "n_windows": int(len(neuron)),
                }
            )
    return out


def rule_coverage(tables: Mapping[str, pd.DataFrame], findings: pa.Table | pd.DataFrame | None = None) -> pa.Table:
    """The ``rule_coverage`` rows of every (job_id, attempt) present in ``tables`` (module docstring).

    Args:
        tables: the inputs of :func:`jobs.analyze.findings.ranking.job_findings` (``steps``, ``ranks``,
            ``captures``, ``kernels``, ``collectives``, ``critical_path``, ``events``, ``neuron_summary``,
            ``op_efficiency``; any
            may be missing or empty). A job is present when any of them has a row for it (``captures`` included,
            so a job whose traces were all quarantined gets ``not_run`` rows).
        findings: the job's FINDINGS rows (from ``job_findings``), for ``n_findings``; None counts 0.

    Returns:
        Arrow table with exactly the :data:`schemas.tables.RULE_COVERAGE` columns, ordered by (job_id, attempt)
        then rule evaluation order.

    Raises:
        ValueError / TypeError: as ``job_findings`` for a malformed input table.
    """
    names = (
        "steps", "ranks", "kernels", "collectives", "critical_path", "events", "captures", "neuron_summary",
        "op_efficiency",
    )  # fmt: skip
    frames = {n: _frame(tables, n) for n in names}
    keys: set[tuple[str, int]] = set()
    for df in frames.values():
        if not df.empty and "job_id" in df and "attempt" in df:
            keys |= {(str(j), int(a)) for j, a in zip(df["job_id"], df["attempt"])}
    if isinstance(findings, pa.Table):
        findings = findings.select(["job_id", "attempt", "rule"]).to_pandas()
    counts: dict[tuple[str, int, str], int] = {}
    if findings is not None and len(findings):
        for (j, a, r), n in findings.groupby(["job_id", "attempt", "rule"]).size().items():
            counts[(str(j), int(a), str(r))] = int(n)
    rows = []
    for job_id, attempt in sorted(keys):
        job = {n: _of_job(df, job_id, attempt) for n, df in frames.items()}
        windows = job_windows(job["steps"], job["ranks"], job["captures"])
        job["events"] = events_in_windows(job["events"], windows)
        date = _date(job, job_id, attempt)
        warned = warned_rules(job["captures"])
        for r in coverage_by_job(job_id, attempt, job, windows, job["neuron_summary"]):
            judged = r["status"] in ("ran", "ran_on_trace")
            rows.append(
                {
                    "date": date,
                    "job_id": job_id,
                    "attempt": attempt,
                    **r,
                    "n_findings": counts.get((job_id, attempt, r["rule"]), 0),
                    "uncertain": uncertain_words(warned.get(r["rule"], [])) if judged else None,
                }
            )
    return pa.Table.from_pylist(
        [{k: r[k] for k in RULE_COVERAGE.names} for r in rows], schema=RULE_COVERAGE.arrow_schema()
    )
