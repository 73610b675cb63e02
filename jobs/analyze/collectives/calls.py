"""Collectives across ranks: per-rank communication calls, matching, waits, skew and bandwidth.

Spark wiring (``jobs/analyze/job.py``): :func:`comm_calls` per (job_id, attempt, rank, capture_id)
(``groupBy(...).applyInArrow``), then :func:`match_collectives` per (job_id, attempt) on the union
of the calls of all ranks; :func:`collective_summary` and :func:`clock_skew` per job on its output.

**Calls** (:func:`comm_calls`): the rank's communication kernels (GPU ``kernel`` rows typed
COMMUNICATION by :func:`jobs.analyze.trace.kernel_types.kernel_types`: collective metadata, then NCCL/RCCL/
HCCL/Gloo name families). Fields come from the kernel's collective metadata (``collective``,
``pg_name``, ``group_size``, ``msg_bytes``, ``seq``); a kernel without them (DLRM 2023 traces) takes
them from its launch: the CPU call with the same correlation id and its enclosing ``nccl:<op>``
annotation / ``record_param_comms`` op (``args`` ``Collective name``, ``Process Group Name``,
``Group size``, ``In/Out msg nelems`` + ``dtype``, else ``Input Dims`` × ``Input type``).

Host-side calls of the CPU backends count too: Gloo (and MPI/UCC) record a ``gloo:<op>`` annotation
around each collective on their worker threads; those become calls of the group ``host:gloo``
(``stream`` null, ``exposed_ns`` null: there is no device timeline to be exposed on), so CPU DDP jobs
get matched collectives, waits and stragglers as well.

**Matching** (:func:`match_collectives`), TraceLens ``NcclAnalyser`` style: the same call on every
rank shares a ``match_key``: ``pg=<pg_name>|seq=<Seq>`` when the trace has ``Seq``; otherwise
``step=<N>|group=<g>|<collective>#<k>`` with ``k`` the call's ordinal among the rank's calls of that
collective in that group during step N, and ``g`` the process group name, or, without one, the
ordinal of the kernel's stream among the rank's communication streams by first use (``stream#0``…).

**Clock alignment** (:func:`estimate_clock_offsets`): collectives complete together on every rank,
so per call ``c`` and rank ``r`` the residual ``median_r'(end[r', c]) − end[r, c]`` measures the
rank's clock offset; ``offset[r]`` = median over calls (calls matched on ≥ 2 ranks; allreduce,
allgather, reduce_scatter, all_to_all and barrier when present), then shifted so that the lowest
rank has offset 0. Times on the job clock = own clock + offset.

**Per call and rank** (definitions, NCCL-tests ``doc/PERFORMANCE.md`` for bandwidth):
``wait = last aligned start − own aligned start``; ``skew = last − first aligned start``;
``net_dur = max(dur − wait, 0)``; ``algbw = msg_bytes / net_dur`` (bytes/ns = GB/s);
``busbw = algbw × factor`` with factor ``2(n−1)/n`` (allreduce), ``(n−1)/n`` (allgather,
reduce_scatter, all_to_all), ``1`` (broadcast, reduce, sendrecv, send, recv); ``n`` = group size,
else ranks matched. The last arrival of a call is the rank with the latest aligned start (ties:
lowest rank).

**Exposed communication**: the part of a comm kernel not overlapped by any COMPUTATION kernel of the
rank, counting time already covered by an earlier-starting comm kernel once (so Σ over a rank's
calls = |merged communication − merged computation|).
"""

from __future__ import annotations

import re

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.analyze.trace.kernel_types import KERNEL_TYPES
from jobs.analyze.trace.model import IDENTITY, RankTrace, as_rank_trace
from jobs.common.intervals import merge_intervals
from jobs.normalize.kineto.columns import DTYPE_BYTES
from schemas.tables import COLLECTIVES

__all__ = [
    "CALLS_SCHEMA",
    "comm_calls",
    "match_collectives",
    "estimate_clock_offsets",
    "bus_bandwidth_factor",
    "collective_summary",
    "clock_skew",
    "SUMMARY_SCHEMA",
    "SKEW_SCHEMA",
    "normalize_collective",
]

#: EVENTS columns :func:`comm_calls` reads (``collective``, ``parent``, ``pg_name``, ``group_size``,
#: ``msg_bytes``, ``seq``, ``args_json`` used when present).
_NEED = (*IDENTITY, "event_id", "category", "name", "ts_ns", "dur_ns", "stream", "is_gpu", "correlation", "step")
#: Schema of :func:`comm_calls` (input of :func:`match_collectives`).
CALLS_SCHEMA = pa.schema(
    [
        pa.field("date", pa.string()),
        pa.field("job_id", pa.string()),
        pa.field("attempt", pa.int32()),
        pa.field("rank", pa.int32()),
        pa.field("capture_id", pa.string()),
        pa.field("step", pa.int64()),
        pa.field("event_id", pa.int64()),
        pa.field("name", pa.string()),
        pa.field("pg_name", pa.string()),
        pa.field("pg_inferred", pa.bool_()),
        pa.field("collective", pa.string()),
        pa.field("call_index", pa.int64()),
        pa.field("match_key", pa.string()),
        pa.field("seq", pa.int64()),
        pa.field("stream", pa.int64()),
        pa.field("start_ns", pa.int64()),
        pa.field("end_ns", pa.int64()),
        pa.field("dur_ns", pa.int64()),
        pa.field("msg_bytes", pa.int64()),
        pa.field("group_size", pa.int32()),
        pa.field("exposed_ns", pa.int64()),
    ]
)
#: Schema of :func:`collective_summary` (one row per job, attempt, rank).
SUMMARY_SCHEMA = pa.schema(
    [
        pa.field("job_id", pa.string()),
        pa.field("attempt", pa.int32()),
        pa.field("rank", pa.int32()),
        pa.field("n_calls", pa.int64()),
        pa.field("n_multi_rank_calls", pa.int64()),
        pa.field("n_last_arrivals", pa.int64()),
        pa.field("last_arrival_share", pa.float64()),
        pa.field("is_straggler", pa.bool_()),
        pa.field("wait_ns", pa.int64()),
        pa.field("comm_ns", pa.int64()),
        pa.field("net_comm_ns", pa.int64()),
        pa.field("exposed_comm_ns", pa.int64()),
        pa.field("clock_offset_ns", pa.int64()),
    ]
)
#: Schema of :func:`clock_skew` / :func:`estimate_clock_offsets` (one row per job, attempt, rank).
SKEW_SCHEMA = pa.schema(
    [
        pa.field("job_id", pa.string()),
        pa.field("attempt", pa.int32()),
        pa.field("rank", pa.int32()),
        pa.field("clock_offset_ns", pa.int64()),
        pa.field("n_calls_used", pa.int64()),
        pa.field("residual_p50_ns", pa.int64()),
    ]
)

_FACTOR = {
    "allreduce": "2(n-1)/n",
    "allgather": "(n-1)/n",
    "reduce_scatter": "(n-1)/n",
    "all_to_all": "(n-1)/n",
    "broadcast": "1",
    "reduce": "1",
    "sendrecv": "1",
    "send": "1",
    "recv": "1",
}
_SYNCHRONIZING = ("allreduce", "allgather", "reduce_scatter", "all_to_all", "barrier")
_ANNOT = re.compile(r"^nccl:(\w+)$")
_json = msgspec.json.Decoder()


def normalize_collective(name: str | None) -> str | None:
    """Collective name as used here: ``all_reduce``/``allreduce``/``AllReduce`` -> ``allreduce``,
    ``all_to_all``/``alltoall_base`` -> ``all_to_all``, ``_allgather_base``/``all_gather_into_tensor``
    -> ``allgather``, ``reduce_scatter_tensor`` -> ``reduce_scatter``; unknown names lower-cased."""
    if not name:
        return None
    k = re.sub(r"[^a-z]", "", name.lower())
    for pat, out in (
        ("alltoall", "all_to_all"),
        ("allreduce", "allreduce"),
        ("allgather", "allgather"),
        ("reducescatter", "reduce_scatter"),
        ("broadcast", "broadcast"),
        ("sendrecv", "sendrecv"),
        ("barrier", "barrier"),
        ("reduce", "reduce"),
        ("send", "send"),
        ("recv", "recv"),
        ("gather", "gather"),
        ("scatter", "scatter"),
    ):
        if pat in k:
            return out
    return name.lower()


def bus_bandwidth_factor(collective: str | None, n: int | None) -> float | None:
    """NCCL-tests bus-bandwidth factor (``doc/PERFORMANCE.md``): ``busbw = algbw × factor``.

    allreduce ``2(n−1)/n``; allgather, reduce_scatter, all_to_all ``(n−1)/n``; broadcast, reduce,
    sendrecv/send/recv ``1``. ``None`` for other collectives or ``n`` unknown / < 1.
    """
    kind = _FACTOR.get(normalize_collective(collective) or "")
    if kind is None or not n or n < 1:
        return None
    if kind == "1":
        return 1.0
    if kind == "(n-1)/n":
        return (n - 1) / n
    return 2.0 * (n - 1) / n


# ------------------------------------------------------------------------------------------------
# per rank


def _launch_meta(trace: RankTrace, kernels: np.ndarray) -> list[dict]:
    """Collective metadata from each kernel's launch and its enclosing ``nccl:*`` / record_param_comms.

    The launch is the kernel's launch call (:attr:`~jobs.analyze.trace.model.RankTrace.launcher`: its correlation
    id, keyed by pid on merged multi-rank files); its ancestors (``parent``) are climbed for up to 12 levels, all
    kernels at once; ``args`` are decoded only for the rows found.
    """
    events = trace.events
    n = trace.n
    eid = trace.event_id
    parent = (
        pc.fill_null(events.column("parent"), -1).to_numpy(zero_copy_only=False).astype(np.int64)
        if "parent" in events.column_names
        else np.full(n, -1)
    )
    dnames, code = trace.symbols, trace.name_code
    annot_of = [(_ANNOT.match(nm).group(1) if _ANNOT.match(nm) else None) for nm in dnames]
    useful = np.array([a is not None or nm == "record_param_comms" for a, nm in zip(annot_of, dnames)], bool)
    # launch rows: the model's launch links, keyed by (pid, correlation) on merged multi-rank files as the parser
    # keys them (B19), by a unique External id where the correlation is missing (B18)
    cur = trace.launcher[kernels].copy()
    # parent event_id -> row position
    eo = np.argsort(eid, kind="stable")
    es = eid[eo]
    hits: list[tuple[int, int, int]] = []  # (kernel index, hop, row)
    for hop in range(12):
        live = np.flatnonzero(cur >= 0)
        if not len(live):
            break
        rows = cur[live]
        u = useful[code[rows]]
        hits.extend(zip(live[u].tolist(), [hop] * int(u.sum()), rows[u].tolist()))
        p = parent[rows]
        k = np.searchsorted(es, p)
        k = np.minimum(k, n - 1)
        ok = (p >= 0) & (es[k] == p)
        cur[live] = np.where(ok, eo[k], -1)
    args = events.column("args_json") if "args_json" in events.column_names else None
    out: list[dict] = [{} for _ in range(len(kernels))]
    if not hits:
        return out
    hits.sort()
    texts = (
        args.take(pa.array([h[2] for h in hits], pa.int64())).to_pylist() if args is not None else [None] * len(hits)
    )
    for (ki, _, row), t in zip(hits, texts):
        meta = out[ki]
        try:
            a = _json.decode(t) if t else {}
        except msgspec.DecodeError:
            a = {}
        a = a if isinstance(a, dict) else {}
        ann = annot_of[code[row]]
        if ann and "collective" not in meta:
            meta["collective"] = ann
        for key, field in (
            ("Collective name", "collective"),
            ("Process Group Name", "pg_name"),
            ("Group size", "group_size"),
            ("Seq", "seq"),
        ):
            if key in a and field not in meta and a[key] not in (None, ""):
                meta[field] = a[key]
        if "msg_bytes" not in meta:
            b = _bytes_from_args(a)
            if b is not None:
                meta["msg_bytes"] = b
    return out


def _bytes_from_args(a: dict):
    """Message bytes from collective args: max(in, out) nelems × dtype; else Input Dims × Input type."""
    dt = a.get("dtype")
    size = DTYPE_BYTES.get(dt) if isinstance(dt, str) else None
    nel = [a.get("In msg nelems"), a.get("Out msg nelems")]
    nel = [v for v in nel if isinstance(v, int) and not isinstance(v, bool)]
    if size and nel:
        return max(nel) * size
    dims, types = a.get("Input Dims"), a.get("Input type")
    if isinstance(dims, list) and isinstance(types, list) and dims:
        tot = 0
        for d, t in zip(dims, types):
            b = DTYPE_BYTES.get(t) if isinstance(t, str) else None
            if b and isinstance(d, list) and d and all(isinstance(x, int) for x in d):
                tot += int(np.prod(d)) * b
        return tot or None
    return None


_HOST_COLLECTIVE = re.compile(r"^(gloo|mpi|ucc):(\w+)$", re.I)


def _host_collectives(trace: RankTrace) -> np.ndarray:
    """Indices of host-side collective calls: ``gloo:<op>`` (also ``mpi:``/``ucc:``) annotations that
    torch.distributed's CPU backends record around each collective (``user_annotation``/``cpu_op``,
    on the backend's worker threads), with a duration."""
    per_name = (
        pc.match_substring_regex(pa.array(trace.symbols, pa.string()), r"^(gloo|mpi|ucc):\w+$", ignore_case=True)
        .to_numpy(zero_copy_only=False)
        .astype(bool)
    )
    mask = np.append(per_name, False)[trace.name_code]
    host_cat = trace.category_in(("user_annotation", "cpu_op", "gpu_user_annotation"))
    return np.flatnonzero(mask & host_cat & ~trace.is_gpu & trace.has_dur)


def _host_meta(events: pa.Table, i: int) -> dict:
    """Collective fields of a host (Gloo/MPI/UCC) call from its name and ``args`` (Input Dims × type)."""
    name = events.column("name")[i].as_py() or ""
    m = _HOST_COLLECTIVE.match(name)
    meta: dict = {"collective": m.group(2) if m else None, "backend": m.group(1).lower() if m else "gloo"}
    if "args_json" in events.column_names:
        raw = events.column("args_json")[i].as_py()
        try:
            a = _json.decode(raw) if raw else {}
        except msgspec.DecodeError:
            a = {}
        if isinstance(a, dict):
            b = _bytes_from_args(a)
            if b is not None:
                meta["msg_bytes"] = b
    return meta


def comm_calls(trace: RankTrace | pa.Table) -> pa.Table:
    """The rank's communication calls (:data:`CALLS_SCHEMA`), one row per communication kernel.

    Args:
        trace: the capture's :class:`~jobs.analyze.trace.model.RankTrace`; or (convenience for tests
            and benchmarks) its EVENTS rows of ONE (job_id, attempt, rank, capture_id), any order,
            modelled first.

    Returns:
        Rows ordered by ``start_ns``; ``match_key`` as in the module docstring; ``exposed_ns`` =
        time of the kernel not overlapped by computation (module docstring), ns (the model's times:
        exact unless it was built with HTA's µs rounding).

    Raises:
        ValueError: a needed column is missing or ``events`` mixes captures.
    """
    trace = as_rank_trace(trace, _NEED, "comm_calls")
    if trace.n == 0:
        return CALLS_SCHEMA.empty_table()
    events, ident = trace.events, trace.identity
    is_kernel = trace.category_in(("kernel",)) & trace.is_gpu & trace.has_dur
    kidx = np.flatnonzero(is_kernel)
    types = trace.kernel_type_codes[kidx]
    comm = kidx[types == KERNEL_TYPES.index("COMMUNICATION")]
    comp = kidx[types == KERNEL_TYPES.index("COMPUTATION")]
    host = _host_collectives(trace)
    if not len(comm) and not len(host):
        return CALLS_SCHEMA.empty_table()
    ts, dur = trace.ts, trace.dur
    on_host = np.zeros(len(ts), bool)
    on_host[host] = True
    comm = np.concatenate([comm, host]).astype(np.int64)
    o = np.lexsort((trace.event_id[comm], ts[comm]))
    comm = comm[o]
    take = pa.array(comm)

    def col(name, typ=None):
        if name not in events.column_names:
            return [None] * len(comm)
        c = events.column(name).take(take)
        return c.to_pylist()

    meta = _launch_meta(trace, comm)
    for i, k in enumerate(comm):  # host (Gloo) calls: the op from the annotation, bytes from its args
        if on_host[k]:
            meta[i] = _host_meta(events, int(k))
    kname = col("name")
    coll = [normalize_collective(c or m.get("collective") or None) for c, m in zip(col("collective"), meta)]
    # prefer the CPU-side call name (nccl:all_to_all runs as SendRecv kernels)
    coll = [normalize_collective(m["collective"]) if m.get("collective") else c for c, m in zip(coll, meta)]
    pg = [
        p if p else (str(m["pg_name"]) if m.get("pg_name") not in (None, "") else None)
        for p, m in zip(col("pg_name"), meta)
    ]
    gsize = [g if g is not None else _int(m.get("group_size")) for g, m in zip(col("group_size"), meta)]
    msg = [b if b is not None else _int(m.get("msg_bytes")) for b, m in zip(col("msg_bytes"), meta)]
    seq = [s if s is not None else _int(m.get("seq")) for s, m in zip(col("seq"), meta)]
    stream = [None if on_host[k] else s for k, s in zip(comm, col("stream"))]
    step = [s if s is not None else -1 for s in col("step")]
    # inferred groups: stream ordinal by first use
    first_use: dict = {}
    for s in stream:
        first_use.setdefault(s, len(first_use))
    pg_inferred = [p is None for p in pg]
    # host calls run on a pool of Gloo threads (one call per thread, alternating): one group per backend
    group = [
        p if p is not None else (f"host:{meta_i.get('backend', 'gloo')}" if on_host[k] else f"stream#{first_use[s]}")
        for p, s, k, meta_i in zip(pg, stream, comm, meta)
    ]
    # call_index: order among the rank's calls of (step, group); ordinal per collective for the key
    call_index, keys = [], []
    cnt_group: dict = {}
    cnt_coll: dict = {}
    for st, gr, c, sq, p in zip(step, group, coll, seq, pg):
        gi = cnt_group.get((st, gr), 0)
        cnt_group[(st, gr)] = gi + 1
        ci = cnt_coll.get((st, gr, c), 0)
        cnt_coll[(st, gr, c)] = ci + 1
        call_index.append(gi)
        if sq is not None and p is not None:
            keys.append(f"pg={p}|seq={sq}")
        else:
            keys.append(f"step={st}|group={gr}|{c}#{ci}")
    start = ts[comm]
    end = start + dur[comm]
    exposed = _exposed(start, end, ts[comp], ts[comp] + dur[comp])
    # a host collective has no device timeline to be exposed on (CPU compute overlap is not measured)
    exposed = pa.array([None if on_host[k] else int(x) for k, x in zip(comm, exposed)], pa.int64())
    n = len(comm)
    cols = {
        **{c: pa.array([ident[c]] * n, CALLS_SCHEMA.field(c).type) for c in IDENTITY},
        "step": pa.array(step, pa.int64()),
        "event_id": events.column("event_id").take(take).combine_chunks()
        if isinstance(events.column("event_id"), pa.ChunkedArray)
        else events.column("event_id").take(take),
        "name": pa.array(kname, pa.string()),
        "pg_name": pa.array(group, pa.string()),
        "pg_inferred": pa.array(pg_inferred, pa.bool_()),
        "collective": pa.array(coll, pa.string()),
        "call_index": pa.array(call_index, pa.int64()),
        "match_key": pa.array(keys, pa.string()),
        "seq": pa.array(seq, pa.int64()),
        "stream": pa.array(stream, pa.int64()),
        "start_ns": pa.array(start),
        "end_ns": pa.array(end),
        "dur_ns": pa.array(dur[comm]),
        "msg_bytes": pa.array(msg, pa.int64()),
        "group_size": pa.array(gsize, pa.int32()),
        "exposed_ns": exposed,
    }
    return pa.table([cols[f.name].cast(f.type) for f in CALLS_SCHEMA], schema=CALLS_SCHEMA)


def _int(v):
    if v is None or isinstance(v, bool):
        return None
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _exposed(s: np.ndarray, e: np.ndarray, cs: np.ndarray, ce: np.ndarray) -> np.ndarray:
    """Exposed time of each comm interval (sorted by start): own part not covered by compute."""
    prev_end = np.maximum.accumulate(np.concatenate(([np.iinfo(np.int64).min], e[:-1])))
    own_s = np.maximum(s, prev_end)
    own_e = np.maximum(e, own_s)
    ms, me = merge_intervals(cs, ce)
    cum = np.concatenate(([0], np.cumsum(me - ms)))

    def covered_before(t):
        # compute time in (-inf, t)
        k = np.searchsorted(ms, t, side="right")  # intervals starting at or before t
        full = cum[np.maximum(k - 1, 0)]
        part = np.where(k > 0, np.minimum(t, me[np.maximum(k - 1, 0)]) - ms[np.maximum(k - 1, 0)], 0)
        return np.where(k > 0, full + np.maximum(part, 0), 0)

    if len(ms):
        overlap = covered_before(own_e) - covered_before(own_s)
    else:
        overlap = np.zeros(len(s), np.int64)
    return (own_e - own_s) - overlap


# ------------------------------------------------------------------------------------------------
# per job


def estimate_clock_offsets(calls: pa.Table) -> pa.Table:
    """Per (job, attempt, rank) clock offset aligning collective completions (module docstring).

    Args:
        calls: :func:`comm_calls` rows of the ranks of one or more jobs.

    Returns:
        :data:`SKEW_SCHEMA` rows: ``clock_offset_ns`` (add to the rank's clock), ``n_calls_used``,
        ``residual_p50_ns`` = median |end misalignment| after correction (the noise floor).
    """
    if calls.num_rows == 0:
        return SKEW_SCHEMA.empty_table()
    d = calls.select(["job_id", "attempt", "rank", "match_key", "collective", "end_ns"]).to_pandas()
    rows = []
    for (job, att), g in d.groupby(["job_id", "attempt"], sort=True):
        ranks = sorted(g["rank"].unique().tolist())
        nr = g.groupby("match_key")["rank"].transform("nunique")
        g = g[nr >= 2]
        sync = g[g["collective"].isin(_SYNCHRONIZING)]
        if len(sync):
            g = sync
        off = {r: 0 for r in ranks}
        used = {r: 0 for r in ranks}
        resid = {r: 0 for r in ranks}
        if len(g):
            g = g.drop_duplicates(["match_key", "rank"]).copy()
            g["end_ns"] = g["end_ns"] - int(g["end_ns"].min())  # small ints: exact in float64
            med = g.groupby("match_key")["end_ns"].transform("median")
            res = med - g["end_ns"].astype("float64")
            per = res.groupby(g["rank"]).median()
            base = per.get(ranks[0], 0.0) if ranks[0] in per.index else float(per.iloc[0])
            for r in ranks:
                if r in per.index:
                    off[r] = int(round(per[r] - base))
                    used[r] = int((g["rank"] == r).sum())
            aligned = g["end_ns"] + g["rank"].map(off)
            m2 = aligned.groupby(g["match_key"]).transform("median")
            ab = (aligned - m2).abs().groupby(g["rank"]).median()
            for r in ranks:
                if r in ab.index:
                    resid[r] = int(round(ab[r]))
        for r in ranks:
            rows.append(
                {
                    "job_id": job,
                    "attempt": int(att),
                    "rank": int(r),
                    "clock_offset_ns": off[r],
                    "n_calls_used": used[r],
                    "residual_p50_ns": resid[r],
                }
            )
    return pa.Table.from_pylist(rows, schema=SKEW_SCHEMA)


def match_collectives(calls: pa.Table, offsets: pa.Table | None = None) -> pa.Table:
    """Match the calls of all ranks of a job: exactly the COLLECTIVES columns.

    Args:
        calls: :func:`comm_calls` rows of every rank of one (or more) job(s).
        offsets: optional :data:`SKEW_SCHEMA` clock offsets; estimated with
            :func:`estimate_clock_offsets` when omitted.

    Returns:
        COLLECTIVES rows (one per call per rank), definitions in the module docstring.
    """
    if calls.num_rows == 0:
        return COLLECTIVES.empty()
    if offsets is None:
        offsets = estimate_clock_offsets(calls)
    d = calls.to_pandas()
    off = offsets.to_pandas().set_index(["job_id", "attempt", "rank"])["clock_offset_ns"]
    idx = list(zip(d["job_id"], d["attempt"], d["rank"]))
    d["clock_offset_ns"] = [int(off.get(k, 0)) for k in idx]
    d["aligned_start_ns"] = d["start_ns"] + d["clock_offset_ns"]
    d["aligned_end_ns"] = d["end_ns"] + d["clock_offset_ns"]
    gk = ["job_id", "attempt", "match_key"]
    grp = d.groupby(gk, sort=False)
    last = grp["aligned_start_ns"].transform("max")
    first = grp["aligned_start_ns"].transform("min")
    d["wait_ns"] = (last - d["aligned_start_ns"]).astype("int64")
    d["skew_ns"] = (last - first).astype("int64")
    d["net_dur_ns"] = np.maximum(d["dur_ns"] - d["wait_ns"], 0).astype("int64")
    d["n_ranks_matched"] = grp["rank"].transform("nunique").astype("int32")
    # last arrival: latest aligned start, ties -> lowest rank
    o = d.sort_values(["aligned_start_ns", "rank"], ascending=[False, True], kind="stable")
    winner = o.drop_duplicates(gk)[[*gk, "rank"]].rename(columns={"rank": "_last_rank"})
    d = d.merge(winner, on=gk, how="left")
    d["is_last_arrival"] = d["rank"] == d["_last_rank"]
    n_for_bw = d["group_size"].where(d["group_size"].notna(), d["n_ranks_matched"])
    d["algbw_gbps"] = np.where(
        (d["net_dur_ns"] > 0) & d["msg_bytes"].notna(),
        d["msg_bytes"].astype("float64") / d["net_dur_ns"].clip(lower=1),
        np.nan,
    )
    fac = [
        bus_bandwidth_factor(c, int(n) if n == n and n is not None else None) for c, n in zip(d["collective"], n_for_bw)
    ]
    d["busbw_gbps"] = d["algbw_gbps"] * np.array([f if f is not None else np.nan for f in fac], float)
    d = d.sort_values(["job_id", "attempt", "rank", "start_ns", "event_id"], kind="stable")
    out = pa.Table.from_pandas(d[COLLECTIVES.names], preserve_index=False)
    return out.cast(COLLECTIVES.arrow_schema())


def collective_summary(collectives: pa.Table, calls: pa.Table | None = None) -> pa.Table:
    """Per (job, attempt, rank): stragglers and exposed communication (:data:`SUMMARY_SCHEMA`).

    ``n_last_arrivals`` counts the calls matched on ≥ 2 ranks where the rank arrived last;
    ``is_straggler`` marks the rank(s) with the most last arrivals (none when no call spans two
    ranks); ``exposed_comm_ns`` = Σ ``exposed_ns`` of the rank's calls (from ``calls``; null
    without them).
    """
    if collectives.num_rows == 0:
        return SUMMARY_SCHEMA.empty_table()
    d = collectives.select(
        [
            "job_id",
            "attempt",
            "rank",
            "event_id",
            "n_ranks_matched",
            "is_last_arrival",
            "wait_ns",
            "dur_ns",
            "net_dur_ns",
            "clock_offset_ns",
        ]
    ).to_pandas()
    if calls is not None and calls.num_rows:
        e = calls.select(["job_id", "attempt", "rank", "event_id", "exposed_ns"]).to_pandas()
        d = d.merge(e, on=["job_id", "attempt", "rank", "event_id"], how="left")
    else:
        d["exposed_ns"] = np.nan
    d["multi"] = d["n_ranks_matched"] >= 2
    d["last_multi"] = d["is_last_arrival"] & d["multi"]
    rows = []
    for (job, att), g in d.groupby(["job_id", "attempt"], sort=True):
        per = g.groupby("rank")
        n_last = per["last_multi"].sum()
        top = n_last.max()
        for r, h in per:
            nm = int(h["multi"].sum())
            nl = int(n_last[r])
            rows.append(
                {
                    "job_id": job,
                    "attempt": int(att),
                    "rank": int(r),
                    "n_calls": int(len(h)),
                    "n_multi_rank_calls": nm,
                    "n_last_arrivals": nl,
                    "last_arrival_share": (nl / nm) if nm else None,
                    "is_straggler": bool(top > 0 and nl == top),
                    "wait_ns": int(h["wait_ns"].sum()),
                    "comm_ns": int(h["dur_ns"].sum()),
                    "net_comm_ns": int(h["net_dur_ns"].sum()),
                    "exposed_comm_ns": int(h["exposed_ns"].sum()) if h["exposed_ns"].notna().any() else None,
                    "clock_offset_ns": int(h["clock_offset_ns"].iloc[0]),
                }
            )
    return pa.Table.from_pylist(rows, schema=SUMMARY_SCHEMA)


def clock_skew(collectives: pa.Table) -> pa.Table:
    """Clock offsets found, from a COLLECTIVES table (:data:`SKEW_SCHEMA`; residual not known here: 0)."""
    if collectives.num_rows == 0:
        return SKEW_SCHEMA.empty_table()
    d = collectives.select(["job_id", "attempt", "rank", "clock_offset_ns", "n_ranks_matched"]).to_pandas()
    rows = []
    for (job, att, r), h in d.groupby(["job_id", "attempt", "rank"], sort=True):
        rows.append(
            {
                "job_id": job,
                "attempt": int(att),
                "rank": int(r),
                "clock_offset_ns": int(h["clock_offset_ns"].iloc[0]),
                "n_calls_used": int((h["n_ranks_matched"] >= 2).sum()),
                "residual_p50_ns": 0,
            }
        )
    return pa.Table.from_pylist(rows, schema=SKEW_SCHEMA)
