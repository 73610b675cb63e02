"""Data-quality gate: Great Expectations 1.x suites over the warehouse tables, per pipeline stage.

``python -m jobs.validate --warehouse W --stage normalize|analyze|all [--job J]… [--raw R | --n-discovered N]
[--no-mark] [--json F] [--html F]``: validates and marks the stage's tables (:func:`jobs.validate.suites.validate_tables`),
prints the summary; exit code 1 when validation fails.
"""

from __future__ import annotations

import argparse
import json
import sys

from jobs.landing.discover import discover
from jobs.spark import get_spark
from jobs.validate.suites import validate_tables
from schemas.expectations import STAGE_TABLES


def main(argv: list[str] | None = None) -> int:
    """``python -m jobs.validate --warehouse W --stage normalize|analyze|all [--job J]… [--raw R | --n-discovered N]
    [--no-mark] [--json F] [--html F]``.

    ``--raw`` counts the raw files discovery finds there, for the ``captures`` row-count check
    (whole landing zone: not combinable with ``--job``); ``--n-discovered`` gives that count directly.
    Prints the summary; exit code 1 when validation fails (2: bad arguments, from argparse).
    """
    p = argparse.ArgumentParser(prog="python -m jobs.validate", description=__doc__.splitlines()[0])
    p.add_argument("--warehouse", required=True)
    p.add_argument("--stage", required=True, choices=[*STAGE_TABLES, "all"])
    p.add_argument("--job", action="append", help="job id (repeatable; default: all jobs)")
    p.add_argument("--raw", help="landing zone the batch came from (enables the every-file-accounted-for check)")
    p.add_argument(
        "--n-discovered",
        type=int,
        help="raw files discovered for the batch (the same check, for "
        "callers that know the count, e.g. an interval's run record)",
    )
    p.add_argument("--no-mark", action="store_true", help="do not write _validation.json marks")
    p.add_argument("--json", help="write the report as JSON here")
    p.add_argument("--html", help="write the report as self-contained HTML here")
    a = p.parse_args(argv)
    if a.raw and a.job:
        p.error("--raw counts the whole landing zone; it cannot be combined with --job (use --n-discovered)")
    n_discovered = len(discover(a.raw).files) if a.raw else a.n_discovered
    spark = get_spark()
    stages = list(STAGE_TABLES) if a.stage == "all" else [a.stage]
    report = None
    for s in stages:
        r = validate_tables(
            spark, a.warehouse, s, a.job, n_discovered=n_discovered if s == "normalize" else None, mark=not a.no_mark
        )
        report = r if report is None else report.merge(r)
    print(report.summary())
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(report.to_dict(), f, indent=1, default=str)
    if a.html:
        # the one import of a later stage, for --html only (the page needs publish's templates); the
        # gate's modules (report, suites, marks) import nothing of jobs.publish
        from jobs.publish.report.html import (
            render_validation_report,  # --html only: the gate imports nothing of publish
        )

        with open(a.html, "w", encoding="utf-8") as f:
            f.write(render_validation_report(report))
    return 0 if report.success else 1


if __name__ == "__main__":
    sys.exit(main())
