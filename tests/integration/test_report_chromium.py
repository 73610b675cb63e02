"""Look at every HTML report as a person would: headless Chromium renders it, runs no script but ours
(none of it errors), shows every plot; a screenshot of each page is kept in ``test-artifacts/``.

Reports are built from the real normalize + analyze output of HTA's ``trace_filter`` traces (2 ranks),
plus tables other stages produce (kernels, collectives, critical path, findings) carrying hostile
names. Needs Debian's ``chromium`` (``apt-get install -y chromium``); skipped without it.
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

pytestmark = pytest.mark.integration

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
HOSTILE = "<script>document.title='pwned'</script>"
TRACES = ("sampled_rank-0.json.gz", "sampled_rank-1.json.gz")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1280,2000",
]

if not Path(CHROMIUM).is_file():
    pytest.skip(
        "headless Chromium not installed (/usr/bin/chromium): apt-get install -y chromium", allow_module_level=True
    )


def _chromium(page: Path, profile: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *extra, page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def pages(torch_corpus) -> dict[str, tuple[Path, int]]:
    """``{name: (html file, plots expected)}`` for the job, empty-job, fleet, validation and comparison reports."""
    from jobs.analyze.hta.breakdown import analyze_rank
    from jobs.landing.discover import CaptureFile
    from jobs.normalize.job import captures_table, normalize_file
    from jobs.publish.compare import compare_jobs
    from jobs.publish.report.html import (
        render_comparison_report,
        render_fleet_report,
        render_job_report,
        render_validation_report,
    )
    from jobs.validate.suites import validate_frames

    ints = {pa.int32(): pd.Int32Dtype(), pa.int64(): pd.Int64Dtype()}
    per_rank = []
    for rel in TRACES:
        p = torch_corpus / "HolisticTraceAnalysis" / "trace_filter" / rel
        task = CaptureFile(
            uri=str(p), capture_id=rel[:14], job_id="trace_filter", size_bytes=p.stat().st_size
        ).to_dict()
        cap, ev = normalize_file(task, p.read_bytes())
        s, r = analyze_rank(ev)
        per_rank.append(
            {
                "captures": captures_table([cap]).to_pandas(types_mapper=ints.get),
                "events": ev.to_pandas(types_mapper=ints.get),
                "steps": s.to_pandas(types_mapper=ints.get),
                "ranks": r.to_pandas(types_mapper=ints.get),
            }
        )
    job = {k: pd.concat([t[k] for t in per_rank], ignore_index=True) for k in per_rank[0]}
    ident = dict(date="2023-04-28", job_id="trace_filter", attempt=0)
    full = {k: v for k, v in job.items() if k != "events"}
    full["collectives"] = pd.DataFrame(
        [
            {
                **ident,
                "rank": rank,
                "match_key": f"{HOSTILE}/{call}",
                "collective": "allreduce",
                "call_index": call,
                "aligned_start_ns": 1000 * call,
                "wait_ns": (call * 7919 % 5000) * (rank + 1),
                "skew_ns": 10_000,
                "is_last_arrival": rank == call % 2,
                "msg_bytes": 1 << 20,
                "busbw_gbps": 12.5,
            }
            for call in range(60)
            for rank in (0, 1)
        ]
    )
    full["critical_path"] = pd.DataFrame(
        [
            {
                **ident,
                "step": 551,
                "scope": "job",
                "path_rank": -1,
                "segment": i,
                "rank": i % 2,
                "name": HOSTILE,
                "dur_ns": d,
                "bound_by": b,
                "path_length_ns": 9_000_000,
            }
            for i, (d, b) in enumerate(
                [(5_000_000, "compute"), (3_000_000, "collective_wait"), (1_000_000, "launch_overhead")]
            )
        ]
    )
    full["findings"] = pd.DataFrame(
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
                "confidence": 0.7,
                "ranks": [1],
                "evidence_json": '{"wait_ms": 3.5}',
                "recommendation": HOSTILE,
            }
        ]
    )
    full["events"] = job["events"].assign(name=lambda e: e["name"].where(e.index % 97 != 0, HOSTILE))
    bad_steps = job["steps"].copy()
    bad_steps.loc[0, "idle_pct"] = 150.0
    validation = validate_frames({"steps": bad_steps, "ranks": job["ranks"]}, "analyze")
    a = per_rank[0]
    b = {**per_rank[1], "events": full["events"][full["events"]["rank"] == 1]}
    fleet_ranks = pd.concat([job["ranks"], job["ranks"].assign(job_id="other", date="2024-02-01", idle_pct=80.0)])
    fleet_caps = pd.concat([job["captures"], job["captures"].assign(job_id="other", date="2024-02-01")])
    out = ARTIFACTS / "reports"
    out.mkdir(parents=True, exist_ok=True)
    rendered = {
        "job": (render_job_report(full, validation=validation), 5),
        "job_without_tables": (render_job_report({}), 0),
        "fleet": (render_fleet_report(fleet_ranks, fleet_caps, job["steps"], full["findings"]), 1),
        "validation": (render_validation_report(validation), 0),
        "comparison": (render_comparison_report(compare_jobs(a, b, "rank 0", HOSTILE)), 1),
    }
    files = {}
    for name, (text, n_plots) in rendered.items():
        f = out / f"{name}.html"
        f.write_text(text, encoding="utf-8")
        files[name] = (f, n_plots)
    return files


@pytest.mark.parametrize("name", ["job", "job_without_tables", "fleet", "validation", "comparison"])
def test_report_renders_in_chromium(pages, name, tmp_path):
    page, n_plots = pages[name]
    dom = _chromium(
        page, tmp_path / "profile", "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000", "--dump-dom"
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    console = [line for line in dom.stderr.splitlines() if ":CONSOLE" in line]
    assert console == [], console  # no script error, no blocked (injected) script
    marker = re.search(r'<div id="tracelake-rendered"[^>]*>', dom.stdout)
    assert marker, "the page's own script did not run to the end"
    plots = int(re.search(r'data-plots="(\d+)"', marker.group(0)).group(1))
    ok = int(re.search(r'data-plots-ok="(\d+)"', marker.group(0)).group(1))
    assert plots == ok, marker.group(0)  # every plot image decoded
    assert (plots >= n_plots) if n_plots else plots == 0, marker.group(0)
    title = re.search(r"<title>(.*?)</title>", dom.stdout, flags=re.S).group(1)
    source_title = re.search(r"<title>(.*?)</title>", page.read_text(encoding="utf-8"), flags=re.S).group(1)
    assert html.unescape(title) == html.unescape(source_title) and title.startswith(
        "tracelake"
    )  # no injected script renamed the page
    if name == "job_without_tables":
        assert dom.stdout.count("Not available:") >= 7
    if name == "job":  # the answer first: the verdict block comes before the first plot, in words
        verdict = dom.stdout.index('id="verdict"')
        assert verdict < dom.stdout.index("data-plot=") and verdict < dom.stdout.index('id="step-time"')
        assert "Top bottleneck:" in dom.stdout and "2.00 ms per step" in dom.stdout
    shots = ARTIFACTS / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    shot = shots / f"{name}.png"
    shot.unlink(missing_ok=True)
    res = _chromium(page, tmp_path / "profile2", f"--screenshot={shot}")
    assert res.returncode == 0 and shot.is_file() and shot.stat().st_size > 10_000, res.stderr[-2000:]
