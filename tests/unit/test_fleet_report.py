"""The fleet report's straggler ranking (jobs/publish/report/fleet_tables.py): the straggler_rank finding's
measure (last arrivals at collectives matched across ranks), its named rank first; jobs without matched
collectives by step time; single-rank jobs not at all."""

from __future__ import annotations

import pandas as pd
import pytest

from jobs.publish.report.fleet_tables import straggler_ranks


def test_straggler_ranks_follow_the_finding():
    # job a: 4 ranks, 5 calls; rank 2 last at 3, rank 0 at 2 (the finding names rank 2)
    last = {0: 2, 1: 0, 2: 3, 3: 0}
    calls = [
        dict(job_id="a", attempt=0, rank=r, match_key=f"k{k}", n_ranks_matched=4, is_last_arrival=False)
        for k in range(5)
        for r in range(4)
    ]
    order = [2, 0, 2, 0, 2]  # the last rank of each call
    for c in calls:
        c["is_last_arrival"] = order[int(c["match_key"][1:])] == c["rank"]
    collectives = pd.DataFrame(calls)
    findings = pd.DataFrame([dict(job_id="a", attempt=0, rule="straggler_rank", ranks=[2])])
    ranks = pd.DataFrame(
        [dict(job_id="a", attempt=0, rank=r, step_time_p50_ns=10 * (r + 1)) for r in range(4)]
        + [dict(job_id="b", attempt=0, rank=r, step_time_p50_ns=t) for r, t in ((0, 10), (1, 30))]
        + [dict(job_id="c", attempt=0, rank=0, step_time_p50_ns=5)]
    )
    s = straggler_ranks(collectives, findings, ranks)
    assert list(zip(s["job"], s["rank"])) == [("a#0", 2), ("a#0", 0), ("a#0", 1), ("a#0", 3), ("b#0", 1), ("b#0", 0)]
    a = s[s["job"] == "a#0"].set_index("rank")
    assert {r: a.loc[r, "last"] for r in range(4)} == last and bool(a.loc[2, "named"])
    assert a.loc[2, "last_pct"] == pytest.approx(60.0) and a.loc[2, "fair_pct"] == pytest.approx(25.0)
    assert a.loc[2, "ratio"] == pytest.approx(2.4) and set(a["measure"]) == {"last arrivals"}
    b = s[s["job"] == "b#0"].set_index("rank")
    assert set(b["measure"]) == {"step time"} and b.loc[1, "ratio"] == pytest.approx(30 / 20)
    assert straggler_ranks(None, None, ranks[ranks["job_id"] == "c"]).empty
