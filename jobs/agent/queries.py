"""The answers of the agent tools, read from the warehouse with pyarrow (no JVM), partition-pruned by job.

One function per tool of :mod:`jobs.agent.server`; each returns the pydantic answer of
:mod:`schemas.agent`, bounded by :func:`jobs.agent.paging.bounded`. Definitions are the warehouse's:
the temporal breakdown is HTA's (``ranks``/``steps``), findings are the ``findings`` table
(:mod:`jobs.analyze.findings.rules`), the critical path the ``critical_path`` table, the comparison
:func:`jobs.publish.compare.compare_jobs`.

Errors: :class:`NotFound` for a job, step or table the warehouse does not have;
:class:`jobs.common.ids.DiscoveryError` for an unsafe id; :class:`jobs.agent.paging.BadCursor`.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pyarrow.dataset as ds

from jobs.agent.paging import bounded, fingerprint
from jobs.analyze.efficiency.ops import job_op_groups
from jobs.analyze.efficiency.utilization import job_window_groups
from jobs.analyze.findings.ranking import findings_document
from jobs.analyze.findings.uncertainty import capture_warnings
from jobs.common.floats import finite_float as _num
from jobs.common.ids import safe_date, safe_id, safe_index
from jobs.fleet.impact import IMPACT_DIMENSIONS
from jobs.fleet.stats import DIMENSIONS as FLEET_DIMENSIONS
from jobs.publish.compare import compare_jobs, op_summary
from jobs.publish.headline import headline
from jobs.publish.verdict import job_verdict
from jobs.validate.marks import read_jobs_marks, read_marks
from jobs.warehouse import read_arrow
from schemas import agent as A


class NotFound(LookupError):
    """The warehouse has no such job, attempt, step or table (the message names it)."""


# ----------------------------------------------------------------------------- reading


def _read(warehouse: str, table: str, job_ids=None, columns=None, filter=None) -> pd.DataFrame:
    """Rows of ``table`` as pandas (an empty frame when it was never written)."""
    t = read_arrow(warehouse, table, job_ids, columns=columns, filter=filter)
    if t is None:
        return pd.DataFrame(columns=list(columns or []))
    return t.to_pandas()


def _ms_ns(v) -> int | None:
    """A headline value in ms (:mod:`jobs.publish.headline`) back to whole ns (run_summary's own unit)."""
    return None if v is None or v != v else int(round(float(v) * 1e6))


def _int(v) -> int | None:
    f = _num(v)
    return None if f is None else int(round(f))


def _median(values) -> float | None:
    """Median of the known values (``None`` when there is none)."""
    v = pd.to_numeric(pd.Series(values), errors="coerce").dropna()
    return float(v.median()) if len(v) else None


def _str(v) -> str | None:
    return None if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)) else str(v)


def _bool(v) -> bool | None:
    return None if _str(v) is None else bool(v)


def _job_id(job_id: str) -> str:
    return safe_id(job_id, "job id", "tool argument job_id")


def _attempt_of(warehouse: str, job_id: str, attempt: int | None) -> int:
    """``attempt``, checked against ``captures``, or the job's latest attempt."""
    caps = _read(warehouse, "captures", [job_id], columns=["job_id", "attempt"])
    if caps.empty:
        raise NotFound(f"no job {job_id!r} in the warehouse (list_jobs shows the jobs)")
    attempts = sorted({int(a) for a in caps["attempt"]})
    if attempt is None:
        return attempts[-1]
    attempt = safe_index(attempt, "attempt", "tool argument attempt")
    if attempt not in attempts:
        raise NotFound(f"job {job_id!r} has no attempt {attempt} (attempts: {attempts})")
    return attempt


def _of_attempt(df: pd.DataFrame, attempt: int) -> pd.DataFrame:
    return df[df["attempt"].astype(int) == attempt] if len(df) else df


def _overall(marks: dict[str, str]) -> str:
    """A job's validation over its tables' marks (:func:`jobs.validate.marks.read_marks`): failed if any table
    failed, else passed if any passed, else unvalidated."""
    statuses = set(marks.values())
    return "failed" if "failed" in statuses else "passed" if "passed" in statuses else "unvalidated"


_CAPTURE_COLS = [
    "date",
    "job_id",
    "attempt",
    "rank",
    "status",
    "reason",
    "device_name",
    "job_name",
    "model",
    "torch_version",
    "world_size",
    "created_at",
    "flags",
]


def _job_rows(warehouse: str, job_ids: list[str] | None = None) -> list[A.JobRow]:
    """One :class:`JobRow` per (job, attempt) of ``captures``, newest first."""
    caps = _read(warehouse, "captures", job_ids, columns=_CAPTURE_COLS)
    if caps.empty:
        return []
    ranks = _read(warehouse, "ranks", job_ids)
    steps = _read(warehouse, "steps", job_ids)
    finds = _read(warehouse, "findings", job_ids, columns=["job_id", "attempt", "rank_order", "title", "rule"])
    cov = _read(warehouse, "rule_coverage", job_ids)
    marks = read_jobs_marks(warehouse, sorted(set(caps["job_id"])))
    # the headline numbers: run_summary (jobs.publish.headline), as MLflow, the job report, tracelake run, compare
    full_caps = _read(warehouse, "captures", job_ids)
    head = headline(steps if len(steps) else None, ranks if len(ranks) else None, full_caps)
    cov_of = {k: g for k, g in cov.groupby(["job_id", "attempt"])} if len(cov) else {}
    find_stats = {k: g for k, g in finds.groupby(["job_id", "attempt"])} if len(finds) else {}
    rows = []
    for (job, attempt), g in caps.groupby(["job_id", "attempt"]):
        st = set(g["status"])
        status = (
            "ingested"
            if st == {"ingested"}
            else "partial"
            if "ingested" in st
            else "quarantined"
            if "quarantined" in st
            else "cataloged"
        )
        h = head.get((str(job), int(attempt)), {})
        f = find_stats.get((job, attempt))
        v = job_verdict(f, cov_of.get((job, attempt)))
        top = f.sort_values("rank_order").iloc[0]["title"] if f is not None and len(f) else None
        created = [c for c in g["created_at"] if _str(c)]
        first = lambda col, g=g: next((_str(v) for v in g[col] if _str(v)), None)  # noqa: E731
        rows.append(
            A.JobRow(
                job_id=job,
                attempt=int(attempt),
                job_name=first("job_name"),
                model=first("model"),
                hardware=first("device_name") or "cpu",
                torch_version=first("torch_version"),
                date=str(g["date"].max()),
                captured_at=max(created) if created else None,
                n_ranks=int(g.loc[g["status"] == "ingested", "rank"].nunique()),
                world_size=_int(g["world_size"].max()),
                status=status,
                validation=_overall(marks[job]),
                step_time_p50_ns=_ms_ns(h.get("step_time_p50_ms")),
                idle_pct=_num(h.get("idle_pct")),
                step_time_p90_ns=_ms_ns(h.get("step_time_p90_ms")),
                exposed_comm_pct=_num(h.get("exposed_comm_pct")),
                cpu_bound_pct=_num(h.get("cpu_bound_pct")),
                n_steps=_int(h.get("n_steps")),
                n_rank_steps=_int(h.get("n_rank_steps")),
                n_findings=0 if f is None else len(f),
                top_finding=_str(top),
                verdict=v.status,
            )
        )
    rows.sort(key=lambda j: (j.captured_at or "", j.date, j.job_id, j.attempt), reverse=True)
    return rows


# ----------------------------------------------------------------------------- tools


def list_jobs(
    warehouse: str,
    job_name: str | None = None,
    model: str | None = None,
    hardware: str | None = None,
    since: str | None = None,
    until: str | None = None,
    status: str | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> A.JobList:
    """Jobs newest first (latest capture commit, then date), filtered.

    Args:
        job_name, model: exact manifest tags; hardware: case-insensitive substring of the device name;
        since, until: capture dates ``YYYY-MM-DD``, ``[since, until]`` inclusive;
        status: ``ingested``, ``partial``, ``quarantined``, ``cataloged``, or ``passed``/``failed``/
        ``unvalidated`` (the validation result).

    Raises:
        DiscoveryError: a date that is not ``YYYY-MM-DD``.
    """
    since = safe_date(since, "tool argument since") if since else None
    until = safe_date(until, "tool argument until") if until else None
    jobs = [
        j
        for j in _job_rows(warehouse)
        if (job_name is None or j.job_name == job_name)
        and (model is None or j.model == model)
        and (hardware is None or hardware.lower() in (j.hardware or "").lower())
        and (since is None or j.date >= since)
        and (until is None or j.date <= until)
        and (status is None or status in (j.status, j.validation))
    ]
    q = fingerprint(
        "list_jobs", dict(job_name=job_name, model=model, hardware=hardware, since=since, until=until, status=status)
    )
    return bounded(jobs, lambda rows, page: A.JobList(jobs=rows, page=page), q, cursor, limit)


def _straggler(ranks: pd.DataFrame, colls: pd.DataFrame, findings: list[dict]) -> A.Straggler:
    """The rank the job waits for: the ``straggler_rank`` finding, else the rank most often last into
    matched collectives (when that is more than its fair share), else the slowest median step."""
    p50 = {int(r.rank): _int(r.step_time_p50_ns) for r in ranks.itertuples()} if len(ranks) else {}
    known = {k: v for k, v in p50.items() if v is not None}
    med = float(np.median(list(known.values()))) if known else None
    share: dict[int, float] = {}
    if len(colls):
        matched = colls[colls["n_ranks_matched"].fillna(0) >= 2]
        if len(matched):
            last = matched[matched["is_last_arrival"].fillna(False).astype(bool)]
            share = {int(k): 100.0 * v / matched["match_key"].nunique() for k, v in last.groupby("rank").size().items()}

    def answer(rank, source):
        p = p50.get(rank) if rank is not None else None
        return A.Straggler(
            rank=rank,
            source=source,
            step_time_p50_ns=p,
            excess_vs_median_pct=None if p is None or not med else 100.0 * (p - med) / med,
            last_arrival_share_pct=share.get(rank) if rank is not None else None,
        )

    for f in findings:
        if f["rule"] == "straggler_rank" and f["ranks"]:
            return answer(int(f["ranks"][0]), "straggler_rank finding")
    if len(p50) < 2:
        return answer(None, "none")
    if share:
        rank, s = max(share.items(), key=lambda kv: (kv[1], -kv[0]))
        if s > 100.0 / len(p50):
            return answer(rank, "last arrivals")
    return answer(max(known, key=lambda k: (known[k], -k)), "slowest step") if known else answer(None, "none")


def job_summary(
    warehouse: str, job_id: str, attempt: int | None = None, limit: int | None = None, cursor: str | None = None
) -> A.JobSummary:
    """One (job, attempt): per-rank step time p50/p90/max and HTA temporal breakdown, top findings, the
    straggler and data quality. ``ranks`` is paged.

    Raises:
        NotFound: no such job or attempt.
    """
    job_id = _job_id(job_id)
    attempt = _attempt_of(warehouse, job_id, attempt)
    job = next(j for j in _job_rows(warehouse, [job_id]) if j.attempt == attempt)
    ranks = _of_attempt(_read(warehouse, "ranks", [job_id]), attempt).sort_values("rank")
    steps = _of_attempt(_read(warehouse, "steps", [job_id], columns=["attempt", "rank", "step_time_ns"]), attempt)
    colls = _of_attempt(
        _read(
            warehouse,
            "collectives",
            [job_id],
            columns=["attempt", "rank", "match_key", "n_ranks_matched", "is_last_arrival"],
        ),
        attempt,
    )
    doc = findings_document(job_id, attempt, _of_attempt(_read(warehouse, "findings", [job_id]), attempt))
    p90 = steps.groupby("rank")["step_time_ns"].quantile(0.9) if len(steps) else pd.Series(dtype=float)
    per_rank = [
        A.RankSummary(
            rank=int(r.rank),
            n_steps=int(r.n_steps),
            step_time_p50_ns=_int(r.step_time_p50_ns),
            step_time_p90_ns=_int(p90.get(r.rank)),
            step_time_max_ns=_int(r.step_time_max_ns),
            idle_pct=_num(r.idle_pct),
            compute_pct=_num(r.compute_pct),
            non_compute_pct=_num(r.non_compute_pct),
            exposed_comm_ns=_int(r.exposed_comm_ns),
        )
        for r in ranks.itertuples()
    ]
    caps = _of_attempt(_read(warehouse, "captures", [job_id]), attempt)
    quarantined = caps[caps["status"] == "quarantined"]
    flags = sorted({f for fl in caps["flags"] if fl is not None for f in fl})
    quality = A.DataQuality(
        captures=len(caps),
        quarantined=len(quarantined),
        quarantine_reasons=sorted({str(r) for r in quarantined["reason"] if _str(r)})[:10],
        tables={t: m for t, m in read_marks(warehouse, job_id).items() if m != "unvalidated"},  # the marked tables
        flags=flags,
        profiler_warnings=[
            f"rank {w['rank']}: {w['kind']} ({w['count']}): {w['message']}" for w in capture_warnings(caps)
        ][:10],
    )
    h = headline(
        _of_attempt(_read(warehouse, "steps", [job_id]), attempt),
        ranks,
        caps,
    ).get((job_id, attempt), {})
    idle, comp = _num(h.get("idle_pct")), _num(h.get("compute_pct"))
    breakdown = {
        "idle_pct": idle,
        "compute_pct": comp,
        "non_compute_pct": max(0.0, 100.0 - idle - comp) if idle is not None and comp is not None else None,
    }
    v = job_verdict(
        _of_attempt(_read(warehouse, "findings", [job_id]), attempt),
        _of_attempt(_read(warehouse, "rule_coverage", [job_id]), attempt),
    )
    verdict = A.VerdictBrief(**{k: x for k, x in v.as_dict().items() if k != "top_rule"})
    top = [A.FindingBrief(**{k: f[k] for k in A.FindingBrief.model_fields}) for f in doc["findings"][:5]]
    straggler = _straggler(ranks, colls, doc["findings"])
    q = fingerprint("job_summary", dict(job_id=job_id, attempt=attempt))
    return bounded(
        per_rank,
        lambda rows, page: A.JobSummary(
            job=job,
            verdict=verdict,
            ranks=rows,
            breakdown=breakdown,
            top_findings=top,
            straggler=straggler,
            data_quality=quality,
            page=page,
        ),
        q,
        cursor,
        limit,
    )


def findings(
    warehouse: str,
    job_id: str | None = None,
    attempt: int | None = None,
    rule: str | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> A.FindingList:
    """One job's findings in rank order (``job_id`` given), or every job's, most estimated time lost per
    step first (the fleet), each with evidence and recommendation; ``rule`` keeps one rule.

    Raises:
        NotFound: no such job or attempt.
    """
    if job_id is not None:
        job_id = _job_id(job_id)
        attempt = _attempt_of(warehouse, job_id, attempt)
        pairs = [(job_id, attempt)]
        rows = _of_attempt(_read(warehouse, "findings", [job_id]), attempt)
    else:
        rows = _read(warehouse, "findings")
        pairs = sorted({(str(j), int(a)) for j, a in zip(rows["job_id"], rows["attempt"])}) if len(rows) else []
    out = []
    for job, att in pairs:
        doc = findings_document(job, att, rows[(rows["job_id"] == job) & (rows["attempt"].astype(int) == att)])
        out += [
            A.Finding(job_id=job, attempt=att, **{k: f[k] for k in A.Finding.model_fields if k in f})
            for f in doc["findings"]
            if rule is None or f["rule"] == rule
        ]
    if job_id is None:
        out.sort(key=lambda f: (-(f.est_time_lost_per_step_ns or 0), f.job_id, f.attempt, f.rank_order))
    q = fingerprint("findings", dict(job_id=job_id, attempt=attempt, rule=rule))
    return bounded(
        out, lambda r, page: A.FindingList(scope="job" if job_id else "fleet", findings=r, page=page), q, cursor, limit
    )


def critical_path(
    warehouse: str,
    job_id: str,
    step: int | None = None,
    attempt: int | None = None,
    scope: str = "job",
    rank: int | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> A.CriticalPath:
    """One step's critical path (HTA critical-path analysis; scope ``job``: the cross-rank path that set
    the step time, ``rank``: one rank's own path, ``rank`` required): time by bound-by, the ranks it
    crosses, and its longest segments (paged). Default step: the one with the longest path.

    Raises:
        NotFound: no such job, attempt or step, or no critical path for it.
        ValueError: an unknown scope, or scope ``rank`` without ``rank``.
    """
    if scope not in ("job", "rank"):
        raise ValueError(f"scope must be 'job' or 'rank', not {scope!r}")
    if scope == "rank" and rank is None:
        raise ValueError("scope 'rank' needs the rank whose path to show")
    job_id = _job_id(job_id)
    attempt = _attempt_of(warehouse, job_id, attempt)
    filt = ds.field("scope") == scope
    if scope == "rank":
        filt = filt & (ds.field("path_rank") == safe_index(rank, "rank", "tool argument rank"))
    cp = _of_attempt(
        _read(
            warehouse,
            "critical_path",
            [job_id],
            filter=filt,
            columns=["attempt", "step", "segment", "rank", "name", "start_ns", "dur_ns", "bound_by", "path_length_ns"],
        ),
        attempt,
    )
    if cp.empty:
        raise NotFound(
            f"job {job_id!r} attempt {attempt} has no {scope}-scope critical path"
            + (f" for rank {rank}" if scope == "rank" else "")
        )
    lengths = cp.groupby("step")["path_length_ns"].max()
    steps = sorted(int(s) for s in lengths.index)
    if step is None:
        step = int(lengths.idxmax())
    elif int(step) not in steps:
        raise NotFound(f"job {job_id!r} has no critical path for step {step} (steps: {steps})")
    seg = cp[cp["step"] == int(step)]
    total = float(seg["dur_ns"].sum()) or 1.0
    by_bound = [
        A.PathShare(
            bound_by=str(b),
            dur_ns=int(g["dur_ns"].sum()),
            share_pct=100.0 * g["dur_ns"].sum() / total,
            n_segments=len(g),
        )
        for b, g in seg.groupby("bound_by")
    ]
    by_bound.sort(key=lambda p: -p.dur_ns)
    by_rank = [
        A.PathRank(rank=int(r), dur_ns=int(d), share_pct=100.0 * d / total)
        for r, d in seg.groupby("rank")["dur_ns"].sum().sort_values(ascending=False).items()
    ]
    longest = [
        A.PathSegment(
            segment=int(r.segment),
            rank=_int(r.rank),
            name=_str(r.name),
            bound_by=_str(r.bound_by),
            start_ns=_int(r.start_ns),
            dur_ns=_int(r.dur_ns),
        )
        for r in seg.sort_values(["dur_ns", "segment"], ascending=[False, True]).itertuples()
    ]
    q = fingerprint("critical_path", dict(job_id=job_id, attempt=attempt, step=step, scope=scope, rank=rank))
    return bounded(
        longest,
        lambda rows, page: A.CriticalPath(
            job_id=job_id,
            attempt=attempt,
            step=int(step),
            steps_available=steps,
            scope=scope,
            path_length_ns=_int(seg["path_length_ns"].max()),
            by_bound=by_bound,
            ranks=by_rank,
            longest_segments=rows,
            page=page,
        ),
        q,
        cursor,
        limit,
    )


def collectives(
    warehouse: str, job_id: str, attempt: int | None = None, limit: int | None = None, cursor: str | None = None
) -> A.Collectives:
    """One job's collectives per (collective, process group), most total wait first: calls, message size,
    wait, skew, exposed time, bus bandwidth (NCCL-tests definition, ``collectives.busbw_gbps``) and the rank
    most often last to arrive.

    Raises:
        NotFound: no such job or attempt.
    """
    job_id = _job_id(job_id)
    attempt = _attempt_of(warehouse, job_id, attempt)
    c = _of_attempt(
        _read(
            warehouse,
            "collectives",
            [job_id],
            columns=[
                "attempt",
                "rank",
                "collective",
                "pg_name",
                "match_key",
                "msg_bytes",
                "dur_ns",
                "wait_ns",
                "skew_ns",
                "exposed_ns",
                "busbw_gbps",
                "is_last_arrival",
                "n_ranks_matched",
            ],
        ),
        attempt,
    )
    rows, last_by_rank = [], {}
    if len(c):
        c = c.assign(
            collective=c["collective"].fillna("(unknown)"),
            pg_name=c["pg_name"].fillna("(unknown)"),
            is_last_arrival=c["is_last_arrival"].fillna(False).astype(bool),
        )
        last = c[c["is_last_arrival"] & (c["n_ranks_matched"].fillna(0) >= 2)]
        last_by_rank = {str(int(k)): int(v) for k, v in last.groupby("rank").size().items()}
        for (name, pg), g in c.groupby(["collective", "pg_name"]):
            lg = g[g["is_last_arrival"] & (g["n_ranks_matched"].fillna(0) >= 2)]
            lr = lg.groupby("rank").size() if len(lg) else None
            rows.append(
                A.CollectiveRow(
                    collective=name,
                    pg_name=pg,
                    n_calls=int(g["match_key"].nunique()),
                    msg_bytes_p50=_int(_median(g["msg_bytes"])),
                    dur_ns_total=int(g["dur_ns"].fillna(0).sum()),
                    wait_ns_total=_int(g["wait_ns"].sum(min_count=1)),
                    skew_ns_p50=_int(_median(g["skew_ns"])),
                    skew_ns_max=_int(g["skew_ns"].max()),
                    exposed_ns_total=_int(g["exposed_ns"].sum(min_count=1)),
                    busbw_gbps_p50=_median(g["busbw_gbps"]),
                    last_arrival_rank=None if lr is None else int(lr.sort_values(ascending=False).index[0]),
                )
            )
        rows.sort(key=lambda r: (-(r.wait_ns_total or 0), -r.dur_ns_total, r.collective or "", r.pg_name or ""))
    q = fingerprint("collectives", dict(job_id=job_id, attempt=attempt))
    return bounded(
        rows,
        lambda r, page: A.Collectives(
            job_id=job_id, attempt=attempt, last_arrivals_by_rank=last_by_rank, collectives=r, page=page
        ),
        q,
        cursor,
        limit,
    )


def kernels(
    warehouse: str, job_id: str, attempt: int | None = None, top: int | None = None, cursor: str | None = None
) -> A.Kernels:
    """One job's kernels by total time over all ranks and steps (``kernels`` table, HTA kernel
    breakdown), ``top`` per page (default 50).

    Raises:
        NotFound: no such job or attempt.
    """
    job_id = _job_id(job_id)
    attempt = _attempt_of(warehouse, job_id, attempt)
    k = _of_attempt(
        _read(warehouse, "kernels", [job_id], columns=["attempt", "rank", "name", "kernel_type", "n", "total_ns"]),
        attempt,
    )
    total = int(k["total_ns"].sum()) if len(k) else 0
    rows = []
    if len(k):
        g = (
            k.groupby("name")
            .agg(
                kernel_type=("kernel_type", "first"),
                n=("n", "sum"),
                total_ns=("total_ns", "sum"),
                n_ranks=("rank", "nunique"),
            )
            .reset_index()
        )
        g = g.sort_values(["total_ns", "name"], ascending=[False, True])
        rows = [
            A.KernelRow(
                name=str(r.name),
                kernel_type=_str(r.kernel_type),
                n=int(r.n),
                total_ns=int(r.total_ns),
                mean_ns=float(r.total_ns) / r.n if r.n else None,
                share_pct=100.0 * r.total_ns / total if total else 0.0,
                n_ranks=int(r.n_ranks),
            )
            for r in g.itertuples()
        ]
    q = fingerprint("kernels", dict(job_id=job_id, attempt=attempt))
    return bounded(
        rows,
        lambda r, page: A.Kernels(job_id=job_id, attempt=attempt, total_kernel_ns=total, kernels=r, page=page),
        q,
        cursor,
        top,
    )


def op_efficiency(
    warehouse: str, job_id: str, attempt: int | None = None, top: int | None = None, cursor: str | None = None
) -> A.OpEfficiency:
    """One job's modelled ops per (op, shapes, dtype) over all ranks against the device's datasheet roofline
    (``op_efficiency`` table, :func:`jobs.analyze.efficiency.ops.job_op_groups`), ``top`` per page (default 50).

    Raises:
        NotFound: no such job or attempt.
    """
    job_id = _job_id(job_id)
    attempt = _attempt_of(warehouse, job_id, attempt)
    rows = _of_attempt(_read(warehouse, "op_efficiency", [job_id]), attempt)
    g = job_op_groups(rows) if len(rows) else pd.DataFrame()
    ops = [
        A.OpEfficiencyRow(
            op_name=str(r.op_name),
            shape_sig=str(r.shape_sig),
            dtype=str(r.dtype),
            kind=_str(r.kind),
            n_ranks=int(r.n_ranks),
            n_calls=int(r.n_calls),
            kernel_time_ns=int(r.kernel_time_ns),
            achieved_tflops=_num(r.achieved_tflops),
            achieved_gbps=_num(r.achieved_gbps),
            peak_flops_pct=_num(r.peak_flops_pct),
            peak_bandwidth_pct=_num(r.peak_bandwidth_pct),
            roofline_pct=_num(r.roofline_pct),
            recoverable_ns=_int(r.recoverable_ns),
            bound=_str(r.bound),
            top_kernel=_str(r.top_kernel),
        )
        for r in g.itertuples()
    ]
    names = sorted({str(v) for v in rows["device_name"].dropna()}) if len(rows) else []
    sources = sorted({str(v) for v in rows["peak_source"].dropna()}) if len(rows) else []
    q = fingerprint("op_efficiency", dict(job_id=job_id, attempt=attempt))
    return bounded(
        ops,
        lambda r, page: A.OpEfficiency(
            job_id=job_id, attempt=attempt, device_names=names, peak_sources=sources, ops=r, page=page
        ),
        q,
        cursor,
        top,
    )


def utilization_windows(
    warehouse: str,
    job_id: str,
    attempt: int | None = None,
    rank: int | None = None,
    top: int | None = None,
    cursor: str | None = None,
) -> A.UtilizationWindows:
    """One job's device idle windows per (rank, cause, host op) (``utilization_windows`` table,
    :func:`jobs.analyze.efficiency.utilization.job_window_groups`), of one ``rank`` or all, ``top`` per page
    (default 50).

    Raises:
        NotFound: no such job or attempt.
    """
    job_id = _job_id(job_id)
    attempt = _attempt_of(warehouse, job_id, attempt)
    rows = _of_attempt(_read(warehouse, "utilization_windows", [job_id]), attempt)
    if rank is not None and len(rows):
        rows = rows[rows["rank"] == rank]
    g = job_window_groups(rows)
    groups = [
        A.WindowGroupRow(
            rank=int(r.rank),
            cause=str(r.cause),
            cause_op=_str(r.cause_op),
            cause_stack=_str(r.cause_stack),
            n_windows=int(r.n_windows),
            n_steps=int(r.n_steps),
            idle_ns=int(r.idle_ns),
            mean_dur_ns=_num(r.mean_dur_ns),
            offset_p50_ns=_num(r.offset_p50_ns),
            step_pct=_num(r.step_pct),
            recurs_pct=_num(r.recurs_pct),
            step=int(r.step),
            window_id=int(r.window_id),
            cause_event_id=None if pd.isna(r.cause_event_id) else int(r.cause_event_id),
        )
        for r in g.itertuples()
    ]
    total = int(pd.to_numeric(rows["dur_ns"], errors="coerce").sum()) if len(rows) else 0
    q = fingerprint("utilization_windows", dict(job_id=job_id, attempt=attempt, rank=rank))
    return bounded(
        groups,
        lambda r, page: A.UtilizationWindows(job_id=job_id, attempt=attempt, total_idle_ns=total, groups=r, page=page),
        q,
        cursor,
        top,
    )


def _ref(warehouse: str, ref: str) -> tuple[str, int]:
    """``job`` or ``job#attempt`` → (job_id, attempt) (latest attempt by default)."""
    job, _, att = ref.partition("#")
    job = _job_id(job)
    return job, _attempt_of(warehouse, job, safe_index(att, "attempt", f"tool argument {ref!r}") if att else None)


def _compare_tables(warehouse: str, job_id: str, attempt: int) -> dict[str, pd.DataFrame]:
    """What :func:`compare_jobs` reads of one job; its ``op_summary`` from the X events alone (the
    attempt and phase filters pushed into the Parquet scan)."""
    this = ds.field("attempt") == attempt
    tables = {t: _read(warehouse, t, [job_id], filter=this) for t in ("captures", "ranks", "steps", "findings")}
    ev = read_arrow(
        warehouse,
        "events",
        [job_id],
        columns=["rank", "category", "name", "dur_ns", "is_gpu", "step", "ph"],
        filter=this & (ds.field("ph") == "X"),
    )
    if ev is not None:
        tables["op_summary"] = op_summary(ev.to_pandas())
    return tables


def compare(warehouse: str, a: str, b: str, limit: int | None = None, cursor: str | None = None) -> A.Comparison:
    """Job ``b`` against job ``a`` (each ``job_id`` or ``job_id#attempt``), as ``tracelake compare``:
    metric deltas, kernels and ops added, removed, slower and faster (paged, largest |Δ per step| first),
    findings appeared, cleared and persisting (:func:`jobs.publish.compare.compare_jobs`).

    Raises:
        NotFound: either job or attempt missing.
    """
    (ja, aa), (jb, ab) = _ref(warehouse, a), _ref(warehouse, b)
    c = compare_jobs(_compare_tables(warehouse, ja, aa), _compare_tables(warehouse, jb, ab), f"{ja}#{aa}", f"{jb}#{ab}")
    metrics = [
        A.MetricDelta(metric=str(r.metric), a=_num(r.a), b=_num(r.b), delta=_num(r.delta), delta_pct=_num(r.delta_pct))
        for r in c.metrics.itertuples()
    ]
    changed = c.ops[c.ops["status"].isin(["added", "removed", "slower", "faster"])]
    changed = changed.reindex(changed["delta_ns_per_step"].abs().sort_values(ascending=False, kind="stable").index)
    ops = [
        A.OpDelta(
            group=str(r.group),
            name=str(r.name),
            status=r.status,
            a_ns_per_step=_num(r.a_ns_per_step),
            b_ns_per_step=_num(r.b_ns_per_step),
            delta_ns_per_step=_num(r.delta_ns_per_step),
            delta_pct=_num(r.delta_pct),
            a_max_rank_ns_per_step=_num(r.a_max_rank_ns_per_step),
            b_max_rank_ns_per_step=_num(r.b_max_rank_ns_per_step),
        )
        for r in changed.itertuples()
    ]
    fchanges = (
        []
        if c.findings is None
        else [
            A.FindingChange(
                finding_id=str(r.finding_id),
                rule=_str(r.rule),
                title=_str(r.title),
                status=r.status,
                a_est_ns=_num(r.a_est_ns),
                b_est_ns=_num(r.b_est_ns),
            )
            for r in c.findings.itertuples()
        ]
    )
    q = fingerprint("compare", dict(a=f"{ja}#{aa}", b=f"{jb}#{ab}"))
    return bounded(
        ops,
        lambda r, page: A.Comparison(
            a=c.a_label, b=c.b_label, metrics=metrics, ops=r, findings=fchanges, notes=c.notes, page=page
        ),
        q,
        cursor,
        limit,
    )


def regressions(
    warehouse: str,
    job_name: str | None = None,
    verdict: str | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> A.Regressions:
    """Each run's step-time, idle and exposed-communication metrics against the earlier runs of its
    ``job_name`` (``regressions`` table: Mann-Whitney U test, Hodges-Lehmann interval), newest run first; ``verdict`` keeps one of
    ``regression``, ``improvement``, ``unchanged``, ``inconclusive``, ``no_baseline``."""
    r = _read(warehouse, "regressions")
    if len(r) and job_name is not None:
        r = r[r["job_name"] == job_name]
    if len(r) and verdict is not None:
        r = r[r["verdict"] == verdict]
    if len(r):
        r = r.sort_values(["date", "run_index", "job_id", "metric"], ascending=[False, False, True, True])
    rows = [
        A.RegressionRow(
            job_name=_str(x.job_name),
            job_id=str(x.job_id),
            attempt=int(x.attempt),
            date=_str(x.date),
            metric=str(x.metric),
            value=_num(x.value),
            baseline=_num(x.baseline),
            change_pct=_num(x.change_pct),
            change_ci_low_pct=_num(getattr(x, "change_ci_low_pct", None)),
            change_ci_high_pct=_num(getattr(x, "change_ci_high_pct", None)),
            p_value=_num(x.p_value),
            p_adjusted=_num(getattr(x, "p_adjusted", None)),
            verdict=_str(x.verdict),
            reason=_str(getattr(x, "reason", None)),
            summary=_str(getattr(x, "summary", None)),
            noisy=_bool(getattr(x, "noisy", None)),
            n_steps=_int(getattr(x, "n_steps", None)),
            n_baseline_steps=_int(getattr(x, "n_baseline_steps", None)),
            n_dropped=_int(getattr(x, "n_dropped", None)),
            baseline_runs=[str(v) for v in (x.baseline_runs if x.baseline_runs is not None else [])],
            changes=json.loads(x.changes_json) if _str(getattr(x, "changes_json", None)) else None,
        )
        for x in r.itertuples()
    ]
    q = fingerprint("regressions", dict(job_name=job_name, verdict=verdict))
    return bounded(rows, lambda rs, page: A.Regressions(regressions=rs, page=page), q, cursor, limit)


def fleet_stats(
    warehouse: str,
    dimension: str = "job_name",
    value: str | None = None,
    by_date: bool = False,
    limit: int | None = None,
    cursor: str | None = None,
) -> A.FleetStats:
    """The fleet grouped by ``dimension`` (``fleet``, ``job_name``, ``job``, ``model``, ``hardware``,
    ``torch_version``), from ``fleet_stats``: step-time percentiles of the jobs' steps and time-weighted
    idle / compute / exposed-communication / CPU-bound / dataloader %. ``by_date``: one row per capture
    date (else every date together); ``value`` keeps one group. Most runs first.

    Raises:
        ValueError: an unknown dimension.
    """
    if dimension not in FLEET_DIMENSIONS:
        raise ValueError(f"dimension must be one of {', '.join(FLEET_DIMENSIONS)}; not {dimension!r}")
    f = _read(warehouse, "fleet_stats", filter=ds.field("dimension") == dimension)
    if len(f):
        f = f[(f["date"] != "all") if by_date else (f["date"] == "all")]
        if value is not None:
            f = f[f["value"] == value]
        f = f.sort_values(["n_runs", "value", "date"], ascending=[False, True, False])
    rows = [
        A.FleetRow(
            dimension=dimension,
            value=_str(x.value),
            date=_str(x.date),
            n_runs=_int(x.n_runs),
            n_ranks=_int(x.n_ranks),
            n_steps=_int(x.n_steps),
            step_time_p50_ns=_num(x.step_time_p50_ns),
            step_time_p90_ns=_num(x.step_time_p90_ns),
            idle_pct=_num(x.idle_pct),
            compute_pct=_num(x.compute_pct),
            exposed_comm_pct=_num(x.exposed_comm_pct),
            cpu_bound_pct=_num(x.cpu_bound_pct),
            dataloader_pct=_num(x.dataloader_pct),
        )
        for x in f.itertuples()
    ]
    q = fingerprint("fleet_stats", dict(dimension=dimension, value=value, by_date=by_date))
    return bounded(rows, lambda rs, page: A.FleetStats(dimension=dimension, rows=rs, page=page), q, cursor, limit)


def fleet_findings(
    warehouse: str,
    dimension: str = "fleet",
    value: str | None = None,
    rule: str | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> A.FleetFindings:
    """Finding rules ranked by fleet impact (the ``fleet_findings`` table, :mod:`jobs.fleet.impact`): per
    group of ``dimension`` (``fleet``, ``job_name``, ``model``, ``hardware``), the accelerator-hours per day
    that fixing each rule would recover, with the runs it fired in; ``value`` keeps one group, ``rule``
    one rule. Most recoverable first.

    Raises:
        ValueError: an unknown dimension.
    """
    if dimension not in IMPACT_DIMENSIONS:
        raise ValueError(f"dimension must be one of {', '.join(IMPACT_DIMENSIONS)}; not {dimension!r}")
    f = _read(warehouse, "fleet_findings", filter=ds.field("dimension") == dimension)
    if len(f) and value is not None:
        f = f[f["value"] == value]
    if len(f) and rule is not None:
        f = f[f["rule"] == rule]
    if len(f):
        f = f.sort_values(["accelerator_hours_per_day", "value", "rule"], ascending=[False, True, True])
    rows = [
        A.FleetFindingRow(
            dimension=dimension,
            value=str(x.value),
            rule=str(x.rule),
            impact_rank=int(x.impact_rank),
            window_start=str(x.window_start),
            window_end=str(x.window_end),
            n_jobs=int(x.n_jobs),
            n_runs=int(x.n_runs),
            n_steps=int(x.n_steps),
            time_lost_ns=_int(x.time_lost_ns),
            accelerator_hours=_num(x.accelerator_hours),
            accelerator_hours_per_day=_num(x.accelerator_hours_per_day),
            top_jobs=[str(j) for j in (x.top_jobs if x.top_jobs is not None else [])],
            example_title=_str(x.example_title),
        )
        for x in f.itertuples()
    ]
    q = fingerprint("fleet_findings", dict(dimension=dimension, value=value, rule=rule))
    return bounded(rows, lambda rs, page: A.FleetFindings(dimension=dimension, rows=rs, page=page), q, cursor, limit)


def fleet_ops(
    warehouse: str,
    dimension: str = "fleet",
    value: str | None = None,
    op_name: str | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> A.FleetOps:
    """Op groups ranked by fleet impact (the ``fleet_ops`` table, :func:`jobs.fleet.impact.fleet_ops`): per group of
    ``dimension``, the accelerator-hours per day running each (op, shapes, dtype) at 70 % of its roofline would
    recover; ``value`` keeps one group, ``op_name`` one op. Most recoverable first.

    Raises:
        ValueError: an unknown dimension.
    """
    if dimension not in IMPACT_DIMENSIONS:
        raise ValueError(f"dimension must be one of {', '.join(IMPACT_DIMENSIONS)}; not {dimension!r}")
    f = _read(warehouse, "fleet_ops", filter=ds.field("dimension") == dimension)
    if len(f) and value is not None:
        f = f[f["value"] == value]
    if len(f) and op_name is not None:
        f = f[f["op_name"] == op_name]
    if len(f):
        f = f.sort_values(["accelerator_hours_per_day", "value", "impact_rank"], ascending=[False, True, True])
    rows = [
        A.FleetOpRow(
            dimension=dimension,
            value=str(x.value),
            op_name=str(x.op_name),
            shape_sig=str(x.shape_sig),
            dtype=str(x.dtype),
            impact_rank=int(x.impact_rank),
            kind=_str(x.kind),
            bound=_str(x.bound),
            device_names=[str(d) for d in (x.device_names if x.device_names is not None else [])],
            window_start=str(x.window_start),
            window_end=str(x.window_end),
            n_jobs=int(x.n_jobs),
            n_runs=int(x.n_runs),
            kernel_time_ns=int(x.kernel_time_ns),
            roofline_pct=_num(x.roofline_pct),
            recoverable_ns=int(x.recoverable_ns),
            accelerator_hours_per_day=_num(x.accelerator_hours_per_day),
            top_jobs=[str(j) for j in (x.top_jobs if x.top_jobs is not None else [])],
            top_kernel=_str(x.top_kernel),
        )
        for x in f.itertuples()
    ]
    q = fingerprint("fleet_ops", dict(dimension=dimension, value=value, op_name=op_name))
    return bounded(rows, lambda rs, page: A.FleetOps(dimension=dimension, rows=rs, page=page), q, cursor, limit)


def host_health(
    warehouse: str,
    suspect_only: bool = False,
    host: str | None = None,
    kind: str | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> A.HostHealth:
    """Hosts, devices and links across jobs (the ``host_health`` table, :mod:`jobs.fleet.hosts`): how often each
    one's ranks arrive last at collectives against their fair share (links: bus bandwidth against the run's other
    links), in how many different jobs it was slow, whether it is a hardware suspect, with the per-run evidence.
    ``host`` keeps the rows on that host (its devices and links too); suspects first."""
    h = _read(warehouse, "host_health")
    if len(h) and suspect_only:
        h = h[h["suspect_hardware"].astype(bool)]
    if len(h) and kind is not None:
        h = h[h["kind"] == kind]
    if len(h) and host is not None:
        h = h[[host in (v if v is not None else []) for v in h["hosts"]]]
    if len(h):
        h = h.sort_values(["suspect_hardware", "n_slow_jobs", "kind", "target"], ascending=[False, False, True, True])
    rows = [
        A.HostRow(
            kind=str(x.kind),
            target=str(x.target),
            host_name=_str(x.host_name),
            device_index=_int(x.device_index),
            hosts=[str(v) for v in (x.hosts if x.hosts is not None else [])],
            device_names=[str(d) for d in (x.device_names if x.device_names is not None else [])],
            suspect_hardware=bool(x.suspect_hardware),
            n_jobs=int(x.n_jobs),
            n_runs=int(x.n_runs),
            n_slow_jobs=int(x.n_slow_jobs),
            slow_jobs=[str(j) for j in (x.slow_jobs if x.slow_jobs is not None else [])],
            matched_calls=_int(x.matched_calls),
            last_arrivals=_int(x.last_arrivals),
            last_arrival_ratio=_num(x.last_arrival_ratio),
            step_excess_p50_pct=_num(x.step_excess_p50_pct),
            busbw_ratio=_num(x.busbw_ratio),
            window_start=str(x.window_start),
            window_end=str(x.window_end),
            evidence=json.loads(x.evidence_json) if _str(x.evidence_json) else [],
        )
        for x in h.itertuples()
    ]
    q = fingerprint("host_health", dict(suspect_only=suspect_only, host=host, kind=kind))
    return bounded(rows, lambda rs, page: A.HostHealth(hosts=rs, page=page), q, cursor, limit)
