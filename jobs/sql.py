"""Ad-hoc Spark SQL over the warehouse: every table registered as a view by its name.

``tracelake sql "<query>" --warehouse W`` runs one query; ``tracelake shell --warehouse W`` is an
interactive SQL prompt. The README lists example queries (between ``<!-- sql-examples:begin -->``
and ``<!-- sql-examples:end -->``); a test runs each of them.
"""

from __future__ import annotations

import posixpath
import re

from schemas import FLEET_TABLES, TABLES


def register_tables(spark, warehouse: str) -> list[str]:
    """Create a temp view per warehouse table that exists under ``warehouse``.

    Returns:
        The names of the registered views (tables not written yet are skipped).
    """
    registered = []
    for name in [*TABLES, *FLEET_TABLES]:
        path = posixpath.join(warehouse.rstrip("/"), name)
        try:
            spark.read.parquet(path).createOrReplaceTempView(name)
        except Exception as exc:  # the table was never written
            if "PATH_NOT_FOUND" in str(exc) or "UNABLE_TO_INFER_SCHEMA" in str(exc):
                continue
            raise
        registered.append(name)
    return registered


def run_sql(spark, warehouse: str, query: str):
    """Run one Spark SQL ``query`` with the warehouse tables registered; returns a DataFrame."""
    register_tables(spark, warehouse)
    return spark.sql(query)


_EXAMPLE_RE = re.compile(r"```sql\n(.*?)```", re.S)


def readme_examples(readme_text: str) -> list[str]:
    """The SQL examples of the README (fenced ``sql`` blocks inside the sql-examples section)."""
    begin, end = "<!-- sql-examples:begin -->", "<!-- sql-examples:end -->"
    if begin not in readme_text or end not in readme_text:
        return []
    section = readme_text.split(begin, 1)[1].split(end, 1)[0]
    return [q.strip().rstrip(";") for q in _EXAMPLE_RE.findall(section)]
