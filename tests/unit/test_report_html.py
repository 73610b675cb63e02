"""HTML reports (jobs/publish/report): escaping of names from traces, self-containment, missing tables.

Base tables are the real normalize + analyze output of HTA's ``trace_filter`` traces (2 ranks, one
job); the tables other stages produce (kernels, collectives, critical_path, findings) are written
here with hostile names, since a name in a trace is arbitrary text.
"""

from __future__ import annotations

import re

import pandas as pd
import pytest

HOSTILE = "<script>alert(1)</script>"
HOSTILE_ATTR = '"><img src=x onerror=alert(2)>'
MATH = "$\\frac{1}{0}$ kernel_with_dollar$"


def coverage_frame(statuses: dict, reason: str | None = None, job_id: str = "j") -> pd.DataFrame:
    """``rule_coverage`` rows (schemas/tables.py RULE_COVERAGE) of one run: ``{rule: status}``, one reason for
    every rule that did not run on the ProfilerSteps."""
    return pd.DataFrame(
        [
            {
                "date": "2023-04-28",
                "job_id": job_id,
                "attempt": 0,
                "rule": rule,
                "status": st,
                "reason": None if st == "ran" else reason,
                "n_ranks": 0 if st in ("not_run", "not_applicable") else 2,
                "n_windows": 0 if st in ("not_run", "not_applicable") else 4,
                "n_findings": 0,
            }
            for rule, st in statuses.items()
        ]
    )


@pytest.fixture(scope="module")
def job_tables(trace_filter_tables):
    return {k: v.copy() for k, v in trace_filter_tables.items()}


def _hostile_tables(base: dict) -> dict:
    t = {k: v.copy() for k, v in base.items() if k != "events"}
    ident = dict(date="2023-04-28", job_id="trace_filter", attempt=0)
    t["kernels"] = pd.DataFrame(
        [
            {
                **ident,
                "rank": 0,
                "capture_id": "c0",
                "step": 551,
                "name": HOSTILE,
                "kernel_type": "COMPUTATION",
                "n": 3,
                "total_ns": 9_000_000,
                "mean_ns": 3e6,
            },
            {
                **ident,
                "rank": 1,
                "capture_id": "c1",
                "step": 551,
                "name": HOSTILE_ATTR,
                "kernel_type": "COMMUNICATION",
                "n": 2,
                "total_ns": 4_000_000,
                "mean_ns": 2e6,
            },
            {
                **ident,
                "rank": 1,
                "capture_id": "c1",
                "step": 552,
                "name": MATH,
                "kernel_type": "OTHER",
                "n": 1,
                "total_ns": 1_000_000,
                "mean_ns": 1e6,
            },
        ]
    )
    rows = []
    for call in range(4):
        for rank in (0, 1):
            wait = 1000 * (call + 1) if rank == 0 else 0
            rows.append(
                {
                    **ident,
                    "rank": rank,
                    "capture_id": f"c{rank}",
                    "step": 551,
                    "event_id": 10 * call + rank,
                    "pg_name": HOSTILE,
                    "collective": "allreduce",
                    "call_index": call,
                    "match_key": f"{HOSTILE}/{call}",
                    "aligned_start_ns": 1000 * call - wait,
                    "wait_ns": wait,
                    "skew_ns": 1000 * (call + 1),
                    "is_last_arrival": rank == 1,
                    "msg_bytes": 1 << 20,
                    "busbw_gbps": 10.0,
                }
            )
    t["collectives"] = pd.DataFrame(rows)
    t["critical_path"] = pd.DataFrame(
        [
            {
                **ident,
                "step": 551,
                "scope": "job",
                "path_rank": -1,
                "segment": i,
                "rank": i % 2,
                "name": HOSTILE,
                "start_ns": 0,
                "end_ns": 10,
                "dur_ns": d,
                "bound_by": b,
                "path_length_ns": 6_000_000,
            }
            for i, (d, b) in enumerate([(4_000_000, "compute"), (2_000_000, "collective_wait")])
        ]
    )
    t["op_efficiency"] = pd.DataFrame(
        [
            {
                **ident,
                "rank": 0,
                "capture_id": "c0",
                "device_name": HOSTILE,
                "op_name": HOSTILE,
                "kind": "gemm",
                "shape_sig": HOSTILE_ATTR,
                "dtype": MATH,
                "n_calls": 2,
                "kernel_time_ns": 1_000_000,
                "flops_per_call": 1e9,
                "bytes_per_call": 1e6,
                "peak_tflops": 989.4,
                "peak_gbps": 3350.0,
                "bound": "compute",
                "peak_source": HOSTILE_ATTR,
            }
        ]
    )
    t["comm_sites"] = pd.DataFrame(
        [
            {
                **ident,
                "step": step,
                "site": f"{HOSTILE}|allreduce|1048576|#0",
                "pg_name": HOSTILE,
                "collective": "allreduce",
                "msg_bytes": 1 << 20,
                "position": 0,
                "n_ranks": 2,
                "exposed_max_ns": 2_000_000,
                "wait_max_ns": 1_000_000,
                "last_arrival_rank": 1,
                "exposed_cut_ns": 1_500_000,
                "preceding_compute_ns": 400_000,
                "path_length_ns": 10_000_000,
                "what_if_path_ns": 8_500_000,
                "saving_ns": 1_500_000,
                "is_p2p": False,
                "exposed_steps": 2,
                "exposed_steps_pct": 100.0,
            }
            for step in (551, 552)
        ]
    )
    t["utilization_windows"] = pd.DataFrame(
        [
            {
                **ident,
                "rank": rank,
                "capture_id": f"c{rank}",
                "step": 551,
                "window_id": 0,
                "engine": "device",
                "dur_ns": 2_000_000,
                "offset_ns": 1_000_000,
                "step_time_ns": 10_000_000,
                "step_pct": 20.0,
                "cause": "sync",
                "cause_pct": 100.0,
                "cause_op": HOSTILE,
                "cause_stack": HOSTILE_ATTR,
                "recurring_steps": 1,
                "recurs_pct": 100.0,
            }
            for rank in (0, 1)
        ]
    )
    t["findings"] = pd.DataFrame(
        [
            {
                **ident,
                "finding_id": "straggler_rank/rank=1",
                "rule": "straggler_rank",
                "rank_order": 1,
                "title": HOSTILE,
                "metric": "wait_ms",
                "value": 3.5,
                "est_time_lost_per_step_ns": 2_000_000,
                "confidence": 0.8,
                "ranks": [1],
                "steps": [551],
                "evidence_json": '{"note": "' + HOSTILE.replace('"', "") + '"}',
                "recommendation": HOSTILE_ATTR,
            }
        ]
    )
    t["captures"].loc[0, "uri"] = "/landing/" + HOSTILE + ".json"
    t["rule_coverage"] = coverage_frame({"host_bound_launch": "ran", "straggler_rank": "ran"}, job_id="trace_filter")
    t["regressions"] = _regressions_of("trace_filter")
    return t


def _regressions_of(job_id: str) -> pd.DataFrame:
    """``regressions`` rows of ``job_id`` against one earlier run ``earlier`` of its job name: 10 steps of ≈ 10 ms,
    then 10 of ≈ 20 ms (a regression)."""
    from jobs.fleet.regressions import find_regressions

    rows = [
        {
            "job_name": "nightly",
            "job_id": j,
            "attempt": 0,
            "run_key": key,
            "run_date": key,
            "step": i,
            "step_time_ns": int(ms * (1 + 0.002 * i) * 1e6),
            "rank_step_time_ns": int(ms * 1e6),
            "kernel_time_ns": int(ms * 1e6),
            "idle_time_ns": int(ms * 1e5),
            "exposed_comm_ns": 0,
        }
        for j, key, ms in (("earlier", "2023-04-27", 10.0), (job_id, "2023-04-28", 20.0))
        for i in range(10)
    ]
    r = find_regressions(pd.DataFrame(rows))
    return r[r["job_id"] == job_id].reset_index(drop=True)


def _scripts(html: str) -> list[str]:
    return re.findall(r"<script\b[^>]*>(.*?)</script>", html, flags=re.S | re.I)


def _assert_safe(html: str) -> None:
    from jobs.publish.report.html import CHECK_SCRIPT, SCRIPT_HASH

    assert HOSTILE not in html and HOSTILE_ATTR not in html
    assert _scripts(html) == [CHECK_SCRIPT]  # our own marker script only
    assert f"script-src '{SCRIPT_HASH}'" in html
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", html, flags=re.I)  # nothing external
    assert "<link" not in html


def test_job_report_escapes_every_name_from_a_trace(job_tables):
    from jobs.publish.report.html import render_job_report

    html = render_job_report(_hostile_tables(job_tables))
    _assert_safe(html)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # shown as text
    assert "&#34;&gt;&lt;img src=x onerror=alert(2)&gt;" in html
    for plot in ("step_breakdown", "idle_breakdown", "idle-windows", "top_kernels", "collective_wait", "critical_path"):
        assert f'data-plot="{plot}"' in html, plot
    assert 'data-unavailable=' not in html.split('id="data-quality"')[0]  # every analysis section has data
    # the recurring call site, its mean exposed time and saving per step
    assert re.search(
        r'id="comm-sites".*?allreduce\|1048576\|#0</td><td[^>]*>2</td><td[^>]*>100.0</td><td[^>]*>2.00<', html, re.S
    )
    # the run against its earlier run, in words: change, interval, verdict
    assert re.search(
        r'<section id="regression" class="status-regression".*?job step p50 10\.\d+ ms → 20\.\d+ ms, \+\d+ % '
        r"\[\+\d+ %, \+\d+ %\]: regression, adjusted p",
        html,
        flags=re.S,
    )


def test_job_report_with_missing_tables_says_not_available(job_tables):
    from jobs.publish.report.html import render_job_report

    html = render_job_report({})
    for key in ("step-time", "idle-time", "top-kernels", "collectives", "critical-path", "findings", "captures"):
        assert f'data-unavailable="{key}"' in html, key
    partial = render_job_report(
        {
            "captures": job_tables["captures"],
            "steps": job_tables["steps"],
            "ranks": job_tables["ranks"],
            "kernels": pd.DataFrame(),
        }
    )
    assert 'data-plot="step_breakdown"' in partial and 'data-unavailable="collectives"' in partial
    assert 'data-unavailable="top-kernels"' in partial
    # with events and no kernels table, top kernels come from the events
    from_events = render_job_report({"ranks": job_tables["ranks"], "events": job_tables["events"]})
    assert 'data-plot="top_kernels"' in from_events and "Computed from `events`" in from_events


def test_job_report_numbers_match_the_tables(job_tables):
    from jobs.publish.report.html import render_job_report

    html = render_job_report(job_tables)
    steps = job_tables["steps"]
    for _rank, s in steps.groupby("rank"):
        assert f"{s['step_time_ns'].median() / 1e6:,.2f}" in html
    assert f"{len(job_tables['captures'])} capture(s), 0 quarantined" in html


def test_fleet_report_trends_and_worst_offenders(job_tables):
    """Without the fleet tables the report computes fleet_stats from the given tables (the same function): the
    cards, trends and worst offenders show the job's run_summary numbers; a job without ProfilerStep is judged on
    its whole trace (GPU idle %) and named as left out of the step-time tables."""
    from jobs.fleet.stats import run_summary
    from jobs.publish.report.fleet_tables import fleet_daily, fleet_metrics, fleet_stats_of
    from jobs.publish.report.html import render_fleet_report

    ranks = pd.concat([job_tables["ranks"], job_tables["ranks"].assign(job_id=HOSTILE, date="2024-01-02")])
    caps = pd.concat([job_tables["captures"], job_tables["captures"].assign(job_id=HOSTILE, date="2024-01-02")])
    steps = job_tables["steps"]  # the HOSTILE job has no ProfilerStep: whole-trace windows
    html = render_fleet_report(ranks, caps, steps)
    _assert_safe(html)
    assert 'data-plot="fleet_trends"' in html and 'data-table="worst-idle"' in html
    stats = fleet_stats_of(None, ranks, caps, steps)
    daily = fleet_daily(stats, caps)
    assert list(daily["date"]) == sorted(daily["date"]) and list(daily["n_jobs"]) == [1, 1]
    m = fleet_metrics(stats, caps)
    assert m["fleet/n_jobs"] == 2 and m["fleet/n_ranks"] == 4
    rs = run_summary(steps, ranks, caps).set_index("job_id")
    assert m["fleet/idle_pct_median"] == pytest.approx(rs["idle_pct"].median())
    # the step-time card is the one job with ProfilerSteps: its job step time p50 (slowest rank per step)
    assert m["fleet/step_time_p50_ms_median"] == pytest.approx(rs.loc["trace_filter", "step_time_p50_ns"] / 1e6)
    assert pd.isna(rs.loc[HOSTILE, "step_time_p50_ns"]) and rs.loc[HOSTILE, "idle_pct"] == pytest.approx(
        ranks.loc[ranks["job_id"] == HOSTILE, "idle_time_ns"].sum()
        / ranks.loc[ranks["job_id"] == HOSTILE, "kernel_time_ns"].sum()
        * 100
    )
    assert "job step time p50, ms: median job" in html and "fleet/n_jobs" not in html  # labels in words
    assert f"{rs.loc['trace_filter', 'step_time_p50_ns'] / 1e6:,.2f}" in html
    assert "no ProfilerStep (judged on its whole trace): job step time not defined" in html
    empty = render_fleet_report(None, None)
    assert 'data-unavailable="trends"' in empty


def test_job_report_opens_with_the_verdict(job_tables):
    from jobs.publish.report.html import render_job_report

    findings = pd.DataFrame(
        [
            {
                "job_id": "j",
                "attempt": 0,
                "rule": "straggler_rank",
                "rank_order": 1,
                "title": "Rank 1 arrives last",
                "est_time_lost_per_step_ns": 2_500_000,
                "recommendation": "Find why rank 1 is late",
                "ranks": [1],
            },
            {
                "job_id": "j",
                "attempt": 0,
                "rule": "blocking_sync",
                "rank_order": 2,
                "title": "blocking syncs",
                "est_time_lost_per_step_ns": 500_000,
                "recommendation": "remove them",
                "ranks": [0, 1],
            },
        ]
    )
    html = render_job_report({**job_tables, "findings": findings})
    body = html[html.index("<body") :]
    assert body.index('id="verdict"') < body.index('id="findings"') < body.index('id="step-time"')
    assert "Top bottleneck: Rank 1 arrives last. It costs about 2.50 ms per step" in html
    assert "What to do: Find why rank 1 is late" in html and "blocking syncs" in html
    assert "job step time p50, ms (slowest rank per step)" in html and "step_time_p50_ms" not in body
    assert ">all<" in html  # the finding on both ranks reads "all"
    judged = coverage_frame({"host_bound_launch": "ran", "straggler_rank": "ran"})
    empty = render_job_report({**{k: v for k, v in job_tables.items() if k != "findings"}, "rule_coverage": judged})
    assert "No bottleneck found" in empty


def _ranks_table(html: str) -> str:
    start = html.index('data-table="ranks"')
    return html[html.rindex("<", 0, start) : html.index("</table>", start)]


def test_cpu_only_job_report_leaves_out_the_gpu_columns_and_says_why(CORPUS, job_tables):
    """A CPU-only rank (HTA's ``cpu_only`` example) has no GPU temporal breakdown: no column of dashes."""
    from jobs.analyze.hta.breakdown import analyze_rank
    from jobs.landing.discover import CaptureFile
    from jobs.normalize.job import normalize_file
    from jobs.publish.report.html import render_job_report

    p = next((CORPUS / "torch" / "HolisticTraceAnalysis" / "cpu_only").glob("*.json.gz"))
    task = CaptureFile(uri=str(p), capture_id="cpu", job_id="cpu_only", size_bytes=p.stat().st_size).to_dict()
    _, ev = normalize_file(task, p.read_bytes())
    steps, ranks = analyze_rank(ev)
    page = render_job_report({"steps": steps.to_pandas(), "ranks": ranks.to_pandas()})
    assert "host busy time and the rest of the step" in page  # the plot says what it shows
    cpu = _ranks_table(page)
    assert "GPU idle %" not in cpu and "comm/comp overlap %" not in cpu and "host busy %" in cpu
    assert "no GPU activity in these traces" in cpu
    gpu = _ranks_table(render_job_report(job_tables))
    assert "GPU idle %" in gpu and "no GPU activity" not in gpu


# ----------------------------------------------------------------------------- verdict, coverage, prose

COLUMN_NAME = re.compile(r"\b[a-z]+(_[a-z0-9]+)+_(ns|pct|bytes)\b")


def _prose(html: str) -> str:
    """The page's own sentences: everything but tables, plots, evidence blocks, styles and scripts."""
    body = html[html.index("<body") :]
    body = re.sub(r"<(table|pre|script|figure)\b.*?</\1>", " ", body, flags=re.S)
    return re.sub(r"<[^>]+>", " ", body)


def _verdict(html: str) -> str:
    sec = html[html.index('id="verdict"') : html.index('id="coverage"')]
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", sec))


def test_verdict_is_ok_only_when_the_rules_that_could_judge_ran(job_tables):
    from jobs.publish.report.html import render_job_report

    base = {k: v for k, v in job_tables.items() if k != "findings"}
    ok = render_job_report(
        {**base, "rule_coverage": coverage_frame({"host_bound_launch": "ran", "blocking_sync": "ran"})}
    )
    assert "No bottleneck found: all 2 rules that could judge this job ran" in _verdict(ok)
    assert 'class="badge ok"' in ok and 'data-table="rule-coverage"' in ok

    cpu = coverage_frame(
        {"host_bound_launch": "not_run", "low_gpu_utilization": "not_run"}, "CPU-only trace: no GPU activity"
    )
    nj = _verdict(render_job_report({**base, "rule_coverage": cpu}))
    assert (
        "Not judged" in nj
        and "CPU-only trace: no GPU activity: host-bound launches, low GPU utilization did not run" in nj
    )
    assert "No bottleneck found" not in nj

    part = coverage_frame({"host_bound_launch": "ran", "low_gpu_utilization": "not_run"}, "no GPU activity")
    pj = _verdict(render_job_report({**base, "rule_coverage": part}))
    assert "Partly judged" in pj and "low GPU utilization did not run" in pj and "No bottleneck found" not in pj

    trace = coverage_frame({"host_bound_launch": "ran_on_trace"}, "no ProfilerStep: each rank's whole trace")
    wt = _verdict(render_job_report({**base, "rule_coverage": trace}))
    assert "No bottleneck found" in wt and "Judged on the whole trace: no ProfilerStep" in wt

    unknown = render_job_report(base)  # an old warehouse: no rule_coverage table
    assert "Coverage unknown" in _verdict(unknown) and "No bottleneck found" not in unknown
    assert 'data-unavailable="coverage"' in unknown


def test_job_report_has_no_placeholders_or_column_names_in_its_prose(job_tables):
    from jobs.publish.report.html import render_job_report

    t = _hostile_tables(job_tables)
    t["findings"] = t["findings"].assign(
        recommendation="Rank 1 spends more in cpu_bound_time_ns (+0.671 ms per step): start there."
    )
    html = render_job_report(t)
    prose = _prose(html)
    assert not COLUMN_NAME.search(prose), COLUMN_NAME.search(prose)
    assert "CPU-bound time (+0.671 ms per step)" in prose
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", html) + re.findall(r'<div class="v">([^<]*)</div>', html)
    assert not {c.strip() for c in cells} & {"-1", "None", "nan", "NaN", "<NA>"}
    assert "path rank" not in html  # the cross-rank path has no rank of its own


def test_cards_carry_one_label_per_number_and_say_when_one_step_was_captured(job_tables):
    from jobs.fleet.stats import run_summary
    from jobs.publish.headline import HEADLINE_LABELS
    from jobs.publish.report.sections import job_cards

    cards = {c["key"]: c["value"] for c in job_cards(job_tables)}
    row = run_summary(job_tables["steps"], job_tables["ranks"], job_tables["captures"]).iloc[0]
    assert cards[HEADLINE_LABELS["idle_pct"]] == f"{row['idle_pct']:.2f}"
    assert cards[HEADLINE_LABELS["n_steps"]] == str(int(row["n_steps"]))
    assert cards[HEADLINE_LABELS["n_rank_steps"]] == str(int(row["n_rank_steps"]))
    assert "GPU idle, % of the GPU's active span (HTA temporal breakdown)" in cards
    one = {k: v[v["step"] == v["step"].min()] if k == "steps" else v for k, v in job_tables.items()}
    keys = [c["key"] for c in job_cards(one)]
    assert any("only 1 step captured" in k for k in keys) and HEADLINE_LABELS["step_time_p90_ms"] not in keys


def test_capture_flag_glossary_covers_every_parser_flag_and_is_linked(job_tables):
    from jobs.normalize.kineto.parse import FLAGS
    from jobs.publish.report.glossary import FLAG_GLOSSARY
    from jobs.publish.report.html import render_job_report

    assert set(FLAGS) <= set(FLAG_GLOSSARY)
    caps = job_tables["captures"].assign(flags=[["negative_launch_delay"]] * len(job_tables["captures"]))
    html = render_job_report({**job_tables, "captures": caps})
    assert 'id="capture-flags"' in html and 'href="#capture-flags"' in html
    flags = html[html.index('data-table="capture-flags"') :]
    assert "negative_launch_delay" in flags and "counted as 0 in the launch statistics" in flags


def test_collective_heatmap_of_a_large_job_is_bounded():
    """100 ranks × 300 collective calls: the dot matrix keeps the :data:`HEATMAP_ROWS` ranks with the most wait
    and groups the calls into :data:`HEATMAP_COLUMNS` columns, and its title and alt text say so."""
    import base64
    import xml.etree.ElementTree as ET

    import numpy as np

    from jobs.publish.report import plots as P

    rng = np.random.default_rng(0)
    heavy = {7, 70}  # the ranks that waited most
    rows = [
        {
            "rank": r,
            "match_key": f"c{k}",
            "call_index": k,
            "wait_ns": (5e6 if r in heavy else 1e5) * (0.5 + rng.random()),
        }
        for r in range(100)
        for k in range(300)
    ]
    plot = P.collective_wait_heatmap(pd.DataFrame(rows))
    root = ET.fromstring(base64.b64decode(plot.data_uri.split(",", 1)[1]))
    dots = [el for el in root.iter() if el.tag.rsplit("}", 1)[-1] == "circle"]
    assert len(dots) == P.HEATMAP_ROWS * P.HEATMAP_COLUMNS
    labels = {el.text for el in root.iter() if el.text and el.text.startswith("rank ")}
    assert len(labels) == P.HEATMAP_ROWS and {"rank 7", "rank 70"} <= labels
    title = "".join(root.find("{http://www.w3.org/2000/svg}title").itertext())
    assert f"{P.HEATMAP_ROWS} of 100 ranks" in title and "of 100 ranks by 300 calls" in plot.alt


def test_per_rank_bars_of_a_large_job_are_bounded():
    """200 ranks: the step-time and idle bar charts draw the :data:`RANK_BARS` slowest / most idle ranks (the planted
    slow rank among them), in rank order, and say so in the title."""
    import base64
    import xml.etree.ElementTree as ET

    from jobs.publish.report import plots as P

    n = 200
    steps = pd.DataFrame(
        {
            "rank": [r for r in range(n) for _ in range(3)],
            "step": [s for _ in range(n) for s in range(3)],
            "step_time_ns": [(9e6 if r == 123 else 1e6 + r) for r in range(n) for _ in range(3)],
            "kernel_time_ns": 5e5,
            "compute_time_ns": 5e5,
            "non_compute_time_ns": 1e5,
            "idle_time_ns": [(8e6 if r == 123 else 4e5) for r in range(n) for _ in range(3)],
        }
    )
    ranks = pd.DataFrame(
        {"rank": range(n), "idle_host_wait_ns": [9e9 if r == 5 else 1e6 + r for r in range(n)],
         "idle_kernel_wait_ns": 1e5, "idle_other_ns": 1e5}
    )  # fmt: skip
    for plot, planted, what in (
        (P.step_breakdown(steps), "rank 123", "the slowest"),
        (P.idle_breakdown(ranks), "rank 5", "the most idle"),
    ):
        root = ET.fromstring(base64.b64decode(plot.data_uri.split(",", 1)[1]))
        labels = [el.text.split(" (")[0] for el in root.iter() if el.text and el.text.startswith("rank ")]
        assert len(set(labels)) == P.RANK_BARS and planted in labels
        assert sorted(set(labels), key=lambda s: int(s.split()[1]))[-1] == f"rank {n - 1}"  # the largest, kept
        title = "".join(root.find("{http://www.w3.org/2000/svg}title").itertext())
        assert f"({P.RANK_BARS} of {n} ranks: {what})" in title and f"{P.RANK_BARS} of {n} ranks" in plot.alt


def test_findings_name_their_evidence_rows_and_link_to_their_tables(job_tables):
    """A finding's ``evidence.links`` (windows, call sites) and ``kernels_below_peak``'s op groups are listed in its
    row, and the section links to the tables that hold those rows."""
    import json

    from jobs.publish.report.html import render_job_report
    from jobs.publish.report.sections import drill_down

    ev = {
        "links": {
            "utilization_windows": [
                {"rank": 0, "step": 3, "window_id": 2, "dur_ns": 4_100_000, "cause": "sync", "cause_op": "cudaFree"}
            ],
            "comm_sites": [{"step": 3, "site": "0|all_reduce|8388608|#12", "exposed_max_ns": 2_900_000}],
        },
        "details": {"op_groups": [{"op_name": "aten::mm", "shape_sig": "[8,8]x[8,8]", "recoverable_ns": 1_500_000}]},
    }
    text, keys = drill_down(json.dumps(ev))
    assert "rank 0 step 3 #2 4.10 ms sync (cudaFree)" in text
    assert "step 3 0|all_reduce|8388608|#12 2.90 ms exposed" in text and "aten::mm [8,8]x[8,8] 1.50 ms" in text
    assert keys == ["idle-windows", "comm-sites", "op-efficiency"]
    assert drill_down("{}") == ("", []) and drill_down("not json") == ("", []) and drill_down(None) == ("", [])

    t = dict(job_tables)
    t["findings"] = pd.DataFrame(
        [
            {
                "job_id": "trace_filter",
                "attempt": 0,
                "rank_order": 1,
                "rule": "blocking_sync",
                "title": "Blocking sync",
                "recommendation": "Remove it.",
                "est_time_lost_per_step_ns": 4_100_000,
                "evidence_json": json.dumps({"links": {"utilization_windows": ev["links"]["utilization_windows"]}}),
            }
        ]
    )
    html = render_job_report(t)
    findings = html[html.index('id="findings"') :]
    assert "rank 0 step 3 #2 4.10 ms sync (cudaFree)" in findings
    assert 'href="#idle-windows"' in findings and 'href="#comm-sites"' not in findings[: findings.index("</section>")]
