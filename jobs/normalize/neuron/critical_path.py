"""Device critical path of one Neuron device profile, from instruction dependencies.

Graph (``reference/neuron_profiles.md`` §2.5 ``Flow``, §2.1 ``predecessors``): nodes are the
``Instruction`` rows (and ``DmaPacketAggregated`` blocks when ``Flow`` points at them); edges are

* data/semaphore dependencies: ``Flow`` rows ``in_id → out_id`` (legacy ``predecessors``), and
* program order: each engine (per physical core) runs its instruction stream in order, so the
  previous instruction on the same engine is also a predecessor.

Walk (the same backward "who released me last" rule as HTA's critical path, on device time): start
at the instruction that ends last; from a node, step to the predecessor that ended last (an
overlapping predecessor of a pipelined engine counts up to the node's start; ties go to the later
start). A semaphore-wait instruction (``EVENT_SEMAPHORE*``) is left through the instruction of
another engine that finished last during the wait (the semaphore's setter). Every ns between the
path's first start and last end is attributed exactly once, going backwards with a cursor:

* the node's own execution ``[start, end)`` → ``compute`` (engine instructions), ``dma``
  (DMA-trigger instructions ``*DMA*``, ``TENSOR_LOAD``/``TENSOR_STORE``, DMA blocks),
  ``collective`` (``*COLLECTIVE*``/``CC_*`` opcodes) or, for ``EVENT_SEMAPHORE*``, split like a wait
  window below;
* the gap between the chosen predecessor's end and the node's start: the part inside the node's
  semaphore wait window ``[start − evt_wait_time, start)`` is ``collective`` where a collective op
  (``CcOp``) ran, else ``dma`` where DMA packets were moving data (the wait was for that data), else
  ``semaphore_wait``; the part outside the window is ``idle`` (a dependency gap nobody explains:
  host, start-up, runtime).

Pure functions over Arrow tables in Parquet-schema naming (:class:`jobs.normalize.neuron.profile.NeuronProfile`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec
import numpy as np
import pyarrow as pa

from jobs.normalize.neuron.metrics import merge_intervals, overlap_ns

__all__ = [
    "CriticalPath",
    "device_critical_path",
    "instruction_category",
    "CATEGORIES",
    "critical_path_rows",
    "critical_path_from_events",
    "BOUND_BY",
]

CATEGORIES = ("compute", "dma", "semaphore_wait", "collective", "idle")


def instruction_category(opcode) -> str:
    """``compute``, ``dma``, ``collective`` or ``semaphore_wait`` for an instruction opcode."""
    op = str(opcode or "").upper()
    if "COLLECTIVE" in op or op.startswith("CC_"):
        return "collective"
    if "DMA" in op or op in ("TENSOR_LOAD", "TENSOR_STORE"):
        return "dma"
    if op.startswith("EVENT_SEMAPHORE"):
        return "semaphore_wait"
    return "compute"


@dataclass
class CriticalPath:
    """Result of :func:`device_critical_path`.

    Attributes:
        length_ns: last end − first start of the path, ns (0 for an empty profile).
        by_category: ns per :data:`CATEGORIES` (sums to ``length_ns``).
        segments: path order (earliest first) of ``(node_id, name, start_ns, end_ns, category)``;
            gaps have ``node_id`` None and name ``gap``.
    """

    length_ns: int = 0
    by_category: dict = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0))
    segments: list = field(default_factory=list)


def _col(t: pa.Table | None, name: str, default=None) -> list:
    if t is None:
        return []
    if name in t.column_names:
        return t.column(name).to_pylist()
    return [default] * t.num_rows


def device_critical_path(
    instructions: pa.Table | None,
    flows: pa.Table | None = None,
    dma_blocks: pa.Table | None = None,
    dma_packets: pa.Table | None = None,
    cc_ops: pa.Table | None = None,
) -> CriticalPath:
    """Critical path of one device profile (see the module docstring for the rules).

    Args:
        instructions: ``Instruction`` (``id``, ``start_ts``, ``end_ts``, ``engine``, ``opcode``,
            optional ``pcore_idx``, ``evt_wait_time_ns``); times in ns.
        flows: ``Flow`` (``in_id``, ``out_id``); unknown ids are ignored.
        dma_blocks: ``DmaPacketAggregated`` (``id``, ``start_ts``, ``end_ts``): nodes when flows name them.
        dma_packets: ``DmaPacket`` (``start_ts``, ``end_ts``): DMA activity for wait attribution.
        cc_ops: ``CcOp`` (``start_ts``, ``end_ts``): collective activity for wait attribution.

    Returns:
        :class:`CriticalPath`.
    """
    cp = CriticalPath()
    if instructions is None or not instructions.num_rows:
        return cp
    ids = _col(instructions, "id")
    start = _col(instructions, "start_ts")
    end = _col(instructions, "end_ts")
    name = _col(instructions, "opcode")
    engine = _col(instructions, "engine")
    pcore = _col(instructions, "pcore_idx", 0)
    wait = _col(instructions, "evt_wait_time_ns", 0)
    cat = [instruction_category(o) for o in name]
    nodes = []  # (start, end, id, name, category, wait, engine key)
    for i in range(len(ids)):
        if start[i] is None or end[i] is None:
            continue
        nodes.append(
            (int(start[i]), int(end[i]), ids[i], name[i], cat[i], int(wait[i] or 0), (pcore[i] or 0, engine[i]))
        )
    for bid, bs, be in zip(_col(dma_blocks, "id"), _col(dma_blocks, "start_ts"), _col(dma_blocks, "end_ts")):
        if bs is not None and be is not None:
            nodes.append((int(bs), int(be), bid, "dma_block", "dma", 0, None))
    if not nodes:
        return cp
    n = len(nodes)
    order = sorted(range(n), key=lambda k: (nodes[k][0], nodes[k][1]))
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n)
    by_id: dict = {}
    for k, nd in enumerate(nodes):
        if nd[2] is not None:
            by_id.setdefault(nd[2], k)
    preds: list[list[int]] = [[] for _ in range(n)]
    last_on_engine: dict = {}
    for k in order:
        key = nodes[k][6]
        if key is not None:
            if key in last_on_engine:
                preds[k].append(last_on_engine[key])
            last_on_engine[key] = k
    for a, b in zip(_col(flows, "in_id"), _col(flows, "out_id")):
        ka, kb = by_id.get(a), by_id.get(b)
        if ka is not None and kb is not None and ka != kb and rank[ka] < rank[kb]:
            preds[kb].append(ka)

    dma_iv = (
        merge_intervals(_col(dma_packets, "start_ts", 0), _col(dma_packets, "end_ts", 0))
        if dma_packets is not None and dma_packets.num_rows
        else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    )
    cc_iv = (
        merge_intervals(_col(cc_ops, "start_ts", 0), _col(cc_ops, "end_ts", 0))
        if cc_ops is not None and cc_ops.num_rows
        else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    )

    by_end = sorted(range(n), key=lambda k: (nodes[k][1], rank[k]))
    ends_sorted = np.array([nodes[k][1] for k in by_end], np.int64)

    def releaser(engine_key, after: int, until: int):
        """Latest-ending unvisited node of another engine (or a DMA block), not itself a semaphore
        wait, with after < end <= until: the instruction whose completion released a wait."""
        i = int(np.searchsorted(ends_sorted, until, side="right")) - 1
        steps = 0
        while i >= 0 and ends_sorted[i] > after and steps < 64:
            k = by_end[i]
            if (
                k not in visited
                and nodes[k][4] != "semaphore_wait"
                and (nodes[k][6] is None or nodes[k][6] != engine_key)
            ):
                return k
            i -= 1
            steps += 1
        return None

    cur = by_end[-1]
    t_end = nodes[cur][1]
    cursor = t_end
    segs = []
    visited: set = set()
    while cur not in visited:
        visited.add(cur)
        s, e, nid, nm, c, w, key = nodes[cur]
        if c == "semaphore_wait" and e > s:
            r = releaser(key, s, min(e, cursor))
            if r is not None:
                # the wait ended when another engine (the semaphore's setter) finished: follow it
                r_end = nodes[r][1]
                if r_end < cursor:
                    _attribute_gap(cp, segs, r_end, cursor, s, dma_iv, cc_iv, nid, nm)
                    cursor = r_end
                cur = r
                continue
        if s < cursor:
            seg_end = min(e, cursor)
            if c == "semaphore_wait":  # a wait instruction: DMA / collective activity during it explains it
                _attribute_gap(cp, segs, s, seg_end, s, dma_iv, cc_iv, nid, nm)
            else:
                segs.append((nid, nm, s, seg_end, c))
                cp.by_category[c] += seg_end - s
            cursor = s
        cands = list(preds[cur])
        if w > 0:
            r = releaser(key, s - w, s)
            if r is not None and rank[r] < rank[cur]:
                cands.append(r)
        if not cands:
            break
        cands = [q for q in cands if q not in visited]
        if not cands:
            break
        # the predecessor that released this node last; an overlapping one (pipelined engines:
        # LDWEIGHTS/MATMUL) counts up to the cursor, ties go to the later start
        p = max(cands, key=lambda q: (min(nodes[q][1], cursor), nodes[q][0], rank[q]))
        p_end = min(nodes[p][1], cursor)
        if p_end < cursor:
            _attribute_gap(cp, segs, p_end, cursor, s - w, dma_iv, cc_iv)
            cursor = p_end
        cur = p
    cp.length_ns = t_end - cursor
    cp.segments = segs[::-1]
    return cp


def _attribute_gap(
    cp: CriticalPath, segs: list, a: int, b: int, wait_from: int, dma_iv, cc_iv, node_id=None, name: str = "gap"
) -> None:
    """Split the gap ``[a, b)``: inside the wait window → collective / dma / semaphore_wait; rest idle."""
    w0 = max(a, min(wait_from, b))
    idle = w0 - a
    if b > w0:
        cc = overlap_ns(cc_iv, w0, b)
        dma = min(overlap_ns(dma_iv, w0, b), b - w0 - cc)
        sem = b - w0 - cc - dma
        for c, v in (("collective", cc), ("dma", dma), ("semaphore_wait", sem)):
            cp.by_category[c] += v
        kind = max((("collective", cc), ("dma", dma), ("semaphore_wait", sem)), key=lambda x: x[1])[0]
        segs.append((node_id, name, w0, b, kind))
    if idle > 0:
        cp.by_category["idle"] += idle
        segs.append((None, "gap", a, w0, "idle"))


#: Path categories → ``critical_path.bound_by`` vocabulary of the table contract (schemas/expectations.py):
#: device data movement is the device's data loading, semaphore waits are synchronization, unexplained
#: dependency gaps are gaps between device work.
BOUND_BY = {
    "compute": "compute",
    "dma": "data_loading",
    "semaphore_wait": "sync",
    "collective": "communication",
    "idle": "kernel_kernel_gap",
}


def critical_path_rows(cp: CriticalPath, identity: dict, event_ids: dict | None = None) -> list[dict]:
    """The path as ``critical_path`` rows (:data:`schemas.tables.CRITICAL_PATH` columns).

    Args:
        cp: :func:`device_critical_path` output.
        identity: ``date``, ``job_id``, ``attempt``, ``rank``, ``capture_id``; ``step`` (default -1:
            a device profile is one NEFF execution, not a ProfilerStep).
        event_ids: optional ``{instruction id: events.event_id}`` to link segments to events.

    Returns:
        Row dicts with ``scope`` = ``rank``, ``path_rank`` = rank, ``bound_by`` mapped by :data:`BOUND_BY`
        and ``name`` the instruction opcode, or ``gap:<category>`` for gaps.
    """
    rows = []
    for i, (nid, nm, s, e, c) in enumerate(cp.segments):
        rows.append(
            {
                "date": identity["date"],
                "job_id": identity["job_id"],
                "attempt": int(identity["attempt"]),
                "step": int(identity.get("step", -1)),
                "scope": "rank",
                "path_rank": int(identity["rank"]),
                "path_capture_id": identity["capture_id"],
                "segment": i,
                "rank": int(identity["rank"]),
                "capture_id": identity["capture_id"],
                "event_id": (event_ids or {}).get(nid) if nid is not None else None,
                "name": nm if nid is not None else f"gap:{c}",
                "start_ns": int(s),
                "end_ns": int(e),
                "dur_ns": int(e - s),
                "bound_by": BOUND_BY[c],
                "path_length_ns": int(cp.length_ns),
            }
        )
    return rows


def critical_path_from_events(events: pa.Table) -> tuple[CriticalPath, dict]:
    """The device critical path rebuilt from one capture's ``events`` rows (``source`` ``neuron``).

    Instructions are the ``neuron_instruction`` rows (``external_id`` = instruction id, ``args_json``
    ``engine``, ``evt_wait_time_ns``, ``pcore_idx`` = ``pid``, ``predecessors``), DMA blocks the
    ``neuron_dma_block`` rows, DMA activity the ``neuron_dma`` rows and collectives the
    ``neuron_collective`` rows (see :mod:`jobs.normalize.neuron.events`); the result equals
    :func:`device_critical_path` on the profile tables.

    Returns:
        ``(path, {instruction id: event_id})`` — the map links segments to ``events`` for
        :func:`critical_path_rows`.
    """
    cat = events.column("category").to_pylist()
    ts, dur = events.column("ts_ns").to_pylist(), events.column("dur_ns").to_pylist()
    ext, eid = events.column("external_id").to_pylist(), events.column("event_id").to_pylist()
    names, pids, args = (
        events.column("name").to_pylist(),
        events.column("pid").to_pylist(),
        events.column("args_json").to_pylist(),
    )
    ins = {k: [] for k in ("id", "start_ts", "end_ts", "engine", "opcode", "pcore_idx", "evt_wait_time_ns")}
    flows = {"in_id": [], "out_id": []}
    blocks = {"id": [], "start_ts": [], "end_ts": []}
    pk = {"start_ts": [], "end_ts": []}
    cc = {"start_ts": [], "end_ts": []}
    ids = {}
    for i, c in enumerate(cat):
        if c == "neuron_instruction":
            a = msgspec.json.decode(args[i]) if args[i] else {}
            ins["id"].append(ext[i])
            ins["start_ts"].append(ts[i])
            ins["end_ts"].append(ts[i] + (dur[i] or 0))
            ins["engine"].append(a.get("engine"))
            ins["opcode"].append(names[i])
            ins["pcore_idx"].append(pids[i])
            ins["evt_wait_time_ns"].append(a.get("evt_wait_time_ns") or 0)
            ids[ext[i]] = eid[i]
            for p in a.get("predecessors") or []:
                flows["in_id"].append(p)
                flows["out_id"].append(ext[i])
        elif c == "neuron_dma_block":
            blocks["id"].append(ext[i])
            blocks["start_ts"].append(ts[i])
            blocks["end_ts"].append(ts[i] + (dur[i] or 0))
        elif c in ("neuron_dma", "neuron_collective"):
            d = pk if c == "neuron_dma" else cc
            d["start_ts"].append(ts[i])
            d["end_ts"].append(ts[i] + (dur[i] or 0))
    t = lambda d: pa.table(d) if d and len(next(iter(d.values()))) else None  # noqa: E731
    ins_t = (
        pa.table({k: pa.array(v, pa.string() if k in ("engine", "opcode") else pa.int64()) for k, v in ins.items()})
        if ins["id"]
        else None
    )
    return device_critical_path(ins_t, t(flows), t(blocks), t(pk), t(cc)), ids
