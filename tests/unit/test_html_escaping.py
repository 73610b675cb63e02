"""Every string that comes from a trace, a manifest or a user is text in the HTML reports, never markup.

The four pages of :mod:`jobs.publish.report.html` are rendered from tables whose names, ids, titles, reasons,
evidence, validation messages and comparison labels are XSS / template-injection payloads, then parsed
with :class:`html.parser.HTMLParser` (which splits ``<script>``/``<style>`` content the way a browser
does): the only elements are the template's own, the only script is the page's marker script, no
``on*`` attribute and no ``javascript:`` URL exists, every image is an SVG data URI, and each payload is
present as text. Plots are well-formed SVG without script or links: labels reach them as escaped text nodes. The fleet
section's metric names (group values from manifest tags) stay valid MLflow names, and the terminal output
of ``tracelake compare``/``sql``/``run`` (rich) prints names as text, never as console markup.

Base tables: the real normalize + analyze output of HTA's ``trace_filter`` traces (2 ranks), as in
``test_report_html.py``; the hostile values are written into them here.
"""

from __future__ import annotations

import base64
import json
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pandas as pd
import pytest

SCRIPT = "<script>alert(1)</script>"
ATTR = '"><img src=x onerror=alert(1)>'
STYLE = "</style><script>alert(3)</script>"
JINJA = "{{ 7*7 }}"
JINJA_PROBE = "{{ 7*191 }}{% if true %}jinja-ran{% endif %}"  # rendered, it would print 1337 and jinja-ran
JS_URL = "javascript:alert(1)"
SVG = "'><svg/onload=alert(5)>"
COMMENT = "--><script>alert(6)</script><!--"
PAYLOADS = (SCRIPT, ATTR, STYLE, JINJA, JINJA_PROBE, JS_URL, SVG, COMMENT)


#: What the template itself emits (templates/report.html.j2); anything else came from data.
TEMPLATE_TAGS = {
    "html",
    "head",
    "meta",
    "title",
    "style",
    "body",
    "header",
    "h1",
    "p",
    "main",
    "div",
    "section",
    "h2",
    "span",
    "figure",
    "img",
    "a",
    "figcaption",
    "table",
    "caption",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "details",
    "summary",
    "pre",
    "footer",
    "script",
}
TEMPLATE_ATTRS = {
    "lang",
    "charset",
    "http-equiv",
    "content",
    "name",
    "class",
    "id",
    "data-section",
    "data-unavailable",
    "data-plot",
    "data-table",
    "src",
    "alt",
    "href",
}


class _Page(HTMLParser):
    """Elements, attributes, text, script and style contents of a page, as a browser tokenizes it."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self.scripts: list[str] = []
        self.styles: list[str] = []
        self.comments: list[str] = []
        self._raw: str | None = None
        self.feed(html)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))
        if tag in ("script", "style"):
            self._raw = tag
            (self.scripts if tag == "script" else self.styles).append("")

    def handle_startendtag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if tag == self._raw:
            self._raw = None

    def handle_data(self, data):
        if self._raw == "script":
            self.scripts[-1] += data
        elif self._raw == "style":
            self.styles[-1] += data
        else:
            self.text.append(data)

    def handle_comment(self, data):
        self.comments.append(data)


def assert_inert_svg(data_uri: str) -> ET.Element:
    """A plot's data URI is a well-formed SVG document (so every label in it is an escaped text node) with no
    script, no foreign HTML, no event handler and no link out; returns its root."""
    assert data_uri.startswith("data:image/svg+xml;base64,")
    root = ET.fromstring(base64.b64decode(data_uri.split(",", 1)[1], validate=True))
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    for el in root.iter():
        assert el.tag.rsplit("}", 1)[-1] not in ("script", "foreignObject", "a", "image", "use", "iframe"), el.tag
        assert not any(k.rsplit("}", 1)[-1].lower().startswith("on") or k.endswith("href") for k in el.attrib), (
            el.attrib
        )
    return root


def assert_inert(html: str, shown: tuple[str, ...] = PAYLOADS) -> _Page:
    """The page holds only template markup, and each of ``shown`` appears as text."""
    from jobs.publish.report.html import CHECK_SCRIPT, SCRIPT_HASH

    page = _Page(html)
    tags = [t for t, _ in page.elements]
    assert set(tags) <= TEMPLATE_TAGS, set(tags) - TEMPLATE_TAGS
    assert page.scripts == [CHECK_SCRIPT]  # the marker script only, intact
    assert len(page.styles) == 1 and not any(p in page.styles[0] for p in PAYLOADS)  # </style> never closed it early
    assert page.comments == []
    assert all(a["href"].startswith("#") for t, a in page.elements if "href" in a)  # links stay on the page
    csp = [a["content"] for t, a in page.elements if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp == [f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src '{SCRIPT_HASH}'"]
    figures = tags.count("figure")
    assert tags.count("img") == figures
    for tag, attrs in page.elements:
        assert set(attrs) <= TEMPLATE_ATTRS, (tag, attrs)
        assert not any(k.startswith("on") for k in attrs), (tag, attrs)
        for k, v in attrs.items():
            assert not (v or "").strip().lower().startswith(("javascript:", "vbscript:")), (tag, k, v)
        if tag == "img":
            assert_inert_svg(attrs["src"])
    text = "".join(page.text)
    for p in shown:
        assert p in text, p
    # no template was evaluated: 7*191 never printed, the {% if %} body never appears without its tags
    assert "1337" not in html and html.count("jinja-ran") == html.count("{% if true %}jinja-ran{% endif %}")
    return page


@pytest.fixture(scope="module")
def job_tables(trace_filter_tables):
    return {k: v.copy() for k, v in trace_filter_tables.items()}


def _cycle(i: int) -> str:
    return PAYLOADS[i % len(PAYLOADS)]


def hostile_job(base: dict, job_id: str = "trace_filter") -> dict:
    """The job's tables with every free-text column set to the payloads (each payload at least once)."""
    t = {k: v.copy() for k, v in base.items() if k != "events"}
    ident = dict(date="2023-04-28", job_id=job_id, attempt=0)
    for k in ("captures", "ranks", "steps"):
        t[k]["job_id"] = job_id
    t["ranks"]["device_name"] = SCRIPT  # job subtitle
    t["kernels"] = pd.DataFrame(
        [
            {
                **ident,
                "rank": i % 2,
                "capture_id": f"c{i % 2}",
                "step": 551,
                "name": p,
                "kernel_type": ("COMPUTATION", "COMMUNICATION", "MEMORY", ATTR)[i % 4],
                "n": 1 + i,
                "total_ns": 1_000_000 * (len(PAYLOADS) - i),
                "mean_ns": 1e6,
            }
            for i, p in enumerate(PAYLOADS)
        ]
    )
    rows = []
    for call, p in enumerate(PAYLOADS):
        for rank in (0, 1):
            wait = 1000 * (call + 1) if rank == 0 else 0
            rows.append(
                {
                    **ident,
                    "rank": rank,
                    "capture_id": f"c{rank}",
                    "step": 551,
                    "event_id": 10 * call + rank,
                    "pg_name": p,
                    "collective": _cycle(call + 1),
                    "call_index": call,
                    "match_key": f"{p}/{call}",
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
                "name": p,
                "start_ns": 0,
                "end_ns": 10,
                "dur_ns": 1_000_000 * (i + 1),
                "bound_by": _cycle(i + 3),
                "path_length_ns": 40_000_000,
            }
            for i, p in enumerate(PAYLOADS)
        ]
    )
    t["findings"] = pd.DataFrame(
        [
            {
                **ident,
                "finding_id": f"{p}/rank=1",
                "rule": _cycle(i + 1),
                "rank_order": i + 1,
                "title": p,
                "metric": _cycle(i + 2),
                "value": 3.5,
                "est_time_lost_per_step_ns": 2_000_000 - i,
                "confidence": 0.8,
                "ranks": [1],
                "steps": [551],
                "evidence_json": f'{{"kernel": {json.dumps(p)}}}',
                "recommendation": _cycle(i + 4),
            }
            for i, p in enumerate(PAYLOADS)
        ]
    )
    caps = t["captures"]
    caps.loc[0, "uri"] = "/landing/" + SCRIPT + ".json"
    caps.loc[1, "status"] = "quarantined"
    caps.loc[1, "uri"] = JS_URL
    caps.loc[1, "reason"] = f"{JS_URL}: invalid manifest {ATTR} {STYLE} {JINJA} {JINJA_PROBE} {SVG} {COMMENT}"
    caps["flags"] = [[SVG, COMMENT]] * len(caps)
    caps["format"] = STYLE
    return t


def hostile_validation(job_id: str):
    from jobs.validate.report import CheckResult, TableValidation, ValidationReport

    checks = [
        CheckResult(
            id=p,
            expectation=_cycle(i + 1),
            columns=[p],
            success=i % 2 == 1,
            doc=_cycle(i + 2),
            unexpected_count=i,
            partial_unexpected=[_cycle(i + 3), _cycle(i + 5)],
            jobs={job_id: 1, _cycle(i + 4): 2},
            error=_cycle(i + 6) if i == 2 else None,
        )
        for i, p in enumerate(PAYLOADS)
    ]
    tables = {
        f"analyze/{SCRIPT}": TableValidation(
            table=SCRIPT, stage="analyze", status="failed", n_rows=3, checks=checks, engine=ATTR, jobs=[job_id]
        ),
        f"normalize/{ATTR}": TableValidation(table=ATTR, stage="normalize", status="missing"),
    }
    return ValidationReport(stages=["normalize", JINJA], job_ids=[job_id, SVG], tables=tables, validated_at=STYLE)


def test_job_report_renders_every_trace_string_as_text(job_tables):
    from jobs.publish.report.html import render_job_report

    html = render_job_report(hostile_job(job_tables), validation=hostile_validation("trace_filter"))
    page = assert_inert(html)
    for plot in ("step_breakdown", "idle_breakdown", "top_kernels", "collective_wait", "critical_path"):
        assert any(a.get("data-plot") == plot for _, a in page.elements), plot
    # the evidence JSON is shown pretty-printed as text inside <pre>
    assert f'"kernel": {json.dumps(SCRIPT)}' in "".join(page.text)


def test_job_report_with_a_hostile_job_id_and_title(job_tables):
    """Job ids are path-safe in the warehouse (jobs.common.ids.safe_id); the report does not rely on it."""
    from jobs.publish.report.html import render_job_report

    for job_id in PAYLOADS:
        html = render_job_report(hostile_job(job_tables, job_id=job_id))
        page = assert_inert(html, shown=(job_id,))
        assert f"tracelake job {job_id} (attempt 0)" in page.text  # <title> and <h1>, as text
    assert_inert(render_job_report({}, title=ATTR), shown=(ATTR,))


def test_fleet_report_renders_job_ids_dates_and_findings_as_text(job_tables):
    from jobs.publish.report.html import render_fleet_report

    parts_r, parts_c = [], []
    for i, p in enumerate(PAYLOADS):
        parts_r.append(job_tables["ranks"].assign(job_id=p, date=_cycle(i + 1)))
        c = job_tables["captures"].assign(job_id=p, date=_cycle(i + 1))
        c.loc[c.index[0], ["status", "reason", "uri"]] = ["quarantined", _cycle(i + 2), _cycle(i + 3)]
        parts_c.append(c)
    ranks, caps = pd.concat(parts_r), pd.concat(parts_c)
    findings = hostile_job(job_tables)["findings"].assign(job_id=[_cycle(i + 5) for i in range(len(PAYLOADS))])
    html = render_fleet_report(ranks, caps, findings=findings, top=len(PAYLOADS) * 2, title=SCRIPT)
    page = assert_inert(html)
    assert any(a.get("data-plot") == "fleet_trends" for _, a in page.elements)
    assert {"worst-idle", "stragglers", "quarantined", "top-findings"} <= {
        a.get("data-table") for _, a in page.elements
    }


def test_validation_report_renders_check_names_samples_and_jobs_as_text():
    from jobs.publish.report.html import render_validation_report

    report = hostile_validation(ATTR)
    html = render_validation_report(report, job_id=SCRIPT)
    page = assert_inert(html)
    ids = [a["id"] for t, a in page.elements if t == "section"]
    assert f"analyze/{SCRIPT}".replace("/", "-") in ids  # a hostile table key stays one attribute value


def _events(rows):
    out = []
    for i, (rank, step, name, kind, dur_us) in enumerate(rows):
        out.append(
            {
                "job_id": "j",
                "attempt": 0,
                "rank": rank,
                "event_id": i,
                "ph": "X",
                "name": name,
                "category": {"kernel": "kernel", "op": "cpu_op"}[kind],
                "is_gpu": kind == "kernel",
                "dur_ns": dur_us * 1000,
                "step": step,
            }
        )
    return pd.DataFrame(out)


def test_comparison_report_renders_labels_names_and_findings_as_text():
    from jobs.publish.compare import compare_jobs
    from jobs.publish.report.html import render_comparison_report

    a_rows = [
        (r, s, p, kind, 100 + 10 * i)
        for r in (0, 1)
        for s in (1, 2)
        for i, (p, kind) in enumerate(zip(PAYLOADS, ("kernel", "op") * 4))
        if i % 3 != 0
    ]
    b_rows = [
        (r, s, p, kind, 300 + 40 * i)
        for r in (0, 1)
        for s in (1, 2)
        for i, (p, kind) in enumerate(zip(PAYLOADS, ("kernel", "op") * 4))
        if i % 3 != 1
    ]
    ranks = pd.DataFrame(
        [
            {
                "job_id": "j",
                "attempt": 0,
                "rank": r,
                "idle_pct": 10.0,
                "compute_pct": 90.0,
                "non_compute_pct": 0.0,
                "overlap_pct": None,
            }
            for r in (0, 1)
        ]
    )
    steps = pd.DataFrame(
        [
            {"job_id": "j", "attempt": 0, "rank": r, "step": s, "step_time_ns": 10_000_000}
            for r in (0, 1)
            for s in (1, 2)
        ]
    )
    fa = pd.DataFrame(
        [
            {"finding_id": p, "rule": _cycle(i + 1), "title": _cycle(i + 2), "est_time_lost_per_step_ns": 1e6}
            for i, p in enumerate(PAYLOADS)
            if i % 2 == 0
        ]
    )
    fb = pd.DataFrame(
        [
            {"finding_id": p, "rule": _cycle(i + 1), "title": _cycle(i + 2), "est_time_lost_per_step_ns": 2e6}
            for i, p in enumerate(PAYLOADS)
            if i % 3 != 2
        ]
    )
    c = compare_jobs(
        {"events": _events(a_rows), "ranks": ranks, "steps": steps, "findings": fa},
        {"events": _events(b_rows), "ranks": ranks, "steps": steps, "findings": fb},
        a_label=SCRIPT + "#0",
        b_label=ATTR + "#1",
    )
    assert set(c.ops["status"]) >= {"added", "removed", "slower"}
    c.notes.append(f"{COMMENT} {JS_URL} {STYLE}")
    html = render_comparison_report(c)
    page = assert_inert(html)
    assert any(a.get("data-plot") == "op_deltas" for _, a in page.elements)
    # metric names come from the job metrics; a hostile one is text too
    c.metrics = pd.DataFrame([{"metric": p, "a": 1.0, "b": 2.0, "delta": 1.0, "delta_pct": 100.0} for p in PAYLOADS])
    assert_inert(render_comparison_report(c))


def test_plot_labels_are_escaped_text(job_tables):
    """Kernel names, dates and critical-path labels (script, markup, LaTeX) in a plot are text nodes of a
    well-formed SVG without script or links (:func:`assert_inert_svg`), drawn as the characters they have."""
    from jobs.publish.report import plots as P
    from jobs.publish.report import sections as S

    t = hostile_job(job_tables)
    latexy = "\\input{/etc/passwd} %s" % SCRIPT
    t["kernels"].loc[0, "name"] = latexy
    top, _ = S.top_kernels_frame(t)
    ops = pd.DataFrame({"group": ["kernel", "op"], "name": [latexy, ATTR], "delta_ns_per_step": [5e5, -2e5]})
    daily = pd.DataFrame(
        {
            "date": [latexy, JINJA],
            "n_jobs": [1, 2],
            "idle_pct_median": [10.0, 20.0],
            "step_time_p50_ms_median": [1.0, 2.0],
        }
    )
    share = pd.DataFrame({"bound_by": [latexy, SCRIPT], "dur_ns": [2e6, 1e6], "pct": [66.7, 33.3]})
    plots = [
        P.top_kernels(top),
        P.collective_wait_heatmap(t["collectives"]),
        P.critical_path_attribution(share),
        P.fleet_trends(daily),
        P.op_deltas(ops),
    ]
    texts = []
    for plot in plots:
        assert plot is not None
        texts.append(" ".join("".join(el.itertext()) for el in assert_inert_svg(plot.data_uri).iter()))
        assert not any(p in plot.title or p in plot.alt for p in PAYLOADS) and "passwd" not in plot.alt
    assert P.short(latexy) in texts[0] and P.short(SCRIPT) in texts[2] and P.short(f"[op] {ATTR}") in texts[4]


def _fleet_tables() -> dict:
    """``fleet_stats``/``fleet_kernels``/``regressions`` (jobs.fleet) whose group values (job names, models,
    hardware, torch versions: manifest tags and trace metadata), kernel names and run ids are payloads."""
    dims = ("job_name", "model", "hardware", "torch_version")
    stats = pd.DataFrame(
        [
            {
                "dimension": dims[i % 4],
                "value": p,
                "date": "all",
                "n_runs": 2,
                "n_ranks": 4,
                "n_steps": 10 + i,
                "n_rank_steps": 40,
                "step_time_p50_ns": 10_000_000,
                "step_time_p90_ns": 12_000_000,
                "step_time_p99_ns": 13_000_000,
                "step_time_mean_ns": 1.1e7,
                "idle_pct": 10.0,
                "compute_pct": 80.0,
                "exposed_comm_pct": 5.0,
                "cpu_bound_pct": 1.0,
                "dataloader_pct": 0.5,
            }
            for i, p in enumerate(PAYLOADS)
        ]
    )
    kernels = pd.DataFrame(
        [
            {
                "dimension": "fleet",
                "value": "all",
                "date": "all",
                "kernel_rank": i + 1,
                "name": p,
                "kernel_type": _cycle(i + 1),
                "n": 5,
                "total_ns": 1_000_000,
                "share_pct": 10.0,
                "n_runs": 2,
            }
            for i, p in enumerate(PAYLOADS)
        ]
    )
    regressions = pd.DataFrame(
        [
            {
                "job_name": p,
                "job_id": _cycle(i + 1),
                "attempt": 0,
                "date": "2026-01-01",
                "run_index": 3,
                "metric": _cycle(i + 2),
                "value": 12.0,
                "baseline": 10.0,
                "change_pct": 20.0,
                "delta": 2.0,
                "p_value": 0.001,
                "verdict": ("regression", "improvement")[i % 2],
                "baseline_runs": [_cycle(i + 3), _cycle(i + 4)],
                "n_steps": 10,
                "n_baseline_steps": 40,
            }
            for i, p in enumerate(PAYLOADS)
        ]
    )
    return {"fleet_stats": stats, "fleet_kernels": kernels, "regressions": regressions}


def test_fleet_report_breakdown_and_regressions_render_group_values_as_text(job_tables):
    import inspect

    from jobs.publish.report.html import render_fleet_report

    if "fleet" not in inspect.signature(render_fleet_report).parameters:
        pytest.skip("render_fleet_report has no fleet sections")
    html = render_fleet_report(job_tables["ranks"], job_tables["captures"], fleet=_fleet_tables(), top=50)
    page = assert_inert(html)
    tables = {a.get("data-table") for _, a in page.elements}
    assert {"by-job_name", "by-model", "by-hardware", "by-torch_version", "fleet-top-kernels", "regressions"} <= tables


def test_fleet_metric_names_from_group_values_are_valid_mlflow_names():
    """A model tag ``..`` would make ``fleet/model/../…``, which MLflow refuses (a path normalization would
    change it): the whole fleet run would fail to log."""
    from mlflow.utils.validation import _validate_metric_name

    from jobs.publish.report.fleet_tables import fleet_stats_metrics

    stats = _fleet_tables()["fleet_stats"]
    extra = pd.DataFrame(
        [
            {**stats.iloc[0].to_dict(), "dimension": "model", "value": v}
            for v in ("..", ".", "", " ", "../..", "a/../b", "./x", "x" * 500, None)
        ]
    )
    metrics = fleet_stats_metrics(pd.concat([stats, extra], ignore_index=True))
    assert len({k.rsplit("/", 1)[0] for k in metrics}) >= 10
    for k in metrics:
        _validate_metric_name(k)
        assert ".." not in k.split("/") and "" not in k.split("/"), k


def test_compare_terminal_output_prints_names_as_text():
    """``tracelake compare`` prints through rich, whose markup (``[/]``, ``[link=…]``) in a kernel name would
    raise MarkupError (no report, no MLflow run) or restyle the terminal: names are escaped."""
    import io

    from rich.console import Console

    from jobs.publish.compare import compare_jobs, print_comparison

    markup = ["[/]", "[link=file:///etc/passwd]click[/link]", "[bold red]x", "a\\[/b]", "\\"]
    names = markup + [SCRIPT, JINJA]
    a = {
        "events": _events([(0, 1, "gemm", "kernel", 10)]),
        "findings": pd.DataFrame(
            [{"finding_id": "[/]f", "rule": "r", "title": "[/]", "est_time_lost_per_step_ns": 1e6}]
        ),
    }
    b = {
        "events": _events([(0, 1, n, "kernel", 10 + i) for i, n in enumerate(names)]),
        "findings": pd.DataFrame(
            [{"finding_id": "[link=x]g", "rule": "r", "title": "[/]t", "est_time_lost_per_step_ns": 1e6}]
        ),
    }
    c = compare_jobs(a, b, a_label="[/]a#0", b_label="[bold]b#1")
    c.notes.append("[/] note")
    out = io.StringIO()
    print_comparison(c, Console(file=out, width=400, color_system=None), limit=len(names))
    text = out.getvalue()
    for s in names:  # the kernel column fits 80 columns: a long name is cut after its first characters
        assert s[:24] in text, s
    for s in ["[/]a#0", "[bold]b#1", "[/] note", "[link=x]g: [/]t", "[/]f: [/]"]:
        assert s in text, s


def test_cli_terminal_output_prints_names_and_reasons_as_text(capsys):
    """``tracelake sql`` tables and the quarantine lines of ``tracelake run`` go through rich: a kernel or file
    name with ``[/]`` would raise MarkupError there."""
    from types import SimpleNamespace

    from jobs import cli

    cli._print_frame(pd.DataFrame({"[/]col": ["[/]gemm", "[link=file:///etc/passwd]x"], "n": [1, 2]}), "table")
    caps = pd.DataFrame(
        [
            {
                "job_id": "j",
                "rank": 0,
                "status": "quarantined",
                "n_events": 0,
                "reason": "/raw/t[/].json: invalid manifest [bold]x",
            }
        ]
    )
    validation = hostile_validation("[/]j")
    cli.print_summary(
        SimpleNamespace(
            captures=caps,
            ranks=pd.DataFrame(columns=["job_id", "rank"]),
            steps=pd.DataFrame(),
            pending=[],
            warehouse="s3://w",
            tracking_uri=None,
            run_ids={},
            validation=validation,
        )
    )
    out = capsys.readouterr().out
    for s in (
        "[/]col",
        "[/]gemm",
        "[link=file:///etc/passwd]x",
        "/raw/t[/].json: invalid manifest [bold]x",
        f"[{ATTR}]",
        "[/]j",
    ):  # the summary's "[<expectation>]" is printed, not swallowed as a style tag
        assert s in out, s


def test_run_exits_non_zero_naming_the_jobs_that_failed_validation(monkeypatch):
    """Issue 33: a job that fails validation is not published; ``tracelake run`` said so and exited 0. It now exits
    1 with the job's name (the pipeline is replaced by its result here: a unit test of the command alone)."""
    from types import SimpleNamespace

    from typer.testing import CliRunner

    from jobs import cli
    from jobs.pipeline import run as pipeline_run

    class Report:
        success = False

        def failed_jobs(self):
            return {"job-b", "job-a"}

        def summary(self):
            return "validation FAILED (normalize; jobs: job-a, job-b)"

    caps = pd.DataFrame({"job_id": ["job-a"], "status": ["ingested"], "attempt": [0], "rank": [0]})
    result = SimpleNamespace(
        captures=caps,
        steps=pd.DataFrame(columns=["job_id", "attempt", "rank", "step", "step_time_ns"]),
        ranks=pd.DataFrame(columns=["job_id", "attempt", "rank"]),
        findings=pd.DataFrame(),
        regressions=pd.DataFrame(),
        rule_coverage=pd.DataFrame(),
        pending=[],
        validation=Report(),
        warehouse="/tmp/wh",
        tracking_uri=None,
        run_ids={},
    )
    monkeypatch.setattr(pipeline_run, "run_pipeline", lambda *a, **k: result)
    out = CliRunner().invoke(cli.app, ["run", "--raw", "/tmp/raw", "--warehouse", "/tmp/wh", "--no-mlflow"])
    assert out.exit_code == 1
    assert "validation failed for job(s) job-a, job-b" in out.output
