"""Render the tracelake HTML reports (Jinja2, autoescape on, one self-contained page each).

Every page is ``templates/report.html.j2``: a header, metric cards and a list of
:class:`~jobs.publish.report.blocks.Section` (plots, tables, notes) built by
:mod:`jobs.publish.report.sections` and :mod:`jobs.publish.report.fleet_tables`. Safety: Jinja2
autoescaping turns every value (kernel names, job ids, reasons, evidence JSON — all of which come
from traces) into text; plots are SVG data URIs shown as images (no script in them runs); the page carries a
Content-Security-Policy that allows only its own inline script (by sha256), so even markup that slipped through
could not run.
That one script adds ``<div id="tracelake-rendered" data-plots=N data-plots-ok=M>`` after load,
which the headless-browser test looks for.

Public functions: :func:`render_job_report`, :func:`render_fleet_report`,
:func:`render_validation_report`, :func:`render_comparison_report` (all return the HTML as ``str``).
"""

from __future__ import annotations

import base64
import datetime as _dt
import functools
import hashlib
from pathlib import Path

import pandas as pd

from jobs.publish.report import fleet_tables as FT
from jobs.publish.report import sections as S
from jobs.publish.report.blocks import Section, fmt_text, table_view

TEMPLATES = Path(__file__).parent / "templates"

#: The only script on a page: a render marker for automated checks (no effect on content).
CHECK_SCRIPT = (
    'window.addEventListener("load", function () {'
    ' var imgs = document.querySelectorAll("figure.plot img"); var ok = 0;'
    ' for (var i = 0; i < imgs.length; i++) { if (imgs[i].complete && imgs[i].naturalWidth > 0) { ok++; } }'
    ' var m = document.createElement("div"); m.id = "tracelake-rendered"; m.hidden = true;'
    ' m.setAttribute("data-plots", String(imgs.length)); m.setAttribute("data-plots-ok", String(ok));'
    ' document.body.appendChild(m); });'
)
SCRIPT_HASH = "sha256-" + base64.b64encode(hashlib.sha256(CHECK_SCRIPT.encode()).digest()).decode()


# ----------------------------------------------------------------------------- rendering


@functools.lru_cache(maxsize=1)
def _env():
    """The Jinja2 environment of :data:`TEMPLATES`, made once per process: it keeps the compiled templates, so
    the pages of a publish run parse and compile ``report.html.j2`` once, not once per page."""
    import jinja2  # heavy: jinja2, only when a page is rendered

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render_page(title: str, sections: list[Section], subtitle: str = "", cards: list[dict] | None = None) -> str:
    """Render one page from sections (``cards``: ``[{"key": metric name, "value": text}]``)."""
    return (
        _env()
        .get_template("report.html.j2")
        .render(
            title=title,
            subtitle=subtitle,
            cards=cards or [],
            sections=sections,
            script_hash=SCRIPT_HASH,
            check_script=CHECK_SCRIPT,
            generated_at=_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        )
    )


def render_job_report(
    tables: dict, validation=None, title: str | None = None, head: dict[str, float] | None = None
) -> str:
    """The HTML report of one job run (one job, one attempt).

    Args:
        tables: ``{table name: pandas DataFrame}`` of the job: any of ``captures``, ``ranks``,
            ``steps``, ``kernels``, ``collectives``, ``critical_path``, ``findings``, ``rule_coverage``, ``regressions`` (and optionally
            ``events`` for top kernels when ``kernels`` is absent). Missing or empty tables give a
            "not available" note in their section.
        validation: a :class:`jobs.validate.report.ValidationReport` to summarize, if any.
        title: page title (default ``tracelake job <job_id> (attempt N)``).
        head: the run's headline metrics (:func:`jobs.publish.headline.headline`, as logged to MLflow), when the
            caller has them; default: computed here from ``tables`` (:func:`jobs.publish.report.sections.job_headline`).

    Sections: the verdict (ok only when the rules that could judge the job ran and none fired:
    :mod:`jobs.publish.verdict`; top bottleneck, its cost, what to do), the run against the previous runs of its job
    name (regression verdict and interval in words), rule coverage, findings, step-time breakdown per rank,
    idle-time breakdown, idle windows inside the step with their host cause, top kernels, op efficiency against the
    device's roofline, collective wait heatmap, recurring communication waits with their what-if, critical-path
    summary (related to the straggler), data quality, captures, the capture-flag glossary.
    """
    job_id, attempt = S.job_identity(tables)
    head = S.job_headline(tables) if head is None else head  # one run_summary for the tiles and the verdict
    secs = [
        S.verdict_section(tables, head),
        S.regression_section(tables),
        S.coverage_section(tables),
        S.findings_section(tables),
        S.step_section(tables),
        S.idle_section(tables),
        S.idle_windows_section(tables),
        S.kernels_section(tables),
        S.op_efficiency_section(tables),
        S.collectives_section(tables),
        S.comm_sites_section(tables),
        S.critical_path_section(tables),
        S.quality_section(tables, validation),
        S.captures_section(tables),
        S.glossary_section(tables),
    ]
    return render_page(
        title or f"tracelake job {job_id} (attempt {attempt})",
        secs,
        subtitle=S.job_subtitle(tables),
        cards=S.job_cards(tables, head),
    )


def render_fleet_report(
    ranks: pd.DataFrame | None,
    captures: pd.DataFrame | None,
    steps: pd.DataFrame | None = None,
    findings: pd.DataFrame | None = None,
    top: int = 10,
    title: str = "tracelake fleet report",
    fleet: dict | None = None,
    fleet_validation: dict | None = None,
    collectives: pd.DataFrame | None = None,
) -> str:
    """The fleet report: trends over capture date, the worst offenders and, with ``fleet``, the findings
    ranked by fleet impact, host health, the breakdown by job name / model / hardware / torch version and the
    regressions (:func:`jobs.publish.report.fleet_tables.fleet_report_sections`).

    Every per-job number is a ``fleet_stats`` row: ``fleet["fleet_stats"]``, or without it the same function over
    ``steps``/``ranks``/``captures`` (:func:`jobs.publish.report.fleet_tables.fleet_stats_of`).

    Args:
        ranks, captures, steps, findings: those tables over all jobs (pandas); any may be missing.
        top: rows per worst-offender table.
        fleet: ``{"fleet_stats"|"fleet_kernels"|"regressions"|"fleet_findings"|"host_health": pandas}``
            (:mod:`jobs.fleet`).
        fleet_validation: ``{table: mark}`` of the fleet tables (:func:`jobs.validate.marks.read_table_marks`):
            adds their data-quality section.
        collectives: ``collectives`` rows (``job_id, attempt, rank, match_key, n_ranks_matched,
            is_last_arrival``): the straggler ranks, ranked as the straggler_rank finding does.
    """
    subtitle, cards, secs = FT.fleet_report_sections(
        ranks, captures, steps, findings, fleet, collectives, fleet_validation, top
    )
    return render_page(title, secs, subtitle=subtitle, cards=cards)


def render_validation_report(report, job_id: str | None = None) -> str:
    """The validation results as a self-contained page (our Data Docs): one section per table with
    every check, its status, unexpected count and sample values.

    Args:
        report: a :class:`jobs.validate.report.ValidationReport`.
        job_id: highlight this job (its status is in the subtitle).
    """
    secs = []
    for key, t in report.tables.items():
        if t.status == "missing":
            secs.append(
                Section(
                    key.replace("/", "-"),
                    f"{key}",
                    note="Not available: table not written yet (nothing to validate).",
                    status="missing",
                )
            )
            continue
        rows = pd.DataFrame(
            [
                {
                    "status": "passed" if c.success else "FAILED",
                    "id": c.id,
                    "expectation": c.expectation,
                    "unexpected": c.unexpected_count if c.unexpected_count is not None else c.observed,
                    "sample": "; ".join(c.partial_unexpected[:5]) or (c.error or ""),
                    "jobs": ", ".join(f"{j} ({n})" for j, n in sorted(c.jobs.items())),
                    "doc": c.doc,
                }
                for c in t.checks
            ]
        )
        rows = rows.sort_values("status", key=lambda s: s != "FAILED", kind="stable") if len(rows) else rows
        spec = [
            ("status", "status", fmt_text, ""),
            ("id", "check", fmt_text, "name"),
            ("expectation", "GX expectation", fmt_text, "name"),
            ("unexpected", "unexpected / observed", fmt_text, "num"),
            ("sample", "sample values", fmt_text, "name"),
            ("jobs", "jobs (rows)", fmt_text, "name"),
            ("doc", "why", fmt_text, ""),
        ]
        ok = sum(c.success for c in t.checks)
        secs.append(
            Section(
                key.replace("/", "-"),
                key,
                intro=f"{t.n_rows:,} rows; {ok} of {len(t.checks)} checks passed "
                f"(Great Expectations, {t.engine or 'pandas'} engine).",
                tables=[table_view(f"checks-{t.table}", rows, spec)],
                status=t.status,
            )
        )
    status = "PASSED" if report.success else "FAILED"
    sub = f"stages {', '.join(report.stages)}; validated {report.validated_at}; jobs: " + (
        ", ".join(report.job_ids) if report.job_ids else "all"
    )
    if job_id is not None:
        sub += f" — job {job_id}: {'passed' if report.job_success(job_id) else 'FAILED'}"
    cards = [
        {"key": "validation", "value": status},
        {"key": "failed jobs", "value": str(len(report.failed_jobs()))},
        {"key": "checks", "value": str(sum(len(t.checks) for t in report.tables.values()))},
    ]
    return render_page(f"tracelake data validation: {status}", secs, subtitle=sub, cards=cards)


def render_comparison_report(comparison) -> str:
    """The HTML report of a :class:`jobs.publish.compare.Comparison` (metric deltas, kernels/ops added,
    removed, slower, faster, findings appeared/cleared)."""
    return render_page(
        f"tracelake compare: {comparison.a_label} → {comparison.b_label}",
        S.comparison_sections(comparison),
        subtitle=S.comparison_subtitle(comparison),
        cards=S.comparison_cards(comparison),
    )
