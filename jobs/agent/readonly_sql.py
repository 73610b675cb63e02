"""The read-only SQL of the agents' ``sql`` tool: one SELECT over the warehouse views, checked, bounded, timed.

Layers, each on its own enough to refuse what it catches, applied before anything runs:

1. :func:`check_query` parses the text with sqlglot (dialect ``spark``): exactly one statement, a query
   (SELECT / set operation, WITH allowed), every table reference a bare warehouse view or a CTE in scope,
   no table-valued function in FROM, no function of :data:`DENIED_FUNCTIONS`.
2. :func:`run_readonly` parses it again with Spark's own parser and refuses any ``Command`` plan
   (``spark.sql`` runs commands eagerly, so this comes before it), then analyzes it and refuses a plan
   that reads a file outside the warehouse (``DataFrame.inputFiles``) or joins two unbounded inputs
   without an equality condition (its tasks would outlive a cancel: :func:`_refuse_unbounded_non_equi_join`).
3. The query runs in a Spark job group, is cancelled past its time limit, and returns at most
   ``max_rows`` rows of JSON-safe values.

Errors: :class:`UnsafeQuery` (refused, the message says what and why), :class:`QueryTimeout`.
"""

from __future__ import annotations

import datetime as dt
import decimal
import os
import posixpath
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import sqlglot
from sqlglot import exp

from jobs.common.floats import finite_float
from jobs.spark import is_connect
from jobs.warehouse import register_views


class UnsafeQuery(ValueError):
    """A query the sql tool refuses; the message says what and why."""


class QueryTimeout(TimeoutError):
    """The query ran past its time limit and was cancelled."""


#: Functions that run arbitrary JVM code (``udf*``, any name starting so, is refused too).
_RUNS_CODE = frozenset({"java_method", "reflect", "try_reflect"})
#: Functions that read files or reveal which files a row came from.
_READS_FILES = frozenset({"read_files", "input_file_name", "input_file_block_start", "input_file_block_length"})
#: Functions that reveal the server: its user, catalog, database, Spark version.
_REVEALS_SERVER = frozenset(
    {"current_user", "session_user", "user", "current_catalog", "current_database", "current_schema", "version"}
)
#: Functions that raise errors with a message of the caller's choosing.
_RAISES = frozenset({"assert_true", "raise_error"})
#: Names a function or table indirectly, out of reach of the checks here.
_INDIRECT = frozenset({"identifier"})
#: Function names refused anywhere in a query (lower case): they run code, read files, reveal the server,
#: raise chosen errors or name objects indirectly. Any name starting with :data:`DENIED_PREFIXES` too.
DENIED_FUNCTIONS: frozenset[str] = _RUNS_CODE | _READS_FILES | _REVEALS_SERVER | _RAISES | _INDIRECT
#: Prefixes of refused function names (user-defined functions run code).
DENIED_PREFIXES = ("udf",)

#: Data source names Spark reads a path with in ``format.`path```.
FILE_FORMATS = frozenset({"parquet", "json", "csv", "orc", "text", "avro", "binaryfile", "delta", "file"})

_QUERY_TYPES = (exp.Select, exp.Union, exp.Except, exp.Intersect)
#: Statements (and clauses) a query may not contain anywhere, with the keyword an error names.
_STATEMENTS = {
    "Insert": "INSERT",
    "Create": "CREATE",
    "Drop": "DROP",
    "Alter": "ALTER",
    "Delete": "DELETE",
    "Update": "UPDATE",
    "Merge": "MERGE",
    "TruncateTable": "TRUNCATE",
    "Set": "SET",
    "LoadData": "LOAD DATA",
    "Cache": "CACHE",
    "Uncache": "UNCACHE",
    "Refresh": "REFRESH",
    "Use": "USE",
    "Describe": "DESCRIBE",
    "Declare": "DECLARE",
    "Transaction": "BEGIN",
    "Commit": "COMMIT",
    "Rollback": "ROLLBACK",
    "Grant": "GRANT",
    "Revoke": "REVOKE",
    "Analyze": "ANALYZE",
    "Copy": "COPY",
    "Comment": "COMMENT",
    "Kill": "KILL",
    "Pragma": "PRAGMA",
    "Show": "SHOW",
    "Values": "VALUES",
    "Command": "COMMAND",
}
_STATEMENT_TYPES = tuple(getattr(exp, n) for n in _STATEMENTS if n != "Values" and hasattr(exp, n))


def _keyword(stmt: exp.Expression, text: str) -> str:
    """The statement's SQL keyword for an error message (``INSERT``, ``CREATE FUNCTION``, ``ADD JAR``)."""
    if isinstance(stmt, exp.Command):
        return str(stmt.this).upper()
    name = _STATEMENTS.get(type(stmt).__name__)
    if name in ("CREATE", "DROP", "ALTER") and stmt.args.get("kind"):
        return f"{name} {str(stmt.args['kind']).upper()}"
    if name:
        return name
    words = text.split()
    return words[0].upper() if words else type(stmt).__name__.upper()


def _function_names(node: exp.Func) -> set[str]:
    """Every lower-case name ``node`` is known by (as written for an unknown function, sqlglot's names else)."""
    names = {node.sql_name().lower(), *(n.lower() for n in getattr(type(node), "_sql_names", ()) or ())}
    if isinstance(node, exp.Anonymous):
        names = {node.name.lower()}
    return names - {"anonymous"}


def _cte_names(with_: exp.With | None, upto: int | None = None) -> set[str]:
    if with_ is None:
        return set()
    ctes = with_.expressions if upto is None else with_.expressions[: upto + 1]
    return {c.alias_or_name.lower() for c in ctes}


def _visible_ctes(table: exp.Table) -> set[str]:
    """Names of the CTEs in scope at ``table``: those of every enclosing WITH, and inside a CTE's body only
    that CTE (recursive) and the ones before it."""
    names: set[str] = set()
    node, parent = table, table.parent
    while parent is not None:
        if isinstance(parent, exp.With) and isinstance(node, exp.CTE):
            names |= _cte_names(parent, next(i for i, c in enumerate(parent.expressions) if c is node))
        else:
            with_ = parent.args.get("with_") or parent.args.get("with")
            if isinstance(with_, exp.With) and node is not with_:
                names |= _cte_names(with_)
        node, parent = parent, parent.parent
    return names


def _check_table(table: exp.Table, views: set[str], listing: str) -> None:
    if not isinstance(table.this, exp.Identifier):
        fn = table.this
        name = fn.name if isinstance(fn, exp.Anonymous) else fn.sql_name() if isinstance(fn, exp.Func) else fn.sql()
        raise UnsafeQuery(
            f"table-valued function {name.lower()}(...) in FROM is not allowed (query the warehouse views: {listing})"
        )
    db, catalog = table.args.get("db"), table.args.get("catalog")
    if db is not None or catalog is not None:
        ref = ".".join(part.sql(dialect="spark") for part in table.parts)
        if catalog is None and db.name.lower() in FILE_FORMATS:
            raise UnsafeQuery(
                f"file-reading table reference {db.name}.`{table.name}` is not allowed "
                f"(query the warehouse views: {listing})"
            )
        raise UnsafeQuery(f"qualified table reference {ref} is not allowed: use a bare view name (views: {listing})")
    name = table.name.lower()
    if name not in views and name not in _visible_ctes(table):
        raise UnsafeQuery(f"table `{table.name}` is not a warehouse view (views: {listing})")


def check_query(query: str, views: Iterable[str]) -> str:
    """Check that ``query`` is one read-only SELECT over ``views`` (sqlglot, dialect ``spark``).

    Args:
        query: the SQL text.
        views: the names a query may read (case-insensitive), e.g. :func:`jobs.warehouse.register_views`'s.

    Returns:
        ``query`` stripped of surrounding whitespace and one trailing ``;``.

    Raises:
        UnsafeQuery: the text does not parse, is empty or holds more than one statement; the statement is
            not a query (DDL, DML, SET, ADD JAR, EXPLAIN, SHOW, ... or ``SELECT ... INTO``); a table reference
            is neither a bare view name nor a CTE in scope (``parquet.`/path```, ``default.steps``, a
            table-valued function such as ``range(10)``); a function of :data:`DENIED_FUNCTIONS` or
            starting with :data:`DENIED_PREFIXES` is called.
    """
    views = {v.lower() for v in views}
    listing = ", ".join(sorted(views)) or "none"
    text = query.strip()
    if text.endswith(";"):
        text = text[:-1].rstrip()
    try:
        parsed = sqlglot.parse(text, dialect="spark")
    except sqlglot.errors.SqlglotError as exc:
        raise UnsafeQuery(f"could not parse the query: {str(exc).splitlines()[0]}") from exc
    statements = [s for s in parsed if s is not None and not isinstance(s, exp.Semicolon)]
    if not statements:
        raise UnsafeQuery("the query is empty: send one SELECT statement")
    if len(statements) > 1:
        raise UnsafeQuery(f"only one statement is allowed (got {len(statements)})")
    stmt = statements[0]
    query_node = stmt
    while isinstance(query_node, exp.Subquery):
        query_node = query_node.this
    if not isinstance(query_node, _QUERY_TYPES):
        raise UnsafeQuery(f"only SELECT queries are allowed (got {_keyword(query_node, text)})")
    for node in stmt.walk():
        if isinstance(node, exp.Into):
            raise UnsafeQuery("only SELECT queries are allowed (got SELECT ... INTO)")
        if isinstance(node, _STATEMENT_TYPES):
            raise UnsafeQuery(f"only SELECT queries are allowed (got {_keyword(node, text)} inside the query)")
        if isinstance(node, exp.Func):
            for name in _function_names(node):
                if name in DENIED_FUNCTIONS or name.startswith(DENIED_PREFIXES):
                    raise UnsafeQuery(f"function {name} is not allowed ({_why(name)})")
    for table in stmt.find_all(exp.Table):
        if table.find_ancestor(exp.Hint) is None:  # hints name aliases, not tables
            _check_table(table, views, listing)
    return text


def _why(name: str) -> str:
    if name in _RUNS_CODE or name.startswith(DENIED_PREFIXES):
        return "it runs code"
    if name in _READS_FILES:
        return "it reads files"
    if name in _REVEALS_SERVER:
        return "it reveals the server"
    if name in _RAISES:
        return "it raises errors on demand"
    return "it names objects indirectly"


@dataclass
class SqlResult:
    """The answer of :func:`run_readonly`.

    Attributes:
        columns: the result's column names, in order.
        rows: up to ``max_rows`` rows, each a list of JSON-safe values aligned with ``columns``: str, int,
            float, bool or None; timestamps and dates as ISO-8601 strings (timestamps in the session time
            zone, no offset); decimals as float; bytes as hex; structs as dicts, arrays as lists, maps as
            dicts with string keys; NaN and infinities as None.
        n_rows: ``len(rows)``.
        truncated: the query had more than ``max_rows`` rows (the rest were not fetched).
        elapsed_ms: wall time of the whole call (views, checks, run, conversion), milliseconds.
    """

    columns: list[str]
    rows: list[list]
    n_rows: int
    truncated: bool
    elapsed_ms: float


def run_readonly(spark, warehouse: str, query: str, max_rows: int = 200, timeout_s: float = 30.0) -> SqlResult:
    """Run one read-only SELECT over the warehouse views, at most ``max_rows`` rows within ``timeout_s``.

    Args:
        spark: a SparkSession (classic; on Spark Connect the JVM parser check is skipped and the query is
            cancelled by tag).
        warehouse: the warehouse root (local folder or URI); its tables are registered as temp views.
        query: the SQL text (:func:`check_query`).
        max_rows: the most rows returned (>= 0); one more is fetched to tell whether there were more.
        timeout_s: seconds the query may run (after the checks) before its Spark jobs are cancelled.

    Returns:
        :class:`SqlResult`.

    Raises:
        UnsafeQuery: refused by :func:`check_query`, by Spark's parser (a command, or text Spark cannot
            parse), because the plan reads files outside ``warehouse`` or joins two unbounded inputs without
            an equality condition; nothing ran.
        QueryTimeout: the query ran past ``timeout_s`` and its jobs were cancelled.
        ValueError: ``max_rows`` is negative.
        pyspark's AnalysisException (unknown column, type error) and other execution errors, as raised.
    """
    if max_rows < 0:
        raise ValueError(f"max_rows must be >= 0 (got {max_rows})")
    t0 = time.perf_counter()
    views = register_views(spark, warehouse)
    q = check_query(query, views)
    _check_spark_plan(spark, q)
    df = spark.sql(q)  # a query: analysis only, nothing runs
    outside = [f for f in df.inputFiles() if not _within(warehouse, f)]
    if outside:
        shown = ", ".join(outside[:3]) + (f" (+{len(outside) - 3} more)" if len(outside) > 3 else "")
        raise UnsafeQuery(f"the query reads files outside the warehouse: {shown}")
    _refuse_unbounded_non_equi_join(df)
    rows = _collect(spark, df.limit(max_rows + 1), timeout_s)
    out = [[_json_safe(v) for v in row] for row in rows[:max_rows]]
    return SqlResult(
        columns=list(df.columns),
        rows=out,
        n_rows=len(out),
        truncated=len(rows) > max_rows,
        elapsed_ms=(time.perf_counter() - t0) * 1e3,
    )


#: A join without an equality condition is allowed when one side holds at most this many rows for sure
#: (a ``LIMIT``, an aggregate without grouping): its tasks then reach Spark's kill checks often.
MAX_NON_EQUI_SIDE_ROWS = 100_000


def _children(node) -> list:
    seq = node.children()
    return [seq.apply(i) for i in range(seq.size())]


def _has_equality(expr) -> bool:
    if expr.getClass().getSimpleName() in ("EqualTo", "EqualNullSafe"):
        return True
    return any(_has_equality(c) for c in _children(expr))


def _max_rows(plan) -> int | None:
    rows = plan.maxRows()
    return int(rows.get()) if rows.isDefined() else None


def _refuse_unbounded_non_equi_join(df) -> None:
    """Refuse a join without an equality condition (a cross join, or ``ON a.x < b.y``) between two sides
    that may both be large: its tasks compare every pair of rows and reach Spark's kill checks so rarely that
    a cancelled one keeps the cores busy long after its time limit. Allowed when a side holds at most
    :data:`MAX_NON_EQUI_SIDE_ROWS` rows by the plan's own bound (``LimitNode``, a global aggregate).
    Skipped on Spark Connect.

    Raises:
        UnsafeQuery: naming the join.
    """
    jdf = getattr(df, "_jdf", None)
    if jdf is None:
        return
    todo = [jdf.queryExecution().optimizedPlan()]
    while todo:
        node = todo.pop()
        todo += _children(node)
        if node.getClass().getSimpleName() != "Join":
            continue
        cond = node.condition()
        if cond.isDefined() and _has_equality(cond.get()):
            continue
        bounds = [b for b in (_max_rows(node.left()), _max_rows(node.right())) if b is not None]
        if not bounds or min(bounds) > MAX_NON_EQUI_SIDE_ROWS:
            raise UnsafeQuery(
                f"the query joins two inputs without an equality condition ({node.joinType()} join) and neither "
                f"side is bounded to {MAX_NON_EQUI_SIDE_ROWS:,} rows: every pair of rows would be compared, "
                "which a time limit cannot stop promptly; join on equal columns, or bound one side with LIMIT"
            )


def _check_spark_plan(spark, q: str) -> None:
    """Refuse ``q`` when Spark's parser makes a command of it (or cannot parse it); skipped on Spark Connect."""
    jsession = getattr(spark, "_jsparkSession", None)
    if jsession is None:
        return
    try:
        plan = jsession.sessionState().sqlParser().parsePlan(q)
    except Exception as exc:  # noqa: BLE001 — only a parse error is the query's fault
        if "ParseException" in type(exc).__name__ or "ParseException" in str(exc):
            raise UnsafeQuery(f"could not parse the query: {str(exc).strip().splitlines()[0]}") from exc
        raise
    command = spark._jvm.java.lang.Class.forName("org.apache.spark.sql.catalyst.plans.logical.Command")
    kind = plan.getClass().getSimpleName()
    if command.isInstance(plan) or "Command" in kind or "Statement" in kind:
        raise UnsafeQuery(f"only SELECT queries are allowed (Spark parses it as {kind})")


def _resolved(uri: str) -> tuple[str, str, str]:
    """``(scheme, authority, normalized path)`` of a local path or URI (local paths resolved, links followed)."""
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    if scheme in ("", "file"):
        path = unquote(parts.path) if scheme else uri
        return "file", "", os.path.realpath(path)
    if scheme in ("s3", "s3a", "s3n"):
        scheme = "s3"
    return scheme, parts.netloc, posixpath.normpath(unquote(parts.path) or "/")


def _within(root: str, path: str) -> bool:
    """Whether the file ``path`` (a URI of ``DataFrame.inputFiles``) lies under the folder ``root``."""
    r, p = _resolved(root), _resolved(path)
    if r[:2] != p[:2]:
        return False
    base = r[2].rstrip("/") + "/"
    return p[2] == r[2] or p[2].startswith(base)


def _collect(spark, df, timeout_s: float) -> list:
    """``df.collect()`` in a worker thread whose Spark jobs are cancelled past ``timeout_s`` seconds.

    Raises:
        QueryTimeout: the jobs were cancelled; whatever ``collect`` raised otherwise.
    """
    classic = not is_connect(spark)
    sc = spark.sparkContext if classic else None
    group = f"tracelake-mcp-sql-{uuid.uuid4().hex}"
    box: dict = {}

    def work():
        # The job group (or tag) is a property of the thread that submits the jobs: set it here.
        if classic:
            sc.setJobGroup(group, "tracelake mcp sql", interruptOnCancel=True)
        else:
            spark.addTag(group)
        try:
            box["rows"] = df.collect()
        except BaseException as exc:  # noqa: BLE001 — handed to the caller's thread
            box["error"] = exc
        finally:
            if classic:
                sc._jsc.clearJobGroup()
            else:
                spark.removeTag(group)

    worker = threading.Thread(target=work, name=group, daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        deadline = time.monotonic() + 30.0
        while worker.is_alive() and time.monotonic() < deadline:  # a query may start several jobs: cancel each
            if classic:
                # and the group's later ones: a broadcast or an adaptive stage may submit a job from another thread
                # after this cancel, which plain cancelJobGroup would let run to its end
                sc._jsc.sc().cancelJobGroupAndFutureJobs(group, f"tracelake sql: past its {timeout_s:g} s limit")
            else:
                spark.interruptTag(group)
            worker.join(0.5)
        raise QueryTimeout(f"the query ran past {timeout_s:g} s and was cancelled")
    if "error" in box:
        raise box["error"]
    return box["rows"]


def _json_safe(v):
    """A collected Spark value as JSON-safe Python (see :class:`SqlResult`)."""
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return finite_float(v)
    if isinstance(v, decimal.Decimal):
        return _json_safe(float(v))
    if isinstance(v, (dt.datetime, dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, dt.timedelta):
        return v.total_seconds()
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    if hasattr(v, "asDict"):  # a struct (pyspark Row)
        return {k: _json_safe(x) for k, x in v.asDict(recursive=False).items()}
    if isinstance(v, dict):
        return {str(_json_safe(k)): _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    return str(v)  # e.g. a VariantVal, an interval
