"""``tracelake mcp``: a Model Context Protocol server over one warehouse (MCP Python SDK 2.x, ``MCPServer``).

Tools (answers: :mod:`schemas.agent`, every one bounded and paged): ``list_jobs``, ``job_summary``,
``findings``, ``critical_path``, ``collectives``, ``kernels``, ``op_efficiency``, ``utilization_windows``,
``compare``, ``regressions``, ``fleet_stats``, ``fleet_findings``, ``fleet_ops``, ``host_health`` — read from the Parquet tables with pyarrow (:mod:`jobs.agent.queries`), no JVM — and
``sql``: one read-only query (Spark SQL syntax, checked by :mod:`jobs.agent.readonly_sql`) over the warehouse
tables on the embedded engine, in child processes killed at the time limit (:mod:`jobs.agent.sql_engine`). Resources: the table schemas and
the findings schema. Prompt: ``diagnose_job``.

Transports: stdio (default) and streamable HTTP (:func:`serve_http`), which binds loopback unless told
otherwise and then requires ``$TRACELAKE_MCP_TOKEN`` as a bearer token (:class:`BearerAuth`).
Everything is read-only: no tool writes to the warehouse.
"""

from __future__ import annotations

import datetime as dt
import hmac
import ipaddress
import json
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from jobs.agent import queries
from jobs.agent.paging import BadCursor, answer_chars
from jobs.agent.readonly_sql import QueryTimeout, UnsafeQuery
from jobs.agent.sql_engine import EngineError, SqlEngines, cut_text
from jobs.common.ids import DiscoveryError
from jobs.warehouse import reads_logged
from schemas import agent as A
from schemas.tables import TABLES

TOKEN_ENV = "TRACELAKE_MCP_TOKEN"
#: Rows the ``sql`` tool returns at most, and its time limit (s) unless the server is told otherwise.
SQL_MAX_ROWS, SQL_TIMEOUT_S = 500, 30.0
FINDINGS_SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "findings.v1.json"

INSTRUCTIONS = """tracelake holds every profiled training job of the fleet: per rank and ProfilerStep the HTA
temporal breakdown (idle / compute / non-compute), kernels, op efficiency against the device's roofline, the
device's idle windows inside the step with their host cause, collectives, the critical path, ranked
bottleneck findings with evidence and recommendations, fleet statistics and regressions between runs.
Start with list_jobs, fleet_findings (what would recover the most accelerator-hours), fleet_ops (which kernels
are worth tuning fleet-wide) or findings (no job_id: the fleet's largest estimated losses per step), then job_summary,
critical_path, collectives, kernels, op_efficiency, utilization_windows for one job; compare two runs; sql for
anything else (read-only SQL, Spark syntax, over the tables named in the tracelake://schemas/tables resources). Times are ns, shares %.
Answers are paged: when page.truncated is true, call again with cursor=page.next_cursor."""


JobId = Annotated[str, Field(description="Job id (list_jobs shows them).")]
Attempt = Annotated[int | None, Field(description="Job attempt (default: the latest).", ge=0)]
Limit = Annotated[int | None, Field(description="Rows per page (default 50, at most 500).", ge=1)]
Cursor = Annotated[str | None, Field(description="page.next_cursor of the previous answer.")]


def _tool_error(e: Exception):
    from mcp.server.mcpserver.exceptions import ToolError  # the MCP SDK: loaded with the server

    return ToolError(str(e))


def build_server(warehouse: str, sql: bool = True, sql_timeout_s: float = SQL_TIMEOUT_S, sql_engines: int = 2):
    """The MCP server over ``warehouse`` (an ``MCPServer``; not started).

    Args:
        warehouse: warehouse root (local folder or URI pyarrow's file systems take).
        sql: offer the ``sql`` tool (its engine processes, :class:`jobs.agent.sql_engine.SqlEngines`, start with the
            first query and stop with the server).
        sql_timeout_s: time limit of one ``sql`` query, s: past it the query's engine process is killed.
        sql_engines: ``sql`` queries that run at once (one engine process each).

    Raises:
        FileNotFoundError: ``warehouse`` is a local path that does not exist.
    """
    from mcp.server.mcpserver import MCPServer  # the MCP SDK: ~0.5 s to import, only to serve
    from mcp_types import ToolAnnotations  # the MCP SDK's wire types, with it

    if "://" not in warehouse and not Path(warehouse).is_dir():
        raise FileNotFoundError(f"warehouse {warehouse!r} is not a folder")
    engines = SqlEngines(warehouse, n=sql_engines) if sql else None

    @asynccontextmanager
    async def lifespan(_server):
        try:
            yield {}
        finally:
            if engines is not None:
                engines.close()

    server = MCPServer(
        "tracelake", instructions=INSTRUCTIONS, version=_version(), lifespan=lifespan, log_level="WARNING"
    )
    read_only = ToolAnnotations(
        read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
    )

    def tool(fn):
        server.add_tool(fn, name=fn.__name__, description=fn.__doc__, annotations=read_only, structured_output=True)
        return fn

    def answer(call, *args, **kwargs):
        try:
            with reads_logged() as read:
                out = call(warehouse, *args, **kwargs)
        except (queries.NotFound, DiscoveryError, BadCursor, ValueError) as e:
            raise _tool_error(e) from e
        return out.model_copy(update={"tables_read": dict(sorted(read.items())), "read_at": _now()})

    @tool
    def list_jobs(
        job_name: Annotated[str | None, Field(description="Manifest job_name (exact).")] = None,
        model: Annotated[str | None, Field(description="Manifest model tag (exact).")] = None,
        hardware: Annotated[str | None, Field(description="Substring of the device name, e.g. H100.")] = None,
        since: Annotated[str | None, Field(description="First capture date, YYYY-MM-DD.")] = None,
        until: Annotated[str | None, Field(description="Last capture date, YYYY-MM-DD.")] = None,
        status: Annotated[
            Literal["ingested", "partial", "quarantined", "cataloged", "passed", "failed", "unvalidated"] | None,
            Field(description="Ingest status or validation result."),
        ] = None,
        limit: Limit = None,
        cursor: Cursor = None,
    ) -> A.JobList:
        """Jobs of the warehouse, newest first, with step time, idle % and their top finding."""
        return answer(
            queries.list_jobs,
            job_name=job_name,
            model=model,
            hardware=hardware,
            since=since,
            until=until,
            status=status,
            limit=limit,
            cursor=cursor,
        )

    @tool
    def job_summary(job_id: JobId, attempt: Attempt = None, limit: Limit = None, cursor: Cursor = None) -> A.JobSummary:
        """One job: per-rank step time p50/p90/max and HTA temporal breakdown, top findings, the straggler
        rank and data quality (quarantined captures, validation, parser flags)."""
        return answer(queries.job_summary, job_id, attempt=attempt, limit=limit, cursor=cursor)

    @tool
    def findings(
        job_id: Annotated[str | None, Field(description="One job; omit for the whole fleet.")] = None,
        attempt: Attempt = None,
        rule: Annotated[str | None, Field(description="Only this rule, e.g. straggler_rank.")] = None,
        limit: Limit = None,
        cursor: Cursor = None,
    ) -> A.FindingList:
        """Bottleneck findings with evidence and a recommendation: one job's in rank order, or the fleet's
        ranked by estimated time lost per step (ns)."""
        return answer(queries.findings, job_id=job_id, attempt=attempt, rule=rule, limit=limit, cursor=cursor)

    @tool
    def critical_path(
        job_id: JobId,
        step: Annotated[int | None, Field(description="ProfilerStep (default: the longest path).")] = None,
        attempt: Attempt = None,
        scope: Annotated[
            Literal["job", "rank"],
            Field(description="job: the cross-rank path that set the step time; rank: one rank's path."),
        ] = "job",
        rank: Annotated[int | None, Field(description="The rank, for scope rank.", ge=0)] = None,
        limit: Limit = None,
        cursor: Cursor = None,
    ) -> A.CriticalPath:
        """One step's critical path: time by bound-by (compute, communication, cpu_bound, …), the ranks it
        crosses and its longest segments."""
        return answer(
            queries.critical_path,
            job_id,
            step=step,
            attempt=attempt,
            scope=scope,
            rank=rank,
            limit=limit,
            cursor=cursor,
        )

    @tool
    def collectives(
        job_id: JobId, attempt: Attempt = None, limit: Limit = None, cursor: Cursor = None
    ) -> A.Collectives:
        """One job's collectives per (collective, process group): waits, skew, last-arriving rank, bus
        bandwidth; most wait first."""
        return answer(queries.collectives, job_id, attempt=attempt, limit=limit, cursor=cursor)

    @tool
    def kernels(
        job_id: JobId,
        attempt: Attempt = None,
        top: Annotated[int | None, Field(description="Kernels per page (default 50).", ge=1)] = None,
        cursor: Cursor = None,
    ) -> A.Kernels:
        """One job's top kernels by total time over all ranks and steps."""
        return answer(queries.kernels, job_id, attempt=attempt, top=top, cursor=cursor)

    @tool
    def op_efficiency(
        job_id: JobId,
        attempt: Attempt = None,
        top: Annotated[int | None, Field(description="Op groups per page (default 50).", ge=1)] = None,
        cursor: Cursor = None,
    ) -> A.OpEfficiency:
        """One job's ops (op, shapes, dtype) against the device's datasheet roofline: kernel time, achieved
        TFLOP/s and GB/s, % of peak, compute- or memory-bound; most kernel time first."""
        return answer(queries.op_efficiency, job_id, attempt=attempt, top=top, cursor=cursor)

    @tool
    def utilization_windows(
        job_id: JobId,
        attempt: Attempt = None,
        rank: Annotated[int | None, Field(description="Only this rank (default: all).", ge=0)] = None,
        top: Annotated[int | None, Field(description="Groups per page (default 50).", ge=1)] = None,
        cursor: Cursor = None,
    ) -> A.UtilizationWindows:
        """When inside the step one job's devices sit idle, and why: windows grouped by rank, cause (GPU: sync,
        collective, memcpy, dataloader, host, host_idle; NeuronCore tensor engine below 20 %: collective, dma, engine,
        semaphore, device_idle) and what the device waited on, with where in the step they open and how often they
        recur; most idle time first."""
        return answer(queries.utilization_windows, job_id, attempt=attempt, rank=rank, top=top, cursor=cursor)

    @tool
    def compare(
        a: Annotated[str, Field(description="Baseline: job_id or job_id#attempt.")],
        b: Annotated[str, Field(description="Compared: job_id or job_id#attempt.")],
        limit: Limit = None,
        cursor: Cursor = None,
    ) -> A.Comparison:
        """Job b against job a, as `tracelake compare`: metric deltas, kernels/ops added, removed, slower,
        faster per step, findings appeared and cleared."""
        return answer(queries.compare, a, b, limit=limit, cursor=cursor)

    @tool
    def regressions(
        job_name: Annotated[str | None, Field(description="Runs of this job_name only.")] = None,
        verdict: Annotated[
            Literal["regression", "improvement", "unchanged", "inconclusive", "no_baseline"] | None,
            Field(description="Only this verdict."),
        ] = None,
        limit: Limit = None,
        cursor: Cursor = None,
    ) -> A.Regressions:
        """Each run's step time, idle and exposed-communication metrics against the earlier runs of its
        job_name (Mann-Whitney U test), newest first."""
        return answer(queries.regressions, job_name=job_name, verdict=verdict, limit=limit, cursor=cursor)

    @tool
    def fleet_stats(
        dimension: Annotated[
            Literal["fleet", "job_name", "job", "model", "hardware", "torch_version"],
            Field(description="What to group the fleet by."),
        ] = "job_name",
        value: Annotated[str | None, Field(description="Only this group.")] = None,
        by_date: Annotated[bool, Field(description="One row per capture date.")] = False,
        limit: Limit = None,
        cursor: Cursor = None,
    ) -> A.FleetStats:
        """The fleet grouped by one dimension: step-time percentiles and time-weighted idle, compute,
        exposed-communication, CPU-bound and dataloader %."""
        return answer(
            queries.fleet_stats, dimension=dimension, value=value, by_date=by_date, limit=limit, cursor=cursor
        )

    @tool
    def fleet_findings(
        dimension: Annotated[
            Literal["fleet", "job_name", "model", "hardware"], Field(description="What to group the fleet by.")
        ] = "fleet",
        value: Annotated[str | None, Field(description="Only this group.")] = None,
        rule: Annotated[str | None, Field(description="Only this rule.")] = None,
        limit: Limit = None,
        cursor: Cursor = None,
    ) -> A.FleetFindings:
        """What would recover the most accelerator-hours: finding rules ranked by fleet impact over the last
        7 days of captures (time lost per step × steps × world size), with the runs they fired in."""
        return answer(queries.fleet_findings, dimension=dimension, value=value, rule=rule, limit=limit, cursor=cursor)

    @tool
    def fleet_ops(
        dimension: Annotated[
            Literal["fleet", "job_name", "model", "hardware"], Field(description="What to group the fleet by.")
        ] = "fleet",
        value: Annotated[str | None, Field(description="Only this group.")] = None,
        op_name: Annotated[str | None, Field(description="Only this op (`aten::mm`, …).")] = None,
        limit: Limit = None,
        cursor: Cursor = None,
    ) -> A.FleetOps:
        """Which kernels are worth tuning fleet-wide: op groups (op, shapes, dtype) ranked by the accelerator-hours
        per day running them at 70 % of their roofline would recover, over the last 7 days of captures."""
        return answer(queries.fleet_ops, dimension=dimension, value=value, op_name=op_name, limit=limit, cursor=cursor)

    @tool
    def host_health(
        suspect_only: Annotated[bool, Field(description="Only hardware suspects.")] = False,
        host: Annotated[str | None, Field(description="Only rows on this host (its devices and links too).")] = None,
        kind: Annotated[
            Literal["host", "device", "link"] | None, Field(description="Only hosts, devices or links.")
        ] = None,
        limit: Limit = None,
        cursor: Cursor = None,
    ) -> A.HostHealth:
        """Hosts, accelerators and links across jobs: how often each one's ranks arrive last at collectives
        (against their fair share) or how its bus bandwidth compares (links), in how many different jobs it was
        slow, and whether it is a hardware suspect, with evidence."""
        return answer(queries.host_health, suspect_only=suspect_only, host=host, kind=kind, limit=limit, cursor=cursor)

    if engines is not None:

        @tool
        def sql(
            query: Annotated[str, Field(description="One SELECT (or WITH … SELECT) over the warehouse views.")],
            max_rows: Annotated[
                int | None, Field(description=f"Row cap (default 200, at most {SQL_MAX_ROWS}).", ge=1)
            ] = None,
        ) -> A.SqlAnswer:
            """Read-only SQL (Spark SQL syntax) over the warehouse tables (views named as the tables), on the
            embedded engine. DDL, DML, SET, file reads and code-running functions are refused; a query past the
            time limit is stopped; long text cells are cut."""
            cap = min(max_rows or 200, SQL_MAX_ROWS)
            try:
                r = engines.run(query, max_rows=cap, timeout_s=sql_timeout_s)
            except (UnsafeQuery, QueryTimeout) as e:
                raise _tool_error(e) from e
            except EngineError as e:  # a parse, bind or run error: the caller's to fix, in one or two lines
                raise _tool_error(RuntimeError(f"query failed: {e}")) from e

            read_at = _now()

            def make(rows):
                page = A.Page(
                    total=len(r.rows) + (1 if r.truncated else 0),
                    offset=0,
                    returned=len(rows),
                    truncated=r.truncated or len(rows) < len(r.rows),
                    next_cursor=None,
                )
                return A.SqlAnswer(
                    columns=r.columns,
                    rows=rows,
                    elapsed_ms=r.elapsed_ms,
                    page=page,
                    tables_read=dict(sorted(r.tables_read.items())),
                    read_at=read_at,
                )

            out = make(r.rows)
            while len(out.rows) > 1 and answer_chars(out) > A.MAX_ANSWER_CHARS:  # the character cap: halve
                out = make(out.rows[: len(out.rows) // 2])
            share = max(100, A.MAX_ANSWER_CHARS // (2 * max(len(r.columns), 1)))
            while answer_chars(out) > A.MAX_ANSWER_CHARS and share > 0:  # one row of many long cells: cut each
                out = make([[cut_text(v, share) for v in row] for row in out.rows])  # to its share, less till it fits
                share //= 2
            if answer_chars(out) > A.MAX_ANSWER_CHARS:
                raise _tool_error(
                    ValueError(
                        f"one row of {len(r.columns)} columns exceeds the answer's {A.MAX_ANSWER_CHARS:,} characters "
                        "even with every text cell cut: select fewer columns"
                    )
                )
            return out

    @server.resource(
        "tracelake://schemas/tables",
        name="tables",
        mime_type="application/json",
        description="Every warehouse table: columns with types and meanings (units in the names).",
    )
    def tables_resource() -> str:
        return json.dumps({t.name: _table_doc(t) for t in TABLES.values()}, indent=1)

    @server.resource(
        "tracelake://schemas/tables/{name}",
        name="table",
        mime_type="text/markdown",
        description="One warehouse table's columns, partitioning and key, as Markdown.",
    )
    def table_resource(name: str) -> str:
        if name not in TABLES:
            raise ValueError(f"no table {name!r}; tables: {', '.join(TABLES)}")
        return TABLES[name].markdown()

    @server.resource(
        "tracelake://schemas/findings",
        name="findings_schema",
        mime_type="application/schema+json",
        description="JSON schema of a job's findings document (findings.v1.json).",
    )
    def findings_resource() -> str:
        return FINDINGS_SCHEMA.read_text()

    @server.resource(
        "tracelake://schemas/tools",
        name="tool_answers",
        mime_type="application/schema+json",
        description="JSON schemas of every tool's answer (mcp_tools.v1.json).",
    )
    def tools_resource() -> str:
        return json.dumps(A.tool_schemas(), indent=1, sort_keys=True)

    @server.prompt(name="diagnose_job", description="Find what slows one job down and what to do about it.")
    def diagnose_job(job_id: str) -> str:
        return (
            f"Diagnose training job {job_id} with the tracelake tools.\n"
            f"1. job_summary(job_id={job_id!r}): step time per rank, the temporal breakdown, the straggler and "
            "data quality (say so if captures were quarantined or validation failed).\n"
            f"2. findings(job_id={job_id!r}): the bottlenecks ranked by estimated time lost per step; read each "
            "one's evidence.\n"
            f"3. critical_path(job_id={job_id!r}): what bounds the slowest step; collectives and kernels when "
            "communication or compute dominate.\n"
            "4. regressions for its job_name, or compare against an earlier run, if it got slower.\n"
            "Answer with the top causes, each with its numbers (ns, %) and the recommended change, "
            "largest estimated gain first."
        )

    return server


def _table_doc(t) -> dict:
    return {
        "doc": t.doc,
        "partition_by": list(t.partition_by),
        "key": list(t.key),
        "columns": [{"name": c.name, "type": str(c.type), "doc": c.doc} for c in t.columns],
    }


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return text[0][:500] if text else type(e).__name__


def _version() -> str:
    try:
        from importlib.metadata import version  # once, at server start

        return version("tracelake")
    except Exception:  # noqa: BLE001 — not installed (a source checkout)
        return "0"


# ----------------------------------------------------------------------------- HTTP


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class BearerAuth:
    """ASGI middleware: HTTP requests must carry ``Authorization: Bearer <token>`` (compared in constant
    time); anything else is answered 401 without reaching the MCP app."""

    def __init__(self, app, token: str):
        self.app, self._token = app, token.encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            got = dict(scope.get("headers") or []).get(b"authorization", b"")
            scheme, _, value = got.partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(value.strip(), self._token):
                body = json.dumps({"error": "unauthorized: send Authorization: Bearer <TRACELAKE_MCP_TOKEN>"}).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def http_app(server, host: str, token: str | None):
    """The streamable-HTTP ASGI app of ``server`` at ``/mcp``, behind :class:`BearerAuth` when ``token``.

    Raises:
        ValueError: ``host`` is not loopback and there is no token.
    """
    if not is_loopback(host) and not token:
        raise ValueError(
            f"binding {host} exposes the warehouse beyond this machine: set ${TOKEN_ENV} to a secret "
            "bearer token (clients send Authorization: Bearer <token>)"
        )
    from mcp.server.transport_security import TransportSecuritySettings  # the MCP SDK, HTTP only

    security = None if is_loopback(host) else TransportSecuritySettings(enable_dns_rebinding_protection=False)
    app = server.streamable_http_app(host=host, transport_security=security)
    return BearerAuth(app, token) if token else app


def serve_http(server, host: str, port: int, token: str | None) -> None:
    """Serve ``server`` over streamable HTTP at ``http://host:port/mcp`` until interrupted (uvicorn).

    Raises:
        ValueError: see :func:`http_app`.
    """
    import uvicorn  # the HTTP server, HTTP only

    uvicorn.run(http_app(server, host, token), host=host, port=port, log_level="warning")


def parse_bind(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6) → (host, port).

    Raises:
        ValueError: not HOST:PORT with a port in 1–65535.
    """
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536 or not host:
        raise ValueError(f"--http wants HOST:PORT, e.g. 127.0.0.1:8765; got {text!r}")
    return host.strip("[]"), int(port)


def _now() -> str:
    """Now, ISO 8601 UTC (milliseconds): an answer's ``read_at``."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
