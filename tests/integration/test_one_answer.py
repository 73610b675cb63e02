"""One answer everywhere (issue 26): a job's numbers and verdict agree across the job report, the fleet report,
MLflow, ``tracelake run``, ``tracelake compare`` and MCP, and the pages a user reads read right in a browser.

The stack's outputs are built once over the demo pair (``demo_run``: two real 2-rank DDP trainings) plus four
corpus jobs run as a user's own bare traces: the 8-rank DLRM job (one ProfilerStep per rank), alexnet (no
ProfilerStep: judged on its whole trace), ns_resolution (5 ProfilerSteps) and a CPU-only trace. The expected
value of every headline number is :func:`jobs.fleet.stats.run_summary`'s (the run's ``fleet_stats`` job row);
each place that shows it is read as a person reads it (tiles, table cells, printed lines) and must show that
value at its precision, under a label that starts with the number's one short label.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest
from rendered_page import Page

from jobs.fleet.stats import run_summary
from jobs.publish.tracking import rounded
from jobs.warehouse import read_pandas
from schemas import FLEET_TABLES, TABLES

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
#: The user's own traces: job (folder) → corpus folder.
CORPUS_JOBS = {
    "dlrm": "param/dlrm_kineto",
    "alexnet": "HolisticTraceAnalysis/critical_path/alexnet",
    "nsres": "HolisticTraceAnalysis/ns_resolution_trace",
    "cpuonly": "HolisticTraceAnalysis/cpu_only",
}
#: The one short label of each headline number: every label shown with it starts with these words.
SHORT = {"step_time_p50_ms": "job step time p50, ms", "idle_pct": "GPU idle, %"}
#: What may never reach a page: pandas/Python/JSON nulls, template braces, the cross-rank path's -1 sentinel.
PLACEHOLDER = re.compile(r"\bnan\b|\bNaN\b|\bNone\b|\bnull\b|\bundefined\b|<NA>|\bNaT\b|\{\{|\}\}|rank -1\b|\[\]")


def _py(*args: str, timeout: int = 600) -> str:
    out = subprocess.run(
        [sys.executable, "-m", *args],
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "220", "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 0, (args, out.stderr[-3000:])
    return out.stdout


@dataclass
class Stack:
    """Everything a user sees of the warehouse ``wh`` (see the module docstring)."""

    wh: Path
    printed: str  # `tracelake demo`'s and `tracelake run`'s output
    summary: pd.DataFrame  # run_summary, by job_id
    fleet_stats: pd.DataFrame
    findings: pd.DataFrame
    runs: dict  # job_id → MLflow run
    pages: dict[str, Path]  # job_id → job report; "fleet"; "comparison"
    compare_printed: str
    base: str
    slow: str
    mcp_jobs: dict = field(default_factory=dict)  # job_id → list_jobs row
    mcp_summary: dict = field(default_factory=dict)  # job_id → job_summary answer
    mcp_sql: dict = field(default_factory=dict)


async def _ask_mcp(wh: Path, jobs: list[str]) -> tuple[dict, dict, dict]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    env = {**os.environ, "PYTHONPATH": str(ROOT), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "jobs.cli", "mcp", "--warehouse", str(wh)], env=env, cwd=str(ROOT)
    )
    async with Client(params, read_timeout_seconds=180) as client:
        rows, cursor = [], None
        while True:
            r = await client.call_tool("list_jobs", {"cursor": cursor} if cursor else {})
            assert not r.is_error, r.content
            rows += r.structured_content["jobs"]
            cursor = r.structured_content["page"]["next_cursor"]
            if not cursor:
                break
        summaries = {}
        for j in jobs:
            r = await client.call_tool("job_summary", {"job_id": j})
            assert not r.is_error, r.content
            summaries[j] = r.structured_content
        r = await client.call_tool("sql", {"query": "SELECT count(*) AS n FROM fleet_findings"})
        assert not r.is_error, r.content  # a documented table with no rows is still a view
        return {row["job_id"]: row for row in rows}, summaries, r.structured_content


@pytest.fixture(scope="module")
def stack(demo_run, torch_corpus, tmp_path_factory) -> Stack:
    from mlflow.tracking import MlflowClient

    from jobs.publish.reports import JOB_REPORT_ARTIFACT

    work, demo_printed = demo_run
    wh = work / "warehouse"
    raw = tmp_path_factory.mktemp("own_traces")
    for job, rel in CORPUS_JOBS.items():
        (raw / job).mkdir()
        for f in sorted((torch_corpus / rel).iterdir()):
            if f.name.endswith((".json", ".json.gz")):
                shutil.copyfile(f, raw / job / f.name)
    printed = demo_printed + _py("jobs.cli", "run", "--raw", str(raw), "--warehouse", str(wh))
    fleet_html = work / "fleet.html"
    _py("jobs.publish.report", "--warehouse", str(wh), "--html", str(fleet_html))
    t = read_pandas(str(wh), ("steps", "ranks", "captures", "fleet_stats", "findings"))
    summary = run_summary(t["steps"], t["ranks"], t["captures"]).set_index("job_id")
    base = next(j for j in summary.index if j.endswith("-baseline"))
    slow = next(j for j in summary.index if j.endswith("-slow"))
    cmp_html = work / "comparison.html"
    compare_printed = _py(
        "jobs.cli", "compare", base, slow, "--warehouse", str(wh), "--no-mlflow", "--html", str(cmp_html)
    )
    client = MlflowClient(tracking_uri=f"sqlite:///{wh}/mlflow.db")
    exp = client.get_experiment_by_name("tracelake")
    runs = {r.data.tags["tracelake.job_id"]: r for r in client.search_runs([exp.experiment_id])}
    pages: dict[str, Path] = {"fleet": fleet_html, "comparison": cmp_html}
    for job, run in runs.items():
        dst = work / "reports" / job
        dst.mkdir(parents=True, exist_ok=True)
        pages[job] = Path(client.download_artifacts(run.info.run_id, JOB_REPORT_ARTIFACT, str(dst)))
    s = Stack(wh, printed, summary, t["fleet_stats"], t["findings"], runs, pages, compare_printed, base, slow)
    s.mcp_jobs, s.mcp_summary, s.mcp_sql = asyncio.run(_ask_mcp(wh, sorted(summary.index)))
    return s


def _same(shown: str, value: float) -> None:
    """``shown`` (a page's or a printout's text of a number) is ``value`` at the precision shown."""
    text = shown.replace(",", "").strip()
    decimals = len(text.split(".")[1]) if "." in text else 0
    assert text == f"{value:.{decimals}f}", (shown, value)


def _printed_number(printed: str, job: str, label: str) -> str | None:
    """The number ``tracelake run`` printed on the job's header line between the name of ``label`` and its unit
    (``job step time p50 19.90 ms (slowest rank per step) · GPU idle 52.0 % of …`` for ``job step time p50, ms`` and
    ``GPU idle, %``; None: not printed)."""
    line = next(ln for ln in printed.splitlines() if ln.startswith(f"job {job}: ") and "rank(s)" in ln)
    name, _, unit = label.partition(", ")
    m = re.search(r"(?:: |· )" + re.escape(name) + r" ([\d,.]+) " + re.escape(unit), line)
    return m.group(1) if m else None


def _expected(stack: Stack, job: str) -> dict[str, float | None]:
    r = stack.summary.loc[job]
    p50 = r["step_time_p50_ns"]
    return {
        "step_time_p50_ms": None if pd.isna(p50) else float(p50) / 1e6,
        "idle_pct": None if pd.isna(r["idle_pct"]) else float(r["idle_pct"]),
    }


def test_run_summary_is_the_fleet_stats_job_row(stack):
    st = stack.fleet_stats
    jobs = st[(st["dimension"] == "job") & (st["date"] == "all")].set_index("value")
    assert sorted(jobs.index) == sorted(f"{j}#0" for j in stack.summary.index)
    assert set(CORPUS_JOBS) | {stack.base, stack.slow} == set(stack.summary.index)  # alexnet counted too
    for job, r in stack.summary.iterrows():
        row = jobs.loc[f"{job}#0"]
        for col in ("step_time_p50_ns", "idle_pct", "exposed_comm_pct", "n_steps", "n_rank_steps", "n_ranks"):
            assert (pd.isna(row[col]) and pd.isna(r[col])) or row[col] == pytest.approx(r[col]), (job, col)


def test_every_place_shows_a_jobs_step_time_and_gpu_idle_alike(stack):
    """The job report's tiles, MLflow, ``tracelake run``, MCP's ``list_jobs``/``job_summary`` and the fleet
    report's per-job tables show run_summary's job step time p50 and GPU idle %, labelled alike."""
    fleet = Page(stack.pages["fleet"].read_text())
    fleet_rows = [r for key in ("worst-idle", "worst-step", "worst-exposed") for r in fleet.tables[key].records()]
    labels: dict[str, set[str]] = {k: set() for k in SHORT}
    for job in stack.summary.index:
        want = _expected(stack, job)
        report = Page(stack.pages[job].read_text())
        metrics = stack.runs[job].data.metrics
        listed = stack.mcp_jobs[job]
        for key, value in want.items():
            tiles = [k for k in report.cards if k.startswith(SHORT[key])]
            if value is None:  # not defined (no ProfilerStep, no GPU): shown nowhere as a number
                assert not tiles and key not in metrics, (job, key, tiles)
                assert listed[{"step_time_p50_ms": "step_time_p50_ns"}.get(key, key)] is None, (job, key)
                continue
            assert len(tiles) == 1, (job, key, list(report.cards))
            _same(report.cards[tiles[0]], value)
            labels[key].add(tiles[0])
            assert metrics[key] == pytest.approx(rounded(key, value)), (job, key)  # MLflow keeps its unit's digits
            shown = _printed_number(stack.printed, job, SHORT[key])
            assert shown is not None, (job, key)
            _same(shown, value)
        p50 = stack.summary.loc[job, "step_time_p50_ns"]
        assert listed["step_time_p50_ns"] == (None if pd.isna(p50) else int(p50))
        if want["idle_pct"] is not None:
            assert listed["idle_pct"] == pytest.approx(want["idle_pct"])
            assert stack.mcp_summary[job]["breakdown"]["idle_pct"] == pytest.approx(want["idle_pct"])
        for col in ("n_steps", "n_rank_steps", "n_ranks"):
            n = int(stack.summary.loc[job, col])
            assert listed[col] == n and metrics[col] == n, (job, col)
        for row in (r for r in fleet_rows if r["job"] == f"{job}#0"):
            for key, header in (("step_time_p50_ms", SHORT["step_time_p50_ms"]), ("idle_pct", SHORT["idle_pct"])):
                if want[key] is None:
                    assert row[header] == "—", (job, key, row)
                else:
                    _same(row[header], want[key])
    for key, seen in labels.items():
        assert all(lab.startswith(SHORT[key]) for lab in seen), seen
    assert "dlrm#0" in {r["job"] for r in fleet_rows}


def test_compare_shows_the_same_numbers(stack):
    """``tracelake compare`` (printed and its HTML page) shows both runs' headline numbers as the rest does."""
    # the printed metrics table (80 columns): the MLflow name, A, B, Δ %
    rows = {
        words[0]: words[1:]
        for words in (line.split() for line in stack.compare_printed.splitlines())
        if words and words[0] in ("step_time_p50_ms", "idle_pct")
    }
    page = Page(stack.pages["comparison"].read_text()).tables["metric-deltas"].records()
    by_metric = {r["metric"]: r for r in page}
    for key in ("step_time_p50_ms", "idle_pct"):
        a, b = _expected(stack, stack.base)[key], _expected(stack, stack.slow)[key]
        if a is None or b is None:  # the demo trains on CPUs: no GPU idle
            assert key not in rows or rows[key][:2] == ["—", "—"]
            continue
        shown_a, shown_b = rows[key][0], rows[key][1]
        assert by_metric[key]["what it is"].startswith(SHORT[key])
        _same(shown_a, a)
        _same(shown_b, b)
        _same(by_metric[key]["A"], a)
        _same(by_metric[key]["B"], b)


def test_alexnet_is_judged_on_its_whole_trace_and_not_called_ok(stack):
    """Case 1: no ProfilerStep, 99.5 % GPU idle, a pageable host-to-device copy leading the device time."""
    page = Page(stack.pages["alexnet"].read_text())
    assert page.sections["verdict"].status == "findings"
    findings = page.tables["findings"].records()
    rules = {r["rule"] for r in findings}
    assert {"low_gpu_utilization", "pageable_memcpy"} <= rules
    pageable = next(r for r in findings if r["rule"] == "pageable_memcpy")
    assert "Memcpy HtoD (Pageable -> Device)" in pageable["finding"]
    assert all("whole trace" in r["finding"] for r in findings)
    assert "est. lost ms over the trace" in page.tables["findings"].headers
    coverage = page.tables["rule-coverage"].records()
    assert {r["status"] for r in coverage} <= {"ran on the whole trace (no ProfilerStep)", "not applicable"}
    tags = stack.runs["alexnet"].data.tags
    assert tags["tracelake.verdict"] == "findings" and tags["tracelake.top_finding"] != "none"
    assert stack.mcp_summary["alexnet"]["verdict"]["status"] == "findings"
    assert stack.mcp_summary["alexnet"]["verdict"]["whole_trace"] is True


def test_a_cpu_only_trace_is_not_called_ok(stack):
    page = Page(stack.pages["cpuonly"].read_text())
    status = page.sections["verdict"].status
    assert status in ("partly_judged", "not_judged")
    assert any("did not run" in p for p in page.sections["verdict"].prose)
    assert stack.runs["cpuonly"].data.tags["tracelake.verdict"] == status
    assert stack.mcp_summary["cpuonly"]["verdict"]["status"] == status
    assert "CPU-only trace" in " ".join(stack.mcp_summary["cpuonly"]["verdict"]["unknown"])


def test_the_fleet_report_agrees_with_itself_and_the_job_reports(stack):
    """Case 2 and 3: one DLRM step time, the straggler the verdict names first, the window shown, every job
    counted or named with why, and the empty fleet_findings table a view."""
    fleet = Page(stack.pages["fleet"].read_text())
    dlrm = Page(stack.pages["dlrm"].read_text())
    p50 = dlrm.card(SHORT["step_time_p50_ms"])
    assert p50 == "19.90"
    by_name = {r["job name"]: r for r in fleet.tables["by-job_name"].records()}
    assert by_name["dlrm"][SHORT["step_time_p50_ms"]] == p50
    assert by_name["alexnet"]["runs"] == "1" and by_name["alexnet"][SHORT["step_time_p50_ms"]] == "—"
    assert fleet.cards["jobs"] == str(len(stack.summary))
    straggler = stack.findings[(stack.findings["job_id"] == "dlrm") & (stack.findings["rule"] == "straggler_rank")]
    first = next(r for r in fleet.tables["stragglers"].records() if r["job"] == "dlrm#0")
    assert first["rank"] == str(int(straggler.iloc[0]["ranks"][0])) == "7"
    window = re.search(r"(\d{4}-\d\d-\d\d) … (\d{4}-\d\d-\d\d) \((\d+) days", fleet.subtitle)
    assert window, fleet.subtitle
    impact = " ".join(fleet.sections["fleet-impact"].prose)
    assert window.group(0) in impact or fleet.tables.get("fleet-findings"), impact
    assert stack.mcp_sql["columns"] == ["n"] and stack.mcp_sql["rows"][0][0] == len(
        read_pandas(str(stack.wh), ("fleet_findings",))["fleet_findings"]
    )


def test_the_job_reports_parts_reconcile(stack):
    """Case 4 on DLRM: the critical path and the verdict explain each other, confidences come from evidence,
    counts are named for what they count, the capture flags are explained."""
    page = Page(stack.pages["dlrm"].read_text())
    verdict = " ".join(page.sections["verdict"].prose)
    path = " ".join(page.sections["critical-path"].prose)
    assert "Rank 7" in verdict and "critical path" in verdict and "rank 7" in verdict.lower()
    assert "late start" in path or "late start" in verdict
    confidences = {r["confidence"] for r in page.tables["findings"].records()}
    assert len(confidences) > 2, confidences
    assert page.card("job steps") == "1" and page.card("rank-steps") == "8"
    metrics = stack.runs["dlrm"].data.metrics
    assert metrics["n_steps"] == 1 and metrics["n_rank_steps"] == 8
    assert "only 1 step captured" in page.card("job step time p50, ms") or any(
        "only 1 step captured" in k for k in page.cards
    )
    flags = {r["flag"]: r for r in page.tables["capture-flags"].records()}
    assert "negative_launch_delay" in flags and len(next(iter(flags.values()))) >= 2
    assert any("capture-flags" in p or "capture flags" in p for p in page.sections["captures"].prose)


# ------------------------------------------------------------------------------------------- in a browser

#: Declared column and table names: never in a page's prose (a column name belongs in the warehouse, not a sentence).
RAW_NAMES = sorted(
    {c.name for t in (*TABLES.values(), *FLEET_TABLES.values()) for c in t.columns if "_" in c.name}
    | {n for n in (*TABLES, *FLEET_TABLES) if "_" in n},
    key=len,
    reverse=True,
)
_RAW = re.compile(r"(?<![\w.`/#-])(" + "|".join(map(re.escape, RAW_NAMES)) + r")(?![\w(=])")


def _rendered(page: Path, tmp_path: Path) -> str:
    out = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=5000",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert 'id="tracelake-rendered"' in out.stdout, "the page's own script did not run"
    return out.stdout


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def page_problems(name: str, page: Page) -> list[str]:
    """What a reader must never meet on a page: a placeholder, a column name in prose, a verdict whose numbers
    differ from the tables they come from, an "ok" verdict with rules that did not run."""
    problems: list[str] = []
    for text in page.text:
        if PLACEHOLDER.search(text):
            problems.append(f"{name}: placeholder in {text[:160]!r}")
    for text in page.prose:
        m = _RAW.search(text)
        if m:
            problems.append(f"{name}: column name {m.group(1)!r} in prose {text[:160]!r}")
    if "verdict" not in page.sections:
        return problems
    verdict, said = page.sections["verdict"], " ".join(page.sections["verdict"].prose)
    coverage = [r["status"] for r in page.tables["rule-coverage"].records()] if "rule-coverage" in page.tables else []
    if verdict.status == "ok" and (
        not any(s.startswith("ran") for s in coverage) or any("did not run" in s for s in coverage)
    ):
        problems.append(f"{name}: verdict ok with rule coverage {coverage}")
    if verdict.status == "findings":
        rows = page.tables["findings"].records()
        lost = next(h for h in page.tables["findings"].headers if h.startswith("est. lost"))
        cost = re.search(r"It costs about ([\d,.]+) ms", said)
        if not cost or _number(cost.group(1)) != _number(rows[0][lost]):
            problems.append(f"{name}: verdict cost {cost and cost.group(1)} vs findings table {rows[0][lost]}")
        share = re.search(r"of the job step time p50 \(([\d,.]+) ms\)", said)
        if share and share.group(1) != page.card(SHORT["step_time_p50_ms"]):
            problems.append(f"{name}: verdict step time {share.group(1)} vs its tile")
        nexts = page.tables["verdict-next"].records() if "verdict-next" in page.tables else []
        for nxt, row in zip(nexts, rows[1:]):
            if nxt["next finding"] != row["finding"] or list(nxt.values())[1] != row[lost]:
                problems.append(f"{name}: next finding {nxt} vs findings row {row['#']}")
    return problems


def test_the_page_check_catches_what_it_should():
    """The check of the browser test on a page with one of each fault (hand-written in the template's structure)."""
    bad = (
        '<div class="cards"><div class="card"><div class="v">19.90</div>'
        '<div class="k">job step time p50, ms (slowest rank per step)</div></div></div>'
        '<section id="verdict"><h2>Verdict <span class="badge ok">ok</span></h2>'
        '<p class="intro">No bottleneck: cpu_bound_time_ns is low; path rank -1.</p></section>'
        '<section id="coverage"><table data-table="rule-coverage"><thead><tr><th>rule</th><th>status</th></tr>'
        "</thead><tbody><tr><td>low GPU utilization</td><td>did not run</td></tr></tbody></table></section>"
        '<section id="s"><table data-table="t"><tbody><tr><td>nan</td></tr></tbody></table></section>'
    )
    found = page_problems("bad", Page(bad))
    assert any("placeholder" in p and "nan" in p for p in found), found
    assert any("placeholder" in p and "rank -1" in p for p in found), found
    assert any("'cpu_bound_time_ns' in prose" in p for p in found), found
    assert any("verdict ok with rule coverage" in p for p in found), found
    wrong = bad.replace("badge ok", "badge findings").replace(
        "No bottleneck", "Top bottleneck: x. It costs about 2.00 ms per step, 10 % of the job step time p50 (20.00 ms)"
    ) + (
        '<section id="findings"><table data-table="findings"><thead><tr><th>#</th><th>finding</th>'
        "<th>est. lost ms/step</th></tr></thead><tbody><tr><td>1</td><td>x</td><td>3.00</td></tr></tbody></table>"
        "</section>"
    )
    found = page_problems("wrong", Page(wrong))
    assert any("verdict cost 2.00 vs findings table 3.00" in p for p in found), found
    assert any("verdict step time 20.00 vs its tile" in p for p in found), found


@pytest.mark.skipif(not Path(CHROMIUM).is_file(), reason="headless Chromium not installed: apt-get install chromium")
def test_the_pages_read_right_in_chromium(stack, tmp_path):
    """Every job report, the fleet report and the comparison, as Chromium renders them (:func:`page_problems`),
    and the comparison's step times those of the two job reports."""
    problems: list[str] = []
    for name, path in sorted(stack.pages.items()):
        problems += page_problems(name, Page(_rendered(path, tmp_path)))
    comparison = Page(stack.pages["comparison"].read_text()).tables["metric-deltas"].records()
    p50 = {r["metric"]: r for r in comparison}["step_time_p50_ms"]
    for side, job in (("A", stack.base), ("B", stack.slow)):
        tile = Page(stack.pages[job].read_text()).card(SHORT["step_time_p50_ms"])
        if _number(p50[side]) != pytest.approx(_number(tile), abs=0.006):
            problems.append(f"comparison {side} {p50[side]} vs {job}'s tile {tile}")
    assert not problems, "\n".join(problems)
