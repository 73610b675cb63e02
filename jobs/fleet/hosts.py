"""Host health across jobs: the ``host_health`` table (issue 15).

One trace shows which rank of one job is slow; only the fleet shows whether the same *host* is slow in
job after job (bad hardware, a throttling GPU, a flaky NIC) or whether a job is slow everywhere (its
own code). Per host, over a window of capture dates (default the last 7 days with captures), from the
runs (job_id, attempt) whose ranks ran on two or more hosts:

* **last arrivals**: over the run's collectives matched on ≥ 2 ranks (``collectives.n_ranks_matched``),
  the share in which the last rank to arrive (``is_last_arrival``) ran on the host, against its fair
  share (its ranks ÷ the run's ranks): ``last_arrival_ratio`` (1 = fair; the straggler definition of
  HTA ``get_potential_stragglers`` and of the ``straggler_rank`` finding, per host);
* **step-time excess**: the median of its ranks' median step time (``ranks.step_time_p50_ns``) over the
  median of the other hosts' ranks, in %.

The host is *slow in a run* when its last-arrival ratio is ≥ :data:`SLOW_LAST_ARRIVAL_RATIO` over ≥
:data:`MIN_MATCHED_CALLS` matched calls; in a run with fewer matched calls, when its excess is ≥
:data:`SLOW_EXCESS_PCT`. Where ranks synchronize at collectives the excess misleads: the ranks that wait
for a straggler end their steps later, and the straggler, which never waits, has the shortest step (the
corpus' 8-rank DLRM job: the straggler's host is 8.5 % *faster*); it stays in the evidence. It is ``suspect_hardware``
when it is slow in ≥ :data:`SUSPECT_MIN_JOBS` different jobs and in at least
:data:`SUSPECT_MIN_SHARE` of the jobs it ran in. Both measures compare a host with the other hosts of the
same run, so a job slow on every host blames none of them. Runs on one host, and runs whose capture date
is unknown, are left out.
"""

from __future__ import annotations

import json

import pandas as pd

from jobs.fleet.window import WINDOW_DAYS, capture_days, check_window_days, window
from schemas import HOST_HEALTH

MIN_MATCHED_CALLS = 5
SLOW_LAST_ARRIVAL_RATIO = 1.5
SLOW_EXCESS_PCT = 5.0
SUSPECT_MIN_JOBS = 2
SUSPECT_MIN_SHARE = 0.5


def _run_hosts(captures: pd.DataFrame) -> pd.DataFrame:
    """(job_id, attempt, rank) → host_name, device_name, date of the ingested captures that name a host."""
    c = captures[(captures["status"] == "ingested") & captures["host_name"].notna()]
    c = c.assign(attempt=c["attempt"].astype(int), rank=c["rank"].astype(int),
                 day=capture_days(c["date"]))
    c = c.sort_values(["job_id", "attempt", "rank", "host_name"], kind="stable")  # the same rows from Spark or pyarrow
    return c[["job_id", "attempt", "rank", "host_name", "device_name", "day"]].drop_duplicates(
        ["job_id", "attempt", "rank"])


def _per_run(hosts: pd.DataFrame, ranks: pd.DataFrame, colls: pd.DataFrame) -> list[dict]:
    """One dict per (run, host) of a multi-host run: ranks, calls, last arrivals, ratio, excess, slow."""
    out = []
    for (job, attempt), h in hosts.groupby(["job_id", "attempt"], sort=True):
        if h["host_name"].nunique() < 2:
            continue
        r = ranks[(ranks["job_id"] == job) & (ranks["attempt"] == attempt)].set_index("rank")["step_time_p50_ns"]
        c = colls[(colls["job_id"] == job) & (colls["attempt"] == attempt)]
        last = (c[c["is_last_arrival"]].sort_values(["match_key", "rank"], kind="stable")
                .drop_duplicates("match_key").set_index("match_key")["rank"])
        n_calls = int(c["match_key"].nunique())
        n_ranks = len(h)
        for host, g in h.groupby("host_name", sort=True):
            mine = set(g["rank"])
            others = r[[k for k in r.index if k not in mine]].dropna()
            own = r[[k for k in r.index if k in mine]].dropna()
            excess = excess_ns = None
            if len(own) and len(others) and float(others.median()) > 0:
                excess_ns = float(own.median()) - float(others.median())
                excess = 100.0 * excess_ns / float(others.median())
            n_last = int(last.isin(mine).sum())
            ratio = (n_last / n_calls) / (len(mine) / n_ranks) if n_calls else None
            if n_calls >= MIN_MATCHED_CALLS:  # collectives say who the others wait for
                slow = ratio is not None and ratio >= SLOW_LAST_ARRIVAL_RATIO
            else:  # no collectives to go by: the step time itself
                slow = excess is not None and excess >= SLOW_EXCESS_PCT
            out.append({"host_name": host, "job_id": job, "attempt": int(attempt), "ranks": sorted(int(x) for x in mine),
                        "device_name": next((d for d in g["device_name"] if isinstance(d, str)), None),
                        "n_calls": n_calls, "n_last": n_last, "fair_calls": len(mine) / n_ranks * n_calls,
                        "ratio": ratio, "excess_pct": excess, "excess_ns": excess_ns, "slow": slow})
    return out


def host_health(captures: pd.DataFrame | None, ranks: pd.DataFrame | None, collectives: pd.DataFrame | None,
                window_days: int = WINDOW_DAYS) -> pd.DataFrame:
    """The ``host_health`` table (columns of :data:`schemas.HOST_HEALTH`), per host over the ``window_days``
    capture dates ending at the newest one (module docstring for the definitions).

    Args:
        captures: ``captures`` (job_id, attempt, rank, status, host_name, device_name, date);
        ranks: ``ranks`` (job_id, attempt, rank, step_time_p50_ns);
        collectives: ``collectives`` (job_id, attempt, rank, match_key, n_ranks_matched, is_last_arrival),
            or ``None`` (no collectives: the excess alone decides).

    Returns:
        One row per host seen in a multi-host run of the window, suspects first, then by slow jobs.

    Raises:
        ValueError: ``window_days`` < 1.
    """
    check_window_days(window_days)
    empty = pd.DataFrame(columns=HOST_HEALTH.names)
    if captures is None or ranks is None or not len(captures) or not len(ranks):
        return empty
    hosts = _run_hosts(captures)
    hosts = hosts[hosts["day"].notna()]
    span = window(hosts["day"], window_days)
    if span is None:
        return empty
    start, end = span
    first_day = hosts.groupby(["job_id", "attempt"])["day"].transform("min")
    hosts = hosts[first_day >= start]
    rk = ranks.assign(attempt=ranks["attempt"].astype(int), rank=ranks["rank"].astype(int),
                      step_time_p50_ns=pd.to_numeric(ranks["step_time_p50_ns"], errors="coerce").astype(float))
    if collectives is not None and len(collectives):
        co = collectives[pd.to_numeric(collectives["n_ranks_matched"], errors="coerce").fillna(0) >= 2]
        co = co.assign(attempt=co["attempt"].astype(int), rank=co["rank"].astype(int),
                       is_last_arrival=co["is_last_arrival"].fillna(False).astype(bool))
    else:
        co = pd.DataFrame(columns=["job_id", "attempt", "rank", "match_key", "is_last_arrival"])
    per_run = pd.DataFrame(_per_run(hosts, rk, co))
    if not len(per_run):
        return empty
    rows = []
    for host, g in per_run.groupby("host_name", sort=True):
        slow = g[g["slow"]]
        n_jobs, n_slow = int(g["job_id"].nunique()), int(slow["job_id"].nunique())
        calls, last = int(g["n_calls"].sum()), int(g["n_last"].sum())
        fair = float(g["fair_calls"].sum())
        excess = pd.to_numeric(g["excess_pct"], errors="coerce").dropna()
        excess_ns = pd.to_numeric(g["excess_ns"], errors="coerce").dropna()
        evidence = [{"job": f"{r.job_id}#{r.attempt}", "ranks": list(r.ranks), "matched_calls": int(r.n_calls),
                     "last_arrivals": int(r.n_last), "last_arrival_ratio": None if r.ratio is None else round(r.ratio, 3),
                     "step_excess_pct": None if r.excess_pct is None or r.excess_pct != r.excess_pct
                     else round(float(r.excess_pct), 2),
                     "step_excess_ms": None if r.excess_ns is None or r.excess_ns != r.excess_ns
                     else round(float(r.excess_ns) / 1e6, 3), "slow": bool(r.slow)}
                    for r in g.sort_values(["slow", "job_id", "attempt"], ascending=[False, True, True]).itertuples()]
        rows.append({
            "kind": "host", "host_name": host,
            "device_names": sorted({d for d in g["device_name"] if isinstance(d, str)}),
            "window_start": start.strftime("%Y-%m-%d"), "window_end": end.strftime("%Y-%m-%d"),
            "n_jobs": n_jobs, "n_runs": len(g), "n_ranks": int(sum(len(x) for x in g["ranks"])),
            "n_slow_jobs": n_slow, "slow_jobs": sorted(set(slow["job_id"])),
            "matched_calls": calls, "last_arrivals": last,
            "last_arrival_ratio": (last / fair) if fair else None,
            "step_excess_p50_pct": float(excess.median()) if len(excess) else None,
            "step_excess_p50_ns": int(round(float(excess_ns.median()))) if len(excess_ns) else None,
            "suspect_hardware": bool(n_slow >= SUSPECT_MIN_JOBS and n_slow >= SUSPECT_MIN_SHARE * n_jobs),
            "evidence_json": json.dumps(evidence, sort_keys=True)})
    out = pd.DataFrame(rows)
    out = out.sort_values(["suspect_hardware", "n_slow_jobs", "host_name"], ascending=[False, False, True])
    return out.reset_index(drop=True)[HOST_HEALTH.names].astype({"last_arrival_ratio": "float64",
                                                                  "step_excess_p50_pct": "float64"})

