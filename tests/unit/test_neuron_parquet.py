"""Explorer Parquet (schema 7.4.0, generated from the documented schema) normalizes to the same metrics as
the legacy JSON path for the same content; later schema versions are read by field presence."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.landing.formats import table_of_file
from jobs.normalize.errors import TraceError
from jobs.normalize.neuron.json_view import parse_neuron_json
from jobs.normalize.neuron.parquet import parse_neuron_parquet
from jobs.normalize.neuron.summary import summary_row

NEURON = "neuron/AnchovyPark__npu_profiling_code/matmul"
FILES = (
    "neuron_profile_results/profile_128x128x1024.json",
    "neuron_profile_results/profile_128x128x520.json",
    "neuron_profile_results_bucketed/profile_bucketed_128x128x2048.json",
)
#: columns that legitimately differ between the two formats
FORMAT_COLUMNS = {"source_format", "schema_version", "profile_id"}


@pytest.fixture(scope="module")
def gen():
    path = Path(__file__).resolve().parents[1] / "fixtures" / "neuron_parquet_gen.py"
    spec = importlib.util.spec_from_file_location("neuron_parquet_gen", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["neuron_parquet_gen"] = mod
    spec.loader.exec_module(mod)
    return mod


def _read_dir(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in d.iterdir() if p.suffix == ".parquet"}


def assert_same_metrics(a: dict, b: dict, skip=frozenset()):
    """Equal summary rows: floats to 1e-6 relative (Parquet Summary floats are float32), ns derived from
    float seconds to ±1 ns, everything else exact."""
    for k in a:
        if k in FORMAT_COLUMNS or k in skip:
            continue
        x, y = a[k], b[k]
        if isinstance(x, float) and isinstance(y, float):
            assert math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-12), (k, x, y)
        elif isinstance(x, int) and isinstance(y, int) and k.endswith("_ns"):
            assert abs(x - y) <= 1, (k, x, y)
        else:
            assert x == y, (k, x, y)


def test_generated_schema_is_appendix_a(gen):
    s = gen.SCHEMA
    assert len(s) == 27
    inst = {f[0]: f for f in s["Instruction"]}
    assert inst["start_ts"][1] == pa.int64() and inst["start_ts"][2] is True and inst["start_ts"][3] == "nanoseconds"
    assert inst["evt_wait_time_ns"][2] is False
    summ = {f[0]: f for f in s["Summary"]}
    assert summ["total_time"][1] == pa.float32() and summ["total_time"][3] == "seconds"
    assert len(summ) == 101  # the 101 Summary fields of 7.4.0 (reference §2.2)
    assert {f[0]: f for f in s["Flow"]}["gap_time"][3] == "nanoseconds"


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(lnc=2, spill=True),
        dict(collectives=True, small_dma=True),
        dict(platform="trn2", startup_idle_ns=1_000_000, percent_scale=100.0),
    ],
)
def test_synthetic_profiles_keep_the_spec_invariants(gen, kw):
    rows = gen.synthetic_profile(7, **kw)
    assert gen.check_invariants(rows) == []
    ops = {r["opcode"] for r in rows["Instruction"]}
    assert {"LDWEIGHTS", "MATMUL", "EVENT_SEMAPHORE", "ACTIVATE"} <= ops
    assert {r["timeline_track"] for r in rows["Instruction"] if r["engine"] == "tensor"} == {"Tensor", "TensorMatrix"}
    assert any(r["evt_wait_time_ns"] > 0 for r in rows["Instruction"])
    # TensorE pipelines: a MATMUL starts before the LDWEIGHTS it follows has finished (§3.1 item 2)
    tensor = sorted((r for r in rows["Instruction"] if r["engine"] == "tensor"), key=lambda r: r["start_ts"])
    assert any(
        a["opcode"] == "LDWEIGHTS" and b["opcode"] == "MATMUL" and b["start_ts"] < a["end_ts"]
        for a, b in zip(tensor, tensor[1:])
    )
    if kw.get("collectives"):
        assert all(r["cc_trigger_start_delay"] > 0 for r in rows["CcOp"])


@pytest.mark.parametrize("rel", FILES)
def test_corpus_json_and_its_parquet_twin_give_the_same_summary(gen, CORPUS, tmp_path, rel):
    raw = (CORPUS / NEURON / rel).read_bytes()
    from_json = summary_row(parse_neuron_json(raw, "p"))
    d = gen.write_parquet_profile(
        gen.legacy_json_to_rows(json.loads(raw)), tmp_path / "p", split=("Instruction", "DmaPacket")
    )
    assert (d / "Instruction_0.parquet").exists() and (d / "Instruction_1.parquet").exists()
    prof = parse_neuron_parquet(_read_dir(d), "p")
    assert prof.metadata["profile_schema_version"] == "7.4.0"
    assert prof.metadata["tensor_engine_clock_freq"] == 2.8  # float32 widened through its shortest decimal
    from_parquet = summary_row(prof)
    assert from_parquet["schema_version"] == "7.4.0" and from_parquet["source_format"] == "neuron-parquet"
    assert_same_metrics(from_json, from_parquet)


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(lnc=2, spill=True, throttle=True),
        dict(small_dma=True, platform="trn2"),
        dict(percent_scale=100.0, startup_idle_ns=1_500_000),
    ],
)
def test_synthetic_parquet_and_legacy_twin_give_the_same_summary(gen, tmp_path, kw):
    rows = gen.synthetic_profile(11, **kw)
    from_json = summary_row(parse_neuron_json(json.dumps(gen.rows_to_legacy_json(rows)).encode(), "p"))
    from_parquet = summary_row(parse_neuron_parquet(_read_dir(gen.write_parquet_profile(rows, tmp_path / "p")), "p"))
    assert_same_metrics(from_json, from_parquet)
    # the recomputed MFU/MBU reproduce the generator's Summary (written with the §2.2 formulas)
    assert not any(f.startswith("reported_") for f in from_parquet["flags"])
    assert from_parquet["mfu_pct"] == pytest.approx(from_parquet["mfu_reported_pct"], rel=1e-6)
    if kw.get("percent_scale") == 100.0:
        assert "percent_scale_100" in from_parquet["flags"]
        assert from_parquet["mfu_reported_pct"] == pytest.approx(rows["Summary"][0]["mfu_estimated_percent"], rel=1e-6)
    if kw.get("spill"):
        assert from_parquet["spill_reload_bytes"] > 0 and from_parquet["spill_save_bytes"] > 0


def test_collectives_and_system_tables_from_parquet(gen, tmp_path):
    rows = gen.synthetic_profile(3, collectives=True, system=True, collective_delay_ns=250)
    prof = parse_neuron_parquet(_read_dir(gen.write_parquet_profile(rows, tmp_path / "p")), "p")
    r = summary_row(prof)
    n = len(rows["CcOp"])
    assert r["cc_op_count"] == n and r["cc_trigger_delay_ns"] == 250 * n and r["cc_trigger_delay_max_ns"] == 250
    assert r["cc_op_time_ns"] == sum(c["duration_ns"] for c in rows["CcOp"])
    assert "device_and_system_clocks_not_aligned" in prof.flags
    from jobs.normalize.neuron.events import profile_events
    from jobs.normalize.neuron.system import system_blocks

    ev = profile_events(prof).to_pandas()
    coll = ev[ev["category"] == "neuron_collective"]
    assert len(coll) == n and set(coll["collective"]) == {"allreduce"} and set(coll["group_size"]) == {4}
    assert set(coll["msg_bytes"]) == {1 << 20}
    assert len(system_blocks(prof)) == 3


def test_later_schema_version_is_read_by_field_presence(gen, tmp_path):
    rows = gen.synthetic_profile(5)
    base = summary_row(parse_neuron_parquet(_read_dir(gen.write_parquet_profile(rows, tmp_path / "a")), "p"))
    d = gen.write_parquet_profile(
        rows,
        tmp_path / "b",
        version="12.0.1",
        rename={
            "Instruction.start_ts": "timestamp",
            "Instruction.evt_wait_time_ns": "evt_wait_time",
            "DmaPacket.transfer_bytes": "transfer_size",
        },
        drop=("Instruction.end_ts", "Instruction.compiler_pc"),
    )
    prof = parse_neuron_parquet(_read_dir(d), "p")
    assert "schema_12.0.1_by_field_presence" in prof.flags and "renamed_fields_read_by_alias" in prof.flags
    later = summary_row(prof)
    assert later["schema_version"] == "12.0.1"
    assert_same_metrics(base, later, skip={"flags"})


def test_missing_start_time_is_a_clear_error(gen, tmp_path):
    rows = gen.synthetic_profile(5)
    d = gen.write_parquet_profile(rows, tmp_path / "p", drop=("Instruction.start_ts",))
    with pytest.raises(TraceError, match=r"Instruction\.parquet: no start time"):
        parse_neuron_parquet(_read_dir(d), "p")
    with pytest.raises(TraceError, match="no Neuron Explorer table file"):
        parse_neuron_parquet({"notes.txt": b"x"}, "p")
    with pytest.raises(TraceError, match="Summary.parquet: not a readable Parquet file"):
        parse_neuron_parquet({"Summary.parquet": b"PAR1garbage"}, "p")


def test_table_file_names():
    assert table_of_file("Instruction.parquet") == ("Instruction", 0)
    assert table_of_file("x/DmaPacket_12.parquet") == ("DmaPacket", 12)
    assert table_of_file("notes.parquet.bak") is None


def test_percent_scale_trap_is_detected_from_the_data(gen, tmp_path):
    """The same content with *_percent written as 0–100 gives identical 0–100 columns."""
    a = gen.synthetic_profile(9, percent_scale=1.0)
    b = gen.synthetic_profile(9, percent_scale=100.0)
    ra = summary_row(parse_neuron_parquet(_read_dir(gen.write_parquet_profile(a, tmp_path / "a")), "p"))
    rb = summary_row(parse_neuron_parquet(_read_dir(gen.write_parquet_profile(b, tmp_path / "b")), "p"))
    assert "percent_scale_100" in rb["flags"] and "percent_scale_100" not in ra["flags"]
    assert_same_metrics(ra, rb, skip={"flags"})
    t = pq.read_table(tmp_path / "b" / "Summary.parquet")
    assert t.column("total_active_time_percent")[0].as_py() > 1  # really written on the 0–100 scale
