"""Recurring communication waits: per collective call site and step, its exposed time on the ranks, the compute
before it on the job's critical path, and what overlapping it would save (a what-if on that path).

A **call site** is one collective call of the step as every rank makes it (``collectives.match_key``), named by what
stays the same from step to step: process group, collective, message size and **position** (0-based order of the
call among the step's calls of that process group), so
``site = "<pg>|<collective>|<msg_bytes>|#<position>"`` (position: the calls of the step and group ordered by their
earliest order on any rank, so each has its own).

Per (job, attempt, step, site): ``exposed_*`` over its ranks (``collectives.exposed_ns``: kernel time no computation
kernel of the rank overlaps), ``wait_*`` (``collectives.wait_ns``: waiting for the last rank), the last-arriving rank,
and on the step's cross-rank critical path (:mod:`jobs.analyze.critical_path.cross_rank`):

* ``preceding_compute_ns`` — the ``compute`` time (HTA weights) of the last-arriving rank's leg that ends at the
  call: the work before it that a prefetch could overlap;
* ``what_if_path_ns`` — the path length when the call's exposed part on the last-arriving rank is hidden (its
  duration in the step graph shortened by that much, the longest path taken again); ``saving_ns`` =
  ``path_length_ns`` − ``what_if_path_ns``. The longest path grows at most as fast as one of its edges, so
  0 ≤ ``saving_ns`` ≤ the exposed time cut.

**Pipeline bubbles**: a point-to-point call (``send``, ``recv``, ``sendrecv``) has ``is_p2p``; its ``wait_*`` is the
time a pipeline stage waits for its peer. ``exposed_steps`` counts the steps in which the site is exposed
(``exposed_max_ns`` > 0), ``exposed_steps_pct`` their share of the job's steps with collectives.

Ours (HTA reports exposed communication as a total per rank, not per call site nor what-if).
"""

from __future__ import annotations

import pandas as pd
import pyarrow as pa

from jobs.analyze.critical_path.cross_rank import StepGraph, step_inputs
from schemas.tables import COMM_SITES

__all__ = ["comm_sites", "job_site_groups", "P2P_COLLECTIVES", "MAX_SITES_PER_STEP"]

#: Point-to-point collectives: their waits are pipeline bubbles.
P2P_COLLECTIVES = ("send", "recv", "sendrecv")
#: What-ifs per step: the sites with the most exposed time on the last-arriving rank (each costs one longest path).
MAX_SITES_PER_STEP = 64


def comm_sites(boundaries: pa.Table, collectives: pa.Table) -> pa.Table:
    """One row per (job, attempt, step, call site) of the matched ``collectives`` (module docstring).

    Args:
        boundaries: the ranks' critical-path legs (:data:`jobs.analyze.critical_path.rank.BOUNDARIES_SCHEMA`); without
            legs for a step its what-if columns are null.
        collectives: COLLECTIVES rows of the job(s) (:func:`jobs.analyze.collectives.calls.match_collectives`).

    Returns:
        COMM_SITES rows (the declared schema), by job, attempt, step and position.
    """
    if collectives.num_rows == 0:
        return COMM_SITES.empty()
    steps, by_event, last_of, offset = step_inputs(boundaries, collectives)
    calls = [c for c in collectives.to_pylist() if c["step"] is not None and c["match_key"] is not None]
    positions = _positions(calls)
    by_step: dict = {}
    for c in calls:
        by_step.setdefault((c["job_id"], c["attempt"], c["step"]), {}).setdefault(c["match_key"], []).append(c)
    out = []
    for (job, att, step), sites in sorted(by_step.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        legs = steps.get((job, att, step))
        graph = StepGraph(job, att, legs, by_event, last_of, offset) if legs else None
        base = graph.length() if graph else None
        lasts = {mk: _last(rows, last_of.get((job, att, mk))) for mk, rows in sites.items()}
        cut_order = sorted(sites, key=lambda mk: -(lasts[mk]["exposed_ns"] or 0))[:MAX_SITES_PER_STEP]
        for mk, rows in sites.items():
            last = lasts[mk]
            exposed = [int(r["exposed_ns"]) for r in rows if r["exposed_ns"] is not None]
            waits = [int(r["wait_ns"]) for r in rows if r["wait_ns"] is not None]
            cut = int(last["exposed_ns"] or 0)
            what_if = preceding = None
            if graph is not None:
                leg = graph.to_leg.get((last["rank"], "collective", last["event_id"]))
                preceding = int(leg["compute_ns"] or 0) if leg else None
                what_if = base
                if cut > 0 and mk in cut_order:
                    what_if = graph.with_cut({mk: cut}).length()
            coll = last["collective"]
            out.append(
                {
                    "date": last["date"],
                    "job_id": job,
                    "attempt": att,
                    "step": step,
                    "site": f"{last['pg_name']}|{coll}|{last['msg_bytes']}|#{positions[(job, att, step, mk)]}",
                    "pg_name": last["pg_name"],
                    "collective": coll,
                    "msg_bytes": last["msg_bytes"],
                    "position": positions[(job, att, step, mk)],
                    "seq": last["seq"],
                    "n_ranks": len(rows),
                    "exposed_mean_ns": sum(exposed) / len(exposed) if exposed else None,
                    "exposed_max_ns": max(exposed) if exposed else None,
                    "exposed_max_rank": max(rows, key=lambda r: (r["exposed_ns"] or 0, -r["rank"]))["rank"],
                    "wait_mean_ns": sum(waits) / len(waits) if waits else None,
                    "wait_max_ns": max(waits) if waits else None,
                    "last_arrival_rank": last["rank"],
                    "exposed_cut_ns": cut,
                    "preceding_compute_ns": preceding,
                    "path_length_ns": base,
                    "what_if_path_ns": what_if,
                    "saving_ns": None if base is None or what_if is None else base - what_if,
                    "is_p2p": coll in P2P_COLLECTIVES,
                }
            )
    _recurrence(out)
    out.sort(key=lambda r: (r["job_id"], r["attempt"], r["step"], r["pg_name"] or "", r["position"], r["site"]))
    return pa.Table.from_pylist(out, schema=COMM_SITES.arrow_schema()) if out else COMM_SITES.empty()


def _last(rows: list[dict], flagged: dict | None) -> dict:
    """The call of the rank that arrived last: ``flagged`` (the ``is_last_arrival`` call of
    :func:`jobs.analyze.critical_path.cross_rank.step_inputs`' ``last_of``), else the latest aligned start, lowest
    rank."""
    return flagged or max(rows, key=lambda r: (r["aligned_start_ns"] or 0, -r["rank"]))


def _positions(calls: list[dict]) -> dict[tuple, int]:
    """(job, attempt, step, match_key) → the call's 0-based position among the step's calls of its process group:
    the calls ordered by their earliest order on a rank (by start), then by match key, so every call of a step and
    group has its own position even when ranks order them differently."""
    groups: dict = {}
    for c in calls:
        groups.setdefault((c["job_id"], c["attempt"], c["rank"], c["step"], c["pg_name"]), []).append(c)
    first: dict = {}
    for (job, att, _rank, step, pg), g in groups.items():
        for i, c in enumerate(sorted(g, key=lambda c: (c["start_ns"] or 0, c["event_id"]))):
            k = (job, att, step, pg, c["match_key"])
            first[k] = min(first.get(k, i), i)
    out: dict = {}
    by_group: dict = {}
    for (job, att, step, pg, mk), i in first.items():
        by_group.setdefault((job, att, step, pg), []).append((i, mk))
    for (job, att, step, _pg), lst in by_group.items():
        for pos, (_i, mk) in enumerate(sorted(lst)):
            out[(job, att, step, mk)] = pos
    return out


def _recurrence(rows: list[dict]) -> None:
    """Set ``exposed_steps`` / ``exposed_steps_pct`` on ``rows`` (module docstring)."""
    steps: dict = {}
    exposed: dict = {}
    for r in rows:
        job = (r["job_id"], r["attempt"])
        steps.setdefault(job, set()).add(r["step"])
        if (r["exposed_max_ns"] or 0) > 0:
            exposed.setdefault((*job, r["site"]), set()).add(r["step"])
    for r in rows:
        job = (r["job_id"], r["attempt"])
        n = len(exposed.get((*job, r["site"]), ()))
        r["exposed_steps"] = n
        r["exposed_steps_pct"] = 100.0 * n / len(steps[job])


def job_site_groups(rows: pd.DataFrame | None) -> pd.DataFrame:
    """``comm_sites`` rows of one job summed per site over its steps: what the job report shows.

    Returns:
        ``site, collective, msg_bytes, position, is_p2p, n_steps, exposed_steps_pct, exposed_max_ns`` (mean per step of the
        largest rank's), ``wait_max_ns`` (mean per step), ``preceding_compute_ns``, ``saving_ns`` (means per step),
        ``last_arrival_rank`` (most frequent), most saving then most exposed first.
    """
    cols = [
        "site", "collective", "msg_bytes", "position", "is_p2p", "n_steps", "exposed_steps_pct", "exposed_max_ns",
        "wait_max_ns", "preceding_compute_ns", "saving_ns", "last_arrival_rank",
    ]  # fmt: skip
    if rows is None or not len(rows):
        return pd.DataFrame(columns=cols)
    w = rows.copy()
    for c in ("exposed_max_ns", "wait_max_ns", "preceding_compute_ns", "saving_ns", "exposed_steps_pct"):
        w[c] = pd.to_numeric(w[c], errors="coerce")
    g = (
        w.groupby("site", sort=False)
        .agg(
            collective=("collective", "first"),
            msg_bytes=("msg_bytes", "first"),
            position=("position", "first"),
            is_p2p=("is_p2p", "first"),
            n_steps=("step", "nunique"),
            exposed_steps_pct=("exposed_steps_pct", "max"),
            exposed_max_ns=("exposed_max_ns", "mean"),
            wait_max_ns=("wait_max_ns", "mean"),
            preceding_compute_ns=("preceding_compute_ns", "mean"),
            saving_ns=("saving_ns", "mean"),
            last_arrival_rank=("last_arrival_rank", lambda s: s.mode().iloc[0] if len(s.dropna()) else None),
        )
        .reset_index()
    )
    g = g.sort_values(["saving_ns", "exposed_max_ns", "site"], ascending=[False, False, True], na_position="last")
    return g.reset_index(drop=True)[cols]
