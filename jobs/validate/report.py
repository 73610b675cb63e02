"""Validation results: one check (:class:`CheckResult`), one table batch (:class:`TableValidation`), one
stage or run (:class:`ValidationReport`), with a JSON form (``to_dict``/``from_dict``) that crosses processes.

Plain dataclasses (no Great Expectations, Spark or MLflow): :mod:`jobs.validate.suites` fills them,
:mod:`jobs.validate.marks` writes them into the warehouse, :mod:`jobs.publish.validation` logs them to MLflow.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class CheckResult:
    """Outcome of one :class:`~schemas.expectations.Check` on one table batch.

    ``unexpected_count``: rows breaking it (``None`` for table-level checks, whose ``observed``
    holds the value seen); ``partial_unexpected``: up to 10 offending values as text;
    ``jobs``: ``{job_id: unexpected rows}`` for a failed check (every job of the batch when the
    failure cannot be attributed to rows); ``error``: why GX could not evaluate it.
    """

    id: str
    expectation: str
    columns: list[str]
    success: bool
    doc: str = ""
    unexpected_count: int | None = None
    element_count: int | None = None
    observed: str | None = None
    partial_unexpected: list[str] = field(default_factory=list)
    jobs: dict[str, int] = field(default_factory=dict)
    error: str | None = None

    @classmethod
    def from_dict(cls, d: dict) -> CheckResult:
        """The check from its ``asdict`` form (as in :meth:`ValidationReport.to_dict`).

        Raises:
            KeyError, TypeError: a required key is missing, or a key is unknown.
        """
        return cls(
            **{
                **d,
                "columns": list(d["columns"]),
                "partial_unexpected": list(d.get("partial_unexpected", [])),
                "jobs": dict(d.get("jobs", {})),
            }
        )


@dataclass
class TableValidation:
    """One table's suite on one batch: ``status`` is ``passed``, ``failed`` or ``missing`` (not written);
    ``engine``: the GX execution engine that ran it (``pandas`` or ``spark``); ``jobs``: the batch's jobs;
    ``job_rows``: ``{job_id: rows}`` of the jobs that have rows in the table."""

    table: str
    stage: str
    status: str
    n_rows: int = 0
    checks: list[CheckResult] = field(default_factory=list)
    gx_result: dict = field(default_factory=dict)
    engine: str = ""
    jobs: list[str] = field(default_factory=list)
    job_rows: dict[str, int] = field(default_factory=dict)

    @property
    def success(self) -> bool:
        """False only when a check failed (a missing table is not a failure)."""
        return self.status != "failed"

    @property
    def failed(self) -> list[CheckResult]:
        """The failed checks."""
        return [c for c in self.checks if not c.success]

    def failed_jobs(self) -> set[str]:
        """Jobs with at least one failed check in this table."""
        return {j for c in self.failed for j in c.jobs}

    @classmethod
    def of_batches(
        cls, parts: list[TableValidation], jobs: list[str], gx_result: dict, partial: int
    ) -> TableValidation:
        """One table's result from its suite run on several row batches (disjoint sets of jobs, the same
        checks): counts and per-job attributions added up, a check passed only when it passed on every batch,
        the first ``partial`` offending values kept (as many as each batch kept); ``jobs``: the jobs of the whole
        batch; ``gx_result``: the batches' GX results merged (:func:`jobs.validate.gx_engine.merge_result_dicts`).

        Raises:
            ValueError: ``parts`` is empty or its batches ran different checks.
        """
        if not parts:
            raise ValueError("no batch to merge")
        if len({tuple(c.id for c in p.checks) for p in parts}) != 1:
            raise ValueError(f"{parts[0].table}: the batches ran different checks")
        checks = []
        for same in zip(*(p.checks for p in parts)):
            counts = [c.unexpected_count for c in same if c.unexpected_count is not None]
            elements = [c.element_count for c in same if c.element_count is not None]
            per_job: dict[str, int] = {}
            for c in same:
                for j, n in c.jobs.items():
                    per_job[j] = per_job.get(j, 0) + n
            first = same[0]
            checks.append(
                CheckResult(
                    id=first.id,
                    expectation=first.expectation,
                    columns=list(first.columns),
                    success=all(c.success for c in same),
                    doc=first.doc,
                    unexpected_count=sum(counts) if counts else None,
                    element_count=sum(elements) if elements else None,
                    observed=next((c.observed for c in same if c.observed is not None), None),
                    partial_unexpected=[v for c in same for v in c.partial_unexpected][:partial],
                    jobs=per_job,
                    error=next((c.error for c in same if c.error is not None), None),
                )
            )
        rows: dict[str, int] = {}
        for p in parts:
            rows.update(p.job_rows)
        return cls(
            table=parts[0].table,
            stage=parts[0].stage,
            status="failed" if any(not c.success for c in checks) else parts[0].status,
            n_rows=sum(p.n_rows for p in parts),
            checks=checks,
            gx_result=gx_result,
            engine=parts[0].engine,
            jobs=list(jobs),
            job_rows=rows,
        )

    @classmethod
    def from_dict(cls, d: dict) -> TableValidation:
        """The table's result from its :meth:`ValidationReport.to_dict` entry (``gx_result``: ``{}`` when left out).

        Raises:
            TypeError: a required key is missing, or a key is unknown.
        """
        return cls(
            **{
                **d,
                "checks": [CheckResult.from_dict(c) for c in d.get("checks", [])],
                "gx_result": dict(d.get("gx_result", {})),
                "jobs": list(d.get("jobs", [])),
                "job_rows": dict(d.get("job_rows", {})),
            }
        )


@dataclass
class ValidationReport:
    """All tables validated in one batch (one stage, or several merged with :meth:`merge`).

    Attributes:
        stages: the stages covered, e.g. ``["normalize", "analyze"]``.
        job_ids: the jobs of the batch (``None``: every job in the tables).
        tables: ``{"<stage>/<table>": TableValidation}``.
        validated_at: UTC ISO-8601 time of the (last) validation.
    """

    stages: list[str]
    job_ids: list[str] | None
    tables: dict[str, TableValidation] = field(default_factory=dict)
    validated_at: str = ""

    @property
    def success(self) -> bool:
        """True when no table failed."""
        return all(t.success for t in self.tables.values())

    def failed_jobs(self) -> set[str]:
        """Jobs that must not be published (some check failed on their rows)."""
        return set().union(*(t.failed_jobs() for t in self.tables.values())) if self.tables else set()

    def job_checks(self, job_id: str | None = None) -> int:
        """Checks that looked at ``job_id``'s rows: those of every table where the job has rows or failed
        a check (so the count does not depend on which other jobs shared the batch); all checks for ``None``."""
        return sum(
            len(t.checks)
            for t in self.tables.values()
            if job_id is None or t.job_rows.get(job_id) or job_id in t.failed_jobs()
        )

    def job_success(self, job_id: str) -> bool:
        """True when ``job_id`` passed every table of the batch."""
        return job_id not in self.failed_jobs()

    def merge(self, other: ValidationReport) -> ValidationReport:
        """A report covering both batches (e.g. the normalize and analyze stages of one run)."""
        jobs = (
            None
            if self.job_ids is None and other.job_ids is None
            else sorted(set(self.job_ids or []) | set(other.job_ids or []))
        )
        return ValidationReport(
            self.stages + [s for s in other.stages if s not in self.stages],
            jobs,
            {**self.tables, **other.tables},
            max(self.validated_at, other.validated_at),
        )

    def to_dict(self, with_gx: bool = False) -> dict:
        """JSON-ready dict; ``with_gx`` adds each table's raw GX result (``to_json_dict``)."""
        tables = {}
        for k, t in self.tables.items():
            d = asdict(t)
            if not with_gx:
                d.pop("gx_result")
            tables[k] = d
        return {
            "success": self.success,
            "stages": self.stages,
            "job_ids": self.job_ids,
            "validated_at": self.validated_at,
            "failed_jobs": sorted(self.failed_jobs()),
            "tables": tables,
        }

    @classmethod
    def from_dict(cls, d: dict) -> ValidationReport:
        """The inverse of :meth:`to_dict` (also after a JSON round trip), to hand a report to another process.

        ``to_dict`` keeps every field that :meth:`failed_jobs`, :meth:`job_success`, :meth:`merge` and
        :meth:`summary` read; its derived keys ``success`` and ``failed_jobs`` are recomputed, not read.
        Each table's ``gx_result`` is restored only when present (``to_dict(with_gx=True)``), else ``{}``.

        Raises:
            KeyError, TypeError: ``d`` lacks ``stages`` or ``job_ids``, or a table or check entry lacks a
                required key or has an unknown one.
        """
        job_ids = d["job_ids"]
        return cls(
            stages=list(d["stages"]),
            job_ids=None if job_ids is None else list(job_ids),
            tables={k: TableValidation.from_dict(t) for k, t in d.get("tables", {}).items()},
            validated_at=d.get("validated_at", ""),
        )

    def summary(self) -> str:
        """Plain-text summary: one line per table, one indented line per failed check."""
        lines = [
            f"validation {'PASSED' if self.success else 'FAILED'} ({', '.join(self.stages)}; "
            f"jobs: {', '.join(self.job_ids) if self.job_ids else 'all'})"
        ]
        for key, t in self.tables.items():
            ok = sum(c.success for c in t.checks)
            if t.status == "missing":
                lines.append(f"  {key}: no rows for these jobs (not produced by this run; nothing to validate)")
                continue
            lines.append(f"  {key}: {t.status} ({t.n_rows} rows, {ok}/{len(t.checks)} checks passed)")
            for c in t.failed:
                what = (
                    f"{c.unexpected_count} unexpected" if c.unexpected_count is not None else f"observed {c.observed}"
                )
                jobs = f" jobs: {', '.join(sorted(c.jobs))}" if c.jobs else ""
                lines.append(f"    ✗ {c.id} [{c.expectation}] {what}{'; ' + c.error if c.error else ''}{jobs}")
        if self.failed_jobs():
            lines.append(f"  failed jobs (not to be published): {', '.join(sorted(self.failed_jobs()))}")
        return "\n".join(lines)
