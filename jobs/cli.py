"""The ``tracelake`` command line (typer).

``tracelake run --raw <folder or s3://…> --warehouse <folder> [--tracking-uri <mlflow uri>]``
runs the main job; ``tracelake demo`` captures a real 2-rank training job first and runs the main
job on it; ``tracelake normalize`` / ``tracelake analyze`` run one stage.
"""

from __future__ import annotations

import enum
import json
import logging
import math
import os
import sys
import time
import traceback
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import NoReturn

import numpy as np
import pandas as pd
import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.padding import Padding
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from jobs.agent.readonly_sql import UnsafeQuery, check_query
from jobs.analyze.findings.ranking import LOST_UNITS, finding_window
from jobs.analyze.findings.uncertainty import uncertain_of
from jobs.common.ids import printable
from jobs.demo.train_ddp import require_torch, run_demo_training
from jobs.executor import LocalExecutor
from jobs.fleet.regressions import BASELINE_RUNS, DEFAULT_ALPHA, THRESHOLD_PCT, THRESHOLD_PP, testing_in_words
from jobs.landing.land import land as land_files
from jobs.publish.headline import headline, labels_for
from jobs.publish.tracking import client_for
from jobs.publish.verdict import job_verdict
from jobs.spark import SparkUnavailable, get_spark, spark_log_file
from jobs.sql import SqlError, parse_as_of, referenced_tables, run_duckdb, run_sql
from jobs.sql import describe as describe_table
from jobs.sql import tables as sql_tables
from jobs.warehouse import CommitError, NoWarehouse, exact_ints, read_pandas, require_warehouse, to_pandas_exact
from jobs.warehouse import history as warehouse_history
from jobs.warehouse import maintain as warehouse_maintain
from jobs.warehouse import migrate as warehouse_migrate
from schemas import FLEET_TABLES, TABLES


class Executor(str, enum.Enum):
    """Where ``tracelake run`` runs the stages (:mod:`jobs.executor`)."""

    local = "local"
    spark = "spark"


app = typer.Typer(add_completion=False, help="tracelake: fleet-wide analytics over ML profiler traces.")
console = Console()


@app.callback()
def _quiet_libraries() -> None:
    # Before every command. MLflow logs at INFO on stderr (``INFO mlflow.store.db.utils: Creating initial MLflow
    # database tables...`` when a sqlite store is made): its lines are not the command's output. MLflow sets its
    # logger's level when it is imported (after this: it is imported where used), from $MLFLOW_LOGGING_LEVEL, so
    # that variable says WARNING unless the user set it; an MLflow already imported gets the level directly.
    level = os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    if "mlflow" in sys.modules:
        logging.getLogger("mlflow").setLevel(level.upper())


def _progress() -> Progress:
    # elapsed time first, so a long description (a long --raw path) never hides it
    return Progress(SpinnerColumn(), TimeElapsedColumn(), TextColumn("{task.description}"), console=console)


def _storage_options(raw: str, opts: str | None) -> dict:
    so = json.loads(opts) if opts else {}
    if raw.startswith("s3://") and "endpoint_url" not in so and os.environ.get("AWS_ENDPOINT_URL"):
        so["endpoint_url"] = os.environ["AWS_ENDPOINT_URL"]
    return so


def _fmt(v, scale=1.0, digits=1) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "—"
    return f"{float(v) / scale:.{digits}f}"


def _print_job(job_id: str, ranks: pd.DataFrame, steps: pd.DataFrame, caps: pd.DataFrame) -> None:
    """One table per job: a row per rank (its own step times in ms; host busy % of the step; GPU idle, compute
    and comm/compute overlap in % of kernel time). GPU columns are left out of a job without GPU activity."""
    gpu = not ranks["idle_pct"].isna().all()
    console.print(f"job {escape(str(job_id))}: per rank (step times are each rank's own)", soft_wrap=True)
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    cols = (
        ["rank", "steps", "p50 ms", "max ms", "host %"]
        + (["idle %", "compute %", "overlap %"] if gpu else [])
        + ["events"]
    )
    for col in cols:
        t.add_column(col, justify="right", no_wrap=True, min_width=len(col))
    for _, r in ranks.sort_values("rank").iterrows():
        s = steps[steps["rank"] == r["rank"]]
        busy = (
            (s["cpu_op_time_ns"].sum() / s["step_time_ns"].sum() * 100) if len(s) and s["step_time_ns"].sum() else None
        )
        n_ev = caps[caps["rank"] == r["rank"]]["n_events"].sum()
        gpu_cells = [_fmt(r["idle_pct"]), _fmt(r["compute_pct"]), _fmt(r["overlap_pct"])] if gpu else []
        t.add_row(
            str(r["rank"]),
            str(len(s)),
            _fmt(r["step_time_p50_ns"], 1e6, 2),
            _fmt(r["step_time_max_ns"], 1e6, 2),
            _fmt(busy),
            *gpu_cells,
            str(int(n_ev)),
        )
    console.print(t)
    if not gpu:
        console.print(
            "  (no GPU activity in these traces: GPU columns left out; host % = CPU ops / step time)", soft_wrap=True
        )


def _print_findings(job_id: str, findings: pd.DataFrame, rest: str, top: int = 3) -> None:
    """The job's top findings, most time lost first: what, ms per step, what to do; ``rest`` says where the others
    are (``in the job report``). On a terminal the long lines wrap at words, indented under their number
    (:func:`_print_items`)."""
    f = findings[findings["job_id"] == job_id].sort_values(["attempt", "rank_order"]) if len(findings) else findings
    if not len(f):
        return
    items: list[tuple[str, Text]] = []
    for i, r in enumerate(f.head(top).itertuples(), start=1):
        lost = r.est_time_lost_per_step_ns
        unit = LOST_UNITS[finding_window(getattr(r, "evidence_json", None))]
        cost = f"{lost / 1e6:.1f} {unit}" if lost is not None and lost == lost else "cost unknown"
        doubt = "; uncertain: a profiler warning, above" if uncertain_of(getattr(r, "evidence_json", None)) else ""
        items.append((f"{i}.", Text.assemble((str(r.title), "bold"), f" ({cost}, rule {r.rule}{doubt})")))
        if isinstance(r.recommendation, str) and r.recommendation:
            items.append(("", Text(f"what to do: {r.recommendation}")))
    _print_items(items)
    if len(f) > top:  # one line, wrapped or not: it ends in a command to copy
        console.print(f"  … {len(f) - top} more {escape(rest)}", highlight=False, soft_wrap=True)


def _print_items(items: list[tuple[str, Text]], indent: int = 2) -> None:
    """``(mark, text)`` lines after ``indent`` spaces, the text after its mark (``1.``; ``""``: under the previous
    one's text). On a terminal a long text wraps at words at the console's width, its lines indented under its
    first; piped, each is one line (grep and log friendly). Texts are :class:`Text`: never console markup."""
    mark_width = max(len(m) for m, _ in items) if items else 0
    if not console.is_terminal:
        for mark, text in items:
            console.print(Text(" " * indent + mark.ljust(mark_width) + " ") + text, soft_wrap=True)
        return
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True, width=mark_width)
    grid.add_column(overflow="fold")
    for mark, text in items:
        grid.add_row(mark, text)
    console.print(Padding(grid, (0, 0, 0, indent), expand=False))


def _headline_words(h: dict, labels: dict[str, str]) -> list[str]:
    """The job's step time p50 and GPU idle % as ``job step time p50 19.90 ms (slowest rank per step)`` and ``GPU
    idle 52.0 % of the GPU's active span (…)``: the value between the name and the unit of its shared label
    (:data:`jobs.publish.headline.HEADLINE_LABELS`, ``name, unit (note)``); a missing value is left out."""
    out = []
    for key, digits in (("step_time_p50_ms", 2), ("idle_pct", 1)):
        v = h.get(key)
        if v is None or v != v:
            continue
        name, _, unit = labels[key].partition(", ")
        out.append(f"{name} {v:.{digits}f} {unit}".rstrip())
    return out


def _print_regression(job_id: str, regressions: pd.DataFrame) -> None:
    """The job's step-time verdict against the previous runs of its job name, when it has a baseline."""
    r = (
        regressions[(regressions["job_id"] == job_id) & (regressions["metric"] == "step_time_p50_ns")]
        if len(regressions)
        else regressions
    )
    if not len(r) or r.iloc[0]["verdict"] == "no_baseline":
        return
    x = r.iloc[0]
    runs = ", ".join(str(b) for b in (x["baseline_runs"] if x["baseline_runs"] is not None else []))
    console.print(f"  vs {runs}: [bold]{escape(str(x['summary']))}[/bold]", highlight=False, soft_wrap=True)


def print_summary(result) -> None:
    """The answer first: per job its top findings (what costs time, how much, what to do) and its regression
    verdict, then the per-rank table, the captures, validation detail only when something failed, and where the
    results are."""
    caps = result.captures
    findings = getattr(result, "findings", pd.DataFrame())
    regressions = getattr(result, "regressions", pd.DataFrame())
    head = headline(result.steps, result.ranks, caps)  # run_summary: the numbers of the report, MLflow, MCP
    coverage = getattr(result, "rule_coverage", None)
    if coverage is None and len(result.ranks):
        jobs = sorted(set(result.ranks["job_id"].astype(str)))
        coverage = read_pandas(result.warehouse, ("rule_coverage",), jobs, skip_missing=True).get("rule_coverage")
    reports = job_report_paths(result.tracking_uri, list(result.run_ids.values())) if result.tracking_uri else {}
    for job_id, job_ranks in result.ranks.groupby("job_id", sort=True):
        attempt = int(job_ranks["attempt"].max()) if "attempt" in job_ranks else 0
        h = head.get((str(job_id), attempt), {})
        labels = labels_for(result.steps[result.steps["job_id"] == job_id] if len(result.steps) else None)
        bits = [f"{len(job_ranks)} rank(s)", *_headline_words(h, labels)]
        console.print(
            Text.assemble((f"job {job_id}", "bold"), ": " + " · ".join(bits)), soft_wrap=not console.is_terminal
        )
        jf = findings[findings["job_id"] == job_id] if len(findings) else None
        jc = coverage[coverage["job_id"] == job_id] if isinstance(coverage, pd.DataFrame) and len(coverage) else None
        v = job_verdict(jf, jc)
        if v.status != "findings":
            console.print(f"  verdict: {escape(v.headline)}", highlight=False, soft_wrap=True)
        elif v.uncertain:  # the findings are listed below; what the profiler's own warnings make uncertain
            _print_items(
                [("", Text("uncertain, because the profiler warned about its own data: " + "; ".join(v.uncertain)))],
                indent=1,
            )
        report = reports.get(result.run_ids.get((str(job_id), attempt), ""))
        _print_findings(
            job_id, findings, "in the job report" if report else _findings_elsewhere(result.warehouse, job_id, attempt)
        )
        _print_regression(job_id, regressions)
    for job_id, job_ranks in result.ranks.groupby("job_id", sort=True):
        _print_job(job_id, job_ranks, result.steps[result.steps["job_id"] == job_id], caps[caps["job_id"] == job_id])
    q = caps[caps["status"] == "quarantined"] if len(caps) else pd.DataFrame()
    n_cat = int((caps["status"] == "cataloged").sum()) if len(caps) else 0
    console.print(
        f"captures: {len(caps)} ({len(caps) - len(q) - n_cat} ingested, {len(q)} quarantined, {n_cat} cataloged)"
        + (f", {len(result.pending)} pending (no manifest yet)" if result.pending else "")
    )
    for _, c in q.iterrows():  # names from traces and file names: text, never markup or terminal control
        console.print(f"  [yellow]quarantined[/yellow] {escape(printable(str(c['reason'])))}", highlight=False)
    v = getattr(result, "validation", None)
    if v is not None and not v.success:
        console.print(v.summary(), markup=False)  # "[expect_…]" and check values are text
    elif v is not None:
        n = sum(len(t.checks) for t in v.tables.values())
        console.print(f"validation: passed ({n} Great Expectations checks over {len(v.tables)} tables)")
    console.print(
        f"warehouse: {Path(result.warehouse).resolve() if '://' not in result.warehouse else result.warehouse}"
    )
    if result.tracking_uri:
        for (job, attempt), run_id in sorted(result.run_ids.items()):
            console.print(f"MLflow run for job {job} (attempt {attempt}): {run_id}", soft_wrap=True)
            path = reports.get(run_id)
            if path:
                console.print(f"  job report: {path}", highlight=False, soft_wrap=True)
        console.print(f"view them: mlflow ui --backend-store-uri {result.tracking_uri}", soft_wrap=True)


def _findings_elsewhere(warehouse: str, job_id: str, attempt: int) -> str:
    """Where a job's findings are when no job report was written (``--no-mlflow``): its findings document, and the
    query that lists them."""
    root = str(Path(warehouse).resolve()) if "://" not in warehouse else warehouse.rstrip("/")
    query = (
        f"SELECT rank_order, title FROM findings WHERE job_id = '{job_id}' AND attempt = {attempt} ORDER BY rank_order"
    )
    return f'in {root}/findings_json/{job_id}/{attempt}/findings.json, or: tracelake sql "{query}" --warehouse {root}'


def job_report_path(tracking_uri: str, run_id: str) -> str | None:
    """``file://`` URI of a run's HTML job report when its artifacts are on this machine, else ``None``."""
    return job_report_paths(tracking_uri, [run_id]).get(run_id)


def job_report_paths(tracking_uri: str, run_ids: list[str]) -> dict[str, str]:
    """``{run_id: file:// URI of its HTML job report}`` for the runs whose report is on this machine (others left
    out); the runs are looked up 100 at a time (``attributes.run_id IN (…)``), not one by one."""

    from jobs.publish.reports import JOB_REPORT_ARTIFACT  # keeps `tracelake --help` light

    out: dict[str, str] = {}
    try:
        client = client_for(tracking_uri)
        exp_ids = sorted({client.get_run(run_ids[0]).info.experiment_id}) if run_ids else []
        runs = [
            r
            for i in range(0, len(run_ids), 100)
            for r in client.search_runs(
                exp_ids, "attributes.run_id IN (" + ", ".join(f"'{x}'" for x in run_ids[i : i + 100]) + ")",
                max_results=100,
            )
        ]  # fmt: skip
    except Exception:  # noqa: BLE001 - a report path is a convenience, never a reason to fail the summary
        return out
    for r in runs:
        root = r.info.artifact_uri
        local = root[len("file://") :] if root.startswith("file://") else (root if "://" not in root else None)
        path = Path(local) / JOB_REPORT_ARTIFACT if local is not None else None
        if path is not None and path.exists():
            out[r.info.run_id] = path.resolve().as_uri()
    return out


def _bare_tags(items: list[str], job_name: str | None) -> dict[str, str]:
    """``--tag KEY=VALUE`` items and ``--job-name`` as manifest tags (:func:`schemas.manifest.validate_tags`).

    Raises:
        typer.BadParameter: an item without ``=``, a repeated or invalid key, an empty job name.
    """
    from schemas.manifest import validate_tags  # the manifest's tags contract; jsonschema only when run

    tags: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key.strip() in tags:
            raise typer.BadParameter(
                f"{item!r} is not KEY=VALUE" if not sep else f"key {key.strip()!r} given twice", param_hint="--tag"
            )
        tags[key.strip()] = value.strip()
    if job_name is not None:
        if not job_name.strip():
            raise typer.BadParameter("must not be empty", param_hint="--job-name")
        tags["job_name"] = job_name.strip()
    try:
        validate_tags(tags)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--tag") from None
    return tags


@app.command()
def run(
    raw: str = typer.Option(..., help="Landing zone: a folder or an fsspec URI (s3://bucket/prefix)."),
    warehouse: str = typer.Option(..., help="Warehouse folder for the Parquet tables."),
    tracking_uri: str | None = typer.Option(
        None, help="MLflow tracking URI.", show_default="sqlite:///<warehouse>/mlflow.db"
    ),
    storage_options: str | None = typer.Option(
        None,
        help="fsspec options for --raw (and an s3:// --warehouse) as JSON, e.g. "
        "'{\"endpoint_url\": \"http://127.0.0.1:8333\", \"key\": \"…\", \"secret\": \"…\"}'; default: the AWS_* variables.",
    ),
    no_mlflow: bool = typer.Option(False, "--no-mlflow", help="Skip MLflow logging."),
    since: str | None = typer.Option(
        None, help="Only jobs with a capture committed at or after this ISO time (UTC if no offset)."
    ),
    until: str | None = typer.Option(
        None, help="Only jobs with a capture committed before this ISO time (UTC if no offset)."
    ),
    master: str | None = typer.Option(
        None,
        help="Run on Spark with this master URL, e.g. spark://127.0.0.1:7077, local[2], sc://127.0.0.1:15002 (a Spark "
        "Connect server), or local-cluster / local-connect: the ones infra/local/spark.sh start / connect runs.",
    ),
    executor: Executor = typer.Option(
        Executor.local,
        help="local: worker processes on this machine, no JVM; "
        "spark: a SparkSession (--master, else $TRACELAKE_SPARK_MASTER or local[*]).",
    ),
    job_name: str | None = typer.Option(
        None,
        help="job_name of the traces without a manifest (bare files): runs that share it are compared for regressions.",
        show_default="the folder's job id",
    ),
    tag: list[str] | None = typer.Option(
        None,
        help="A tag KEY=VALUE of the bare traces, repeatable "
        "(model=… feeds the fleet statistics). Captures with a manifest keep theirs.",
    ),
) -> None:
    """Run the main job: the declared stages normalize → validate → analyze → validate → fleet → publish."""
    from jobs.pipeline.run import run_pipeline  # keeps `tracelake --help` light (loads the pipeline)

    bare_tags = _bare_tags(tag or [], job_name)
    with _spark_errors_in_one_line("tracelake run"), _progress() as progress:
        result = run_pipeline(
            raw,
            warehouse,
            tracking_uri,
            _storage_options(raw, storage_options),
            master=master,
            progress=progress,
            log_to_mlflow=not no_mlflow,
            since=since,
            until=until,
            executor=executor.value,
            bare_tags=bare_tags,
        )
    print_summary(result)
    v = getattr(result, "validation", None)
    if v is not None and not v.success:
        failed = sorted(str(j) for j in v.failed_jobs() if j)
        _fail(
            "tracelake run",
            f"validation failed for job(s) {', '.join(failed) or '(fleet tables)'}: their results are marked failed "
            "(see the validation lines above)",
            1,
        )


@app.command()
def land(
    paths: list[str] = typer.Argument(..., help="Trace files or folders of one job run (folders: every file below)."),
    to: str = typer.Option(..., "--to", help="Landing zone: a folder or an fsspec URI (s3://bucket/raw)."),
    job_name: str | None = typer.Option(None, help="job_name tag: runs that share it are compared for regressions."),
    job_id: str | None = typer.Option(None, help="Job folder.", show_default="the job name, else the folder given"),
    attempt: int = typer.Option(0, min=0, help="Attempt (restart) number of this run."),
    tag: list[str] | None = typer.Option(None, help="A tag KEY=VALUE, repeatable (model=… feeds fleet statistics)."),
    rank: int | None = typer.Option(None, min=0, help="Rank of a single file whose trace and name do not say."),
    world_size: int | None = typer.Option(
        None, min=1, help="Ranks of the job.", show_default="the traces', else the ranks landed"
    ),
    host: str | None = typer.Option(None, help="Host the traces were captured on.", show_default="unknown"),
    date: str | None = typer.Option(
        None,
        help="Landing date YYYY-MM-DD.",
        show_default="the day each trace was captured, else its file's modification date",
    ),
    storage_options: str | None = typer.Option(
        None, help="fsspec options for --to as JSON (endpoint_url, key, secret); default: the AWS_* variables."
    ),
) -> None:
    """Put existing trace files into a landing zone as committed captures (a manifest each, written last): rank
    from the trace's distributedInfo or its name, sha256 and size recorded; landing again writes nothing. Files
    that are not traces are refused with the reason (exit 1)."""
    tags = _bare_tags(tag or [], None)
    try:
        done = land_files(
            paths,
            to,
            job_id=job_id,
            job_name=job_name.strip() if job_name else None,
            attempt=attempt,
            tags=tags,
            rank=rank,
            world_size=world_size,
            host=host,
            date=date,
            storage_options=_storage_options(to, storage_options),
        )
    except ValueError as exc:
        Console(stderr=True).print(f"[red]tracelake land:[/red] {escape(str(exc))}", soft_wrap=True, highlight=False)
        raise typer.Exit(2) from None
    for x in done:
        where = f"rank {x.rank} → {x.uri}" if x.uri else ""
        what = {"landed": "landed", "already": "already landed", "refused": "refused"}[x.status]
        line = f"{what}: {x.path}" + (f" {where}" if where else "") + (f" ({x.reason})" if x.reason else "")
        console.print(escape(printable(line)), soft_wrap=True, highlight=False)
    n = {k: sum(x.status == k for x in done) for k in ("landed", "already", "refused")}
    console.print(f"{n['landed']} landed, {n['already']} already there, {n['refused']} refused", highlight=False)
    if n["refused"]:
        raise typer.Exit(1)


@contextmanager
def _spark_errors_in_one_line(command: str):
    """Show a Spark failure as one line on stderr and exit 1: an unreachable master (:class:`SparkUnavailable`) as
    it is; an error raised through Py4J or Spark (a Java stack trace) by its first line, with the whole traceback
    appended to :func:`jobs.spark.spark_log_file`, whose path the line names. Other errors pass unchanged."""
    err = Console(stderr=True)
    try:
        yield
    except SparkUnavailable as exc:
        err.print(f"[red]{command}:[/red] {escape(str(exc))}", soft_wrap=True, highlight=False)
        raise typer.Exit(1) from None
    except Exception as exc:
        if not type(exc).__module__.startswith(("py4j", "pyspark")):
            raise
        log = spark_log_file()
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a", encoding="utf-8") as f:
            traceback.print_exception(exc, file=f)
            java = getattr(exc, "_stackTrace", None)  # pyspark's CapturedException keeps the JVM frames out of str()
            if java:
                f.write(f"JVM stack trace:\n{java}\n")
        first = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        err.print(f"[red]{command}:[/red] {escape(first)} (stack trace in {log})", soft_wrap=True, highlight=False)
        raise typer.Exit(1) from None


@app.command()
def demo(
    workdir: Path = typer.Option(Path("demo"), help="Folder for the landing zone, warehouse and MLflow store."),
    steps: int = typer.Option(18, help="Training steps per rank (ProfilerStep#2..#17 are recorded)."),
    world_size: int = typer.Option(2, help="Number of ranks (processes, gloo backend)."),
    slow_ms: float = typer.Option(20.0, help="Extra host work per step on the last rank of the second run, ms."),
) -> None:
    """Train the same small DDP job twice under the capture hook, the second time with a real slowdown on its last
    rank (a slower input pipeline), then run the main job: it finds the straggler and the regression.

    Needs torch (the 'capture' extra of tracelake); without it, exits with code 1 and says what to install.
    """
    from jobs.demo.train_ddp import DEMO_SCHEDULE  # keeps `tracelake --help` light
    from jobs.pipeline.run import run_pipeline  # keeps `tracelake --help` light (loads the pipeline)

    try:
        require_torch()
    except ImportError as exc:
        console.print(f"[red]tracelake demo:[/red] {escape(str(exc))}", soft_wrap=True)  # one line: a command to copy
        raise typer.Exit(1) from None
    workdir = workdir.resolve()
    landing, warehouse = workdir / "landing", workdir / "warehouse"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    job_name, slow_rank = "demo-ddp", world_size - 1
    runs = [
        (f"demo-ddp-{stamp}-baseline", None, "baseline"),
        (f"demo-ddp-{stamp}-slow", slow_rank, f"rank {slow_rank} doing {slow_ms:g} ms more host work per step"),
    ]
    with _progress() as progress:
        for job_id, slow, what in runs:
            task = progress.add_task(
                f"Training {world_size} ranks × {steps} steps under torch.profiler: {what} (job {job_id})", total=None
            )
            run_demo_training(
                str(landing),
                job_id,
                world_size=world_size,
                steps=steps,
                job_name=job_name,
                slow_rank=slow,
                slow_ms=slow_ms,
                schedule=DEMO_SCHEDULE,
            )
            progress.update(task, completed=1, total=1, description=f"[green]✓[/green] Captured {job_id} ({what})")
        result = run_pipeline(str(landing), str(warehouse), progress=progress)
    print_summary(result)
    console.rule("what the demo found")
    slow_job = runs[1][0]
    console.print(f"[bold]{slow_job}[/bold] (the run with the planted slowdown on rank {slow_rank}):")
    run_id = result.run_ids.get((slow_job, 0))
    path = job_report_path(result.tracking_uri, run_id) if run_id and result.tracking_uri else None
    rest = "in the job report" if path else _findings_elsewhere(str(result.warehouse), slow_job, 0)
    _print_findings(slow_job, result.findings, rest)
    _print_regression(slow_job, result.regressions)
    if run_id:
        if path:
            console.print(f"its job report: {path}", highlight=False, soft_wrap=True)
        console.print(
            f"compare the two runs in MLflow: mlflow ui --backend-store-uri {result.tracking_uri}", soft_wrap=True
        )


def _stage_alone(name: str, settings, job_ids: list[str] | None = None) -> dict:
    """Run one declared stage (:mod:`jobs.pipeline.stages`) alone, on ``job_ids`` (default: all jobs); the
    interval's run record is left as it is."""
    from jobs.pipeline.stages import jobs_record, run_stage  # keeps `tracelake --help` light (loads the pipeline)

    record = {} if name == "normalize" else jobs_record(settings, job_ids)
    with LocalExecutor() as engine:
        return run_stage(name, settings, engine=engine, record=record, save=False)


@app.command()
def normalize(
    raw: str = typer.Option(...),
    warehouse: str = typer.Option(...),
    storage_options: str | None = typer.Option(None),
    since: str | None = typer.Option(None, help="Only jobs with a capture committed at or after this ISO time."),
    until: str | None = typer.Option(None, help="Only jobs with a capture committed before this ISO time."),
) -> None:
    """Only the normalize stage: landing zone → captures, events."""
    from jobs.pipeline.stages import RunSettings  # keeps `tracelake --help` light (loads the pipeline)

    s = RunSettings(
        raw=raw,
        warehouse=warehouse,
        storage_options=_storage_options(raw, storage_options),
        since=since or "",
        until=until or "",
    )
    r = _stage_alone("normalize", s)
    console.print(
        f"{r.get('n_captures', 0)} captures ({r.get('n_quarantined', 0)} quarantined), "
        f"jobs: {', '.join(r.get('job_ids', []))}"
    )


@app.command()
def analyze(
    warehouse: str = typer.Option(...), job: list[str] | None = typer.Option(None, help="Job ids (default: all).")
) -> None:
    """Only the analyze stage: events → steps, ranks, kernels, collectives, critical_path, findings."""
    from jobs.pipeline.stages import RunSettings  # keeps `tracelake --help` light (loads the pipeline)

    console.print(_stage_alone("analyze", RunSettings(warehouse=warehouse), job or None).get("analyze_counts", {}))


@app.command()
def fleet(
    warehouse: str = typer.Option(...),
    baseline_runs: int = typer.Option(BASELINE_RUNS, help="Previous runs of the same job name pooled as the baseline."),
    threshold_pct: float = typer.Option(THRESHOLD_PCT, help="Relative step-time change that counts (%)."),
    threshold_pp: float = typer.Option(
        THRESHOLD_PP, help="Change of idle / exposed-communication % that counts (points)."
    ),
    alpha: float = typer.Option(
        DEFAULT_ALPHA,
        help="Level of the Mann-Whitney U test's Benjamini-Hochberg adjusted p (false discovery rate over each "
        "capture day's runs); the intervals are at 1 - 2 alpha. Another value than the last run's compares every "
        "run again.",
    ),
    rebuild: bool = typer.Option(
        False,
        "--rebuild",
        help="Reduce every job's steps and kernels again and make every fleet row again (default: only the jobs "
        "whose rows changed, and the rows of the dates and runs they touch).",
    ),
) -> None:
    """Only the fleet stage: bring fleet_stats, fleet_kernels, regressions, fleet_findings, fleet_ops, host_health up
    to date (from every job; the jobs whose rows changed since the last fleet run are reduced again, all with --rebuild)."""
    from jobs.pipeline.stages import RunSettings  # keeps `tracelake --help` light (loads the pipeline)

    s = RunSettings(
        warehouse=warehouse,
        fleet_options={
            "baseline_runs": baseline_runs,
            "threshold_pct": threshold_pct,
            "threshold_pp": threshold_pp,
            "alpha": alpha,
            "rebuild": rebuild,
        },
    )
    record = _stage_alone("fleet", s)
    counts = record.get("fleet_counts", {})
    console.print(
        f"fleet tables written ({record.get('fleet_reduced_jobs', 0)} job(s) reduced again): "
        + ", ".join(f"{k} {v:,} rows" for k, v in counts.items()),
        soft_wrap=True,
    )
    reg = read_pandas(warehouse, ["regressions"])["regressions"]
    if len(reg):
        bad = reg[reg["verdict"] == "regression"]
        n_inc = int(((reg["verdict"] == "inconclusive") & (reg["metric"] == "step_time_p50_ns")).sum())
        console.print(
            f"{len(bad)} regression(s) in {reg[['job_id', 'attempt']].drop_duplicates().shape[0]} run(s)"
            + (f"; {n_inc} run(s) inconclusive on step time (see regressions.reason)" if n_inc else "")
        )
        console.print(testing_in_words(reg, alpha), highlight=False, soft_wrap=True)
        for r in bad.sort_values("change_pct", ascending=False).head(10).itertuples():
            console.print(f"  {r.job_id}#{r.attempt} ({r.job_name}): {r.summary}", highlight=False, soft_wrap=True)
    impact = read_pandas(warehouse, ["fleet_findings"])["fleet_findings"]
    impact = impact[impact["dimension"] == "fleet"].sort_values("impact_rank") if len(impact) else impact
    if len(impact):
        r = impact.iloc[0]
        console.print(
            f"fleet impact, {r['window_start']} … {r['window_end']} (accelerator-hours per day fixing each "
            "rule would recover; estimates overlap):",
            soft_wrap=True,
        )
        for r in impact.head(10).itertuples():
            console.print(
                f"  {r.impact_rank}. {r.rule}: {r.accelerator_hours_per_day:.3g} accelerator-h/day, "
                f"in {r.n_runs} run(s) of {r.n_jobs} job(s)",
                highlight=False,
                soft_wrap=True,
            )
    hosts = read_pandas(warehouse, ["host_health"])["host_health"]
    if len(hosts):
        sus = hosts[hosts["suspect_hardware"].astype(bool)]
        from schemas import HEALTH_KINDS  # keeps `tracelake --help` light (pyarrow)

        seen = ", ".join(f"{(hosts['kind'] == k).sum()} {k}(s)" for k in HEALTH_KINDS if (hosts["kind"] == k).any())
        console.print(f"host health: {len(sus)} hardware suspect(s) among {seen}")
        for r in sus.sort_values("kind", key=lambda k: k.map(HEALTH_KINDS.index), kind="stable").itertuples():
            if r.kind == "link":
                measure = f"bus bandwidth {r.busbw_ratio:.2f}x the run's other links'"
            elif pd.notna(r.last_arrival_ratio):
                measure = f"last-arrival ratio {r.last_arrival_ratio:.2f}"
            else:
                measure = f"step-time excess {r.step_excess_p50_pct:+.1f} %"
            console.print(
                f"  {r.kind} {r.target}: slow in {r.n_slow_jobs} of {r.n_jobs} job(s), {measure}", highlight=False
            )


class Engine(str, enum.Enum):
    auto = "auto"
    duckdb = "duckdb"
    spark = "spark"


class Format(str, enum.Enum):
    auto = "auto"
    table = "table"
    csv = "csv"
    json = "json"


@app.command()
def sql(
    query: str | None = typer.Argument(
        None, help="Spark SQL; every warehouse table is a view by its name (tracelake tables). None: a prompt."
    ),
    warehouse: str = typer.Option(..., help="Warehouse folder (or URI)."),
    limit: int = typer.Option(50, min=0, help="Rows to print."),
    fmt: Format = typer.Option(
        Format.auto, "--format", help="table, csv or json; auto: a table on a terminal, csv when piped."
    ),
    engine: Engine = typer.Option(
        Engine.auto,
        help="duckdb: embedded, no JVM (seconds); spark: a Spark session (--master, else $TRACELAKE_SPARK_MASTER or "
        "local[*]); auto: spark with --master, else duckdb.",
    ),
    master: str | None = typer.Option(None, help="Spark master URL (spark://…, sc://…, local[2]): runs on Spark."),
    as_of: str | None = typer.Option(
        None,
        "--as-of",
        help="Read the tables as they were: a table version (see 'tracelake history') or an ISO 8601 time (UTC).",
    ),
) -> None:
    """Query the warehouse tables (their latest versions, or those current --as-of): one query, or a prompt without
    one. Errors come in one or two lines, with the nearest table or column names."""
    try:
        when = parse_as_of(as_of)
    except ValueError as exc:
        _fail("tracelake sql", str(exc), 2)
    _require_warehouse("tracelake sql", warehouse)
    use_spark = engine == Engine.spark or (engine == Engine.auto and master is not None)
    if query is None:
        _prompt(warehouse, when, use_spark, master, limit, fmt.value)
        return
    try:
        rows, more = _answer(warehouse, query, when, use_spark, master, limit)
        _print_frame(rows, fmt.value)
        if more:  # said on stderr: a csv or json export stays clean
            Console(stderr=True).print(f"tracelake sql: the first {limit} rows; more with --limit", highlight=False)
    except SqlError as exc:
        _fail("tracelake sql", str(exc), 1)


def _answer(
    warehouse: str, query: str, when, use_spark: bool, master: str | None, limit: int
) -> tuple[pd.DataFrame, bool]:
    """``(rows, more)``: the first ``limit`` rows of ``query`` on DuckDB (:func:`jobs.sql.run_duckdb`) or Spark
    (:func:`run_sql`), integers exact (nullable integer dtypes: a ns column with a null stays integral), and whether
    the query had more.

    Raises:
        SqlError: a query that does not parse, name a table or bind (Spark's errors in their first line), or is not
            one read-only query (:func:`jobs.agent.readonly_sql.check_query`, the agents' sql tool's check).
    """
    referenced_tables(query)  # an unknown table is named with its nearest
    try:
        check_query(query, [*TABLES, *FLEET_TABLES], bounded=False)  # a user here can stop a long query
    except UnsafeQuery as exc:
        raise SqlError(f"read-only: {exc}") from None
    if not use_spark:
        _EMBEDDED_ENGINE_RAN[0] = True
        rows = run_duckdb(warehouse, query, as_of=when, limit=limit + 1).to_pandas(types_mapper=exact_ints)
    else:
        with _spark_errors_in_one_line("tracelake sql"):
            rows = to_pandas_exact(run_sql(get_spark(master), warehouse, query, as_of=when).limit(limit + 1))
    return rows.head(limit), len(rows) > limit


def _require_warehouse(command: str, warehouse: str) -> None:
    """Exit 2 with one line when ``warehouse`` holds no tracelake table (:func:`jobs.warehouse.require_warehouse`)."""
    try:
        require_warehouse(warehouse)
    except NoWarehouse as exc:
        _fail(command, str(exc), 2)


def _lines(text: str) -> str:
    """``text`` line by line made :func:`printable` (its line breaks kept)."""
    return "\n".join(printable(line) for line in str(text).splitlines())


def _fail(command: str, message: str, code: int) -> NoReturn:
    """Print ``message`` (escaped: names from traces and queries) on stderr after ``command:`` and exit ``code``."""
    Console(stderr=True).print(
        f"[red]{command}:[/red] {escape(_lines(message))}",
        soft_wrap=True,
        highlight=False,
    )
    raise typer.Exit(code)


@app.command()
def tables(
    warehouse: str | None = typer.Option(None, help="Warehouse folder (or URI): adds each table's rows."),
) -> None:
    """The warehouse tables (every documented one, empty or not): stage, columns, rows and what a row is."""
    if warehouse is not None:
        _require_warehouse("tracelake tables", warehouse)
    rows = pd.DataFrame(sql_tables(warehouse))
    if warehouse is None:
        rows = rows.drop(columns=["rows"])
    _print_frame(rows, Format.auto.value, wrap=("description",), keep=("name",))


@app.command()
def describe(table: str = typer.Argument(..., help="A warehouse table (tracelake tables lists them).")) -> None:
    """The columns of TABLE: type, unit, nullable and what each holds (schemas/tables.py)."""
    try:
        cols = describe_table(table)
    except SqlError as exc:
        _fail("tracelake describe", str(exc), 2)
    _print_frame(pd.DataFrame(cols), Format.auto.value, wrap=("description",), keep=("name",))


@app.command()
def history(
    table: str | None = typer.Argument(None, help="A warehouse table (default: every table's latest version)."),
    warehouse: str = typer.Option(..., help="Warehouse folder (or URI)."),
    limit: int = typer.Option(20, help="Commits to print for TABLE."),
) -> None:
    """The versions of the warehouse tables: for TABLE every commit (version, time, operation, the run that wrote
    it, files added and removed); without TABLE each table's latest version. 'tracelake sql --as-of' reads any."""
    names = [*TABLES, *FLEET_TABLES]
    if table is not None and table not in names:
        console.print(f"[red]tracelake history:[/red] no table {escape(table)!r}; tables: {', '.join(names)}")
        raise typer.Exit(2)
    _require_warehouse("tracelake history", warehouse)
    for name in [table] if table else names:
        for h in warehouse_history(warehouse, name, limit if table else 1):
            files = f", files +{h['files_added']} -{h['files_removed']}" if h["files_added"] is not None else ""
            console.print(
                f"{name} v{h['version']}  {h['time']}  {h['operation']}"
                + (f"  run {h['run']}" if h["run"] else "")
                + (f"  write {h['write_id']}" if h["write_id"] else "")
                + files,
                highlight=False,
                soft_wrap=True,
            )


@app.command()
def maintain(
    warehouse: str = typer.Option(..., help="Warehouse folder (or URI)."),
    retention_hours: float = typer.Option(
        168.0, help="Keep the files any table version of the last this-many hours needs (7 days: --as-of reaches)."
    ),
) -> None:
    """Compact small data files and vacuum the files no recent version references (safe while runs and readers
    work); the fleet report DAG runs it daily."""
    done = warehouse_maintain(warehouse, retention_hours=retention_hours)
    for name, m in done.items():
        console.print(
            f"{name}: {m['files_compacted']} small files compacted into {m['files_added']}, "
            f"{m['files_vacuumed']} unreferenced files deleted, version {m['version']}"
            + (" (compaction skipped: a writer committed first)" if m["skipped"] else ""),
            highlight=False,
        )
    if not done:
        console.print("no table written yet")


@app.command()
def migrate(warehouse: str = typer.Option(..., help="Warehouse folder (or URI) of the pre-Delta layout.")) -> None:
    """Convert a warehouse written before the tables became Delta Lake tables, once, in place (no data file is
    rewritten; validation marks and MLflow references are untouched)."""
    try:
        done = warehouse_migrate(warehouse)
    except CommitError as exc:
        console.print(f"[red]tracelake migrate:[/red] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(1) from None
    for name, what in done.items():
        console.print(f"{name}: {what}", highlight=False)


@app.command()
def shell(
    warehouse: str = typer.Option(..., help="Warehouse folder (or URI)."),
    master: str | None = typer.Option(None, help="Spark master URL: query on Spark instead of the embedded engine."),
) -> None:
    """Interactive SQL prompt over the warehouse tables (what 'tracelake sql' without a query opens)."""
    _require_warehouse("tracelake shell", warehouse)
    _prompt(warehouse, None, master is not None, master, 200, Format.auto.value)


def _prompt(warehouse: str, when, use_spark: bool, master: str | None, limit: int, fmt: str) -> None:
    """The prompt: a query ends with ';' (or with the input); ``\\d`` lists the tables, ``\\d TABLE`` describes one;
    ``exit`` quits. On a terminal an error is shown in one or two lines and the prompt goes on. Fed from a pipe or
    file there is no banner nor prompt on stdout: only the results (in ``fmt``), the errors on stderr, and exit 1
    after the input when a query failed."""
    interactive = sys.stdin.isatty()
    if interactive:
        console.print(
            f"{len(sql_tables())} tables (\\d lists them, \\d TABLE its columns); "
            "end a query with ';', 'exit' to quit.",
            highlight=False,
            markup=False,
        )
    errors = Console(stderr=not interactive)
    failed = False

    def show(error: SqlError) -> None:
        nonlocal failed
        failed = True
        errors.print(f"[red]error:[/red] {escape(_lines(str(error)))}", highlight=False, soft_wrap=True)

    def answer(q: str) -> None:
        nonlocal failed
        try:
            rows, more = _answer(warehouse, q, when, use_spark, master, limit)
        except SqlError as exc:  # shown in one or two lines; the prompt goes on
            show(exc)
            return
        except typer.Exit:  # a Spark failure, already shown in one line
            failed = True
            return
        _print_frame(rows, fmt)
        if more:
            errors.print(f"(the first {limit} rows)", highlight=False)

    buf: list[str] = []
    while True:
        try:
            line = input(("tracelake> " if not buf else "      ...> ") if interactive else "")
        except EOFError:
            last = "\n".join(buf).strip().rstrip(";").strip()  # a last query without ';'
            if last:
                answer(last)
            break
        cmd = line.strip()
        if not buf and cmd.lower() in ("exit", "quit", "\\q"):
            break
        if not buf and cmd.startswith("\\d"):
            name = cmd[2:].strip().rstrip(";")
            try:
                listing = pd.DataFrame(describe_table(name) if name else sql_tables(warehouse))
            except SqlError as exc:
                show(exc)
                continue
            _print_frame(listing, fmt, wrap=("description",), keep=("name",))
            continue
        buf.append(line)
        if line.rstrip().endswith(";"):
            q = "\n".join(buf).strip().rstrip(";").strip()  # its lines kept: an error names the line
            buf = []
            if q:
                answer(q)
    if failed and not interactive:
        raise typer.Exit(1)


@app.command()
def mcp(
    warehouse: str = typer.Option(..., help="Warehouse folder (or URI) the tools read."),
    http: str | None = typer.Option(
        None,
        help="Serve streamable HTTP on HOST:PORT (e.g. 127.0.0.1:8765) at "
        "/mcp instead of stdio. A non-loopback HOST needs "
        "$TRACELAKE_MCP_TOKEN (clients send it as a bearer token).",
    ),
    no_sql: bool = typer.Option(False, "--no-sql", help="Leave out the sql tool (no engine process is started)."),
    sql_timeout: float = typer.Option(30.0, help="Time limit of one sql query, s (past it its process is killed)."),
) -> None:
    """Serve the warehouse to agents over the Model Context Protocol (stdio, or streamable HTTP)."""
    from jobs.agent.server import TOKEN_ENV, build_server, parse_bind, serve_http  # the MCP SDK: mcp only

    try:
        server = build_server(warehouse, sql=not no_sql, sql_timeout_s=sql_timeout)
        if http is None:
            server.run("stdio")
            return
        host, port = parse_bind(http)
        serve_http(server, host, port, os.environ.get(TOKEN_ENV) or None)
    except (ValueError, FileNotFoundError) as e:
        Console(stderr=True).print(f"[red]tracelake mcp:[/red] {escape(str(e))}")
        raise typer.Exit(2) from e


#: The narrowest a cut text column or a wrapped one is made when the terminal is too narrow for every column whole.
_CUT_MIN, _WRAP_MIN = 12, 24


def _print_frame(df, fmt: str, wrap: tuple[str, ...] = (), keep: tuple[str, ...] = ()) -> None:
    """Print a result: ``csv`` / ``json`` exact (csv: lists, maps and structs as JSON text); ``table`` one line per
    row, or one ``column: value`` block per row when wider than 10 columns; ``auto`` is ``table`` on a terminal and
    ``csv`` when piped. In a table or block a null reads :data:`_NULL` in every column, and each number column has
    one format (:func:`_column_texts`); numbers and the ``keep`` columns are never cut, the ``wrap`` columns wrap, and
    the other text columns use the terminal's width (:func:`_fit`) before long values are cut with an ellipsis. Text
    from traces is printed escaped."""
    if fmt == "auto":
        fmt = "table" if console.is_terminal else "csv"
    if fmt == "csv":
        typer.echo(_nested_as_json(df).to_csv(index=False), nl=False)
        return
    if fmt == "json":
        typer.echo(df.to_json(orient="records", default_handler=str))
        return
    texts = {c: _column_texts(df[c]) for c in df.columns}
    cells = {c: [printable(x) for x in texts[c][0]] for c in df.columns}
    numeric = {c for c in df.columns if texts[c][1]}
    if len(df.columns) > 10:  # too wide for a terminal table: one "column: value" block per row
        for i in range(len(df)):
            console.print(f"[bold]-- row {i + 1}[/bold]")
            for c in df.columns:
                console.print(f"  {c}: {cells[c][i]}", highlight=False, markup=False)
        return
    natural = {c: max([len(str(c)), *map(len, cells[c])]) for c in df.columns}
    whole = {c for c in df.columns if c in numeric or c in keep}
    wrapped = [c for c in df.columns if c in wrap and c not in whole]
    text = [c for c in df.columns if c not in whole and c not in wrapped]
    # each column costs 2 characters besides its own width (the padding and edges of box.SIMPLE_HEAD)
    room = console.width - 2 * len(df.columns) - sum(natural[c] for c in whole)
    reserved = sum(min(natural[c], _WRAP_MIN) for c in wrapped)
    widths = {c: natural[c] for c in whole}
    widths |= _fit({c: natural[c] for c in text}, room - reserved, _CUT_MIN)
    widths |= _fit({c: natural[c] for c in wrapped}, room - sum(widths[c] for c in text), _WRAP_MIN)
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for c in df.columns:
        t.add_column(
            escape(str(c)),
            justify="right" if c in numeric else "left",
            no_wrap=c not in wrapped,
            overflow="fold" if c in wrapped else "ellipsis",
            width=widths[c],
        )
    for i in range(len(df)):
        t.add_row(*[escape(cells[c][i]) for c in df.columns])  # a kernel name "[/]" is text, not rich markup
    console.print(t)
    console.print(f"{len(df)} row(s)", highlight=False)


def _fit(natural: dict[str, int], room: int, floor: int) -> dict[str, int]:
    """Widths for columns of ``natural`` widths in ``room`` characters: each its natural width when all fit; else the
    narrow ones whole and the wide ones an equal share of what is left (never below ``floor``, nor above their
    natural width)."""
    out: dict[str, int] = {}
    for k, c in enumerate(sorted(natural, key=natural.__getitem__)):
        out[c] = min(natural[c], max(floor, (room - sum(out.values())) // (len(natural) - k)))
    return out


#: What a null reads in a terminal table, whatever the column's type.
_NULL = "—"
#: Significant digits the smallest non-zero value of a float column keeps in a terminal table (at most 6 decimals).
_FLOAT_DIGITS = 3


def _null(v) -> bool:
    return v is None or v is pd.NA or v is pd.NaT or (isinstance(v, float) and v != v)


def _nested(v) -> bool:
    """A list (numpy array), map (list of key-value tuples) or struct (dict) value of a result column."""
    return isinstance(v, np.ndarray | list | tuple | dict)


def _plain(v):
    """A result value as JSON-ready Python: arrays and map entries as lists, numpy scalars as Python's, a non-finite
    float or a null as ``None``, other values (dates, decimals) as their text."""
    if isinstance(v, np.ndarray | list | tuple):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, np.generic):
        v = v.item()
    if _null(v) or (isinstance(v, float) and not math.isfinite(v)):
        return None
    return v if isinstance(v, str | int | float | bool) else str(v)


def _json_text(v, compact: bool = False) -> str:
    return json.dumps(_plain(v), ensure_ascii=False, separators=(",", ":") if compact else None)


def _nested_as_json(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its list, map and struct values as compact JSON text (``["a","b"]``, not numpy's ``['a' 'b']``):
    what a csv reader can parse; nulls stay empty cells."""
    out = df
    for c in df.columns:
        if df[c].dtype == object and any(_nested(v) for v in df[c]):
            out = out.copy() if out is df else out
            out[c] = [None if _null(v) else _json_text(v, compact=True) for v in df[c]]
    return out


def _column_texts(s: pd.Series) -> tuple[list[str], bool]:
    """``(texts, numeric)``: how a terminal table shows the values of one result column, and whether they are numbers
    (right-aligned, never cut). A null is :data:`_NULL` in every column; integers print whole (no thousands
    separators: a value can be copied into a query); a float (or decimal) column gets one format from its values
    (:func:`_float_format`); lists, maps and structs print as JSON."""
    values = list(s)
    if s.dtype.kind in "iu":
        return [_NULL if _null(v) else str(int(v)) for v in values], True
    present = [v for v in values if not _null(v)]
    if s.dtype.kind == "f" or (present and all(isinstance(v, Decimal) for v in present)):
        floats = [None if _null(v) else float(v) for v in values]
        form = _float_format([x for x in floats if x is not None])
        return [_NULL if x is None else form(x) for x in floats], True
    return [_NULL if _null(v) else _json_text(v) if _nested(v) else str(v) for v in values], False


def _float_format(xs: list[float]):
    """One format for a float column's values: integers when every finite value is whole; scientific (4 significant
    digits) when they are all tiny (< 1e-4) or one is beyond exact floats (≥ 1e15); else a fixed number of decimals
    that keeps :data:`_FLOAT_DIGITS` significant digits of the smallest non-zero value (0 to 6 decimals)."""
    finite = [abs(x) for x in xs if math.isfinite(x)]
    nonzero = [x for x in finite if x]
    if nonzero and (max(nonzero) >= 1e15 or max(nonzero) < 1e-4):
        spec = ".3e"
    elif all(x.is_integer() for x in finite):
        spec = ".0f"
    else:
        spec = f".{min(6, max(0, _FLOAT_DIGITS - 1 - math.floor(math.log10(min(nonzero)))))}f"
    return lambda x: f"{x + 0.0:{spec}}" if math.isfinite(x) else str(x)  # + 0.0: -0.0 prints 0


from jobs.publish.compare import compare_command  # noqa: E402  (light: no pyspark or mlflow at import)

app.command(
    name="compare",
    help="Compare two jobs (MLflow run id, job id or job#attempt): metric deltas, "
    "kernels/ops added, removed, slower, faster, findings appeared/cleared.",
)(compare_command)


#: Set once a command ran a query on the embedded engine (:func:`main` then skips the interpreter's teardown).
_EMBEDDED_ENGINE_RAN = [False]


def main() -> None:
    """Console-script entry point.

    A command that ran a query on the embedded engine ends its process with its exit code and its output flushed,
    without the interpreter's teardown: DuckDB stops reading a table's ``pyarrow.dataset`` at a LIMIT while Arrow's
    readahead threads still fill batches, and at teardown those threads made 4 runs of 8 of ``tracelake sql "SELECT *
    FROM events" --limit 2`` abort (rc 134, "terminate called without an active exception"), segfault or hang after
    a correct answer. Such a command has nothing left to tear down."""
    try:
        app()
    except SystemExit as exc:
        if not _EMBEDDED_ENGINE_RAN[0]:
            raise
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    main()
