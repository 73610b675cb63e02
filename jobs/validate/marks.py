"""Validation marks in the warehouse: ``{warehouse}/{table}/_validation.json``, per job ``passed`` or ``failed``,
and for a table validated whole (the fleet tables) the table's own status.

Spark and pyarrow skip ``_``-prefixed files, so the tables read as before; rewriting a table in
static-overwrite mode drops its marks, which then read as ``unvalidated``.
"""

from __future__ import annotations

import json
import posixpath

import fsspec

from jobs.validate.report import ValidationReport
from jobs.warehouse import exists, write_text_atomic
from schemas.tables import TABLES

MARK_FILE = "_validation.json"


def write_marks(warehouse: str, report: ValidationReport) -> list[str]:
    """Merge the report into ``{warehouse}/{table}/_validation.json`` (one entry per job).

    Each entry: ``{"status": "passed"|"failed", "stage", "validated_at", "failed": [{"id",
    "unexpected_count"}]}``. Entries of jobs outside the batch are kept. A report over every row
    (``report.job_ids`` is ``None``: the fleet stage) also sets the ``"table"`` entry (same fields, the checks
    failed anywhere in the table). Tables not written are skipped.

    Returns:
        The mark files written.
    """
    fs, root = fsspec.core.url_to_fs(warehouse)
    written = []
    for t in report.tables.values():
        if t.status == "missing":
            continue
        folder = posixpath.join(root.rstrip("/"), t.table)
        if not fs.exists(folder):
            continue
        path = posixpath.join(folder, MARK_FILE)
        doc = {"table": t.table, "jobs": {}}
        if fs.exists(path):
            try:
                doc = json.loads(fs.cat_file(path))
            except ValueError:
                pass
        jobs = set(t.jobs) | set(report.job_ids or []) | (set(t.failed_jobs()) - {"*"})
        for j in sorted(jobs):
            fails = [{"id": c.id, "unexpected_count": c.jobs.get(j)} for c in t.failed if j in c.jobs]
            doc.setdefault("jobs", {})[j] = {
                "status": "failed" if fails else "passed",
                "stage": t.stage,
                "validated_at": report.validated_at,
                "failed": fails,
            }
        if report.job_ids is None:
            doc["table"] = {
                "status": t.status,
                "stage": t.stage,
                "validated_at": report.validated_at,
                "failed": [{"id": c.id, "unexpected_count": c.unexpected_count} for c in t.failed],
            }
        text = json.dumps(doc, indent=1, sort_keys=True)
        if "file" in (fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)):
            write_text_atomic(path, text)  # a killed run never leaves a truncated mark
        else:
            with fs.open(path, "w") as f:
                f.write(text)
        written.append(path)
    return written


def _mark_docs(warehouse: str, tables):
    """``(table, its marks document or None)`` of each written table of ``tables``; a mark file missing or not
    JSON reads as ``None`` (as :func:`write_marks` treats it)."""
    fs, root = fsspec.core.url_to_fs(warehouse)
    for t in tables:
        folder = posixpath.join(root.rstrip("/"), t)
        if not exists(warehouse, t):  # written = a Delta table (a folder alone may be a first write under way)
            continue
        try:
            doc = json.loads(fs.cat_file(posixpath.join(folder, MARK_FILE)))
        except (FileNotFoundError, ValueError):
            doc = None
        yield t, doc


def read_marks(warehouse: str, job_id: str) -> dict[str, str]:
    """``{table: passed|failed|unvalidated}`` for one job, from the marks of every written table."""
    return read_jobs_marks(warehouse, [job_id])[job_id]


def read_jobs_marks(warehouse: str, job_ids) -> dict[str, dict[str, str]]:
    """``{job_id: {table: passed|failed|unvalidated}}`` for each of ``job_ids`` (:func:`read_marks` of each),
    every written table's mark file read once."""
    docs = [(t, (doc or {}).get("jobs") or {}) for t, doc in _mark_docs(warehouse, TABLES)]
    return {j: {t: jobs.get(j, {}).get("status", "unvalidated") for t, jobs in docs} for j in job_ids}


def read_table_marks(warehouse: str, tables) -> dict[str, dict]:
    """``{table: {"status": passed|failed|unvalidated, "validated_at", "failed": [...]}}``: the ``"table"`` entry of
    each written table of ``tables`` (the status of its last validation as a whole, :func:`write_marks`)."""
    return {
        t: (doc or {}).get("table") or {"status": "unvalidated", "validated_at": None, "failed": []}
        for t, doc in _mark_docs(warehouse, tables)
    }
