"""Trainium / Inferentia findings from ``neuron_summary`` rows, in the ``findings`` schema.

One device profile is one profiled NEFF execution, so ``est_time_lost_per_step_ns`` is the time
lost **per profiled execution**; ``steps`` is empty (device profiles carry no ProfilerStep) and
``ranks`` holds the rank of the capture. ``rank_order`` ranks the findings of a (job, attempt) by
estimated time lost (unknown last); merge with other findings by re-ranking on the same key.

Rules (thresholds are module constants; Explorer's own insight thresholds where it publishes one,
``reference/neuron_profiles.md`` §1.5 / docs overview-summary-page.rst):

``neuron_first_execution_startup``
    The longest idle gap covers ≥ :data:`STARTUP_GAP_FRACTION` of the profile and the profile is not
    known to be a later execution (``nth_exec`` ≤ 1 or unknown): the first execution of a NEFF
    includes ~1 ms of GpSimd library loading (aws-neuron-sdk #994). Lost: the gap. Advice:
    ``--profile-nth-exec=2``.
``neuron_dma_bound``
    DMA is active ≥ :data:`DMA_BOUND_FRACTION` of the active time and longer than TensorE, or the
    roofline says memory-bound (matmul arithmetic intensity < peak FLOP / HBM bandwidth). Lost:
    DMA active time not covered by TensorE time (DMA − TensorE active, ≥ 0).
``neuron_small_dma_transfers``
    ≥ :data:`SMALL_DMA_PCT` % of DMA packets are below 512 bytes (descriptor overhead dominates).
    Lost (estimate): DMA active time × small share × (1 − DMA efficiency).
``neuron_spill_reload_heavy``
    Spill-reload bytes > :data:`SPILL_RELOAD_PCT` % of HBM reads (Explorer insight threshold 25 %).
    Lost: (spill save + reload bytes) / HBM bandwidth.
``neuron_throttled``
    Utilization-limited (k/n < 1) time ≥ :data:`THROTTLE_FRACTION` of the active time. Lost (upper
    bound): throttled time × (1 − tightest k/n).
``neuron_collective_stall``
    Σ ``cc_trigger_start_delay`` ≥ :data:`CC_STALL_FRACTION` of collective time (or of the active time
    when there is none). Lost: the delay.
``neuron_idle_engines``
    TensorE is active < :data:`IDLE_ENGINE_FRACTION` of the active time (the engine that does the
    FLOPs waits), listing every engine below that share. Lost: active time − TensorE active time.
"""

from __future__ import annotations

import json
import math

import pandas as pd
import pyarrow as pa

from jobs.common.floats import finite_float
from schemas.tables import FINDINGS

__all__ = [
    "neuron_findings",
    "RULES",
    "STARTUP_GAP_FRACTION",
    "DMA_BOUND_FRACTION",
    "SMALL_DMA_PCT",
    "SPILL_RELOAD_PCT",
    "THROTTLE_FRACTION",
    "CC_STALL_FRACTION",
    "IDLE_ENGINE_FRACTION",
]

STARTUP_GAP_FRACTION = 0.5
DMA_BOUND_FRACTION = 0.5
SMALL_DMA_PCT = 25.0
SPILL_RELOAD_PCT = 25.0
THROTTLE_FRACTION = 0.1
CC_STALL_FRACTION = 0.1
IDLE_ENGINE_FRACTION = 0.3
RULES = (
    "neuron_first_execution_startup",
    "neuron_dma_bound",
    "neuron_small_dma_transfers",
    "neuron_spill_reload_heavy",
    "neuron_throttled",
    "neuron_collective_stall",
    "neuron_idle_engines",
)
_ENGINES = ("tensor", "vector", "scalar", "gpsimd", "sync")


_n = finite_float


def _int(v) -> int | None:
    f = _n(v)
    return None if f is None else int(round(max(f, 0.0)))


def _ms(ns) -> str:
    return f"{(_n(ns) or 0) / 1e6:.3f} ms"


def _finding(
    r: dict, rule: str, title: str, metric: str, value, lost, confidence: float, recommendation: str, evidence: dict
) -> dict:
    ev = {
        "job_id": r["job_id"],
        "attempt": int(r["attempt"]),
        "rank": int(r["rank"]),
        "capture_id": r["capture_id"],
        "profile_id": r["profile_id"],
        "source_format": r.get("source_format"),
        **evidence,
    }
    return {
        "date": r["date"],
        "job_id": r["job_id"],
        "attempt": int(r["attempt"]),
        "finding_id": f"{rule}/rank={int(r['rank'])}/capture={r['capture_id']}/profile={r['profile_id']}",
        "rule": rule,
        "rank_order": 0,
        "title": title,
        "metric": metric,
        "value": _n(value),
        "est_time_lost_per_step_ns": _int(lost),
        "confidence": float(confidence),
        "ranks": [int(r["rank"])],
        "steps": [],
        "evidence_json": json.dumps(ev, sort_keys=True, default=str),
        "recommendation": recommendation,
    }


def _rules(r: dict) -> list[dict]:
    out = []
    total, active = _n(r.get("total_time_ns")), _n(r.get("total_active_time_ns"))
    gap = _n(r.get("largest_idle_gap_ns"))
    nth = r.get("nth_exec")
    nth = None if nth is None or (isinstance(nth, float) and math.isnan(nth)) else int(nth)
    if total and gap is not None and gap >= STARTUP_GAP_FRACTION * total and (nth is None or nth <= 1):
        out.append(
            _finding(
                r,
                "neuron_first_execution_startup",
                f"{gap / total:.0%} of the profile ({_ms(gap)}) is one idle gap: a first-execution start-up artifact",
                "largest_idle_gap_pct",
                100 * gap / total,
                gap,
                0.9 if nth is None else 0.95,
                "Profile a later execution: `neuron-explorer capture --profile-nth-exec=2` (or "
                "NEURON_RT_INSPECT_DEVICE_PROFILE=session). The first execution of a NEFF includes ~1 ms of GpSimd "
                "library loading (aws-neuron-sdk #994), which hides the steady-state behaviour.",
                {
                    "largest_idle_gap_ns": _int(gap),
                    "largest_idle_gap_start_ns": _int(r.get("largest_idle_gap_start_ns")),
                    "total_time_ns": _int(total),
                    "total_active_time_ns": _int(active),
                    "nth_exec": nth,
                },
            )
        )
    dma, tensor = _n(r.get("dma_active_ns")), _n(r.get("tensor_active_ns"))
    ai, ridge = _n(r.get("arithmetic_intensity")), _n(r.get("peak_flops_bandwidth_ratio"))
    dma_heavy = bool(active and dma is not None and dma >= DMA_BOUND_FRACTION * active and dma > (tensor or 0))
    roofline = r.get("bound") == "memory"
    if dma_heavy or roofline:
        lost = max(0.0, (dma or 0) - (tensor or 0))
        why = []
        if dma_heavy:
            why.append(f"DMA active {dma / active:.0%} of the active time vs TensorE {(tensor or 0) / active:.0%}")
        if roofline:
            why.append(f"matmul arithmetic intensity {ai:.1f} FLOP/B < ridge point {ridge:.1f} FLOP/B")
        out.append(
            _finding(
                r,
                "neuron_dma_bound",
                "DMA / memory bound: " + "; ".join(why),
                "dma_active_pct_of_active" if dma_heavy else "arithmetic_intensity",
                100 * dma / active if dma_heavy else ai,
                lost,
                0.8 if dma_heavy and roofline else 0.6,
                "Raise arithmetic intensity: keep tiles resident in SBUF and reuse them across matmuls, fuse "
                "element-wise ops, use larger/contiguous DMA transfers and overlap loads with compute (double-buffer).",
                {
                    "dma_active_ns": _int(dma),
                    "tensor_active_ns": _int(tensor),
                    "total_active_time_ns": _int(active),
                    "arithmetic_intensity": ai,
                    "peak_flops_bandwidth_ratio": ridge,
                    "mbu_pct": _n(r.get("mbu_pct")),
                    "dma_efficiency_pct": _n(r.get("dma_efficiency_pct")),
                },
            )
        )
    small, count = _n(r.get("dma_small_packet_pct")), _n(r.get("dma_packet_count"))
    if small is not None and small >= SMALL_DMA_PCT and (count or 0) >= 16:
        eff = (_n(r.get("dma_efficiency_pct")) or 0) / 100
        lost = (dma or 0) * small / 100 * max(0.0, 1 - eff)
        out.append(
            _finding(
                r,
                "neuron_small_dma_transfers",
                f"{small:.0f}% of {int(count)} DMA packets are smaller than 512 B (average "
                f"{_n(r.get('dma_avg_packet_bytes')) or 0:.0f} B)",
                "dma_small_packet_pct",
                small,
                lost,
                0.6,
                "Coalesce transfers: make DMA access patterns contiguous (≥ 512 B per descriptor, ideally multiples of "
                "the partition size), batch small tensors, and enable DGE notifications "
                "(--enable-dge-notifs) to see which tensors they belong to.",
                {
                    "dma_packet_count": _int(count),
                    "dma_small_packet_pct": small,
                    "dma_avg_packet_bytes": _n(r.get("dma_avg_packet_bytes")),
                    "dma_efficiency_pct": _n(r.get("dma_efficiency_pct")),
                },
            )
        )
    spill = _n(r.get("spill_reload_pct_of_hbm_read"))
    if spill is not None and spill > SPILL_RELOAD_PCT:
        bw = _n(r.get("hbm_bandwidth_bytes_per_s"))
        moved = (_n(r.get("spill_reload_bytes")) or 0) + (_n(r.get("spill_save_bytes")) or 0)
        out.append(
            _finding(
                r,
                "neuron_spill_reload_heavy",
                f"spill reloads are {spill:.0f}% of HBM reads",
                "spill_reload_pct_of_hbm_read",
                spill,
                moved / bw * 1e9 if bw else None,
                0.7,
                "Reduce SBUF pressure: smaller tiles or fewer live tensors, recompute cheap values instead of spilling, "
                "and check for data dependencies that force spill/reload.",
                {
                    "spill_reload_bytes": _int(r.get("spill_reload_bytes")),
                    "spill_save_bytes": _int(r.get("spill_save_bytes")),
                    "hbm_read_bytes": _int(r.get("hbm_read_bytes")),
                },
            )
        )
    thr, limit = _n(r.get("throttle_active_ns")), _n(r.get("throttle_min_util_limit"))
    if active and thr and limit is not None and limit < 1 and thr >= THROTTLE_FRACTION * active:
        out.append(
            _finding(
                r,
                "neuron_throttled",
                f"utilization throttled (limit down to {limit:.3g}) for {_ms(thr)}, "
                f"{thr / active:.0%} of the active time",
                "throttle_active_pct_of_active",
                100 * thr / active,
                thr * (1 - limit),
                0.6,
                "Power/dI-dt throttling ramps TensorE after idle gaps: keep the engine fed (fewer, longer bursts; overlap "
                "DMA with compute) and check the throttle type in the profile's Throttle table.",
                {
                    "throttle_active_ns": _int(thr),
                    "throttle_min_util_limit": limit,
                    "total_active_time_ns": _int(active),
                },
            )
        )
    delay, cc = _n(r.get("cc_trigger_delay_ns")), _n(r.get("cc_op_time_ns"))
    base = cc if cc else active
    if delay and base and delay >= CC_STALL_FRACTION * base:
        out.append(
            _finding(
                r,
                "neuron_collective_stall",
                f"collectives waited {_ms(delay)} between trigger and start "
                f"({delay / base:.0%} of {'collective' if cc else 'active'} time)",
                "cc_trigger_delay_ns",
                delay,
                delay,
                0.7,
                "Collectives start late after their trigger: look for the slow peer (straggler rank), "
                "overlapping instructions delaying the CC-cores, or too many small collectives (bucket them).",
                {
                    "cc_trigger_delay_ns": _int(delay),
                    "cc_trigger_delay_max_ns": _int(r.get("cc_trigger_delay_max_ns")),
                    "cc_op_time_ns": _int(cc),
                    "cc_op_count": _int(r.get("cc_op_count")),
                },
            )
        )
    if active:
        shares = {e: (_n(r.get(f"{e}_active_ns")) or 0) / active for e in _ENGINES}
        idle = sorted(e for e, v in shares.items() if v < IDLE_ENGINE_FRACTION)
        if "tensor" in idle:
            out.append(
                _finding(
                    r,
                    "neuron_idle_engines",
                    f"TensorE busy only {shares['tensor']:.0%} of the active time; engines below "
                    f"{IDLE_ENGINE_FRACTION:.0%}: {', '.join(idle)}",
                    "tensor_active_pct_of_active",
                    100 * shares["tensor"],
                    active * (1 - shares["tensor"]),
                    0.5,
                    "The matmul engine waits on other engines or DMA: check the device critical path for "
                    "semaphore waits and DMA, pipeline loads with compute, and move element-wise work off the path.",
                    {
                        "engine_share_of_active": shares,
                        "cp_compute_ns": _int(r.get("cp_compute_ns")),
                        "cp_dma_ns": _int(r.get("cp_dma_ns")),
                        "cp_semaphore_wait_ns": _int(r.get("cp_semaphore_wait_ns")),
                        "cp_idle_ns": _int(r.get("cp_idle_ns")),
                    },
                )
            )
    return out


def neuron_findings(summary_rows) -> pa.Table:
    """Findings of Neuron device profiles.

    Args:
        summary_rows: ``neuron_summary`` rows (pandas DataFrame, Arrow table or list of dicts) with
            their identity columns.

    Returns:
        Arrow table with exactly the :data:`schemas.tables.FINDINGS` columns, ``rank_order`` 1..n per
        (job_id, attempt) by ``est_time_lost_per_step_ns`` descending (unknown last).
    """
    if hasattr(summary_rows, "to_pylist"):
        rows = summary_rows.to_pylist()
    elif isinstance(summary_rows, pd.DataFrame):
        rows = summary_rows.astype(object).where(summary_rows.notna(), None).to_dict("records")
    else:
        rows = list(summary_rows)
    found = [f for r in rows for f in _rules(r)]
    groups: dict[tuple, list[dict]] = {}
    for f in found:
        groups.setdefault((f["job_id"], f["attempt"]), []).append(f)
    for fs in groups.values():
        fs.sort(
            key=lambda f: (
                -(f["est_time_lost_per_step_ns"] if f["est_time_lost_per_step_ns"] is not None else -1),
                f["finding_id"],
            )
        )
        for i, f in enumerate(fs, 1):
            f["rank_order"] = i
    return pa.Table.from_pylist([{k: f[k] for k in FINDINGS.names} for f in found], schema=FINDINGS.arrow_schema())
