"""Ids and names from manifests, landing-zone paths and users never become paths outside the landing
zone or the warehouse.

Entry points: ``jobs.landing.discover`` (manifest ``job_id``/``attempt``/``rank``/``world_size``/``files``,
the ``date=``/``job=``/``attempt=``/``rank=`` folders, capture folder names, bare-trace folders, object-store
keys with ``..``), ``jobs.analyze.job`` (``findings_json/<job>/…``), ``python -m jobs.publish.report`` (``--job``,
``--day`` quoted into MLflow filters), ``jobs.publish.compare`` references, ``capture_hooks`` (job id, landing
path, spool entries), and the DAG settings (``dag_run.conf`` → spark-submit arguments).

A hostile value is rejected with an error naming the file and the value; a bad manifest quarantines its
files with that reason and every other capture of the batch is still ingested.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re

import pytest

from jobs.common.ids import INT32_MAX, DiscoveryError, safe_date, safe_id, safe_index, slug
from jobs.landing.discover import UNSAFE_PATH_JOB, check_path_parts, discover
from jobs.pipeline import settings as cfg
from jobs.pipeline import submit
from jobs.pipeline.settings import resolve
from jobs.pipeline.stages import RunSettings, run_stage
from jobs.publish.tracking import default_tracking_uri
from jobs.validate import suites

#: Values that must never be a job id, capture id or other path segment.
HOSTILE_IDS = [
    "..",
    "../x",
    "../../x",
    "a/../../b",
    "/etc",
    "/abs/path",
    "a/b",
    "a\\b",
    "..\\..\\x",
    "C:\\x",
    "a\x00b",
    "\x00",
    "abc\n",
    "abc\r",
    "a\tb",
    " a",
    "a b",
    "-rf",
    ".hidden",
    "_x",
    "a..b",
    "x" * 201,
    "",
    "%2e%2e",
    "a%2Fb",
    "a%00",
    "ｊob",
    "jоb",  # fullwidth j; Cyrillic о (look-alikes of "job")
    "job\u202e",
    "a\u200bb",
    "a'b",
    'a"b',
    "a;b",
    "$(id)",
    "`id`",
    "a|b",
    "a*b",
    "a?b",
    "a#b",
    "a:b",
    "{{ 7*7 }}",
]
#: Hive-special characters, each inside an otherwise fine id.
HIVE_SPECIAL = ["a/b", "a%b", "a:b", "a#b", "a\\b", "a'b", 'a"b', "a*b", "a?b", "a[b", "a]b", "a^b", "a{b", "a\x7fb"]


# ----------------------------------------------------------------------------- id rules


@pytest.mark.parametrize("value", HOSTILE_IDS + HIVE_SPECIAL)
def test_safe_id_rejects_hostile_values_and_names_where_and_what(value):
    with pytest.raises(DiscoveryError) as e:
        safe_id(value, "job_id", "/landing/x/manifest.json")
    msg = str(e.value)
    assert msg.startswith("/landing/x/manifest.json: unsafe job_id ")
    assert repr(value)[:40] in msg  # the value itself (cut when long)
    assert len(msg) < 300  # a 10 kB id does not make a 10 kB reason


def test_safe_id_accepts_ordinary_ids_and_the_longest():
    for ok in (
        "llm-7b",
        "run_42",
        "a.b",
        "dlrm",
        "2026-01-01",
        "job@host",
        "team-run+1",
        "date=2024-01-01-x",
        "x" * 200,
    ):
        assert safe_id(ok, "job_id", "w") == ok
    assert "… (10000 characters)" in str(pytest.raises(DiscoveryError, safe_id, "y" * 10_000, "job_id", "w").value)


@pytest.mark.parametrize("value", HOSTILE_IDS + HIVE_SPECIAL + ["....", "-.-", "é", "=x", "+x", "@x", ".." * 300])
def test_slug_always_gives_a_safe_id(value):
    s = slug(value)
    assert safe_id(s, "job_id", "slug") == s


def test_slug_keeps_readable_names():
    assert slug("team/run 1") == "team-run-1"
    assert slug("a....b") == "a.b"  # one pass of replace("..", ".") would leave "a..b"


@pytest.mark.parametrize(
    "value",
    [
        "../x",
        "2024-01-01/..",
        "2024-13-01",
        "2024-02-30",
        "24-01-01",
        "2024-1-1",
        "2024-01-01\n",
        " 2024-01-01",
        "٢٠٢٤-٠١-٠١",
        "２０２４-01-01",
        "yesterday",
        "",
    ],
)
def test_safe_date_only_accepts_calendar_dates(value):
    with pytest.raises(DiscoveryError, match="not a calendar date"):
        safe_date(value, "f")
    assert safe_date("2024-02-29", "f") == "2024-02-29"


@pytest.mark.parametrize(
    "value",
    [
        "-1",
        "abc",
        " 1",
        "1 ",
        "+1",
        "1_0",
        "0x1",
        "1.0",
        "٣",
        "３",
        "",
        str(INT32_MAX + 1),
        "9" * 30,
        -1,
        True,
        1.0,
        None,
        INT32_MAX + 1,
    ],
)
def test_safe_index_accepts_only_int32_ascii_digits(value):
    with pytest.raises(DiscoveryError, match="not an integer in"):
        safe_index(value, "attempt", "f")
    assert safe_index("00003", "rank", "f") == 3 and safe_index(INT32_MAX, "rank", "f") == INT32_MAX


def test_check_path_parts_names_the_folder_and_value():
    assert check_path_parts({"date": "2024-01-01", "job": "j", "attempt": "0", "rank": "00007"}, "f") == {
        "date": "2024-01-01",
        "job": "j",
        "attempt": 0,
        "rank": 7,
    }
    for key, bad in (("job", "../../x"), ("date", "../x"), ("attempt", "-1"), ("rank", "abc"), ("job", "")):
        with pytest.raises(DiscoveryError) as e:
            check_path_parts({key: bad}, "/raw/c1/manifest.json")
        assert f"landing-zone folder {key}= value {bad!r}" in str(e.value) and "/raw/c1/manifest.json" in str(e.value)


# ----------------------------------------------------------------------------- discover on a landing zone

TRACE = json.dumps(
    {
        "schemaVersion": 1,
        "traceEvents": [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1000, "dur": 5},
            {
                "ph": "X",
                "cat": "kernel",
                "name": "gemm",
                "pid": 0,
                "tid": 7,
                "ts": 1002,
                "dur": 2,
                "args": {"device": 0, "stream": 7, "correlation": 1},
            },
        ],
    }
).encode()


def _manifest(**over):
    m = {
        "schema_version": "1",
        "job_id": "good",
        "attempt": 0,
        "rank": 0,
        "local_rank": 0,
        "world_size": 2,
        "node": 0,
        "host": "h1",
        "accelerator": "cpu",
        "device_name": None,
        "torch_version": "2.5.0",
        "cuda_version": None,
        "created_at": "2026-11-30T10:00:00Z",
        "step_range": None,
        "capture_id": "c1",
        "profiler": {"name": "torch.profiler"},
        "tags": {},
        "files": [
            {
                "path": "trace.json",
                "size_bytes": len(TRACE),
                "sha256": hashlib.sha256(TRACE).hexdigest(),
                "kind": "kineto_trace",
            }
        ],
    }
    m.update(over)
    return m


def _capture(root, date="2026-11-30", job="good", attempt="0", rank="00000", cid="c1", manifest=None):
    d = root / f"date={date}" / f"job={job}" / f"attempt={attempt}" / f"rank={rank}" / cid
    d.mkdir(parents=True)
    (d / "trace.json").write_bytes(TRACE)
    (d / "manifest.json").write_text(json.dumps(manifest if manifest is not None else _manifest()))
    return d


def _normalize_all(found):
    """Every discovered file through normalize_file (what the Spark workers do), then the captures table
    (what the driver writes): nothing may fail the batch."""
    from jobs.normalize.job import captures_table, normalize_file

    rows = []
    for f in found.files:
        try:
            with open(f.uri, "rb") as fh:
                data, err = fh.read(), None
        except OSError as exc:
            data, err = None, str(exc)
        rows.append(normalize_file(f.to_dict(), data, err)[0])
    captures_table(rows)  # int32 identity columns: an out-of-range attempt/rank would raise here
    for r in rows:
        assert safe_id(r["job_id"], "job_id", "row") == r["job_id"]
        assert 0 <= r["attempt"] <= INT32_MAX and 0 <= r["rank"] <= INT32_MAX
        assert r["date"] == "unknown" or safe_date(r["date"], "row")
    return rows


def _assert_one_good_and_bad_quarantined(tmp_path, bad_value: str, names: str = "manifest.json"):
    found = discover(str(tmp_path))
    rows = {r["uri"]: r for r in _normalize_all(found)}
    good = [r for r in rows.values() if r["job_id"] == "good"]
    assert [r["status"] for r in good] == ["ingested"] and good[0]["n_events"] == 2  # the batch continues
    bad = [r for r in rows.values() if r["job_id"] != "good"]
    assert bad and all(r["status"] == "quarantined" for r in bad)
    for r in bad:
        assert names in r["reason"] and bad_value in r["reason"], r["reason"]
    return bad


@pytest.mark.parametrize(
    "folder,value",
    [
        ({"job": "%2e%2e"}, "%2e%2e"),
        ({"job": "a b"}, "a b"),
        ({"job": "a\\b"}, "a\\b"),
        ({"job": "ｊob"}, "ｊob"),
        ({"job": "x\n"}, "x\n"),
        ({"job": ""}, ""),
        ({"job": "..x"}, "..x"),
        ({"job": "y" * 220}, "y" * 220),
        ({"date": "2024-13-01"}, "2024-13-01"),
        ({"date": "..x"}, "..x"),
        ({"date": "٢٠٢٤-٠١-٠١"}, "٢٠٢٤-٠١-٠١"),
        ({"attempt": "-1"}, "-1"),
        ({"attempt": "٣"}, "٣"),
        ({"attempt": "99999999999"}, "99999999999"),
        ({"rank": "abc"}, "abc"),
        ({"rank": " 1"}, " 1"),
        ({"cid": "..c1"}, "..c1"),
        ({"cid": "c 1"}, "c 1"),
    ],
)
def test_hostile_landing_zone_folder_quarantines_its_capture_only(tmp_path, folder, value):
    _capture(tmp_path / "raw")
    bad_folder = {"cid": "c2", **folder}
    d = _capture(
        tmp_path / "raw",
        job=bad_folder.pop("job", "other"),
        **bad_folder,
        manifest=_manifest(job_id="other", rank=1, capture_id="c2"),
    )
    if "cid" in folder:  # the capture folder's own name: the manifest names it
        bad = _assert_one_good_and_bad_quarantined(tmp_path / "raw", repr(value)[:40])
    else:
        bad = _assert_one_good_and_bad_quarantined(
            tmp_path / "raw", repr(value)[:40], names=f"unsafe landing-zone path: {d}"
        )
    if "job" in folder and folder["job"]:
        assert bad[0]["job_id"] != "good" and safe_id(bad[0]["job_id"], "j", "w")


@pytest.mark.parametrize(
    "over,value",
    [
        ({"job_id": "../../x"}, "../../x"),
        ({"job_id": "/etc"}, "/etc"),
        ({"job_id": "a\\b"}, "a\\b"),
        ({"job_id": "a\x00b"}, "a\x00b"),
        ({"job_id": "abc\n"}, "abc\n"),
        ({"job_id": "z" * 201}, "z" * 201),
        ({"job_id": "jоb"}, "jоb"),
        ({"job_id": "a%2Fb"}, "a%2Fb"),
        ({"job_id": "a=b"}, "a=b"),
        ({"job_id": 7}, 7),
        ({"attempt": -1}, -1),
        ({"attempt": 2**40}, 2**40),
        ({"rank": 2**40}, 2**40),
        ({"world_size": 2**40}, 2**40),
        ({"attempt": "1"}, "1"),
    ],
)
def test_hostile_manifest_value_quarantines_its_capture_only(tmp_path, over, value):
    _capture(tmp_path / "raw")
    _capture(tmp_path / "raw", job="other", rank="00001", cid="c2", manifest=_manifest(**{"capture_id": "c2", **over}))
    needle = repr(value)[:40] if isinstance(value, str) else str(value)  # as jsonschema / safe_id print it
    bad = _assert_one_good_and_bad_quarantined(tmp_path / "raw", needle)
    assert bad[0]["job_id"] == "other"  # the fallback identity is the (safe) folder's


@pytest.mark.parametrize(
    "path",
    [
        "../x.json",
        "/etc/passwd.json",
        "a/../../x.json",
        "..\\..\\x.json",
        "trace.json\n",
        "./trace.json",
        "a//trace.json",
        "trace.json\x00.gz",
    ],
)
def test_manifest_file_paths_outside_the_capture_folder_are_rejected(tmp_path, path):
    _capture(tmp_path / "raw")
    files = [{"path": path, "size_bytes": 1, "sha256": "0" * 64, "kind": "kineto_trace"}]
    _capture(tmp_path / "raw", job="other", rank="00001", cid="c2", manifest=_manifest(files=files, capture_id="c2"))
    found = discover(str(tmp_path / "raw"))
    other = [f for f in found.files if f.job_id == "other"]
    assert other and all(f.error and "manifest.json" in f.error for f in other)
    assert all(f.uri.startswith(str(tmp_path / "raw") + "/") and ".." not in f.uri.split("/") for f in found.files)
    _normalize_all(found)


def test_object_store_keys_with_dot_segments_are_quarantined_under_their_own_uri():
    """``s3://b/raw/job=../../x/…`` is a legal key; normalizing it would name another object."""
    import fsspec

    fs = fsspec.filesystem("memory")
    root = "/hostile-keys"
    keys = [
        f"{root}/date=2026-11-30/job=../../x/attempt=0/rank=00000/c1/trace.json",
        f"{root}/date=2026-11-30/job=../../x/attempt=0/rank=00000/c1/manifest.json",
        f"{root}/team/../t.json",
        f"{root}/a/./t.json",
        f"{root}/a//t.json",
    ]
    try:
        for k in keys:
            fs.pipe(k, TRACE)
        fs.pipe(f"{root}/date=2026-11-30/job=good/attempt=0/rank=00000/c1/trace.json", TRACE)
        fs.pipe(
            f"{root}/date=2026-11-30/job=good/attempt=0/rank=00000/c1/manifest.json", json.dumps(_manifest()).encode()
        )
        listed = set(fs.find(root))
        found = discover(f"memory://{root}")
        unsafe = [f for f in found.files if f.job_id == UNSAFE_PATH_JOB]
        assert {f.uri.split("://", 1)[1] for f in unsafe} == {k for k in keys if k in listed}  # the real keys
        assert all(f.error and "unsafe path" in f.error and "'..'" in f.error for f in unsafe)
        good = [f for f in found.files if f.job_id == "good"]
        assert len(good) == 1 and good[0].error is None
        assert all(f.uri.split("://", 1)[1] in listed for f in found.files)  # every URI is a listed object
    finally:
        fs.rm(root, recursive=True)


def test_bare_trace_folders_give_safe_job_ids_and_bad_dates_are_quarantined(tmp_path):
    raw = tmp_path / "raw"
    names = ["..x", "a b", "ｊob", "%2e%2e%2f", "=x", "_x", "x" * 250, "a'b;$(id)"]
    for n in names:
        (raw / n).mkdir(parents=True)
        (raw / n / "rank-0.pt.trace.json").write_bytes(TRACE)
    (raw / "date=yesterday").mkdir()
    (raw / "date=yesterday" / "t.pt.trace.json").write_bytes(TRACE)
    (raw / "date=2026-11-30").mkdir()
    (raw / "date=2026-11-30" / "t.pt.trace.json").write_bytes(TRACE)
    found = discover(str(raw))
    assert len(found.files) == len(names) + 2
    for f in found.files:
        assert safe_id(f.job_id, "job_id", f.uri) == f.job_id
    by_date = {f.uri.rsplit("/", 2)[-2]: f for f in found.files if "date=" in f.uri}
    assert by_date["date=2026-11-30"].date == "2026-11-30" and by_date["date=2026-11-30"].error is None
    bad = by_date["date=yesterday"]
    assert bad.date is None and "date= value 'yesterday'" in bad.error
    rows = _normalize_all(found)
    assert sum(r["status"] == "ingested" for r in rows) == len(names) + 1


# ----------------------------------------------------------------------------- analyze, report, compare


class _Untouchable:
    """A Spark session / MLflow client stand-in that fails the test when used."""

    def __getattr__(self, name):
        raise AssertionError(f"used {name} before rejecting the job id")


@pytest.mark.parametrize("job", ["../../x", "/tmp/x", "a\x00b", "x\n", "a\\..\\b"])
def test_analyze_rejects_a_job_id_before_any_path_is_built(job):
    from jobs.analyze.job import run_analyze, run_findings

    with pytest.raises(DiscoveryError, match="unsafe job_id"):
        run_analyze(_Untouchable(), "/wh", ["good", job])
    with pytest.raises(DiscoveryError, match="unsafe job_id"):
        run_findings(_Untouchable(), "/wh", [job])


@pytest.mark.parametrize("job", ["x' or tags.`tracelake.attempt` = '0", "../x", "a b", "x\n"])
def test_report_job_cannot_break_out_of_the_mlflow_filter(job):
    from jobs.publish.report.__main__ import _job_run

    with pytest.raises(DiscoveryError, match="--job: unsafe job id"):
        _job_run(_Untouchable(), "tracelake", job, 0)


@pytest.mark.parametrize("day", ["2026-01-01' or '1'='1", "../x", "2026-02-30", "2026-01-01\n"])
def test_fleet_report_day_must_be_a_date(day):
    from jobs.publish.reports import log_fleet_report

    with pytest.raises(DiscoveryError, match="not a calendar date"):
        log_fleet_report("sqlite:////nonexistent/never-created.db", None, None, None, day=day)


def test_compare_reference_to_a_hostile_job_is_a_clear_error():
    from jobs.publish.compare import resolve_ref

    with pytest.raises(ValueError, match=r"no job '\.\./\.\./x'"):
        resolve_ref("../../x#0", "/wh", None)


# ----------------------------------------------------------------------------- capture hooks


@pytest.mark.parametrize("value", [v for v in HOSTILE_IDS if v != "_x"] + ["a=b", "a+b", "a@b"])
def test_capture_hooks_reject_hostile_ids(value):
    from capture_hooks import landing_path, validate_path_component

    with pytest.raises(ValueError, match="job_id"):
        validate_path_component(value, "job_id")
    with pytest.raises(ValueError):
        landing_path(date="2026-01-01", job_id=value, attempt=0, rank=0, capture_id="c1")
    with pytest.raises(ValueError):
        landing_path(date="2026-01-01", job_id="j", attempt=0, rank=0, capture_id=value)


@pytest.mark.parametrize("value", HOSTILE_IDS)
def test_capture_hooks_make_path_safe_gives_a_valid_component(value):
    from capture_hooks import make_path_safe, validate_path_component

    assert validate_path_component(make_path_safe(value), "x")


def test_capture_hooks_landing_path_rejects_bad_date_attempt_rank():
    from capture_hooks import landing_path

    for kw in (
        dict(date="../x"),
        dict(date="٢٠٢٤-٠١-٠١"),
        dict(date="2026-01-01\n"),
        dict(attempt=-1),
        dict(attempt="1"),
        dict(attempt=True),
        dict(rank=-1),
        dict(rank=1.0),
    ):
        with pytest.raises(ValueError):
            landing_path(**{**dict(date="2026-01-01", job_id="j", attempt=0, rank=0, capture_id="c"), **kw})


def test_trace_capture_refuses_a_hostile_job_id_from_the_argument_or_the_environment(tmp_path):
    from capture_hooks import TraceCapture

    for job in ("../../x", "a/b", "x\n", "a\x00b", "ｊob"):
        with pytest.raises(ValueError, match="job_id"):
            TraceCapture(str(tmp_path / "raw"), job_id=job, env={})
        if job.strip() == job:  # the variable is stripped first, then checked
            with pytest.raises(ValueError, match="job_id"):
                TraceCapture(str(tmp_path / "raw"), env={"TRACELAKE_JOB_ID": job})
    # a scheduler's job id is made safe, not rejected (it is not the user's choice)
    cap = TraceCapture(str(tmp_path / "raw"), env={"SLURM_JOB_ID": "../../4242"})
    assert ".." not in cap.job_id and "/" not in cap.job_id and cap.job_id.endswith("4242")


@pytest.mark.parametrize(
    "relative_dir",
    [
        "../x",
        "/abs",
        "date=2026-01-01/job=../attempt=0/rank=00000/c",
        "date=2026-01-01/job=j/attempt=0/rank=00000/c/../..",
        "date=2026-01-01/job=j/attempt=0/rank=00000/..",
        "date=x/job=j/attempt=0/rank=00000/c",
        "",
    ],
)
def test_spool_entry_with_a_tampered_folder_is_never_uploaded_outside_the_sink(tmp_path, relative_dir):
    from capture_hooks.finalize import finalize_entry
    from capture_hooks.sink import CaptureUpload, LandingZoneSink, check_relative_dir
    from capture_hooks.spool import META_NAME

    with pytest.raises(ValueError, match="capture folder|job_id|capture_id"):
        check_relative_dir(relative_dir)
    entry = tmp_path / "entry"
    entry.mkdir()
    (entry / META_NAME).write_text(json.dumps({"relative_dir": relative_dir, "manifest": {}, "files": []}))
    with pytest.raises(ValueError):
        finalize_entry(str(entry))
    sink = LandingZoneSink(str(tmp_path / "raw"))
    with pytest.raises(ValueError):
        sink.write(CaptureUpload(relative_dir, (), b"{}"))
    assert not (tmp_path / "raw").exists() and not (tmp_path / "x").exists()


@pytest.mark.parametrize("name", ["../x", "/etc/x", "a/../../x", "a\\b", "", "a//b", ".hidden", "x\n"])
def test_spool_entry_with_a_tampered_file_name_is_rejected(tmp_path, name):
    from capture_hooks.sink import CaptureUpload, LandingZoneSink

    sink = LandingZoneSink(str(tmp_path / "raw"))
    src = tmp_path / "f"
    src.write_bytes(b"x")
    with pytest.raises(ValueError, match="capture file name"):
        sink.write(CaptureUpload("date=2026-01-01/job=j/attempt=0/rank=00000/c", ((str(src), name),), b"{}"))
    assert not (tmp_path / "raw").exists()


# ----------------------------------------------------------------------------- DAG settings


@pytest.fixture
def airflow_vars(tmp_path, monkeypatch):
    pytest.importorskip("airflow.sdk")
    monkeypatch.setenv("AIRFLOW_VAR_TRACELAKE_WAREHOUSE", str(tmp_path / "wh"))
    monkeypatch.setenv("AIRFLOW_VAR_TRACELAKE_RAW", str(tmp_path / "raw"))
    return tmp_path


@pytest.mark.parametrize(
    "value",
    ["../../x", "2026-01-01; rm -rf /", "$(id)", "{{ 7*7 }}", "2026-01-01T00:00:00Z\n--x", {"a": 1}, ["2026-01-01"]],
)
def test_dag_run_conf_interval_must_be_a_date_time(airflow_vars, value):
    with pytest.raises(ValueError, match="date-time"):
        resolve(run_conf={"since": value})
    with pytest.raises(ValueError, match="date-time"):
        resolve(run_conf={"until": value})


def test_dag_run_record_path_stays_in_the_warehouse(airflow_vars):
    conf = resolve(run_conf={"since": "2026-01-01T00:00:00.123456+05:30", "until": "2026-01-02"})
    prefix = str(airflow_vars / "wh") + "/_runs/ingest/"
    assert conf["record"].startswith(prefix)
    assert re.fullmatch(r"[0-9]{8}T[0-9]{6}Z_[0-9]{8}T[0-9]{6}Z\.json", conf["record"][len(prefix) :])


def test_dag_run_default_mlflow_store_stays_in_the_warehouse(airflow_vars):
    """Without ``tracelake_tracking_uri`` the runs go to ``sqlite:///<warehouse>/mlflow.db``, never to MLflow's
    own default (``./mlflow.db`` in the worker's current folder)."""
    conf = resolve()
    assert conf["tracking_uri"] == default_tracking_uri(str(airflow_vars / "wh"))
    assert RunSettings(**conf).tracking_uri == conf["tracking_uri"]  # what every stage task reads back


def _submit_settings(argv: list[str]) -> dict:
    """The settings ``jobs/pipeline/submit.py`` runs on for ``argv``: its argparse, then ``RunSettings(**json)``
    (stopped before any stage runs)."""
    parsed = []

    class _Stop(Exception):
        pass

    def parse_then_stop(self, args=None, namespace=None):
        parsed.append(original(self, args, namespace))
        raise _Stop

    original = argparse.ArgumentParser.parse_args
    mp = pytest.MonkeyPatch()
    mp.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    try:
        with pytest.raises(_Stop):
            submit.main(argv)
    finally:
        mp.undo()
    return RunSettings(**json.loads(parsed[0].settings)).model_dump()


def _render_stage_args(settings: dict, stage: str = "normalize") -> list[str]:
    """``application_args`` of the DAG's spark-submit task of ``stage``, rendered by Airflow's own template
    environment with ``settings`` as the XCom of the ``settings`` task."""
    pytest.importorskip("airflow.providers.apache.spark.operators.spark_submit")
    from jobs.pipeline.operators import TracelakeSparkSubmitOperator  # heavy: airflow (skipped without it)

    class _TI:
        def xcom_pull(self, task_ids):
            assert task_ids == cfg.SETTINGS_TASK
            return settings

    op = TracelakeSparkSubmitOperator(
        task_id=stage,
        application=cfg.application(),
        application_args=["--stage", stage, "--settings", cfg.settings_arg()],
    )
    assert "application_args" in op.template_fields
    return op.render_template(op.application_args, {"ti": _TI()}, op.get_template_env())


def test_spark_submit_arguments_are_never_rendered_twice_nor_split():
    """Settings reach spark-submit through a Jinja template rendered once (a ``{{ }}`` in a value stays
    text), as ONE JSON argument that gives back exactly the same settings, and an argv list (no shell:
    ``;``, ``$()``, spaces, quotes and newlines stay inside that one argument)."""
    pytest.importorskip("airflow.providers.apache.spark.hooks.spark_submit")
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook  # heavy: airflow

    hostile = "/x; rm -rf / $(id) `id` {{ 7*7 }} --job ../x <b>&'\"\\ é\n--stage analyze"
    settings = RunSettings(
        raw=hostile,
        warehouse="/wh",
        tracking_uri="http://mlflow:5000/" + hostile,
        storage_options={"endpoint_url": hostile, hostile: [hostile, 1]},
        job_ids=["a", "--stage"],
    ).model_dump()
    args = _render_stage_args(settings)
    assert len(args) == 4 and args[:3] == ["--stage", "normalize", "--settings"]
    assert "49" not in args[3] and json.loads(args[3]) == settings  # rendered once, the values as text
    assert _submit_settings(args) == settings  # the application's own round trip: exactly the same settings
    mp = pytest.MonkeyPatch()
    mp.setenv("AIRFLOW_CONN_SPARK_TRACELAKE", json.dumps({"conn_type": "spark", "host": "local[*]"}))
    try:
        cmd = SparkSubmitHook(conn_id=cfg.SPARK_CONN_ID, application_args=args)._build_spark_submit_command("/app.py")
    finally:
        mp.undo()
    assert isinstance(cmd, list) and cmd[-5:] == ["/app.py", *args]


def test_validate_stage_passes_each_job_as_one_argument(monkeypatch):
    """A hostile job id is never split nor read as an option: through the settings JSON (one argv element)
    and through the run record, the validate stage gets each id whole."""
    jobs = [slug("a b"), slug("--stage"), "job=x"]
    assert not any(j.startswith("-") for j in jobs)  # a discovered id can never be read as an option
    settings = RunSettings(warehouse="/wh", job_ids=jobs + ["c d", "--job"]).model_dump()
    args = _render_stage_args(settings, "validate_normalize")
    assert len(args) == 4 and _submit_settings(args)["job_ids"] == jobs + ["c d", "--job"]

    seen = []

    class _Report:
        def to_dict(self, **_):  # any options the stage passes (with_gx)
            return {}

        success = True

        def summary(self):
            return ""

    def fake_validate(spark, warehouse, stage, job_ids, n_discovered=None):
        seen.append((stage, list(job_ids)))
        return _Report()

    monkeypatch.setattr(suites, "validate_tables", fake_validate)
    run_stage("validate_normalize", settings, engine=object(), record={"job_ids": jobs}, save=False)
    assert seen == [("normalize", jobs)]


def test_a_file_replaced_by_a_fifo_after_discovery_is_not_opened(tmp_path):
    """Discovery saw a regular file; by the time normalize reads it, it is a FIFO: the read refuses it unopened
    (an open would block for ever) with the words discovery uses."""
    import os  # why: only this test makes FIFOs

    from jobs.normalize.job import _read_task

    path = tmp_path / "rank0.json"
    path.write_text('{"traceEvents": []}')
    task = {"uri": str(path), "kind": "auto", "limits": {}}
    assert _read_task(task, {})[1] is None
    path.unlink()
    os.mkfifo(path)
    data, why = _read_task(task, {})
    assert data is None and why == "a FIFO (named pipe), not a regular file (replaced since discovery): not opened"
