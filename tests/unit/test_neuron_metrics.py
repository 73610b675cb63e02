"""Golden checks: MFU / HFU / MBU & co. recomputed from each corpus profile's own Metadata reproduce the
values neuron-profile stored (≤ 1e-6 relative), plus the interval helpers and the MLflow metrics."""

from __future__ import annotations

import math

import numpy as np
import pytest

from jobs.normalize.neuron.json_view import parse_neuron_json
from jobs.normalize.neuron.metrics import (
    golden_metrics,
    hardware_constants,
    largest_gap,
    merge_intervals,
    neuron_metrics_for_mlflow,
    overlap_ns,
    union_ns,
)
from jobs.normalize.neuron.summary import summary_row

NEURON = "neuron/AnchovyPark__npu_profiling_code/matmul"
FILES = (
    "neuron_profile_results/profile_128x128x1024.json",
    "neuron_profile_results/profile_128x128x520.json",
    "neuron_profile_results_bucketed/profile_bucketed_128x128x2048.json",
)
GOLDEN_KEYS = (
    "mfu_estimated_percent",
    "hfu_estimated_percent",
    "mbu_estimated_percent",
    "mm_arithmetic_intensity",
    "peak_flops_bandwidth_ratio",
    "total_active_time_percent",
    "tensor_engine_active_time_percent",
    "vector_engine_active_time_percent",
    "scalar_engine_active_time_percent",
    "gpsimd_engine_active_time_percent",
    "sync_engine_active_time_percent",
)


@pytest.fixture(scope="module", params=FILES)
def profile(request, CORPUS):
    return parse_neuron_json((CORPUS / NEURON / request.param).read_bytes(), request.param.split("/")[-1][:-5])


def test_recomputed_metrics_reproduce_stored_values(profile):
    hw, flags = hardware_constants(profile.metadata)
    assert flags == []  # everything came from the profile's own metadata
    assert hw["peak_flops_per_s"] == 128 * 128 * 2 * 2.8e9  # inf2 NeuronCore-v2 TensorE
    mine = golden_metrics(profile.summary, hw)
    for key in GOLDEN_KEYS:
        stored = profile.summary[key]
        assert stored > 0, key
        assert math.isclose(mine[key], stored, rel_tol=1e-6), (key, mine[key], stored)
    # the base-clock cycle count is truncated, not rounded
    assert mine["neuroncore_cycle_count"] == profile.summary["neuroncore_cycle_count"]


def test_summary_row_percentages_are_0_to_100_and_match_reported(profile):
    row = summary_row(profile)
    assert row["mfu_pct"] == pytest.approx(profile.summary["mfu_estimated_percent"] * 100, rel=1e-6)
    assert row["mbu_pct"] == pytest.approx(row["mbu_reported_pct"], rel=1e-6)
    assert row["hfu_pct"] == pytest.approx(row["hfu_reported_pct"], rel=1e-6)
    assert not any(f.startswith("reported_") for f in row["flags"])
    # roofline: tiny matmuls are far below the ridge point → memory-bound
    assert row["arithmetic_intensity"] < row["peak_flops_bandwidth_ratio"] and row["bound"] == "memory"
    # summary seconds → ns
    assert row["total_time_ns"] == round(profile.summary["total_time"] * 1e9)
    assert row["tensor_active_ns"] == round(profile.summary["tensor_engine_active_time"] * 1e9)


def test_event_derived_counts_agree_with_the_summary(profile):
    """Bytes and FLOPs summed over instructions equal the Summary counters exactly; merged ActiveTime
    intervals agree with the Summary's active time to the ns rounding of the JSON timestamps."""
    from jobs.normalize.neuron.summary import _derived_summary

    d = _derived_summary(profile, [])
    s = profile.summary
    for k in (
        "hbm_read_bytes",
        "hbm_write_bytes",
        "spill_save_bytes",
        "spill_reload_bytes",
        "hardware_flops",
        "transpose_flops",
        "model_flops",
    ):
        assert d[k] == s[k], k
    engines = profile.column("ActiveTime", "engine")
    for e in ("tensor", "vector", "scalar", "gpsimd", "sync"):
        assert d[f"{e}_engine_instruction_count"] == s[f"{e}_engine_instruction_count"]
        n_intervals = engines.count(e)
        assert n_intervals > 0
        # each interval's ends are rounded to whole ns in the JSON: at most 1 ns per interval
        assert abs(d[f"{e}_engine_active_time"] - s[f"{e}_engine_active_time"]) <= n_intervals * 1e-9, e


def test_interval_helpers():
    ms, me = merge_intervals([5, 0, 3, 20], [8, 4, 6, 25])
    assert ms.tolist() == [0, 20] and me.tolist() == [8, 25]
    assert union_ns([0, 2], [5, 3]) == 5
    assert overlap_ns((ms, me), 6, 22) == 2 + 2
    assert largest_gap((ms, me), 0, 30) == (12, 8)
    assert largest_gap((np.zeros(0, np.int64), np.zeros(0, np.int64)), 0, 10) == (10, 0)


def test_instance_type_fallback_for_summary_only_profiles():
    hw, flags = hardware_constants({}, "trn1.32xlarge")
    assert flags == ["hw_constants_from_instance_type"] and hw["peak_flops_per_s"] == pytest.approx(91.75e12, rel=1e-3)
    hw, flags = hardware_constants({}, "unknown.large")
    assert hw["peak_flops_per_s"] is None


def test_mlflow_metrics(CORPUS):
    rows = []
    for i, f in enumerate(FILES):
        r = summary_row(parse_neuron_json((CORPUS / NEURON / f).read_bytes(), f"p{i}"))
        r.update(rank=0, job_id="j", attempt=0, capture_id=f"c{i}", date="unknown")
        rows.append(r)
    m = neuron_metrics_for_mlflow(rows)
    assert m["neuron/n_profiles"] == 3
    assert m["neuron/mfu_pct"] == pytest.approx(np.mean([r["mfu_pct"] for r in rows]))
    assert m["neuron/mfu_pct_max"] == max(r["mfu_pct"] for r in rows)
    assert m["neuron/total_time_ms"] == pytest.approx(sum(r["total_time_ns"] for r in rows) / 1e6)
    assert m["neuron/rank0/p1/mbu_pct"] == rows[1]["mbu_pct"]
    assert m["neuron/memory_bound_profiles"] == 3
    assert all(isinstance(v, float) and math.isfinite(v) for v in m.values())
    assert neuron_metrics_for_mlflow([]) == {"neuron/n_profiles": 0.0}
