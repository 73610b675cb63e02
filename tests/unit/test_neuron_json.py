"""Legacy ``neuron-profile view --output-format json`` and summary-json → one model and ``events``."""

from __future__ import annotations

import json

import pytest

from jobs.normalize.errors import TraceError
from jobs.normalize.kineto.parse import EVENT_COLUMNS
from jobs.normalize.neuron.events import TRACK_TIDS, profile_events
from jobs.normalize.neuron.json_view import is_legacy_profile, is_summary_json, parse_neuron_json, parse_summary_json

NEURON = "neuron/AnchovyPark__npu_profiling_code/matmul"
F1024 = "neuron_profile_results/profile_128x128x1024.json"


@pytest.fixture(scope="module")
def raw(CORPUS):
    return (CORPUS / NEURON / F1024).read_bytes()


@pytest.fixture(scope="module")
def doc(raw):
    return json.loads(raw)


def test_legacy_tables_follow_the_parquet_crosswalk(raw, doc):
    p = parse_neuron_json(raw, "profile_128x128x1024")
    ins = p.tables["Instruction"]
    assert ins.num_rows == len(doc["instruction"]) == 129
    first = doc["instruction"][0]
    row = ins.slice(0, 1).to_pylist()[0]
    assert (row["start_ts"], row["duration_ns"], row["end_ts"]) == (
        first["timestamp"],
        first["duration"],
        first["timestamp"] + first["duration"],
    )
    assert row["evt_wait_time_ns"] == first["evt_wait_time"] and row["timeline_track"] == first["label"]
    packets = [d for d in doc["dma"] if d["aggregated"] == "no"]
    assert p.tables["DmaPacket"].num_rows == len(packets) == 227
    assert p.tables["DmaPacketAggregated"].num_rows == 1
    assert sum(p.column("DmaPacket", "transfer_bytes")) == sum(d["transfer_size"] for d in packets)
    assert p.tables["SemaphoreUpdate"].num_rows == 328 and p.tables["Throttle"].num_rows == len(doc["ham"])
    n_edges = sum(len(i.get("predecessors") or []) for i in doc["instruction"])
    assert p.tables["Flow"].num_rows == n_edges == 21
    assert min(p.column("Flow", "gap_time")) >= 0  # predecessors end before their successors start
    md = p.metadata
    assert (md["tensor_engine_num_rows"], md["tensor_engine_clock_freq"], md["neuroncore_clock_freq"]) == (
        128,
        2.8,
        1.4,
    )
    assert md["instance_type"] == "inf2.xlarge" and md["profiler_version"].startswith("2.27.33")
    assert p.summary["total_time"] == doc["summary"][0]["total_time"]


def test_events_rows(raw, doc):
    p = parse_neuron_json(raw, "x")
    ev = profile_events(p)
    assert ev.schema.names == list(EVENT_COLUMNS)
    df = ev.to_pandas()
    assert set(df["source"]) == {"neuron"}
    assert df["event_id"].tolist() == list(range(len(df)))
    ins = df[df["category"] == "neuron_instruction"]
    assert len(ins) == 129 and set(ins["ph"]) == {"X"}
    mm = ins[ins["name"] == "MATMUL"]
    assert set(mm["thread_name"]) == {"TensorMatrix"} and set(mm["tid"]) == {TRACK_TIDS["TensorMatrix"]}
    # engine canonicalized in args; instruction id kept as external_id; predecessors listed for the critical path
    a = json.loads(mm.iloc[0]["args_json"])
    assert a["engine"] == "tensor" and len(a["predecessors"]) == 2
    ids = {i["id"] for i in doc["instruction"]}
    ext = ev.column("external_id").to_pylist()[: len(ins)]  # instructions come first, exact int64 (not via float)
    assert set(ext) == ids
    assert (
        len(df[df["category"] == "neuron_dma"]) == 227 and df[df["category"] == "neuron_dma"]["msg_bytes"].notna().all()
    )
    sem = df[df["category"] == "neuron_semaphore"]
    assert len(sem) == 328 and set(sem["ph"]) == {"C"} and sem["dur_ns"].isna().all()
    assert df["is_gpu"].all() and set(df["device"]) == {0}


def test_not_a_neuron_profile_is_rejected():
    with pytest.raises(TraceError, match="not a neuron-profile JSON"):
        parse_neuron_json(b'{"traceEvents": []}', "x")
    with pytest.raises(TraceError, match="not valid JSON"):
        parse_neuron_json(b'{"instruction": [', "x")
    assert not is_legacy_profile({"metadata": {}, "traceEvents": []})


def test_summary_json_with_log_lines_and_profile_keys(doc):
    summ = doc["summary"][0]
    text = b"INFO 2026-01-01 converting...\nWARN something\n" + json.dumps({"nc0": summ, "nc1": summ}).encode()
    profs = parse_summary_json(text, "s3://b/summary.json")
    assert [p.profile_id for p in profs] == ["nc0", "nc1"]
    assert profs[0].summary["mfu_estimated_percent"] == summ["mfu_estimated_percent"]
    assert profs[0].metadata["instance_type"] == "inf2.xlarge" and profs[0].tables == {}
    flat = parse_summary_json(json.dumps(summ).encode(), "x/summary.json")
    assert [p.profile_id for p in flat] == ["summary"]
    assert is_summary_json({"k": summ}) and not is_summary_json({"traceEvents": []})
    with pytest.raises(TraceError, match="no object with total_time"):
        parse_summary_json(b'{"a": {"b": 1}}')


def test_summary_json_row_uses_instance_type_constants(doc):
    """summary-json has no Metadata: the trn1/inf2 constants recompute the same MFU the profiler stored."""
    from jobs.normalize.neuron.summary import summary_row

    (p,) = parse_summary_json(json.dumps({"k": doc["summary"][0]}).encode())
    r = summary_row(p)
    assert "hw_constants_from_instance_type" in r["flags"] and "summary_only" in r["flags"]
    assert r["mfu_pct"] == pytest.approx(r["mfu_reported_pct"], rel=1e-6)
    assert r["n_instructions"] is None and r["critical_path_ns"] is None
