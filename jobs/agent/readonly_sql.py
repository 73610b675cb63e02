"""The read-only SQL of the agents' ``sql`` tool: the check every query passes before anything runs.

:func:`check_query` parses the text with sqlglot (dialect ``spark``): exactly one statement, a query (SELECT / set
operation, WITH allowed), every table reference a bare warehouse view or a CTE in scope, no table-valued function in
FROM, no function of :data:`DENIED_FUNCTIONS`. The query then runs on the embedded engine in a child process
(:mod:`jobs.agent.sql_engine`): with its file access off, under a memory limit, killed at its time limit; its rows are
made JSON-safe by :func:`json_safe`.

Errors: :class:`UnsafeQuery` (refused, the message says what and why), :class:`QueryTimeout`.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Iterable
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp

from jobs.common.floats import finite_float
from jobs.sql import syntax_error


class UnsafeQuery(ValueError):
    """A query the sql tool refuses; the message says what and why."""


class QueryTimeout(TimeoutError):
    """The query ran past its time limit and was cancelled."""


#: Functions that run arbitrary JVM code (``udf*``, any name starting so, is refused too).
_RUNS_CODE = frozenset({"java_method", "reflect", "try_reflect"})
#: Functions that read files or reveal which files a row came from.
_READS_FILES = frozenset({"read_files", "input_file_name", "input_file_block_start", "input_file_block_length"})
#: Functions that reveal the server: its user, catalog, database, engine version, settings, environment.
_REVEALS_SERVER = frozenset(
    {
        "current_user",
        "session_user",
        "user",
        "current_catalog",
        "current_database",
        "current_schema",
        "version",
        "current_setting",
        "getenv",
    }
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


def check_query(query: str, views: Iterable[str], bounded: bool = True) -> str:
    """Check that ``query`` is one read-only SELECT over ``views`` (sqlglot, dialect ``spark``).

    Args:
        query: the SQL text.
        views: the names a query may read (case-insensitive), e.g. :func:`jobs.warehouse.register_views`'s.
        bounded: also refuse what only a time limit would end (a join without an equality condition, a call that
            generates more than :data:`MAX_GENERATED`): the sql tool's server; ``tracelake sql``'s user can stop
            their own query.

    Returns:
        ``query`` stripped of surrounding whitespace and one trailing ``;``.

    Raises:
        UnsafeQuery: the text does not parse, is empty or holds more than one statement; the statement is
            not a query (DDL, DML, SET, ADD JAR, EXPLAIN, SHOW, ... or ``SELECT ... INTO``); a table reference
            is neither a bare view name nor a CTE in scope (``parquet.`/path```, ``default.steps``, a
            table-valued function such as ``range(10)``); a function of :data:`DENIED_FUNCTIONS` or
            starting with :data:`DENIED_PREFIXES` is called; with ``bounded``, a join or call that grows past bounds.
    """
    views = {v.lower() for v in views}
    listing = ", ".join(sorted(views)) or "none"
    text = query.strip()
    if text.endswith(";"):
        text = text[:-1].rstrip()
    try:
        parsed = sqlglot.parse(text, dialect="spark")
    except sqlglot.errors.SqlglotError as exc:
        raise UnsafeQuery(syntax_error(exc)) from None
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
            if bounded:
                _check_generated_size(node)
    for table in stmt.find_all(exp.Table):
        if table.find_ancestor(exp.Hint) is None:  # hints name aliases, not tables
            _check_table(table, views, listing)
    for join in stmt.find_all(exp.Join) if bounded else ():
        _check_join(join)
    return text


def _check_join(join: exp.Join) -> None:
    """Refuse a join of two tables without an equality condition (a CROSS JOIN, a comma, ``ON a.x < b.y``): it grows
    as the product of the tables and would only end at the time limit. A side that is a subquery (``LIMIT``ed, an
    aggregate) is the caller's bound and passes.

    Raises:
        UnsafeQuery: naming the joined table.
    """
    if join.args.get("using") or (join.args.get("on") is not None and join.args["on"].find(exp.EQ) is not None):
        return
    select = join.parent
    left = select.args.get("from_") or select.args.get("from") if isinstance(select, exp.Select) else None
    left_table = isinstance(left, exp.From) and isinstance(left.this, exp.Table)
    if isinstance(join.this, exp.Table) and left_table:
        raise UnsafeQuery(
            f"a join of table {join.this.name} without an equality condition is not allowed (it grows as the product "
            "of the tables): join ON a column of each, or join a LIMITed subquery"
        )


#: The most elements or characters one function call may generate from constants (``sequence(1, 1e9)``,
#: ``repeat('x', 1e9)``): the engine would build them before any time limit could matter.
MAX_GENERATED = 10_000_000


def _number(node) -> float | None:
    """The value of a numeric literal (``1e9``, ``-5``, ``CAST(3 AS INT)``), else None."""
    if isinstance(node, exp.Cast):
        return _number(node.this)
    if isinstance(node, exp.Neg):
        v = _number(node.this)
        return -v if v is not None else None
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            return float(node.this)
        except ValueError:
            return None
    return None


def _check_generated_size(node: exp.Func) -> None:
    """Refuse a call that generates more than :data:`MAX_GENERATED` elements or characters from its constants:
    ``sequence``/``generate_series``/``range`` (|end − start| / step), ``repeat``, ``lpad``/``rpad``, ``space``.

    Raises:
        UnsafeQuery: naming the call and the size.
    """
    if isinstance(node, exp.GenerateSeries):
        start, end, step = (_number(node.args.get(k)) for k in ("start", "end", "step"))
        size = abs(end - start) / max(abs(step or 1.0), 1e-300) if start is not None and end is not None else None
    elif isinstance(node, exp.Repeat):
        size = _number(node.args.get("times"))
    elif isinstance(node, exp.Pad):
        size = _number(node.args.get("expression"))
    elif isinstance(node, exp.Space):
        size = _number(node.this)
    else:
        return
    if size is not None and size > MAX_GENERATED:
        raise UnsafeQuery(
            f"{node.sql(dialect='spark')[:60]} would generate {size:,.0f} elements or characters; the sql tool builds "
            f"at most {MAX_GENERATED:,}"
        )


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
    """The answer of :meth:`jobs.agent.sql_engine.SqlEngines.run`.

    Attributes:
        columns: the result's column names, in order.
        rows: up to ``max_rows`` rows, each a list of JSON-safe values aligned with ``columns``: str, int,
            float, bool or None; timestamps and dates as ISO-8601 strings (timestamps in the session time
            zone, no offset); decimals as float; bytes as hex; structs as dicts, arrays as lists, maps as
            dicts with string keys; NaN and infinities as None.
        n_rows: ``len(rows)``.
        truncated: the query had more than ``max_rows`` rows (the rest were not fetched).
        elapsed_ms: wall time of the whole call (check, run, conversion), milliseconds.
        tables_read: ``{table: version}`` of the tables the query read.
    """

    columns: list[str]
    rows: list[list]
    n_rows: int
    truncated: bool
    elapsed_ms: float
    tables_read: dict = field(default_factory=dict)


def json_safe(v):
    """A result value as JSON-safe Python (see :class:`SqlResult`)."""
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return finite_float(v)
    if isinstance(v, decimal.Decimal):
        return json_safe(float(v))
    if isinstance(v, (dt.datetime, dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, dt.timedelta):
        return v.total_seconds()
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    if isinstance(v, dict):
        return {str(json_safe(k)): json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_safe(x) for x in v]
    return str(v)  # e.g. a VariantVal, an interval
