"""Ad-hoc Spark SQL over the warehouse: every documented table registered as a view by its name (an empty view
of the declared schema when the table has no rows yet, :func:`jobs.warehouse.register_views`).

``tracelake sql "<query>" --warehouse W`` runs one query; ``tracelake shell --warehouse W`` is an
interactive SQL prompt. The README lists example queries (between ``<!-- sql-examples:begin -->``
and ``<!-- sql-examples:end -->``); a test runs each of them.
"""

from __future__ import annotations

import re

from jobs.warehouse import register_views


def run_sql(spark, warehouse: str, query: str):
    """Run one Spark SQL ``query`` with every documented warehouse table registered as a view (empty when it has
    no rows); returns a DataFrame (Spark's AnalysisException for a query that does not resolve)."""
    register_views(spark, warehouse)
    return spark.sql(query)


_EXAMPLE_RE = re.compile(r"```sql\n(.*?)```", re.S)


def readme_examples(readme_text: str) -> list[str]:
    """The SQL examples of the README (fenced ``sql`` blocks inside the sql-examples section)."""
    begin, end = "<!-- sql-examples:begin -->", "<!-- sql-examples:end -->"
    if begin not in readme_text or end not in readme_text:
        return []
    section = readme_text.split(begin, 1)[1].split(end, 1)[0]
    return [q.strip().rstrip(";") for q in _EXAMPLE_RE.findall(section)]
