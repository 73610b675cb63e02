"""The ``sql`` tool's engine: the embedded SQL engine (:func:`jobs.sql.run_duckdb`, DuckDB over the warehouse's table
snapshots) in child processes that are killed and started again when a query runs past its time limit.

Why a process: a query's work must really stop when it is cancelled. A thread cannot be stopped, and Spark's job
cancel left a regex over table rows running on both task slots (issue 33); a killed process frees its CPU and memory
at once. Each engine process runs one query at a time under DuckDB's memory limit (``memory_limit``: a query past it
fails with DuckDB's out-of-memory error instead of growing the server) with its own file access off (the warehouse
tables are the only data it sees). The other MCP tools read the tables with pyarrow in the server's own threads: they
never wait on an engine.

:class:`SqlEngines` holds ``n`` engine processes; :meth:`SqlEngines.run` takes a free one (waiting at most the time
limit), checks the query (:func:`jobs.agent.readonly_sql.check_query`), runs it there and returns a
:class:`jobs.agent.readonly_sql.SqlResult`.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import re
import threading
import time
from multiprocessing.connection import Connection

from jobs.agent.readonly_sql import QueryTimeout, SqlResult, UnsafeQuery, check_query, json_safe
from jobs.warehouse import reads_logged
from schemas.tables import FLEET_TABLES, TABLES

#: DuckDB's memory limit in each engine process.
ENGINE_MEMORY = "2GB"
#: The longest text a cell of an answer keeps, characters; a longer one is cut and says so (the answer's size is
#: bounded by the row cap × this, then by the tools' character cap).
MAX_CELL_CHARS = 2000


class EngineError(RuntimeError):
    """A query the engine could not run (a parse, bind or execution error), in one or two lines."""


def _serve(conn: Connection, warehouse: str, memory: str) -> None:
    """An engine process: answer ``(query, max_rows)`` requests on ``conn`` until it closes."""
    import jobs.sql as engine  # why: the child's own import of DuckDB and the warehouse readers

    while True:
        try:
            query, max_rows = conn.recv()
        except EOFError:
            return
        try:
            with reads_logged() as read:  # the table versions the answer states (``tables_read``)
                t = engine.run_duckdb(warehouse, query, limit=max_rows + 1, memory=memory)
            rows = [[json_safe(v) for v in r.values()] for r in t.to_pylist()]
            conn.send(("ok", t.column_names, rows, dict(read)))
        except engine.SqlError as exc:
            conn.send(("error", str(exc)))
        except Exception as exc:  # noqa: BLE001 — any engine failure is the caller's answer, in one line
            conn.send(("error", f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"))


class _Engine:
    """One engine process and its pipe, started on first use and after a kill."""

    def __init__(self, warehouse: str, memory: str):
        self.warehouse, self.memory = warehouse, memory
        self.proc: mp.process.BaseProcess | None = None
        self.conn: Connection | None = None

    def _start(self) -> None:
        ctx = mp.get_context("forkserver")  # never fork the server's threads
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, self.warehouse, self.memory), daemon=True)
        self.proc.start()
        child.close()
        self.conn = parent

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.join(5)
        if self.conn is not None:
            self.conn.close()
        self.proc = self.conn = None

    def ask(self, query: str, max_rows: int, timeout_s: float, limit_s: float | None = None):
        """Run ``query`` in this process, waiting ``timeout_s`` (the time left of the query's limit ``limit_s``,
        which a timeout names) before killing it."""
        if self.proc is None or not self.proc.is_alive():
            self.kill()
            self._start()
        assert self.conn is not None
        try:
            self.conn.send((query, max_rows))
            answered = self.conn.poll(timeout_s)
            reply = self.conn.recv() if answered else None
        except (EOFError, OSError):  # the process died (DuckDB out of memory, killed): a fresh one next time
            self.kill()
            raise EngineError(
                "the query's engine process ended (out of memory?); the next query starts another"
            ) from None
        if not answered:
            self.kill()  # the work stops with the process; the next query starts a fresh one
            raise QueryTimeout(
                f"the query ran past {limit_s or timeout_s:g} s and was stopped (its engine process was killed)"
            )
        return reply


class SqlEngines:
    """``n`` engine processes over one warehouse (module docstring).

    Args:
        warehouse: the warehouse root (local folder or URI).
        n: engine processes (queries at once).
        memory: DuckDB's memory limit per process (``"2GB"``).
    """

    def __init__(self, warehouse: str, n: int = 2, memory: str = ENGINE_MEMORY):
        self._free: queue.Queue[_Engine] = queue.Queue()
        self._all = [_Engine(warehouse, memory) for _ in range(n)]
        for e in self._all:
            self._free.put(e)
        self._lock = threading.Lock()

    def run(self, query: str, max_rows: int = 200, timeout_s: float = 30.0) -> SqlResult:
        """Run one read-only query (Spark SQL, :func:`jobs.agent.readonly_sql.check_query`): at most ``max_rows``
        rows (text cells cut at :data:`MAX_CELL_CHARS`), stopped at ``timeout_s``.

        Raises:
            UnsafeQuery: refused before anything ran (not one SELECT over the warehouse tables, a denied function,
                a query that nests too deeply to parse).
            QueryTimeout: it ran past ``timeout_s`` (its process killed), or every engine stayed busy that long.
            EngineError: it did not parse, bind or run (the message in one or two lines).
            ValueError: ``max_rows`` is negative.
        """
        if max_rows < 0:
            raise ValueError(f"max_rows must be >= 0 (got {max_rows})")
        t0 = time.perf_counter()
        try:
            q = check_query(query, [*TABLES, *FLEET_TABLES])
        except RecursionError:
            raise UnsafeQuery("the query nests too deeply to parse") from None
        try:
            engine = self._free.get(timeout=timeout_s)
        except queue.Empty:
            raise QueryTimeout(f"every sql engine stayed busy for {timeout_s:g} s: retry later") from None
        try:
            reply = engine.ask(q, max_rows, max(0.1, timeout_s - (time.perf_counter() - t0)), timeout_s)
        finally:
            self._free.put(engine)
        if reply[0] == "error":
            raise EngineError(reply[1])
        _, columns, rows, read = reply
        cut = [[cut_text(v) for v in r] for r in rows[:max_rows]]
        return SqlResult(
            columns=list(columns),
            rows=cut,
            n_rows=len(cut),
            truncated=len(rows) > max_rows,
            elapsed_ms=(time.perf_counter() - t0) * 1e3,
            tables_read=read,
        )

    def close(self) -> None:
        """Stop every engine process."""
        for e in self._all:
            e.kill()


#: The end of a text :func:`cut_text` cut: ``…[cut: N characters]``, N its length before any cut.
_CUT = re.compile(r"…\[cut: (\d+) characters\]$")


def cut_text(v, limit: int = MAX_CELL_CHARS):
    """A text value cut at ``limit`` characters, saying how long it was (``…[cut: N characters]``; a text cut
    before is cut again and keeps its first length); lists and dicts value by value; anything else as it is."""
    if isinstance(v, str) and len(v) > limit:
        m = _CUT.search(v)
        text, n = (v[: m.start()], int(m.group(1))) if m else (v, len(v))
        return text[:limit] + f"…[cut: {n} characters]"
    if isinstance(v, list):
        return [cut_text(x, limit) for x in v]
    if isinstance(v, dict):
        return {k: cut_text(x, limit) for k, x in v.items()}
    return v
