"""Ad-hoc Spark SQL over the warehouse: every documented table registered as a view by its name (an empty view
of the declared schema when the table has no rows yet, :func:`jobs.warehouse.register_views`).

``tracelake sql "<query>" --warehouse W`` runs one query; ``tracelake shell --warehouse W`` is an
interactive SQL prompt. The README lists example queries (between ``<!-- sql-examples:begin -->``
and ``<!-- sql-examples:end -->``); a test runs each of them.
"""

from __future__ import annotations

import datetime as dt
import re

from jobs.warehouse import register_views


def run_sql(spark, warehouse: str, query: str, as_of=None):
    """Run one Spark SQL ``query`` with every documented warehouse table registered as a view (empty when it has
    no rows) — each table's latest version, or the one current at ``as_of`` (a version number or a time:
    :data:`jobs.warehouse.AsOf`); returns a DataFrame (Spark's AnalysisException for a query that does not
    resolve)."""
    register_views(spark, warehouse, as_of=as_of)
    return spark.sql(query)


def parse_as_of(text: str | None):
    """``--as-of`` text → a version number (digits) or a UTC ``datetime`` (ISO 8601; a time without zone is UTC);
    ``None`` for ``None``.

    Raises:
        ValueError: neither a version number nor an ISO 8601 time.
    """
    if text is None:
        return None
    if text.strip().isdigit():
        return int(text)
    try:
        t = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"--as-of {text!r}: expected a table version (e.g. 12) or an ISO 8601 time") from None
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


_EXAMPLE_RE = re.compile(r"```sql\n(.*?)```", re.S)


def readme_examples(readme_text: str) -> list[str]:
    """The SQL examples of the README (fenced ``sql`` blocks inside the sql-examples section)."""
    begin, end = "<!-- sql-examples:begin -->", "<!-- sql-examples:end -->"
    if begin not in readme_text or end not in readme_text:
        return []
    section = readme_text.split(begin, 1)[1].split(end, 1)[0]
    return [q.strip().rstrip(";") for q in _EXAMPLE_RE.findall(section)]
