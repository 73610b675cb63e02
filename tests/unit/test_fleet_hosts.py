"""``host_health`` (jobs/fleet/hosts.py) on hand-built tables: a host slow in several jobs is a suspect, a
job slow on every host blames none, single-host runs and undated runs do not count."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from jobs.fleet.hosts import host_health
from schemas import HOST_HEALTH


def _run(job, hosts: dict[int, str], p50: dict[int, float], last: list[int], date="2026-05-10"):
    """captures, ranks and collectives rows of one run: ``hosts`` rank → host, ``p50`` rank → step ns,
    ``last``: the last-arriving rank of each matched call (every rank takes part in every call)."""
    caps = [{"job_id": job, "attempt": 0, "rank": r, "status": "ingested", "host_name": h, "device_name": "H100",
             "date": date} for r, h in hosts.items()]
    ranks = [{"job_id": job, "attempt": 0, "rank": r, "step_time_p50_ns": p50[r]} for r in hosts]
    colls = [{"job_id": job, "attempt": 0, "rank": r, "match_key": f"{job}/{i}", "n_ranks_matched": len(hosts),
              "is_last_arrival": r == lr} for i, lr in enumerate(last) for r in hosts]
    return caps, ranks, colls


def _tables(*runs):
    return [pd.DataFrame([row for run in runs for row in run[i]]) for i in range(3)]


def test_suspect_host_and_a_job_slow_everywhere():
    even = {r: 100e6 for r in range(4)}
    runs = [
        _run("a", {0: "bad", 1: "bad", 2: "n1", 3: "n1"}, even, [1] * 9 + [2]),  # bad last in 9 of 10 calls
        _run("b", {0: "n2", 1: "n2", 2: "bad", 3: "bad"}, {0: 100e6, 1: 100e6, 2: 112e6, 3: 110e6}, [2] * 8 + [0] * 2),
        _run("g", {0: "bad", 1: "n5"}, {0: 120e6, 1: 100e6}, []),  # no collectives: the step time decides
        _run("c", {0: "n1", 1: "n1", 2: "n2", 3: "n2"}, {r: 300e6 for r in range(4)}, [0, 1, 2, 3] * 3),  # slow job
        _run("d", {0: "n3", 1: "n3", 2: "n4", 3: "n4"}, even, [3] * 10),  # n4 slow once
        _run("e", {0: "solo", 1: "solo"}, {0: 1e6, 1: 9e6}, [1] * 10),  # one host: no evidence
        _run("f", {0: "bad", 1: "x"}, {0: 9e9, 1: 1e6}, [0] * 10, date="unknown"),  # no date: left out
    ]
    out = host_health(*_tables(*runs))
    assert list(out.columns) == HOST_HEALTH.names
    h = out.set_index("host_name")
    assert set(h.index) == {"bad", "n1", "n2", "n3", "n4", "n5"}
    assert h.loc["bad", "suspect_hardware"] and list(h.loc["bad", "slow_jobs"]) == ["a", "b", "g"]
    assert out.iloc[0]["host_name"] == "bad"  # suspects first
    # bad: a 9 of 10 calls with a fair share of 1/2 → 5 expected; b 8 of 10 → 5 expected; g no calls
    assert h.loc["bad", "last_arrivals"] == 17 and h.loc["bad", "last_arrival_ratio"] == pytest.approx(17 / 10)
    assert h.loc["bad", "step_excess_p50_pct"] == pytest.approx(11.0)  # median of a 0 %, b 11 % (111 vs 100), g 20 %
    # the job slow everywhere (c) blames neither of its hosts; n4 was slow in one job only
    assert not h.loc["n1", "suspect_hardware"] and h.loc["n1", "n_slow_jobs"] == 0
    assert h.loc["n4", "n_slow_jobs"] == 1 and not h.loc["n4", "suspect_hardware"]
    ev = json.loads(h.loc["bad", "evidence_json"])
    assert [e["job"] for e in ev] == ["a#0", "b#0", "g#0"] and ev[0]["last_arrivals"] == 9
    assert ev[1]["step_excess_pct"] == 11.0 and ev[2]["matched_calls"] == 0 and ev[2]["slow"]
    # a host whose ranks wait longer is not slow where collectives say who is last (n2 in b: +0 %, n1 in a)
    assert h.loc["n2", "n_slow_jobs"] == 0 and h.loc["n5", "n_slow_jobs"] == 0
    assert (h.loc["bad", "window_start"], h.loc["bad", "window_end"]) == ("2026-05-04", "2026-05-10")


def test_window_and_empty():
    old = _run("old", {0: "bad", 1: "n1"}, {0: 200e6, 1: 100e6}, [0] * 10, date="2026-04-01")
    new = _run("new", {0: "bad", 1: "n1"}, {0: 200e6, 1: 100e6}, [0] * 10, date="2026-05-10")
    h = host_health(*_tables(old, new)).set_index("host_name")
    assert h.loc["bad", "n_jobs"] == 1 and not h.loc["bad", "suspect_hardware"]  # "old" is outside 7 days
    wide = host_health(*_tables(old, new), window_days=60).set_index("host_name")
    assert wide.loc["bad", "n_slow_jobs"] == 2 and wide.loc["bad", "suspect_hardware"]
    assert host_health(None, None, None).empty
    with pytest.raises(ValueError, match="window_days"):
        host_health(*_tables(new), window_days=0)


def test_report_section_and_fleet_run_metrics():
    from jobs.publish.report.fleet_tables import host_metrics, host_section

    runs = [_run(j, {0: "bad", 1: "bad", 2: f"n{j}", 3: f"n{j}"}, {r: 1e8 for r in range(4)}, [1] * 10)
            for j in ("a", "b", "c")]
    out = host_health(*_tables(*runs))
    sec = host_section(out)
    assert [p.key for p in sec.plots] == ["host_job_heatmap"] and "Hardware suspects: 1 of 4" in sec.intro
    m = host_metrics(out)
    assert m["fleet/hosts/n_suspect"] == 1.0 and m["fleet/hosts/n_hosts"] == 4.0
    assert m["fleet/hosts/bad/last_arrival_ratio"] == pytest.approx(2.0) and m["fleet/hosts/bad/n_slow_jobs"] == 3.0
    assert host_section(None).status == "unavailable" and host_metrics(None) == {}
