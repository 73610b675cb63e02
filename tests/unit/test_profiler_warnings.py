"""The profiler's own warnings (Kineto WARNING/ERROR/Record counts, Neuron warnings) tied to the metrics and findings
they make uncertain: read from real traces, carried in ``captures.profiler_warnings_json``, and acted on by the
findings (confidence, evidence), ``rule_coverage.uncertain`` and the verdict (issue 33 item 4)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from corpus_jobs import available, corpus_job
from kineto_engines import ENGINES

from jobs.analyze.findings.coverage import rule_coverage
from jobs.analyze.findings.ranking import job_findings
from jobs.analyze.findings.rules import RULES
from jobs.analyze.findings.uncertainty import CROSS_RANK_RULES, UNCERTAIN_CONFIDENCE, capture_warnings
from jobs.landing.discover import discover
from jobs.normalize.identity import resolve_rank
from jobs.normalize.job import _read_task, normalize_file
from jobs.normalize.kineto.parse import parse_kineto
from jobs.normalize.profiler_warnings import KINDS, kineto_warnings, read_warnings, warnings_json
from jobs.publish.report.sections import coverage_section, glossary_section
from jobs.publish.verdict import job_verdict
from schemas import TABLES

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"
MTIA = CORPUS / "torch/HolisticTraceAnalysis/mtia_inference_trace/mtia_inference_rank_0.json.gz"
SMALL = CORPUS / "torch/HolisticTraceAnalysis/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
NEURON = CORPUS / "neuron/AnchovyPark__npu_profiling_code/matmul/neuron_profile_results"
RECORD_COUNTS = (
    "INFO:2026-01-08 08:52:00 865:3386 CuptiActivityProfiler.cpp:407] Record counts: Out-of-range = 120, "
    "Blocklisted runtime = 7, Invalid ext correlations = 3, CPU GPU out-of-order = 5, Unexpected CUDA events = 0, "
    "CUPTI stopped early? = 0"
)


def test_every_kind_names_real_columns_and_rules():
    from jobs.analyze.findings.neuron import RULES as NEURON_RULES

    rules = {r for r, _ in RULES} | set(NEURON_RULES)
    for k in KINDS:
        assert k.metrics and k.rules, k.kind
        for m in k.metrics:
            table, col = m.split(".")
            assert col in TABLES[table].names, m
        assert set(k.rules) <= rules, k.kind


@pytest.mark.skipif(not MTIA.exists(), reason="corpus absent")
@pytest.mark.parametrize("engine", ENGINES)
def test_kineto_error_line_of_a_real_trace_is_tied_to_the_roofline(engine):
    p = parse_kineto(MTIA.read_bytes(), str(MTIA), engine=engine)
    assert "profiler_warnings" in p.meta["flags"]
    [w] = p.meta["profiler_warnings"]
    assert w["kind"] == "device_properties_unavailable" and w["level"] == "error"
    assert "gpuGetDeviceCount failed with code 35" in w["message"]
    assert "op_efficiency.roofline_pct" in w["metrics"] and w["rules"] == ["kernels_below_peak"]


def _with_logs(src: Path, **logs) -> bytes:
    doc = json.loads(gzip.decompress(src.read_bytes()))
    doc.update(logs)
    return json.dumps(doc).encode()


@pytest.mark.skipif(not SMALL.exists(), reason="corpus absent")
@pytest.mark.parametrize("engine", ENGINES)
def test_record_counts_and_warning_lines_are_read(engine):
    data = _with_logs(
        SMALL,
        INFO=["INFO: Tracing started", RECORD_COUNTS],
        WARNING=["WARNING:2026-01-08 CuptiActivityProfiler.cpp:300] CUPTI dropped 42 activity records"],
    )
    p = parse_kineto(data, "t.json", engine=engine)
    got = {w["kind"]: w for w in p.meta["profiler_warnings"]}
    assert set(got) == {"out_of_range_records", "invalid_ext_correlations", "invalid_correlations", "dropped_records"}
    assert got["out_of_range_records"]["count"] == 120 and got["invalid_ext_correlations"]["count"] == 3
    # an ext correlation links a runtime call to its CPU op (External id): op attribution, not launch delays
    assert got["invalid_ext_correlations"]["rules"] == ["kernels_below_peak"]
    assert got["invalid_correlations"]["count"] == 5  # CPU GPU out-of-order
    assert "low_gpu_utilization" in got["out_of_range_records"]["rules"]
    assert "steps.launch_delay_p50_ns" in got["invalid_correlations"]["metrics"]
    assert got["dropped_records"]["level"] == "warning" and got["dropped_records"]["count"] == 42  # records
    # blocklisted runtime calls are filtered on purpose (cudaGetDevice …): not a warning
    assert not any("Blocklisted" in w["message"] for w in p.meta["profiler_warnings"])
    # an unchanged trace has none
    plain = parse_kineto(SMALL.read_bytes(), str(SMALL), engine=engine)
    assert plain.meta["profiler_warnings"] == [] and "profiler_warnings" not in plain.meta["flags"]


def test_unknown_warning_is_kept_unmapped_and_repeats_are_counted():
    class H:
        WARNING = ["WARNING: something new", "WARNING: something new"]
        ERROR = None
        INFO = None

    [w] = kineto_warnings(H())
    assert (w["kind"], w["count"], w["metrics"], w["rules"]) == ("unmapped", 2, [], [])
    assert read_warnings(warnings_json([w])) == [w] and warnings_json([]) is None
    assert read_warnings("not json") == [] and read_warnings(None) == []


@pytest.mark.skipif(not NEURON.exists(), reason="corpus absent")
def test_neuron_profile_warnings_reach_the_captures_row():
    found = discover(str(NEURON))
    f = next(f for f in found.files if f.uri.endswith("profile_128x128x1024.json"))
    task = f.to_dict()
    task["tags"] = {}
    data, err = _read_task(task, {})
    row, _ = normalize_file(task, data, err)
    assert row["status"] == "ingested" and "profiler_warnings" in row["flags"]
    kinds = {w["kind"]: w for w in read_warnings(row["profiler_warnings_json"])}
    assert set(kinds) == {"dma_metadata_missing", "compiler_metrics_missing"}
    assert kinds["dma_metadata_missing"]["level"] == "missing data"
    assert "neuron_small_dma_transfers" in kinds["dma_metadata_missing"]["rules"]
    assert "neuron_summary.dma_efficiency_pct" in kinds["dma_metadata_missing"]["metrics"]


def test_trace_rank_that_disagrees_with_the_manifest_is_flagged():
    task = {"uri": "raw/j/c/rank3.json", "rank": 3, "manifest_uri": "raw/j/c/manifest.json"}
    assert resolve_rank(5, task) == (5, "distributedInfo", ["rank_mismatch"])
    assert resolve_rank(3, task) == (3, "distributedInfo", [])
    assert resolve_rank(5, {**task, "manifest_uri": None}) == (5, "distributedInfo", [])


@pytest.mark.skipif(not available("dlrm"), reason="corpus absent")
def test_warned_rank_lowers_its_findings_and_names_the_uncertain_rules():
    tables, _ = corpus_job("dlrm")
    base = job_findings(tables).to_pandas()
    warn = [
        {
            "kind": "out_of_range_records",
            "level": "info",
            "count": 120,
            "message": "Record counts: Out-of-range = 120",
            "words": next(k.words for k in KINDS if k.kind == "out_of_range_records"),
            "metrics": list(next(k.metrics for k in KINDS if k.kind == "out_of_range_records")),
            "rules": list(next(k.rules for k in KINDS if k.kind == "out_of_range_records")),
        }
    ]
    caps = tables["captures"].copy()
    caps["profiler_warnings_json"] = [warnings_json(warn) if r == 7 else None for r in caps["rank"]]
    warned = {**tables, "captures": caps}
    got = job_findings(warned).to_pandas()
    assert len(got) == len(base)
    b, g = base.set_index("finding_id"), got.set_index("finding_id")
    touched = 0
    for fid, row in g.iterrows():
        ev = json.loads(row["evidence_json"])
        job_wide = row["rule"] in CROSS_RANK_RULES  # who arrives last depends on every rank's data
        hit = row["rule"] in warn[0]["rules"] and (job_wide or 7 in list(row["ranks"]) or not len(row["ranks"]))
        if hit:
            touched += 1
            assert row["confidence"] == pytest.approx(b.loc[fid, "confidence"] * UNCERTAIN_CONFIDENCE)
            assert ev["uncertain"][0]["rank"] == 7 and ev["uncertain"][0]["count"] == 120
        else:
            assert row["confidence"] == b.loc[fid, "confidence"] and "uncertain" not in ev
    assert touched >= 1
    cov = rule_coverage(warned, job_findings(warned)).to_pandas()
    unc = cov.set_index("rule")["uncertain"]
    assert "outside the capture window" in unc["low_gpu_utilization"] and "(rank 7)" in unc["low_gpu_utilization"]
    assert unc["dataloader_bound"] is None
    v = job_verdict(got, cov)
    assert (
        v.uncertain and "Uncertain, because the profiler warned" in v.headline and "low GPU utilization" in v.headline
    )
    report = {"captures": caps, "rule_coverage": cov, "findings": got}
    g_sec = glossary_section(report)
    assert any(t.key == "profiler-warnings" for t in g_sec.tables)
    assert "uncertain because" in coverage_section(report).tables[0].columns


def test_a_cut_short_capture_counts_as_a_warning_and_a_cross_rank_rule_is_uncertain_on_every_rank():
    """newuser16 #2/#3: a rank cut short (partial_trace) changed the job's numbers with no word outside the captures
    flags; a warning on rank 3 named straggler_rank uncertain while the straggler finding on rank 7 kept its
    confidence."""
    import pandas as pd  # why: only this test builds frames by hand

    from jobs.analyze.findings.uncertainty import mark_uncertain, warned_rules

    caps = pd.DataFrame([{"rank": 3, "flags": ["partial_trace", "truncated_tail"], "profiler_warnings_json": None}])
    [w] = capture_warnings(caps)
    assert (w["kind"], w["rank"]) == ("partial_trace", 3) and "straggler_rank" in w["rules"]
    found = [
        {"rule": "straggler_rank", "ranks": [7], "confidence": 0.68, "evidence_json": "{}"},
        {"rule": "low_gpu_utilization", "ranks": [7], "confidence": 0.37, "evidence_json": "{}"},
    ]
    mark_uncertain(found, warned_rules(caps))
    assert found[0]["confidence"] == pytest.approx(0.34) and json.loads(found[0]["evidence_json"])["uncertain"]
    assert found[1]["confidence"] == 0.37 and "uncertain" not in json.loads(found[1]["evidence_json"])  # rank 7's own
