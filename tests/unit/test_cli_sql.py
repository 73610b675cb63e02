"""``tracelake sql`` / ``tables`` / ``describe`` / ``compare`` as a user sees them, over a small warehouse written
here (no Spark): a mistyped warehouse, statements that are not one read-only query, syntax errors, the prompt fed
from a pipe, terminal tables, ``--as-of`` before a table existed, an attempt the job lacks, where the findings of a
run without MLflow are; and the agents' sql tool's answer within its character cap."""

from __future__ import annotations

import asyncio
import io
import json
import re

import pandas as pd
import pyarrow as pa
import pytest
from rich.console import Console
from typer.testing import CliRunner

from jobs import cli
from jobs.warehouse import NoWarehouse, require_warehouse, write_table
from schemas.tables import TABLES

MS = 1_000_000
LONG_JOB = "a-job-whose-id-is-long-enough-to-be-cut-in-a-narrow-table-0123456789"


def _write(warehouse, name: str, rows: list[dict]) -> None:
    """``rows`` as ``{warehouse}/{name}`` (the columns not given are null)."""
    schema = pa.schema([f.with_nullable(True) for f in TABLES[name].arrow_schema()])
    write_table(
        pa.Table.from_pylist([{c: r.get(c) for c in schema.names} for r in rows], schema=schema), warehouse, name
    )


@pytest.fixture(scope="module")
def wh(tmp_path_factory) -> str:
    """Two attempts of ``job-a`` (2 ranks, 3 steps each) and one rank of :data:`LONG_JOB`."""
    root = str(tmp_path_factory.mktemp("wh"))
    keys = [("job-a", 0), ("job-a", 1), (LONG_JOB, 0)]
    caps, steps = [], []
    for job, attempt in keys:
        for rank in (0, 1) if job == "job-a" else (0,):
            key = {"date": "2026-01-01", "job_id": job, "attempt": attempt, "rank": rank}
            caps.append({**key, "status": "ingested", "job_name": job, "capture_id": f"{job}-{attempt}-{rank}"})
            steps += [{**key, "step": s, "step_time_ns": (10 + s) * MS} for s in range(3)]
    _write(root, "captures", caps)
    _write(root, "steps", steps)
    return root


def _cli(*args: str, stdin: str | None = None):
    return CliRunner().invoke(cli.app, list(args), input=stdin)


def _one_line(text: str) -> str:
    lines = [x for x in text.splitlines() if x.strip()]
    assert len(lines) == 1, text
    return lines[0]


# ------------------------------------------------------------------------------------------- a mistyped warehouse


@pytest.mark.parametrize(
    "args",
    [
        ("sql", "SELECT count(*) FROM steps"),
        ("sql",),  # the prompt
        ("tables",),
        ("compare", "job-a", "job-a", "--no-mlflow"),
        ("history",),
    ],
    ids=["sql", "prompt", "tables", "compare", "history"],
)
def test_a_path_without_tables_is_no_warehouse(tmp_path, args):
    """Before: ``count(*)`` 0 and every table listed with 0 rows, rc 0. Now rc 2 and one line naming the path, for
    a path that does not exist and for a folder without tables alike."""
    (tmp_path / "empty").mkdir()
    for path in (str(tmp_path / "nonexist"), str(tmp_path / "empty")):
        out = _cli(*args, "--warehouse", path, stdin="SELECT 1;\n")
        assert out.exit_code == 2, out.output
        assert f"no warehouse at {path}" in _one_line(out.output)
        assert "0" not in out.stdout.replace(path, "")  # no empty answer printed


def test_require_warehouse_on_local_paths_and_fsspec_uris(wh, tmp_path):
    require_warehouse(wh)
    require_warehouse(f"file://{wh}")
    (tmp_path / "notes").mkdir()  # a folder, but no table's
    for path in (str(tmp_path), str(tmp_path / "nope"), "memory://tracelake-test/none"):
        with pytest.raises(NoWarehouse, match=f"^no warehouse at {re.escape(path)} "):
            require_warehouse(path)
    import fsspec  # why: an object store stand-in (fsspec's in-memory file system) for the URI branch

    fs = fsspec.filesystem("memory")
    fs.pipe("/tracelake-test/wh/steps/_delta_log/00000000000000000000.json", b"{}")
    require_warehouse("memory://tracelake-test/wh")


# ------------------------------------------------------------------------------ one read-only query, syntax errors


@pytest.mark.parametrize(
    "query,got",
    [
        ("DROP VIEW steps", "DROP VIEW"),
        ("INSERT INTO steps SELECT * FROM steps", "INSERT"),
        ("DELETE FROM steps", "DELETE"),
    ],
)
def test_sql_refuses_what_is_not_one_read_only_query(wh, query, got):
    """Before: ``DROP VIEW steps`` printed DuckDB's "Success", INSERT "steps is not an table". Now the sql tool's
    check (jobs.agent.readonly_sql) refuses them in one line, and nothing ran."""
    out = _cli("sql", query, "--warehouse", wh)
    assert out.exit_code == 1
    assert _one_line(out.output) == f"tracelake sql: read-only: only SELECT queries are allowed (got {got})"
    assert _cli("sql", "SELECT count(*) AS n FROM steps", "--warehouse", wh).stdout == "n\n15\n"


def test_sql_runs_joins_the_sql_tool_refuses_as_unbounded(wh):
    """The sql tool's server refuses a join without an equality condition (only its time limit would end it); at the
    command line the user can stop a query, and the comma join with its condition in WHERE runs."""
    query = "SELECT count(*) AS n FROM captures a, captures b WHERE a.capture_id = b.capture_id"
    out = _cli("sql", query, "--warehouse", wh)
    assert out.exit_code == 0 and out.stdout == "n\n5\n", out.output


def test_syntax_errors_name_the_place_without_sqlglot_internals(wh):
    """Before: ``Required keyword: 'this' missing for <class 'sqlglot.expressions.query.Where'>. Line 1, Col: 30.``"""
    out = _cli("sql", "SELECT job_id FROM steps WHERE", "--warehouse", wh)
    assert out.exit_code == 1
    assert _one_line(out.output) == (
        "tracelake sql: syntax error at line 1, column 30: incomplete WHERE (near 'SELECT job_id FROM steps WHERE')"
    )
    cases = {
        "SELECT job_id\nFROM steps\nWHERE (": "syntax error at line 3, column 7: incomplete '('",
        "SELECT (1 FROM steps": "syntax error at line 1, column 14: expected ) before 'FROM'",
        "SELECT 'unclosed FROM steps": "syntax error: the text cannot be read near",
    }
    for query, start in cases.items():
        line = _one_line(_cli("sql", query, "--warehouse", wh).output)
        assert line.startswith(f"tracelake sql: {start}"), line
        assert "<class" not in line and "sqlglot" not in line and "Traceback" not in line


def test_the_sql_tool_says_the_same_of_a_syntax_error():
    from jobs.agent.readonly_sql import UnsafeQuery, check_query

    with pytest.raises(UnsafeQuery) as e:
        check_query("SELECT job_id FROM steps WHERE", ["steps"])
    assert str(e.value) == "syntax error at line 1, column 30: incomplete WHERE (near 'SELECT job_id FROM steps WHERE')"


def test_as_of_before_the_table_existed_is_one_line(wh):
    out = _cli("sql", "SELECT count(*) FROM steps", "--warehouse", wh, "--as-of", "2000-01-01")
    assert out.exit_code == 1
    line = _one_line(out.output)
    assert line.startswith("tracelake sql: table steps: ") and "no version at 2000-01-01T00:00:00+00:00" in line
    assert "Traceback" not in out.output


# -------------------------------------------------------------------------------------------- the prompt, piped


def test_piped_prompt_runs_the_last_query_without_semicolon(wh):
    """Before: only the banner and the prompts, the query dropped. Now its answer alone on stdout (csv: piped)."""
    out = _cli("sql", "--warehouse", wh, stdin="SELECT count(*) AS n\nFROM steps")
    assert out.exit_code == 0, out.output
    assert out.stdout == "n\n15\n"
    out = _cli("sql", "--warehouse", wh, stdin="SELECT 1 AS a;\n\\d ranks\nSELECT 2 AS b;\nexit\nSELECT 3 AS c;\n")
    assert out.exit_code == 0 and out.stdout.startswith("a\n1\nname,type,unit,nullable,description\n"), out.stdout
    assert out.stdout.endswith("b\n2\n") and "tracelake>" not in out.stdout and "tables (" not in out.stdout


def test_piped_prompt_exits_non_zero_after_an_sql_error(wh):
    out = _cli("sql", "--warehouse", wh, stdin="SELECT nope FROM steps;\nSELECT 1 AS x;\n")
    assert out.exit_code == 1
    assert out.stdout == "x\n1\n"  # the error is on stderr; the next query still ran
    assert out.stderr.startswith("error: Referenced column") and "nope" in out.stderr


# --------------------------------------------------------------------------------------------- terminal tables


def _terminal(monkeypatch, width: int) -> io.StringIO:
    buf = io.StringIO()
    monkeypatch.setattr(cli, "console", Console(file=buf, width=width, force_terminal=True, color_system=None))
    return buf


@pytest.mark.parametrize("width", [80, 120])
def test_describe_never_cuts_a_column_name(monkeypatch, width):
    """Before: ``non_compute_time…`` and 7 more names cut at 80 columns. Now every name whole; the description
    wraps, and the table fits the terminal."""
    buf = _terminal(monkeypatch, width)
    assert _cli("describe", "steps").exit_code == 0
    lines = buf.getvalue().splitlines()
    assert max(len(x.rstrip()) for x in lines) <= width
    names = [x.split()[0] for x in lines[3:] if x.strip() and not x.startswith(" " * 10) and "row(s)" not in x]
    assert names == TABLES["steps"].names


def test_sql_tables_use_the_width_before_cutting_text(wh, monkeypatch):
    """Before: each text column got an equal share of the width (``HolisticTraceAnal…`` in a 107-wide table at 120,
    beside short text columns). Now a long text column takes what the short ones leave, and is cut only past the
    terminal's width."""
    query = "SELECT job_id, date, status, rank FROM captures WHERE job_id <> 'job-a'"
    buf = _terminal(monkeypatch, 100)
    assert _cli("sql", query, "--warehouse", wh).exit_code == 0
    assert LONG_JOB in buf.getvalue()  # 69 characters whole (an equal share was 31)
    buf = _terminal(monkeypatch, 60)
    assert _cli("sql", query, "--warehouse", wh).exit_code == 0
    row = next(x for x in buf.getvalue().splitlines() if LONG_JOB[:20] in x)
    assert len(row.rstrip()) <= 60 and "2026-01-01" in row and "ingested" in row
    assert LONG_JOB[:29] + "…" in row  # what the others leave: 60 - 2 × 4 (padding) - 4 - 10 - 8 = 30


def test_fit_gives_narrow_columns_their_width_and_wide_ones_the_rest():
    assert cli._fit({"a": 5, "b": 50, "c": 60}, 200, 12) == {"a": 5, "b": 50, "c": 60}
    assert cli._fit({"a": 5, "b": 50, "c": 60}, 65, 12) == {"a": 5, "b": 30, "c": 30}
    assert cli._fit({"a": 5, "b": 50}, 10, 12) == {"a": 5, "b": 12}  # never below the floor


# ----------------------------------------------------------------------------------------------------- compare


def test_compare_an_attempt_the_job_lacks_names_its_attempts(wh):
    out = _cli("compare", "job-a#3", "job-a", "--warehouse", wh, "--no-mlflow")
    assert out.exit_code == 2
    assert _one_line(out.output) == "error: job-a#3: job 'job-a' has no attempt '3' (its attempts: 0, 1)"
    out = _cli("compare", "job-a#x", "job-a", "--warehouse", wh, "--no-mlflow")
    assert out.exit_code == 2 and "has no attempt 'x' (its attempts: 0, 1)" in _one_line(out.output)


# ------------------------------------------------------------------------------------- tracelake run --no-mlflow


def test_run_without_mlflow_says_where_the_other_findings_are(capsys):
    """Before: "… 2 more in the job report", and no report was written. Now the findings document and the query."""
    from types import SimpleNamespace

    key = {"job_id": "job-a", "attempt": 0}
    findings = pd.DataFrame(
        [
            {
                **key,
                "rank_order": i,
                "title": f"finding {i}",
                "rule": "r",
                "recommendation": "",
                "est_time_lost_per_step_ns": (9 - i) * MS,
            }
            for i in range(1, 6)
        ]
    )
    ranks = pd.DataFrame(
        [{**key, "rank": 0, "idle_pct": None, "step_time_p50_ns": 10 * MS, "step_time_max_ns": 12 * MS}]
    )
    steps = pd.DataFrame([{**key, "rank": 0, "step": 0, "step_time_ns": 10 * MS, "cpu_op_time_ns": 5 * MS}])
    caps = pd.DataFrame([{**key, "rank": 0, "status": "ingested", "n_events": 10}])
    result = SimpleNamespace(
        captures=caps,
        ranks=ranks,
        steps=steps,
        findings=findings,
        regressions=pd.DataFrame(),
        rule_coverage=pd.DataFrame(),
        pending=[],
        validation=None,
        warehouse="s3://bucket/wh",
        tracking_uri=None,
        run_ids={},
    )
    cli.print_summary(result)
    out = capsys.readouterr().out
    assert "in the job report" not in out
    assert (
        "… 2 more in s3://bucket/wh/findings_json/job-a/0/findings.json, or: tracelake sql \"SELECT rank_order, title "
        "FROM findings WHERE job_id = 'job-a' AND attempt = 0 ORDER BY rank_order\" --warehouse s3://bucket/wh"
    ) in " ".join(out.split())


# --------------------------------------------------------------------------------------- the agents' sql tool


def test_mcp_sql_answer_of_one_row_of_many_long_cells_fits_the_cap(wh, monkeypatch):
    """One row of 200 cells of 5,000 characters (1 MB): the answer is cut to the 20,000-character cap, each cell
    cut and marked, and the page says it is cut."""
    from jobs.agent import server as server_mod
    from jobs.agent.paging import answer_chars
    from schemas.agent import MAX_ANSWER_CHARS, SqlAnswer

    made = []

    class Engines(server_mod.SqlEngines):  # the real engines, closed by the test
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(server_mod, "SqlEngines", Engines)
    server = server_mod.build_server(wh, sql_engines=1)
    query = "SELECT " + ", ".join(f"repeat('x', 5000) AS c{i}" for i in range(200)) + " FROM steps LIMIT 1"
    try:
        r = asyncio.run(server.call_tool("sql", {"query": query}))
    finally:
        for e in made:
            e.close()
    assert not r.is_error, r.content[0].text
    text = r.content[0].text
    assert len(text) <= MAX_ANSWER_CHARS
    answer = SqlAnswer.model_validate(json.loads(text))
    assert answer_chars(answer) <= MAX_ANSWER_CHARS
    assert answer.columns == [f"c{i}" for i in range(200)] and len(answer.rows) == 1
    for cell in answer.rows[0]:
        assert cell.startswith("xxxx") and cell.endswith("…[cut: 5000 characters]"), cell[-40:]


# ------------------------------------------------------------------------ newuser15 #16: how values read, help texts


def test_a_null_reads_the_same_in_every_column_and_a_number_column_has_one_format(monkeypatch):
    """Before: a null in a list or struct read ``None``, a float column mixed ``1.334e+04`` with ``1211`` and ``130``
    with ``813.2``, a whole float read ``8000`` beside ``1.5e+04``. Now every null reads —, and each number column one
    format chosen from its values."""
    from decimal import Decimal

    buf = _terminal(monkeypatch, 120)
    df = pd.DataFrame(
        {
            "name": ["a", None, "c"],
            "n": pd.array([1, None, 1_752_829_952_233_497_125], dtype="Int64"),
            "us": [13337.7, 1211.25, float("nan")],
            "dur_ns": [8000.0, None, 15000.0],
            "ms": [0.00176, 12.621, 130.0],
            "dec": [Decimal("1.5"), None, Decimal("2.25")],
            "flags": [pd.NA, ["x", None], []],
            "s": [{"a": None, "b": 2}, None, {"a": "y", "b": None}],
        }
    )
    cli._print_frame(df, "table")
    out = buf.getvalue()
    assert "None" not in out and "e+" not in out and "nan" not in out.lower()
    rows = [x.split() for x in out.splitlines()[3:6]]
    assert rows[0][:6] == ["a", "1", "13338", "8000", "0.00176", "1.50"]
    assert rows[1][:6] == ["—", "—", "1211", "—", "12.62100", "—"]
    assert rows[2][:6] == ["c", "1752829952233497125", "—", "15000", "130.00000", "2.25"]
    assert '["x", null]' in out and '{"a": null, "b": 2}' in out and "[]" in out


@pytest.mark.parametrize(
    "values,texts",
    [
        ([130.0, 813.2], ["130", "813"]),  # 3 significant digits of the smallest: no decimals
        ([0.5, 2.0, None], ["0.500", "2.000", "—"]),
        ([8000.0, 15000.0], ["8000", "15000"]),  # whole floats print as integers
        ([1.752829952e18, 3.0], ["1.753e+18", "3.000e+00"]),  # past exact floats: scientific, the whole column
        ([2e-6, 5e-5], ["2.000e-06", "5.000e-05"]),
        ([-0.0, 1.25, float("inf")], ["0.00", "1.25", "inf"]),
    ],
)
def test_float_column_texts(values, texts):
    assert cli._column_texts(pd.Series(values, dtype="float64")) == (texts, True)


def test_the_blocks_of_a_wide_result_read_nulls_and_numbers_alike(monkeypatch):
    buf = _terminal(monkeypatch, 80)
    cli._print_frame(pd.DataFrame({f"c{i}": [1.5, None] if i else [None, ["a"]] for i in range(11)}), "table")
    out = buf.getvalue()
    assert "  c0: —\n  c1: 1.50\n" in out and '  c0: ["a"]\n  c1: —\n' in out and "None" not in out


def test_csv_lists_are_json_and_csv_json_stay_exact(wh):
    """Before: ``['a' 'b' None]`` (numpy's repr: no commas, not parseable). Now a JSON array; numbers as they are."""
    import csv

    query = "SELECT array('a', 'b, c', NULL) AS l, CAST(NULL AS array<string>) AS n, 13337.725 / 10 AS x FROM steps"
    out = _cli("sql", query + " LIMIT 1", "--warehouse", wh, "--format", "csv")
    assert out.exit_code == 0, out.output
    row = next(csv.DictReader(io.StringIO(out.stdout)))
    assert json.loads(row["l"]) == ["a", "b, c", None] and row["n"] == "" and row["x"] == "1333.7725"
    out = _cli("sql", query + " LIMIT 1", "--warehouse", wh, "--format", "json")
    assert json.loads(out.stdout) == [{"l": ["a", "b, c", None], "n": None, "x": 1333.7725}]


def _commands():
    import typer

    return sorted(typer.main.get_command(cli.app).commands)  # type: ignore[attr-defined]


@pytest.mark.parametrize("command", _commands())
def test_help_texts_have_no_space_before_a_period(command):
    """Before: ``MLflow tracking URI .``, ``Job folder .``: a ``[default: …]`` in the help text was read as console
    markup and dropped. Now the defaults in words are typer's ``show_default`` texts."""
    out = CliRunner().invoke(cli.app, [command, "--help"], env={"COLUMNS": "250", "TERMINAL_WIDTH": "250"})
    assert out.exit_code == 0, out.output
    lines = [x for x in out.output.splitlines() if re.search(r"\w \.", x)]
    assert not lines, lines
    if command == "land":
        assert "Job folder. [default: (the job name, else the folder given)]" in out.output
        assert "Host the traces were captured on. [default: (unknown)]" in out.output
    if command in ("run", "compare"):
        assert "MLflow tracking URI. [default: (" in out.output


# ------------------------------------------------------------------- newuser15 #13: tracelake run on a terminal


def _run_result(title: str, recommendation: str):
    from types import SimpleNamespace

    key = {"job_id": "job-a", "attempt": 0}
    findings = pd.DataFrame(
        [{**key, "rank_order": 1, "title": title, "rule": "straggler_rank", "recommendation": recommendation,
          "est_time_lost_per_step_ns": 6_100_000}]
    )  # fmt: skip
    ranks = pd.DataFrame(
        [{**key, "rank": 0, "idle_pct": 52.0, "compute_pct": 48.0, "overlap_pct": None, "step_time_p50_ns": 20 * MS,
          "step_time_max_ns": 21 * MS}]
    )  # fmt: skip
    steps = pd.DataFrame(
        [{**key, "rank": 0, "step": s, "step_time_ns": (19 + s) * MS, "cpu_op_time_ns": 5 * MS,
          "kernel_time_ns": 10 * MS, "idle_time_ns": 5 * MS, "compute_time_ns": 5 * MS} for s in range(3)]
    )  # fmt: skip
    caps = pd.DataFrame([{**key, "rank": 0, "status": "ingested", "n_events": 10, "capture_id": "c", "date": "d"}])
    return SimpleNamespace(
        captures=caps, ranks=ranks, steps=steps, findings=findings, regressions=pd.DataFrame(),
        rule_coverage=pd.DataFrame(), pending=[], validation=None, warehouse="/wh", tracking_uri=None, run_ids={},
    )  # fmt: skip


def test_run_summary_wraps_findings_on_a_terminal_and_reads_its_headline(monkeypatch):
    """Before: findings and "what to do" lines of up to 391 characters at 80 columns, and the header ``job step time
    p50, ms (slowest rank per step) 19.90; GPU idle, % of the GPU's active span (HTA temporal breakdown) 52.00``."""
    title = "Rank 7 arrives last at 5 of 8 collectives; the other ranks wait 6.1 ms per step for it " * 2
    advice = "Find why rank 7 is late: compare its step with the others (host/CPU contention, data loading) " * 3
    buf = _terminal(monkeypatch, 80)
    cli.print_summary(_run_result(title.strip(), advice.strip()))
    lines = buf.getvalue().splitlines()
    assert max(len(x.rstrip()) for x in lines) <= 80
    assert " ".join(" ".join(lines[:2]).split()) == (
        "job job-a: 1 rank(s) · job step time p50 20.00 ms (slowest rank per step) · GPU idle 50.0 % of the GPU's "
        "active span (HTA temporal breakdown)"
    )
    first = next(i for i, x in enumerate(lines) if x.startswith("  1. Rank 7"))
    advice_at = next(i for i, x in enumerate(lines) if x.startswith("     what to do: Find why"))
    body = lines[first + 1 : advice_at] + lines[advice_at + 1 : advice_at + 4]
    assert len(body) >= 4 and all(x.startswith("     ") and x[5] != " " for x in body)  # under the text, not col 0
    words = " ".join(" ".join(x.split()) for x in lines[first : advice_at + 4])
    assert f"1. {title.strip()} (6.1 ms/step, rule straggler_rank) what to do: {advice.strip()}" in words


def test_run_summary_piped_keeps_one_line_per_finding(capsys):
    cli.print_summary(_run_result(("t " * 60).strip(), ("r " * 80).strip()))
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("job job-a: 1 rank(s) · job step time p50 20.00 ms (slowest rank per step) · GPU idle")
    assert out[1] == "  1. " + "t " * 59 + "t (6.1 ms/step, rule straggler_rank)"
    assert out[2] == "     what to do: " + ("r " * 80).strip()


def test_run_summary_says_which_findings_a_profiler_warning_makes_uncertain(capsys):
    """Issue 33: a finding whose rule reads data the profiler warned about (here: device records dropped out of the
    capture window on rank 0) is marked, and the job's line says which judgments and why."""
    from jobs.analyze.findings.uncertainty import mark_uncertain

    r = _run_result("Rank 0 arrives last", "look at rank 0")
    f = r.findings.assign(ranks=[[0]], evidence_json=["{}"], confidence=[0.8]).to_dict("records")
    warned = {"straggler_rank": [{"rank": 0, "kind": "out_of_range_records", "words": "records dropped", "count": 9}]}
    mark_uncertain(f, warned)
    r.findings = pd.DataFrame(f)
    r.rule_coverage = pd.DataFrame(
        [{"job_id": "job-a", "attempt": 0, "rule": "straggler_rank", "status": "ran", "reason": None,
          "uncertain": "the profiler warned: records dropped (rank 0)"}]
    )  # fmt: skip
    cli.print_summary(r)
    out = capsys.readouterr().out.splitlines()
    assert out[1] == (
        "  uncertain, because the profiler warned about its own data: straggler rank: the profiler warned: records "
        "dropped (rank 0)"
    )
    assert out[2] == "  1. Rank 0 arrives last (6.1 ms/step, rule straggler_rank; uncertain: a profiler warning, above)"
    assert f[0]["confidence"] == 0.4


def test_the_cli_silences_mlflow_info_lines(wh, tmp_path, monkeypatch):
    """Before: ``INFO mlflow.store.db.utils: Creating initial MLflow database tables...`` and ``Updating database
    tables`` on stderr of a compare that made the MLflow store."""
    monkeypatch.setenv("MLFLOW_LOGGING_LEVEL", "INFO")
    monkeypatch.delenv("MLFLOW_LOGGING_LEVEL")  # restored (unset) after the test
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    out = _cli("compare", "job-a#0", "job-a#1", "--warehouse", wh, "--tracking-uri", uri)
    assert out.exit_code == 0, out.output
    assert "comparison run" in out.stdout and "INFO" not in out.stderr, out.stderr


def test_the_console_script_ends_cleanly_after_a_limit_cut_a_table_scan(tmp_path):
    """newuser16 #1: ``tracelake sql "SELECT * FROM events" --limit 2`` printed its rows, then aborted (rc 134,
    "terminate called without an active exception"), segfaulted or hung in 4 runs of 8: DuckDB stopped reading the
    table's pyarrow dataset at the LIMIT while Arrow's readahead threads were still filling batches, and the
    interpreter's teardown met them. Reproduced here with 60 partitions: 4 of 8 aborted before the fix."""
    import subprocess  # why: the console script as a user runs it (its own process and teardown)
    import sys
    from pathlib import Path

    root = str(tmp_path / "wh")
    _write(
        root,
        "events",
        [
            {"date": f"2026-01-{1 + j % 28:02d}", "job_id": f"j{j}", "attempt": 0, "rank": 0, "capture_id": f"c{j}",
             "event_id": i, "name": f"kernel_{i % 97}", "ts_ns": i * 1000, "dur_ns": 500, "args_json": '{"x": %d}' % i}
            for j in range(60)
            for i in range(4000)
        ],
    )  # fmt: skip
    script = Path(sys.executable).with_name("tracelake")
    for _ in range(8):
        p = subprocess.run(
            [str(script), "sql", "SELECT * FROM events", "--warehouse", root, "--limit", "2", "--format", "csv"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert p.returncode == 0, (p.returncode, p.stderr[-500:])
        assert len(p.stdout.splitlines()) == 3 and "the first 2 rows" in p.stderr
