"""Bottleneck rules of the ``findings`` table (GPU / Kineto side), one function per rule.

Every rule reads the analysis tables of ONE (job_id, attempt) through a :class:`JobTables` and
returns partial findings (dicts with ``finding_id``, ``rule``, ``title``, ``metric``, ``value``,
``est_time_lost_per_step_ns``, ``confidence``, ``ranks``, ``steps``, ``evidence`` (a dict) and
``recommendation``); :func:`jobs.analyze.findings.ranking.job_findings` adds the identity columns, ranks
them and serializes the evidence.

Conventions shared by the rules:

* A **rank-step** is one ``steps`` row (one ProfilerStep of one rank's capture). Percentages are
  100 × Σ numerator / Σ ``step_time_ns`` over the rank-steps concerned (time-weighted).
* **GPU busy time** of a rank-step = ``kernel_time_ns − idle_time_ns`` (merged device time of the
  step's GPU events, HTA temporal breakdown), clipped to [0, step_time_ns]; **GPU idle time in the
  step** = ``step_time_ns`` − busy. Rank-steps without device events (``n_kernels`` = 0) take part
  in no GPU rule.
* **Scope.** A threshold rule first tests the whole job (all rank-steps). When it holds, one
  finding ``<rule>/job`` names every rank that passes on its own; otherwise each rank that passes
  on its own gets a finding ``<rule>/rank=R`` (the :data:`MAX_RANK_SCOPED_FINDINGS` with the most
  time lost), so an outlier rank is not averaged away.
* **Time lost per step** (``est_time_lost_per_step_ns``) = Σ over the scope's rank-steps of the
  rule's per-step estimate ÷ the number of those rank-steps (job scope: all rank-steps of the job).
  Estimates of different rules overlap (e.g. tiny kernels are one cause of host-bound time): they
  rank the findings, they do not add up.
* **Windows.** The rules judge *analysis windows* (:func:`jobs.analyze.windows.analysis_windows`): a
  rank's ProfilerSteps, or — for a rank capture without ProfilerStep — its whole trace as ONE window
  (``step`` = -1, ``window`` = ``"trace"``). "Per step" means per window; counts per window (short
  kernels, sync calls) treat a whole trace as one window, and the words of a finding say which it is
  ("of the step time" / "of the trace (no ProfilerStep: whole trace as one window)"); its evidence has
  ``window`` = ``step`` | ``trace`` | ``mixed``. ``steps`` lists ProfilerStep numbers only (never -1).
* **Confidence** (:func:`confidence`, one function for every GPU rule): the rule's *base* (how directly
  its metric measures the time lost) + :data:`EFFECT_WEIGHT` × effect size (metric ÷ threshold, or
  threshold ÷ metric for "<" rules, on a log scale that saturates at :data:`EFFECT_SATURATION` ×) +
  :data:`AGREEMENT_WEIGHT` × agreement + :data:`CORROBORATION_WEIGHT` when an independent table
  corroborates it (− as much when it contradicts) − :func:`few_steps_penalty` (fewer than
  :data:`MIN_STEPS` distinct windows: one captured step or one whole trace takes off 0.25) −
  :data:`FEW_CALLS_PENALTY` when the metric counts fewer than :data:`MIN_CALLS` events; clipped to
  [0.05, 0.95], 2 decimals. *Agreement* is the share of the scope's ranks on which the rule holds on
  its own (job scope over ≥ 2 ranks), else the share of the scope's windows where its per-window
  condition holds. Inputs per rule:

  =========================  =====  ===============================  =================  ==========================================  ======================
  rule                       base   effect (metric vs threshold)     agreement          corroboration (+) / contradiction (−)       events counted
  =========================  =====  ===============================  =================  ==========================================  ======================
  ``host_bound_launch``      0.50   CPU-bound % ÷ 10 %               ranks / windows    critical path ≥ 50 % CPU-bound or launch,    —
                                                                                        or host wait the largest idle category (+);
                                                                                        critical path < 20 % (−)
  ``many_tiny_kernels``      0.40   short-kernel % ÷ 50 %            ranks / windows    critical path ≥ 50 % launch / gaps /         short kernels
                                                                                        CPU-bound (+); < 20 % (−)
  ``exposed_communication``  0.50   exposed % ÷ 10 %                 ranks / windows    critical path ≥ 20 % communication (+)       collectives (when
                             (0.40                                                                                                  matched)
                             with-
                             out
                             calls)
  ``straggler_rank``         0.60   last-arrival share ÷ required    1 − binomial       —                                            the rank's collectives
                                    share                            p-value
  ``dataloader_bound``       0.50   data-loader % ÷ 5 %              ranks / windows    data loading on the critical path (+)        —
  ``blocking_sync``          0.35   blocked % ÷ 1 % (or calls per    ranks / windows    —                                            top-level sync calls
                             (0.45  step ÷ 10, the larger)
                             with
                             item)
  ``memcpy_bound``           0.45   exposed copy % ÷ 10 %            ranks / windows    pageable copies seen (+)                     —
  ``pageable_memcpy``        0.55   pageable share of busy ÷ 10 %    ranks / windows    the GPU is idle ≥ 50 % of the windows (+)    pageable copies
  ``low_gpu_utilization``    0.35   50 % ÷ GPU busy %                ranks / windows    idle not explained by host work or data      —
                                                                                        loading ≥ 5 % of the time (+)
  ``kernels_below_peak``     0.35   recoverable % ÷ 5 %              ranks / windows    the 5 top op groups hold ≥ 50 % of it (+)    —
  =========================  =====  ===============================  =================  ==========================================  ======================

Sources quoted in the rule docstrings: HTA = Holistic Trace Analysis 0.5.0
(``../shared/reference/kineto_and_hta.md`` §1); TB plugin = torch-tb-profiler
(``RunProfileData.analyze`` recommendations: DataLoader > 5 % of step time, communication > 10 %,
GPU utilization < 50 %); PyTorch performance tuning guide
(https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html); NVIDIA CUDA C++ Best Practices
Guide (https://docs.nvidia.com/cuda/cuda-c-best-practices-guide/).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from jobs.analyze.efficiency.ops import ATTAINABLE_ROOFLINE_PCT, job_op_groups, recoverable_ops
from jobs.analyze.trace.launches import (
    ATEN_SYNC_NAMES,
    DEVICE_SYNC_NAMES,
    GRAPH_CAPTURE_NAMES,
    GRAPH_LAUNCH_NAMES,
    HOST_COPY_NAMES,
    SYNC_NAMES,
)
from jobs.analyze.windows import WINDOW_TRACE
from jobs.common.binomial import binomial_tail
from jobs.common.floats import finite_float as _num
from jobs.common.intervals import merge_intervals, total_length

__all__ = [
    "JobTables",
    "RULES",
    "THRESHOLDS",
    "SYNC_NAMES",
    "confidence",
    "host_bound_launch",
    "many_tiny_kernels",
    "exposed_communication",
    "straggler_rank",
    "dataloader_bound",
    "blocking_sync",
    "sync_by_design",
    "kernels_below_peak",
    "memcpy_bound",
    "pageable_memcpy",
    "low_gpu_utilization",
    "effect_size",
    "window_words",
    "Words",
    "EXCESS_WORDS",
]

# ------------------------------------------------------------------------------------------------
# thresholds (named constants, rationale in the docstring that follows each)

HOST_BOUND_PCT = 10.0
"""``host_bound_launch`` fires at CPU-bound time ≥ 10 % of the step time: the TB plugin's
communication rule uses the same 10 % as "worth a look"; below it, launch overhead is usually not
the first thing to fix."""

SHORT_KERNEL_PCT = 50.0
"""``many_tiny_kernels`` fires when ≥ 50 % of the launches are HTA *short kernels* (device time
shorter than its launch call, launch ≤ 50 µs): then most of the GPU work costs more to launch than to
run (HTA ``get_cuda_kernel_launch_stats``)."""

MIN_SHORT_KERNELS_PER_STEP = 50
"""… and at least 50 short kernels per step on average: a handful of tiny kernels is normal (a
loss scalar, an optimizer flag) and not worth graph capture."""

EXPOSED_COMM_PCT = 10.0
"""``exposed_communication`` fires when communication not overlapped by computation is ≥ 10 % of the
step time (TB plugin: communication > 10 % of step time)."""

SMALL_MESSAGE_BYTES = 1 << 20
"""Collectives below 1 MiB are latency-bound on NVLink / InfiniBand (NCCL-tests: bus bandwidth only
saturates from a few MiB); many of them per step suggest bucketing (DDP ``bucket_cap_mb`` default is
25 MiB)."""

STRAGGLER_MIN_SHARE = 0.25
"""``straggler_rank``: a rank must arrive last at ≥ max(25 %, min(75 %, 2/n)) of the collectives
matched on ≥ 2 ranks (n = ranks per call): at least twice its fair share 1/n, never below 25 %
(large jobs) and at most 75 % (2 ranks, where 50 % is chance)."""

STRAGGLER_MIN_CALLS = 3
"""… over at least 3 such calls (fewer give no evidence) …"""

STRAGGLER_MAX_P_VALUE = 0.05
"""… and being last that often must be unlikely by chance: binomial tail P(X ≥ k | calls, 1/n) ≤ 0.05
(k last arrivals; 2 of 8 calls in an 8-rank job, p ≈ 0.26, is chance; 5 of 8, p ≈ 0.001, is not) …"""

STRAGGLER_MIN_WAIT_PCT = 1.0
"""… and the time the other ranks wait for it is ≥ 1 % of the median step time (a rank that is
last by microseconds is no straggler)."""

DATALOADER_PCT = 5.0
"""``dataloader_bound`` fires at data-loader time > 5 % of the step time (TB plugin: "This run has
high time cost on input data loading", DataLoader > 5 % of step time)."""

SYNC_PCT = 1.0
"""``blocking_sync`` fires when host time blocked in synchronizing calls is ≥ 1 % of the step time …"""

BY_DESIGN_ANNOTATION = r"(?i)\bbenchmark\b|sync[_ -]?by[_ -]?design"
"""A user annotation (``record_function``) whose name matches this regex declares that its step synchronizes by
design (a benchmark harness calling ``torch.cuda.synchronize()`` each step to time it) …"""

BY_DESIGN_TAGS = {"sync_by_design": ("1", "true", "yes"), "harness": ("benchmark",)}
"""… as does a capture tag (``tags_json``) with one of these values: ``blocking_sync`` then leaves the step's
device-wide synchronizations (:data:`jobs.analyze.trace.launches.DEVICE_SYNC_NAMES`) out and judges the others."""

SYNC_CALLS_PER_STEP = 10
"""… or when there are ≥ 10 top-level synchronizing calls per step: each one drains the launch queue
(CUDA Best Practices: avoid host-device synchronization), even when it returns at once."""

MEMORY_PCT = 10.0
"""``memcpy_bound`` fires when copy/set time not hidden under computation or communication is ≥ 10 %
of the step time (same "worth a look" level as exposed communication)."""

BELOW_PEAK_PCT = 5.0
"""``kernels_below_peak`` fires when the time recoverable at :data:`jobs.analyze.efficiency.ops.ATTAINABLE_ROOFLINE_PCT`
of the roofline is ≥ 5 % of the step time (the "worth a look" level of the
other time-lost rules)."""

LOW_UTIL_PCT = 50.0
"""``low_gpu_utilization`` fires when the GPU is busy < 50 % of the step time (TB plugin: "GPU … has
low utilization" below 50 %) …"""

UNEXPLAINED_IDLE_PCT = 5.0
"""… and the GPU idle time not explained by host work or the data loader is ≥ 5 % of the step time
(idle time that *is* explained is reported by ``host_bound_launch`` / ``dataloader_bound``)."""

PAGEABLE_COPY_PCT = 10.0
"""``pageable_memcpy`` fires when copies from or to pageable host memory take ≥ 10 % of the GPU's busy
time: such a copy is staged through a pinned bounce buffer and blocks the host until it is done (CUDA C++
Best Practices, "Pinned Memory"; CUDA Runtime API, "API synchronization behavior": a cudaMemcpyAsync
from pageable memory is synchronous for the host), so at that share the copies, not the compute, set the
pace of the device work (same "worth a look" level as the other 10 % rules)."""

PAGEABLE_MARKER = "Pageable"
"""Kineto names a copy from or to pageable host memory ``Memcpy HtoD (Pageable -> Device)`` /
``Memcpy DtoH (Device -> Pageable)`` (pinned: ``Pinned``): a ``kernels.name`` containing this word."""

MIN_STEPS = 3
"""Fewer distinct windows than this lower the confidence by 0.05 + 0.1 per missing window (one step may be
atypical: warm-up, a checkpoint, an evaluation; one whole trace mixes start-up with steady state): −0.15 with
two windows, −0.25 with one."""

MIN_CALLS = 5
"""A metric that counts events (collectives, sync calls, short kernels, copies) over fewer than 5 of them
rests on too few samples: the confidence drops by :data:`FEW_CALLS_PENALTY`."""

FEW_CALLS_PENALTY = 0.1
"""Confidence taken off below :data:`MIN_CALLS` counted events."""

EFFECT_WEIGHT = 0.2
"""Confidence added at full effect size (metric ≥ :data:`EFFECT_SATURATION` × its threshold): a metric far
past its threshold is not a borderline call."""

EFFECT_SATURATION = 4.0
"""Effect size on a log scale: log(metric ÷ threshold) ÷ log(4), so 1× adds 0, 2× half, 4× and more all of
:data:`EFFECT_WEIGHT`."""

AGREEMENT_WEIGHT = 0.2
"""Confidence added when every rank (or every window) of the scope shows the problem on its own."""

CORROBORATION_WEIGHT = 0.1
"""Confidence added when an independent table (critical path, idle-time breakdown) agrees, taken off when it
contradicts."""

MAX_RANK_SCOPED_FINDINGS = 4
"""At most 4 rank-scoped findings per rule (the ranks with the most time lost); the job-scoped
finding names every rank."""

MAX_EVIDENCE_RANKS = 16
"""``evidence.per_rank`` keeps the 16 ranks with the most time lost (``n_ranks`` gives the total)."""

MAX_EVIDENCE_EVENTS = 10
"""``evidence.events`` keeps the 10 longest events."""

THRESHOLDS = {k: v for k, v in dict(globals()).items() if k.isupper() and isinstance(v, (int, float))}
"""Every numeric threshold above by name (written into ``findings.json`` ``generated_from``)."""


# ------------------------------------------------------------------------------------------------
# inputs


@dataclass
class JobTables:
    """The analysis tables of one (job_id, attempt), as pandas frames (possibly empty).

    ``steps`` carries three derived columns: ``busy_ns`` (GPU busy time of the rank-step, ns),
    ``gpu_idle_ns`` (step_time_ns − busy_ns, ns) and ``has_gpu`` (``n_kernels`` > 0).
    """

    job_id: str
    attempt: int
    steps: pd.DataFrame
    kernels: pd.DataFrame = field(default_factory=pd.DataFrame)
    collectives: pd.DataFrame = field(default_factory=pd.DataFrame)
    critical_path: pd.DataFrame = field(default_factory=pd.DataFrame)
    events: pd.DataFrame = field(default_factory=pd.DataFrame)
    captures: pd.DataFrame = field(default_factory=pd.DataFrame)
    op_efficiency: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def gpu_steps(self) -> pd.DataFrame:
        """Rank-steps with device events and a positive step time."""
        s = self.steps
        return s[s["has_gpu"] & (s["step_time_ns"] > 0)] if len(s) else s

    def cp_bound_by(self) -> pd.DataFrame:
        """Rank-scope critical-path time per (rank, step, bound_by), ns (columns rank, step, bound_by, dur_ns)."""
        cp = self.critical_path
        if cp.empty or "scope" not in cp:
            return pd.DataFrame(columns=["rank", "step", "bound_by", "dur_ns"])
        cp = cp[cp["scope"] == "rank"]
        return (
            cp.groupby(["path_rank", "step", "bound_by"], as_index=False)["dur_ns"]
            .sum()
            .rename(columns={"path_rank": "rank"})
        )

    def cp_events(self, bound_by: tuple[str, ...], ranks) -> list[dict]:
        """The longest rank-scope critical-path segments with an event id of ``bound_by`` on ``ranks``."""
        cp = self.critical_path
        if cp.empty or "scope" not in cp:
            return []
        m = (
            (cp["scope"] == "rank")
            & cp["bound_by"].isin(bound_by)
            & cp["event_id"].notna()
            & cp["rank"].isin(list(ranks))
        )
        return event_refs(cp[m])


def _ns(v) -> int | None:
    f = _num(v)
    return None if f is None else int(round(f))


def _ms(ns) -> str:
    """A duration in words: ms to 3 significant digits, s from 10 s on (``43.3 s``)."""
    v = _num(ns) or 0.0
    return f"{v / 1e9:.3g} s" if abs(v) >= 1e10 else f"{v / 1e6:.3g} ms"


def event_refs(rows: pd.DataFrame, limit: int = MAX_EVIDENCE_EVENTS) -> list[dict]:
    """Evidence event references (rank, capture_id, step, event_id, name, dur_ns) of the longest ``rows``."""
    if rows is None or rows.empty:
        return []
    rows = rows.sort_values("dur_ns", ascending=False, kind="stable").head(limit)
    out = []
    for d in rows.to_dict("records"):
        out.append(
            {
                "rank": _ns(d.get("rank")),
                "capture_id": d.get("capture_id"),
                "step": _ns(d.get("step")),
                "event_id": _ns(d.get("event_id")),
                "name": d.get("name"),
                "dur_ns": _ns(d.get("dur_ns")),
            }
        )
    return out


def few_steps_penalty(n_steps: int) -> float:
    """Confidence taken off a finding resting on fewer than :data:`MIN_STEPS` windows (0 from MIN_STEPS on)."""
    return 0.05 + 0.1 * (MIN_STEPS - max(n_steps, 1)) if n_steps < MIN_STEPS else 0.0


def effect_size(value: float | None, threshold: float, comparison: str = ">=") -> float:
    """How far ``value`` is past ``threshold``: value ÷ threshold (``comparison`` ">=" / ">"), threshold ÷
    value ("<" / "<="); 1.0 at the threshold, +inf for a "<" rule at 0; 1.0 when unknown."""
    v = _num(value)
    if v is None or threshold <= 0:
        return 1.0
    if comparison in ("<", "<="):
        return float("inf") if v <= 0 else threshold / v
    return v / threshold


def confidence(
    base: float,
    *,
    effect: float,
    agreement: float,
    n_windows: int,
    corroborated: bool | None = None,
    n_calls: int | None = None,
) -> float:
    """Confidence 0–1 of a finding from its evidence (module docstring, "Confidence", per-rule table).

    Args:
        base: the rule's base confidence (how directly its metric measures the time lost).
        effect: metric ÷ threshold (:func:`effect_size`); ≥ 1 when the rule fired.
        agreement: share 0–1 of the scope's ranks (or windows) where the condition holds on its own.
        n_windows: distinct windows behind the finding (ProfilerSteps; a whole trace is one).
        corroborated: True / False when an independent table agrees / contradicts; None when unknown.
        n_calls: events the metric counts, when it counts events (None: it does not).

    Returns:
        base + EFFECT_WEIGHT × min(1, log(effect) / log(EFFECT_SATURATION)) + AGREEMENT_WEIGHT × agreement
        ± CORROBORATION_WEIGHT − few_steps_penalty(n_windows) − FEW_CALLS_PENALTY (n_calls < MIN_CALLS),
        clipped to [0.05, 0.95] and rounded to 2 decimals.
    """
    e = 0.0 if not effect or effect <= 1.0 else min(1.0, float(np.log(effect) / np.log(EFFECT_SATURATION)))
    c = base + EFFECT_WEIGHT * e + AGREEMENT_WEIGHT * max(0.0, min(1.0, agreement))
    if corroborated is True:
        c += CORROBORATION_WEIGHT
    elif corroborated is False:
        c -= CORROBORATION_WEIGHT
    c -= few_steps_penalty(n_windows)
    if n_calls is not None and n_calls < MIN_CALLS:
        c -= FEW_CALLS_PENALTY
    return round(max(0.05, min(0.95, c)), 2)


# ------------------------------------------------------------------------------------------------
# threshold rules: aggregate per rank and per job, then decide the scope


@dataclass
class _Scope:
    scope: str  # "job" or "rank=R"
    rows: pd.DataFrame  # the scope's rank-steps (with num, loss, hit)
    per_rank: pd.DataFrame  # rank, n_steps, value, est, steps: the ranks that pass on their own
    value: float
    est: float
    agreement: float  # share of the scope's ranks (job scope over ≥ 2 ranks) or windows where the rule holds


def _agreement(rows: pd.DataFrame, per_rank_ok: pd.DataFrame) -> float:
    """Agreement of :func:`confidence`: ranks passing on their own ÷ ranks of ``rows`` (≥ 2 ranks), else the
    share of ``rows`` (windows) where ``hit`` holds."""
    n = int(rows["rank"].nunique())
    return len(per_rank_ok) / n if n >= 2 else float(rows["hit"].mean())


def _pct_of_step(rows: pd.DataFrame) -> float:
    """Default metric: 100 × Σ ``num`` / Σ ``step_time_ns``."""
    return 100.0 * float(rows["num"].sum()) / max(float(rows["step_time_ns"].sum()), 1.0)


def _per_rank(
    rows: pd.DataFrame, metric: Callable[[pd.DataFrame], float], ok: Callable[[pd.DataFrame, float], bool]
) -> pd.DataFrame:
    out = []
    for rank, h in rows.groupby("rank", sort=True):
        v = metric(h)
        out.append(
            {
                "rank": int(rank),
                "n_steps": int(len(h)),
                "value": v,
                "est": float(h["loss"].sum()) / len(h),
                "steps": sorted({int(x) for x in h.loc[h["hit"], "step"] if int(x) >= 0}),
                "ok": bool(ok(h, v)),
            }
        )
    return pd.DataFrame(out, columns=["rank", "n_steps", "value", "est", "steps", "ok"])


def _scopes(
    rows: pd.DataFrame,
    ok: Callable[[pd.DataFrame, float], bool],
    metric: Callable[[pd.DataFrame], float] = _pct_of_step,
) -> list[_Scope]:
    """Scopes where the rule holds (module docstring, "Scope").

    Args:
        rows: rank-steps with ``rank``, ``step``, ``step_time_ns`` and the rule's ``num`` (metric
            numerator), ``loss`` (per-step estimate, ns) and ``hit`` (per-step condition).
        ok: ``ok(rows_of_scope, metric_value)`` → the rule holds for those rank-steps.
        metric: the metric of a set of rank-steps.
    """
    if rows.empty:
        return []
    per_rank = _per_rank(rows, metric, ok)
    value = metric(rows)
    if ok(rows, value):
        return [
            _Scope(
                "job",
                rows,
                per_rank[per_rank["ok"]],
                value,
                float(rows["loss"].sum()) / len(rows),
                _agreement(rows, per_rank[per_rank["ok"]]),
            )
        ]
    out = []
    for r in per_rank[per_rank["ok"]].itertuples(index=False):
        sub = rows[rows["rank"] == r.rank]
        out.append(
            _Scope(
                f"rank={int(r.rank)}",
                sub,
                per_rank[per_rank["rank"] == r.rank],
                float(r.value),
                float(r.est),
                float(sub["hit"].mean()),
            )
        )
    out.sort(key=lambda s: -s.est)
    return out[:MAX_RANK_SCOPED_FINDINGS]


def _ranks_of(s: _Scope) -> list[int]:
    return sorted(int(r) for r in s.per_rank["rank"])


def _n_steps(s: _Scope) -> int:
    return int(s.rows["step"].nunique())


def _steps_of(s: _Scope) -> list[int]:
    """ProfilerStep numbers where the condition holds (a whole-trace window, step -1, is no ProfilerStep)."""
    return sorted({int(x) for x in s.rows.loc[s.rows["hit"], "step"] if int(x) >= 0})


@dataclass(frozen=True)
class Words:
    """How a finding names its windows: ``kind`` (``step`` | ``trace`` | ``mixed``, evidence ``window``),
    ``of`` ("of the step time"), ``per`` ("per step"), ``note`` (appended to the title)."""

    kind: str
    of: str
    per: str
    note: str


_WORDS = {
    "step": Words("step", "of the step time", "per step", ""),
    "trace": Words("trace", "of the trace", "over the trace", " (no ProfilerStep: whole trace as one window)"),
    "mixed": Words("mixed", "of the time", "per window", " (ranks without ProfilerStep: whole trace as one window)"),
}


def window_words(rows: pd.DataFrame) -> Words:
    """The :class:`Words` of a set of windows (``window`` column; absent = ProfilerSteps)."""
    if rows is None or rows.empty or "window" not in rows:
        return _WORDS["step"]
    trace = rows["window"] == WINDOW_TRACE
    return _WORDS["step" if not trace.any() else ("trace" if trace.all() else "mixed")]


def _pct(v: float) -> str:
    """A percentage in words: 2 significant digits below 10 % (0.15%), else whole (33%)."""
    return f"{v:.2g}%" if abs(v) < 10 else f"{v:.0f}%"


def _per_rank_evidence(s: _Scope) -> list[dict]:
    pr = s.per_rank.sort_values("est", ascending=False, kind="stable").head(MAX_EVIDENCE_RANKS)
    return [
        {
            "rank": int(r.rank),
            "n_steps": int(r.n_steps),
            "value": round(float(r.value), 3),
            "est_time_lost_per_step_ns": int(round(r.est)),
            "steps": list(r.steps),
        }
        for r in pr.itertuples()
    ]


def _finding(
    rule: str,
    s: _Scope,
    *,
    title: str,
    metric: str,
    threshold: float,
    comparison: str,
    conf: float,
    recommendation: str,
    details: dict,
    events: list[dict] | None = None,
) -> dict:
    ranks = _ranks_of(s)
    evidence = {
        "scope": "job" if s.scope == "job" else "rank",
        "window": window_words(s.rows).kind,
        "rank": ranks[0] if s.scope != "job" else None,
        "threshold": threshold,
        "comparison": comparison,
        "n_rank_steps": int(len(s.rows)),
        "n_ranks": int(s.rows["rank"].nunique()),
        "per_rank": _per_rank_evidence(s),
        "events": events or [],
        "details": details,
    }
    return {
        "finding_id": f"{rule}/{s.scope}",
        "rule": rule,
        "title": title,
        "metric": metric,
        "value": round(float(s.value), 6),
        "est_time_lost_per_step_ns": int(round(max(s.est, 0.0))),
        "confidence": conf,
        "ranks": ranks,
        "steps": _steps_of(s),
        "evidence": evidence,
        "recommendation": recommendation,
    }


def _sum(rows: pd.DataFrame, col: str) -> int:
    return int(rows[col].fillna(0).sum()) if col in rows else 0


def _col(df: pd.DataFrame, col: str) -> pd.Series:
    """A numeric column with nulls as 0 (0 when the column is absent)."""
    if col not in df:
        return pd.Series(0.0, index=df.index)
    return pd.to_numeric(df[col], errors="coerce").fillna(0.0).astype(float)


def _cp_share(t: JobTables, ranks, bound_by: tuple[str, ...]) -> float | None:
    """Share (0–1) of the ranks' rank-scope critical-path time attributed to ``bound_by``; None without a path."""
    cp = t.cp_bound_by()
    cp = cp[cp["rank"].isin(list(ranks))]
    total = float(cp["dur_ns"].sum())
    if total <= 0:
        return None
    return float(cp.loc[cp["bound_by"].isin(bound_by), "dur_ns"].sum()) / total


# ------------------------------------------------------------------------------------------------
# rules


def host_bound_launch(t: JobTables) -> list[dict]:
    """``host_bound_launch``: the GPU waits while the host prepares and launches work.

    Definition: metric ``cpu_bound_pct_of_step`` = 100 × Σ ``cpu_bound_time_ns`` / Σ ``step_time_ns``
    (``cpu_bound_time_ns``: time in the step with no device activity on any stream while a host
    thread is inside a cpu_op / cuda_runtime / cuda_driver event, data-loader time excluded;
    :mod:`jobs.analyze.hta.host_time`). Fires at ≥ :data:`HOST_BOUND_PCT`.

    Source: HTA idle time breakdown (``host_wait``: "the Host/CPU was not enqueuing kernels fast
    enough") and HTA critical-path ``cpu_bound``; PyTorch tuning guide (CUDA graphs,
    ``torch.compile(mode="reduce-overhead")``).

    The advice follows the step's CUDA-graph calls (``events``): a step that captures a graph is told to capture
    once and replay, one that already replays a graph to move the eager work around it, others to use a graph.

    Time lost per step: ``cpu_bound_time_ns`` (GPU idle time the host is responsible for: what
    removing the host overhead can at most give back). Corroborated when ``cpu_bound`` +
    ``launch_overhead`` are ≥ 50 % of the ranks' critical path, or ``idle_host_wait_ns`` is the
    largest HTA idle category.
    """
    s = t.gpu_steps
    if s.empty:
        return []
    rows = s.assign(num=_col(s, "cpu_bound_time_ns"), loss=_col(s, "cpu_bound_time_ns"))
    rows["hit"] = rows["num"] >= HOST_BOUND_PCT / 100 * rows["step_time_ns"]
    out = []
    for sc in _scopes(rows, lambda _r, v: v >= HOST_BOUND_PCT):
        ranks = _ranks_of(sc)
        share = _cp_share(t, ranks, ("cpu_bound", "launch_overhead"))
        hw, kw, ow = (_sum(sc.rows, c) for c in ("idle_host_wait_ns", "idle_kernel_wait_ns", "idle_other_ns"))
        host_wait_top = hw > 0 and hw >= max(kw, ow)
        corr = (
            True
            if (share is not None and share >= 0.5) or host_wait_top
            else (False if share is not None and share < 0.2 else None)
        )
        w = window_words(sc.rows)
        graphs = _graph_calls_per_step(t.events, sc.rows)
        out.append(
            _finding(
                "host_bound_launch",
                sc,
                title=f"GPU idle while the host works: {_pct(sc.value)} {w.of} ({_ms(sc.est)} {w.per}) is "
                f"CPU-bound{w.note}",
                metric="cpu_bound_pct_of_step",
                threshold=HOST_BOUND_PCT,
                comparison=">=",
                conf=confidence(
                    0.5,
                    effect=effect_size(sc.value, HOST_BOUND_PCT),
                    agreement=sc.agreement,
                    n_windows=_n_steps(sc),
                    corroborated=corr,
                ),
                recommendation=_host_bound_advice(graphs),
                details={
                    "cpu_bound_time_ns": _sum(sc.rows, "cpu_bound_time_ns"),
                    "step_time_ns": _sum(sc.rows, "step_time_ns"),
                    "idle_host_wait_ns": hw,
                    "idle_kernel_wait_ns": kw,
                    "idle_other_ns": ow,
                    "launch_runtime_ns": _sum(sc.rows, "launch_runtime_ns"),
                    "n_launches": _sum(sc.rows, "n_launches"),
                    "critical_path_cpu_share": None if share is None else round(share, 4),
                    "graph_launches_per_step": round(graphs["launch"], 2),
                    "graph_captures_per_step": round(graphs["capture"], 2),
                },
                events=t.cp_events(("cpu_bound",), ranks),
            )
        )
    return out


def _graph_calls_per_step(events: pd.DataFrame, rows: pd.DataFrame) -> dict[str, float]:
    """Mean CUDA/HIP graph replays (``launch``) and captures/instantiations (``capture``) per rank-step of
    ``rows`` (:data:`jobs.analyze.trace.launches.GRAPH_LAUNCH_NAMES`, ``GRAPH_CAPTURE_NAMES``)."""
    out = {"launch": 0.0, "capture": 0.0}
    if events.empty or rows.empty or not {"rank", "step", "name"} <= set(events):
        return out
    keys = set(zip(rows["rank"], rows["step"]))
    ev = events[[k in keys for k in zip(events["rank"], events["step"])]]
    for kind, names in (("launch", GRAPH_LAUNCH_NAMES), ("capture", GRAPH_CAPTURE_NAMES)):
        out[kind] = float(ev["name"].isin(names).sum()) / len(rows)
    return out


def _host_bound_advice(graphs: dict[str, float]) -> str:
    """``host_bound_launch``'s recommendation in the context of the step's CUDA-graph calls."""
    rest = "move CPU-side preprocessing out of the step, and raise the batch size per step so that each launch does "
    if graphs["capture"] > 0:
        return (
            f"The host cannot enqueue work fast enough, and the step captures a CUDA graph ({graphs['capture']:.0f} "
            "capture/instantiate calls per step): capturing is host work that only a replay saves. Capture once at "
            "warm-up and replay each step; find why it is captured again (dynamic shapes, new input addresses, "
            "torch.compile recompiling: TORCH_LOGS=recompiles); " + rest + "more work."
        )
    if graphs["launch"] > 0:
        return (
            f"The host cannot enqueue work fast enough outside the CUDA graph the step already replays "
            f"({graphs['launch']:.0f} graph launches per step): move the eager ops left around it into the graph "
            "(or torch.compile them), " + rest + "more work."
        )
    return (
        "The host cannot enqueue work fast enough. Capture the step (or its static part) in a CUDA graph "
        '(torch.cuda.graphs / torch.compile(mode="reduce-overhead")), fuse small ops with torch.compile, '
        + rest
        + "more work."
    )


def many_tiny_kernels(t: JobTables) -> list[dict]:
    """``many_tiny_kernels``: most kernels run shorter than it takes to launch them.

    Definition: metric ``short_kernel_pct_of_launches`` = 100 × Σ ``n_short_kernels`` / Σ
    ``n_launches`` (HTA short GPU kernels: device time < launch call time ≤ 50 µs). Fires at ≥
    :data:`SHORT_KERNEL_PCT` with ≥ :data:`MIN_SHORT_KERNELS_PER_STEP` short kernels per rank-step.

    Source: HTA ``get_cuda_kernel_launch_stats`` (short kernels); PyTorch tuning guide (fuse
    pointwise ops, CUDA graphs); NVIDIA CUDA graphs ("Getting Started with CUDA Graphs": launch
    overhead dominates short kernels).

    Time lost per step: the launch-call time spent on short kernels, ``launch_runtime_ns`` ×
    ``n_short_kernels`` / ``n_launches``, capped at the GPU idle time in the step (fusion or graph
    capture removes the per-launch host cost; the GPU gains only where it was idle). Corroborated
    when ``launch_overhead`` + ``kernel_kernel_gap`` + ``cpu_bound`` are ≥ 50 % of the critical path.
    """
    s = t.gpu_steps
    if s.empty:
        return []
    n_launch = _col(s, "n_launches")
    n_short = _col(s, "n_short_kernels")
    frac = (n_short / n_launch.where(n_launch > 0)).fillna(0.0)
    rows = s.assign(
        num=0.0,
        loss=np.minimum(_col(s, "launch_runtime_ns") * frac, s["gpu_idle_ns"]),
        _short=n_short,
        _launch=n_launch,
    )
    rows["hit"] = (frac * 100 >= SHORT_KERNEL_PCT) & (n_short >= MIN_SHORT_KERNELS_PER_STEP)

    def metric(r: pd.DataFrame) -> float:
        return 100.0 * float(r["_short"].sum()) / max(float(r["_launch"].sum()), 1.0)

    def ok(r: pd.DataFrame, v: float) -> bool:
        return v >= SHORT_KERNEL_PCT and float(r["_short"].sum()) / len(r) >= MIN_SHORT_KERNELS_PER_STEP

    out = []
    for sc in _scopes(rows, ok, metric):
        ranks = _ranks_of(sc)
        share = _cp_share(t, ranks, ("launch_overhead", "kernel_kernel_gap", "cpu_bound"))
        corr = None if share is None else (True if share >= 0.5 else (False if share < 0.2 else None))
        n_steps = max(len(sc.rows), 1)
        w = window_words(sc.rows)
        n_short = int(sc.rows["_short"].sum())
        out.append(
            _finding(
                "many_tiny_kernels",
                sc,
                title=f"{_pct(sc.value)} of kernel launches are shorter than their launch "
                f"({n_short / n_steps:.0f} short kernels {'in the trace' if w.kind == 'trace' else w.per})"
                f"{w.note}",
                metric="short_kernel_pct_of_launches",
                threshold=SHORT_KERNEL_PCT,
                comparison=">=",
                conf=confidence(
                    0.4,
                    effect=effect_size(sc.value, SHORT_KERNEL_PCT),
                    agreement=sc.agreement,
                    n_windows=_n_steps(sc),
                    corroborated=corr,
                    n_calls=n_short,
                ),
                recommendation="Fuse the small kernels: torch.compile (Inductor fuses pointwise/reduction chains), "
                "fused optimizers (foreach=True / fused=True), horizontal fusion of per-table or per-layer "
                "ops; or capture the step in a CUDA graph so hundreds of launches cost one.",
                details={
                    "n_short_kernels": int(sc.rows["_short"].sum()),
                    "n_launches": int(sc.rows["_launch"].sum()),
                    "launch_runtime_ns": _sum(sc.rows, "launch_runtime_ns"),
                    "launch_delay_p50_ns_median": _ns(sc.rows["launch_delay_p50_ns"].median())
                    if "launch_delay_p50_ns" in sc.rows
                    else None,
                    "top_short_kernels": _top_short_kernels(t, ranks),
                    "critical_path_launch_share": None if share is None else round(share, 4),
                },
            )
        )
    return out


def _top_short_kernels(t: JobTables, ranks, limit: int = 5, short_ns: float = 10_000.0) -> list[dict]:
    """Most frequent COMPUTATION kernel names with a mean duration < 10 µs (from ``kernels``)."""
    k = t.kernels
    if k.empty or "mean_ns" not in k:
        return []
    k = k[k["rank"].isin(list(ranks)) & (k.get("kernel_type", "COMPUTATION") == "COMPUTATION")]
    g = k.groupby("name").agg(n=("n", "sum"), total_ns=("total_ns", "sum"))
    g["mean_ns"] = g["total_ns"] / g["n"].clip(lower=1)
    g = g[g["mean_ns"] < short_ns].sort_values(["n", "total_ns"], ascending=False).head(limit)
    return [{"name": n, "n": int(r.n), "mean_ns": round(float(r.mean_ns), 1)} for n, r in g.iterrows()]


def _comm_loss(t: JobTables, s: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Per rank-step: (exposed communication that is the transfer itself, waiting inside exposed comm), ns.

    From ``collectives`` when it has the rank-step: Σ max(0, exposed_ns − wait_ns) and Σ min(exposed_ns,
    wait_ns); else (``steps.exposed_comm_ns``, 0).
    """
    exposed = _col(s, "exposed_comm_ns")
    c = t.collectives
    if c.empty or "exposed_ns" not in c:
        return exposed, pd.Series(0.0, index=s.index)
    c = c.assign(_e=_col(c, "exposed_ns"), _w=_col(c, "wait_ns"))
    c["_net"] = (c["_e"] - c["_w"]).clip(lower=0)
    c["_wait"] = np.minimum(c["_e"], c["_w"])
    g = c.groupby(["rank", "step"])[["_net", "_wait"]].sum()
    key = list(zip(s["rank"], s["step"]))
    known = pd.Series([k in g.index for k in key], index=s.index)
    net = pd.Series([g["_net"].get(k, np.nan) for k in key], index=s.index, dtype=float)
    wait = pd.Series([g["_wait"].get(k, 0.0) for k in key], index=s.index, dtype=float)
    return net.where(known, exposed), wait.where(known, 0.0)


def exposed_communication(t: JobTables) -> list[dict]:
    """``exposed_communication``: collectives run while no computation does.

    Definition: metric ``exposed_comm_pct_of_step`` = 100 × Σ ``exposed_comm_ns`` / Σ
    ``step_time_ns`` (exposed communication: merged COMMUNICATION time not overlapped by merged
    COMPUTATION, HTA ``get_comm_comp_overlap`` sweep). Fires at ≥ :data:`EXPOSED_COMM_PCT`.

    Source: HTA comm/comp overlap; TB plugin (communication > 10 % of step time); PyTorch DDP /
    FSDP docs (gradient bucketing ``bucket_cap_mb``, overlap of backward and all-reduce, FSDP
    prefetch).

    Time lost per step: the exposed time of the transfers themselves, Σ over the rank-step's
    collectives of max(0, ``exposed_ns`` − ``wait_ns``); time a rank spends waiting inside a
    collective for a late peer is not counted here (it is reported by ``straggler_rank``, and
    better overlap does not remove it). Without ``collectives`` rows: ``exposed_comm_ns``.
    """
    s = t.gpu_steps
    if s.empty or _col(s, "exposed_comm_ns").sum() <= 0:
        return []
    net, wait = _comm_loss(t, s)
    rows = s.assign(num=_col(s, "exposed_comm_ns"), loss=net, _wait=wait)
    rows["hit"] = rows["num"] >= EXPOSED_COMM_PCT / 100 * rows["step_time_ns"]
    out = []
    for sc in _scopes(rows, lambda _r, v: v >= EXPOSED_COMM_PCT):
        ranks = _ranks_of(sc)
        exposed, waiting = float(sc.rows["num"].sum()), float(sc.rows["_wait"].sum())
        wait_share = waiting / exposed if exposed > 0 else 0.0
        c = t.collectives
        calls = c[c["rank"].isin(sc.rows["rank"].unique())] if not c.empty and "rank" in c else c
        details = {
            "exposed_comm_ns": int(exposed),
            "waiting_in_exposed_ns": int(waiting),
            "wait_share_of_exposed": round(wait_share, 4),
            "comm_time_ns": _sum(sc.rows, "comm_time_ns"),
            "overlap_pct_median": _num(sc.rows["overlap_pct"].median()) if "overlap_pct" in sc.rows else None,
        }
        advice = []
        if not calls.empty:
            n_steps = max(len(sc.rows), 1)
            msg = pd.to_numeric(calls.get("msg_bytes"), errors="coerce")
            small = int((msg < SMALL_MESSAGE_BYTES).sum())
            details.update(
                {
                    "n_calls": int(len(calls)),
                    "n_calls_per_rank_step": round(len(calls) / n_steps, 2),
                    "n_small_calls": small,
                    "msg_bytes_median": _ns(msg.median()),
                    "busbw_gbps_median": _num(pd.to_numeric(calls.get("busbw_gbps"), errors="coerce").median()),
                    "by_collective": {str(k): int(v) for k, v in calls["collective"].value_counts().items()}
                    if "collective" in calls
                    else {},
                }
            )
            if small >= max(4, len(calls) // 2):
                advice.append(
                    f"{small} of {len(calls)} calls move < 1 MiB (latency-bound): coalesce them — larger "
                    "DDP buckets (bucket_cap_mb), fewer/larger FSDP units, batched all_to_all."
                )
            top = calls.sort_values("exposed_ns", ascending=False, kind="stable").head(MAX_EVIDENCE_EVENTS)
            events = [
                {
                    "rank": _ns(r.get("rank")),
                    "capture_id": r.get("capture_id"),
                    "step": _ns(r.get("step")),
                    "event_id": _ns(r.get("event_id")),
                    "name": r.get("name"),
                    "dur_ns": _ns(r.get("dur_ns")),
                    "exposed_ns": _ns(r.get("exposed_ns")),
                    "wait_ns": _ns(r.get("wait_ns")),
                    "collective": r.get("collective"),
                    "msg_bytes": _ns(r.get("msg_bytes")),
                }
                for r in top.to_dict("records")
            ]
        else:
            events = []
        if wait_share >= 0.5:
            advice.append(
                f"{wait_share:.0%} of the exposed time is waiting for late ranks: fix the straggler first "
                "(see the late-rank finding)."
            )
        advice.append(
            "Overlap communication with computation: DDP overlaps gradient all-reduce with backward "
            "(keep find_unused_parameters off, tune bucket_cap_mb so the first bucket starts early); FSDP: "
            "forward/backward prefetch; launch independent collectives asynchronously (async_op=True) "
            "and wait as late as possible."
        )
        corr_share = _cp_share(t, ranks, ("communication",))
        corr = None if corr_share is None else (True if corr_share >= 0.2 else None)
        w = window_words(sc.rows)
        out.append(
            _finding(
                "exposed_communication",
                sc,
                title=f"Communication exposed for {_pct(sc.value)} {w.of}"
                + (f"; {wait_share:.0%} of it waiting for late ranks" if wait_share >= 0.1 else "")
                + f" (transfers: {_ms(sc.est)} {w.per}){w.note}",
                metric="exposed_comm_pct_of_step",
                threshold=EXPOSED_COMM_PCT,
                comparison=">=",
                conf=confidence(
                    0.5 if not calls.empty else 0.4,
                    effect=effect_size(sc.value, EXPOSED_COMM_PCT),
                    agreement=sc.agreement,
                    n_windows=_n_steps(sc),
                    corroborated=corr,
                    n_calls=None if calls.empty else int(len(calls)),
                ),
                recommendation=" ".join(advice),
                details=details,
                events=events,
            )
        )
    return out


def straggler_rank(t: JobTables) -> list[dict]:
    """``straggler_rank``: one rank arrives last at most collectives and the others wait for it.

    Definition: over the collectives matched on ≥ 2 ranks (``collectives.n_ranks_matched``), the
    rank's metric ``last_arrival_pct`` = 100 × calls where ``is_last_arrival`` / calls. Fires when
    the share is ≥ max(:data:`STRAGGLER_MIN_SHARE`, min(0.75, 2/n)) (n = median ranks per call)
    over ≥ :data:`STRAGGLER_MIN_CALLS` calls, the binomial tail P(X ≥ last arrivals | calls, 1/n)
    is ≤ :data:`STRAGGLER_MAX_P_VALUE`, and the wait it causes is ≥ :data:`STRAGGLER_MIN_WAIT_PCT` %
    of the median step time.

    Source: HTA ``get_potential_stragglers`` (latest-starting rank of the communication kernels,
    counted across iterations); TraceLens ``NcclAnalyser`` (wait = latest start − own start).

    Time lost per step: for each call where the rank is last, the median over the other ranks of
    their ``wait_ns`` (had the straggler arrived like the typical rank, the call would have started
    that much earlier), summed and divided by the number of steps. Confidence (:func:`confidence`):
    base 0.6 (a significance test, not a proxy), effect = last-arrival share ÷ required share, agreement =
    1 − the binomial tail P(X ≥ last arrivals | calls, 1/n) (the chance that a rank this often last is
    luck), lowered with fewer than :data:`MIN_STEPS` steps and fewer than :data:`MIN_CALLS` calls.
    """
    c = t.collectives
    need = {"rank", "match_key", "is_last_arrival", "n_ranks_matched", "wait_ns"}
    if c.empty or not need <= set(c.columns):
        return []
    c = c[pd.to_numeric(c["n_ranks_matched"], errors="coerce").fillna(0) >= 2]
    if c.empty:
        return []
    last = c["is_last_arrival"].fillna(False).astype(bool)
    n_calls = int(c["match_key"].nunique())
    n = float(c.groupby("match_key")["rank"].nunique().median())
    need_share = max(STRAGGLER_MIN_SHARE, min(0.75, 2.0 / max(n, 1.0)))
    wait = _col(c, "wait_ns")
    # median wait of the *other* ranks of each call
    others = c.assign(_w=wait)[~last].groupby("match_key")["_w"].median()
    n_steps = int(t.steps["step"].nunique()) if not t.steps.empty else int(c["step"].nunique() or 1)
    n_steps = max(n_steps, 1)
    step_p50 = float(t.steps["step_time_ns"].median()) if not t.steps.empty else None
    out = []
    counts = c[last].groupby("rank")["match_key"].nunique()
    per_rank = (counts / c.groupby("rank")["match_key"].nunique()).fillna(0.0)
    for rank, k in counts.items():
        calls_r = int(c.loc[c["rank"] == rank, "match_key"].nunique())
        share = k / max(calls_r, 1)
        if calls_r < STRAGGLER_MIN_CALLS or share < need_share:
            continue
        mine = c[last & (c["rank"] == rank)].copy()
        mine["caused_ns"] = mine["match_key"].map(others).fillna(0.0)
        est = float(mine["caused_ns"].sum()) / n_steps
        if step_p50 and est < STRAGGLER_MIN_WAIT_PCT / 100 * step_p50:
            continue
        p_value = binomial_tail(int(k), calls_r, 1.0 / max(n, 1.0))
        if p_value > STRAGGLER_MAX_P_VALUE:
            continue
        conf = confidence(
            0.6,
            effect=share / need_share,
            agreement=1.0 - p_value,
            n_windows=n_steps,
            n_calls=calls_r,
        )
        steps = sorted({int(x) for x in mine["step"].dropna() if int(x) >= 0}) if "step" in mine else []
        rank_windows = t.steps[t.steps["rank"] == rank] if not t.steps.empty else t.steps
        w = window_words(rank_windows)
        excess = _excess_vs_median(t, int(rank))
        biggest = max(excess.items(), key=lambda kv: kv[1] or 0, default=(None, None))
        cause = (
            f" Rank {int(rank)} spends more {EXCESS_WORDS[biggest[0]]} than the median rank "
            f"(+{_ms(biggest[1])} {w.per}): start there."
            if biggest[1] and biggest[1] > 0.1 * est
            else ""
        )
        events = [
            {
                "rank": int(rank),
                "capture_id": r.get("capture_id"),
                "step": _ns(r.get("step")),
                "event_id": _ns(r.get("event_id")),
                "name": r.get("name"),
                "dur_ns": _ns(r.get("dur_ns")),
                "match_key": r.get("match_key"),
                "collective": r.get("collective"),
                "others_wait_median_ns": _ns(r.get("caused_ns")),
                "skew_ns": _ns(r.get("skew_ns")),
            }
            for r in mine.sort_values("caused_ns", ascending=False).head(MAX_EVIDENCE_EVENTS).to_dict("records")
        ]
        out.append(
            {
                "finding_id": f"straggler_rank/rank={int(rank)}",
                "rule": "straggler_rank",
                "title": f"Rank {int(rank)} arrives last at {int(k)} of {calls_r} collectives; the other ranks wait "
                f"{_ms(est)} {w.per} for it{w.note}",
                "metric": "last_arrival_pct",
                "value": round(100.0 * share, 6),
                "est_time_lost_per_step_ns": int(round(est)),
                "confidence": conf,
                "ranks": [int(rank)],
                "steps": steps,
                "evidence": {
                    "scope": "rank",
                    "window": w.kind,
                    "rank": int(rank),
                    "threshold": round(100 * need_share, 3),
                    "comparison": ">=",
                    "n_rank_steps": int(len(t.steps[t.steps["rank"] == rank])) if not t.steps.empty else 0,
                    "n_ranks": int(c["rank"].nunique()),
                    "per_rank": [
                        {"rank": int(r), "value": round(100 * float(v), 3)}
                        for r, v in per_rank.sort_values(ascending=False).head(MAX_EVIDENCE_RANKS).items()
                    ],
                    "events": events,
                    "details": {
                        "n_calls": calls_r,
                        "n_last_arrivals": int(k),
                        "n_job_calls": n_calls,
                        "ranks_per_call_median": n,
                        "binomial_p_value": p_value,
                        "n_steps": n_steps,
                        "excess_vs_median_rank_ns": excess,
                    },
                },
                "recommendation": f"Find why rank {int(rank)} is late: compare its step with the others (host/CPU "
                "contention, data loading, thermal or clock throttling, a slower GPU or link, uneven "
                "work such as embedding-table or sequence-length imbalance); re-balance the work or "
                "replace the node." + cause,
            }
        )
    return out


#: Work a late rank may have more of (host work, input, compute, copies), column → words for the advice; time
#: that grows on the *waiting* ranks (host op time, launch-call time: ops blocked in syncs) is left out.
EXCESS_WORDS = {
    "cpu_bound_time_ns": "CPU-bound time (host busy while the GPU idles)",
    "dataloader_time_ns": "data-loading time",
    "compute_time_ns": "compute time",
    "memory_time_ns": "memory-copy time",
}
_EXCESS_COLUMNS = tuple(EXCESS_WORDS)


def _excess_vs_median(t: JobTables, rank: int) -> dict:
    """Per-step mean of a few time columns on ``rank`` minus the median over the other ranks, ns."""
    s = t.steps
    if s.empty:
        return {}
    cols = [c for c in _EXCESS_COLUMNS if c in s]
    per = s.groupby("rank")[cols].mean()
    if rank not in per.index or len(per) < 2:
        return {}
    other = per.drop(index=rank).median()
    return {c: _ns(per.loc[rank, c] - other[c]) for c in cols}


def dataloader_bound(t: JobTables) -> list[dict]:
    """``dataloader_bound``: steps wait for the input pipeline.

    Definition: metric ``dataloader_pct_of_step`` = 100 × Σ ``dataloader_time_ns`` / Σ
    ``step_time_ns`` (data-loader time: union of host events named like data loading in the step;
    :mod:`jobs.analyze.hta.host_time`). Fires above :data:`DATALOADER_PCT`. Uses every rank-step (the
    rule also holds for CPU-only traces).

    Source: TB plugin ("This run has high time cost on input data loading", DataLoader > 5 % of step
    time); PyTorch tuning guide (``num_workers``, ``pin_memory``); HTA critical path ``data_loading``
    nodes (newer HTA).

    Time lost per step: ``dataloader_time_ns`` capped at the GPU idle time in the step (loading
    while the GPU computes costs nothing). Corroborated when ``data_loading`` segments lie on the
    critical path.
    """
    s = t.steps
    if s.empty:
        return []
    s = s[s["step_time_ns"] > 0]
    dl = _col(s, "dataloader_time_ns")
    if dl.sum() <= 0:
        return []
    idle = s["gpu_idle_ns"].where(s["has_gpu"], s["step_time_ns"]).astype(float)
    rows = s.assign(num=dl, loss=np.minimum(dl, idle))
    rows["hit"] = rows["num"] > DATALOADER_PCT / 100 * rows["step_time_ns"]
    out = []
    for sc in _scopes(rows, lambda _r, v: v > DATALOADER_PCT):
        ranks = _ranks_of(sc)
        share = _cp_share(t, ranks, ("data_loading",))
        corr = None if share is None else share > 0
        w = window_words(sc.rows)
        out.append(
            _finding(
                "dataloader_bound",
                sc,
                title=f"Data loading takes {_pct(sc.value)} {w.of} ({_ms(sc.est)} {w.per} with the GPU idle){w.note}",
                metric="dataloader_pct_of_step",
                threshold=DATALOADER_PCT,
                comparison=">",
                conf=confidence(
                    0.5,
                    effect=effect_size(sc.value, DATALOADER_PCT),
                    agreement=sc.agreement,
                    n_windows=_n_steps(sc),
                    corroborated=corr,
                ),
                recommendation="Load data ahead of the step: DataLoader(num_workers>0, persistent_workers=True, "
                "prefetch_factor≥2, pin_memory=True) and .to(device, non_blocking=True); move decoding/"
                "augmentation to the workers or the GPU (e.g. DALI); check the storage read throughput.",
                details={
                    "dataloader_time_ns": _sum(sc.rows, "dataloader_time_ns"),
                    "step_time_ns": _sum(sc.rows, "step_time_ns"),
                    "critical_path_data_loading_share": None if share is None else round(share, 4),
                },
                events=t.cp_events(("data_loading",), ranks),
            )
        )
    return out


def _track(ev: pd.DataFrame) -> list[str]:
    """The columns of ``ev`` that name a host thread."""
    return [c for c in ("rank", "capture_id", "tid") if c in ev]


def _reaches_device(ev: pd.DataFrame) -> np.ndarray:
    """Per row of ``ev`` (shape ``(n,)``): False for an ATen sync op (:data:`ATEN_SYNC_NAMES`) with no runtime
    synchronize or host copy starting inside it on its thread (``aten::item`` of a CPU tensor), else True."""
    out = np.ones(len(ev), bool)
    aten = ev["name"].isin(ATEN_SYNC_NAMES).to_numpy()
    if not aten.any():
        return out
    runtime = (ev["name"].isin(set(SYNC_NAMES) - set(ATEN_SYNC_NAMES)) | ev["name"].isin(HOST_COPY_NAMES)).to_numpy()
    track = _track(ev)
    key = ev[track].astype(str).agg("\0".join, axis=1).to_numpy() if track else np.zeros(len(ev), object)
    ts, end = ev["ts_ns"].to_numpy(), ev["end_ns"].to_numpy()
    for k in set(key[aten]):
        mine = np.flatnonzero(aten & (key == k))
        starts = np.sort(ts[runtime & (key == k)])
        out[mine] = np.searchsorted(starts, end[mine], side="right") > np.searchsorted(starts, ts[mine], side="left")
    return out


def _sync_per_step(ev: pd.DataFrame, by_design: set | None = None) -> pd.DataFrame:
    """Per (rank, step): blocked_ns (union of sync events), n_calls (top-level sync events), top events.

    ATen sync ops that reach no device are left out (:func:`_reaches_device`); with ``by_design`` (capture ids
    whose steps synchronize by design) their top-level device-wide synchronizations too, counted in
    ``n_by_design``. ``n_runtime`` counts every runtime/driver synchronize call, nested or not (what a search
    of the raw trace for ``Synchronize`` finds).
    """
    cols = ["rank", "step", "blocked_ns", "n_calls", "n_runtime", "n_by_design"]
    ev = ev[ev["step"].notna() & (ev["name"].isin(SYNC_NAMES) | ev["name"].isin(HOST_COPY_NAMES))].copy()
    if ev.empty:
        return pd.DataFrame(columns=cols)
    ev["ts_ns"] = pd.to_numeric(ev["ts_ns"], errors="coerce").astype("int64")
    ev["dur_ns"] = pd.to_numeric(ev["dur_ns"], errors="coerce").fillna(0).astype("int64")
    ev["end_ns"] = ev["ts_ns"] + ev["dur_ns"]
    ev = ev[_reaches_device(ev) & ev["name"].isin(SYNC_NAMES)]
    if ev.empty:
        return pd.DataFrame(columns=cols)
    track = _track(ev)
    ev = ev.sort_values([*track, "ts_ns", "dur_ns"], ascending=[*([True] * len(track)), True, False], kind="stable")
    prev_end = ev.groupby(track, dropna=False)["end_ns"].transform(lambda e: e.cummax().shift(1))
    ev["top"] = ~((ev["ts_ns"] <= prev_end) & (ev["end_ns"] <= prev_end))
    ev["design"] = (
        ev["top"] & ev["name"].isin(DEVICE_SYNC_NAMES) & ev["capture_id"].isin(by_design or set())
        if "capture_id" in ev
        else False
    )
    runtime = ~ev["name"].isin(ATEN_SYNC_NAMES)
    ev["n_runtime"] = runtime.astype(int)
    rows = []
    for (rank, step), g in ev.groupby(["rank", "step"], sort=True):
        n_runtime = int(g["n_runtime"].sum())
        n_design = int(g["design"].sum())
        g = g[~g["design"]]
        blocked = total_length(*merge_intervals(g["ts_ns"].to_numpy(), g["end_ns"].to_numpy()))
        rows.append(
            {
                "rank": rank,
                "step": step,
                "blocked_ns": int(blocked),
                "n_calls": int(g["top"].sum()),
                "n_runtime": n_runtime,
                "n_by_design": n_design,
                "names": g.loc[g["top"], "name"].value_counts().to_dict(),
            }
        )
    return pd.DataFrame(rows)


def sync_by_design(t: JobTables) -> dict[str, str]:
    """Capture id → why its steps synchronize by design: a capture tag (:data:`BY_DESIGN_TAGS`) or a user
    annotation in its events matching :data:`BY_DESIGN_ANNOTATION` (its name)."""
    out: dict[str, str] = {}
    cap = t.captures
    if len(cap) and {"capture_id", "tags_json"} <= set(cap):
        for cid, tags in zip(cap["capture_id"], cap["tags_json"]):
            try:
                d = json.loads(tags) if isinstance(tags, str) and tags else {}
            except ValueError:
                d = {}
            for k, ok in BY_DESIGN_TAGS.items():
                if str(d.get(k, "")).strip().lower() in ok:
                    out[str(cid)] = f"tag {k}={d[k]}"
    ev = t.events
    if len(ev) and {"capture_id", "category", "name"} <= set(ev):
        rx = re.compile(BY_DESIGN_ANNOTATION)
        notes = ev[(ev["category"] == "user_annotation") & ev["name"].astype(str).map(lambda n: bool(rx.search(n)))]
        for cid, name in zip(notes["capture_id"], notes["name"]):
            out.setdefault(str(cid), f"annotation {name!r}")
    return out


def blocking_sync(t: JobTables) -> list[dict]:
    """``blocking_sync``: the step synchronizes the host with the device.

    Definition: host events named in :data:`SYNC_NAMES` inside a step (``events.step``), but an ATen op among them
    (``aten::item``…) only when a runtime synchronize or host copy runs inside it (``.item()`` of a CPU tensor
    waits for no device); per rank-step ``blocked_ns`` = union of their intervals (nested calls such as
    ``aten::item`` → ``aten::_local_scalar_dense`` → ``cudaStreamSynchronize`` count once) and ``n_calls`` = the
    top-level ones (not inside another sync event on the same thread); ``n_runtime_sync_calls`` in the details
    counts every runtime/driver call, nested or not. A step declared to synchronize by design
    (:func:`sync_by_design`: a benchmark harness) has its top-level device-wide synchronizations left out. Metric
    ``sync_blocked_pct_of_step`` = 100 × Σ blocked / Σ step time. Fires at ≥ :data:`SYNC_PCT` or
    with ≥ :data:`SYNC_CALLS_PER_STEP` calls per step, in rank-steps with device activity only (on a CPU-only
    rank ``aten::item`` waits for no device).

    Source: HTA critical path (blocking CUDA calls and ``cuda_sync`` dependency edges); NVIDIA CUDA
    Best Practices (minimize host-device synchronization); PyTorch tuning guide ("avoid unnecessary
    CPU-GPU synchronization": ``.item()``, ``print(cuda_tensor)``, ``nonzero``);
    ``torch.cuda.set_sync_debug_mode``.

    Time lost per step: ``blocked_ns`` capped at the GPU idle time in the step — while the host is
    blocked it does not enqueue, so the device queue runs dry when the call returns; the GPU can
    regain at most the time it was idle. Upper bound, hence the low base confidence.
    """
    ev = t.events
    need = {"rank", "step", "name", "ts_ns", "dur_ns"}
    if ev.empty or not need <= set(ev.columns) or t.steps.empty:
        return []
    design = sync_by_design(t)
    per = _sync_per_step(ev, set(design))
    if per.empty:
        return []
    s = t.steps[t.steps["step_time_ns"] > 0]
    rows = s.merge(per, on=["rank", "step"], how="left")
    rows = rows[rows["has_gpu"].fillna(False).astype(bool)]  # without a device, aten::item synchronizes nothing
    if rows.empty:
        return []
    rows["blocked_ns"] = rows["blocked_ns"].fillna(0.0).astype(float)
    rows["n_calls"] = rows["n_calls"].fillna(0).astype(int)
    idle = rows["gpu_idle_ns"].where(rows["has_gpu"], rows["step_time_ns"]).astype(float)
    rows = rows.assign(num=rows["blocked_ns"], loss=np.minimum(rows["blocked_ns"], idle))
    # a call count needs steps to count per: on a whole-trace window only the blocked share is judged
    is_step = rows["window"] != WINDOW_TRACE if "window" in rows else pd.Series(True, index=rows.index)
    rows["_step_calls"] = rows["n_calls"].where(is_step)
    rows["hit"] = (rows["num"] >= SYNC_PCT / 100 * rows["step_time_ns"]) | (
        is_step & (rows["n_calls"] >= SYNC_CALLS_PER_STEP)
    )

    def ok(r: pd.DataFrame, v: float) -> bool:
        per_step = r["_step_calls"].dropna()
        return v >= SYNC_PCT or (len(per_step) > 0 and float(per_step.mean()) >= SYNC_CALLS_PER_STEP)

    out = []
    for sc in _scopes(rows, ok):
        ranks = _ranks_of(sc)
        names: dict[str, int] = {}
        for d in sc.rows["names"].dropna():
            for k, v in d.items():
                names[k] = names.get(k, 0) + int(v)
        n_calls = int(sc.rows["n_calls"].sum())
        calls_per_step = n_calls / max(len(sc.rows), 1)
        sel = ev[ev["rank"].isin(ranks) & ev["step"].notna() & ev["name"].isin(SYNC_NAMES)]
        caps = sorted(set(sel["capture_id"])) if "capture_id" in sel else []
        why = sorted({design[c] for c in caps if c in design})
        item = any(k in names for k in ("aten::_local_scalar_dense", "aten::item"))
        w = window_words(sc.rows)
        count = (
            f"{n_calls} blocking host-device synchronizations in the trace"
            if w.kind == "trace"
            else f"{calls_per_step:.0f} blocking host-device synchronizations {w.per}"
        )
        step_calls = sc.rows["_step_calls"].dropna()
        effect = max(
            effect_size(sc.value, SYNC_PCT),
            effect_size(float(step_calls.mean()), SYNC_CALLS_PER_STEP) if len(step_calls) else 1.0,
        )
        out.append(
            _finding(
                "blocking_sync",
                sc,
                title=f"{count} ({', '.join(sorted(names, key=lambda k: -names[k])[:3])}); "
                f"host blocked {_pct(sc.value)} {w.of}{w.note}",
                metric="sync_blocked_pct_of_step",
                threshold=SYNC_PCT,
                comparison=">=",
                conf=confidence(
                    0.35 + (0.1 if item else 0.0),
                    effect=effect,
                    agreement=sc.agreement,
                    n_windows=_n_steps(sc),
                    n_calls=n_calls,
                ),
                recommendation="Remove synchronizations from the step: keep losses/metrics on the device and read them "
                "every N steps (no .item()/.cpu()/print of CUDA tensors, no bool(tensor) in Python "
                "control flow), avoid data-dependent shapes (nonzero, masked_select), use non_blocking "
                "copies and events instead of cudaStreamSynchronize; find the call sites with "
                "torch.cuda.set_sync_debug_mode(\"warn\").",
                details={
                    "n_calls": n_calls,
                    "calls_per_step": round(calls_per_step, 2),
                    "by_name": names,
                    "blocked_ns": int(sc.rows["blocked_ns"].sum()),
                    "n_runtime_sync_calls": int(sc.rows["n_runtime"].fillna(0).sum()),
                    "n_left_out_by_design": int(sc.rows["n_by_design"].fillna(0).sum()),
                    "by_design": why,
                },
                events=event_refs(sel),
            )
        )
    return out


def memcpy_bound(t: JobTables) -> list[dict]:
    """``memcpy_bound``: copies (and sets) occupy the GPU without overlapping compute or communication.

    Definition: per rank-step, exposed memory time = min(``memory_time_ns``, max(0, busy −
    |COMPUTATION ∪ COMMUNICATION|)) with |C ∪ K| = ``compute_time_ns`` + ``comm_time_ns`` −
    ``overlap_pct`` × ``comm_time_ns`` / 100 (HTA temporal breakdown and overlap). Metric
    ``memory_exposed_pct_of_step`` = 100 × Σ exposed memory time / Σ step time; fires at ≥
    :data:`MEMORY_PCT`.

    Source: HTA kernel breakdown (MEMORY kernels) and ``get_memory_bw_summary``; NVIDIA CUDA Best
    Practices ("Data Transfer Between Host and Device": pinned memory, asynchronous overlapped
    transfers); PyTorch tuning guide (``pin_memory``, ``non_blocking=True``).

    Time lost per step: the exposed memory time (what fully overlapping the copies would hide).
    """
    s = t.gpu_steps
    if s.empty or _col(s, "memory_time_ns").sum() <= 0:
        return []
    union_ck = _col(s, "compute_time_ns") + _col(s, "comm_time_ns") * (1 - _col(s, "overlap_pct") / 100)
    exposed = np.minimum(_col(s, "memory_time_ns"), (s["busy_ns"].astype(float) - union_ck).clip(lower=0))
    rows = s.assign(num=exposed, loss=exposed)
    rows["hit"] = rows["num"] >= MEMORY_PCT / 100 * rows["step_time_ns"]
    out = []
    for sc in _scopes(rows, lambda _r, v: v >= MEMORY_PCT):
        ranks = _ranks_of(sc)
        k = t.kernels
        copies = []
        pageable = False
        if not k.empty and "kernel_type" in k:
            m = k[k["rank"].isin(ranks) & (k["kernel_type"] == "MEMORY")]
            g = (
                m.groupby("name")
                .agg(n=("n", "sum"), total_ns=("total_ns", "sum"))
                .sort_values("total_ns", ascending=False)
                .head(5)
            )
            copies = [{"name": n, "n": int(r.n), "total_ns": int(r.total_ns)} for n, r in g.iterrows()]
            pageable = bool(m["name"].str.contains("Pageable", na=False).any())
        bw = (
            pd.to_numeric(sc.rows.get("memcpy_bw_gbps"), errors="coerce").median()
            if "memcpy_bw_gbps" in sc.rows
            else None
        )
        rec = (
            "Overlap or remove the copies: pin host memory (DataLoader(pin_memory=True), tensor.pin_memory()) "
            "and copy with non_blocking=True on a side stream; keep tensors on the device between steps; "
            "avoid .cpu()/.to('cpu') round trips and per-step re-uploads of constants."
        )
        if pageable:
            rec = "Pageable host memory is copied (Memcpy … Pageable): pinned memory is several times faster. " + rec
        w = window_words(sc.rows)
        out.append(
            _finding(
                "memcpy_bound",
                sc,
                title=f"Memory copies not overlapped with compute take {_pct(sc.value)} {w.of} "
                f"({_ms(sc.est)} {w.per}){w.note}",
                metric="memory_exposed_pct_of_step",
                threshold=MEMORY_PCT,
                comparison=">=",
                conf=confidence(
                    0.45,
                    effect=effect_size(sc.value, MEMORY_PCT),
                    agreement=sc.agreement,
                    n_windows=_n_steps(sc),
                    corroborated=True if pageable else None,
                ),
                recommendation=rec,
                details={
                    "memory_time_ns": _sum(sc.rows, "memory_time_ns"),
                    "exposed_memory_ns": int(sc.rows["num"].sum()),
                    "memcpy_bytes": _sum(sc.rows, "memcpy_bytes"),
                    "memcpy_bw_gbps_median": _num(bw),
                    "pageable_copies": pageable,
                    "top_copies": copies,
                },
            )
        )
    return out


def pageable_memcpy(t: JobTables) -> list[dict]:
    """``pageable_memcpy``: copies from or to pageable host memory take much of the GPU's busy time.

    Definition: per window, pageable copy time = Σ ``kernels.total_ns`` of the copies of that (rank,
    capture, step) whose ``name`` contains :data:`PAGEABLE_MARKER` (Kineto: ``Memcpy HtoD (Pageable ->
    Device)``, ``Memcpy DtoH (Device -> Pageable)``; a whole-trace window takes the rank's copies outside
    any ProfilerStep, ``kernels.step`` = -1), capped at the window's GPU busy time. Metric
    ``pageable_copy_pct_of_gpu_busy`` = 100 × Σ pageable copy time / Σ GPU busy time; fires at ≥
    :data:`PAGEABLE_COPY_PCT`.

    Source: NVIDIA CUDA C++ Best Practices Guide ("Pinned Memory": pinned transfers reach the highest
    bandwidth and are needed for asynchronous, overlapped copies); CUDA Runtime API "API synchronization
    behavior" (a cudaMemcpyAsync from pageable host memory is synchronous for the host); PyTorch
    ``DataLoader(pin_memory=True)``, ``Tensor.pin_memory()``, ``.to(non_blocking=True)``; HTA kernel
    breakdown (MEMORY kernels).

    Time lost per step: the pageable copy time of the window (upper bound: pinned copies still take device
    time, but run faster and no longer block the host, so they can overlap compute). Corroborated when the
    GPU is idle at least half the time (the blocked host is then the likely pace-setter).
    """
    s = t.gpu_steps
    k = t.kernels
    if s.empty or k.empty or not {"name", "step", "total_ns"} <= set(k.columns):
        return []
    pg = k[k["name"].astype(str).str.contains(PAGEABLE_MARKER, regex=False, na=False)]
    if pg.empty:
        return []
    key = ["rank", "capture_id", "step"] if "capture_id" in pg and "capture_id" in s else ["rank", "step"]
    g = pg.assign(_ns=_col(pg, "total_ns"), _n=_col(pg, "n")).groupby(key, as_index=False)[["_ns", "_n"]].sum()
    rows = s.merge(g, on=key, how="left")
    rows.index = s.index
    copy_ns = np.minimum(rows["_ns"].fillna(0.0).astype(float), rows["busy_ns"].astype(float))
    rows = rows.assign(num=copy_ns, loss=copy_ns, _copies=rows["_n"].fillna(0.0).astype(float))
    rows["hit"] = rows["num"] >= PAGEABLE_COPY_PCT / 100 * rows["busy_ns"].astype(float)

    def metric(r: pd.DataFrame) -> float:
        return 100.0 * float(r["num"].sum()) / max(float(r["busy_ns"].sum()), 1.0)

    out = []
    for sc in _scopes(rows, lambda r, v: v >= PAGEABLE_COPY_PCT and float(r["num"].sum()) > 0, metric):
        ranks = _ranks_of(sc)
        w = window_words(sc.rows)
        sel = pg[pg["rank"].isin(ranks)]
        by_name = (
            sel.assign(_ns=_col(sel, "total_ns"), _n=_col(sel, "n"))
            .groupby("name")[["_n", "_ns"]]
            .sum()
            .sort_values("_ns", ascending=False)
        )
        top = [{"name": str(n), "n": int(r["_n"]), "total_ns": int(r["_ns"])} for n, r in by_name.head(5).iterrows()]
        busy_pct = 100.0 * float(sc.rows["busy_ns"].sum()) / max(float(sc.rows["step_time_ns"].sum()), 1.0)
        n_copies = int(sc.rows["_copies"].sum())
        out.append(
            _finding(
                "pageable_memcpy",
                sc,
                title=f"Copies from pageable host memory take {_pct(sc.value)} of the GPU's busy time "
                f"({_ms(sc.est)} {w.per}; top: {top[0]['name'] if top else 'Memcpy'} ×{top[0]['n'] if top else 0}), "
                f"and they block the host; the GPU is busy {_pct(busy_pct)} {w.of}{w.note}",
                metric="pageable_copy_pct_of_gpu_busy",
                threshold=PAGEABLE_COPY_PCT,
                comparison=">=",
                conf=confidence(
                    0.55,
                    effect=effect_size(sc.value, PAGEABLE_COPY_PCT),
                    agreement=sc.agreement,
                    n_windows=_n_steps(sc),
                    corroborated=True if busy_pct < LOW_UTIL_PCT else None,
                    n_calls=n_copies,
                ),
                recommendation="Copy from pinned (page-locked) memory: DataLoader(pin_memory=True) for batches, "
                "tensor.pin_memory() once for host tensors reused every step, then .to(device, non_blocking=True) "
                "so the copy overlaps compute instead of blocking the host; load weights and constants to the "
                "device once instead of every step.",
                details={
                    "pageable_copy_ns": int(sc.rows["num"].sum()),
                    "n_pageable_copies": n_copies,
                    "gpu_busy_ns": int(sc.rows["busy_ns"].sum()),
                    "gpu_busy_pct": round(busy_pct, 4),
                    "top_copies": top,
                },
            )
        )
    return out


#: What ``kernels_below_peak`` details say of each op group (:func:`jobs.analyze.efficiency.ops.job_op_groups`).
_GROUP_DETAIL = [
    "op_name",
    "shape_sig",
    "dtype",
    "kind",
    "precision",
    "bound",
    "kernel_time_ns",
    "roofline_pct",
    "recoverable_ns",
    "top_kernel",
]


def _below_peak_advice(top: dict) -> str:
    """What to try for the op group with the most recoverable time (its formula family and roofline side)."""
    kind, bound = top.get("kind"), top.get("bound")
    op = f"{top.get('op_name')} {top.get('shape_sig')}"
    if kind == "attention":
        what = (
            "the fused attention kernel itself runs below its roofline: check which backend ran "
            "(torch.nn.attention.sdpa_kernel), a head dimension that is a multiple of 8, and bf16/fp16 inputs"
        )
    elif "softmax" in str(top.get("op_name")):
        what = (
            "attention computed op by op (softmax and batched matmuls over the full score matrix) runs at memory "
            "speed: use torch.nn.functional.scaled_dot_product_attention (FlashAttention / memory-efficient kernels)"
        )
    elif kind == "gemm" and top.get("precision") == "fp32":
        what = (
            "an fp32 GEMM misses the tensor cores: bf16/fp16 autocast, or TF32 "
            "(torch.backends.cuda.matmul.allow_tf32 = True), with dimensions that are multiples of 8/16"
        )
    elif kind == "gemm" and bound == "compute":
        what = (
            "for a compute-bound GEMM: dimensions that are multiples of 8/16 (tile quantization), larger batches per "
            'call, and a tuned kernel (cuBLASLt, torch.compile(mode="max-autotune"))'
        )
    elif kind == "gemm":
        what = (
            "a GEMM this small is bound by memory traffic: batch the small matmuls together (bmm, grouped GEMM) or "
            "fuse them with their neighbours (torch.compile)"
        )
    elif kind == "conv":
        what = (
            "for convolutions: channels_last memory format, torch.backends.cudnn.benchmark = True, bf16/fp16 on the "
            "tensor cores"
        )
    else:
        what = (
            "memory-bound elementwise and normalization ops: fuse them with their neighbours (torch.compile, fused "
            "optimizers and norms) so the data is read once"
        )
    return f"Kernels run far below the device's roofline; most to gain at {op}: {what}."


def kernels_below_peak(t: JobTables) -> list[dict]:
    """``kernels_below_peak``: the kernels of ops whose work the shapes determine run far below the device's roofline.

    Definition: per op group of ``op_efficiency`` (rank, op, shapes, dtype; only rows with a roofline: a known
    device and a datasheet peak for the precision), ``recoverable_ns`` = kernel time × max(0, 1 − roofline_pct /
    :data:`ATTAINABLE_ROOFLINE_PCT`) (:func:`recoverable_ops`). Per rank, Σ over its groups spread over its analysis
    windows (op_efficiency is per capture); metric ``recoverable_pct_of_step`` = 100 × Σ / Σ step time, fires at ≥
    :data:`BELOW_PEAK_PCT`. The evidence names the groups with the most recoverable time.

    Source: roofline model (Williams et al., CACM 2009); AMD TraceLens PerfModel (achieved vs peak per op);
    NVIDIA Deep Learning Performance guide (tensor-core dimensions, mixed precision).

    Time lost per step: the recoverable time — an estimate: the attainable share is a rule of thumb, and a kernel
    that overlaps other work may not shorten the step by all of it.
    """
    s = t.gpu_steps
    rec = recoverable_ops(t.op_efficiency)
    if s.empty or rec.empty:
        return []
    per_rank = rec.groupby("rank")["recoverable_ns"].sum()
    n_win = s.groupby("rank").size()
    rows = s.assign(loss=s["rank"].map(per_rank / n_win).fillna(0.0).astype(float))
    rows["num"] = rows["loss"]
    rows["hit"] = rows["num"] >= BELOW_PEAK_PCT / 100 * rows["step_time_ns"]
    out = []
    for sc in _scopes(rows, lambda _r, v: v >= BELOW_PEAK_PCT):
        ranks = _ranks_of(sc)
        mine = rec[rec["rank"].isin(ranks)]
        groups = job_op_groups(mine).sort_values(["recoverable_ns", "op_name"], ascending=[False, True])[_GROUP_DETAIL]
        top = groups.head(5).to_dict("records")
        for g in top:
            g["kernel_time_ns"], g["recoverable_ns"] = int(g["kernel_time_ns"]), int(round(g["recoverable_ns"]))
            g["roofline_pct"] = round(float(g["roofline_pct"]), 2)
        share = float(groups["recoverable_ns"].head(5).sum()) / max(float(groups["recoverable_ns"].sum()), 1.0)
        w = window_words(sc.rows)
        out.append(
            _finding(
                "kernels_below_peak",
                sc,
                title=f"Kernels far below the device's roofline: {_ms(sc.est)} {w.per} ({_pct(sc.value)} {w.of}) "
                f"recoverable at {ATTAINABLE_ROOFLINE_PCT:.0f} % of it, most in {top[0]['op_name']}{w.note}",
                metric="recoverable_pct_of_step",
                threshold=BELOW_PEAK_PCT,
                comparison=">=",
                conf=confidence(
                    0.35,
                    effect=effect_size(sc.value, BELOW_PEAK_PCT),
                    agreement=sc.agreement,
                    n_windows=_n_steps(sc),
                    corroborated=True if share >= 0.5 else None,
                ),
                recommendation=_below_peak_advice(top[0]),
                details={
                    "attainable_roofline_pct": ATTAINABLE_ROOFLINE_PCT,
                    "recoverable_ns": int(round(float(groups["recoverable_ns"].sum()))),
                    "op_groups": top,
                    "top5_share": round(share, 4),
                },
            )
        )
    return out


def low_gpu_utilization(t: JobTables) -> list[dict]:
    """``low_gpu_utilization``: the GPU is idle most of the time.

    Definition: metric ``gpu_busy_pct_of_step`` = 100 × Σ busy / Σ window time (busy = merged device
    time, any kernel, copy or set, including communication). Fires below :data:`LOW_UTIL_PCT`, whatever
    explains the idle time: the finding splits GPU idle time into host work (``cpu_bound_time_ns``),
    data loading (``dataloader_time_ns``) and the *unexplained* rest (≥ 0): time the GPU waits while the
    host is in no traced op (Python between ops, untraced threads, waiting on another process) or for an
    event from another stream. When the unexplained rest is below :data:`UNEXPLAINED_IDLE_PCT` % of the
    time, the title says the idle time is host work / data loading (the findings of those rules).

    Source: TB plugin ("GPU … has low utilization", < 50 %; increase batch size); HTA temporal
    breakdown (idle time) and idle time breakdown (``other``).

    Time lost per step: the unexplained idle time (the explained part is the estimate of
    ``host_bound_launch`` and ``dataloader_bound``; estimates would otherwise count it twice).
    """
    s = t.gpu_steps
    if s.empty:
        return []
    idle = s["gpu_idle_ns"].astype(float)
    unexplained = (idle - _col(s, "cpu_bound_time_ns") - _col(s, "dataloader_time_ns")).clip(lower=0)
    busy = s["busy_ns"].astype(float)
    rows = s.assign(num=busy, loss=unexplained, _unexpl=unexplained)
    rows["hit"] = busy < LOW_UTIL_PCT / 100 * rows["step_time_ns"]
    out = []

    for sc in _scopes(rows, lambda _r, v: v < LOW_UTIL_PCT):
        w = window_words(sc.rows)
        total = max(float(sc.rows["step_time_ns"].sum()), 1.0)
        unexpl_pct = 100 * float(sc.rows["_unexpl"].sum()) / total
        cpu_pct = 100 * float(_col(sc.rows, "cpu_bound_time_ns").sum()) / total
        dl_pct = 100 * float(_col(sc.rows, "dataloader_time_ns").sum()) / total
        if unexpl_pct >= UNEXPLAINED_IDLE_PCT:
            why = f"{_pct(unexpl_pct)} {w.of} ({_ms(sc.est)} {w.per}) is idle with no traced host work to explain it"
        else:
            parts = [f"host work ({_pct(cpu_pct)} CPU-bound)"] + ([f"data loading ({_pct(dl_pct)})"] if dl_pct else [])
            why = f"the idle time is {' and '.join(parts)}, reported on {'their own' if dl_pct else 'its own'}"
        out.append(
            _finding(
                "low_gpu_utilization",
                sc,
                title=f"GPU busy only {_pct(sc.value)} {w.of}; {why}{w.note}",
                metric="gpu_busy_pct_of_step",
                threshold=LOW_UTIL_PCT,
                comparison="<",
                conf=confidence(
                    0.35,
                    effect=effect_size(sc.value, LOW_UTIL_PCT, "<"),
                    agreement=sc.agreement,
                    n_windows=_n_steps(sc),
                    corroborated=True if unexpl_pct >= UNEXPLAINED_IDLE_PCT else None,
                ),
                recommendation="Give the GPU more work per launch (larger batch or micro-batch, torch.compile / CUDA "
                "graphs to cut Python time between ops) and look at what the host does in the gaps: "
                "profile with with_stack=True / record_function ranges, check other threads and "
                "processes, and cross-stream waits (HTA idle time 'other').",
                details={
                    "step_time_ns": _sum(sc.rows, "step_time_ns"),
                    "gpu_busy_ns": int(busy[sc.rows.index].sum()),
                    "gpu_idle_ns": int(sc.rows["gpu_idle_ns"].sum()),
                    "cpu_bound_time_ns": _sum(sc.rows, "cpu_bound_time_ns"),
                    "dataloader_time_ns": _sum(sc.rows, "dataloader_time_ns"),
                    "unexplained_idle_ns": int(sc.rows["_unexpl"].sum()),
                    "unexplained_idle_pct_of_step": round(float(unexpl_pct), 3),
                    "idle_other_ns": _sum(sc.rows, "idle_other_ns"),
                },
                events=[],
            )
        )
    return out


#: The GPU rules in evaluation order: (rule name, function).
RULES: tuple[tuple[str, Callable[[JobTables], list[dict]]], ...] = (
    ("host_bound_launch", host_bound_launch),
    ("many_tiny_kernels", many_tiny_kernels),
    ("exposed_communication", exposed_communication),
    ("straggler_rank", straggler_rank),
    ("dataloader_bound", dataloader_bound),
    ("blocking_sync", blocking_sync),
    ("memcpy_bound", memcpy_bound),
    ("pageable_memcpy", pageable_memcpy),
    ("low_gpu_utilization", low_gpu_utilization),
    ("kernels_below_peak", kernels_below_peak),
)
