"""The ``tracelake`` command line (typer).

``tracelake run --raw <folder or s3://…> --warehouse <folder> [--tracking-uri <mlflow uri>]``
runs the main job; ``tracelake demo`` captures a real 2-rank training job first and runs the main
job on it; ``tracelake normalize`` / ``tracelake analyze`` run one stage.
"""

from __future__ import annotations

import enum
import json
import os
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import pandas as pd
import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from jobs.analyze.findings.ranking import LOST_UNITS, finding_window
from jobs.common.ids import printable
from jobs.demo.train_ddp import require_torch, run_demo_training
from jobs.executor import LocalExecutor
from jobs.fleet.regressions import BASELINE_RUNS, DEFAULT_ALPHA, THRESHOLD_PCT, THRESHOLD_PP, testing_in_words
from jobs.landing.land import land as land_files
from jobs.publish.headline import HEADLINE_LABELS, headline
from jobs.publish.tracking import client_for
from jobs.publish.verdict import job_verdict
from jobs.spark import SparkUnavailable, get_spark, spark_log_file
from jobs.sql import SqlError, parse_as_of, referenced_tables, run_duckdb, run_sql
from jobs.sql import describe as describe_table
from jobs.sql import tables as sql_tables
from jobs.warehouse import CommitError, exact_ints, read_pandas, to_pandas_exact
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


def _print_findings(job_id: str, findings: pd.DataFrame, top: int = 3) -> None:
    """The job's top findings, most time lost first: what, ms per step, what to do."""
    f = findings[findings["job_id"] == job_id].sort_values(["attempt", "rank_order"]) if len(findings) else findings
    if not len(f):
        return
    for i, r in enumerate(f.head(top).itertuples(), start=1):
        lost = r.est_time_lost_per_step_ns
        unit = LOST_UNITS[finding_window(getattr(r, "evidence_json", None))]
        cost = f"{lost / 1e6:.1f} {unit}" if lost is not None and lost == lost else "cost unknown"
        console.print(f"  {i}. [bold]{escape(str(r.title))}[/bold] ({cost}, rule {r.rule})", soft_wrap=True)
        if isinstance(r.recommendation, str) and r.recommendation:
            console.print(f"     what to do: {escape(r.recommendation)}", soft_wrap=True, highlight=False)
    if len(f) > top:
        console.print(f"  … {len(f) - top} more in the job report")


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
    for job_id, job_ranks in result.ranks.groupby("job_id", sort=True):
        attempt = int(job_ranks["attempt"].max()) if "attempt" in job_ranks else 0
        h = head.get((str(job_id), attempt), {})
        bits = [f"{len(job_ranks)} rank(s)"]
        for k in ("step_time_p50_ms", "idle_pct"):
            if k in h:
                bits.append(f"{HEADLINE_LABELS[k]} {h[k]:.2f}")
        console.print(f"[bold]job {escape(str(job_id))}[/bold]: " + "; ".join(bits), highlight=False, soft_wrap=True)
        jf = findings[findings["job_id"] == job_id] if len(findings) else None
        jc = coverage[coverage["job_id"] == job_id] if isinstance(coverage, pd.DataFrame) and len(coverage) else None
        v = job_verdict(jf, jc)
        if v.status != "findings":
            console.print(f"  verdict: {escape(v.headline)}", highlight=False, soft_wrap=True)
        _print_findings(job_id, findings)
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
        paths = job_report_paths(result.tracking_uri, list(result.run_ids.values()))
        for (job, attempt), run_id in sorted(result.run_ids.items()):
            console.print(f"MLflow run for job {job} (attempt {attempt}): {run_id}", soft_wrap=True)
            path = paths.get(run_id)
            if path:
                console.print(f"  job report: {path}", highlight=False, soft_wrap=True)
        console.print(f"view them: mlflow ui --backend-store-uri {result.tracking_uri}", soft_wrap=True)


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
        None, help="MLflow tracking URI [default: sqlite:///<warehouse>/mlflow.db]."
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
        help="job_name of the traces without a manifest (bare files): runs "
        "that share it are compared for regressions [default: the folder's job id].",
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
    job_id: str | None = typer.Option(None, help="Job folder [default: the job name, else the folder given]."),
    attempt: int = typer.Option(0, min=0, help="Attempt (restart) number of this run."),
    tag: list[str] | None = typer.Option(None, help="A tag KEY=VALUE, repeatable (model=… feeds fleet statistics)."),
    rank: int | None = typer.Option(None, min=0, help="Rank of a single file whose trace and name do not say."),
    world_size: int | None = typer.Option(None, min=1, help="Ranks of the job [default: the traces', else landed]."),
    host: str | None = typer.Option(None, help="Host the traces were captured on [default: unknown]."),
    date: str | None = typer.Option(None, help="Landing date YYYY-MM-DD [default: each file's modification date]."),
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
    _print_findings(slow_job, result.findings)
    _print_regression(slow_job, result.regressions)
    run_id = result.run_ids.get((slow_job, 0))
    if run_id:
        path = job_report_path(result.tracking_uri, run_id)
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
    use_spark = engine == Engine.spark or (engine == Engine.auto and master is not None)
    if query is None:
        _prompt(warehouse, when, use_spark, master, limit)
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
        SqlError: a query that does not parse, name a table or bind (Spark's errors in their first line).
    """
    if not use_spark:
        rows = run_duckdb(warehouse, query, as_of=when, limit=limit + 1).to_pandas(types_mapper=exact_ints)
    else:
        referenced_tables(query)  # an unknown table is named with its nearest, as on the embedded engine
        with _spark_errors_in_one_line("tracelake sql"):
            rows = to_pandas_exact(run_sql(get_spark(master), warehouse, query, as_of=when).limit(limit + 1))
    return rows.head(limit), len(rows) > limit


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
    rows = pd.DataFrame(sql_tables(warehouse))
    if warehouse is None:
        rows = rows.drop(columns=["rows"])
    _print_frame(rows, Format.auto.value, wrap=("description",))


@app.command()
def describe(table: str = typer.Argument(..., help="A warehouse table (tracelake tables lists them).")) -> None:
    """The columns of TABLE: type, unit, nullable and what each holds (schemas/tables.py)."""
    try:
        cols = describe_table(table)
    except SqlError as exc:
        _fail("tracelake describe", str(exc), 2)
    _print_frame(pd.DataFrame(cols), Format.auto.value, wrap=("description",))


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
    _prompt(warehouse, None, master is not None, master, 200)


def _prompt(warehouse: str, when, use_spark: bool, master: str | None, limit: int) -> None:
    """The interactive prompt: a query ends with ';'; ``\\d`` lists the tables, ``\\d TABLE`` describes one;
    ``exit`` quits. An error is shown in one or two lines and the prompt goes on."""
    console.print(
        f"{len(sql_tables())} tables (\\d lists them, \\d TABLE its columns); end a query with ';', 'exit' to quit.",
        highlight=False,
        markup=False,
    )
    buf: list[str] = []
    while True:
        try:
            line = input("tracelake> " if not buf else "      ...> ")
        except EOFError:
            break
        cmd = line.strip()
        if not buf and cmd.lower() in ("exit", "quit", "\\q"):
            break
        if not buf and cmd.startswith("\\d"):
            name = cmd[2:].strip().rstrip(";")
            try:
                shown_ = pd.DataFrame(describe_table(name) if name else sql_tables(warehouse))
                _print_frame(shown_, "table", wrap=("description",))
            except SqlError as exc:
                console.print(f"[red]error:[/red] {escape(_lines(str(exc)))}", highlight=False)
            continue
        buf.append(line)
        if line.rstrip().endswith(";"):
            q = " ".join(buf).strip().rstrip(";")
            buf = []
            try:
                rows, more = _answer(warehouse, q, when, use_spark, master, limit)
                _print_frame(rows, "table")
                if more:
                    console.print(f"(the first {limit} rows)", highlight=False)
            except (SqlError, typer.Exit) as exc:  # shown in one or two lines; the prompt goes on
                if isinstance(exc, SqlError):
                    console.print(f"[red]error:[/red] {escape(_lines(str(exc)))}", highlight=False)


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


def _print_frame(df, fmt: str, wrap: tuple[str, ...] = ()) -> None:
    """Print a result: ``csv`` / ``json`` as is; ``table`` one line per row (long text cut with an ellipsis, numbers
    right-aligned; the ``wrap`` columns wrap instead), or one ``column: value`` block per row when wider than 10
    columns; ``auto`` is ``table`` on a terminal and ``csv`` when piped. Text from traces is printed escaped."""
    if fmt == "auto":
        fmt = "table" if console.is_terminal else "csv"
    if fmt == "csv":
        typer.echo(df.to_csv(index=False), nl=False)
    elif fmt == "json":
        typer.echo(df.to_json(orient="records", default_handler=str))
    elif len(df.columns) > 10:  # too wide for a terminal table: one "column: value" block per row
        for i, row in enumerate(df.to_dict(orient="records")):
            console.print(f"[bold]-- row {i + 1}[/bold]")
            for k, v in row.items():
                console.print(f"  {k}: {printable(_cell(v))}", highlight=False, markup=False)
    else:
        cells = {c: [printable(_cell(v)) for v in df[c]] for c in df.columns}
        widths = {c: max([len(str(c)), *map(len, cells[c])]) for c in df.columns}
        numeric = {c for c in df.columns if df[c].dtype.kind in "fiu"}
        # numbers are never cut: the text columns share what is left of the terminal's width
        left = console.width - sum(widths[c] for c in numeric) - 2 * len(df.columns)
        text = [c for c in df.columns if c not in numeric and c not in wrap]
        share = max(12, left // max(len(text), 1))
        t = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
        for c in df.columns:
            t.add_column(
                escape(str(c)),
                justify="right" if c in numeric else "left",
                no_wrap=c not in wrap,
                overflow="fold" if c in wrap else "ellipsis",
                width=None if c in wrap else widths[c] if c in numeric else min(widths[c], share),
            )
        for i in range(len(df)):
            t.add_row(*[escape(cells[c][i]) for c in df.columns])  # a kernel name "[/]" is text, not rich markup
        console.print(t)
        console.print(f"{len(df)} row(s)", highlight=False)


def _cell(v) -> str:
    if v is None or v is pd.NA:
        return "—"
    if isinstance(v, float):
        return "—" if v != v else f"{v:.4g}"
    return str(v)


from jobs.publish.compare import compare_command  # noqa: E402  (light: no pyspark or mlflow at import)

app.command(
    name="compare",
    help="Compare two jobs (MLflow run id, job id or job#attempt): metric deltas, "
    "kernels/ops added, removed, slower, faster, findings appeared/cleared.",
)(compare_command)


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
