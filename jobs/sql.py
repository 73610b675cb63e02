"""Ad-hoc Spark SQL over the warehouse: every documented table registered as a view by its name (an empty view
of the declared schema when the table has no rows yet, :func:`jobs.warehouse.register_views`).

``tracelake sql "<query>" --warehouse W`` runs one query: on one machine on the embedded engine (:func:`run_duckdb`:
DuckDB over the same table snapshots, the query translated from Spark SQL by sqlglot), on Spark with ``--master``
(:func:`run_sql`); without a query it is an interactive prompt. ``tracelake tables`` and ``tracelake describe TABLE``
say what there is (:func:`tables`, :func:`describe`). The README lists example queries (between ``<!-- sql-examples:begin -->``
and ``<!-- sql-examples:end -->``); a test runs each of them.
"""

from __future__ import annotations

import datetime as dt
import difflib
import re

import duckdb
import pyarrow as pa
import sqlglot
from sqlglot import exp
from sqlglot.dialects.duckdb import DuckDB

from jobs.warehouse import register_views, table_dataset, table_rows
from schemas import FLEET_TABLES, TABLES
from schemas.tables import declared


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


# ---------------------------------------------------------------------------------------------------------------
# The embedded engine: DuckDB over the same snapshots (no JVM), and what the shell tells about the tables


class SqlError(ValueError):
    """A query that does not run, in one or two lines: what is wrong, and the nearest table or column names."""


#: Column-name endings → the unit of their values (the column docs in schemas/tables.py say the same).
_UNITS = (
    ("_ns", "ns"),
    ("_pct", "%"),
    ("_bytes", "bytes"),
    ("_gbps", "GB/s"),
    ("_tflops", "TFLOP/s"),
    ("_hours", "h"),
    ("_hours_per_day", "h/day"),
    ("_ms", "ms"),
    ("_us", "µs"),
)


def column_unit(name: str) -> str:
    """The unit of a warehouse column by its name's ending (``step_time_ns`` → ``ns``, ``idle_pct`` → ``%``);
    ``""`` when the name does not say."""
    return next((u for suffix, u in sorted(_UNITS, key=lambda x: -len(x[0])) if name.endswith(suffix)), "")


def describe(table: str) -> list[dict]:
    """The columns of a documented table: ``name``, ``type`` (Arrow), ``unit`` (:func:`column_unit`), ``nullable``,
    ``description`` (schemas/tables.py).

    Raises:
        SqlError: no such table (the nearest names suggested).
    """
    t = _documented().get(table.lower())
    if t is None:
        raise SqlError(f"no table {table!r}{_nearest(table, _documented())}")
    return [
        {"name": c.name, "type": str(c.type), "unit": column_unit(c.name), "nullable": c.nullable, "description": c.doc}
        for c in t.columns
    ]


def tables(warehouse: str | None = None) -> list[dict]:
    """Every documented table (``schemas.TABLES``, then ``schemas.FLEET_TABLES``): ``name``, ``stage``,
    ``columns``, ``rows`` (from the table's log, without reading data; ``0`` when never written; ``None`` without
    ``warehouse``) and ``description`` (its first sentence)."""
    out = []
    for name, t in _documented().items():
        rows = (table_rows(warehouse, name) or 0) if warehouse is not None else None
        first = t.doc.split(". ")[0].rstrip(".") + "."
        out.append({"name": name, "stage": t.stage, "columns": len(t.columns), "rows": rows, "description": first})
    return out


def _documented() -> dict:
    return {**TABLES, **FLEET_TABLES}


def _nearest(name: str, options) -> str:
    """``"; did you mean x or y?"`` for the closest of ``options`` to ``name`` (difflib), or ``""``."""
    close = difflib.get_close_matches(name.lower(), [str(o) for o in options], n=3, cutoff=0.5)
    return f"; did you mean {' or '.join(close)}?" if close else ""


#: A class repr in a sqlglot message (``<class 'sqlglot.expressions.query.Where'>``) → its name (``Where``).
_CLASS_REPR = re.compile(r"<class '(?:\w+\.)*(\w+)'>")


def syntax_error(exc: Exception) -> str:
    """A sqlglot parse (or tokenize) error as one line without sqlglot's internals: where (line, column), what, and
    the text near it — ``syntax error at line 1, column 30: incomplete WHERE (near 'SELECT job_id FROM steps
    WHERE')``. What the CLI and the agents' sql tool say of a query that does not parse."""
    errors = getattr(exc, "errors", None) or []
    if not errors:  # a tokenize error: an unclosed quote or comment
        text = " ".join(str(exc).removeprefix("Error tokenizing").split()).strip("'")
        return f"syntax error: the text cannot be read near {text[-40:]!r} (an unclosed quote or comment?)"
    e = errors[0]
    what, token = str(e.get("description") or "syntax error"), " ".join(str(e.get("highlight") or "").split())
    if what.startswith("Required keyword"):  # the clause or operator left without its operand
        what = f"incomplete {token.upper() if token.replace('_', '').isalpha() else repr(token)}"
    elif what.startswith("Invalid expression / Unexpected token"):
        what = f"unexpected {token!r}"
    elif what.startswith("Expecting "):
        what = f"expected {what.removeprefix('Expecting ').strip()} before {token!r}"
    else:
        what = _CLASS_REPR.sub(lambda m: m.group(1).upper(), what).rstrip(".")
    before = " ".join(str(e.get("start_context") or "").split())
    after = " ".join(str(e.get("end_context") or "").split())
    near = " ".join(x for x in (before[-40:], token, after[:20]) if x)
    where = f"syntax error at line {e.get('line')}, column {e.get('col')}: {what}"
    return f"{where} (near {near!r})" if near else where


def referenced_tables(query: str) -> list[str]:
    """The documented tables a Spark SQL ``query`` reads (sqlglot, dialect ``spark``), in first-use order.

    Raises:
        SqlError: the text does not parse, or names a table that is neither documented nor a CTE of the query.
    """
    try:
        trees = [t for t in sqlglot.parse(query, read="spark") if t is not None]
    except sqlglot.errors.SqlglotError as exc:
        raise SqlError(syntax_error(exc)) from None
    except RecursionError:
        raise SqlError("the query nests too deeply to parse") from None
    ctes = {c.alias_or_name.lower() for t in trees for c in t.find_all(exp.CTE)}
    out: list[str] = []
    for tree in trees:
        for tab in tree.find_all(exp.Table):
            name = tab.name.lower()
            if not name or name in ctes or name in out:
                continue
            if name not in _documented():
                raise SqlError(f"no table {tab.name!r}{_nearest(name, _documented())} (tracelake tables lists them)")
            out.append(name)
    return out


class _DuckSpark(DuckDB):
    """DuckDB as the target of Spark SQL, where sqlglot's translation answers differently from Spark:
    ``percentile_approx`` becomes DuckDB's exact ``quantile_disc`` (Spark's answer on the sizes a warehouse query
    groups: a value of the column, the lower one at a tie), exact ``percentile`` DuckDB's interpolating
    ``quantile_cont``; ``collect_set`` / ``collect_list`` of only nulls are an empty list, as in Spark, not NULL."""

    class Generator(DuckDB.Generator):
        TRANSFORMS = {
            **DuckDB.Generator.TRANSFORMS,
            exp.ApproxQuantile: lambda self, e: self.func("QUANTILE_DISC", e.this, e.args.get("quantile")),
            # Spark's exact percentile interpolates between the two nearest values, as QUANTILE_CONT does
            exp.Quantile: lambda self, e: self.func("QUANTILE_CONT", e.this, e.args.get("quantile")),
        }

        def arrayuniqueagg_sql(self, expression: exp.ArrayUniqueAgg) -> str:
            return f"COALESCE({super().arrayuniqueagg_sql(expression)}, [])"

        def arrayagg_sql(self, expression: exp.ArrayAgg) -> str:
            return f"COALESCE({super().arrayagg_sql(expression)}, [])"


def to_duckdb(query: str) -> str:
    """A Spark SQL query in DuckDB's dialect (sqlglot; :class:`_DuckSpark`).

    Raises:
        SqlError: the text does not parse, or is more than one statement.
    """
    try:
        out = sqlglot.transpile(query, read="spark", write=_DuckSpark)
    except sqlglot.errors.SqlglotError as exc:
        raise SqlError(syntax_error(exc)) from None
    except RecursionError:
        raise SqlError("the query nests too deeply to parse") from None
    if len(out) != 1:
        raise SqlError(f"one query at a time ({len(out)} statements given)")
    return out[0]


#: What the embedded engine may use of this machine by default (DuckDB spills to its temp folder beyond it).
DUCKDB_MEMORY = "4GB"


def run_duckdb(
    warehouse: str, query: str, as_of=None, limit: int | None = None, memory: str = DUCKDB_MEMORY
) -> pa.Table:
    """Run one Spark SQL ``query`` on the embedded engine: DuckDB over the ``pyarrow.dataset`` of each table it
    reads (:func:`jobs.warehouse.table_dataset`: the same snapshot Spark reads, latest or ``as_of``; a table never
    written is an empty table of its declared schema), translated by :func:`to_duckdb`. DuckDB's own file access is
    off: the query sees the warehouse tables only. At most ``limit`` rows, within DuckDB's ``memory`` limit (e.g.
    ``"2GB"``; default :data:`DUCKDB_MEMORY`): a query past it spills or fails with DuckDB's out-of-memory error.

    Raises:
        SqlError: a query that does not parse or bind, in one or two lines with the nearest names.
    """
    names = referenced_tables(query)
    text = to_duckdb(query)
    con = duckdb.connect(config={"enable_external_access": False, "memory_limit": memory})
    try:
        for name in names:
            try:
                data = table_dataset(warehouse, name, as_of)
            except Exception as exc:  # noqa: BLE001 — no version at --as-of, a pre-Delta table: one line
                raise SqlError(f"table {name}: {(str(exc).splitlines() or [type(exc).__name__])[0]}") from None
            con.register(name, data if data is not None else declared(name).empty())
        rel = con.sql(text)
        if rel is None:
            raise SqlError("not a query: tracelake sql runs SELECT queries")
        return _spark_types((rel.limit(limit) if limit is not None else rel).to_arrow_table())
    except duckdb.Error as exc:
        raise SqlError(_duck_error(exc, names)) from None
    finally:
        con.close()


def _spark_types(t: pa.Table) -> pa.Table:
    """DuckDB's 128-bit integers (``sum`` of an integer column: ``HUGEINT``, a ``decimal128(38, 0)`` in Arrow) as
    64-bit ones, the type Spark answers with (left as they are when a value does not fit)."""
    for i, f in enumerate(t.schema):
        if pa.types.is_decimal(f.type) and f.type.scale == 0 and f.type.precision == 38:
            try:
                t = t.set_column(i, f.name, t.column(i).cast(pa.int64()))
            except pa.ArrowInvalid:
                pass
    return t


_DUCK_COLUMN = re.compile(r'Referenced column "([^"]+)" not found')


def _duck_error(exc: Exception, names: list[str]) -> str:
    """A DuckDB error in one or two lines: its first line without the error class, then DuckDB's own suggestion
    line, or the nearest column of the tables read."""
    lines = [x for x in str(exc).splitlines() if x.strip()]
    head = re.sub(r"^[A-Za-z ]+Error: ", "", lines[0]) if lines else type(exc).__name__
    hint = next((x for x in lines[1:] if x.startswith(("Candidate bindings", "Did you mean"))), "")
    if m := _DUCK_COLUMN.search(head):
        cols = [c for n in names for c in declared(n).names]
        hint = _nearest(m.group(1), cols).removeprefix("; ").capitalize() or hint
    return head + (f"\n{hint}" if hint else "")
