"""Ad-hoc Spark SQL over the warehouse: every table registered as a view by its name.

``tracelake sql "<query>" --warehouse W`` runs one query; ``tracelake shell --warehouse W`` is an
interactive SQL prompt. The README lists example queries (between ``<!-- sql-examples:begin -->``
and ``<!-- sql-examples:end -->``); a test runs each of them.
"""

from __future__ import annotations

import re

from jobs.warehouse import register_views


def run_sql(spark, warehouse: str, query: str):
    """Run one Spark SQL ``query`` with the warehouse tables registered; returns a DataFrame."""
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
