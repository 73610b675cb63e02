"""Data-quality checks derived from the table contract (``schemas/tables.py``).

Backend-neutral: a :class:`Check` says *what* must hold; ``jobs/validate/suites.py`` turns each one into a
Great Expectations 1.x expectation and runs it on a pandas or Spark batch. Rules:

* **not null**: every column declared ``nullable=False``.
* **unique key**: the table's :attr:`~schemas.tables.Table.key` (compound).
* **non-negative**: durations (``*_ns`` columns that are not points in time, clock offsets or excesses — see
  :func:`is_duration`), sizes (``*_bytes``), counts (``n``, ``n_*``), bandwidths (``*_gbps``), ratios
  (``*_ratio``), hours (``*_hours``, ``*_per_day``), queue lengths, ids/positions (``attempt``, ``rank``,
  ``event_id``, ``depth``, ``segment``, ``call_index``, ``run_index``, ``device_index``);
  ``world_size``/``group_size``/``rank_order``/``impact_rank``/``kernel_rank``/``window_days`` ≥ 1.
* **range**: ``*_pct`` in [0, 100] except changes and excesses (``change_pct``, ``step_excess_p50_pct``) and shares
  of a memory bandwidth that cache can exceed (``peak_bandwidth_pct``, ``roofline_pct``: ≥ 0);
  ``confidence`` and ``p_value`` in [0, 1].
* **value sets**: enumerated columns (``captures.status``, ``events.ph``, ``critical_path.bound_by``, …)
  take only the back-quoted values their doc lists (:func:`value_set`).
* **consistency** (``DERIVED``): linear combinations of columns that the definitions fix, e.g. HTA's
  temporal breakdown ``kernel_time = idle + compute + non_compute`` (steps, ranks), host busy time and
  data-loader time inside the ProfilerStep window (``≤ step_time``), collective ``end − start = dur``,
  critical-path segments adding up to their path's length; in the fleet tables (:func:`_fleet_checks`) ordered
  percentiles and counts within counts (a host slow in at most the jobs it ran in).
* **every raw file accounted for** (``captures``): the row count equals the number of raw files
  discovery found (ingested + quarantined + cataloged; a run-time value: :func:`checks_for`
  ``n_discovered``) and ``uri`` is unique.

Timestamps (``ts_ns``, ``*start_ns``, ``*end_ns``, ``base_time_ns``) and ``clock_offset_ns`` may be
negative (relative clocks, alignment offsets) and are not range-checked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa

from schemas.tables import STAGES, Table, declared, stage_tables

#: Points in time and offsets: ``_ns`` columns that are *not* durations.
_TIME_POINT_SUFFIXES = ("ts_ns", "start_ns", "end_ns")
_SIGNED_NS = frozenset({"base_time_ns", "clock_offset_ns", "step_excess_p50_ns"})
#: Percentages that are changes or excesses (may be negative or above 100), not shares.
_SIGNED_PCT = frozenset(
    {"change_pct", "step_excess_p50_pct", "change_est_pct", "change_ci_low_pct", "change_ci_high_pct"}
)
#: Percentages of a device's memory bandwidth: ≥ 0, and above 100 when on-chip cache served the operands
#: (``op_efficiency.bound`` = ``cache``); ``peak_flops_pct`` keeps the 0–100 range (no kernel beats its peak FLOP/s).
_CACHE_PCT = frozenset({"peak_bandwidth_pct", "roofline_pct"})
#: Integer columns that are ids, positions or counts (≥ 0) without a unit suffix.
_NON_NEGATIVE = frozenset(
    {
        "attempt",
        "rank",
        "event_id",
        "depth",
        "segment",
        "call_index",
        "n",
        "queue_length_max",
        "queue_length_mean",
        "n_ranks_matched",
        "run_index",
        "device_index",
        "matched_calls",
        "last_arrivals",
    }
)
_AT_LEAST_ONE = frozenset(
    {"world_size", "group_size", "rank_order", "impact_rank", "kernel_rank", "window_days", "recurring_steps"}
)
_UNIT_RANGES = {"confidence": (0.0, 1.0), "p_value": (0.0, 1.0)}

#: Enumerated columns: their allowed values are the back-quoted words of the column's doc in
#: schemas/tables.py (so a value added to the doc is allowed at once).
ENUM_COLUMNS: tuple[tuple[str, str], ...] = (
    ("captures", "status"),
    ("captures", "source"),
    ("captures", "container"),
    ("events", "source"),
    ("events", "ph"),
    ("kernels", "kernel_type"),
    ("op_efficiency", "kind"),
    ("op_efficiency", "bound"),
    ("utilization_windows", "engine"),
    ("utilization_windows", "cause"),
    ("critical_path", "scope"),
    ("critical_path", "bound_by"),
    ("fleet_stats", "dimension"),
    ("fleet_kernels", "dimension"),
    ("fleet_kernels", "kernel_type"),
    ("fleet_findings", "dimension"),
    ("fleet_ops", "dimension"),
    ("host_health", "kind"),
    ("regressions", "metric"),
    ("regressions", "verdict"),
    ("rule_coverage", "status"),
)


def value_set(table: str, column: str) -> tuple[str, ...]:
    """Allowed values of an enumerated column: the `back-quoted` words of its doc, in order; a word
    right after another column's name (``scope `job` also `late_start```) refers to that column's
    value and is skipped.

    Raises:
        StopIteration: unknown column; KeyError: unknown table.
    """
    t = declared(table)
    doc = next(c.doc for c in t.columns if c.name == column)
    others = set(t.names) - {column}
    words = [w for before, w in re.findall(r"(\w*)\s*`([^`\s]+)`", doc) if before not in others]
    return tuple(dict.fromkeys(words))


#: ``{(table, column): allowed values}`` of every enumerated column (from the docs, see :func:`value_set`).
VALUE_SETS: dict[tuple[str, str], tuple[str, ...]] = {(t, c): value_set(t, c) for t, c in ENUM_COLUMNS}


@dataclass(frozen=True)
class Derived:
    """A column computed from others before validation: ``Σ coef × column`` (nulls propagate);
    a ``sum:<col>`` term is Σ col over the rows of the same ``group_by`` group.

    ``name`` starts with ``_check_`` so it can never clash with a declared column.
    """

    name: str
    terms: tuple[tuple[int, str], ...]
    #: When set, a term column written ``sum:<col>`` means Σ <col> over the rows sharing these columns.
    group_by: tuple[str, ...] = ()

    @property
    def columns(self) -> tuple[str, ...]:
        """The declared columns the expression reads (including ``group_by``)."""
        return tuple(dict.fromkeys([c.removeprefix("sum:") for _, c in self.terms] + list(self.group_by)))

    @property
    def expression(self) -> str:
        """Readable form, e.g. ``kernel_time_ns - idle_time_ns``."""
        out = ""
        for i, (coef, col) in enumerate(self.terms):
            sign = "-" if coef < 0 else "+"
            mag = "" if abs(coef) == 1 else f"{abs(coef)}*"
            out += (("-" if coef < 0 else "") if i == 0 else f" {sign} ") + mag + col
        return out + (f" (sums per {', '.join(self.group_by)})" if self.group_by else "")


@dataclass(frozen=True)
class Check:
    """One expectation on one table, independent of the engine that evaluates it.

    Attributes:
        id: stable identifier within the table, e.g. ``not_null:job_id``, ``unique:key``,
            ``non_negative:dur_ns``, ``pct_range:idle_pct``, ``consistent:breakdown_sum``,
            ``row_count:discovered``. Used in reports and in the ``_validation.json`` marks.
        kind: ``not_null``, ``unique``, ``between``, ``in_set`` or ``row_count``.
        columns: the column(s) checked (for ``between`` on a derived value: the derived name).
        min_value, max_value: bounds for ``between`` (inclusive; ``None`` = open).
        value_set: allowed values for ``in_set``; value for ``row_count`` is ``min_value``.
        derived: the :class:`Derived` column to compute first, if any.
        doc: why this must hold, with the source of the definition.
    """

    id: str
    kind: str
    columns: tuple[str, ...] = ()
    min_value: float | None = None
    max_value: float | None = None
    value_set: tuple = ()
    derived: Derived | None = None
    doc: str = ""

    @property
    def reads(self) -> tuple[str, ...]:
        """Declared columns this check needs (derived inputs, else ``columns``)."""
        return self.derived.columns if self.derived else self.columns


def is_duration(column: str) -> bool:
    """True for a ``*_ns`` column holding a duration (must be ≥ 0), False for points in time.

    ``ts_ns``, ``*start_ns``, ``*end_ns`` (``step_start_ns``, ``trace_end_ns``, ``aligned_start_ns``…),
    ``base_time_ns`` and ``clock_offset_ns`` are points in time / offsets.
    """
    return column.endswith("_ns") and not column.endswith(_TIME_POINT_SUFFIXES) and column not in _SIGNED_NS


def _numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t)


def _d(name: str, *terms: tuple[int, str], group_by: tuple[str, ...] = ()) -> Derived:
    return Derived(f"_check_{name}", tuple(terms), group_by)


def _zero(name: str, derived: Derived, doc: str) -> Check:
    return Check(f"consistent:{name}", "between", (derived.name,), 0, 0, derived=derived, doc=doc)


def _ge0(name: str, derived: Derived, doc: str) -> Check:
    return Check(f"consistent:{name}", "between", (derived.name,), 0, None, derived=derived, doc=doc)


_BREAKDOWN_SUM = _d(
    "breakdown_residual_ns",
    (1, "kernel_time_ns"),
    (-1, "idle_time_ns"),
    (-1, "compute_time_ns"),
    (-1, "non_compute_time_ns"),
)
_BREAKDOWN_DOC = (
    "HTA temporal breakdown: kernel_time = idle_time + compute_time + non_compute_time "
    "(non_compute is defined as the remainder, so each part is also ≤ kernel_time)."
)


def _derived_checks(table: str) -> list[Check]:
    if table in ("steps", "ranks"):
        out = [
            _zero("breakdown_sum", _BREAKDOWN_SUM, _BREAKDOWN_DOC),
            _ge0(
                "comm_within_kernel_time",
                _d("kernel_minus_comm_ns", (1, "kernel_time_ns"), (-1, "comm_time_ns")),
                "Merged communication time lies inside [first GPU start, last GPU end] (HTA kernel_time).",
            ),
            _ge0(
                "exposed_within_comm",
                _d("comm_minus_exposed_ns", (1, "comm_time_ns"), (-1, "exposed_comm_ns")),
                "Exposed communication = communication − its overlap with computation ≤ communication.",
            ),
        ]
        if table == "steps":
            out += [
                _ge0(
                    "host_busy_within_step",
                    _d("step_minus_cpu_op_ns", (1, "step_time_ns"), (-1, "cpu_op_time_ns")),
                    "Host busy time (merged top-level CPU ops) is clipped to the ProfilerStep window.",
                ),
                _ge0(
                    "dataloader_within_step",
                    _d("step_minus_dataloader_ns", (1, "step_time_ns"), (-1, "dataloader_time_ns")),
                    "Data-loader time is a union of intervals clipped to the ProfilerStep window.",
                ),
                _ge0(
                    "cpu_bound_within_step",
                    _d("step_minus_cpu_bound_ns", (1, "step_time_ns"), (-1, "cpu_bound_time_ns")),
                    "CPU-bound time is time inside the ProfilerStep window.",
                ),
            ]
        else:
            out.append(
                _ge0(
                    "step_p50_le_max",
                    _d("step_max_minus_p50_ns", (1, "step_time_max_ns"), (-1, "step_time_p50_ns")),
                    "Median step time ≤ longest step time.",
                )
            )
        return out
    if table == "collectives":
        return [
            _zero(
                "start_end_dur",
                _d("collective_span_residual_ns", (1, "end_ns"), (-1, "start_ns"), (-1, "dur_ns")),
                "Kernel duration = end − start.",
            ),
            _ge0(
                "wait_within_skew",
                _d("skew_minus_wait_ns", (1, "skew_ns"), (-1, "wait_ns")),
                "wait = last arrival − own arrival ≤ last − first arrival = skew.",
            ),
        ]
    if table == "critical_path":
        path = ("job_id", "attempt", "step", "scope", "path_rank", "path_capture_id")
        return [
            _ge0(
                "dur_within_span",
                _d("segment_span_minus_dur_ns", (1, "end_ns"), (-1, "start_ns"), (-1, "dur_ns")),
                "The time a segment puts on the path fits between its start and end (dur ≤ end − start; "
                "0-weight sync edges have dur 0).",
            ),
            _ge0(
                "segment_within_path",
                _d("path_minus_segment_ns", (1, "path_length_ns"), (-1, "dur_ns")),
                "A segment is part of its path: dur ≤ path_length.",
            ),
            _zero(
                "segments_sum_to_path",
                _d("path_minus_segment_sum_ns", (1, "path_length_ns"), (-1, "sum:dur_ns"), group_by=path),
                "The segments of a path add up to its length: Σ dur per (job, attempt, step, scope, path_rank, "
                "path_capture_id) "
                "= path_length.",
            ),
        ]
    return _fleet_checks(table)


def _fleet_checks(table: str) -> list[Check]:
    """Consistency of the fleet tables (jobs/fleet): orders of percentiles, counts within counts."""
    if table == "fleet_stats":
        return [
            _ge0(
                "p50_le_p90",
                _d("p90_minus_p50_ns", (1, "step_time_p90_ns"), (-1, "step_time_p50_ns")),
                "Percentiles of one sample are ordered: p50 ≤ p90.",
            ),
            _ge0("p90_le_p99", _d("p99_minus_p90_ns", (1, "step_time_p99_ns"), (-1, "step_time_p90_ns")), "p90 ≤ p99."),
            _ge0(
                "runs_within_ranks",
                _d("ranks_minus_runs", (1, "n_ranks"), (-1, "n_runs")),
                "Each run has at least one rank capture: n_runs ≤ n_ranks.",
            ),
            _ge0(
                "steps_within_rank_steps",
                _d("rank_steps_minus_steps", (1, "n_rank_steps"), (-1, "n_steps")),
                "Each job step has at least one rank-step: n_steps ≤ n_rank_steps.",
            ),
        ]
    if table == "fleet_findings":
        return [
            _ge0(
                "jobs_within_runs",
                _d("runs_minus_jobs", (1, "n_runs"), (-1, "n_jobs")),
                "Each job the rule fired in has at least one run: n_jobs ≤ n_runs.",
            )
        ]
    if table == "fleet_ops":
        return [
            _ge0("jobs_within_runs", _d("runs_minus_jobs", (1, "n_runs"), (-1, "n_jobs")), "n_jobs ≤ n_runs."),
            _ge0(
                "recoverable_within_kernel_time",
                _d("kernel_minus_recoverable_ns", (1, "kernel_time_ns"), (-1, "recoverable_ns")),
                "A group saves at most its own kernel time: recoverable_ns ≤ kernel_time_ns.",
            ),
        ]
    if table == "host_health":
        return [
            _ge0("jobs_within_runs", _d("runs_minus_jobs", (1, "n_runs"), (-1, "n_jobs")), "n_jobs ≤ n_runs."),
            _ge0(
                "slow_within_jobs",
                _d("jobs_minus_slow_jobs", (1, "n_jobs"), (-1, "n_slow_jobs")),
                "Slow in at most the jobs it ran in: n_slow_jobs ≤ n_jobs.",
            ),
            _ge0(
                "last_within_matched",
                _d("matched_minus_last", (1, "matched_calls"), (-1, "last_arrivals")),
                "A call has one last arrival: last_arrivals ≤ matched_calls.",
            ),
        ]
    return []


def checks_for(table: Table | str, n_discovered: int | None = None) -> list[Check]:
    """All checks of one table, derived from its declaration.

    Args:
        table: a :class:`~schemas.tables.Table` or its name.
        n_discovered: for ``captures``: the number of raw trace files discovery found in the batch;
            adds ``row_count:discovered`` (every raw file accounted for: ingested + quarantined).

    Returns:
        Checks in a stable order: not-null, key, ranges, value sets, consistency, row count.

    Raises:
        KeyError: unknown table name.
    """
    t = declared(table) if isinstance(table, str) else table
    out: list[Check] = []
    for c in t.columns:
        if not c.nullable:
            out.append(
                Check(
                    f"not_null:{c.name}",
                    "not_null",
                    (c.name,),
                    doc=f"Declared non-nullable in schemas/tables.py ({t.name}.{c.name}).",
                )
            )
    if t.key:
        out.append(
            Check(
                "unique:key",
                "unique",
                tuple(t.key),
                doc=f"Row key of `{t.name}` ({', '.join(t.key)}): re-runs replace partitions, never duplicate rows.",
            )
        )
    if t.name == "captures":
        out.append(Check("unique:uri", "unique", ("uri",), doc="One `captures` row per raw trace file."))
    for c in t.columns:
        if not _numeric(c.type):
            continue
        if c.name in _SIGNED_PCT:
            continue
        if c.name in _CACHE_PCT:
            out.append(
                Check(
                    f"non_negative:{c.name}",
                    "between",
                    (c.name,),
                    0,
                    None,
                    doc="A share of the memory bandwidth: ≥ 0 (above 100 when served from cache).",
                )
            )
            continue
        if c.name.endswith("_pct"):
            out.append(
                Check(
                    f"pct_range:{c.name}",
                    "between",
                    (c.name,),
                    0,
                    100,
                    doc="A percentage of a duration it is part of (HTA *_pctg): 0–100.",
                )
            )
        elif c.name in _UNIT_RANGES:
            lo, hi = _UNIT_RANGES[c.name]
            out.append(Check(f"range:{c.name}", "between", (c.name,), lo, hi, doc=f"{c.name}: {lo}–{hi}."))
        elif c.name in _AT_LEAST_ONE:
            out.append(
                Check(
                    f"at_least_one:{c.name}",
                    "between",
                    (c.name,),
                    1,
                    None,
                    doc=f"{c.name} counts ranks/positions from 1.",
                )
            )
        elif (
            is_duration(c.name)
            or c.name.endswith(("_bytes", "_gbps", "_ratio", "_hours", "_per_day"))
            or c.name.startswith("n_")
            or c.name in _NON_NEGATIVE
        ):
            what = "duration" if c.name.endswith("_ns") else "size/count/bandwidth/position"
            out.append(Check(f"non_negative:{c.name}", "between", (c.name,), 0, None, doc=f"A {what}: ≥ 0."))
    for tname, col in ENUM_COLUMNS:
        if tname == t.name and col in t.names:
            out.append(
                Check(
                    f"in_set:{col}",
                    "in_set",
                    (col,),
                    value_set=VALUE_SETS[(tname, col)],
                    doc=f"Values listed in the doc of {t.name}.{col}.",
                )
            )
    out += _derived_checks(t.name)
    if t.name == "captures" and n_discovered is not None:
        out.append(
            Check(
                "row_count:discovered",
                "row_count",
                (),
                min_value=int(n_discovered),
                doc="Every raw file discovered in the landing zone is a `captures` row "
                "(ingested + quarantined + cataloged = discovered).",
            )
        )
    return out


#: Tables each pipeline stage writes (validated after that stage), from each table's declared ``stage``.
STAGE_TABLES: dict[str, tuple[str, ...]] = {stage: tuple(stage_tables(stage)) for stage in STAGES}
