"""Unit tests of jobs.analyze.findings.coverage (the ``rule_coverage`` table) and of the words of the findings, on
corpus jobs normalized and analyzed in-process (corpus_jobs.py): the alexnet trace without ProfilerStep is judged on
its whole trace (findings + ``ran_on_trace``), the CPU-only trace says its GPU rules did not run instead of looking
fine, the 8-rank DLRM job runs every GPU rule on its steps, and no title or recommendation leaks a column name."""

from __future__ import annotations

import json
import re

import corpus_jobs
import pyarrow as pa
import pytest

from jobs.analyze.findings import rules as fr
from jobs.analyze.findings.coverage import CPU_ONLY_REASON, GPU_RULES, WHOLE_TRACE_REASON, rule_coverage
from jobs.analyze.findings.neuron import RULES as NEURON_RULES
from jobs.analyze.findings.ranking import findings_document, job_findings, validate_document
from schemas.expectations import value_set
from schemas.tables import COVERAGE_STATUSES, RULE_COVERAGE


def _job(name: str):
    if not corpus_jobs.available(name):
        pytest.skip(f"needs the {name} traces in ../shared/corpus")
    tables, _events = corpus_jobs.corpus_job(name)
    findings = job_findings(tables)
    coverage = rule_coverage(tables, findings)
    assert coverage.schema == RULE_COVERAGE.arrow_schema() and coverage.column_names == RULE_COVERAGE.names
    doc = findings_document(name, 0, findings, coverage=coverage)
    validate_document(doc)
    json.dumps(doc, allow_nan=False)
    return findings.to_pylist(), {r["rule"]: r for r in coverage.to_pylist()}, doc


def test_statuses_are_the_declared_value_set():
    assert value_set("rule_coverage", "status") == COVERAGE_STATUSES


def test_alexnet_without_profiler_step_is_judged_on_its_whole_trace():
    """Issue 26: 99.5 % GPU idle and 25 s of host wait must not read as "no bottleneck"."""
    found, cov, doc = _job("alexnet")
    by_rule = {f["rule"]: f for f in found}
    assert {"low_gpu_utilization", "host_bound_launch", "pageable_memcpy"} <= set(by_rule)
    for f in found:
        ev = json.loads(f["evidence_json"])
        assert ev["window"] == "trace" and f["steps"] == [] and f["ranks"] == [0]
        assert "whole trace as one window" in f["title"] and "per step" not in f["title"]
        assert 0.05 <= f["confidence"] <= 0.95
    low = by_rule["low_gpu_utilization"]
    assert low["value"] < 1.0 and "of the trace" in low["title"]  # busy 0.15 % of the 43 s trace
    # the idle GPU's device time is a pageable host-to-device copy, and a finding names it
    pg = by_rule["pageable_memcpy"]
    assert "Memcpy HtoD (Pageable -> Device)" in pg["title"] and pg["value"] > 80
    assert "pin_memory" in pg["recommendation"] and "non_blocking=True" in pg["recommendation"]
    assert json.loads(pg["evidence_json"])["details"]["top_copies"][0]["name"] == "Memcpy HtoD (Pageable -> Device)"
    # coverage: every GPU rule is listed; the ones with a subject ran on the whole trace, and say so
    assert list(cov) == list(GPU_RULES)
    for rule in ("host_bound_launch", "low_gpu_utilization", "pageable_memcpy", "many_tiny_kernels", "blocking_sync"):
        c = cov[rule]
        assert c["status"] == "ran_on_trace" and c["reason"] == f"{WHOLE_TRACE_REASON} (1 of 1 rank)"
        assert (c["n_ranks"], c["n_windows"]) == (1, 1)
    assert cov["low_gpu_utilization"]["n_findings"] == 1 and cov["memcpy_bound"]["n_findings"] == 0
    assert cov["straggler_rank"]["status"] == "not_applicable" and "one rank" in cov["straggler_rank"]["reason"]
    assert cov["exposed_communication"]["status"] == "not_applicable"
    # no shapes recorded: op efficiency has nothing to judge, and the reason says how to get it
    kb = cov["kernels_below_peak"]
    assert kb["status"] == "not_applicable" and "shape recording" in kb["reason"]
    assert [c["rule"] for c in doc["coverage"]] == list(GPU_RULES)
    assert doc["generated_from"]["n_whole_trace_windows"] == 1 and doc["generated_from"]["n_rank_steps"] == 0


def test_cpu_only_trace_says_its_gpu_rules_did_not_run():
    found, cov, doc = _job("cpu_only")
    assert found == []  # nothing fired, and coverage says why that is not "fine"
    gpu_only = set(GPU_RULES) - {"dataloader_bound", "straggler_rank"}
    for rule in gpu_only:
        assert cov[rule]["status"] == "not_run" and cov[rule]["reason"] == CPU_ONLY_REASON
        assert (cov[rule]["n_ranks"], cov[rule]["n_windows"], cov[rule]["n_findings"]) == (0, 0, 0)
    assert cov["dataloader_bound"]["status"] == "ran" and cov["dataloader_bound"]["reason"] is None
    assert cov["straggler_rank"]["status"] == "not_applicable"
    assert not all(c["status"] in ("ran", "not_applicable") for c in doc["coverage"])  # no "ok" verdict


def test_dlrm_runs_every_gpu_rule_on_its_steps():
    found, cov, _doc = _job("dlrm")
    assert {c["status"] for c in cov.values()} == {"ran"} and list(cov) == list(GPU_RULES)
    assert all((c["n_ranks"], c["n_windows"], c["reason"]) == (8, 8, None) for c in cov.values())
    n = {}
    for f in found:
        n[f["rule"]] = n.get(f["rule"], 0) + 1
        assert json.loads(f["evidence_json"])["window"] == "step"
    assert {r: c["n_findings"] for r, c in cov.items() if c["n_findings"]} == n


def test_neuron_job_lists_the_neuron_rules():
    ns = pa.table(
        {
            "date": ["2026-01-02"],
            "job_id": ["nj"],
            "attempt": pa.array([0], pa.int32()),
            "rank": pa.array([0], pa.int32()),
            "capture_id": ["n0"],
            "profile_id": ["p0"],
            "total_time_ns": [20_000_000],
            "total_active_time_ns": [18_000_000],
            "tensor_active_ns": [15_000_000],
            "nth_exec": [2],
        }
    ).to_pandas()
    cov = rule_coverage({"neuron_summary": ns}, job_findings({"neuron_summary": ns})).to_pylist()
    assert [c["rule"] for c in cov] == [*GPU_RULES, *NEURON_RULES]
    assert {c["status"] for c in cov[: len(GPU_RULES)]} == {"not_applicable"}
    assert all(c["status"] == "ran" and (c["n_ranks"], c["n_windows"]) == (1, 1) for c in cov[len(GPU_RULES) :])


def test_empty_inputs_have_no_coverage_rows():
    t = rule_coverage({})
    assert t.num_rows == 0 and t.schema == RULE_COVERAGE.arrow_schema()


#: Code identifiers a user types (APIs, arguments, options): allowed in prose. Column names are not.
API_IDENTIFIERS = frozenset(
    {
        "set_sync_debug_mode",
        "pin_memory",
        "num_workers",
        "non_blocking",
        "bucket_cap_mb",
        "find_unused_parameters",
        "prefetch_factor",
        "persistent_workers",
        "async_op",
        "with_stack",
        "record_function",
        "masked_select",
        "all_to_all",
    }
)
_IDENT = re.compile(r"\b[a-z]+(?:_[a-z0-9]+)+\b")


def test_allow_list_holds_no_column_names():
    from schemas.tables import TABLES

    columns = {c for t in TABLES.values() for c in t.names}
    assert not API_IDENTIFIERS & columns
    assert not API_IDENTIFIERS & set(fr.EXCESS_WORDS)


@pytest.mark.parametrize("name", ["dlrm", "alexnet", "ns_resolution"])
def test_no_column_names_in_titles_or_recommendations(name):
    found, _cov, doc = _job(name)
    prose = [(f["finding_id"], f[k] or "") for f in found for k in ("title", "recommendation")]
    prose += [(c["rule"], c["reason"] or "") for c in doc["coverage"]]
    for fid, text in prose:
        leaked = {m.group(0) for m in _IDENT.finditer(text)} - API_IDENTIFIERS
        assert not leaked, f"{fid}: {leaked} in {text!r}"
