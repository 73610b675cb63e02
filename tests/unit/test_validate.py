"""Great Expectations suites derived from schemas/ (jobs/validate/suites.py) on real tables, corrupted on purpose.

The tables are the real output of normalize + analyze (pure functions, no Spark) on the two ranks of
HTA's ``trace_filter`` corpus traces, each rank made its own job (``job_a``, ``job_b``) so that a
failure can be attributed to the job whose rows broke the check. Each corruption is one edit of
one row; the test asserts the check that names it fails with exactly that many unexpected rows.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

from schemas.expectations import STAGE_TABLES, checks_for, is_duration
from schemas.tables import TABLES

TRACES = (
    "HolisticTraceAnalysis/trace_filter/sampled_rank-0.json.gz",
    "HolisticTraceAnalysis/trace_filter/sampled_rank-1.json.gz",
)
INTS = {
    pa.int8(): pd.Int8Dtype(),
    pa.int16(): pd.Int16Dtype(),
    pa.int32(): pd.Int32Dtype(),
    pa.int64(): pd.Int64Dtype(),
}


def _pd(t: pa.Table) -> pd.DataFrame:
    return t.to_pandas(types_mapper=INTS.get)


@pytest.fixture(scope="module")
def real_tables(CORPUS):
    """captures, events, steps, ranks of two real ranks, as jobs ``job_a`` (rank 0) and ``job_b`` (rank 1)."""
    from jobs.analyze.critical_path.rank import rank_critical_path
    from jobs.analyze.hta.breakdown import analyze_rank
    from jobs.landing.discover import CaptureFile
    from jobs.normalize.job import captures_table, normalize_file

    caps, events, steps, ranks, cps = [], [], [], [], []
    for job, rel in zip(("job_a", "job_b"), TRACES):
        p = CORPUS / "torch" / rel
        task = CaptureFile(uri=str(p), capture_id=f"cap-{job}", job_id=job, size_bytes=p.stat().st_size).to_dict()
        cap, ev = normalize_file(task, p.read_bytes())
        assert cap["status"] == "ingested", cap["reason"]
        s, r = analyze_rank(ev)
        caps.append(cap)
        events.append(ev)
        steps.append(s)
        ranks.append(r)
        cps.append(rank_critical_path(ev)[0])
    return {
        "captures": _pd(captures_table(caps)),
        "events": _pd(pa.concat_tables(events)),
        "steps": _pd(pa.concat_tables(steps)),
        "ranks": _pd(pa.concat_tables(ranks)),
        "critical_path": _pd(pa.concat_tables(cps)),
    }


def _validate(frames: dict, stage: str, **kw):
    from jobs.validate.suites import validate_frames

    return validate_frames(frames, stage, job_ids=["job_a", "job_b"], **kw)


def _failed(report, table: str) -> dict[str, object]:
    t = next(v for v in report.tables.values() if v.table == table)
    return {c.id: c for c in t.failed}


# ----------------------------------------------------------------------------- derivation from schemas


def test_checks_are_derived_from_the_table_declarations():
    for name, table in TABLES.items():
        ids = {c.id for c in checks_for(table)}
        for col in table.columns:
            assert (f"not_null:{col.name}" in ids) == (not col.nullable), (name, col.name)
            if col.name in ("peak_bandwidth_pct", "roofline_pct"):  # on-chip cache can beat device memory
                assert f"non_negative:{col.name}" in ids and f"pct_range:{col.name}" not in ids
            elif col.name.endswith("_pct"):
                assert f"pct_range:{col.name}" in ids
        assert "unique:key" in ids
        key = next(c for c in checks_for(table) if c.id == "unique:key")
        assert key.columns == table.key
    # durations must be ≥ 0, points in time and clock offsets may be anything
    assert is_duration("dur_ns") and is_duration("idle_time_ns") and is_duration("wait_ns")
    for col in ("ts_ns", "step_start_ns", "trace_end_ns", "aligned_start_ns", "base_time_ns", "clock_offset_ns"):
        assert not is_duration(col), col
    steps_ids = {c.id for c in checks_for("steps")}
    assert {"non_negative:step_time_ns", "consistent:breakdown_sum", "consistent:host_busy_within_step"} <= steps_ids
    assert "non_negative:step_start_ns" not in steps_ids
    assert "row_count:discovered" in {c.id for c in checks_for("captures", n_discovered=3)}
    # no op runs above its device's peak FLOP/s: the sanity check of op_efficiency
    assert "pct_range:peak_flops_pct" in {c.id for c in checks_for("op_efficiency")}
    assert {"captures", "events"} <= set(STAGE_TABLES["normalize"])
    assert set(STAGE_TABLES["normalize"]) | set(STAGE_TABLES["analyze"]) == set(TABLES)  # every table is validated


# ----------------------------------------------------------------------------- clean tables pass


def test_real_tables_pass(real_tables):
    norm = _validate({t: real_tables[t] for t in ("captures", "events")}, "normalize", n_discovered=2)
    assert norm.success, norm.summary()
    ana = _validate({t: real_tables[t] for t in ("steps", "ranks")}, "analyze")
    assert ana.success, ana.summary()
    # tables other helpers have not produced yet are reported as missing, not as failures
    assert ana.tables["analyze/kernels"].status == "missing"
    assert ana.tables["analyze/steps"].n_rows == len(real_tables["steps"]) == 4
    assert norm.failed_jobs() == set() and norm.merge(ana).success


def test_a_jobs_check_count_does_not_depend_on_its_batch(real_tables):
    """``job_checks`` counts the checks of the tables where the job has rows: job_a validated alone or
    with job_b gets the same count, though job_b adds a table (critical_path) where job_a has no rows."""
    cp = real_tables["critical_path"]
    alone = _validate({"steps": real_tables["steps"][real_tables["steps"]["job_id"] == "job_a"]}, "analyze")
    both = _validate({"steps": real_tables["steps"], "critical_path": cp[cp["job_id"] == "job_b"]}, "analyze")
    assert both.tables["analyze/steps"].job_rows == {"job_a": 2, "job_b": 2}
    assert both.tables["analyze/critical_path"].job_rows == {"job_b": len(cp[cp["job_id"] == "job_b"])}
    n_steps = len(both.tables["analyze/steps"].checks)
    assert alone.job_checks("job_a") == both.job_checks("job_a") == n_steps
    assert both.job_checks("job_b") == n_steps + len(both.tables["analyze/critical_path"].checks)
    assert both.job_checks() == both.job_checks("job_b")


# ----------------------------------------------------------------------------- corruptions are caught


def _corrupt_steps(steps: pd.DataFrame, how: str) -> pd.DataFrame:
    s = steps.copy()
    b = s.index[s["job_id"] == "job_b"][0]
    if how == "null key":
        s.loc[b, "capture_id"] = None
    elif how == "duplicate key":
        s = pd.concat([s, s.loc[[b]]], ignore_index=True)
    elif how == "negative duration":
        s.loc[b, "idle_host_wait_ns"] = -1
    elif how == "pct 150":
        s.loc[b, "idle_pct"] = 150.0
    elif how == "breakdown does not add up":
        s.loc[b, "compute_time_ns"] = s.loc[b, "compute_time_ns"] + 1000
    elif how == "host time longer than the step":
        s.loc[b, "cpu_op_time_ns"] = s.loc[b, "step_time_ns"] + 1
    return s


@pytest.mark.parametrize(
    "how, check_id, unexpected",
    [
        ("null key", "not_null:capture_id", 1),
        ("duplicate key", "unique:key", 2),  # both copies of the key are unexpected
        ("negative duration", "non_negative:idle_host_wait_ns", 1),
        ("pct 150", "pct_range:idle_pct", 1),
        ("breakdown does not add up", "consistent:breakdown_sum", 1),
        ("host time longer than the step", "consistent:host_busy_within_step", 1),
    ],
)
def test_corrupted_steps_are_caught_and_attributed(real_tables, how, check_id, unexpected):
    bad = _corrupt_steps(real_tables["steps"], how)
    report = _validate({"steps": bad, "ranks": real_tables["ranks"]}, "analyze")
    assert not report.success
    failed = _failed(report, "steps")
    assert check_id in failed, (how, report.summary())
    c = failed[check_id]
    assert c.unexpected_count == unexpected
    assert c.jobs == {"job_b": unexpected}
    assert report.failed_jobs() == {"job_b"} and report.job_success("job_a")
    assert report.tables["analyze/ranks"].success
    assert check_id in report.summary() and "job_b" in report.summary()


def test_corrupted_ranks_pct_and_events_duration(real_tables):
    ranks = real_tables["ranks"].copy()
    ranks.loc[ranks["job_id"] == "job_a", "compute_pct"] = -0.5
    ev = real_tables["events"].copy()
    x = ev.index[(ev["job_id"] == "job_b") & ev["dur_ns"].notna()][:3]
    ev.loc[x, "dur_ns"] = -7
    ana = _validate({"steps": real_tables["steps"], "ranks": ranks}, "analyze")
    assert _failed(ana, "ranks")["pct_range:compute_pct"].jobs == {"job_a": 1}
    norm = _validate({"captures": real_tables["captures"], "events": ev}, "normalize", n_discovered=2)
    c = _failed(norm, "events")["non_negative:dur_ns"]
    assert c.unexpected_count == 3 and c.jobs == {"job_b": 3} and c.partial_unexpected[0] == "-7"


def test_critical_path_segments_must_add_up_to_their_path(real_tables):
    cp = real_tables["critical_path"]
    assert _validate({"critical_path": cp}, "analyze").success
    bad = cp.copy()
    b = bad.index[(bad["job_id"] == "job_b") & (bad["bound_by"] != "sync")][0]
    path = (bad["job_id"] == "job_b") & (bad["step"] == bad.loc[b, "step"]) & (bad["scope"] == bad.loc[b, "scope"])
    bad.loc[b, "dur_ns"] = bad.loc[b, "dur_ns"] + 1000
    c = bad.index[(bad["job_id"] == "job_a")][0]
    bad.loc[c, "bound_by"] = "gremlins"
    failed = _failed(_validate({"critical_path": bad}, "analyze"), "critical_path")
    # every segment of the edited path now disagrees with its path_length
    assert failed["consistent:segments_sum_to_path"].jobs == {"job_b": int(path.sum())}
    assert failed["in_set:bound_by"].jobs == {"job_a": 1} and failed["in_set:bound_by"].partial_unexpected == [
        "gremlins"
    ]


def test_enumerated_values_come_from_the_column_docs():
    from schemas.expectations import value_set

    assert value_set("captures", "status") == ("ingested", "quarantined", "cataloged")
    assert value_set("events", "ph") == ("X", "i", "C")
    assert "late_start" in value_set("critical_path", "bound_by")
    assert "job" not in value_set("critical_path", "bound_by")  # `job` there is a value of `scope`


def test_every_raw_file_must_be_accounted_for(real_tables):
    # discovery found 3 files but captures has 2 rows: one file was lost between discovery and load
    norm = _validate(
        {"captures": real_tables["captures"], "events": real_tables["events"]}, "normalize", n_discovered=3
    )
    c = _failed(norm, "captures")["row_count:discovered"]
    assert c.observed == "2"
    assert set(c.jobs) == {"job_a", "job_b"}  # not attributable to rows: the whole batch fails
    # no captures table at all while files were discovered
    empty = _validate({"events": real_tables["events"]}, "normalize", n_discovered=2)
    assert "row_count:discovered" in _failed(empty, "captures")


def test_missing_column_fails_the_schema_check(real_tables):
    steps = real_tables["steps"].drop(columns=["idle_pct"])
    report = _validate({"steps": steps}, "analyze")
    failed = _failed(report, "steps")
    assert "idle_pct" in failed["schema:columns"].observed
    assert failed["pct_range:idle_pct"].error.startswith("column(s) missing")


# ----------------------------------------------------------------------------- marks in the warehouse


def _written(wh, tables) -> None:
    """``tables`` written (empty Delta tables) in the warehouse ``wh``: marks are read for written tables only."""
    from jobs.warehouse import write_table
    from schemas import declared

    for t in tables:
        write_table(declared(t).empty(), str(wh), t)


def test_marks_record_the_failed_job(real_tables, tmp_path):
    from jobs.validate.marks import read_marks, write_marks

    _written(tmp_path, ("steps", "ranks"))
    bad = _corrupt_steps(real_tables["steps"], "pct 150")
    report = _validate({"steps": bad, "ranks": real_tables["ranks"]}, "analyze")
    written = write_marks(str(tmp_path), report)
    assert sorted(Path(p).parent.name for p in written) == ["ranks", "steps"]
    doc = json.loads((tmp_path / "steps" / "_validation.json").read_text())
    assert doc["jobs"]["job_b"]["status"] == "failed"
    assert doc["jobs"]["job_b"]["failed"] == [{"id": "pct_range:idle_pct", "unexpected_count": 1}]
    assert read_marks(str(tmp_path), "job_b") == {"steps": "failed", "ranks": "passed"}
    assert read_marks(str(tmp_path), "job_a") == {"steps": "passed", "ranks": "passed"}
    assert read_marks(str(tmp_path), "other") == {"steps": "unvalidated", "ranks": "unvalidated"}
    # a later clean batch of job_b replaces its entry and keeps job_a's
    clean = _validate({"steps": real_tables["steps"][real_tables["steps"]["job_id"] == "job_b"]}, "analyze")
    clean.job_ids = ["job_b"]
    write_marks(str(tmp_path), clean)
    assert read_marks(str(tmp_path), "job_b")["steps"] == "passed"
    assert "job_a" in json.loads((tmp_path / "steps" / "_validation.json").read_text())["jobs"]


def test_marks_of_many_jobs_read_once_as_each_job(real_tables, tmp_path):
    from jobs.validate.marks import read_jobs_marks, read_marks, write_marks

    _written(tmp_path, ("steps", "ranks", "findings"))
    report = _validate(
        {"steps": _corrupt_steps(real_tables["steps"], "pct 150"), "ranks": real_tables["ranks"]}, "analyze"
    )
    write_marks(str(tmp_path), report)
    (tmp_path / "findings" / "_validation.json").write_text("{not json")  # unreadable: unvalidated, no error
    jobs = ["job_a", "job_b", "other"]
    assert read_jobs_marks(str(tmp_path), jobs) == {j: read_marks(str(tmp_path), j) for j in jobs}
    assert read_marks(str(tmp_path), "job_b") == {"steps": "failed", "ranks": "passed", "findings": "unvalidated"}


# ----------------------------------------------------------------------------- the report across processes


def _answers(report, jobs=("job_a", "job_b", "other")) -> tuple:
    """What callers ask a report: failed jobs, per-job success, summary, and the same after a merge."""
    from jobs.validate.report import TableValidation, ValidationReport

    extra = ValidationReport(["fleet"], ["job_c"], {"fleet/x": TableValidation("x", "fleet", "missing")}, "9999")
    merged = report.merge(extra)
    return (
        report.failed_jobs(),
        {j: report.job_success(j) for j in jobs},
        report.summary(),
        report.success,
        merged.failed_jobs(),
        merged.job_ids,
        merged.validated_at,
        merged.summary(),
    )


def test_report_round_trips_through_to_dict():
    from jobs.validate.report import CheckResult, TableValidation, ValidationReport

    bad = [
        CheckResult(
            "pct_range:idle_pct",
            "expect_column_values_to_be_between",
            ["idle_pct"],
            False,
            "≤ 100",
            unexpected_count=3,
            element_count=40,
            partial_unexpected=["150.0", "101.5"],
            jobs={"job_a": 1, "job_b": 2},
        ),
        CheckResult(
            "row_count:discovered",
            "expect_table_row_count_to_equal",
            [],
            False,
            observed="3",
            jobs={"job_a": 0, "job_b": 0},
        ),
        CheckResult("not_null:x", "(not run)", ["x"], False, error="column(s) missing: ['x']", jobs={"*": 0}),
    ]
    ok = [CheckResult("schema:columns", "(schema)", [], True, observed="all declared columns present")]
    norm = ValidationReport(
        ["normalize"],
        ["job_a", "job_b"],
        {
            "normalize/captures": TableValidation(
                "captures", "normalize", "failed", 3, bad[1:2] + ok, engine="pandas", jobs=["job_a", "job_b"]
            ),
            "normalize/neuron_summary": TableValidation("neuron_summary", "normalize", "missing"),
        },
        "2026-01-02T03:04:05+00:00",
    )
    ana = ValidationReport(
        ["analyze"],
        None,
        {
            "analyze/steps": TableValidation(
                "steps", "analyze", "failed", 40, ok + bad[:1] + bad[2:], engine="spark", jobs=["job_a", "job_b"]
            ),
            "analyze/ranks": TableValidation("ranks", "analyze", "passed", 2, ok, engine="pandas", jobs=["job_a"]),
        },
        "2026-01-02T03:05:00+00:00",
    )
    for r in (norm, ana, norm.merge(ana)):
        assert ValidationReport.from_dict(r.to_dict()) == r
        assert ValidationReport.from_dict(json.loads(json.dumps(r.to_dict(), default=str))) == r
        assert ValidationReport.from_dict(r.to_dict(with_gx=True)) == r
    assert list(ValidationReport.from_dict(norm.to_dict()).tables) == list(norm.tables)  # summary order kept


def test_real_report_round_trips_through_json(real_tables):
    import dataclasses

    from jobs.validate.report import ValidationReport

    bad = _corrupt_steps(real_tables["steps"], "pct 150")
    report = _validate({"steps": bad, "ranks": real_tables["ranks"]}, "analyze")
    assert {t.status for t in report.tables.values()} == {"passed", "failed", "missing"}
    assert _failed(report, "steps")["pct_range:idle_pct"].jobs == {"job_b": 1}
    with_gx = ValidationReport.from_dict(json.loads(json.dumps(report.to_dict(with_gx=True), default=str)))
    assert with_gx == report
    # to_dict() (what is logged to MLflow) leaves out only GX's raw results, which no answer needs
    back = ValidationReport.from_dict(json.loads(json.dumps(report.to_dict(), default=str)))
    assert back.to_dict() == report.to_dict() and _answers(back) == _answers(report)
    assert back == dataclasses.replace(
        report, tables={k: dataclasses.replace(t, gx_result={}) for k, t in report.tables.items()}
    )


def test_gate_imports_nothing_of_publish_nor_mlflow():
    import subprocess
    import sys

    code = (
        "import sys, jobs.validate.report, jobs.validate.suites, jobs.validate.marks, jobs.validate.__main__; "
        "print(sorted(m for m in sys.modules if m.startswith(('jobs.publish', 'mlflow', 'great_expectations'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    ).stdout
    assert out.strip() == "[]"  # GX loads only when a suite runs; publishing is jobs.publish.validation


def test_validation_page_escapes_and_lists_failures(real_tables):
    from jobs.publish.report.html import render_validation_report

    steps = _corrupt_steps(real_tables["steps"], "pct 150")
    steps["job_id"] = steps["job_id"].replace({"job_b": "<script>alert(1)</script>"})
    report = _validate({"steps": steps}, "analyze")
    html = render_validation_report(report)
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "pct_range:idle_pct" in html and "FAILED" in html


# ----------------------------------------------------------------------------- the fast path reports what GX reports


@pytest.mark.parametrize("dtype", ["Int64", "Int32", "Float64"])
@pytest.mark.parametrize(
    "lo, hi, strict_min, strict_max",
    [
        (0, None, False, False),
        (1, None, False, False),
        (None, 100, False, False),
        (0, 100, False, False),
        (0, 100, True, True),
        (0, 0, False, False),
        (1, None, True, False),
    ],
)
def test_nullable_between_agrees_with_gx_on_every_value(dtype, lo, hi, strict_min, strict_max):
    """jobs.validate.gx_engine.nullable_between (numpy) and GX 1.x's own per-value condition give the same mask."""
    import inspect

    from great_expectations.expectations.metrics.column_map_metrics.column_values_between import ColumnValuesBetween

    from jobs.validate.gx_engine import nullable_between

    values = [0, -7, 1, 100, 101, 2**40, -(2**40), 50, 99, 1] if dtype != "Int32" else [0, -7, 1, 100, 101, 50, 99, 1]
    s = (
        pd.Series(pd.array(values, dtype=dtype))
        if dtype != "Float64"
        else pd.Series(
            pd.array([v + 0.5 if i % 3 == 0 else v for i, v in enumerate(values)] + [float("nan")], dtype=dtype)
        )
    )
    s = s[s.notna()]  # GX drops nulls before the condition
    gx_fn = inspect.unwrap(ColumnValuesBetween._pandas)
    want = gx_fn(ColumnValuesBetween, s, min_value=lo, max_value=hi, strict_min=strict_min, strict_max=strict_max)
    got = nullable_between(s, lo, hi, strict_min, strict_max)
    assert got is not None and got.tolist() == [bool(x) for x in want] and got.index.equals(s.index)
    assert nullable_between(s.astype(object), lo, hi) is None  # not a nullable numeric column: GX decides


def _broken_events(events: pd.DataFrame) -> pd.DataFrame:
    ev = events.copy()
    b = ev.index[ev["job_id"] == "job_b"]
    a = ev.index[ev["job_id"] == "job_a"]
    ev.loc[b[:3], "dur_ns"] = -7
    ev.loc[a[5:7], "capture_id"] = None
    ev.loc[b[10:14], "ph"] = "Z"
    ev.loc[a[20], "depth"] = -1
    return pd.concat([ev, ev.loc[b[30:32]]], ignore_index=True)  # two duplicated keys


def _comparable(report) -> dict:
    """The report as JSON, and GX's result of every expectation (without batch ids, which are unique names)."""
    d = report.to_dict()
    d.pop("validated_at")
    gx = {}
    for key, t in report.tables.items():
        for r in (t.gx_result or {}).get("results", []):
            cfg = r["expectation_config"]
            gx[(key, cfg["meta"]["check_id"])] = (
                cfg["type"],
                {k: v for k, v in cfg["kwargs"].items() if k != "batch_id"},
                r["success"],
                r["result"],
            )
    return {"report": d, "gx": gx}


def test_narrow_batches_report_what_one_gx_batch_reports(real_tables, monkeypatch):
    """Large frames are validated one column group at a time on categorical string columns; the report
    (every check field, per-job attribution, summary) and GX's per-expectation results equal those of
    one GX batch over the frame as given, on passing and on broken tables."""
    from jobs.validate import gx_engine

    cases = [
        ({"captures": real_tables["captures"], "events": _broken_events(real_tables["events"])}, "normalize", 3),
        ({"captures": real_tables["captures"], "events": real_tables["events"]}, "normalize", 2),
        (
            {
                "steps": _corrupt_steps(real_tables["steps"], "breakdown does not add up"),
                "critical_path": real_tables["critical_path"],
            },
            "analyze",
            None,
        ),
    ]
    for frames, stage, n in cases:
        monkeypatch.setattr(gx_engine, "NARROW_MIN_CELLS", 0)  # every frame in narrow, compact batches
        fast = _validate(frames, stage, n_discovered=n)
        monkeypatch.setattr(gx_engine, "NARROW_MIN_CELLS", 10**12)
        monkeypatch.setattr(gx_engine, "compact", lambda f: f)  # one batch, dtypes as given
        ref = _validate(frames, stage, n_discovered=n)
        monkeypatch.undo()
        f, r = _comparable(fast), _comparable(ref)
        for key in f["report"]["tables"]:  # check by check first: a readable diff
            for a, b in zip(f["report"]["tables"][key]["checks"], r["report"]["tables"][key]["checks"]):
                assert a == b, (key, a, b)
        assert f == r
        assert fast.summary() == ref.summary()
    failed = _failed(_validate(cases[0][0], "normalize", n_discovered=3), "events")
    assert failed["non_negative:dur_ns"].jobs == {"job_b": 3} and failed["unique:key"].jobs == {"job_b": 4}
    assert failed["in_set:ph"].partial_unexpected == ["Z"] * 4 and failed["not_null:capture_id"].jobs == {"job_a": 2}


def test_per_job_batches_report_what_one_batch_reports(real_tables, tmp_path):
    """On the local executor a table is validated in per-job batches of bounded rows (rows per job from the Delta
    log), the results merged: the report — every count, attribution, summary — and GX's per-expectation counts
    equal one batch over all jobs, on broken tables; a table whose checks span jobs (``captures``' row count and
    unique ``uri``) stays one batch."""
    from jobs.executor import LocalExecutor
    from jobs.validate.suites import job_batches, splits_by_job, validate_tables
    from jobs.warehouse import job_rows, write_table
    from schemas import declared

    wh = str(tmp_path)
    broken = {
        "captures": real_tables["captures"],
        "events": _broken_events(real_tables["events"]),
        "steps": _corrupt_steps(real_tables["steps"], "pct 150"),
        "critical_path": real_tables["critical_path"],
    }
    for t, f in broken.items():
        write_table(pa.Table.from_pandas(f[declared(t).names], preserve_index=False), wh, t)
    rows = job_rows(wh, "events")
    assert rows == broken["events"]["job_id"].value_counts().to_dict() and job_rows(wh, "events", ["job_b"]).keys() == {
        "job_b"
    }
    assert not splits_by_job("captures", 3) and splits_by_job("events") and splits_by_job("steps")
    assert job_batches(rows, ["job_a", "job_b"], 1) == [["job_a"], ["job_b"]]  # max_rows=1 below: a batch per job
    assert job_batches({"a": 5, "b": 5, "c": 11, "d": 1}, ["a", "b", "c", "d", "e"], 10) == [
        ["a", "b", "e"],
        ["c"],
        ["d"],
    ]
    reports = {}
    with LocalExecutor(workers=2) as ex:
        for max_rows in (1, 10**9):  # each job a batch of its own; one batch
            norm = validate_tables(
                ex, wh, "normalize", ["job_a", "job_b"], n_discovered=3, mark=False, batch_rows=max_rows
            )
            ana = validate_tables(ex, wh, "analyze", ["job_a", "job_b"], mark=False, batch_rows=max_rows)
            reports[max_rows] = norm.merge(ana)
    split, whole = reports[1], reports[10**9]
    gx = split.tables["normalize/events"].gx_result
    assert (
        len(gx["results"])
        == gx["statistics"]["evaluated_expectations"]
        == len(whole.tables["normalize/events"].checks) - 1
    )
    a, b = _comparable(split), _comparable(whole)
    for key, t in a["report"]["tables"].items():
        for x, y in zip(t["checks"], b["report"]["tables"][key]["checks"]):
            x, y = dict(x), dict(y)
            assert sorted(x.pop("partial_unexpected")) == sorted(y.pop("partial_unexpected")), (key, x["id"])
            assert x == y, (key, x, y)
        assert {k: v for k, v in t.items() if k != "checks"} == {
            k: v for k, v in b["report"]["tables"][key].items() if k != "checks"
        }
    counts = ("element_count", "unexpected_count", "missing_count", "unexpected_percent")
    for k, (typ, kwargs, ok, res) in b["gx"].items():
        got = a["gx"][k]
        assert got[:3] == (typ, kwargs, ok), k
        assert {n: got[3].get(n) for n in counts} == pytest.approx({n: res.get(n) for n in counts}), k
    assert split.summary() == whole.summary()
    assert _failed(split, "events")["non_negative:dur_ns"].jobs == {"job_b": 3}
