"""Low-utilization windows: when, inside each step, the device is idle, and what the host was doing then.

A rank's device is **idle** when no device activity (kernel, copy, set, MTIA/HPU op:
:data:`jobs.analyze.trace.model.DEVICE_ACTIVITY_CATEGORIES`) of any step runs on any of its streams. Per
ProfilerStep (its CPU span ``[start, start + dur)``, as :mod:`jobs.analyze.hta.host_time` measures host time),
a **window** is a maximal idle interval inside the span of at least ``min(MIN_WINDOW_NS, MIN_WINDOW_STEP_PCT % of
the step)``; a rank without ProfilerStep gets one whole-trace window (``step`` = −1) over the span of its events.
At most :data:`MAX_WINDOWS_PER_STEP` windows per step are kept, the longest. So per step Σ ``dur_ns`` ≤ the step's
time − the device's busy time in it, and the part of the windows inside the step's kernel span is at most the
step's HTA ``idle_time_ns`` (HTA counts only the step's own events as busy; we count every step's).

**Cause** — what the host was in during the window, from the host ``X`` events that overlap it (all threads),
the first of these classes whose events cover at least :data:`CAUSE_MIN_PCT` % of the window, else the class that
covers most, else ``host_idle``:

==============  ==================================================================================================
``sync``        a call that blocks until the device catches up (:data:`jobs.analyze.trace.launches.SYNC_NAMES`,
                e.g. ``aten::item`` → ``cudaStreamSynchronize``) — the device drained its queue and waits
``collective``  a host-side collective or wait (``nccl:*``, ``gloo:*``, ``c10d::*``, ``record_param_comms``,
                ``ProcessGroup*``, ``wait_tensor``): waiting for a peer rank
``memcpy``      a runtime copy call (``cudaMemcpy*``/``hipMemcpy*``): pageable or synchronous copies block
``dataloader``  a data-loading event (:func:`jobs.analyze.hta.host_time.dataloader_mask`)
``host``        any other ``cpu_op``/``cuda_runtime``/``cuda_driver`` event: the host is busy preparing and launching
                work slower than the device runs it (CPU-bound, as :mod:`jobs.analyze.hta.host_time`)
``host_idle``   no captured host event: Python between ops, or a thread the profiler did not record
==============  ==================================================================================================

``cause_op`` is the innermost event of that class overlapping the window nearly as much as the one that overlaps it
most (≥ 90 %), and ``cause_stack`` its
enclosing calls from the outermost below the ProfilerStep, e.g.
``aten::item → aten::_local_scalar_dense → cudaStreamSynchronize`` (the ``parent`` links of the trace).

**Recurrence** — a window recurs in another step when that step has a window of the same cause and ``cause_op``
whose offset range into the step overlaps this one's; ``recurring_steps`` counts the steps (its own included),
``recurs_pct`` their share of the rank's steps.

**NeuronCore profiles** (:func:`neuron_utilization_windows`): the engine judged is the tensor engine (the
``Tensor``/``TensorMatrix`` tracks: the matmul engine MFU counts), and a window is a maximal run of time bins (a tenth
of the minimum length each) around which, over the minimum length centred on the bin, it is busy less than
:data:`LOW_UTIL_PCT` % of the time — below the threshold, not only idle; its edges are within half the minimum
length of where the engine's use drops and returns — over the profile (``step`` = −1: device profiles have no ProfilerStep). Its cause, from what else runs
on the core then, the first class covering :data:`CAUSE_MIN_PCT` %: ``collective`` (``CcOp``/CC-core rows, collective
instructions), ``dma`` (DMA queues and DMA instructions; ``cause_op`` = the busiest queue), ``engine`` (compute
instructions of the Vector, Scalar or GpSimd engine; ``cause_op`` = the busiest engine's longest instruction),
``semaphore`` (``EVENT_SEMAPHORE*`` waits on any engine, the Sync engine), else ``device_idle`` (instruction classes:
:func:`jobs.normalize.neuron.critical_path.instruction_category`).
``engine_util_pct`` is the tensor engine's busy share inside the window (0 for a GPU window). Neuron Explorer shows
engine timelines; the windows and causes are ours.

These definitions are ours: HTA's idle time is one total per step, not windows nor causes.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pyarrow as pa

from jobs.analyze.hta.breakdown import cpu_profiler_steps
from jobs.analyze.hta.host_time import HOST_BUSY_CATEGORIES, dataloader_mask
from jobs.analyze.trace.launches import SYNC_NAMES
from jobs.analyze.trace.model import RankTrace, as_rank_trace
from jobs.analyze.windows import WHOLE_TRACE_STEP
from jobs.common.interval_sets import covered_not_excluded, length_in_windows
from jobs.common.intervals import merge_intervals
from jobs.normalize.neuron.critical_path import instruction_category
from schemas import UTILIZATION_WINDOWS

__all__ = [
    "utilization_windows",
    "neuron_utilization_windows",
    "LOW_UTIL_PCT",
    "NEURON_CAUSES",
    "job_window_groups",
    "CAUSES",
    "MIN_WINDOW_NS",
    "MIN_WINDOW_STEP_PCT",
    "MAX_WINDOWS_PER_STEP",
    "CAUSE_MIN_PCT",
]

#: A window lasts at least this long (ns) …
MIN_WINDOW_NS = 500_000
#: … or this share of its step (%), whichever is shorter.
MIN_WINDOW_STEP_PCT = 5.0
#: Windows kept per step (the longest): a launch-bound step may have thousands of gaps.
MAX_WINDOWS_PER_STEP = 64
#: A cause class is named when its events cover at least this share of the window (%), in class order.
CAUSE_MIN_PCT = 10.0
#: Cause classes, in the order they are tried (module docstring), then ``host_idle``.
CAUSES = ("sync", "collective", "memcpy", "dataloader", "host", "host_idle")
#: A NeuronCore's tensor engine is under-used below this busy share of a time bin (%).
LOW_UTIL_PCT = 20.0
#: Cause classes of a NeuronCore window, in the order they are tried, then ``device_idle``.
NEURON_CAUSES = ("collective", "dma", "engine", "semaphore", "device_idle")
_TENSOR_TRACKS = ("Tensor", "TensorMatrix")
_OTHER_ENGINES = ("Vector", "Scalar", "GpSimd")
_COLLECTIVE = re.compile(r"^(nccl|gloo|c10d|ProcessGroup|_c10d_functional)|record_param_comms|wait_tensor", re.I)
_MEMCPY = re.compile(r"^(cuda|hip|cu)Memcpy", re.I)
_STEP = re.compile(r"^ProfilerStep#\d+$")
_HOST_CATEGORIES = (*HOST_BUSY_CATEGORIES, "user_annotation", "python_function")
_STACK_DEPTH = 8


def utilization_windows(
    trace: RankTrace | pa.Table,
    *,
    min_window_ns: int = MIN_WINDOW_NS,
    min_window_step_pct: float = MIN_WINDOW_STEP_PCT,
) -> pd.DataFrame:
    """The device's idle windows per step of one rank, each with the host activity that explains it.

    Args:
        trace: the rank's :class:`~jobs.analyze.trace.model.RankTrace` or EVENTS rows of one capture (``parent``
            and ``event_id`` give the call stacks when present).
        min_window_ns: shortest window, ns (default 0.5 ms) …
        min_window_step_pct: … or this share of the step, %, whichever is shorter (default 5 %).

    Returns:
        The columns of ``schemas.UTILIZATION_WINDOWS`` (meaning and units there), by step and start; no rows for a
        rank without device activity.

    Raises:
        ValueError: ``trace`` mixes captures.
    """
    tr = as_rank_trace(trace, (), "utilization_windows")
    columns = list(UTILIZATION_WINDOWS.names)
    dev = np.flatnonzero(tr.device_activity & tr.has_dur)
    if tr.n == 0 or dev.size == 0:
        return pd.DataFrame(columns=columns)
    busy_s, busy_e = merge_intervals(tr.ts[dev], tr.end[dev])
    steps = [(n, s, s + d) for n, s, d in cpu_profiler_steps(tr) if d > 0]
    if not steps:
        span = tr.host | tr.device_activity
        steps = [(WHOLE_TRACE_STEP, int(tr.ts[span].min()), int(tr.end[span].max()))]
    found = []
    for n, s, e in steps:
        idle_s, idle_e = covered_not_excluded([s], [e], busy_s, busy_e)
        lo = min(min_window_ns, min_window_step_pct / 100 * (e - s))
        keep = np.flatnonzero(idle_e - idle_s >= max(lo, 1))
        if keep.size > MAX_WINDOWS_PER_STEP:
            keep = np.sort(keep[np.argsort(-(idle_e - idle_s)[keep], kind="stable")[:MAX_WINDOWS_PER_STEP]])
        found += [(n, s, e, int(idle_s[k]), int(idle_e[k])) for k in keep]
    if not found:
        return pd.DataFrame(columns=columns)
    w = pd.DataFrame(found, columns=["step", "step_start_ns", "step_end_ns", "start_ns", "end_ns"])
    w["step_time_ns"] = w["step_end_ns"] - w["step_start_ns"]
    w["dur_ns"] = w["end_ns"] - w["start_ns"]
    w["offset_ns"] = w["start_ns"] - w["step_start_ns"]
    w["step_pct"] = 100.0 * w["dur_ns"] / w["step_time_ns"]
    w["window_id"] = w.groupby("step").cumcount()
    _attribute(tr, w)
    _recurrence(w, n_steps=len(steps))
    for k in ("date", "job_id", "attempt", "rank", "capture_id"):
        w[k] = tr.identity.get(k)
    w["engine"], w["engine_util_pct"] = "device", 0.0
    return w.reindex(columns=columns)


def neuron_utilization_windows(
    events: pa.Table, *, min_window_ns: int = MIN_WINDOW_NS, min_window_step_pct: float = MIN_WINDOW_STEP_PCT
) -> pd.DataFrame:
    """The windows of a NeuronCore profile in which its tensor engine runs below :data:`LOW_UTIL_PCT` % (module
    docstring), each with what the core did instead.

    Args:
        events: EVENTS rows of one Neuron capture (``source`` = ``neuron``: instructions on engine tracks, DMA
            queues, collectives, as :mod:`jobs.normalize.neuron.events` writes them).
        min_window_ns, min_window_step_pct: shortest window: ns, or % of the profile's span, whichever is shorter.

    Returns:
        The columns of ``schemas.UTILIZATION_WINDOWS``, ``step`` −1, by start; none without tensor-engine rows.
    """
    columns = list(UTILIZATION_WINDOWS.names)
    df = events.select(
        [c for c in ("event_id", "category", "name", "thread_name", "ts_ns", "dur_ns") if c in events.column_names]
    ).to_pandas()
    df = df[df["ts_ns"].notna() & df["dur_ns"].notna()]
    if not len(df):
        return pd.DataFrame(columns=columns)
    ts, end = df["ts_ns"].to_numpy(np.int64), (df["ts_ns"] + df["dur_ns"]).to_numpy(np.int64)
    cat, track = df["category"].to_numpy(object), df["thread_name"].fillna("").to_numpy(object)
    ins = cat == "neuron_instruction"
    tensor = ins & np.isin(track, _TENSOR_TRACKS)
    if not tensor.any():
        return pd.DataFrame(columns=columns)
    active = ins | np.isin(cat, ("neuron_dma", "neuron_dma_block", "neuron_collective", "neuron_cc_instruction"))
    s0, s1 = int(ts[active].min()), int(end[active].max())
    lo = int(max(min(min_window_ns, min_window_step_pct / 100 * (s1 - s0)), 10))
    width = max(lo // 10, 1)
    edges = np.append(np.arange(s0, s1, width, dtype=np.int64), s1)
    busy_s, busy_e = merge_intervals(ts[tensor], end[tensor])
    busy = length_in_windows(busy_s, busy_e, edges[:-1], edges[1:])
    k = np.ones(10)  # the busy share around each bin, over the minimum window length
    low = np.convolve(busy, k, "same") * 100 < LOW_UTIL_PCT * np.convolve(np.diff(edges), k, "same")
    brk = np.flatnonzero(np.diff(np.concatenate([[0], low.astype(np.int8), [0]])))
    runs = [(int(edges[a]), int(edges[b])) for a, b in zip(brk[::2], brk[1::2]) if edges[b] - edges[a] >= lo]
    if not runs:
        return pd.DataFrame(columns=columns)
    runs = sorted(sorted(runs, key=lambda r: r[0] - r[1])[:MAX_WINDOWS_PER_STEP])
    ws, we = np.array([r[0] for r in runs], np.int64), np.array([r[1] for r in runs], np.int64)
    w = pd.DataFrame({"start_ns": ws, "end_ns": we})
    w["dur_ns"] = we - ws
    w["engine_util_pct"] = 100.0 * length_in_windows(busy_s, busy_e, ws, we) / w["dur_ns"]
    names, eids = df["name"].fillna("").to_numpy(object), df["event_id"].to_numpy()
    kind = np.array([instruction_category(n) if i else "" for n, i in zip(names, ins)], object)
    classes = {
        "collective": np.isin(cat, ("neuron_collective", "neuron_cc_instruction")) | (kind == "collective"),
        "dma": np.isin(cat, ("neuron_dma", "neuron_dma_block")) | (kind == "dma"),
        "engine": ins & np.isin(track, _OTHER_ENGINES) & (kind == "compute"),
        "semaphore": (kind == "semaphore_wait") | (ins & (track == "Sync")),
    }
    cover = {
        c: 100.0 * length_in_windows(*merge_intervals(ts[m], end[m]), ws, we) / (we - ws) for c, m in classes.items()
    }
    cause, pct, ops, ids, stacks = [], [], [], [], []
    for i, (a, b) in enumerate(zip(ws, we)):
        got = "device_idle", 0.0, None, None, None
        for cls, m in classes.items():
            cov = float(cover[cls][i])
            if cov >= CAUSE_MIN_PCT:
                r = _busiest(ts, end, track, m, a, b) if cls in ("dma", "engine") else _longest(ts, end, m, a, b)
                label = track[r] if cls == "dma" else names[r]
                got = cls, min(cov, 100.0), label, int(eids[r]), f"{track[r]} → {names[r]}"
                break
        for lst, v in zip((cause, pct, ops, ids, stacks), got):
            lst.append(v)
    w["cause"], w["cause_pct"], w["cause_op"], w["cause_stack"] = cause, pct, ops, stacks
    w["cause_event_id"] = pd.array(ids, "Int64")
    w["step"], w["window_id"], w["step_start_ns"], w["step_time_ns"] = WHOLE_TRACE_STEP, range(len(w)), s0, s1 - s0
    w["offset_ns"] = w["start_ns"] - s0
    w["step_pct"] = 100.0 * w["dur_ns"] / max(s1 - s0, 1)
    _recurrence(w, n_steps=1)
    first = events.slice(0, 1).to_pylist()[0]
    for k in ("date", "job_id", "attempt", "rank", "capture_id"):
        w[k] = first.get(k)
    w["engine"] = "tensor"
    return w.reindex(columns=columns)


def _overlap(ts, end, rows: np.ndarray, a: int, b: int) -> np.ndarray:
    return np.maximum(np.minimum(end[rows], b) - np.maximum(ts[rows], a), 0)


def _longest(ts, end, mask: np.ndarray, a: int, b: int) -> int:
    """The row under ``mask`` overlapping ``[a, b)`` most."""
    rows = np.flatnonzero(mask)
    return int(rows[np.argmax(_overlap(ts, end, rows, a, b))])


def _busiest(ts, end, track, mask: np.ndarray, a: int, b: int) -> int:
    """The longest row inside ``[a, b)`` of the track under ``mask`` busiest there (Σ overlap, tracks not merged)."""
    rows = np.flatnonzero(mask)
    ov = _overlap(ts, end, rows, a, b)
    per = pd.Series(ov).groupby(track[rows]).sum()
    mine = rows[track[rows] == per.idxmax()]
    return int(mine[np.argmax(_overlap(ts, end, mine, a, b))])


def _classes(tr: RankTrace) -> dict[str, np.ndarray]:
    """Cause class → host rows of that class (each row in one class, :data:`CAUSES` order)."""
    host = tr.host & tr.has_dur & tr.category_in(_HOST_CATEGORIES)
    names = tr.symbols
    by_name = {
        "sync": np.array([n in SYNC_NAMES for n in names] + [False]),
        "collective": np.array([bool(_COLLECTIVE.search(n)) for n in names] + [False]),
        "memcpy": np.array([bool(_MEMCPY.search(n)) for n in names] + [False]),
    }
    step = np.array([bool(_STEP.match(n)) for n in names] + [False])[tr.name_code]
    host &= ~step
    taken = np.zeros(tr.n, bool)
    out = {}
    for cls in ("memcpy", "sync", "collective"):  # a synchronous cudaMemcpy is a copy first
        m = host & by_name[cls][tr.name_code] & ~taken
        out[cls], taken = m, taken | m
    m = host & dataloader_mask(tr.names) & ~taken
    out["dataloader"], taken = m, taken | m
    out["host"] = host & tr.category_in(HOST_BUSY_CATEGORIES) & ~taken
    return {c: np.flatnonzero(out[c]) for c in CAUSES[:-1]}


def _attribute(tr: RankTrace, w: pd.DataFrame) -> None:
    """Set ``cause``, ``cause_pct``, ``cause_op``, ``cause_event_id``, ``cause_stack`` of the windows ``w``."""
    ws, we = w["start_ns"].to_numpy(np.int64), w["end_ns"].to_numpy(np.int64)
    dur = (we - ws).astype(float)
    classes = _classes(tr)
    cover = {}
    for cls, rows in classes.items():
        s, e = merge_intervals(tr.ts[rows], tr.end[rows])
        cover[cls] = 100.0 * length_in_windows(s, e, ws, we) / dur
    cause = np.full(len(w), "host_idle", object)
    pct = np.zeros(len(w))
    for cls in reversed(CAUSES[:-1]):  # first class over the bar wins
        over = cover[cls] >= CAUSE_MIN_PCT
        cause[over], pct[over] = cls, cover[cls][over]
    rest = cause == "host_idle"
    if rest.any():  # none over the bar: the class covering most, if any
        table = np.stack([cover[c] for c in CAUSES[:-1]])
        best = table.argmax(axis=0)
        got = rest & (table.max(axis=0) > 0)
        cause[got] = np.array(CAUSES[:-1], object)[best[got]]
        pct[got] = table.max(axis=0)[got]
    ops, ids, stacks = [], [], []
    for i in range(len(w)):
        r = _top_event(tr, classes.get(cause[i]), ws[i], we[i])
        ops.append(tr.symbols[tr.name_code[r]] if r >= 0 else None)
        ids.append(int(tr.event_id[r]) if r >= 0 else None)
        stacks.append(_stack(tr, r) if r >= 0 else None)
    w["cause"], w["cause_pct"] = cause, np.minimum(pct, 100.0)
    w["cause_op"], w["cause_event_id"], w["cause_stack"] = ops, pd.array(ids, "Int64"), stacks


def _top_event(tr: RankTrace, rows: np.ndarray | None, a: int, b: int) -> int:
    """The innermost row of ``rows`` (latest start) among those overlapping ``[a, b)`` at least 90 % as much as the
    one that overlaps it most (``aten::item`` → ``cudaStreamSynchronize``: the call that blocks), else −1."""
    if rows is None or rows.size == 0:
        return -1
    ov = np.minimum(tr.end[rows], b) - np.maximum(tr.ts[rows], a)
    if ov.max() <= 0:
        return -1
    best = np.flatnonzero(ov >= 0.9 * ov.max())
    return int(rows[best[np.argmax(tr.ts[rows[best]])]])


def _stack(tr: RankTrace, r: int) -> str:
    """``r``'s enclosing calls, outermost first, without the ProfilerStep; the last :data:`_STACK_DEPTH`."""
    names, seen = [], set()
    while r >= 0 and r not in seen and len(seen) < 256:
        seen.add(r)
        nm = tr.symbols[tr.name_code[r]]
        if _STEP.match(nm):
            break
        names.append(nm)
        r = int(tr.parent_row[r])
    names = names[:_STACK_DEPTH][::-1]
    return " → ".join(names)


def _recurrence(w: pd.DataFrame, n_steps: int) -> None:
    """Set ``recurring_steps`` and ``recurs_pct`` (module docstring)."""
    rec = np.ones(len(w), np.int64)
    lo, hi = w["offset_ns"].to_numpy(np.int64), (w["offset_ns"] + w["dur_ns"]).to_numpy(np.int64)
    step = w["step"].to_numpy(np.int64)
    key = w["cause"].astype(str) + "\0" + w["cause_op"].fillna("").astype(str)
    for _, idx in w.groupby(key, sort=False).indices.items():
        if idx.size < 2:
            continue
        ov = (lo[idx][:, None] < hi[idx][None, :]) & (lo[idx][None, :] < hi[idx][:, None])
        other = step[idx][None, :] != step[idx][:, None]
        for j, i in enumerate(idx):
            rec[i] = 1 + np.unique(step[idx][ov[j] & other[j]]).size
    w["recurring_steps"] = rec
    w["recurs_pct"] = 100.0 * rec / max(n_steps, 1)


def job_window_groups(rows: pd.DataFrame) -> pd.DataFrame:
    """``utilization_windows`` rows of a job grouped per (rank, cause, host op): what the job report and the MCP
    ``utilization_windows`` tool show.

    Returns:
        ``rank, cause, cause_op, cause_stack, n_windows, n_steps, idle_ns, mean_dur_ns, offset_p50_ns, step_pct,
        recurs_pct, step, window_id, cause_event_id`` — ``n_steps``: steps with such a window; ``step_pct``: mean
        share of the step; ``recurs_pct``: the largest of the group; ``step``/``window_id``/``cause_event_id``/
        ``cause_stack``: of its longest window (the evidence). Most idle time first.
    """
    cols = [
        "rank", "cause", "cause_op", "cause_stack", "n_windows", "n_steps", "idle_ns", "mean_dur_ns", "offset_p50_ns",
        "step_pct", "recurs_pct", "step", "window_id", "cause_event_id",
    ]  # fmt: skip
    if not len(rows):
        return pd.DataFrame(columns=cols)
    w = rows.reindex(columns=list(UTILIZATION_WINDOWS.names)).copy()
    for c in ("dur_ns", "offset_ns", "step_pct", "recurs_pct"):
        w[c] = pd.to_numeric(w[c], errors="coerce")
    w["cause_op"] = w["cause_op"].fillna("")
    w = w.sort_values(["dur_ns", "step", "window_id"], ascending=[False, True, True], kind="stable")
    keys = ["rank", "cause", "cause_op"]
    g = (
        w.groupby(keys, dropna=False, sort=False)
        .agg(
            cause_stack=("cause_stack", "first"),
            n_windows=("dur_ns", "size"),
            n_steps=("step", "nunique"),
            idle_ns=("dur_ns", "sum"),
            mean_dur_ns=("dur_ns", "mean"),
            offset_p50_ns=("offset_ns", "median"),
            step_pct=("step_pct", "mean"),
            recurs_pct=("recurs_pct", "max"),
            step=("step", "first"),
            window_id=("window_id", "first"),
            cause_event_id=("cause_event_id", "first"),
        )
        .reset_index()
    )
    g["cause_op"] = g["cause_op"].replace("", None)
    return g.sort_values(["idle_ns", "rank", "cause"], ascending=[False, True, True], ignore_index=True)[cols]
