"""jobs.landing.interval: which captures an interval run normalizes (pure functions + one real folder)."""

from __future__ import annotations

import json
import os
import shutil
from datetime import UTC, datetime, timedelta
from functools import partial

import pyarrow as pa
import pytest

from jobs.analyze import job as analyze_job
from jobs.landing.discover import CaptureFile, Discovery, discover
from jobs.landing.interval import (
    as_utc,
    commit_key,
    commit_times,
    date_prefixes,
    discover_interval,
    in_interval,
    info_time,
    manifest_created_at,
    restrict_to_interval,
    select_committed,
)
from jobs.pipeline.record import build_record
from jobs.pipeline.stages import run_stage
from jobs.validate import suites

H = datetime(2026, 3, 1, 10, tzinfo=UTC)


def _cap(job, rank, manifest=True):
    folder = f"/lz/date=2026-03-01/job={job}/attempt=0/rank={rank:05d}/c{rank}"
    return CaptureFile(
        uri=f"{folder}/trace.json.gz",
        capture_id=f"c{rank}",
        job_id=job,
        rank=rank,
        manifest_uri=f"{folder}/manifest.json" if manifest else None,
        bare=not manifest,
    )


def test_as_utc_accepts_iso_z_offsets_naive_and_epoch():
    assert as_utc("2026-03-01T10:00:00Z") == H
    assert as_utc("2026-03-01T11:00:00+01:00") == H
    assert as_utc("2026-03-01T10:00:00") == H  # naive = UTC
    assert as_utc(datetime(2026, 3, 1, 10)) == H
    assert as_utc(H.timestamp()) == H
    assert as_utc(None) is None and as_utc("") is None
    with pytest.raises(ValueError, match="yesterday"):
        as_utc("yesterday")


def test_interval_is_half_open():
    assert in_interval(H, H, H + timedelta(hours=1))
    assert not in_interval(H + timedelta(hours=1), H, H + timedelta(hours=1))
    assert not in_interval(H - timedelta(microseconds=1), H, H + timedelta(hours=1))
    assert in_interval(H, None, None)
    assert not in_interval(None, None, None)


def test_info_time_reads_local_s3_and_gcs_style_entries():
    assert info_time({"mtime": H.timestamp()}) == H
    assert info_time({"LastModified": H}) == H  # s3fs
    assert info_time({"updated": "2026-03-01T10:00:00.000Z"}) == H  # gcsfs
    assert info_time({"size": 3}) is None


def test_manifest_created_at():
    assert manifest_created_at(json.dumps({"created_at": "2026-03-01T10:00:00.000000Z"}).encode()) == H
    assert manifest_created_at({"job_id": "x"}) is None
    assert manifest_created_at(b"not json") is None


def test_selects_whole_jobs_touched_in_the_interval():
    a0, a1, b0, c0 = _cap("a", 0), _cap("a", 1), _cap("b", 0), _cap("c", 0, manifest=False)
    times = {
        commit_key(a0): H - timedelta(minutes=5),  # a: rank 0 before the interval
        commit_key(a1): H + timedelta(minutes=59),  # a: rank 1 inside
        commit_key(b0): H + timedelta(hours=1),  # b: exactly at until → outside
        commit_key(c0): H,
    }  # c: bare file, mtime = since → inside
    sel = select_committed([a0, a1, b0, c0], times, H, H + timedelta(hours=1))
    assert sel.job_ids == ["a", "c"]
    assert [f.uri for f in sel.new] == [a1.uri, c0.uri]
    # job a is rebuilt from all its captures, so the (date, job) partition overwrite keeps rank 0
    assert [f.uri for f in sel.files] == [a0.uri, a1.uri, c0.uri]
    assert sel.undated == []


def test_undated_captures_are_reported_not_selected():
    a0 = _cap("a", 0)
    sel = select_committed([a0], {}, None, None)
    assert sel.files == [] and sel.undated == [a0.uri]


def test_empty_interval_is_an_error():
    with pytest.raises(ValueError, match="not before"):
        select_committed([], {}, H, H)


def _write_capture(root, job, rank, when, trace_src):
    folder = root / "date=2026-03-01" / f"job={job}" / "attempt=0" / f"rank={rank:05d}" / f"cap{rank}"
    folder.mkdir(parents=True)
    shutil.copyfile(trace_src, folder / "trace.json")
    m = folder / "manifest.json"
    m.write_text(json.dumps({"job_id": job, "created_at": "2020-01-01T00:00:00Z"}))
    os.utime(m, (when.timestamp(), when.timestamp()))
    return folder


def test_commit_times_and_restrict_on_a_real_folder(tmp_path):
    trace = tmp_path / "t.json"
    trace.write_text("{}")
    lz = tmp_path / "lz"
    _write_capture(lz, "a", 0, H + timedelta(minutes=10), trace)
    _write_capture(lz, "b", 0, H - timedelta(hours=2), trace)
    bare = lz / "handmade"
    bare.mkdir()
    (bare / "rank0.json").write_text("{}")
    os.utime(bare / "rank0.json", (H.timestamp() + 60, H.timestamp() + 60))
    found = discover(str(lz))
    times = commit_times(str(lz), found.files)
    by_job = {f.job_id: times[commit_key(f)] for f in found.files}
    # the manifest's mtime wins over its created_at (2020): it is when the capture landed
    assert by_job["a"] == H + timedelta(minutes=10)
    assert by_job["handmade"] == H + timedelta(minutes=1)
    restricted, sel = restrict_to_interval(found, str(lz), "2026-03-01T10:00:00Z", "2026-03-01T11:00:00Z")
    assert isinstance(restricted, Discovery)
    assert sorted(f.job_id for f in restricted.files) == ["a", "handmade"] == sel.job_ids


def test_ingest_interval_covers_hours_missed_since_the_last_successful_run():
    from jobs.pipeline.settings import ingest_interval

    one = timedelta(hours=1)
    assert ingest_interval(H, H + one) == (H, H + one)  # first run
    assert ingest_interval(H, H + one, prev_success_end=H) == (H, H + one)  # the previous hour succeeded
    assert ingest_interval(H, H + one, prev_success_end=H - 3 * one) == (H - 3 * one, H + one)  # 3 hours missed


def test_ingest_schedule_defaults_to_hourly_and_reads_the_environment():
    from jobs.pipeline.settings import INGEST_START, ingest_schedule

    assert ingest_schedule({}) == ("@hourly", INGEST_START, None)
    cron, start, end = ingest_schedule(
        {
            "TRACELAKE_INGEST_SCHEDULE": "*/15 * * * *",
            "TRACELAKE_INGEST_START": "2026-03-01T10:00:00Z",
            "TRACELAKE_INGEST_END": "2026-03-01T12:00:00",
        }
    )  # naive: UTC
    assert (cron, start, end) == (
        "*/15 * * * *",
        datetime(2026, 3, 1, 10, tzinfo=UTC),
        datetime(2026, 3, 1, 12, tzinfo=UTC),
    )
    # an ISO 8601 duration: intervals of that length (sub-minute too), which cron cannot express
    assert ingest_schedule({"TRACELAKE_INGEST_SCHEDULE": "PT20S"})[0] == timedelta(seconds=20)
    assert ingest_schedule({"TRACELAKE_INGEST_SCHEDULE": "PT1H30M"})[0] == timedelta(minutes=90)
    for bad in ("PT0S", "P-soon"):
        with pytest.raises(ValueError, match=r"\$TRACELAKE_INGEST_SCHEDULE must be a"):
            ingest_schedule({"TRACELAKE_INGEST_SCHEDULE": bad})
    with pytest.raises(ValueError, match=r"\$TRACELAKE_INGEST_START must be an ISO 8601 time, got 'yesterday'"):
        ingest_schedule({"TRACELAKE_INGEST_START": "yesterday"})
    with pytest.raises(ValueError, match=r"\$TRACELAKE_INGEST_END .* must be after"):
        ingest_schedule(
            {"TRACELAKE_INGEST_START": "2026-03-01T12:00:00Z", "TRACELAKE_INGEST_END": "2026-03-01T10:00:00Z"}
        )


def test_run_record_and_validate_arguments_follow_the_captures(monkeypatch):
    """The record built from the captures gives validate_normalize every job of the run (quarantined-only ones
    too: their captures rows are checked), analyze and validate_analyze the jobs with an ingested capture, and
    skips those two when there is none."""
    caps = [
        {"job_id": "a", "capture_id": "a0", "status": "ingested"},
        {"job_id": "b", "capture_id": "b0", "status": "quarantined", "reason": "/lz/b0: not JSON"},
    ]
    rec = build_record(caps, ["/lz/p"], "/lz", "2026-03-01T10:00:00+00:00", "")
    assert rec["job_ids"] == ["a", "b"] and rec["ingested_job_ids"] == ["a"]
    assert rec["n_quarantined"] == 1 and rec["quarantined"][0]["reason"] == "/lz/b0: not JSON"

    calls = []

    class _Report:
        def to_dict(self, **_):  # any options the stage passes (with_gx)
            return {"stage": calls[-1][1]}

        success = True

        def summary(self):
            return ""

    def fake_validate(spark, warehouse, stage, job_ids, n_discovered=None):
        calls.append(("validate", stage, list(job_ids), warehouse))
        return _Report()

    def fake_analyze(spark, warehouse, job_ids):
        calls.append(("analyze", None, list(job_ids), warehouse))
        return {}

    monkeypatch.setattr(suites, "validate_tables", fake_validate)
    monkeypatch.setattr(analyze_job, "run_analyze", fake_analyze)
    settings = {"raw": "/lz", "warehouse": "/wh"}
    for name in ("validate_normalize", "analyze", "validate_analyze"):
        rec = run_stage(name, settings, engine=object(), record=rec, save=False)
    assert calls == [
        ("validate", "normalize", ["a", "b"], "/wh"),
        ("analyze", None, ["a"], "/wh"),
        ("validate", "analyze", ["a"], "/wh"),
    ]
    assert set(rec["validation"]) == {"normalize", "analyze"}

    calls.clear()
    none = {**rec, "ingested_job_ids": [], "stages": {}}
    for name in ("analyze", "validate_analyze"):
        none = run_stage(name, settings, engine=object(), record=none, save=False)
    assert calls == [] and {s["status"] for s in none["stages"].values()} == {"skipped"}


def _dated_capture(root, date: str, job: str, rank: int, when, trace_src):
    """A committed capture under ``date=<date>/`` whose manifest landed at ``when``."""
    folder = root / f"date={date}" / f"job={job}" / "attempt=0" / f"rank={rank:05d}" / f"cap-{job}-{rank}"
    folder.mkdir(parents=True)
    shutil.copyfile(trace_src, folder / "trace.json")
    m = folder / "manifest.json"
    m.write_text(json.dumps({"job_id": job, "created_at": f"{date}T00:00:00Z"}))
    os.utime(m, (when.timestamp(), when.timestamp()))
    return folder


def test_an_interval_lists_only_its_dates_and_the_touched_jobs_known_dates(tmp_path):
    """A date-laid-out landing zone: the interval lists the dates from LATENESS before ``since`` to a day after
    ``until``; job a's older rank (in a date the warehouse's ``captures`` knows for a) is listed for the closure;
    a job committed in the interval but created more than LATENESS earlier is not (the next full run takes it);
    nothing else of the old date is added."""
    from jobs.normalize.job import _known_dates  # the warehouse side of the closure
    from jobs.warehouse import write_table

    trace = tmp_path / "t.json"
    trace.write_text("{}")
    lz, wh = tmp_path / "lz", str(tmp_path / "wh")
    in_iv = H + timedelta(minutes=10)
    a0 = _dated_capture(lz, "2026-02-01", "a", 0, H - timedelta(days=28), trace)  # a's first rank, ingested then
    _dated_capture(lz, "2026-02-01", "old", 0, H - timedelta(days=28), trace)
    _dated_capture(lz, "2026-02-01", "verylate", 0, in_iv, trace)  # created a month ago, landed now
    _dated_capture(lz, "2026-02-20", "toolate", 0, in_iv, trace)
    _dated_capture(lz, "2026-02-27", "late", 0, in_iv, trace)  # spooled 2 days, within LATENESS
    _dated_capture(lz, "2026-03-01", "a", 1, in_iv, trace)
    assert date_prefixes(str(lz), H, H + timedelta(hours=1)) == ["date=2026-02-27", "date=2026-03-01"]
    assert date_prefixes(str(lz), None, H) is None  # an open start lists everything
    uri = str(a0 / "trace.json")
    write_table(pa.table({"date": ["2026-02-01"], "job_id": ["a"], "uri": [uri]}), wh, "captures", ["a"])
    assert _known_dates(wh, ["a", "late"]) == {"date=2026-02-01"}

    found, sel = discover_interval(str(lz), H, H + timedelta(hours=1), known=partial(_known_dates, wh))
    assert sel.job_ids == ["a", "late"]
    assert sorted((f.job_id, f.rank) for f in found.files) == [("a", 0), ("a", 1), ("late", 0)]
    listed = {p.split("/lz/", 1)[1].split("/", 1)[0] for p in found.listing}
    assert listed == {"date=2026-02-01", "date=2026-02-27", "date=2026-03-01"}  # never date=2026-02-20
    # without the warehouse's knowledge the closure stays in the listed dates; a full listing finds everything
    _, alone = discover_interval(str(lz), H, H + timedelta(hours=1))
    assert sorted(f.job_id for f in alone.files) == ["a", "late"] and len(alone.files) == 2
    _, full = restrict_to_interval(discover(str(lz)), str(lz), H, H + timedelta(hours=1))
    assert full.job_ids == ["a", "late", "toolate", "verylate"]


def test_a_landing_zone_not_laid_out_by_date_is_listed_whole(tmp_path):
    trace = tmp_path / "t.json"
    trace.write_text("{}")
    lz = tmp_path / "lz"
    _dated_capture(lz, "2026-03-01", "a", 0, H + timedelta(minutes=5), trace)
    (lz / "handmade").mkdir()
    (lz / "handmade" / "rank0.json").write_text("{}")
    os.utime(lz / "handmade" / "rank0.json", (H.timestamp() + 60, H.timestamp() + 60))
    assert date_prefixes(str(lz), H, H + timedelta(hours=1)) is None
    _, sel = discover_interval(str(lz), H, H + timedelta(hours=1))
    assert sel.job_ids == ["a", "handmade"]


def test_interval_words_reads_as_a_person_writes_it():
    from jobs.landing.interval import interval_words

    assert interval_words("2026-12-03T16:00:00+00:00", "2026-12-03T17:00:00+00:00") == "2026-12-03T16:00–17:00"
    assert (
        interval_words(datetime(2026, 12, 3, 23, tzinfo=UTC), "2026-12-04T01:00:00")
        == "2026-12-03T23:00–2026-12-04T01:00"
    )
    assert interval_words(None, "2026-12-04T01:00:00+00:00") == "…–2026-12-04T01:00"
    assert interval_words("2026-12-04T01:00:00+00:00", None) == "2026-12-04T01:00–…"


def test_the_interval_summary_counts_the_stored_bytes_and_chooses_the_engine(tmp_path):
    from jobs.landing.interval import summarize_interval
    from jobs.pipeline.stages import choose_engine

    trace = tmp_path / "t.json"
    trace.write_text("{}" + " " * 998)  # 1,000 bytes
    lz = tmp_path / "lz"
    _write_capture(lz, "a", 0, H + timedelta(minutes=10), trace)
    _write_capture(lz, "a", 1, H + timedelta(minutes=20), trace)
    _write_capture(lz, "b", 0, H - timedelta(hours=2), trace)  # before the interval: not touched
    found = summarize_interval(str(lz), H, H + timedelta(hours=1))
    assert (found["n_new"], found["n_files"], found["bytes"], found["job_ids"]) == (2, 2, 2000, ["a"])
    engine, why = choose_engine(found, max_bytes=2001)
    assert engine == "local" and why.startswith("0.0 MB in 2 file(s) < 0.0 MB (tracelake_local_max_bytes)")
    assert choose_engine(found, max_bytes=2000)[0] == "spark"  # at the threshold: Spark
    assert choose_engine({"bytes": 64_000_000, "n_files": 9}, 64_000_000)[1] == (
        "64.0 MB in 9 file(s) >= 64.0 MB (tracelake_local_max_bytes): Spark"
    )
    assert choose_engine(found, max_bytes=0)[0] == "spark"  # 0: always Spark


def test_the_local_threshold_variable_reads_bytes_and_names_a_bad_value(monkeypatch):
    from airflow.sdk import Variable

    from jobs.pipeline.settings import LOCAL_MAX_BYTES, VAR_LOCAL_MAX_BYTES, local_max_bytes

    values: dict[str, str] = {}
    monkeypatch.setattr(Variable, "get", staticmethod(lambda key, default=None: values.get(key, default)))
    assert local_max_bytes() == LOCAL_MAX_BYTES == 64_000_000  # not set: the default
    values[VAR_LOCAL_MAX_BYTES] = " 0 "
    assert local_max_bytes() == 0  # always Spark
    for bad in ("64MB", "-1", "1e6"):
        values[VAR_LOCAL_MAX_BYTES] = bad
        with pytest.raises(ValueError, match=f"tracelake_local_max_bytes must be a number of bytes .*'{bad}'"):
            local_max_bytes()
