"""Device critical path over instruction dependencies, attributed to compute, DMA, semaphore waits,
collectives and idle gaps."""

from __future__ import annotations

import pyarrow as pa
import pytest

from jobs.normalize.neuron.critical_path import (
    critical_path_from_events,
    critical_path_rows,
    device_critical_path,
    instruction_category,
)
from jobs.normalize.neuron.events import profile_events
from jobs.normalize.neuron.json_view import parse_neuron_json

NEURON = "neuron/AnchovyPark__npu_profiling_code/matmul/neuron_profile_results/profile_128x128x1024.json"


def _ins(rows):
    cols = ("id", "start_ts", "end_ts", "engine", "opcode", "evt_wait_time_ns")
    return pa.table({c: [r[i] for r in rows] for i, c in enumerate(cols)})


def test_attribution_of_every_kind():
    ins = _ins(
        [
            (1, 0, 10, "sync", "DMA_DIRECT2D", 0),  # triggers the load
            (2, 100, 200, "tensor", "MATMUL", 90),  # waited 10→100 for the DMA
            (3, 250, 300, "scalar", "ACTIVATE", 0),  # 50 ns dependency gap nobody explains
            (4, 430, 500, "vector", "TENSOR_TENSOR", 130),  # waited 300→430: collective, then semaphore
        ]
    )
    flows = pa.table({"in_id": [1, 2, 3], "out_id": [2, 3, 4]})
    dma = pa.table({"start_ts": [10, 40], "end_ts": [60, 100]})
    cc = pa.table({"start_ts": [300], "end_ts": [400]})
    cp = device_critical_path(ins, flows, None, dma, cc)
    assert cp.length_ns == 500
    assert cp.by_category == {"compute": 220, "dma": 100, "semaphore_wait": 30, "collective": 100, "idle": 50}
    assert sum(cp.by_category.values()) == cp.length_ns
    assert [s[0] for s in cp.segments if s[0] is not None] == [1, 2, 3, 4]
    starts = [s[2] for s in cp.segments]
    assert starts == sorted(starts) and cp.segments[0][2] == 0 and cp.segments[-1][3] == 500


def test_semaphore_wait_follows_the_engine_that_released_it():
    ins = _ins(
        [
            (1, 0, 1000, "sync", "EVENT_SEMAPHORE", 0),  # barrier: waits for the scalar engine
            (2, 100, 900, "scalar", "ACTIVATE", 0),
            (3, 1000, 1010, "sync", "SET_ORDERING_MODE", 0),
        ]
    )
    cp = device_critical_path(ins)
    assert [s[0] for s in cp.segments if s[4] == "compute"] == [2, 3]
    assert cp.by_category["compute"] == 810 and cp.by_category["semaphore_wait"] == 100 and cp.length_ns == 910


def test_program_order_is_a_dependency():
    ins = _ins([(1, 0, 50, "tensor", "MATMUL", 0), (2, 80, 100, "tensor", "MATMUL", 0)])
    cp = device_critical_path(ins)  # no Flow rows: the engine's own order links them
    assert cp.length_ns == 100 and cp.by_category["compute"] == 70 and cp.by_category["idle"] == 30


def test_categories():
    assert instruction_category("DMA_DIRECT2D") == "dma" and instruction_category("TENSOR_LOAD") == "dma"
    assert instruction_category("PSEUDO_TRIGGER_COLLECTIVE") == "collective"
    assert instruction_category("EVENT_SEMAPHORE_RANGE_CLEAR") == "semaphore_wait"
    assert instruction_category("MATMUL") == "compute" and instruction_category(None) == "compute"
    assert device_critical_path(None).length_ns == 0


def test_corpus_path_goes_through_the_matmuls_and_shows_the_startup_gap(CORPUS):
    p = parse_neuron_json((CORPUS / NEURON).read_bytes(), "x")
    cp = device_critical_path(
        p.table("Instruction"), p.table("Flow"), p.table("DmaPacketAggregated"), p.table("DmaPacket"), p.table("CcOp")
    )
    names = [s[1] for s in cp.segments]
    assert "MATMUL" in names and "ACTIVATE" in names
    assert sum(cp.by_category.values()) == cp.length_ns
    last_end = max(p.column("Instruction", "end_ts"))
    assert cp.segments[-1][3] == last_end
    # the first-execution start-up (~1.85 ms of GpSimd library loading) is an unexplained gap on the path
    assert cp.by_category["idle"] > 0.9 * cp.length_ns
    # same path from the events table (what the analyze stage reads)
    ev = profile_events(p)
    cp2, ids = critical_path_from_events(ev)
    assert cp2.length_ns == cp.length_ns and cp2.by_category == cp.by_category
    rows = critical_path_rows(cp2, dict(date="unknown", job_id="j", attempt=0, rank=0, capture_id="c"), ids)
    from schemas.tables import CRITICAL_PATH

    assert set(rows[0]) == set(CRITICAL_PATH.names)
    assert pa.Table.from_pylist(rows, schema=CRITICAL_PATH.arrow_schema()).num_rows == len(cp2.segments)
    assert sum(r["dur_ns"] for r in rows) == cp.length_ns
    assert {r["scope"] for r in rows} == {"rank"}
    from schemas.expectations import VALUE_SETS

    assert {r["bound_by"] for r in rows} <= set(VALUE_SETS[("critical_path", "bound_by")])
    assert any(r["event_id"] is not None for r in rows)


@pytest.mark.parametrize("seed", [0, 1])
def test_synthetic_profile_path_is_consistent(seed):
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "fixtures" / "neuron_parquet_gen.py"
    spec = importlib.util.spec_from_file_location("neuron_parquet_gen", path)
    gen = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("neuron_parquet_gen", gen)
    spec.loader.exec_module(gen)
    rows = gen.synthetic_profile(seed, collectives=True, iterations=4)
    tab = lambda t: pa.Table.from_pylist(rows[t]) if t in rows else None  # noqa: E731
    cp = device_critical_path(tab("Instruction"), tab("Flow"), None, tab("DmaPacket"), tab("CcOp"))
    assert sum(cp.by_category.values()) == cp.length_ns > 0
    assert cp.by_category["compute"] > 0 and cp.by_category["dma"] > 0
    assert cp.by_category["collective"] >= 1500  # the next load waits for each all-reduce
