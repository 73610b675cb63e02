"""``jobs.fleet``: the whole warehouse → ``fleet_stats``, ``fleet_kernels``, ``regressions``, ``fleet_findings``,
``fleet_ops``, ``host_health`` — a daily run costs what the day brings, not what the history holds.

extract + reduce (:mod:`jobs.fleet.reduced`, on Spark per job run or on the local executor: :mod:`jobs.executor`):
the analysis windows (:func:`jobs.analyze.windows.analysis_windows`: ``steps``, plus one whole-trace window per
rank capture of ``ranks`` without ProfilerStep) → one row per job step or whole-trace window, ``kernels`` → one
row per (run, date, kernel), each joined with the run's job name, model, hardware and torch version from
``captures`` (:func:`jobs.fleet.stats.reduce_job_steps`, :func:`jobs.fleet.stats.reduce_job_kernels`). The
reductions are stored in the warehouse: a run reduces again only the jobs whose rows changed since the last one
(``rebuild``: every job), and keeps one row per run (its dates) to find what those jobs touch.
transform (pandas, on the driver, over the stored reductions of the jobs it needs only): ``fleet_stats`` and
``fleet_kernels`` rows of the capture dates and runs the changed jobs touch, the ``all`` rows of wide groups
merged from per-run-date partials (:mod:`jobs.fleet.partials`, :func:`derive_stats`);
:func:`jobs.fleet.regressions.find_regressions` for the run dates a change made stale (their runs and baselines).
When every row is made again (a first run, ``rebuild``) on Spark, the same functions run by group on the executors
(:mod:`jobs.fleet.on_spark`) and the driver reads back summary rows and the reductions of the insights' window and
of the runs a regression explains;
:func:`jobs.fleet.impact.fleet_findings`, :func:`jobs.fleet.impact.fleet_ops` and :func:`jobs.fleet.hosts.host_health`
over their window's jobs (:func:`insight_jobs`), from the few columns read of ``findings``, ``op_efficiency``,
``captures``, ``ranks`` and ``collectives``.
load: Parquet under ``{warehouse}/{fleet_stats,fleet_kernels,regressions,fleet_findings,fleet_ops,host_health}``
through the storage seam's commit (:func:`jobs.warehouse.write_table`), one commit per table: ``fleet_stats``,
``fleet_kernels`` and the partials by key (the rows :func:`jobs.fleet.partials.made_again` names and the touched run
dates' partials replaced, the files that cannot hold them untouched: :mod:`jobs.commit`'s keyed writes),
``regressions`` in the partitions of the run dates compared again, the window tables whole (inputs read as of one
set of versions, recorded with the write); then the stored runs and state
(:func:`jobs.fleet.reduced.commit`). A run is idempotent and sees late-arriving jobs (their dates are made again).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from jobs.executor import is_local
from jobs.fleet.changes import EXPLAINED, what_changed
from jobs.fleet.hosts import host_health
from jobs.fleet.impact import fleet_findings, fleet_ops
from jobs.fleet.on_spark import Whole, derive_whole
from jobs.fleet.partials import (
    MERGED,
    as_table,
    changed_kernels,
    changed_stats,
    combine_kernels,
    combine_stats,
    groups_of,
    kernel_partials,
    made_again,
    stats_partials,
)
from jobs.fleet.reduced import (
    KERNEL_PARTIALS,
    SCHEMAS,
    STATS_PARTIALS,
    Reduced,
    commit,
    internal_table,
    read_internal_table,
    read_reductions,
    spark_pandas,
    update,
    write_internal,
)
from jobs.fleet.regressions import (
    COMPARED_COLUMNS,
    INPUT_COLUMNS,
    baselines,
    dates_to_compare,
    find_regressions,
    options_with_defaults,
    run_sequence,
    runs_after,
)
from jobs.fleet.stats import profiler_steps
from jobs.fleet.window import WINDOW_DAYS, capture_days, window
from jobs.warehouse import (
    job_dates,
    read_arrow,
    read_spark,
    table_rows,
    table_version,
    table_versions,
    versions_cached,
    write_table,
)
from schemas import FLEET_TABLES, REGRESSIONS


@dataclass
class FleetResult:
    """What a fleet run wrote: row counts per table (after the run), the ``regressions`` rows of the runs it
    compared (every run on a first run, with ``rebuild`` or new options; else the run dates a change made stale)
    and the job ids whose rows it reduced again (:func:`jobs.fleet.reduced.update`)."""

    counts: dict = field(default_factory=dict)
    reduced_jobs: list[str] = field(default_factory=list)
    regressions: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=REGRESSIONS.names))


def fleet_frames(
    job_steps: pd.DataFrame,
    job_kernels: pd.DataFrame | None,
    tables: dict | None = None,
    dates=None,
    sequence: pd.DataFrame | None = None,
    derived: dict | None = None,
    regressions: pd.DataFrame | None = None,
    **regression_options,
) -> dict:
    """The fleet tables from the reduced frames and the columns of :data:`READ_COLUMNS` (pure).

    Args:
        job_steps: :func:`jobs.fleet.stats.job_steps_frame` rows over the analysis windows (whole-trace windows
            feed ``fleet_stats`` and ``fleet_findings``, not ``regressions``); job_kernels:
            :func:`jobs.fleet.stats.job_kernels_frame` rows. Every job's, or (with ``sequence`` and ``derived``)
            those of the runs compared and their baselines and of the insights' window.
        tables: ``{"findings"|"captures"|"ranks"|"collectives"|"op_efficiency": pandas}`` (a table missing: not written yet); the
            rows of the jobs the window-based tables and ``what_changed`` look at suffice (:func:`insight_jobs`).
        dates: the run dates to compare again (:func:`jobs.fleet.regressions.dates_to_compare`): ``regressions``
            holds those dates' rows only (the other dates' rows stay as written); default every run compared.
        sequence: :func:`jobs.fleet.regressions.run_sequence` of every run (default: of ``job_steps``).
        derived: ``{"fleet_stats": …, "fleet_kernels": …}`` made incrementally (:func:`derive_stats`) or on Spark's
            executors (:func:`jobs.fleet.on_spark.derive_whole`); default made from ``job_steps`` and ``job_kernels``
            whole.
        regressions: the ``regressions`` rows made already, without ``changes_json`` (every run compared on Spark's
            executors: :func:`jobs.fleet.on_spark.derive_whole`); ``job_steps`` then need hold only their
            decided runs and baselines (and the insights' window).
        regression_options: thresholds for :func:`jobs.fleet.regressions.find_regressions`.

    Returns:
        ``{"fleet_stats": …, "fleet_kernels": …, "regressions": …, "fleet_findings": …, "fleet_ops": …,
        "host_health": …}``: the first two Arrow (:func:`derive_stats`), the others pandas.
    """
    t = tables or {}
    steps = profiler_steps(job_steps)  # regressions compare ProfilerSteps, not whole-trace windows
    if regressions is not None:
        regs = regressions.copy()
    elif len(steps) and (dates is None or dates):
        regs = find_regressions(steps[INPUT_COLUMNS], dates=dates, sequence=sequence, **regression_options)
    else:
        regs = pd.DataFrame(columns=REGRESSIONS.names)
    regs["changes_json"] = what_changed(regs, steps, job_kernels, t.get("captures"), t.get("findings"))
    regs = regs[REGRESSIONS.names]
    derived = derived or derive_stats(job_steps, job_kernels).tables
    return {
        "fleet_stats": derived["fleet_stats"],
        "fleet_kernels": derived["fleet_kernels"],
        "regressions": regs,
        "fleet_findings": fleet_findings(t.get("findings"), job_steps),
        "fleet_ops": fleet_ops(t.get("op_efficiency"), job_steps),
        "host_health": host_health(t.get("captures"), t.get("ranks"), t.get("collectives")),
    }


@dataclass
class Touched:
    """What a fleet run's changed and dropped jobs touch: their runs' capture ``dates`` and ``run_dates`` (before
    and now) and their ``runs`` (``job_id#attempt``; ``keys``: the same as ``(job_id, attempt)``)."""

    dates: set[str]
    run_dates: set[str]
    runs: set[str]
    keys: set[tuple[str, int]]

    @classmethod
    def of(cls, reduced: Reduced) -> Touched:
        jobs = {*reduced.reduced_jobs, *reduced.dropped_jobs}
        parts = [r[r["job_id"].isin(jobs)] for r in (reduced.runs_before, reduced.runs) if r is not None]
        rows = pd.concat(parts, ignore_index=True)
        dates = {str(d) for ds in rows["dates"] for d in ds}
        keys = {(str(j), int(a)) for j, a in zip(rows["job_id"], rows["attempt"])}
        return cls(dates, {str(d) for d in rows["run_date"]}, {str(r) for r in rows["job"]}, keys)

    def jobs(self, runs: pd.DataFrame) -> set[str]:
        """The job ids of ``runs`` (:data:`jobs.fleet.reduced.RUNS` rows) whose rows a derivation over these
        dates reads: a run on a touched date or of a touched run date."""
        on = [bool(self.dates.intersection(str(d) for d in ds)) for ds in runs["dates"]]
        of = runs["run_date"].astype(str).isin(self.run_dates).to_numpy(dtype=bool)
        return {str(j) for j in runs["job_id"][np.asarray(on, dtype=bool) | of]}


@dataclass
class Derived:
    """``fleet_stats``, ``fleet_kernels`` and their partials as a fleet run writes them: ``tables`` (Arrow, by name)
    and, per name, the predicate whose rows they replace (``replace``: DNF, :func:`jobs.warehouse.write_table`'s
    ``replace_rows``; ``None``: the table whole)."""

    tables: dict
    replace: dict


@dataclass
class StoredPartials:
    """The partials a fleet run reads back (:func:`_stored_partials`), per partials table: its rows (``tables``,
    Arrow) and whether they are every stored row (``whole``) or only the wide groups' merged rows
    (:data:`jobs.fleet.partials.MERGED`: the run dates the run touches hold no stored partial)."""

    tables: dict
    whole: dict


def derive_stats(
    job_steps: pd.DataFrame,
    job_kernels: pd.DataFrame | None,
    partials: StoredPartials | None = None,
    touched: Touched | None = None,
) -> Derived:
    """``fleet_stats``, ``fleet_kernels`` and their partials (:mod:`jobs.fleet.partials`): the rows made again for
    what ``touched`` touches, or (``partials`` ``None``) every row.

    Args:
        job_steps, job_kernels: the stored reductions of at least the jobs of :meth:`Touched.jobs` (``partials``
            ``None``: of every job).
        partials: the stored partials (:func:`_stored_partials`): the wide groups' ``all`` rows are their merged
            rows plus the touched run dates' new partials, or (``whole``) every run date's partials merged again.

    Returns:
        :class:`Derived`: with ``touched``, the rows :func:`jobs.fleet.partials.made_again` names (the ``all`` rows
        of the wide groups the new partials have, or of every wide group when merged again) and the partials of the
        touched run dates with the merged rows made again, each with the predicate of the stored rows it replaces
        (a daily run writes what the day touched, not the history); else every row, each table whole.
    """
    if partials is None or touched is None:
        sp, kp = stats_partials(job_steps), kernel_partials(job_kernels)
        tables = {
            "fleet_stats": changed_stats(job_steps, sp),
            "fleet_kernels": changed_kernels(job_kernels, kp),
            STATS_PARTIALS: _with_merged(internal_table(sp, STATS_PARTIALS), STATS_PARTIALS),
            KERNEL_PARTIALS: _with_merged(internal_table(kp, KERNEL_PARTIALS), KERNEL_PARTIALS),
        }
        return Derived(tables, dict.fromkeys(tables))
    run_dates = sorted(touched.run_dates)

    def again(name: str, frame: pd.DataFrame | None, make) -> tuple[pa.Table, pa.Table, dict | None]:
        """(the touched run dates' partials made again with the merged rows, those merged rows, their groups:
        ``None`` when every group was merged again)"""
        new = make(frame[frame["run_date"].astype(str).isin(touched.run_dates)]) if frame is not None else None
        new = internal_table(new if new is not None else pd.DataFrame(columns=SCHEMAS[name].names), name)
        stored = partials.tables[name]
        if partials.whole[name]:  # every other run date's partials, merged again
            groups = None
            base = stored.filter(pc.invert(pc.is_in(stored["run_date"], pa.array([*run_dates, MERGED]))))
        else:  # the merged rows of the groups the new partials add to
            groups = groups_of(new)
            base = stored.filter(pc.is_in(_group_key(stored), _group_key(new).unique()))
        written = _with_merged(pa.concat_tables([base, new]), name, dated=new)
        return written, written.filter(pc.equal(written["run_date"], MERGED)), groups

    sp, sp_merged, sp_groups = again(STATS_PARTIALS, job_steps, stats_partials)
    kp, kp_merged, kp_groups = again(KERNEL_PARTIALS, job_kernels, kernel_partials)

    def replaced(groups: dict | None) -> list:
        """the stored partials the written ones replace: the touched run dates' and the merged rows made again"""
        if groups is None:
            return [[("run_date", "in", [*run_dates, MERGED])]]
        merged = [[("run_date", "=", MERGED), ("dimension", "=", d), ("value", "in", v)] for d, v in groups.items()]
        return [[("run_date", "in", run_dates)], *merged]

    return Derived(
        {
            "fleet_stats": changed_stats(job_steps, sp_merged, touched.dates, touched.runs),
            "fleet_kernels": changed_kernels(job_kernels, kp_merged, touched.dates, touched.runs),
            STATS_PARTIALS: sp,
            KERNEL_PARTIALS: kp,
        },
        {
            "fleet_stats": made_again(touched.dates, touched.runs, sp_groups),
            "fleet_kernels": made_again(touched.dates, touched.runs, kp_groups),
            STATS_PARTIALS: replaced(sp_groups),
            KERNEL_PARTIALS: replaced(kp_groups),
        },
    )


def _with_merged(partials: pa.Table, name: str, dated: pa.Table | None = None) -> pa.Table:
    """``dated`` (default: ``partials``) and the merged rows of ``partials`` (one per wide group: every row of the
    group merged, :func:`jobs.fleet.partials.combine_stats` / :func:`jobs.fleet.partials.combine_kernels`)."""
    combine = combine_stats if name == STATS_PARTIALS else combine_kernels
    return pa.concat_tables([partials if dated is None else dated, internal_table(combine(partials), name)])


def _derived_whole(whole: Whole) -> Derived:
    """:func:`derive_stats` of every stored reduction (every table whole) from what Spark's executors made
    (:func:`jobs.fleet.on_spark.derive_whole`): the partials with their merged rows."""
    tables = {**whole.tables, **{n: _with_merged(p, n) for n, p in whole.partials.items()}}
    return Derived(tables, dict.fromkeys(tables))


def _group_key(partials: pa.Table):
    """``dimension`` and ``value`` of each partial as one string (Arrow), to match the rows of given groups."""
    return pc.binary_join_element_wise(partials["dimension"], partials["value"], "\x1f")


def _stored_partials(warehouse: str, run_dates) -> StoredPartials | None:
    """The partials written last (Arrow): the wide groups' merged rows when no partial of ``run_dates`` is stored,
    else (or when no merged row is: a warehouse written before they were) every stored partial; ``None`` when one
    of them or of the fleet tables they feed was never written (everything is made whole then)."""
    if any(table_version(warehouse, name) is None for name in ("fleet_stats", "fleet_kernels")):
        return None
    tables, whole = {}, {}
    for name in (STATS_PARTIALS, KERNEL_PARTIALS):
        rows = read_internal_table(warehouse, name, run_dates=[*run_dates, MERGED])
        if rows is None:
            return None
        merged = pc.equal(rows["run_date"], MERGED)
        whole[name] = bool(pc.any(pc.invert(merged)).as_py()) or not pc.any(merged).as_py()
        tables[name] = read_internal_table(warehouse, name) if whole[name] else rows
    return StoredPartials(tables, whole)


def run_fleet(engine, warehouse: str, rebuild: bool = False, **regression_options) -> FleetResult:
    """Bring the fleet tables of ``warehouse`` up to date: the jobs whose rows changed are reduced again
    (:func:`jobs.fleet.reduced.update`); the fleet tables' rows those jobs touch are made again from the stored
    reductions of the jobs on the same dates and the per-run-date partials (:mod:`jobs.fleet.partials`); the
    regressions of the run dates that changed are compared again; the per-job tables are read only for the jobs
    the insights' windows and the new regression rows look at (:func:`insight_jobs`).

    Args:
        engine: a SparkSession (reduction in Spark) or a :class:`jobs.executor.LocalExecutor` (in pandas).
        warehouse: warehouse root.
        rebuild: reduce every job again and make every row again (``tracelake fleet --rebuild``); the tables are
            the same (the step-time percentiles of wide groups within the sketch's bound, :mod:`jobs.fleet.partials`).
        regression_options: thresholds for :func:`jobs.fleet.regressions.find_regressions`.

    Returns:
        :class:`FleetResult` (nothing is written when no rank has been analyzed yet).
    """
    with versions_cached():  # each input is read at one version: opened once
        return _run_fleet(engine, warehouse, rebuild, **regression_options)


def _run_fleet(engine, warehouse: str, rebuild: bool = False, **regression_options) -> FleetResult:
    result = FleetResult()
    # one consistent set of input versions, read as of them and recorded with every fleet table written: a run
    # at the same time that derived the tables from newer inputs keeps its rows (jobs.commit: ``inputs``)
    inputs = table_versions(warehouse, FLEET_INPUTS)
    if inputs.get("captures") is None or (inputs.get("steps") is None and inputs.get("ranks") is None):
        return result
    regression_options = options_with_defaults(**regression_options)
    reduced = update(engine, warehouse, inputs, rebuild=rebuild, options=regression_options)
    result.reduced_jobs = reduced.reduced_jobs
    runs = reduced.runs
    sequence = _stepped_sequence(runs)  # every run with ProfilerSteps, in comparison order
    changes = Touched.of(reduced)
    stored = None if reduced.runs_before is None else _stored_partials(warehouse, changes.run_dates)
    touched = changes if stored is not None else None  # without stored derivations: every row made again
    dates, baseline = None, regression_options["baseline_runs"]
    # the last rows were made with these options: compare again only the dates a change made stale, reading back
    # the rows of the runs it can alter only (:func:`jobs.fleet.regressions.runs_after`)
    if not rebuild and not reduced.options_changed and sequence is not None:
        changed = {*reduced.reduced_jobs, *reduced.dropped_jobs}
        after = runs_after(sequence, _stepped_sequence(reduced.runs_before), changes.keys)
        previous = read_arrow(
            warehouse, "regressions", columns=list(COMPARED_COLUMNS), partitions={"date": set(after["run_date"])}
        )
        if previous is not None:
            checked = set(zip(after["job_id"].astype(str), after["attempt"].astype(int)))
            dates = dates_to_compare(sequence, previous.to_pandas(), changed, baseline, checked=checked)
    # every row made again on Spark: by group on the executors, the driver reading back summary rows and the
    # reductions of the insights' window and of the runs what_changed explains only (jobs.fleet.on_spark)
    spread = touched is None and not is_local(engine)
    whole = derive_whole(engine, warehouse, regression_options if dates is None else None) if spread else None
    regs = whole.regressions if whole is not None else None
    jobs = insight_jobs(engine, warehouse, inputs, runs, sequence, dates, baseline, regs)
    needed = jobs["findings"]  # the insights' window, the runs compared again and their baselines
    if (touched is None and not spread) or needed is None:
        js, jk = read_reductions(warehouse)
    else:
        js, jk = read_reductions(warehouse, sorted({*needed, *(touched.jobs(runs) if touched else ())}))
    derived = _derived_whole(whole) if whole is not None else derive_stats(js, jk, stored, touched)
    tables = _read_columns(engine, warehouse, inputs, jobs)
    frames = fleet_frames(js, jk, tables, dates, sequence, derived.tables, regs, **regression_options)
    for name in (STATS_PARTIALS, KERNEL_PARTIALS):
        write_internal(derived.tables[name], warehouse, name, reduced.inputs, derived.replace[name])
    for name, rows in frames.items():
        keyed = derived.replace.get(name)
        if name == "regressions" and dates is not None:  # the compared dates' partitions only
            write_fleet_table(rows, warehouse, name, inputs, dates=dates)
        else:  # an empty table is written too: it exists, with 0 rows
            write_fleet_table(rows, warehouse, name, inputs, replace_rows=keyed)
        result.counts[name] = len(rows) if keyed is None and name != "regressions" else table_rows(warehouse, name) or 0
    commit(warehouse, reduced)  # last: a run killed before it redoes this one's work
    result.regressions = frames["regressions"]
    return result


def _stepped_sequence(runs: pd.DataFrame | None) -> pd.DataFrame | None:
    """:func:`jobs.fleet.regressions.run_sequence` of the :data:`jobs.fleet.reduced.RUNS` rows with ProfilerSteps
    (``None`` when none)."""
    if runs is None:
        return None
    stepped = runs[(runs["n_steps"] > 0).to_numpy(dtype=bool)]
    return run_sequence(stepped) if len(stepped) else None


def insight_jobs(
    engine,
    warehouse: str,
    versions: dict,
    runs: pd.DataFrame,
    sequence: pd.DataFrame | None,
    dates,
    baseline_runs: int,
    regressions: pd.DataFrame | None = None,
) -> dict[str, list[str] | None]:
    """The jobs whose rows of each :data:`READ_COLUMNS` table the fleet tables need (``None``: every job), so a
    fleet run reads the window, not the history:

    * ``host_health`` (``captures``, ``ranks``, ``collectives``): the jobs with a capture on or after the first day
      of its window (:data:`jobs.fleet.window.WINDOW_DAYS` days ending at the newest day of an ingested capture
      that names a host) — from the captures' Delta log and the captures of the newest days
      (:func:`_host_window_jobs`);
    * ``fleet_findings`` (``findings``) and ``fleet_ops`` (``op_efficiency``): the jobs of the runs with job steps
      whose run date is in their window;
    * ``what_changed`` (``captures``, ``findings``): the runs of the regression ``dates`` compared again and their
      baseline runs (every job when ``dates`` is ``None``: every run is compared); with ``regressions`` (the rows
      made already), the runs it explains (verdict ``regression`` or ``improvement``) and their baselines.

    Args:
        runs: :data:`jobs.fleet.reduced.RUNS` rows of every run; sequence: every run with ProfilerSteps in
            comparison order (:func:`jobs.fleet.regressions.run_sequence`; ``None`` without ProfilerSteps).
    """
    by_run = runs[(runs["n_job_steps"] > 0).to_numpy(dtype=bool)]
    findings_jobs: set[str] = set()
    if len(by_run):
        span = window(capture_days(by_run["run_date"]))
        if span is not None:
            in_window = (capture_days(by_run["run_date"]) >= span[0]).to_numpy(dtype=bool)
            findings_jobs = {str(j) for j in by_run["job_id"][in_window]}
    changes_jobs: set[str] | None = None
    if regressions is not None:
        changes_jobs = explained_jobs(regressions)
    elif dates is not None:
        changes_jobs = set()
        if sequence is not None:
            compared = {str(d) for d in dates}
            base_of = baselines(sequence, baseline_runs)
            for j, a, d in zip(sequence["job_id"], sequence["attempt"], sequence["run_date"]):
                if str(d) in compared:
                    changes_jobs |= {str(j), *(b[0] for b in base_of[(str(j), int(a))])}
    hosts = _host_window_jobs(engine, warehouse, versions)

    def union(*sets):
        return None if any(x is None for x in sets) else sorted(set().union(*sets))

    return {
        "captures": union(hosts, changes_jobs),
        "ranks": hosts,
        "collectives": hosts,
        "findings": union(findings_jobs, changes_jobs),
        "op_efficiency": sorted(findings_jobs),
    }


def explained_jobs(regressions: pd.DataFrame) -> set[str]:
    """The job ids of the ``regressions`` rows :func:`jobs.fleet.changes.what_changed` explains (verdict
    ``regression`` or ``improvement``) and of their baseline runs (``job_id#attempt``)."""
    decided = regressions[regressions["verdict"].isin(EXPLAINED).to_numpy(dtype=bool)]
    bases = {str(b).rpartition("#")[0] for runs in decided["baseline_runs"] for b in runs}
    return {str(j) for j in decided["job_id"]} | bases


def _host_window_jobs(engine, warehouse: str, versions: dict) -> list[str] | None:
    """The jobs with a ``captures`` partition on or after the first day of :func:`jobs.fleet.hosts.host_health`'s
    window (a run whose first day is older is out of it), or ``None`` (every job) when the newest days hold no
    ingested capture naming a host. The window's last day is found in the captures of the jobs with a partition
    in the last :data:`WINDOW_DAYS` days of the log: any capture that late is among them."""
    pairs = [(j, d) for j, ds in job_dates(warehouse, "captures", versions.get("captures")).items() for d in ds]
    days = pd.DataFrame(pairs, columns=["job_id", "date"])
    days = days.assign(day=capture_days(days["date"])).dropna(subset=["day"])
    last = days.groupby("job_id")["day"].max().to_dict()
    if not last:
        return []
    first_day = max(last.values()) - pd.Timedelta(days=WINDOW_DAYS - 1)
    recent = sorted(j for j, d in last.items() if d >= first_day)
    cols = ["job_id", "status", "host_name", "date"]
    c = _read_columns(engine, warehouse, versions, {"captures": recent}, {"captures": cols}).get("captures")
    if c is None:
        return None
    named = c[(c["status"] == "ingested") & c["host_name"].notna()]
    newest = capture_days(named["date"]).max() if len(named) else pd.NaT
    if pd.isna(newest) or newest < first_day:
        return None  # the window ends before the log's last days: every job may be in it
    start = newest - pd.Timedelta(days=WINDOW_DAYS - 1)
    return sorted(j for j, d in last.items() if d >= start)


#: What :func:`jobs.fleet.impact.fleet_findings`, :func:`jobs.fleet.impact.fleet_ops`,
#: :func:`jobs.fleet.hosts.host_health` and :func:`jobs.fleet.changes.what_changed` read of the per-job tables.
READ_COLUMNS = {
    "findings": ("job_id", "attempt", "rule", "est_time_lost_per_step_ns", "title"),
    "captures": ("job_id", "attempt", "rank", "status", "host_name", "device_name", "date", "tags_json"),
    "ranks": ("job_id", "attempt", "rank", "step_time_p50_ns", "device_index"),
    "collectives": (
        "job_id",
        "attempt",
        "rank",
        "match_key",
        "n_ranks_matched",
        "is_last_arrival",
        "pg_name",
        "collective",
        "busbw_gbps",
    ),
    "op_efficiency": (
        "job_id",
        "attempt",
        "rank",
        "device_name",
        "op_name",
        "kind",
        "shape_sig",
        "dtype",
        "precision",
        "n_calls",
        "kernel_time_ns",
        "roofline_pct",
        "bound",
        "top_kernel",
    ),
}


#: Every table the fleet stage reads (their versions are recorded with the fleet tables it writes).
FLEET_INPUTS = tuple(dict.fromkeys(("captures", "steps", "ranks", "kernels", *READ_COLUMNS)))


def _read_columns(
    engine, warehouse: str, versions: dict, job_ids: dict | None = None, columns: dict | None = None
) -> dict[str, pd.DataFrame]:
    """:data:`READ_COLUMNS` (or ``columns``: ``{table: columns}``) of the tables that exist at ``versions``, as
    pandas (pyarrow on the local executor, else Spark); only the jobs of ``job_ids[table]`` where given (not
    ``None``)."""
    out = {}
    for name, cols in (columns or READ_COLUMNS).items():
        jobs = (job_ids or {}).get(name)
        if is_local(engine):
            t = read_arrow(warehouse, name, job_ids=jobs, columns=list(cols), as_of=versions.get(name))
            if t is not None:
                out[name] = t.to_pandas()
        else:
            df = read_spark(engine, warehouse, name, job_ids=jobs, as_of=versions.get(name))
            if df is not None:
                out[name] = spark_pandas(df.select(*[c for c in cols if c in df.columns]))  # older warehouses lack some
            elif jobs is not None and versions.get(name) is not None:
                out[name] = pd.DataFrame(columns=list(cols))  # no row of these jobs: the table exists
    return out


def write_fleet_table(
    rows: pd.DataFrame | pa.Table,
    warehouse: str,
    table: str,
    inputs: dict | None = None,
    dates=None,
    replace_rows: list | None = None,
) -> None:
    """Write a fleet table (pandas or Arrow) whole, in one commit: every old row goes (a dimension, date or kind with no
    rows left leaves none behind); with ``dates`` (``regressions``, partitioned by date), the rows of those dates
    only (a date left without rows leaves none); with ``replace_rows`` (a predicate in disjunctive normal form), the
    rows it matches only (:func:`jobs.fleet.partials.made_again`). ``inputs``: the input table versions it was
    derived from (a concurrent run's derivation from newer inputs is kept: :func:`jobs.warehouse.write_table`)."""
    t = as_table(rows, FLEET_TABLES[table].arrow_schema())
    if replace_rows is not None:
        write_table(t, warehouse, table, inputs=inputs, replace_rows=replace_rows)
    elif dates is None:
        write_table(t, warehouse, table, replace_all=True, inputs=inputs)
    else:
        write_table(t, warehouse, table, inputs=inputs, replace_where={"date": sorted(str(d) for d in dates)})
