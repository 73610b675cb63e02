"""Op efficiency of one rank: the device time of each modelled op against its device's roofline.

Each kernel is charged to the op that launched it: its launch call (:attr:`jobs.analyze.trace.model.RankTrace.launcher`,
the host row with the kernel's correlation id) and then up that call's ``parent`` chain to the innermost ``cpu_op``
that :func:`jobs.analyze.efficiency.perf_model.op_cost` models (``aten::addmm`` inside ``aten::linear``: the addmm,
so nothing is counted twice). Ops are grouped by (name, shape signature, dtype); a group's device time is the sum of
its kernels' durations, its work the calls × the per-call FLOPs and bytes, and :func:`jobs.analyze.efficiency.devices.
roofline` places it against the device's datasheet peaks. AMD TraceLens ``TreePerf`` does the same per op from the
Kineto tree; its GEMM and SDPA formulas are those of :mod:`.perf_model`.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa

from jobs.analyze.efficiency.devices import device_peaks, roofline
from jobs.analyze.efficiency.perf_model import MODELLED_OPS, OpCost, op_cost
from jobs.analyze.trace.model import RankTrace, as_rank_trace
from schemas import OP_EFFICIENCY

__all__ = [
    "ATTAINABLE_ROOFLINE_PCT",
    "LAUNCH_ARGS",
    "add_device_peaks",
    "job_op_groups",
    "op_efficiency",
    "recoverable_ops",
]

ATTAINABLE_ROOFLINE_PCT = 70.0
"""The share of its roofline (datasheet peak FLOP/s or memory bandwidth, whichever bounds it) a tuned library kernel
attains (a rule of thumb: NVIDIA's cuBLAS and CUTLASS GEMMs reach 70–90 % of peak on large shapes); an op group below
it could recover ``kernel time × (1 − roofline % / 70 %)``."""

#: Kernel launch arguments Kineto records (``args`` of a ``kernel`` event) that are surfaced for a group's longest
#: kernel.
LAUNCH_ARGS = ("grid", "block", "registers per thread", "shared memory", "est. achieved occupancy %")
_PEAK_COLUMNS = (
    "peak_tflops",
    "peak_gbps",
    "peak_flops_pct",
    "peak_bandwidth_pct",
    "roofline_pct",
    "bound",
    "peak_source",
)

_MAX_DEPTH = 256  # a parent chain longer than the parser's nesting cap is a cycle


def op_efficiency(trace: RankTrace | pa.Table, device_name: str | None = None) -> pd.DataFrame:
    """One row per (op name, shape signature, dtype) of a rank's modelled ops that launched kernels.

    Args:
        trace: the rank's :class:`~jobs.analyze.trace.model.RankTrace` or EVENTS rows of one capture (with
            ``args_json``, ``parent`` and ``event_id``).
        device_name: the profiler's device name (``captures.device_name``); ``None`` or an unknown device leaves the
            peak columns null (:func:`add_device_peaks`; ``None`` leaves them out). The analyze stage passes ``None``
            and adds the peaks once the driver has joined the captures.

    Returns:
        The columns of ``schemas.OP_EFFICIENCY`` (meaning and units there), largest ``kernel_time_ns`` first.

    Raises:
        ValueError: ``trace`` lacks a needed column or mixes captures.
    """
    tr = as_rank_trace(trace, ("args_json", "parent", "event_id"), "op_efficiency")
    costs = _op_costs(tr)
    owner = _kernel_owners(tr, costs)
    columns = list(OP_EFFICIENCY.names)
    if not owner:
        return pd.DataFrame(columns=columns)
    groups: dict[tuple, dict] = {}
    for k, op in owner.items():
        c = costs[op]
        g = groups.setdefault(
            (tr.symbols[tr.name_code[op]], c.shape_sig, c.dtype), {"cost": c, "ops": set(), "ns": 0, "n": 0, "top": -1}
        )
        g["ops"].add(op)
        g["ns"] += int(tr.dur[k])
        g["n"] += 1
        if g["top"] < 0 or tr.dur[k] > tr.dur[g["top"]]:
            g["top"] = k
    args = tr.events.column("args_json")
    rows = []
    for (name, sig, dtype), g in groups.items():
        c: OpCost = g["cost"]
        calls, ns = len(g["ops"]), g["ns"]
        rows.append(
            {
                **{k: tr.identity.get(k) for k in ("date", "job_id", "attempt", "rank", "capture_id")},
                "device_name": device_name,
                "op_name": name,
                "kind": c.kind,
                "shape_sig": sig,
                "dtype": dtype,
                "precision": c.precision,
                "n_calls": calls,
                "n_kernels": g["n"],
                "kernel_time_ns": ns,
                "kernel_time_per_call_ns": ns / calls,
                "flops_per_call": c.flops,
                "bytes_per_call": c.bytes,
                "intensity": c.intensity,
                "achieved_tflops": c.flops * calls / ns * 1e-3 if ns else None,  # FLOP/ns = 1e9 FLOP/s
                "achieved_gbps": c.bytes * calls / ns if ns else None,  # bytes/ns = GB/s
                "top_kernel": tr.symbols[tr.name_code[g["top"]]],
                "top_kernel_launch": _launch_args(args[int(g["top"])].as_py()),
            }
        )
    out = pd.DataFrame(rows, columns=columns)
    out = out.sort_values(["kernel_time_ns", "op_name", "shape_sig"], ascending=[False, True, True], ignore_index=True)
    return add_device_peaks(out) if device_name is not None else out


def add_device_peaks(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` (``op_efficiency`` rows) with the peak columns (``peak_tflops`` … ``peak_source``) computed from each
    row's ``device_name``, ``precision``, ``kind``, work and ``kernel_time_ns``
    (:func:`jobs.analyze.efficiency.devices.roofline`); a row of an unknown device, or of a precision its datasheet
    has no peak for, gets null peaks and says why in ``peak_source``."""
    out = rows.copy()
    vals = {c: [] for c in _PEAK_COLUMNS}
    for r in out.itertuples(index=False):
        got = _against_peaks(r)
        for c in _PEAK_COLUMNS:
            vals[c].append(got.get(c))
    for c in _PEAK_COLUMNS:
        out[c] = pd.Series(vals[c], index=out.index, dtype="object" if c in ("bound", "peak_source") else "float64")
    return out


def recoverable_ops(rows: pd.DataFrame) -> pd.DataFrame:
    """``op_efficiency`` rows with a roofline, with ``recoverable_ns`` = kernel_time_ns × max(0, 1 − min(roofline_pct,
    100) / :data:`ATTAINABLE_ROOFLINE_PCT`) (ns): the device time the group would save at the attainable share of its
    roofline (an upper bound on the step time saved: a kernel overlapped by other work shortens less)."""
    if rows.empty or not {"kernel_time_ns", "roofline_pct"} <= set(rows):
        return pd.DataFrame(columns=[*rows.columns, "recoverable_ns"])
    out = rows[pd.to_numeric(rows["roofline_pct"], errors="coerce").notna()].copy()
    pct = pd.to_numeric(out["roofline_pct"], errors="coerce").clip(upper=100.0)
    ns = pd.to_numeric(out["kernel_time_ns"], errors="coerce").fillna(0.0)
    out["recoverable_ns"] = ns * (1.0 - pct / ATTAINABLE_ROOFLINE_PCT).clip(lower=0.0)
    return out


def job_op_groups(rows: pd.DataFrame) -> pd.DataFrame:
    """``op_efficiency`` rows of several ranks summed per (op name, shape signature, dtype): what the job report, the
    MCP ``op_efficiency`` tool and the ``kernels_below_peak`` rule show.

    Returns:
        ``op_name, shape_sig, dtype, kind, precision, n_ranks, n_calls, n_kernels, kernel_time_ns, recoverable_ns,
        achieved_tflops, achieved_gbps, peak_flops_pct, peak_bandwidth_pct, roofline_pct, bound, top_kernel`` (rates
        over the summed kernel time and work; % of the first rank's peaks: one job runs on one device model;
        ``recoverable_ns`` the Σ of :func:`recoverable_ops`, null without a roofline), largest ``kernel_time_ns``
        first.
    """
    keys = ["op_name", "shape_sig", "dtype"]
    rows = rows.reindex(columns=list(OP_EFFICIENCY.names))  # a column a caller's frame lacks is all null
    if not len(rows):
        return pd.DataFrame(columns=[*keys, "kind", "n_ranks", "n_calls", "n_kernels", "kernel_time_ns"])
    num = {c: pd.to_numeric(rows[c], errors="coerce") for c in ("n_calls", "n_kernels", "kernel_time_ns")}
    work = rows.assign(
        **num,
        _flops=pd.to_numeric(rows["flops_per_call"], errors="coerce") * num["n_calls"],
        _bytes=pd.to_numeric(rows["bytes_per_call"], errors="coerce") * num["n_calls"],
        _rec=recoverable_ops(rows)["recoverable_ns"].reindex(rows.index).astype(float),
    )
    g = (
        work.groupby(keys, dropna=False)
        .agg(
            kind=("kind", "first"),
            precision=("precision", "first"),
            n_ranks=("rank", "nunique"),
            n_calls=("n_calls", "sum"),
            n_kernels=("n_kernels", "sum"),
            kernel_time_ns=("kernel_time_ns", "sum"),
            recoverable_ns=("_rec", lambda v: v.sum(min_count=1)),
            _flops=("_flops", "sum"),
            _bytes=("_bytes", "sum"),
            _peak_tflops=("peak_tflops", "first"),
            _peak_gbps=("peak_gbps", "first"),
            bound=("bound", "first"),
            top_kernel=("top_kernel", "first"),
        )
        .reset_index()
    )
    ns = g["kernel_time_ns"].astype(float).replace(0, np.nan)
    g["achieved_tflops"] = g["_flops"] / ns * 1e-3
    g["achieved_gbps"] = g["_bytes"] / ns
    g["peak_flops_pct"] = g["achieved_tflops"] / pd.to_numeric(g["_peak_tflops"], errors="coerce") * 100
    g["peak_bandwidth_pct"] = g["achieved_gbps"] / pd.to_numeric(g["_peak_gbps"], errors="coerce") * 100
    g["roofline_pct"] = g[["peak_flops_pct", "peak_bandwidth_pct"]].max(axis=1, skipna=True)
    g = g.drop(columns=[c for c in g.columns if c.startswith("_")])
    return g.sort_values(["kernel_time_ns", "op_name", "shape_sig"], ascending=[False, True, True], ignore_index=True)


def _op_costs(tr: RankTrace) -> dict[int, OpCost]:
    """Row → cost of every modelled ``cpu_op`` row whose recorded shapes determine its work."""
    rows = np.flatnonzero(tr.host & tr.category_in(["cpu_op"]) & tr.name_in(sorted(MODELLED_OPS)))
    args = tr.events.column("args_json").take(pa.array(rows)).to_pylist()
    out = {}
    for r, a in zip(rows.tolist(), args, strict=True):
        c = op_cost(tr.symbols[tr.name_code[r]], a)
        if c is not None:
            out[r] = c
    return out


def _kernel_owners(tr: RankTrace, costs: dict[int, OpCost]) -> dict[int, int]:
    """Kernel row → row of the innermost modelled op above its launch call (kernels of no modelled op left out)."""
    if not costs:
        return {}
    kernels = np.flatnonzero(tr.device_activity & tr.category_in(["kernel"]) & (tr.launcher >= 0) & tr.has_dur)
    parent = tr.parent_row

    def parent_row(r: int) -> int:
        return int(parent[r])

    memo: dict[int, int] = {}

    def owner_of(r: int) -> int:
        chain = []
        while r >= 0 and r not in costs and r not in memo and len(chain) < _MAX_DEPTH:
            chain.append(r)
            r = parent_row(r)
        found = r if r >= 0 and r in costs else memo.get(r, -1) if r >= 0 else -1
        for c in chain:
            memo[c] = found
        return found

    out = {}
    for k, launch in zip(kernels.tolist(), tr.launcher[kernels].tolist(), strict=True):
        op = owner_of(launch)
        if op >= 0:
            out[k] = op
    return out


def _launch_args(args_json: str | None) -> str | None:
    try:
        a = json.loads(args_json) if args_json else None
    except ValueError:
        return None
    if not isinstance(a, dict):
        return None
    got = {k: a[k] for k in LAUNCH_ARGS if k in a}
    return json.dumps(got, separators=(",", ":")) if got else None


def _against_peaks(r) -> dict:
    """The peak columns of one row (a named tuple of ``op_efficiency`` columns)."""
    name = r.device_name if isinstance(r.device_name, str) and r.device_name else None
    peaks = device_peaks(name)
    if peaks is None:
        return {"peak_source": f"unknown device {name!r}: no datasheet peak" if name else "no device name: no peak"}
    peak = peaks.peak_flops(r.precision, r.kind)
    ns, calls = r.kernel_time_ns, r.n_calls
    if peak is None or not ns or not r.bytes_per_call:
        return {"peak_source": f"{peaks.name}: no {r.precision} peak on its datasheet"}
    rl = roofline(r.flops_per_call * calls, r.bytes_per_call * calls, ns, peak, peaks.bandwidth)
    return {
        "peak_tflops": peak / 1e12,
        "peak_gbps": peaks.bandwidth / 1e9,
        "peak_flops_pct": rl.pct_of_peak_flops,
        "peak_bandwidth_pct": rl.pct_of_peak_bandwidth,
        "roofline_pct": rl.pct_of_roofline,
        "bound": rl.bound,
        "peak_source": peaks.source + (f"; {peaks.note}" if peaks.note else ""),
    }
