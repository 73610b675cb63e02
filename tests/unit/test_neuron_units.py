"""One test per unit / naming trap of Neuron outputs (reference/neuron_profiles.md §0.4–0.5)."""

from __future__ import annotations

import json

import pytest

from jobs.normalize.neuron.json_view import parse_neuron_json
from jobs.normalize.neuron.profile import ENGINE_ALIASES, engine_name, percent_scale, seconds_to_ns

NEURON = "neuron/AnchovyPark__npu_profiling_code/matmul/neuron_profile_results/profile_128x128x1024.json"


@pytest.fixture(scope="module")
def doc(CORPUS):
    return json.loads((CORPUS / NEURON).read_bytes())


def test_device_timestamps_are_ns_from_profile_start(doc):
    """first_hw_timestamp is 0 and event ts stay on that clock: ts_ns = timestamp, no epoch, no µs scaling."""
    from jobs.normalize.neuron.events import profile_events

    assert doc["metadata"][0]["first_hw_timestamp"] == 0 and doc["metadata"][0]["first_ts"] == "1970-01-01T00:00:00Z"
    ev = profile_events(parse_neuron_json(json.dumps(doc).encode(), "x")).to_pandas()
    ins = ev[ev["category"] == "neuron_instruction"]
    assert sorted(ins["ts_ns"]) == sorted(i["timestamp"] for i in doc["instruction"])
    assert ins["ts_ns"].max() <= doc["metadata"][0]["last_hw_timestamp"]


def test_system_timestamps_are_epoch_ns():
    from jobs.normalize.job import normalize_file

    t0 = 1_729_888_371_056_597_613  # docs example (2024-10-25)
    doc = {
        "trace_events": [
            {
                "duration": 5000,
                "group": "nrt-nc-000",
                "id": 1,
                "instance_id": "i-1",
                "lnc_idx": "0",
                "name": "nrt_tensor_write",
                "parent_id": 0,
                "process_id": "4242",
                "thread_id": 7,
                "timestamp": t0,
                "type": 11,
            },
            {
                "duration": 2000,
                "group": "nc-000",
                "id": 2,
                "instance_id": "i-1",
                "lnc_idx": "0",
                "name": "nc_exec_running",
                "process_id": "4242",
                "thread_id": 0,
                "timestamp": t0 + 6000,
                "type": 3,
            },
            {
                "duration": 9000,
                "group": "framework-7",
                "instance_id": "i-1",
                "name": "PjitFunction(f)",
                "process_id": "4242",
                "thread_id": 7,
                "timestamp": t0 - 1000,
                "type": 99999,
            },
        ],
        "cpu_util": [{"cpu_id": "3", "duration": 1, "instance_id": "i-1", "timestamp": t0, "util": 42.0}],
        "mem_usage": [{"duration": 1, "instance_id": "i-1", "percent_usage": 12.5, "timestamp": t0, "usage": 1 << 30}],
    }
    task = {"uri": "/lz/sys/system_profile.json", "capture_id": "c", "job_id": "j", "kind": "auto"}
    row, ev = normalize_file(task, json.dumps(doc).encode())
    assert row["status"] == "ingested" and row["format"] == "neuron-system-json" and row["time_base"] == "epoch-ns"
    assert row["date"] == "2024-10-25" and row["trace_start_ns"] == t0 - 1000
    df = ev.to_pandas().set_index("name")
    assert df.loc["nrt_tensor_write", "ts_ns"] == t0 and df.loc["nrt_tensor_write", "dur_ns"] == 5000
    assert df.loc["nrt_tensor_write", "category"] == "neuron_runtime" and df.loc["nrt_tensor_write", "pid"] == 4242
    assert df.loc["nc_exec_running", "category"] == "neuron_hardware" and bool(df.loc["nc_exec_running", "is_gpu"])
    assert df.loc["PjitFunction(f)", "category"] == "framework"
    assert json.loads(df.loc["cpu_util", "args_json"])["util_percent"] == 42.0
    assert row.get("_neuron_summary") == []  # a system profile has no device summary


def test_summary_times_are_seconds(doc):
    s = doc["summary"][0]
    assert 0 < s["total_time"] < 1  # 1.87 ms written as seconds
    assert seconds_to_ns(s["total_time"]) == 1_867_630
    assert seconds_to_ns(None) is None and seconds_to_ns(float("nan")) is None


def test_percent_fields_are_fractions_in_legacy_json(doc):
    s = doc["summary"][0]
    assert s["total_active_time_percent"] == pytest.approx(s["total_active_time"] / s["total_time"])
    assert percent_scale(s) == 1.0
    scaled = {k: (v * 100 if k.endswith("_percent") else v) for k, v in s.items()}
    assert percent_scale(scaled) == 100.0
    # no checkable ratio: any value > 1 means 0-100
    assert percent_scale({"mfu_estimated_percent": 37.0}) == 100.0
    assert percent_scale({"mfu_estimated_percent": 0.37}) == 1.0


def test_engine_names_are_normalized_across_outputs(doc):
    # hardware aliases (PE=Tensor, ACT=Scalar, DVE=Vector, POOL=GpSimd, SP=Sync), any case, timeline rows
    for alias, engine in (
        ("PE", "tensor"),
        ("ACT", "scalar"),
        ("DVE", "vector"),
        ("POOL", "gpsimd"),
        ("SP", "sync"),
        ("Tensor", "tensor"),
        ("TensorMatrix", "tensor"),
        ("tensor", "tensor"),
        ("GpSimd", "gpsimd"),
        ("Pool", "gpsimd"),
        ("Activation", "scalar"),
    ):
        assert engine_name(alias) == engine, alias
    assert engine_name("NewEngine") == "newengine" and engine_name("") is None
    assert set(ENGINE_ALIASES.values()) == {"tensor", "vector", "scalar", "gpsimd", "sync"}
    # the corpus uses Title-case labels for instructions and lower case in active_time: one vocabulary after parsing
    p = parse_neuron_json(json.dumps(doc).encode(), "x")
    assert {i["label"] for i in doc["instruction"]} >= {"TensorMatrix", "GpSimd"}
    assert (
        set(p.column("Instruction", "engine"))
        == set(p.column("ActiveTime", "engine"))
        == {"tensor", "vector", "scalar", "gpsimd", "sync"}
    )
