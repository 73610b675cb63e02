"""Answers of the agent interface (``tracelake mcp``, :mod:`jobs.agent.server`): one model per tool.

The MCP server publishes each model's JSON schema as the tool's ``outputSchema`` and validates every
answer against it; ``schemas/mcp_tools.v1.json`` is the same schemas written out for readers outside
Python (``python -m schemas.agent`` rewrites it; a test checks it is current).

Units are in the field names, as in the warehouse (:mod:`schemas.tables`): ``_ns`` integer
nanoseconds, ``_pct`` percent 0–100, ``_bytes``, ``_gbps`` GB/s. Unknown numbers are ``null``.
Every list answer is bounded (:class:`Page`): at most ``limit`` rows and about
:data:`MAX_ANSWER_CHARS` characters of JSON; ``truncated`` says rows were left out and
``next_cursor`` fetches the next page.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = "1"
#: Upper bound on one answer's JSON text (characters); rows beyond it go to the next page.
MAX_ANSWER_CHARS = 20_000
#: Written next to this module by :func:`write_schemas`.
SCHEMAS_FILE = Path(__file__).with_name("mcp_tools.v1.json")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Answer(_Model):
    """What every tool answer carries besides its rows: the table versions it read, so it can be reproduced."""

    tables_read: dict[str, int] = Field(
        default_factory=dict,
        description="Warehouse table → Delta version this answer read; the same rows come back from "
        "`tracelake sql --as-of <read_at>` or `tracelake history`.",
    )
    read_at: str | None = Field(default=None, description="When the answer was read (ISO 8601, UTC).")


class Page(_Model):
    """How much of the answer this is: rows ``offset`` … ``offset + returned - 1`` of ``total``."""

    total: int = Field(description="Rows the question has in all.")
    offset: int = Field(description="Index of the first row returned (0-based).")
    returned: int = Field(description="Rows in this answer.")
    truncated: bool = Field(description="True when rows were left out (row limit or character cap).")
    next_cursor: str | None = Field(description="Pass as `cursor` to get the next rows; null on the last page.")


class JobRow(_Model):
    job_id: str
    attempt: int
    job_name: str | None = Field(description="Manifest job_name (the series regressions compare).")
    model: str | None
    hardware: str = Field(
        description="Device name of the captures (e.g. NVIDIA H100), or cpu when none names an "
        "accelerator (as fleet_stats' hardware dimension)."
    )
    torch_version: str | None
    date: str = Field(description="Capture date YYYY-MM-DD (UTC).")
    captured_at: str | None = Field(description="Latest capture commit time of the job, ISO 8601 UTC.")
    n_ranks: int
    world_size: int | None
    status: Literal["ingested", "partial", "quarantined", "cataloged"] = Field(
        description="ingested: every capture parsed; partial: some not; quarantined: none parsed and some bad; "
        "cataloged: raw files kept but of a format not analyzed."
    )
    validation: Literal["passed", "failed", "unvalidated"] = Field(
        description="Great Expectations result over the job's tables (failed if any table failed)."
    )
    step_time_p50_ns: int | None = Field(
        description="Median job step time, ns: per ProfilerStep (N >= 0) the slowest rank's step time (the job step "
        "time of MLflow's step_time_p50_ms and of fleet_stats)."
    )
    idle_pct: float | None = Field(
        description="GPU idle, % of the GPU's active span (HTA temporal breakdown, time-weighted over the run's "
        "analysis windows: jobs.fleet.stats.run_summary, as MLflow's idle_pct and the job report)."
    )
    step_time_p90_ns: int | None = Field(default=None, description="Job step time p90, ns (run_summary).")
    exposed_comm_pct: float | None = Field(
        default=None, description="Exposed communication, % of rank step time (run_summary)."
    )
    cpu_bound_pct: float | None = Field(default=None, description="CPU-bound, % of rank step time (run_summary).")
    n_steps: int | None = Field(default=None, description="Job steps (ProfilerSteps, all ranks together).")
    n_rank_steps: int | None = Field(default=None, description="Rank-steps (one rank's ProfilerStep each).")
    n_findings: int
    top_finding: str | None = Field(description="Title of the finding with the most estimated time lost per step.")
    verdict: Literal["ok", "findings", "partly_judged", "not_judged", "coverage_unknown"] | None = Field(
        default=None,
        description="ok only when the rules that could judge the job ran and none fired; findings: a rule fired; "
        "partly_judged / not_judged: some / all rules did not run (see job_summary's verdict.unknown); "
        "coverage_unknown: the warehouse does not record which rules ran.",
    )


class JobList(_Answer):
    """``list_jobs``: jobs newest first."""

    jobs: list[JobRow]
    page: Page


class RankSummary(_Model):
    rank: int
    n_steps: int
    step_time_p50_ns: int | None
    step_time_p90_ns: int | None
    step_time_max_ns: int | None
    idle_pct: float | None = Field(description="HTA temporal breakdown: idle time % of step time.")
    compute_pct: float | None = Field(description="HTA temporal breakdown: compute kernel time %.")
    non_compute_pct: float | None = Field(description="HTA temporal breakdown: communication + memory kernel time %.")
    exposed_comm_ns: int | None = Field(description="Communication not overlapped by compute, summed over steps.")


class FindingBrief(_Model):
    finding_id: str
    rule: str
    rank_order: int
    title: str | None
    est_time_lost_per_step_ns: int | None
    confidence: float | None
    ranks: list[int]
    recommendation: str | None


class Straggler(_Model):
    rank: int | None = Field(description="The rank the job waits for, or null when none stands out.")
    source: Literal["straggler_rank finding", "last arrivals", "slowest step", "none"] = Field(
        description="straggler_rank finding: the rule fired; last arrivals: the rank most often last into "
        "collectives; slowest step: the rank with the largest median step; none: one rank or no data."
    )
    step_time_p50_ns: int | None
    excess_vs_median_pct: float | None = Field(description="Its median step time over the median rank's, % above.")
    last_arrival_share_pct: float | None = Field(description="% of matched collectives it arrived last to.")


class DataQuality(_Model):
    captures: int
    quarantined: int
    quarantine_reasons: list[str]
    tables: dict[str, str] = Field(description="Validation mark per table: passed, failed or unvalidated.")
    flags: list[str] = Field(description="Parser flags of the job's captures (e.g. truncated_trace).")
    profiler_warnings: list[str] = Field(
        default_factory=list,
        description="The profiler's own warnings about the data, 'rank R: kind (count): message' (at most 10; "
        "captures.profiler_warnings_json has the metrics each makes uncertain).",
    )


class VerdictBrief(_Model):
    """The job's verdict and rule coverage (jobs/publish/verdict.py; table rule_coverage)."""

    status: Literal["ok", "findings", "partly_judged", "not_judged", "coverage_unknown"]
    headline: str = Field(description="The verdict in one sentence.")
    unknown: list[str] = Field(description="What is unknown: rules that did not run, grouped by reason.")
    counts: dict[str, int] = Field(
        description="Rules per coverage status: ran, ran_on_trace, not_applicable, not_run (all 0 when unknown)."
    )
    whole_trace: bool = Field(description="Rules ran on whole-trace windows (no ProfilerStep).")
    coverage_known: bool = Field(description="The warehouse records which rules judged the job.")
    uncertain: list[str] = Field(
        default_factory=list,
        description="Judgments the profiler's own warnings make uncertain: '<rules>: the profiler warned: …'.",
    )


class JobSummary(_Answer):
    """``job_summary``: one (job, attempt) at a glance."""

    job: JobRow
    verdict: VerdictBrief | None = None
    ranks: list[RankSummary]
    breakdown: dict[str, float | None] = Field(
        description="Job-level HTA temporal breakdown, % of the GPU's active span: idle_pct, compute_pct "
        "(run_summary, time-weighted) and non_compute_pct (100 - idle - compute)."
    )
    top_findings: list[FindingBrief]
    straggler: Straggler
    data_quality: DataQuality
    page: Page = Field(description="Paging of `ranks`.")


class Finding(FindingBrief):
    job_id: str
    attempt: int
    metric: str | None
    value: float | None
    steps: list[int]
    evidence: dict[str, Any] = Field(description="Numbers behind the finding (findings.v1.json `evidence`).")


class FindingList(_Answer):
    """``findings``: one job's findings in rank order, or the fleet's ranked by estimated time lost."""

    scope: Literal["job", "fleet"]
    findings: list[Finding]
    page: Page


class PathShare(_Model):
    bound_by: str = Field(
        description="What the path's time is bound by (critical_path.bound_by): cpu_bound, "
        "launch_overhead, kernel_kernel_gap, compute, communication, data_loading, "
        "sync, collective_wait, late_start."
    )
    dur_ns: int
    share_pct: float
    n_segments: int


class PathRank(_Model):
    rank: int
    dur_ns: int
    share_pct: float


class PathSegment(_Model):
    segment: int
    rank: int | None
    name: str | None
    bound_by: str | None
    start_ns: int | None
    dur_ns: int | None


class CriticalPath(_Answer):
    """``critical_path``: one job's step: where the longest dependency chain spends its time (HTA critical path)."""

    job_id: str
    attempt: int
    step: int | None
    steps_available: list[int]
    scope: str | None = Field(description="critical_path.scope of the rows (job: across ranks, rank: one rank).")
    path_length_ns: int | None
    by_bound: list[PathShare]
    ranks: list[PathRank] = Field(description="Ranks the path crosses, by time on the path.")
    longest_segments: list[PathSegment]
    page: Page = Field(description="Paging of `longest_segments`.")


class CollectiveRow(_Model):
    collective: str | None
    pg_name: str | None
    n_calls: int
    msg_bytes_p50: int | None
    dur_ns_total: int
    wait_ns_total: int | None = Field(description="Σ time ranks waited for the last arrival.")
    skew_ns_p50: int | None
    skew_ns_max: int | None
    exposed_ns_total: int | None
    busbw_gbps_p50: float | None
    last_arrival_rank: int | None = Field(description="Rank most often last to arrive.")


class Collectives(_Answer):
    """``collectives``: one job's collectives per (collective, process group), most wait first."""

    job_id: str
    attempt: int
    last_arrivals_by_rank: dict[str, int] = Field(description="Rank → collectives it arrived last to.")
    collectives: list[CollectiveRow]
    page: Page


class KernelRow(_Model):
    name: str
    kernel_type: str | None
    n: int
    total_ns: int
    mean_ns: float | None
    share_pct: float = Field(description="% of the job's kernel time (all ranks, all steps).")
    n_ranks: int


class Kernels(_Answer):
    """``kernels``: one job's top kernels by total time."""

    job_id: str
    attempt: int
    total_kernel_ns: int
    kernels: list[KernelRow]
    page: Page


class OpEfficiencyRow(_Model):
    op_name: str
    shape_sig: str = Field(description="The tensor inputs' sizes as recorded.")
    dtype: str
    kind: str | None = Field(description="gemm, conv, attention, elementwise or normalization.")
    n_ranks: int
    n_calls: int
    kernel_time_ns: int = Field(description="Σ duration of the kernels the calls launched (all ranks), ns.")
    achieved_tflops: float | None
    achieved_gbps: float | None
    peak_flops_pct: float | None = Field(description="% of the device's datasheet peak FLOP/s for the dtype.")
    peak_bandwidth_pct: float | None = Field(description="% of its memory bandwidth (above 100: on-chip cache).")
    roofline_pct: float | None = Field(description="The larger of the two: % of the attainable roofline.")
    recoverable_ns: int | None = Field(
        description="Kernel time saved at 70 % of the roofline (the kernels_below_peak estimate), ns; null without one."
    )
    bound: str | None = Field(description="compute, memory or cache (roofline side); null without a peak.")
    top_kernel: str | None


class OpEfficiency(_Answer):
    """``op_efficiency``: one job's ops with recorded shapes against the device's roofline, most kernel time first."""

    job_id: str
    attempt: int
    device_names: list[str]
    peak_sources: list[str] = Field(description="The datasheets the peaks come from, or why a device has none.")
    ops: list[OpEfficiencyRow]
    page: Page


class WindowGroupRow(_Model):
    rank: int
    cause: str = Field(
        description="GPU: sync, collective, memcpy, dataloader, host (CPU-bound) or host_idle; NeuronCore tensor "
        "engine: collective, dma, engine, semaphore or device_idle."
    )
    cause_op: str | None = Field(description="The host call the GPU waited on, or the DMA queue / instruction.")
    cause_stack: str | None = Field(description="Its enclosing calls, outermost first, in the longest window.")
    n_windows: int
    n_steps: int = Field(description="Steps with such a window.")
    idle_ns: int = Field(description="Σ window duration, ns.")
    mean_dur_ns: float | None
    offset_p50_ns: float | None = Field(description="Median start of the windows into their step, ns.")
    step_pct: float | None = Field(description="Mean share of the step, %.")
    recurs_pct: float | None = Field(description="Share of the rank's steps where it recurs at the same place, %.")
    step: int = Field(description="Step of the longest window (-1: whole trace): the evidence.")
    window_id: int = Field(description="Its window_id in utilization_windows.")
    cause_event_id: int | None = Field(description="events.event_id of its cause_op event.")


class UtilizationWindows(_Answer):
    """``utilization_windows``: when inside the step one job's devices are idle (GPU) or under-used (NeuronCore
    tensor engine), grouped by rank, cause and cause op, most time first."""

    job_id: str
    attempt: int
    total_idle_ns: int = Field(description="Σ of every window of the job (all ranks), ns.")
    groups: list[WindowGroupRow]
    page: Page


class MetricDelta(_Model):
    metric: str
    a: float | None
    b: float | None
    delta: float | None
    delta_pct: float | None


class OpDelta(_Model):
    group: str = Field(
        description="kernel (device activity, not gpu_user_annotation spans) or op (host cpu_op "
        "events, not ProfilerStep#N)."
    )
    name: str
    status: Literal["added", "removed", "slower", "faster"]
    a_ns_per_step: float | None = Field(description="Job A: ns per rank and ProfilerStep, mean over ranks.")
    b_ns_per_step: float | None = Field(description="Job B: ns per rank and ProfilerStep, mean over ranks.")
    delta_ns_per_step: float | None = Field(description="b_ns_per_step − a_ns_per_step.")
    delta_pct: float | None
    a_max_rank_ns_per_step: float | None = Field(None, description="Job A: the max over ranks of ns per step.")
    b_max_rank_ns_per_step: float | None = Field(None, description="Job B: the max over ranks of ns per step.")


class FindingChange(_Model):
    finding_id: str
    rule: str | None
    title: str | None
    status: Literal["appeared", "cleared", "persisting"]
    a_est_ns: float | None
    b_est_ns: float | None


class Comparison(_Answer):
    """``compare``: job B against job A, as ``tracelake compare``."""

    a: str
    b: str
    metrics: list[MetricDelta]
    ops: list[OpDelta] = Field(description="Kernels and ops added, removed, slower or faster, largest |Δ| first.")
    findings: list[FindingChange]
    notes: list[str]
    page: Page = Field(description="Paging of `ops`.")


class RegressionRow(_Model):
    job_name: str | None
    job_id: str
    attempt: int
    date: str | None
    metric: str
    value: float | None
    baseline: float | None
    change_pct: float | None
    change_ci_low_pct: float | None = Field(
        default=None, description="Confidence interval of the change (% for step times, percentage points for _pct)."
    )
    change_ci_high_pct: float | None = None
    p_value: float | None
    p_adjusted: float | None = Field(
        default=None, description="Benjamini-Hochberg adjusted p over the runs of its capture date."
    )
    verdict: str | None = Field(description="regression, improvement, unchanged, inconclusive or no_baseline.")
    reason: str | None = Field(
        default=None, description="Why inconclusive or no_baseline, in words, and what would decide (steps per run)."
    )
    summary: str | None = Field(
        default=None,
        description="The row in words as the reports show it: baseline → value, change [interval], verdict, steps.",
    )
    noisy: bool | None = Field(default=None, description="The run's own step times are very unequal (p90/p50 > 1.5).")
    n_steps: int | None = Field(default=None, description="Job steps of the run compared (outliers dropped).")
    n_baseline_steps: int | None = Field(default=None, description="Job steps pooled from the baseline runs.")
    n_dropped: int | None = Field(default=None, description="Outlier steps dropped from the run (Q3 + 3 IQR).")
    baseline_runs: list[str] = Field(description="job_id#attempt of the baseline runs.")
    changes: dict[str, Any] | None = Field(
        default=None,
        description="For regression/improvement rows, what differs from the baseline runs: context "
        "(torch_version, hardware, world_size, tags), the kernels whose time per step moved "
        "most, findings appeared/cleared.",
    )


class Regressions(_Answer):
    """``regressions``: each run's metrics against the earlier runs of its job_name, newest first."""

    regressions: list[RegressionRow]
    page: Page


class FleetRow(_Model):
    dimension: str
    value: str | None
    date: str | None
    n_runs: int | None
    n_ranks: int | None
    n_steps: int | None
    step_time_p50_ns: float | None
    step_time_p90_ns: float | None
    idle_pct: float | None
    compute_pct: float | None
    exposed_comm_pct: float | None
    cpu_bound_pct: float | None
    dataloader_pct: float | None


class FleetStats(_Answer):
    """``fleet_stats``: the fleet grouped by one dimension (the ``fleet_stats`` table)."""

    dimension: str
    rows: list[FleetRow]
    page: Page


class FleetFindingRow(_Model):
    dimension: str
    value: str
    rule: str
    impact_rank: int = Field(description="1 = most accelerator-hours per day in the group.")
    window_start: str
    window_end: str
    n_jobs: int
    n_runs: int
    n_steps: int
    time_lost_ns: int | None = Field(description="Σ over runs of time lost per step × captured steps (job wall time).")
    accelerator_hours: float | None = Field(description="Σ over runs of time lost × world size, hours.")
    accelerator_hours_per_day: float | None = Field(description="What fixing the rule would recover per day.")
    top_jobs: list[str] = Field(description="job_id#attempt losing the most accelerator time, most first.")
    example_title: str | None


class FleetFindings(_Answer):
    """``fleet_findings``: rules ranked by the accelerator-hours per day fixing them would recover (the
    ``fleet_findings`` table: time lost per step × captured steps × world size, over the window)."""

    dimension: str
    rows: list[FleetFindingRow]
    page: Page


class FleetOpRow(_Model):
    dimension: str
    value: str
    op_name: str
    shape_sig: str
    dtype: str
    impact_rank: int = Field(description="1 = most accelerator-hours per day in the group.")
    kind: str | None
    bound: str | None
    device_names: list[str]
    window_start: str
    window_end: str
    n_jobs: int
    n_runs: int
    kernel_time_ns: int = Field(description="Σ kernel time on the traced ranks, ns.")
    roofline_pct: float | None = Field(description="Kernel-time-weighted % of the attainable roofline.")
    recoverable_ns: int = Field(description="Σ kernel time saved at 70 % of the roofline on the traced ranks, ns.")
    accelerator_hours_per_day: float | None = Field(
        description="Recoverable time × world size / ranks traced, summed over runs, hours ÷ the window's days."
    )
    top_jobs: list[str] = Field(description="job_id#attempt with the most recoverable accelerator time, most first.")
    top_kernel: str | None


class FleetOps(_Answer):
    """``fleet_ops``: op groups (op, shapes, dtype) ranked by the accelerator-hours per day running them at 70 % of
    their roofline would recover (the ``fleet_ops`` table, over the window of ``fleet_findings``)."""

    dimension: str
    rows: list[FleetOpRow]
    page: Page


class HostRow(_Model):
    kind: str = Field(
        description="`host`, `device` (an accelerator of a host) or `link` (hosts a process group spans)."
    )
    target: str = Field(description="`node-3`, `node-3/5` (host/device index) or `node-1+node-3` (a link).")
    host_name: str | None
    device_index: int | None
    hosts: list[str]
    device_names: list[str]
    suspect_hardware: bool = Field(description="Slow in ≥ 2 different jobs and in at least half of its jobs.")
    n_jobs: int
    n_runs: int
    n_slow_jobs: int
    slow_jobs: list[str]
    matched_calls: int | None
    last_arrivals: int | None
    last_arrival_ratio: float | None = Field(description="Last arrivals at collectives ÷ its fair share (1 = fair).")
    step_excess_p50_pct: float | None = Field(description="Its ranks' median step time over the run's other ranks', %.")
    busbw_ratio: float | None = Field(description="Links: bus bandwidth ÷ the run's other links' (1 = as fast).")
    window_start: str
    window_end: str
    evidence: list[dict[str, Any]] = Field(
        description="Per run: job, ranks, matched calls, slow; last arrivals, "
        "ratio, step excess (% and ms), or a link's bus bandwidths."
    )


class HostHealth(_Answer):
    """``host_health``: hosts, devices and links across jobs (the ``host_health`` table), hardware suspects first."""

    hosts: list[HostRow]
    page: Page


class SqlAnswer(_Answer):
    """``sql``: the rows of one read-only query (Spark SQL syntax) over the warehouse tables, on the embedded engine;
    text cells longer than 2,000 characters are cut and say so."""

    columns: list[str]
    rows: list[list[Any]]
    elapsed_ms: float
    page: Page = Field(description="`total` is the rows returned plus one when more existed (row cap).")


#: Tool name → answer model (the order the server lists them in).
TOOL_ANSWERS: dict[str, type[_Model]] = {
    "list_jobs": JobList,
    "job_summary": JobSummary,
    "findings": FindingList,
    "critical_path": CriticalPath,
    "collectives": Collectives,
    "kernels": Kernels,
    "op_efficiency": OpEfficiency,
    "utilization_windows": UtilizationWindows,
    "compare": Comparison,
    "regressions": Regressions,
    "fleet_stats": FleetStats,
    "fleet_findings": FleetFindings,
    "fleet_ops": FleetOps,
    "host_health": HostHealth,
    "sql": SqlAnswer,
}


def tool_schemas() -> dict:
    """``{"schema_version", "max_answer_chars", "tools": {tool: JSON schema of its answer}}``."""
    return {
        "schema_version": SCHEMA_VERSION,
        "max_answer_chars": MAX_ANSWER_CHARS,
        "tools": {name: model.model_json_schema() for name, model in TOOL_ANSWERS.items()},
    }


def write_schemas(path: Path = SCHEMAS_FILE) -> Path:
    """Write :func:`tool_schemas` as JSON to ``path`` (default ``schemas/mcp_tools.v1.json``)."""
    path.write_text(json.dumps(tool_schemas(), indent=1, sort_keys=True) + "\n")
    return path


if __name__ == "__main__":
    print(write_schemas())
