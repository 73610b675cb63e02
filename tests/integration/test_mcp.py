"""``tracelake mcp`` with the MCP SDK's own client, over stdio and over streamable HTTP, on the corpus warehouse.

The server runs as a subprocess (``python -m jobs.cli mcp``), as an MCP client would start it. Every
tool is called and every answer validated against the tool's published output schema and against
``schemas/mcp_tools.v1.json``.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import jsonschema
import pytest

from jobs.warehouse import read_pandas
from schemas.agent import MAX_ANSWER_CHARS, SCHEMAS_FILE

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TOOLS = {
    "list_jobs",
    "job_summary",
    "findings",
    "critical_path",
    "collectives",
    "kernels",
    "op_efficiency",
    "utilization_windows",
    "compare",
    "regressions",
    "fleet_stats",
    "fleet_findings",
    "fleet_ops",
    "host_health",
    "sql",
}
PUBLISHED = json.loads(SCHEMAS_FILE.read_text())["tools"]


def _server_env() -> dict:
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.fixture(scope="module")
def wh(corpus_warehouse):
    return str(corpus_warehouse[0])


@pytest.fixture(scope="module")
def dlrm(wh):
    caps = read_pandas(wh, ("captures",))["captures"]
    return caps[caps["uri"].str.contains("dlrm_kineto")]["job_id"].iloc[0]


class Session:
    """Calls one tool and checks the answer against its schemas (the server's and the published one)."""

    def __init__(self, client, tools):
        self.client, self.tools = client, {t.name: t for t in tools}

    async def call(self, name: str, **args) -> dict:
        r = await self.client.call_tool(name, args)
        assert not r.is_error, f"{name}({args}) failed: {r.content[0].text if r.content else r}"
        out = r.structured_content
        jsonschema.validate(out, self.tools[name].output_schema)
        jsonschema.validate(out, PUBLISHED[name])
        text = r.content[0].text
        assert json.loads(text) == out and len(text) <= MAX_ANSWER_CHARS, (name, len(text))
        return out

    async def error(self, name: str, **args) -> str:
        r = await self.client.call_tool(name, args)
        assert r.is_error, f"{name}({args}) was expected to be refused: {r.structured_content}"
        return r.content[0].text

    async def pages(self, name: str, key: str, **args) -> list:
        rows, cursor, seen = [], None, 0
        while True:
            out = await self.call(name, **args, **({"cursor": cursor} if cursor else {}))
            assert out["page"]["offset"] == len(rows) and out["page"]["returned"] == len(out[key])
            rows += out[key]
            seen += 1
            cursor = out["page"]["next_cursor"]
            assert out["page"]["truncated"] == (cursor is not None)
            if cursor is None:
                assert len(rows) == out["page"]["total"]
                return rows
            assert seen < 500


async def _exercise(client, dlrm: str, wh: str) -> None:
    listed = await client.list_tools()
    assert {t.name for t in listed.tools} == TOOLS
    for t in listed.tools:
        assert t.output_schema and t.input_schema["type"] == "object" and t.annotations.read_only_hint, t.name
    s = Session(client, listed.tools)

    jobs = await s.call("list_jobs", limit=500)
    ids = [j["job_id"] for j in jobs["jobs"]]
    assert dlrm in ids and len(ids) == len(set(ids)) and not jobs["page"]["truncated"]
    assert next(j for j in jobs["jobs"] if j["job_id"] == dlrm)["n_ranks"] == 8
    assert await s.pages("list_jobs", "jobs", limit=4) == jobs["jobs"]  # paging gives the same rows, in order
    # the answer names the table versions it read (Delta), so it can be reproduced with --as-of
    from jobs.warehouse import table_versions

    assert "captures" in jobs["tables_read"] and jobs["read_at"].endswith("+00:00")
    assert jobs["tables_read"] == table_versions(wh, list(jobs["tables_read"]))

    summary = await s.call("job_summary", job_id=dlrm)
    assert summary["straggler"]["rank"] == 7 and summary["straggler"]["source"] == "straggler_rank finding"
    top = summary["top_findings"][0]
    assert top["rule"] == "straggler_rank" and top["ranks"] == [7] and top["rank_order"] == 1
    assert [r["rank"] for r in summary["ranks"]] == list(range(8))
    assert all(r["step_time_p50_ns"] <= r["step_time_p90_ns"] <= r["step_time_max_ns"] for r in summary["ranks"])
    assert summary["data_quality"]["captures"] == 8 and summary["data_quality"]["quarantined"] == 0

    found = await s.call("findings", job_id=dlrm)
    assert found["scope"] == "job" and found["findings"][0]["finding_id"] == top["finding_id"]
    assert [f["rank_order"] for f in found["findings"]] == list(range(1, len(found["findings"]) + 1))
    fleet = await s.call("findings", limit=20)
    lost = [f["est_time_lost_per_step_ns"] or 0 for f in fleet["findings"]]
    assert (
        fleet["scope"] == "fleet"
        and lost == sorted(lost, reverse=True)
        and len({f["job_id"] for f in fleet["findings"]}) > 1
    )

    cp = await s.call("critical_path", job_id=dlrm)
    assert cp["scope"] == "job" and cp["step"] in cp["steps_available"]
    assert abs(sum(p["share_pct"] for p in cp["by_bound"]) - 100.0) < 1e-6
    assert {r["rank"] for r in cp["ranks"]} <= set(range(8)) and cp["path_length_ns"] > 0
    one = await s.call("critical_path", job_id=dlrm, scope="rank", rank=3, limit=5)
    assert {r["rank"] for r in one["ranks"]} == {3} and len(one["longest_segments"]) == 5
    assert "has no" in await s.error("critical_path", job_id=dlrm, step=10**9)

    coll = await s.call("collectives", job_id=dlrm)
    last = coll["last_arrivals_by_rank"]
    assert max(last, key=last.get) == "7" and coll["collectives"]
    waits = [c["wait_ns_total"] or 0 for c in coll["collectives"]]
    assert waits == sorted(waits, reverse=True)

    k = await s.call("kernels", job_id=dlrm, top=5)
    assert len(k["kernels"]) == 5 and k["page"]["truncated"]
    totals = [r["total_ns"] for r in k["kernels"]]
    assert totals == sorted(totals, reverse=True) and 0 < sum(r["share_pct"] for r in k["kernels"]) <= 100.0 + 1e-6
    big = await s.call("kernels", job_id=dlrm, top=500)  # the character cap, not the row limit, ends this page
    assert big["page"]["truncated"] and big["page"]["returned"] < min(500, big["page"]["total"])
    every = await s.pages("kernels", "kernels", job_id=dlrm, top=500)
    assert len(every) == big["page"]["total"] and len({r["name"] for r in every}) == len(every)
    assert "another question" in await s.error(
        "kernels", job_id=ids[0] if ids[0] != dlrm else ids[1], cursor=big["page"]["next_cursor"]
    )
    assert "not a cursor" in await s.error("kernels", job_id=dlrm, cursor="garbage")

    ops = await s.call("op_efficiency", job_id=dlrm, top=10)
    assert ops["device_names"] == ["Tesla V100-SXM2-32GB"] and "V100" in ops["peak_sources"][0], ops
    times = [r["kernel_time_ns"] for r in ops["ops"]]
    assert ops["ops"] and times == sorted(times, reverse=True) and sum(times) <= k["total_kernel_ns"]
    assert all(r["peak_flops_pct"] is None or 0 <= r["peak_flops_pct"] <= 100 for r in ops["ops"]), ops["ops"]
    assert {r["n_ranks"] for r in ops["ops"]} <= set(range(1, 9)) and any(r["kind"] == "gemm" for r in ops["ops"])

    idle = await s.call("utilization_windows", job_id=dlrm, top=20)
    spans = [r["idle_ns"] for r in idle["groups"]]
    assert idle["groups"] and spans == sorted(spans, reverse=True) and sum(spans) <= idle["total_idle_ns"]
    assert all(
        r["cause"] in ("sync", "collective", "memcpy", "dataloader", "host", "host_idle") for r in idle["groups"]
    )
    one = await s.call("utilization_windows", job_id=dlrm, rank=idle["groups"][0]["rank"])
    assert one["groups"] and {r["rank"] for r in one["groups"]} == {idle["groups"][0]["rank"]}

    other = next(j for j in ids if j != dlrm)
    cmp_ = await s.call("compare", a=dlrm, b=other, limit=10)
    assert cmp_["a"] == f"{dlrm}#0" and cmp_["metrics"] and len(cmp_["ops"]) <= 10
    await s.call("regressions")
    hw = await s.call("fleet_stats", dimension="hardware")
    assert hw["rows"] and all(r["dimension"] == "hardware" and r["date"] == "all" for r in hw["rows"])

    impact = await s.call("fleet_findings")
    hours = [r["accelerator_hours_per_day"] for r in impact["rows"]]
    assert hours == sorted(hours, reverse=True)
    assert [r["impact_rank"] for r in impact["rows"]] == list(range(1, len(hours) + 1))
    # the table's rows of the fleet group: on the corpus the 7-day window ends at its newest capture (a trace-only
    # inference run without findings), so it may hold none; the answer says the same as the table
    table = read_pandas(wh, ("fleet_findings",))["fleet_findings"]
    assert impact["page"]["total"] == int((table["dimension"] == "fleet").sum())

    ops = await s.call("fleet_ops", limit=5)
    hours = [r["accelerator_hours_per_day"] for r in ops["rows"]]
    assert hours == sorted(hours, reverse=True) and len(hours) <= 5
    assert all(r["recoverable_ns"] <= r["kernel_time_ns"] for r in ops["rows"])
    table = read_pandas(wh, ("fleet_ops",))["fleet_ops"]
    assert ops["page"]["total"] == int((table["dimension"] == "fleet").sum())

    hosts = await s.call("host_health")  # the corpus: every multi-rank job on one host, so none to compare
    assert hosts["page"]["total"] == len(hosts["hosts"])

    assert "no job" in await s.error("job_summary", job_id="no-such-job")
    assert "unsafe job id" in await s.error("job_summary", job_id="../../etc/passwd")
    assert "attempt" in await s.error("job_summary", job_id=dlrm, attempt=99)

    q = await s.call("sql", query="SELECT job_id, count(*) AS n_steps FROM steps GROUP BY job_id ORDER BY n_steps DESC")
    assert q["tables_read"]["steps"] == table_versions(wh, ["steps"])["steps"]
    assert q["columns"] == ["job_id", "n_steps"] and q["rows"] and not q["page"]["truncated"]
    assert {r[0] for r in q["rows"]} <= set(ids)
    capped = await s.call("sql", query="SELECT job_id, rank, step FROM steps", max_rows=3)
    assert len(capped["rows"]) == 3 and capped["page"]["truncated"]
    for hostile, why in [
        ("DROP VIEW steps", "SELECT"),
        ("SELECT * FROM parquet.`/etc/passwd`", "file"),
        ("SELECT java_method('java.lang.System', 'getenv', 'HOME')", "java_method"),
        ("SELECT 1; SELECT 2", "one statement"),
        ("SET spark.sql.ansi.enabled=false", "SELECT"),
        ("SELECT * FROM read_files('/etc/passwd')", "read_files"),
        ("SELECT count(*) FROM events a CROSS JOIN events b", "equality condition"),
    ]:
        assert why.lower() in (await s.error("sql", query=hostile)).lower(), hostile
    # the views survived; fleet runs are the runs with an analysis window: every run with a ranks row
    runs = await s.call("sql", query="SELECT count(DISTINCT job_id, attempt) AS runs FROM ranks")
    assert (await s.call("fleet_stats", dimension="fleet"))["rows"][0]["n_runs"] == runs["rows"][0][0] > 0

    resources = {str(r.uri) for r in (await client.list_resources()).resources}
    assert {"tracelake://schemas/tables", "tracelake://schemas/findings", "tracelake://schemas/tools"} <= resources
    tables = json.loads((await client.read_resource("tracelake://schemas/tables")).contents[0].text)
    assert "step_time_ns" in [c["name"] for c in tables["steps"]["columns"]]
    md = (await client.read_resource("tracelake://schemas/tables/critical_path")).contents[0].text
    assert "`bound_by`" in md
    prompt = await client.get_prompt("diagnose_job", {"job_id": dlrm})
    assert dlrm in prompt.messages[0].content.text


def test_stdio(wh, dlrm):
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "jobs.cli", "mcp", "--warehouse", wh], env=_server_env(), cwd=str(ROOT)
    )

    async def main():
        async with Client(params, read_timeout_seconds=120) as client:
            await _exercise(client, dlrm, wh)

    asyncio.run(main())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_listening(port: int, proc, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        assert proc.poll() is None, proc.stderr.read().decode(errors="replace")[-2000:]
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"tracelake mcp did not listen on {port} in {timeout:g} s")


def test_http_with_token(wh, dlrm):
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    port, token = _free_port(), "s3cret-token-for-the-test"
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobs.cli", "mcp", "--warehouse", wh, "--http", f"127.0.0.1:{port}"],
        env={**_server_env(), "TRACELAKE_MCP_TOKEN": token},
        cwd=str(ROOT),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        _wait_listening(port, proc)
        for header in (None, "Bearer wrong-token", f"Basic {token}"):  # no token, a bad one: 401 before MCP
            req = urllib.request.Request(
                url,
                data=b"{}",
                method="POST",
                headers={"Content-Type": "application/json", **({"Authorization": header} if header else {})},
            )
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(req, timeout=10)
            assert e.value.code == 401

        async def main():
            async with httpx2.AsyncClient(
                headers={"Authorization": f"Bearer {token}"}, timeout=120, follow_redirects=True
            ) as http:
                async with Client(streamable_http_client(url, http_client=http), read_timeout_seconds=120) as client:
                    await _exercise(client, dlrm, wh)

        asyncio.run(main())
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_http_refuses_non_loopback_without_token(wh):
    env = {k: v for k, v in _server_env().items() if k != "TRACELAKE_MCP_TOKEN"}
    r = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "mcp", "--warehouse", wh, "--http", "0.0.0.0:1", "--no-sql"],
        env=env,
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "TRACELAKE_MCP_TOKEN" in r.stderr
