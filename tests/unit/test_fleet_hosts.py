"""``host_health`` (jobs/fleet/hosts.py) on hand-built tables: a host slow in several jobs is a suspect, a
job slow on every host blames none, single-host runs and undated runs do not count; the same for one device
of a host, and for a link (the hosts a process group spans) whose bus bandwidth is low in several jobs."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from jobs.fleet.hosts import host_health
from schemas import HOST_HEALTH


def _run(job, hosts: dict[int, str], p50: dict[int, float], last: list[int], date="2026-05-10"):
    """captures, ranks and collectives rows of one run: ``hosts`` rank → host, ``p50`` rank → step ns,
    ``last``: the last-arriving rank of each matched call (every rank takes part in every call)."""
    caps = [
        {
            "job_id": job,
            "attempt": 0,
            "rank": r,
            "status": "ingested",
            "host_name": h,
            "device_name": "H100",
            "date": date,
        }
        for r, h in hosts.items()
    ]
    ranks = [{"job_id": job, "attempt": 0, "rank": r, "step_time_p50_ns": p50[r]} for r in hosts]
    colls = [
        {
            "job_id": job,
            "attempt": 0,
            "rank": r,
            "match_key": f"{job}/{i}",
            "n_ranks_matched": len(hosts),
            "is_last_arrival": r == lr,
        }
        for i, lr in enumerate(last)
        for r in hosts
    ]
    return caps, ranks, colls


def _tables(*runs):
    return [pd.DataFrame([row for run in runs for row in run[i]]) for i in range(3)]


def test_suspect_host_and_a_job_slow_everywhere():
    even = {r: 100e6 for r in range(4)}
    runs = [
        _run("a", {0: "bad", 1: "bad", 2: "n1", 3: "n1"}, even, [1] * 9 + [2]),  # bad last in 9 of 10 calls
        _run("b", {0: "n2", 1: "n2", 2: "bad", 3: "bad"}, {0: 100e6, 1: 100e6, 2: 112e6, 3: 110e6}, [2] * 9 + [0]),
        _run("g", {0: "bad", 1: "n5"}, {0: 120e6, 1: 100e6}, []),  # no collectives: the step time decides
        _run("c", {0: "n1", 1: "n1", 2: "n2", 3: "n2"}, {r: 300e6 for r in range(4)}, [0, 1, 2, 3] * 3),  # slow job
        _run("d", {0: "n3", 1: "n3", 2: "n4", 3: "n4"}, even, [3] * 10),  # n4 slow once
        _run("e", {0: "solo", 1: "solo"}, {0: 1e6, 1: 9e6}, [1] * 10),  # one host: no evidence
        _run("f", {0: "bad", 1: "x"}, {0: 9e9, 1: 1e6}, [0] * 10, date="unknown"),  # no date: left out
    ]
    out = host_health(*_tables(*runs))
    assert list(out.columns) == HOST_HEALTH.names
    assert set(out["kind"]) == {"host"}  # ranks without a device index: no device rows, no pg: no link rows
    h = out.set_index("host_name")
    assert set(h.index) == {"bad", "n1", "n2", "n3", "n4", "n5"}
    assert h.loc["bad", "suspect_hardware"] and list(h.loc["bad", "slow_jobs"]) == ["a", "b", "g"]
    assert out.iloc[0]["host_name"] == "bad"  # suspects first
    # bad: a 9 of 10 calls with a fair share of 1/2 → 5 expected; b 9 of 10 → 5 expected; g no calls
    assert h.loc["bad", "last_arrivals"] == 18 and h.loc["bad", "last_arrival_ratio"] == pytest.approx(18 / 10)
    assert h.loc["bad", "step_excess_p50_pct"] == pytest.approx(11.0)  # median of a 0 %, b 11 % (111 vs 100), g 20 %
    # the job slow everywhere (c) blames neither of its hosts; n4 was slow in one job only
    assert not h.loc["n1", "suspect_hardware"] and h.loc["n1", "n_slow_jobs"] == 0
    assert h.loc["n4", "n_slow_jobs"] == 1 and not h.loc["n4", "suspect_hardware"]
    ev = json.loads(h.loc["bad", "evidence_json"])
    assert [e["job"] for e in ev] == ["a#0", "b#0", "g#0"] and ev[0]["last_arrivals"] == 9
    assert ev[0]["last_arrival_p_value"] == pytest.approx(11 / 1024, abs=1e-4)  # P(X ≥ 9), X ~ B(10, 1/2)
    assert ev[1]["step_excess_pct"] == 11.0 and ev[2]["matched_calls"] == 0 and ev[2]["slow"]
    # a host whose ranks wait longer is not slow where collectives say who is last (n2 in b: +0 %, n1 in a)
    assert h.loc["n2", "n_slow_jobs"] == 0 and h.loc["n5", "n_slow_jobs"] == 0
    assert (h.loc["bad", "window_start"], h.loc["bad", "window_end"]) == ("2026-05-04", "2026-05-10")


def test_chance_is_not_slowness():
    """Last in 8 of 10 calls with half the ranks: ratio 1.6, yet p = 0.055 under a fair share: not slow."""
    out = host_health(
        *_tables(_run("a", {0: "x", 1: "x", 2: "y", 3: "y"}, {r: 1e8 for r in range(4)}, [0] * 8 + [2] * 2))
    )
    x = out.set_index("target").loc["x"]
    assert x["last_arrival_ratio"] == pytest.approx(1.6) and x["n_slow_jobs"] == 0
    assert json.loads(x["evidence_json"])[0]["last_arrival_p_value"] == pytest.approx(56 / 1024, abs=1e-4)


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

    runs = [
        _run(j, {0: "bad", 1: "bad", 2: f"n{j}", 3: f"n{j}"}, {r: 1e8 for r in range(4)}, [1] * 10)
        for j in ("a", "b", "c")
    ]
    out = host_health(*_tables(*runs))
    sec = host_section(out)
    assert [p.key for p in sec.plots] == ["host_job_heatmap"] and "Hardware suspects: 1 of 4 host(s)" in sec.intro
    m = host_metrics(out)
    assert m["fleet/hosts/n_suspect_host"] == 1.0 and m["fleet/hosts/n_host"] == 4.0
    assert m["fleet/hosts/bad/last_arrival_ratio"] == pytest.approx(2.0) and m["fleet/hosts/bad/n_slow_jobs"] == 3.0
    assert host_section(None).status == "unavailable" and host_metrics(None) == {}


def test_one_bad_device_of_a_host():
    """Device 3 of host ``h0`` is last in two jobs; the host itself (8 devices) is not blamed; a single-host run
    counts for devices."""

    def run(job, last):
        caps, ranks, colls = _run(
            job, {r: ("h0" if r < 8 else "h1") for r in range(16)}, {r: 1e8 for r in range(16)}, last
        )
        for row in ranks:
            row["device_index"] = row["rank"] % 8
        return caps, ranks, colls

    one_host = _run("solo", {r: "h0" for r in range(8)}, {r: 1e8 for r in range(8)}, [3] * 6)
    for row in one_host[1]:
        row["device_index"] = row["rank"]
    out = host_health(*_tables(run("a", [3] * 8 + [9] * 2), run("b", [3] * 10), one_host))
    d = out[out["kind"] == "device"].set_index("target")
    assert len(d) == 16 and d.loc["h0/3", "device_index"] == 3 and d.loc["h0/3", "host_name"] == "h0"
    assert d.loc["h0/3", "suspect_hardware"] and list(d.loc["h0/3", "slow_jobs"]) == ["a", "b", "solo"]
    assert d.loc["h0/3", "last_arrivals"] == 24 and d.loc["h0/3", "n_ranks"] == 3
    # fair share of one of 16 devices in a and b (10 calls each), one of 8 in solo (6 calls): 10/16·2 + 6/8
    assert d.loc["h0/3", "last_arrival_ratio"] == pytest.approx(24 / (20 / 16 + 6 / 8))
    assert int(d["suspect_hardware"].sum()) == 1 and out.iloc[0]["kind"] == "host"  # hosts first
    h = out[out["kind"] == "host"].set_index("target")
    assert h.loc["h0", "last_arrival_ratio"] == pytest.approx(18 / 10) and h.loc["h0", "n_jobs"] == 2  # solo: 1 host


def _link_run(job, bw: dict[str, float], calls=6):
    """A run on hosts a, b, c, d with 2 ranks each; pg ``pp<i>`` joins one rank of two hosts; ``bw``: pg → GB/s of
    its all_reduce calls (every rank of the pg takes part)."""
    host = {0: "a", 1: "a", 2: "b", 3: "b", 4: "c", 5: "c", 6: "d", 7: "d"}
    groups = {"pp0": (0, 2), "pp1": (1, 3), "pp2": (4, 6), "pp3": (5, 7)}
    caps, ranks, _ = _run(job, host, {r: 1e8 for r in host}, [])
    colls = [
        {
            "job_id": job,
            "attempt": 0,
            "rank": r,
            "match_key": f"{job}/{pg}/{i}",
            "n_ranks_matched": 2,
            "is_last_arrival": r == members[0],
            "pg_name": pg,
            "collective": "all_reduce",
            "busbw_gbps": bw[pg],
        }
        for pg, members in groups.items()
        for i in range(calls)
        for r in members
    ]
    return caps, ranks, colls


def test_a_slow_link_across_jobs():
    fast = {"pp0": 40.0, "pp1": 40.0, "pp2": 40.0, "pp3": 40.0}
    slow = lambda v: {**fast, "pp2": v, "pp3": v}  # noqa: E731 - both groups over c+d
    out = host_health(
        *_tables(
            _link_run("a", slow(10.0)),
            _link_run("b", slow(12.0)),
            _link_run("c", slow(20.0)),
            _link_run("e", slow(10.0), calls=2),  # 4 calls: too few to judge
            _link_run("f", {**fast, "pp0": 35.0}),
        )
    )  # a+b a little slower: within 1.5x
    links = out[out["kind"] == "link"].set_index("target")
    assert sorted(links.index) == ["a+b", "c+d"]  # pp0 and pp1 both span a+b: one link
    cd = links.loc["c+d"]
    assert cd["host_name"] is None or cd["host_name"] != cd["host_name"]
    assert list(cd["hosts"]) == ["c", "d"] and cd["suspect_hardware"] and list(cd["slow_jobs"]) == ["a", "b", "c"]
    ev = {e["job"]: e for e in json.loads(cd["evidence_json"])}
    assert ev["a#0"]["busbw_ratio"] == pytest.approx(10 / 40) and ev["a#0"]["pg_names"] == ["pp2", "pp3"]
    assert ev["c#0"]["busbw_ratio"] == pytest.approx(0.5) and ev["c#0"]["slow"]
    assert not ev["e#0"]["slow"] and ev["e#0"]["matched_calls"] == 4 and not ev["f#0"]["slow"]
    # the median over its 5 runs: 0.25, 0.3, 0.5, 0.25, 40/37.5
    assert cd["busbw_ratio"] == pytest.approx(0.3) and cd["n_jobs"] == 5 and cd["matched_calls"] == 12 * 4 + 4
    assert not links.loc["a+b", "suspect_hardware"] and links.loc["a+b", "n_slow_jobs"] == 0
    assert cd["last_arrival_ratio"] != cd["last_arrival_ratio"]  # null for links


def test_devices_of_one_host_without_collectives():
    """A single-host run with no collectives table: device rows from the step-time excess alone."""
    caps, ranks, _ = _run("j", {0: "h", 1: "h"}, {0: 1e6, 1: 2e6}, [])
    for row in ranks:
        row["device_index"] = row["rank"]
    out = host_health(pd.DataFrame(caps), pd.DataFrame(ranks), None).set_index("target")
    assert list(out.index) == ["h/1", "h/0"] and set(out["kind"]) == {"device"}
    assert out.loc["h/1", "step_excess_p50_pct"] == pytest.approx(100.0) and out.loc["h/1", "n_slow_jobs"] == 1
    assert out.loc["h/0", "matched_calls"] == 0 and out.loc["h/0", "n_slow_jobs"] == 0
