"""The ``neuron_summary`` row of one Neuron device profile (:data:`schemas.tables.NEURON_SUMMARY`).

Values come from the profile's own ``Summary`` when it has the field (the profiler's numbers,
seconds → ns, fractions → 0–100), else they are derived from its event tables (flag
``summary_from_events``):

* times: ``total_time`` ← Metadata ``last_hw_timestamp − first_hw_timestamp``, else the event span;
  ``total_active_time`` ← union of ``ActiveTime``, ``DmaPacket`` and ``CcOp`` intervals; engine
  active time ← merged ``ActiveTime`` (else merged ``Instruction``) per engine; instruction counts ←
  ``Instruction`` rows per engine;
* FLOPs: ``hardware_flops`` ← Σ ``raw_flops`` (= 2 × ``tensor_elements``); ``transpose_flops`` ←
  Σ ``flops_transpose``; ``model_flops`` ← hardware − transpose (flag ``model_flops_estimated``);
* bytes: Σ of the ``Instruction`` byte counters; DMA active time ← union of ``DmaPacket``;
  ``cc_op_time`` ← Σ ``CcOp.duration_ns``.

MFU/HFU/MBU, arithmetic intensity and the ridge point are then **recomputed** from those counts
and the profile's Metadata (:mod:`jobs.normalize.neuron.metrics`); the profiler's own MFU/HFU/MBU
are kept in ``*_reported_pct`` and a recomputed value that differs by more than 1e-6 relative
raises the flag ``reported_<metric>_mismatch``. Event-only metrics (DMA packet sizes, throttling,
collective stalls, idle gaps, critical path) always come from the tables.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa

from jobs.common.floats import finite_float
from jobs.normalize.neuron.critical_path import device_critical_path
from jobs.normalize.neuron.metrics import (
    SMALL_DMA_BYTES,
    golden_metrics,
    hardware_constants,
    largest_gap,
    merge_intervals,
    safe_div,
    union_ns,
)
from jobs.normalize.neuron.profile import ENGINES, NeuronProfile, percent_scale, seconds_to_ns
from schemas.tables import NEURON_SUMMARY

__all__ = ["summary_row", "summary_table", "SUMMARY_COLUMNS"]

_IDENTITY = ("date", "job_id", "attempt", "rank", "capture_id")
#: NEURON_SUMMARY columns produced by :func:`summary_row` (identity columns are added by the caller).
SUMMARY_COLUMNS = tuple(n for n in NEURON_SUMMARY.names if n not in _IDENTITY)
_TOL = 1e-6
_BYTE_FIELDS = ("hbm_read_bytes", "hbm_write_bytes", "spill_save_bytes", "spill_reload_bytes")


_num = finite_float


def _int(v):
    f = _num(v)
    return None if f is None else int(round(f))


def _pct(frac):
    return None if frac is None else frac * 100.0


def _arr(t: pa.Table | None, name: str, fill=0) -> np.ndarray:
    if t is None or name not in t.column_names:
        return np.zeros(0 if t is None else t.num_rows, np.int64)
    col = t.column(name)
    return np.asarray(col.fill_null(fill).to_numpy(zero_copy_only=False))


def _sum_col(t: pa.Table | None, name: str):
    if t is None or name not in t.column_names or t.column(name).null_count == t.num_rows:
        return None
    return int(np.asarray(t.column(name).fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64).sum())


def _derived_summary(p: NeuronProfile, flags: list[str]) -> dict:
    """Summary fields (seconds / counts, Explorer names) derived from the tables, for missing keys."""
    ins, act, pkt, cc = p.table("Instruction"), p.table("ActiveTime"), p.table("DmaPacket"), p.table("CcOp")
    d: dict = {}
    md = p.metadata
    first, last = _num(md.get("first_hw_timestamp")), _num(md.get("last_hw_timestamp"))
    if first is not None and last is not None and last > first:
        d["total_time"] = (last - first) / 1e9
    else:
        starts = [a.min() for a in (_arr(ins, "start_ts"), _arr(pkt, "start_ts"), _arr(cc, "start_ts")) if len(a)]
        ends = [a.max() for a in (_arr(ins, "end_ts"), _arr(pkt, "end_ts"), _arr(cc, "end_ts")) if len(a)]
        if starts and ends:
            d["total_time"] = (max(ends) - min(starts)) / 1e9
    s_all, e_all = [], []
    for t in (act if act is not None else ins, pkt, cc):
        if t is not None:
            s_all.append(_arr(t, "start_ts"))
            e_all.append(_arr(t, "end_ts"))
    if s_all:
        d["total_active_time"] = union_ns(np.concatenate(s_all), np.concatenate(e_all)) / 1e9
    src = act if act is not None else ins
    if src is not None:
        eng = np.asarray(src.column("engine").fill_null("").to_pylist(), dtype=object)
        for e in ENGINES:
            m = eng == e
            d[f"{e}_engine_active_time"] = union_ns(_arr(src, "start_ts")[m], _arr(src, "end_ts")[m]) / 1e9
    if ins is not None:
        eng = np.asarray(ins.column("engine").fill_null("").to_pylist(), dtype=object)
        for e in ENGINES:
            d[f"{e}_engine_instruction_count"] = int((eng == e).sum())
        hw = _sum_col(ins, "raw_flops")
        if hw is None and _sum_col(ins, "tensor_elements") is not None:
            hw = 2 * _sum_col(ins, "tensor_elements")
        d["hardware_flops"] = hw
        tr = _sum_col(ins, "flops_transpose")
        if tr is None and hw is not None and "tensor_instruction_type" in ins.column_names:
            typ = np.asarray(ins.column("tensor_instruction_type").fill_null("").to_pylist(), dtype=object)
            tr = int(2 * _arr(ins, "tensor_elements")[np.char.upper(typ.astype(str)) == "TRANSPOSE"].sum())
        d["transpose_flops"] = tr
        if hw is not None and tr is not None:
            d["model_flops"] = hw - tr
        for k in _BYTE_FIELDS:
            d[k] = _sum_col(ins, k)
    if pkt is not None:
        d["dma_active_time"] = union_ns(_arr(pkt, "start_ts"), _arr(pkt, "end_ts")) / 1e9
    if cc is not None:
        d["cc_op_time"] = int(_arr(cc, "duration_ns").sum()) / 1e9
        d["cc_op_count"] = cc.num_rows
    return d


def _merged_summary(p: NeuronProfile, flags: list[str]) -> dict:
    summ = dict(p.summary)
    derived = _derived_summary(p, flags) if p.tables else {}
    used = False
    for k, v in derived.items():
        if summ.get(k) is None and v is not None:
            summ[k] = v
            used = True
            if k == "model_flops":
                flags.append("model_flops_estimated")
    if used:
        flags.append("summary_from_events")
    return summ


def summary_row(p: NeuronProfile) -> dict:
    """The ``neuron_summary`` row of one device profile (all :data:`SUMMARY_COLUMNS`).

    Args:
        p: a device profile (:attr:`NeuronProfile.has_device_data`).

    Returns:
        Dict keyed by :data:`SUMMARY_COLUMNS`; times in ns, percentages 0–100, unknown values None.
    """
    flags = list(p.flags)
    scale = percent_scale(p.summary) if p.summary else 1.0
    if scale == 100.0:
        flags.append("percent_scale_100")
    summ = _merged_summary(p, flags)
    md = p.metadata
    hw, hw_flags = hardware_constants(md, md.get("instance_type") or summ.get("instance_type"))
    flags += hw_flags
    g = golden_metrics(summ, hw)
    tt_ns = seconds_to_ns(summ.get("total_time"))
    row = dict.fromkeys(SUMMARY_COLUMNS)
    row.update(
        profile_id=p.profile_id,
        source_format=p.source_format,
        schema_version=md.get("profile_schema_version"),
        profiler_version=md.get("explorer_version") or md.get("profiler_version") or summ.get("profiler_version"),
        instance_type=md.get("instance_type") or summ.get("instance_type"),
        neuron_device_idx=_int(md.get("neuron_device_idx")),
        neuroncore_idx=_int(md.get("neuroncore_idx")),
        num_physical_cores=_int(hw.get("num_physical_cores")),
        neff_name=md.get("neff_name"),
        nth_exec=md.get("nth_exec"),
        tensor_engine_num_rows=_int(hw["tensor_engine_num_rows"]),
        tensor_engine_num_cols=_int(hw["tensor_engine_num_cols"]),
        tensor_engine_clock_ghz=hw["tensor_engine_clock_freq"],
        neuroncore_clock_ghz=hw["neuroncore_clock_freq"],
        peak_flops_per_s=hw["peak_flops_per_s"],
        hbm_bandwidth_bytes_per_s=hw["hbm_ddr_bandwidth"],
        dma_bandwidth_bytes_per_s=hw["dma_ddr_bandwidth"],
        total_time_ns=tt_ns,
        total_active_time_ns=seconds_to_ns(summ.get("total_active_time")),
        active_pct=_pct(g["total_active_time_percent"]),
        model_flops=_int(summ.get("model_flops")),
        hardware_flops=_int(summ.get("hardware_flops")),
        transpose_flops=_int(summ.get("transpose_flops")),
        mfu_pct=_pct(g["mfu_estimated_percent"]),
        hfu_pct=_pct(g["hfu_estimated_percent"]),
        mbu_pct=_pct(g["mbu_estimated_percent"]),
        arithmetic_intensity=g["mm_arithmetic_intensity"],
        peak_flops_bandwidth_ratio=g["peak_flops_bandwidth_ratio"],
        dma_active_ns=seconds_to_ns(summ.get("dma_active_time")),
        dma_transfer_count=_int(summ.get("dma_transfer_count")),
        dma_transfer_bytes=_int(summ.get("dma_transfer_total_bytes")),
        cc_op_count=_int(summ.get("cc_op_count")),
        cc_op_time_ns=seconds_to_ns(summ.get("cc_op_time")),
    )
    for k in _BYTE_FIELDS:
        row[k] = _int(summ.get(k))
    for e in ENGINES:
        row[f"{e}_active_ns"] = seconds_to_ns(summ.get(f"{e}_engine_active_time"))
        row[f"{e}_active_pct"] = _pct(g[f"{e}_engine_active_time_percent"])
        row[f"{e}_instruction_count"] = _int(summ.get(f"{e}_engine_instruction_count"))
    for name, key in (
        ("mfu", "mfu_estimated_percent"),
        ("hfu", "hfu_estimated_percent"),
        ("mbu", "mbu_estimated_percent"),
    ):
        rep = _num(p.summary.get(key))
        row[f"{name}_reported_pct"] = None if rep is None else rep / scale * 100.0
        mine = g[key]
        if rep is not None and mine is not None and not math.isclose(mine, rep / scale, rel_tol=_TOL, abs_tol=1e-15):
            flags.append(f"reported_{name}_mismatch")
        if mine is None and rep is not None:  # no metadata to recompute from: keep the profiler's value
            row[f"{name}_pct"] = row[f"{name}_reported_pct"]
            if "metrics_reported_only" not in flags:
                flags.append("metrics_reported_only")
    if row["active_pct"] is None and _num(p.summary.get("total_active_time_percent")) is not None:
        row["active_pct"] = _num(p.summary["total_active_time_percent"]) / scale * 100.0
    if row["arithmetic_intensity"] is None:
        row["arithmetic_intensity"] = _num(summ.get("mm_arithmetic_intensity"))
    if row["peak_flops_bandwidth_ratio"] is None:
        row["peak_flops_bandwidth_ratio"] = _num(summ.get("peak_flops_bandwidth_ratio"))
    ai, ridge = row["arithmetic_intensity"], row["peak_flops_bandwidth_ratio"]
    row["bound"] = None if ai is None or ridge is None else ("memory" if ai < ridge else "compute")
    row["dma_active_pct"] = _pct(safe_div(summ.get("dma_active_time"), summ.get("total_time")))
    if row["dma_active_pct"] is None and _num(p.summary.get("dma_active_time_percent")) is not None:
        row["dma_active_pct"] = _num(p.summary["dma_active_time_percent"]) / scale * 100.0
    row["cc_op_active_pct"] = None
    if _num(p.summary.get("cc_op_active_time_percent")) is not None:
        row["cc_op_active_pct"] = _num(p.summary["cc_op_active_time_percent"]) / scale * 100.0
    elif p.table("CcOp") is not None and tt_ns:
        cc = p.table("CcOp")
        row["cc_op_active_pct"] = _pct(safe_div(union_ns(_arr(cc, "start_ts"), _arr(cc, "end_ts")), tt_ns))
    row["spill_reload_pct_of_hbm_read"] = _pct(safe_div(row["spill_reload_bytes"], row["hbm_read_bytes"]))
    _event_metrics(p, row, tt_ns)
    if not p.summary and "no_summary" not in flags:
        flags.append("no_summary")
    row["flags"] = sorted(set(flags))
    return row


def _event_metrics(p: NeuronProfile, row: dict, tt_ns: int | None) -> None:
    """DMA packet statistics, throttling, collective stalls, semaphore waits, idle gaps, critical path."""
    ins, pkt, cc, thr = p.table("Instruction"), p.table("DmaPacket"), p.table("CcOp"), p.table("Throttle")
    row["n_instructions"] = ins.num_rows if ins is not None else (0 if p.tables else None)
    sem = p.table("SemaphoreUpdate")
    row["n_semaphore_updates"] = sem.num_rows if sem is not None else (0 if p.tables else None)
    if pkt is not None:
        size = _arr(pkt, "transfer_bytes")
        row["dma_packet_count"] = int(pkt.num_rows)
        row["dma_bytes"] = int(size.sum())
        row["dma_avg_packet_bytes"] = float(size.mean())
        row["dma_small_packet_pct"] = float((size < SMALL_DMA_BYTES).mean() * 100.0)
        active = row["dma_active_ns"] or union_ns(_arr(pkt, "start_ts"), _arr(pkt, "end_ts"))
        thr_bps = safe_div(row["dma_bytes"], active / 1e9 if active else None)
        row["dma_throughput_bytes_per_s"] = thr_bps
        bw = row["dma_bandwidth_bytes_per_s"]  # per NeuronCore: a LNC2 logical core has two cores' DMA engines
        bw = bw * (row["num_physical_cores"] or 1) if bw else None
        row["dma_efficiency_pct"] = _pct(safe_div(thr_bps, bw))
    elif p.tables:
        row["dma_packet_count"], row["dma_bytes"] = 0, 0
    if thr is not None:
        k, n = _arr(thr, "k").astype(float), _arr(thr, "n").astype(float)
        limit = np.where(n > 0, k / np.where(n > 0, n, 1), 1.0)
        lim = limit < 1.0
        ts = _arr(thr, "timestamp")
        end = ts + _arr(thr, "duration")
        if tt_ns:  # a throttle window can run past the profile's end: count the part inside it
            ts, end = np.clip(ts, 0, tt_ns), np.clip(end, 0, tt_ns)
        row["throttle_active_ns"] = union_ns(ts[lim], end[lim])
        row["throttle_min_util_limit"] = float(limit.min()) if len(limit) else 1.0
        row["throttle_pct"] = _pct(safe_div(row["throttle_active_ns"], tt_ns))
    elif p.tables:
        row["throttle_active_ns"], row["throttle_min_util_limit"], row["throttle_pct"] = 0, 1.0, 0.0
    if cc is not None:
        if row["cc_op_count"] is None:
            row["cc_op_count"] = cc.num_rows
        delay = None
        if "cc_trigger_start_delay" in cc.column_names and cc.column("cc_trigger_start_delay").null_count < cc.num_rows:
            delay = _arr(cc, "cc_trigger_start_delay")
        elif "trigger_start_ts" in cc.column_names and cc.column("trigger_start_ts").null_count < cc.num_rows:
            trig = cc.column("trigger_start_ts").to_numpy(zero_copy_only=False)
            ok = ~np.isnan(trig.astype(float))
            delay = np.where(ok, _arr(cc, "start_ts") - np.nan_to_num(trig).astype(np.int64), 0)
        if delay is not None:
            delay = np.clip(delay, 0, None)
            row["cc_trigger_delay_ns"] = int(delay.sum())
            row["cc_trigger_delay_max_ns"] = int(delay.max())
    elif p.tables:
        row["cc_trigger_delay_ns"], row["cc_trigger_delay_max_ns"] = 0, 0
    if ins is not None and "evt_wait_time_ns" in ins.column_names:
        row["semaphore_wait_ns"] = int(_arr(ins, "evt_wait_time_ns").sum())
    if p.tables and tt_ns:
        s_all, e_all = [], []
        busy = p.table("ActiveTime") if p.table("ActiveTime") is not None else ins
        for t in (busy, pkt, cc):
            if t is not None:
                s_all.append(_arr(t, "start_ts"))
                e_all.append(_arr(t, "end_ts"))
        if s_all:
            merged = merge_intervals(np.concatenate(s_all), np.concatenate(e_all))
            row["largest_idle_gap_ns"], row["largest_idle_gap_start_ns"] = largest_gap(merged, 0, tt_ns)
    if ins is not None:
        cp = device_critical_path(ins, p.table("Flow"), p.table("DmaPacketAggregated"), pkt, cc)
        row["critical_path_ns"] = cp.length_ns
        for c in ("compute", "dma", "semaphore_wait", "collective", "idle"):
            row[f"cp_{c}_ns"] = cp.by_category[c]


def summary_table(rows: list[dict]) -> pa.Table:
    """``neuron_summary`` rows (dicts with identity and :data:`SUMMARY_COLUMNS`) as an Arrow table."""
    return pa.Table.from_pylist(
        [{k: r.get(k) for k in NEURON_SUMMARY.names} for r in rows], schema=NEURON_SUMMARY.arrow_schema()
    )
