"""Trainium / Inferentia hardware metrics of one Neuron device profile (pure functions).

Definitions are Neuron Explorer's Summary definitions, reproduced from the profile's own
``Metadata`` so that they can be checked against the values the profiler stored
(``reference/neuron_profiles.md`` §2.2 and §6.2; verified on the three corpus profiles to ≤ 1e-6
relative, see ``tests/unit/test_neuron_metrics.py``):

* TensorE peak [FLOP/s] = ``tensor_engine_num_rows`` × ``tensor_engine_num_cols`` × 2 ×
  ``tensor_engine_clock_freq`` [GHz] × 1e9 (× physical cores of a logical core, LNC2: see
  :func:`hardware_constants`);
* MFU = ``model_flops`` / (peak × ``total_time``); HFU uses ``hardware_flops``;
* MBU = (``hbm_read_bytes`` + ``hbm_write_bytes``) / ``total_time`` / ``hbm_ddr_bandwidth``
  (one HBM stack);
* matmul arithmetic intensity = (``hardware_flops`` − ``transpose_flops``) / HBM bytes
  [FLOP/byte]; ``peak_flops_bandwidth_ratio`` = peak / ``hbm_ddr_bandwidth``; the profile is
  memory-bound when the intensity is below the ratio (roofline ridge point);
* ``neuroncore_cycle_count`` = int(``total_time`` × base clock);
* engine active % = ``<engine>_engine_active_time`` / ``total_time``.

All ratio functions return **fractions** (0–1, the scale of the legacy files) so they can be
compared with stored values; :mod:`jobs.normalize.neuron.summary` stores them × 100 (``_pct``).
Interval helpers work on int64 ns arrays.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from jobs.common.floats import finite_float

__all__ = [
    "hardware_constants",
    "golden_metrics",
    "merge_intervals",
    "union_ns",
    "overlap_ns",
    "largest_gap",
    "neuron_metrics_for_mlflow",
    "INSTANCE_DEFAULTS",
    "SMALL_DMA_BYTES",
    "safe_div",
]

#: Packets below this size move data inefficiently (DMA descriptor overhead dominates); our threshold,
#: in line with Explorer's "small DMA transfers" insight (it publishes no number).
SMALL_DMA_BYTES = 512

#: Hardware constants by instance family, used only when a profile has no Metadata (summary-json).
#: trn1/inf2 (NeuronCore-v2) are verified against the corpus Metadata; trn2/trn3 TensorE values are
#: from the Neuron architecture docs (§6.1), their per-stack HBM bandwidth is not documented.
INSTANCE_DEFAULTS = {
    "trn1": {
        "tensor_engine_num_rows": 128,
        "tensor_engine_num_cols": 128,
        "tensor_engine_clock_freq": 2.8,
        "neuroncore_clock_freq": 1.4,
        "hbm_ddr_bandwidth": 410e9,
        "dma_ddr_bandwidth": 435e9,
    },
    "inf2": {
        "tensor_engine_num_rows": 128,
        "tensor_engine_num_cols": 128,
        "tensor_engine_clock_freq": 2.8,
        "neuroncore_clock_freq": 1.4,
        "hbm_ddr_bandwidth": 410e9,
        "dma_ddr_bandwidth": 435e9,
    },
    "trn2": {
        "tensor_engine_num_rows": 128,
        "tensor_engine_num_cols": 128,
        "tensor_engine_clock_freq": 2.4,
        "neuroncore_clock_freq": 1.2,
    },
    "trn3": {
        "tensor_engine_num_rows": 128,
        "tensor_engine_num_cols": 128,
        "tensor_engine_clock_freq": 2.4,
        "neuroncore_clock_freq": 1.2,
    },
}


_num = finite_float


def safe_div(a, b) -> float | None:
    """a / b as float; ``None`` when either is missing or b is 0."""
    a, b = _num(a), _num(b)
    if a is None or b is None or b == 0:
        return None
    return a / b


def hardware_constants(metadata: dict, instance_type: str | None = None) -> tuple[dict, list[str]]:
    """TensorE geometry, clocks, bandwidths and the derived peak of one profile.

    Args:
        metadata: ``Metadata`` in Parquet names (``tensor_engine_num_rows``, ``tensor_engine_num_cols``,
            ``tensor_engine_clock_freq`` [GHz], ``neuroncore_clock_freq`` [GHz], ``hbm_ddr_bandwidth``,
            ``dma_ddr_bandwidth`` [B/s], ``num_physical_cores``).
        instance_type: fallback key into :data:`INSTANCE_DEFAULTS` when Metadata lacks a value.

    Returns:
        ``(constants, flags)``: constants has the keys above plus ``peak_flops_per_s`` (None when
        unknown); flags holds ``hw_constants_from_instance_type`` when a default was used.
        ``num_physical_cores`` multiplies the peak (a LNC2 logical core has two TensorEs; Explorer's
        corpus profiles are LNC1, so that factor is not verified against stored values).
    """
    keys = (
        "tensor_engine_num_rows",
        "tensor_engine_num_cols",
        "tensor_engine_clock_freq",
        "neuroncore_clock_freq",
        "hbm_ddr_bandwidth",
        "dma_ddr_bandwidth",
    )
    out = {k: _num(metadata.get(k)) for k in keys}
    flags = []
    family = (instance_type or metadata.get("instance_type") or "").split(".")[0].lower()
    defaults = INSTANCE_DEFAULTS.get(family, {})
    for k in keys:
        if out[k] is None and defaults.get(k) is not None:
            out[k] = float(defaults[k])
            if "hw_constants_from_instance_type" not in flags:
                flags.append("hw_constants_from_instance_type")
    cores = _num(metadata.get("num_physical_cores")) or 1.0
    out["num_physical_cores"] = cores
    r, c, f = out["tensor_engine_num_rows"], out["tensor_engine_num_cols"], out["tensor_engine_clock_freq"]
    out["peak_flops_per_s"] = r * c * 2 * f * 1e9 * cores if None not in (r, c, f) else None
    return out, flags


def golden_metrics(summary: dict, hw: dict) -> dict:
    """Recompute Explorer's Summary ratios from raw counts and the profile's hardware constants.

    Args:
        summary: Summary fields (``total_time`` [s], ``model_flops``, ``hardware_flops``,
            ``transpose_flops``, ``hbm_read_bytes``, ``hbm_write_bytes``, ``<engine>_engine_active_time`` [s]).
        hw: :func:`hardware_constants` output.

    Returns:
        Fractions (not × 100): ``mfu_estimated_percent``, ``hfu_estimated_percent``,
        ``mbu_estimated_percent``, ``mm_arithmetic_intensity`` [FLOP/byte],
        ``peak_flops_bandwidth_ratio`` [FLOP/byte], ``neuroncore_cycle_count`` [cycles],
        ``total_active_time_percent`` and ``<engine>_engine_active_time_percent``; a key is
        ``None`` when an input is missing.
    """
    tt = _num(summary.get("total_time"))
    peak = hw.get("peak_flops_per_s")
    hbm_bw = hw.get("hbm_ddr_bandwidth")
    denom = peak * tt if peak and tt else None
    hbm_bytes = None
    if _num(summary.get("hbm_read_bytes")) is not None and _num(summary.get("hbm_write_bytes")) is not None:
        hbm_bytes = _num(summary["hbm_read_bytes"]) + _num(summary["hbm_write_bytes"])
    useful = None
    if _num(summary.get("hardware_flops")) is not None and _num(summary.get("transpose_flops")) is not None:
        useful = _num(summary["hardware_flops"]) - _num(summary["transpose_flops"])
    base = hw.get("neuroncore_clock_freq")
    out = {
        "mfu_estimated_percent": safe_div(summary.get("model_flops"), denom),
        "hfu_estimated_percent": safe_div(summary.get("hardware_flops"), denom),
        "mbu_estimated_percent": safe_div(hbm_bytes, tt * hbm_bw) if tt and hbm_bw else None,
        "mm_arithmetic_intensity": safe_div(useful, hbm_bytes),
        "peak_flops_bandwidth_ratio": safe_div(peak, hbm_bw),
        "neuroncore_cycle_count": int(tt * base * 1e9) if tt is not None and base else None,
        "total_active_time_percent": safe_div(summary.get("total_active_time"), tt),
    }
    for e in ("tensor", "vector", "scalar", "gpsimd", "sync"):
        out[f"{e}_engine_active_time_percent"] = safe_div(summary.get(f"{e}_engine_active_time"), tt)
    return out


# ------------------------------------------------------------------------------------------------
# intervals (int64 ns)


def merge_intervals(starts, ends) -> tuple[np.ndarray, np.ndarray]:
    """Union of ``[start, end)`` intervals as sorted disjoint arrays (touching intervals merge)."""
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    keep = e > s
    s, e = s[keep], e[keep]
    if not len(s):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    run_end = np.maximum.accumulate(e)
    new = np.ones(len(s), bool)
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    ms = s[idx]
    me = np.append(run_end[idx[1:] - 1], run_end[-1])
    return ms, me


def union_ns(starts, ends) -> int:
    """Total length of the union of intervals, ns."""
    ms, me = merge_intervals(starts, ends)
    return int((me - ms).sum())


def overlap_ns(merged: tuple[np.ndarray, np.ndarray], a: int, b: int) -> int:
    """Length of ``[a, b)`` covered by already-merged disjoint sorted intervals, ns (O(log n))."""
    ms, me = merged
    if b <= a or not len(ms):
        return 0
    lo = int(np.searchsorted(me, a, side="right"))
    hi = int(np.searchsorted(ms, b, side="left"))
    if hi <= lo:
        return 0
    s = np.maximum(ms[lo:hi], a)
    e = np.minimum(me[lo:hi], b)
    return int(np.clip(e - s, 0, None).sum())


def largest_gap(merged: tuple[np.ndarray, np.ndarray], t0: int, t1: int) -> tuple[int, int | None]:
    """Longest stretch of ``[t0, t1)`` not covered by the merged intervals: ``(length_ns, start_ns)``."""
    ms, me = merged
    if t1 <= t0:
        return 0, None
    bounds_s = np.concatenate(([t0], me))
    bounds_e = np.concatenate((ms, [t1]))
    bounds_s = np.clip(bounds_s, t0, t1)
    bounds_e = np.clip(bounds_e, t0, t1)
    gaps = bounds_e - bounds_s
    if not len(gaps) or gaps.max() <= 0:
        return 0, None
    i = int(np.argmax(gaps))
    return int(gaps[i]), int(bounds_s[i])


# ------------------------------------------------------------------------------------------------
# MLflow


_MLFLOW_COLUMNS = (
    "mfu_pct",
    "hfu_pct",
    "mbu_pct",
    "active_pct",
    "tensor_active_pct",
    "vector_active_pct",
    "scalar_active_pct",
    "gpsimd_active_pct",
    "sync_active_pct",
    "dma_active_pct",
    "dma_efficiency_pct",
    "dma_small_packet_pct",
    "arithmetic_intensity",
    "throttle_pct",
    "spill_reload_pct_of_hbm_read",
    "cc_op_active_pct",
)
_MLFLOW_SUMS = {
    "total_time_ns": "total_time_ms",
    "total_active_time_ns": "total_active_time_ms",
    "cc_trigger_delay_ns": "cc_trigger_delay_ms",
    "critical_path_ns": "critical_path_ms",
    "spill_reload_bytes": "spill_reload_bytes",
    "spill_save_bytes": "spill_save_bytes",
    "dma_bytes": "dma_bytes",
    "hbm_read_bytes": "hbm_read_bytes",
    "hbm_write_bytes": "hbm_write_bytes",
}


def neuron_metrics_for_mlflow(summary_rows) -> dict[str, float]:
    """MLflow metrics of a job's Neuron device profiles (``neuron_summary`` rows).

    Args:
        summary_rows: ``neuron_summary`` rows of one (job, attempt): a pandas DataFrame, an Arrow
            table or a list of dicts.

    Returns:
        ``{name: value}``: ``neuron/n_profiles``; ``neuron/<metric>`` = mean over profiles for the
        percentages and intensity (``mfu_pct``, ``hfu_pct``, ``mbu_pct``, ``active_pct``,
        ``<engine>_active_pct``, ``dma_active_pct``, ``dma_efficiency_pct``,
        ``dma_small_packet_pct``, ``arithmetic_intensity``, ``throttle_pct``,
        ``spill_reload_pct_of_hbm_read``, ``cc_op_active_pct``) and ``neuron/<metric>_max`` for
        ``mfu_pct``/``mbu_pct``; totals over profiles for times (``total_time_ms``,
        ``total_active_time_ms``, ``cc_trigger_delay_ms``, ``critical_path_ms``, in ms) and bytes
        (``spill_reload_bytes``, ``spill_save_bytes``, ``dma_bytes``, ``hbm_read_bytes``,
        ``hbm_write_bytes``); ``neuron/memory_bound_profiles`` (count of ``bound == memory``); and
        per profile ``neuron/<rank>/<profile_id>/mfu_pct`` etc. when there are at most 16 profiles.
        Metrics without data are omitted (never NaN).
    """
    if hasattr(summary_rows, "to_pandas"):
        df = summary_rows.to_pandas()
    elif isinstance(summary_rows, pd.DataFrame):
        df = summary_rows
    else:
        df = pd.DataFrame(list(summary_rows))
    out: dict[str, float] = {"neuron/n_profiles": float(len(df))}
    if not len(df):
        return out

    def finite(series):
        return pd.to_numeric(series, errors="coerce").dropna()

    for col in _MLFLOW_COLUMNS:
        if col in df:
            v = finite(df[col])
            if len(v):
                out[f"neuron/{col}"] = float(v.mean())
    for col in ("mfu_pct", "mbu_pct"):
        if col in df and len(finite(df[col])):
            out[f"neuron/{col}_max"] = float(finite(df[col]).max())
    for col, name in _MLFLOW_SUMS.items():
        if col in df and len(finite(df[col])):
            total = float(finite(df[col]).sum())
            out[f"neuron/{name}"] = total / 1e6 if col.endswith("_ns") else total
    if "bound" in df:
        out["neuron/memory_bound_profiles"] = float((df["bound"] == "memory").sum())
    if len(df) <= 16:
        for _, r in df.iterrows():
            prefix = f"neuron/rank{int(r['rank']) if 'rank' in r and pd.notna(r['rank']) else 0}/{_metric_key(r.get('profile_id'))}/"
            for col in ("mfu_pct", "hfu_pct", "mbu_pct", "active_pct", "dma_active_pct"):
                v = _num(r.get(col))
                if v is not None:
                    out[prefix + col] = v
    return out


def _metric_key(value) -> str:
    """MLflow metric names allow alphanumerics, ``_ - . / space``: replace anything else."""
    s = "".join(ch if ch.isalnum() or ch in "_-. " else "_" for ch in str(value or "profile"))
    return s[:120] or "profile"
