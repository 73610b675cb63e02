"""Trainium findings in the ``findings`` schema, from real corpus profiles and targeted synthetic ones."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from jobs.analyze.findings.neuron import RULES, neuron_findings
from jobs.normalize.neuron.json_view import parse_neuron_json
from jobs.normalize.neuron.parquet import parse_neuron_parquet
from jobs.normalize.neuron.summary import summary_row
from schemas.tables import FINDINGS

NEURON = "neuron/AnchovyPark__npu_profiling_code/matmul/neuron_profile_results/profile_128x128x1024.json"
IDENT = dict(date="2026-11-30", job_id="j", attempt=0, rank=3, capture_id="c")


@pytest.fixture(scope="module")
def gen():
    path = Path(__file__).resolve().parents[1] / "fixtures" / "neuron_parquet_gen.py"
    spec = importlib.util.spec_from_file_location("neuron_parquet_gen", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("neuron_parquet_gen", mod)
    spec.loader.exec_module(mod)
    return mod


def _row(p, **ident):
    r = summary_row(p)
    r.update({**IDENT, **ident})
    return r


def _synthetic(gen, tmp_path, name, **kw):
    d = gen.write_parquet_profile(gen.synthetic_profile(4, **kw), tmp_path / name)
    return parse_neuron_parquet({f.name: f.read_bytes() for f in d.iterdir()}, name)


def test_corpus_profile_findings(CORPUS):
    r = _row(parse_neuron_json((CORPUS / NEURON).read_bytes(), "profile_128x128x1024"))
    t = neuron_findings([r])
    assert t.schema.names == FINDINGS.names and t.schema == FINDINGS.arrow_schema()
    f = {x["rule"]: x for x in t.to_pylist()}
    # the corpus captured the first execution: ~1.86 ms of start-up idle before 7 µs of work
    start = f["neuron_first_execution_startup"]
    assert start["rank_order"] == 1 and start["est_time_lost_per_step_ns"] > 1_800_000
    assert "--profile-nth-exec=2" in start["recommendation"]
    ev = json.loads(start["evidence_json"])
    assert ev["rank"] == 3 and ev["profile_id"] == "profile_128x128x1024" and ev["largest_idle_gap_ns"] > 1_800_000
    assert "neuron_dma_bound" in f and f["neuron_dma_bound"]["metric"] == "arithmetic_intensity"
    assert "neuron_small_dma_transfers" in f  # 29% of the packets are < 512 B in this profile
    assert "neuron_throttled" in f  # limit 7/8 over more than the active time
    assert "neuron_spill_reload_heavy" not in f and "neuron_collective_stall" not in f
    assert sorted(x["rank_order"] for x in t.to_pylist()) == list(range(1, t.num_rows + 1))
    assert all(x["ranks"] == [3] and x["steps"] == [] for x in t.to_pylist())
    assert set(f) <= set(RULES)


def test_later_execution_has_no_startup_finding(gen, tmp_path):
    p = _synthetic(gen, tmp_path, "a", startup_idle_ns=2_000_000)
    r = _row(p)
    assert "neuron_first_execution_startup" in {x["rule"] for x in neuron_findings([r]).to_pylist()}
    r["nth_exec"] = 2  # captured with --profile-nth-exec=2: the gap is real, not the artifact
    assert "neuron_first_execution_startup" not in {x["rule"] for x in neuron_findings([r]).to_pylist()}


def test_spill_collective_and_small_dma_findings(gen, tmp_path):
    spill = _row(_synthetic(gen, tmp_path, "s", spill=True), capture_id="s")
    cc = _row(_synthetic(gen, tmp_path, "c", collectives=True, collective_delay_ns=800), capture_id="cc")
    small = _row(_synthetic(gen, tmp_path, "d", small_dma=True), capture_id="d")
    t = neuron_findings([spill, cc, small]).to_pylist()
    by = {(x["rule"], json.loads(x["evidence_json"])["capture_id"]) for x in t}
    assert ("neuron_spill_reload_heavy", "s") in by and ("neuron_spill_reload_heavy", "cc") not in by
    assert ("neuron_collective_stall", "cc") in by and ("neuron_collective_stall", "s") not in by
    assert ("neuron_small_dma_transfers", "d") in by and ("neuron_small_dma_transfers", "s") not in by
    stall = next(x for x in t if x["rule"] == "neuron_collective_stall")
    assert stall["est_time_lost_per_step_ns"] == 800 * cc["cc_op_count"]
    assert len({x["finding_id"] for x in t}) == len(t)  # ids are unique per profile


def test_empty_input():
    t = neuron_findings([])
    assert t.num_rows == 0 and t.schema == FINDINGS.arrow_schema()
