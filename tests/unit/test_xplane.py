"""torch_xla / JAX profiles: Chrome traces via the Kineto path (``source = "xla"``), xplane conversion with the
optional xprof, its 1M-event cap raised and truncation flagged."""

from __future__ import annotations

import json
import os
import sys

import pytest

from jobs.normalize.errors import TraceError
from jobs.normalize.job import normalize_file
from jobs.normalize.xla import xplane

SAMPLE = "neuron/generated__jax_cpu_xplane_sample"
RUN = f"{SAMPLE}/plugins/profile/2026_11_30_06_33_40"


def test_jax_trace_json_normalizes_like_kineto_with_source_xla(CORPUS):
    path = CORPUS / RUN / "vm.trace.json.gz"
    row, ev = normalize_file({"uri": str(path), "capture_id": "c", "job_id": "j"}, path.read_bytes())
    assert row["status"] == "ingested" and row["source"] == "xla" and row["container"] == "gzip"
    df = ev.to_pandas()
    assert set(df["source"]) == {"xla"} and len(df) == row["n_events"] == 81
    # the three annotated steps are there, on the profile's relative µs clock converted to exact ns
    steps = df[df["name"].str.startswith("train_step_")]
    assert sorted(steps["name"]) == ["train_step_0", "train_step_1", "train_step_2"]
    assert (steps["dur_ns"] > 0).all() and df["ts_ns"].min() == 9868  # 9.868 µs


def test_xprof_output_is_detected_by_content(CORPUS):
    path = CORPUS / SAMPLE / "xprof_trace_viewer_output.json"  # not under plugins/profile: the content says xprof
    row, ev = normalize_file({"uri": str(path), "capture_id": "c", "job_id": "j"}, path.read_bytes())
    assert row["source"] == "xla" and row["status"] == "ingested"
    doc = json.loads(path.read_bytes())
    assert row["n_events"] == sum(1 for e in doc["traceEvents"] if e.get("ph") in ("X", "i", "C"))


def test_convert_sets_the_event_cap_and_flags_truncation(monkeypatch):
    monkeypatch.delenv("TF_PROFILER_TRACE_VIEWER_MAX_EVENTS", raising=False)
    seen = {}

    def fake(paths, tool, params):
        seen.update(
            cap=os.environ.get("TF_PROFILER_TRACE_VIEWER_MAX_EVENTS"),
            tool=tool,
            path=paths[0],
            exists=os.path.exists(paths[0]),
        )
        n = int(seen["cap"])
        events = [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/host:CPU"}}]
        events += [{"ph": "X", "pid": 1, "tid": 1, "ts": i, "dur": 1, "name": "op"} for i in range(min(n, 5))]
        return json.dumps({"displayTimeUnit": "ns", "traceEvents": events + [{}]}), "application/json"

    doc, flags = xplane.convert_xplane(b"xspace", "host.xplane.pb", limit=5, _convert=fake)
    assert seen == {"cap": "5", "tool": "trace_viewer", "path": seen["path"], "exists": True}
    assert seen["path"].endswith("host.xplane.pb")
    assert flags == ["xprof_converted", "xprof_truncated"]
    assert "TF_PROFILER_TRACE_VIEWER_MAX_EVENTS" not in os.environ  # restored after the call
    _, flags = xplane.convert_xplane(b"xspace", "host.xplane.pb", limit=100, _convert=fake)
    assert flags == ["xprof_converted"]
    monkeypatch.setenv("TRACELAKE_XPROF_MAX_EVENTS", "1234")
    assert xplane.max_events() == 1234


def test_convert_errors(monkeypatch):
    def broken(paths, tool, params):
        raise RuntimeError("bad proto")

    with pytest.raises(TraceError, match="xprof could not convert the xplane: RuntimeError: bad proto"):
        xplane.convert_xplane(b"x", _convert=broken)
    monkeypatch.setitem(sys.modules, "xprof", None)  # not installed
    monkeypatch.setitem(sys.modules, "xprof.convert", None)
    with pytest.raises(xplane.XprofUnavailable):
        xplane.convert_xplane(b"x")


def test_lone_xplane_without_xprof_is_cataloged_as_needing_conversion(CORPUS, monkeypatch):
    monkeypatch.setitem(sys.modules, "xprof", None)
    monkeypatch.setitem(sys.modules, "xprof.convert", None)
    path = CORPUS / RUN / "vm.xplane.pb"
    task = {"uri": "/lz/run/plugins/profile/r/vm.xplane.pb", "capture_id": "c", "job_id": "j", "kind": "xplane"}
    row, ev = normalize_file(task, path.read_bytes())
    assert ev is None and row["status"] == "cataloged" and row["source"] == "xla" and row["format"] == "xplane"
    assert "needs xprof conversion" in row["reason"] and row["sha256"]


def test_lone_xplane_is_converted_with_a_converter(CORPUS, monkeypatch):
    """With a converter the xplane takes the Kineto path (here a stand-in returning the corpus xprof output)."""
    out = (CORPUS / SAMPLE / "xprof_trace_viewer_output.json").read_text()
    real = xplane.convert_xplane
    monkeypatch.setattr(
        xplane,
        "convert_xplane",
        lambda data, name, **kw: real(data, name, _convert=lambda *a: (out, "application/json")),
    )
    task = {"uri": "/lz/r/vm.xplane.pb", "capture_id": "c", "job_id": "j", "kind": "xplane"}
    row, ev = normalize_file(task, (CORPUS / RUN / "vm.xplane.pb").read_bytes())
    assert row["status"] == "ingested" and row["source"] == "xla" and "xprof_converted" in row["flags"]
    assert row["n_events"] == 87 and set(ev.column("source").to_pylist()) == {"xla"}


def test_real_xprof_conversion(CORPUS):
    pytest.importorskip("xprof.convert.raw_to_tool_data")
    doc, flags = xplane.convert_xplane((CORPUS / RUN / "vm.xplane.pb").read_bytes(), "vm.xplane.pb")
    ref = json.loads((CORPUS / SAMPLE / "xprof_trace_viewer_output.json").read_text())
    got = json.loads(doc)
    assert flags == ["xprof_converted"]
    assert sorted(e.get("name", "") for e in got["traceEvents"]) == sorted(
        e.get("name", "") for e in ref["traceEvents"]
    )
    _, flags = xplane.convert_xplane((CORPUS / RUN / "vm.xplane.pb").read_bytes(), "vm.xplane.pb", limit=10)
    assert "xprof_truncated" in flags
