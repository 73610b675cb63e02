"""Host, device and link health across jobs: the ``host_health`` table (issue 15).

One trace shows which rank of one job is slow; only the fleet shows whether the same *host*, *GPU* or
*link* is slow in job after job (bad hardware, a throttling GPU, a flaky NIC or cable) or whether a job is
slow everywhere (its own code). Over a window of capture dates (default the last 7 days with captures),
one row per target (``kind``):

* ``host`` (``captures.host_name``), from the runs (job_id, attempt) whose ranks ran on two or more hosts;
* ``device``: one accelerator of a host (``ranks.device_index``), from the runs with two or more devices;
* ``link``: the hosts a process group spans (``collectives.pg_name`` over ≥ 2 hosts), from the runs with two
  or more such groups running the same collective.

Hosts and devices are measured by:

* **last arrivals**: over the run's collectives matched on ≥ 2 ranks (``collectives.n_ranks_matched``),
  the share in which the last rank to arrive (``is_last_arrival``) ran on the target, against its fair
  share (its ranks ÷ the run's ranks): ``last_arrival_ratio`` (1 = fair; the straggler definition of
  HTA ``get_potential_stragglers`` and of the ``straggler_rank`` finding, per host);
* **step-time excess**: the median of its ranks' median step time (``ranks.step_time_p50_ns``) over the
  median of the other ranks of the run, in %.

A host or device is *slow in a run* when its last-arrival ratio is ≥ :data:`SLOW_LAST_ARRIVAL_RATIO` over
≥ :data:`MIN_MATCHED_CALLS` matched calls and chance does not explain it: a one-sided binomial test of its last
arrivals against its fair share gives p < :data:`SLOW_P_VALUE` (one device of 8 last in 2 of 8 calls has ratio
2 and p = 0.26: not slow); in a run with fewer matched calls, when its excess is ≥ :data:`SLOW_EXCESS_PCT`. Where ranks synchronize at collectives the excess misleads: the ranks that wait
for a straggler end their steps later, and the straggler, which never waits, has the shortest step (the
corpus' 8-rank DLRM job: the straggler's host is 8.5 % *faster*); it stays in the evidence.

A link is measured by its **bus bandwidth** (``collectives.busbw_gbps``, net of waiting: NCCL-tests
definitions): per collective, the median over its groups' calls ÷ the median over the calls of the run's
other multi-host groups (``busbw_ratio``; 1 = as fast as the others). It is *slow in a run* when the ratio
is ≤ 1 / :data:`SLOW_LINK_FACTOR` over ≥ :data:`MIN_MATCHED_CALLS` calls.

A target is ``suspect_hardware`` when it is slow in ≥ :data:`SUSPECT_MIN_JOBS` different jobs and in at
least :data:`SUSPECT_MIN_SHARE` of the jobs it ran in. Every measure compares a target with the others of
the same run, so a job slow everywhere blames none of them. Runs whose capture date is unknown are left out.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from jobs.common.binomial import binomial_tail
from jobs.fleet.window import WINDOW_DAYS, capture_days, check_window_days, window
from schemas import HEALTH_KINDS, HOST_HEALTH

MIN_MATCHED_CALLS = 5
SLOW_LAST_ARRIVAL_RATIO = 1.5
SLOW_P_VALUE = 0.05
SLOW_EXCESS_PCT = 5.0
SLOW_LINK_FACTOR = 1.5
SUSPECT_MIN_JOBS = 2
SUSPECT_MIN_SHARE = 0.5


def _run_hosts(captures: pd.DataFrame, ranks: pd.DataFrame) -> pd.DataFrame:
    """(job_id, attempt, rank) → host_name, device_name, device_index, day of the ingested captures that name a
    host (``device_index`` from ``ranks``, null where it has none)."""
    c = captures[(captures["status"] == "ingested") & captures["host_name"].notna()]
    c = c.assign(attempt=c["attempt"].astype(int), rank=c["rank"].astype(int), day=capture_days(c["date"]))
    c = c.sort_values(["job_id", "attempt", "rank", "host_name"], kind="stable")  # the same rows from Spark or pyarrow
    c = c[["job_id", "attempt", "rank", "host_name", "device_name", "day"]].drop_duplicates(
        ["job_id", "attempt", "rank"]
    )
    dev = ranks[["job_id", "attempt", "rank", "device_index"]].drop_duplicates(["job_id", "attempt", "rank"])
    return c.merge(dev, on=["job_id", "attempt", "rank"], how="left")


def _first(values) -> str | None:
    return next((v for v in values if isinstance(v, str)), None)


def _rank_targets(h: pd.DataFrame):
    """``(kind, target, host_name, device_index, ranks, device_name)`` of one run's hosts (≥ 2 hosts) and
    devices (≥ 2 devices)."""
    if h["host_name"].nunique() >= 2:
        for host, g in h.groupby("host_name", sort=True):
            yield "host", host, host, None, set(g["rank"]), _first(g["device_name"])
    d = h[h["device_index"].notna()]
    if len(d.drop_duplicates(["host_name", "device_index"])) >= 2:
        for (host, idx), g in d.groupby(["host_name", "device_index"], sort=True):
            yield "device", f"{host}/{int(idx)}", host, int(idx), set(g["rank"]), _first(g["device_name"])


def _rank_runs(hosts: pd.DataFrame, ranks: pd.DataFrame, colls: pd.DataFrame) -> list[dict]:
    """One dict per (run, host) and (run, device): ranks, calls, last arrivals, ratio, excess, slow."""
    out = []
    by_run = ["job_id", "attempt"]
    ranks_of, colls_of = (dict(list(d.groupby(by_run, sort=False))) for d in (ranks, colls))
    for (job, attempt), h in hosts.groupby(by_run, sort=True):
        r = ranks_of.get((job, attempt), ranks.iloc[0:0])
        r_rank, r_p50 = r["rank"].to_numpy(), r["step_time_p50_ns"].to_numpy(dtype="float64")
        c = colls_of.get((job, attempt), colls.iloc[0:0])
        last = (
            c[c["is_last_arrival"].astype(bool).to_numpy()]
            .sort_values(["match_key", "rank"], kind="stable")
            .drop_duplicates("match_key")
            .set_index("match_key")["rank"]
        )
        n_calls = int(c["match_key"].nunique())
        n_ranks = len(h)
        for kind, target, host, idx, mine, device_name in _rank_targets(h):
            is_mine = np.isin(r_rank, list(mine))
            own, others = r_p50[is_mine], r_p50[~is_mine]
            own, others = own[~np.isnan(own)], others[~np.isnan(others)]
            excess = excess_ns = None
            if len(own) and len(others) and float(np.median(others)) > 0:
                excess_ns = float(np.median(own)) - float(np.median(others))
                excess = 100.0 * excess_ns / float(np.median(others))
            n_last = int(last.isin(mine).sum())
            ratio = (n_last / n_calls) / (len(mine) / n_ranks) if n_calls else None
            p_value = binomial_tail(n_last, n_calls, len(mine) / n_ranks) if n_calls else None
            if n_calls >= MIN_MATCHED_CALLS:  # collectives say who the others wait for
                slow = ratio is not None and ratio >= SLOW_LAST_ARRIVAL_RATIO and p_value < SLOW_P_VALUE
            else:  # no collectives to go by: the step time itself
                slow = excess is not None and excess >= SLOW_EXCESS_PCT
            out.append(
                {
                    "kind": kind,
                    "target": target,
                    "host_name": host,
                    "device_index": idx,
                    "hosts": [host],
                    "job_id": job,
                    "attempt": int(attempt),
                    "ranks": sorted(int(x) for x in mine),
                    "device_name": device_name,
                    "n_calls": n_calls,
                    "n_last": n_last,
                    "fair_calls": len(mine) / n_ranks * n_calls,
                    "ratio": ratio,
                    "p_value": p_value,
                    "excess_pct": excess,
                    "excess_ns": excess_ns,
                    "busbw_ratio": None,
                    "slow": slow,
                }
            )
    return out


def _link_runs(hosts: pd.DataFrame, colls: pd.DataFrame) -> list[dict]:
    """One dict per (run, link): the run's process groups over ≥ 2 hosts, grouped by the hosts they span, their
    bus bandwidth against the run's other such groups of the same collective."""
    if not len(colls) or not {"pg_name", "collective", "busbw_gbps"} <= set(colls.columns):
        return []
    host_of = hosts.set_index(["job_id", "attempt", "rank"])["host_name"]
    c = colls[colls["pg_name"].notna()].copy()
    c["host_name"] = [host_of.get(k) for k in zip(c["job_id"], c["attempt"], c["rank"])]
    c = c[c["host_name"].notna()]
    out = []
    for (job, attempt), run in c.groupby(["job_id", "attempt"], sort=True):
        spans = run.groupby("pg_name")["host_name"].agg(lambda s: tuple(sorted(set(s))))
        spans = spans[spans.map(len) >= 2]
        if len(spans) < 2:
            continue
        run = run[run["pg_name"].isin(spans.index)].assign(
            link=lambda d, spans=spans: d["pg_name"].map(spans).map("+".join)
        )
        bw = pd.to_numeric(run["busbw_gbps"], errors="coerce")
        run = run.assign(busbw=bw.where(bw > 0))
        for link, g in run.groupby("link", sort=True):
            ratios, own_bw, other_bw = [], [], []
            for coll, gc in g.groupby(g["collective"].fillna("?")):
                rest = run[(run["link"] != link) & (run["collective"].fillna("?") == coll)]["busbw"].dropna()
                mine = gc["busbw"].dropna()
                if len(mine) and len(rest) and float(rest.median()) > 0:
                    own_bw.append(float(mine.median()))
                    other_bw.append(float(rest.median()))
                    ratios.append(own_bw[-1] / other_bw[-1])
            n_calls = int(g["match_key"].nunique())
            ratio = float(np.median(ratios)) if ratios else None
            slow = ratio is not None and n_calls >= MIN_MATCHED_CALLS and ratio <= 1.0 / SLOW_LINK_FACTOR
            out.append(
                {
                    "kind": "link",
                    "target": link,
                    "host_name": None,
                    "device_index": None,
                    "hosts": list(spans[g["pg_name"].iloc[0]]),
                    "job_id": job,
                    "attempt": int(attempt),
                    "ranks": sorted(int(x) for x in set(g["rank"])),
                    "device_name": None,
                    "pg_names": sorted(set(g["pg_name"])),
                    "n_calls": n_calls,
                    "n_last": None,
                    "fair_calls": None,
                    "ratio": None,
                    "p_value": None,
                    "excess_pct": None,
                    "excess_ns": None,
                    "busbw_ratio": ratio,
                    "busbw_gbps": float(np.median(own_bw)) if own_bw else None,
                    "others_busbw_gbps": float(np.median(other_bw)) if other_bw else None,
                    "slow": slow,
                }
            )
    return out


def _r(v, digits: int):
    return None if v is None or v != v else round(float(v), digits)


def _evidence(r) -> dict:
    e = {
        "job": f"{r.job_id}#{r.attempt}",
        "ranks": list(r.ranks),
        "matched_calls": int(r.n_calls),
        "slow": bool(r.slow),
    }
    if r.kind == "link":
        e.update(
            pg_names=list(r.pg_names),
            busbw_ratio=_r(r.busbw_ratio, 3),
            busbw_gbps=_r(r.busbw_gbps, 3),
            others_busbw_gbps=_r(r.others_busbw_gbps, 3),
        )
    else:
        e.update(
            last_arrivals=int(r.n_last),
            last_arrival_ratio=_r(r.ratio, 3),
            last_arrival_p_value=_r(r.p_value, 4),
            step_excess_pct=_r(r.excess_pct, 2),
            step_excess_ms=None if _r(r.excess_ns, 0) is None else round(float(r.excess_ns) / 1e6, 3),
        )
    return e


def _median(values):
    """The median of the known numbers of ``values`` (None and NaN left out); ``None`` when none is known."""
    v = np.array([np.nan if x is None else x for x in values], dtype="float64")
    v = v[~np.isnan(v)]
    return float(np.median(v)) if len(v) else None


def host_health(
    captures: pd.DataFrame | None,
    ranks: pd.DataFrame | None,
    collectives: pd.DataFrame | None,
    window_days: int = WINDOW_DAYS,
) -> pd.DataFrame:
    """The ``host_health`` table (columns of :data:`schemas.HOST_HEALTH`): per host, device and link over the
    ``window_days`` capture dates ending at the newest one (module docstring for the definitions).

    Args:
        captures: ``captures`` (job_id, attempt, rank, status, host_name, device_name, date);
        ranks: ``ranks`` (job_id, attempt, rank, step_time_p50_ns, and ``device_index`` where present);
        collectives: ``collectives`` (job_id, attempt, rank, match_key, n_ranks_matched, is_last_arrival; for
            links also pg_name, collective, busbw_gbps), or ``None`` (no collectives: the excess alone decides).

    Returns:
        One row per target seen in the window: hosts, then devices, then links; suspects first in each.

    Raises:
        ValueError: ``window_days`` < 1.
    """
    check_window_days(window_days)
    empty = pd.DataFrame(columns=HOST_HEALTH.names)
    if captures is None or ranks is None or not len(captures) or not len(ranks):
        return empty
    rk = ranks.assign(
        attempt=ranks["attempt"].astype(int),
        rank=ranks["rank"].astype(int),
        step_time_p50_ns=pd.to_numeric(ranks["step_time_p50_ns"], errors="coerce").astype(float),
        device_index=pd.to_numeric(ranks["device_index"], errors="coerce") if "device_index" in ranks else np.nan,
    )
    hosts = _run_hosts(captures, rk)
    hosts = hosts[hosts["day"].notna()]
    span = window(hosts["day"], window_days)
    if span is None:
        return empty
    start, end = span
    first_day = hosts.groupby(["job_id", "attempt"])["day"].transform("min")
    hosts = hosts[first_day >= start]
    if collectives is not None and len(collectives):
        co = collectives[pd.to_numeric(collectives["n_ranks_matched"], errors="coerce").fillna(0) >= 2]
        co = co.assign(
            attempt=co["attempt"].astype(int),
            rank=co["rank"].astype(int),
            is_last_arrival=co["is_last_arrival"].fillna(False).astype(bool),
        )
    else:
        co = pd.DataFrame(columns=["job_id", "attempt", "rank", "match_key", "is_last_arrival"])
    per_run = pd.DataFrame(_rank_runs(hosts, rk, co) + _link_runs(hosts, co))
    if not len(per_run):
        return empty
    # one pass over the (run, target) rows, each target's rows contiguous: slow runs first, then by job and attempt
    per_run["_i"] = np.arange(len(per_run))
    per_run = per_run.sort_values(
        ["kind", "target", "slow", "job_id", "attempt"], ascending=[True, True, False, True, True], kind="stable"
    ).reset_index(drop=True)
    evidence = [_evidence(r) for r in per_run.itertuples()]
    col = {c: per_run[c].to_numpy() for c in per_run.columns}
    fair_calls = pd.to_numeric(per_run["fair_calls"], errors="coerce").to_numpy(dtype="float64")
    rows = []
    for (kind, target), idx in sorted(per_run.groupby(["kind", "target"], sort=True).indices.items()):
        first = idx[np.argmin(col["_i"][idx])]  # the target's first row as the runs came
        slow = col["slow"][idx].astype(bool)
        jobs = col["job_id"][idx]
        n_jobs, slow_jobs = len(set(jobs)), sorted(set(jobs[slow]))
        n_slow = len(slow_jobs)
        fair = np.nansum(fair_calls[idx])
        last = None if kind == "link" else int(col["n_last"][idx].sum())
        excess_ns = _median(col["excess_ns"][idx])
        rows.append(
            {
                "kind": kind,
                "target": target,
                "host_name": col["host_name"][first],
                "device_index": col["device_index"][first],
                "hosts": list(col["hosts"][first]),
                "device_names": sorted({d for d in col["device_name"][idx] if isinstance(d, str)}),
                "window_start": start.strftime("%Y-%m-%d"),
                "window_end": end.strftime("%Y-%m-%d"),
                "window_days": int(window_days),
                "n_jobs": n_jobs,
                "n_runs": len(idx),
                "n_ranks": int(sum(len(x) for x in col["ranks"][idx])),
                "n_slow_jobs": n_slow,
                "slow_jobs": slow_jobs,
                "matched_calls": int(col["n_calls"][idx].sum()),
                "last_arrivals": last,
                "last_arrival_ratio": (last / fair) if last is not None and fair else None,
                "step_excess_p50_pct": _median(col["excess_pct"][idx]),
                "step_excess_p50_ns": None if excess_ns is None else int(round(excess_ns)),
                "busbw_ratio": _median(col["busbw_ratio"][idx]),
                "suspect_hardware": bool(n_slow >= SUSPECT_MIN_JOBS and n_slow >= SUSPECT_MIN_SHARE * n_jobs),
                "evidence_json": json.dumps([evidence[i] for i in idx], sort_keys=True),
            }
        )
    out = pd.DataFrame(rows)
    out["_kind"] = out["kind"].map(HEALTH_KINDS.index)
    out = out.sort_values(["_kind", "suspect_hardware", "n_slow_jobs", "target"], ascending=[True, False, False, True])
    out = out.reset_index(drop=True)[HOST_HEALTH.names]
    return out.astype(
        {
            "last_arrival_ratio": "float64",
            "step_excess_p50_pct": "float64",
            "busbw_ratio": "float64",
            "device_index": "Int32",
            "last_arrivals": "Int64",
            "step_excess_p50_ns": "Int64",
        }
    )
