"""Vectorized structure of a trace: slice nesting, flow binding and ProfilerStep attribution.

Slices and tracks (:func:`track_codes`, :class:`SliceIndex`), launch links (:func:`correlation_link_keys`,
:func:`external_id_links`, :func:`count_early_launches`), flows (:func:`bind_flows`) and steps
(:func:`profiler_steps`, :func:`last_step_truncated`). Used by the normalization passes of
:mod:`jobs.normalize.kineto.passes` and by the analyses that rebuild links from the ``events`` table.

All functions are pure numpy over integer ns (deterministic; no float comparisons). Sources: the Kineto
format (``../shared/reference/kineto_and_hta.md`` §2), HTA's definitions (§1) and the bug cases of
``../shared/reference/bug_cases.md`` (B08, B11/B12, B18, B19, B22, B25).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.normalize.kineto.columns import bool_np, take_arrow

_NONE = -1
_STEP_PREFIX = "ProfilerStep#"
_SPAN_CATEGORIES = ("user_annotation", "gpu_user_annotation")
#: :func:`last_step_truncated`: work inside the last ProfilerStep ends before this fraction of it (B22).
PARTIAL_TAIL_FRACTION = 0.5


def track_codes(pid_key: np.ndarray, tid_key: np.ndarray) -> np.ndarray:
    """Dense int64 code of each (pid, tid) pair (any int64 keys; equal pairs get equal codes).

    Codes are assigned in order of first appearance (hash-based, O(n)).
    """
    if len(pid_key) == 0:
        return np.zeros(0, np.int64)
    p = _codes(pid_key)
    t = _codes(tid_key)
    return _codes(p * (int(t.max()) + 1) + t)


def pair_begin_end(is_begin: np.ndarray, is_end: np.ndarray, track: np.ndarray, ts: np.ndarray):
    """Pair Chrome-trace duration events (``ph`` ``B`` / ``E``) per track as a stack, in time order.

    On each track (equal ``track`` codes: one (pid, tid)), in order of ``ts`` and then of position (file
    order), a ``B`` is pushed and an ``E`` closes the innermost open ``B``, whatever its name (an ``E`` often
    has none; Perfetto's rule, Perfetto #659/#970). Timestamps are exact int ns.

    Args:
        is_begin, is_end: bool per row; track: int64 track code per row; ts: int64 ns per row.

    Returns:
        ``(begins, ends, unmatched_begins, unmatched_ends)``: int64 row positions; ``ends[i]`` closes
        ``begins[i]``. An ``E`` with no open ``B`` and a ``B`` never closed are unmatched.
    """
    pos = np.flatnonzero(is_begin | is_end)
    order = pos[np.lexsort((pos, ts[pos], track[pos]))]
    begins, ends, lone_ends, lone_begins = [], [], [], []
    stack: list[int] = []
    current = None
    for i, t, b in zip(order.tolist(), track[order].tolist(), is_begin[order].tolist()):
        if t != current:
            lone_begins += stack
            stack, current = [], t
        if b:
            stack.append(i)
        elif stack:
            begins.append(stack.pop())
            ends.append(i)
        else:
            lone_ends.append(i)
    lone_begins += stack
    return tuple(np.array(v, np.int64) for v in (begins, ends, lone_begins, lone_ends))


def _codes(keys: np.ndarray) -> np.ndarray:
    """Dense int64 code of each key, in order of first appearance."""
    return pc.dictionary_encode(pa.array(keys)).indices.to_numpy(zero_copy_only=False).astype(np.int64)


class SliceIndex:
    """``X`` slices of one trace sorted per track by (start asc, end desc, event order asc).

    Attributes (all aligned with the sorted order): ``order`` (positions into the input arrays),
    ``track``, ``start``, ``end``, ``parent_sorted`` (sorted index of the innermost enclosing
    slice or -1), ``depth``; ``track_bounds`` maps a track code to its ``[lo, hi)`` range.
    """

    def __init__(self, track: np.ndarray, start: np.ndarray, end: np.ndarray):
        n = len(track)
        pos = np.arange(n, dtype=np.int64)
        order = np.lexsort((pos, -end, start, track)) if n else pos
        self.order = order
        self.track = track[order]
        self.start = start[order]
        self.end = end[order]
        self.parent_sorted = _previous_greater_equal(self.track, self.end)
        self.depth = _chain_length(self.parent_sorted)
        if n:
            change = np.flatnonzero(np.diff(self.track)) + 1
            los = np.concatenate(([0], change))
            his = np.concatenate((change, [n]))
            self.track_bounds = {int(self.track[lo]): (int(lo), int(hi)) for lo, hi in zip(los, his)}
        else:
            self.track_bounds = {}

    def parents(self) -> tuple[np.ndarray, np.ndarray]:
        """``(parent_pos, depth)`` in input order: parent as input position (-1 at top level)."""
        n = len(self.order)
        parent = np.full(n, _NONE, np.int64)
        depth = np.zeros(n, np.int32)
        ps = self.parent_sorted
        has = ps >= 0
        parent[self.order[has]] = self.order[ps[has]]
        depth[self.order] = self.depth
        return parent, depth

    def improper(self) -> np.ndarray:
        """Per slice (input order): True when it starts inside an earlier slice of its track and ends
        after it (partial overlap, ``bug_cases.md`` B11/B12: A ``[0, 10)``, B ``[5, 15)`` → B).

        Such a slice is kept, with the innermost slice that really encloses it as parent (or none):
        the nesting never drops or clips it. Exact integer comparisons; touching slices
        (``end == start``) do not overlap. For slice ``i`` with parent ``p`` (sorted order), every
        slice between ``p`` and ``i`` ends before ``i``; ``i`` is improper when one of them is still
        open at ``i``'s start, found by climbing parent pointers from ``i - 1`` to ``p``.
        """
        n = len(self.order)
        out = np.zeros(n, bool)
        if n < 2:
            return out
        idx = np.arange(1, n, dtype=np.int64)
        idx = idx[(self.track[idx] == self.track[idx - 1]) & (self.parent_sorted[idx] != idx - 1)]
        p = self.parent_sorted[idx]
        c = idx - 1  # > p here: the previous slice is not the parent
        start = self.start[idx]
        bad = np.zeros(len(idx), bool)
        act = np.arange(len(idx))
        for _ in range(64):
            if not len(act):
                break
            ca = c[act]
            live = (ca > p[act]) & (ca >= 0)
            act, ca = act[live], ca[live]
            still_open = self.end[ca] > start[act]
            bad[act[still_open]] = True
            act = act[~still_open]
            c[act] = self.parent_sorted[ca[~still_open]]
        else:  # pathological depth: finish element-wise
            for k in act.tolist():
                ck = c[k]
                while ck > p[k] and ck >= 0 and self.end[ck] <= start[k]:
                    ck = self.parent_sorted[ck]
                bad[k] = ck > p[k] and ck >= 0
        out[self.order[idx[bad]]] = True
        return out

    def enclosing(self, track: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """Sorted index of the innermost slice on ``track`` with start <= ts <= end, else -1."""
        cand = self._last_start_at_or_before(track, ts)
        # climb to the first ancestor that still contains ts
        for _ in range(64):
            ok = cand >= 0
            bad = np.zeros(len(cand), bool)
            bad[ok] = self.end[cand[ok]] < ts[ok]
            if not bad.any():
                break
            cand[bad] = self.parent_sorted[cand[bad]]
        else:  # pathological depth: finish element-wise
            for i in np.flatnonzero(cand >= 0):
                c = cand[i]
                while c >= 0 and self.end[c] < ts[i]:
                    c = self.parent_sorted[c]
                cand[i] = c
        return cand

    def next_starting(self, track: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """Sorted index of the first slice on ``track`` starting at or after ``ts``, else -1."""
        out = np.full(len(ts), _NONE, np.int64)
        for t in np.unique(track):
            bounds = self.track_bounds.get(int(t))
            if bounds is None:
                continue
            lo, hi = bounds
            sel = np.flatnonzero(track == t)
            k = np.searchsorted(self.start[lo:hi], ts[sel], side="left")
            found = k < hi - lo
            out[sel[found]] = lo + k[found]
        return out

    def _last_start_at_or_before(self, track: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """Sorted index of the last slice on ``track`` starting at or before ``ts``, else -1."""
        out = np.full(len(ts), _NONE, np.int64)
        for t in np.unique(track):
            bounds = self.track_bounds.get(int(t))
            if bounds is None:
                continue
            lo, hi = bounds
            sel = np.flatnonzero(track == t)
            k = np.searchsorted(self.start[lo:hi], ts[sel], side="right") - 1
            found = k >= 0
            out[sel[found]] = lo + k[found]
        return out


def _previous_greater_equal(track: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For each i (sorted by track, start asc, end desc): nearest j < i on the same track with
    end[j] >= end[i], else -1.

    This equals the classic stack algorithm (pop while top.end < end[i]; the top is the parent),
    i.e. the innermost enclosing slice, with a slice ending exactly at its parent's end nested.
    Computed by synchronous pointer jumping (O(n log n) worst case, a few rounds in practice).
    """
    n = len(end)
    cand = np.arange(n, dtype=np.int64) - 1
    if n:
        first = np.ones(n, bool)
        first[1:] = track[1:] != track[:-1]
        cand[first] = _NONE
    active = np.flatnonzero(cand >= 0)
    while len(active):
        c = cand[active]
        unresolved = end[c] < end[active]
        active = active[unresolved]
        if not len(active):
            break
        cand[active] = cand[cand[active]]
        active = active[cand[active] >= 0]
    return cand


def _chain_length(parent: np.ndarray) -> np.ndarray:
    """Number of ancestors of each node of a parent-pointer forest (-1 = root), by doubling."""
    depth = (parent >= 0).astype(np.int32)
    jump = parent.copy()
    active = np.flatnonzero(jump >= 0)
    while len(active):
        j = jump[active]
        depth[active] += depth[j]
        jump[active] = jump[j]
        active = active[jump[active] >= 0]
    return depth


def correlation_link_keys(
    corr: np.ndarray, valid: np.ndarray, pid: np.ndarray, is_host: np.ndarray
) -> tuple[np.ndarray, bool]:
    """Keys that join device rows to their host launch rows, safe on merged multi-rank traces.

    A correlation id is unique within one profiled process, so it alone links a kernel to its launch.
    A file merged from several ranks (``bug_cases.md`` B19: TraceFusion-style outputs) reuses the same
    ids in every rank: a correlation value carried by host rows of more than one ``pid`` and by a
    device row is *colliding*, and rows with it are keyed by ``(pid, correlation)`` instead, so that a device row
    links only to a launch of its own pid (merged files give each rank its own pid) and never to
    another rank's. Rows with other correlations keep the plain id (the usual layout, where device
    rows carry the device index as pid, is unchanged).

    Args:
        corr: int64 correlation per row; valid: bool mask of rows that have one.
        pid: int64 process key per row (any int64; ``pid`` column or the parser's pid key).
        is_host: bool mask of host rows (not device-side).

    Returns:
        ``(keys, merged)``: int64 keys (equal keys = same link group; -1 where ``valid`` is False; all
        keys >= 0), and whether any correlation collides. O(n log n) (sorts), independent of the
        number of ranks.
    """
    corr = np.asarray(corr, np.int64)
    pid = np.asarray(pid, np.int64)
    valid = np.asarray(valid, bool) & (corr >= 0)
    keys = np.where(valid, corr, -1)
    host = np.flatnonzero(valid & np.asarray(is_host, bool))
    if host.size < 2:
        return keys, False
    hc = np.sort(corr[host])
    dup = np.unique(hc[1:][hc[1:] == hc[:-1]])  # ids on several host rows (usually none: a fast exit)
    if dup.size == 0:
        return keys, False
    sel = host[np.isin(corr[host], dup)]
    o = np.lexsort((pid[sel], corr[sel]))
    c_s, p_s = corr[sel][o], pid[sel][o]
    first = np.ones(c_s.size, bool)
    first[1:] = (c_s[1:] != c_s[:-1]) | (p_s[1:] != p_s[:-1])  # first row of each distinct (corr, pid)
    vals, counts = np.unique(c_s[first], return_counts=True)
    colliding = vals[counts > 1]
    if colliding.size:  # only ids that link device work (host-only ids may repeat, e.g. MTIA runtime rows)
        colliding = np.intersect1d(colliding, corr[valid & ~np.asarray(is_host, bool)])
    if colliding.size == 0:
        return keys, False
    rows = np.flatnonzero(valid & np.isin(corr, colliding))
    o = np.lexsort((pid[rows], corr[rows]))
    c_s, p_s = corr[rows][o], pid[rows][o]
    new = np.ones(rows.size, bool)
    new[1:] = (c_s[1:] != c_s[:-1]) | (p_s[1:] != p_s[:-1])
    base = int(corr[valid].max()) + 1
    keys[rows[o]] = base + np.cumsum(new) - 1
    return keys, True


def bind_flows(
    fi: dict,
    xpos: np.ndarray,
    slices: SliceIndex,
    flow_id: np.ndarray,
    flow_ok: np.ndarray,
    fb_id: np.ndarray,
    fb_ok: np.ndarray,
) -> None:
    """Bind flow points to ``X`` rows, writing the flow ids into the given per-row arrays.

    Chrome-trace binding points (Kineto format §2.3: ``ac2g`` ``s`` on the launch, ``f`` with ``bp:"e"``
    on the device row): an ``s``, and an ``f`` with ``bp:"e"``, bind to the innermost slice enclosing
    their ``ts`` on their (pid, tid) track (:meth:`SliceIndex.enclosing`); any other ``f`` binds to the
    next slice starting at or after its ``ts`` on the track (:meth:`SliceIndex.next_starting`). When
    several flows of a kind bind to one row, the first in file order wins.

    Args:
        fi: flow points, equal-length arrays: ``kind`` (1 = launch flow ``ac2g``/``async_cpu_to_gpu``/
            2021 ``async`` + ``launch``, 2 = ``fwdbwd``/``forward_backward``/``fwd_bwd``, other = ignored),
            ``ts`` (int64 ns, on the rows' clock), ``ok`` (valid ``ts`` and ``id``), ``id``, ``is_f``
            (phase ``f``), ``bp_e`` (``bp:"e"``), ``track`` (codes comparable with the slices' tracks).
        xpos: row position of each ``X`` slice given to ``slices`` (input order).
        slices: the :class:`SliceIndex` of those ``X`` rows.
        flow_id, flow_ok: per-row launch-flow id and mask, written in place.
        fb_id, fb_ok: per-row forward/backward flow id and mask, written in place.
    """
    ts, track, ok = fi["ts"], fi["track"], fi["ok"]
    target = np.full(len(ts), -1, np.int64)
    slice_rows = xpos[slices.order]  # sorted slice index -> row position
    enclosing = ok & (~fi["is_f"] | fi["bp_e"])
    nxt = ok & fi["is_f"] & ~fi["bp_e"]
    if enclosing.any():
        e_idx = np.flatnonzero(enclosing)
        enc = slices.enclosing(track[e_idx], ts[e_idx])
        good = enc >= 0
        target[e_idx[good]] = slice_rows[enc[good]]
    if nxt.any():
        n_idx = np.flatnonzero(nxt)
        nx = slices.next_starting(track[n_idx], ts[n_idx])
        good = nx >= 0
        target[n_idx[good]] = slice_rows[nx[good]]
    for k, out_id, out_ok in ((1, flow_id, flow_ok), (2, fb_id, fb_ok)):
        m = np.flatnonzero((fi["kind"] == k) & (target >= 0))
        if not len(m):
            continue
        tgt = target[m]
        _, first = np.unique(tgt, return_index=True)
        out_id[tgt[first]] = fi["id"][m[first]]
        out_ok[tgt[first]] = True


def external_id_links(
    key: np.ndarray, ext: np.ndarray, ext_ok: np.ndarray, is_gpu: np.ndarray, launch_cat: np.ndarray
) -> np.ndarray:
    """Link keys extended with ``External id`` pairs for device rows that have no correlation.

    ``bug_cases.md`` B18 (ROCm traces whose device rows carry only ``External id``): a device row without
    a link key joins its launch on ``External id`` when exactly one launch row (``launch_cat``: category
    ``cuda_runtime``/``cuda_driver``, e.g. ``hipLaunchKernel``) and exactly one such device row carry the
    value; the pair gets a fresh key above every existing one. Ambiguous values stay unlinked.

    Args:
        key: int64 link key per row (-1 = none), e.g. from :func:`correlation_link_keys`.
        ext, ext_ok: int64 ``External id`` per row and its mask.
        is_gpu: device-side rows; launch_cat: host launch-call rows.

    Returns:
        the keys (a new array when any pair was linked, else ``key`` itself).
    """
    dev = np.flatnonzero(is_gpu & (key < 0) & ext_ok)
    host = np.flatnonzero(launch_cat & ~is_gpu & ext_ok)
    if not len(dev) or not len(host):
        return key
    hk, hc = np.unique(ext[host], return_counts=True)
    dk, dc = np.unique(ext[dev], return_counts=True)
    both = np.intersect1d(hk[hc == 1], dk[dc == 1])
    if not len(both):
        return key
    key = key.copy()
    base = int(key.max()) + 1 if len(key) else 0
    for rows in (host, dev):
        sel = rows[np.isin(ext[rows], both)]
        key[sel] = base + np.searchsorted(both, ext[sel])
    return key


def time_links(
    key: np.ndarray, orphans: np.ndarray, launches: np.ndarray, is_gpu: np.ndarray, ts_ns: np.ndarray
) -> tuple[np.ndarray, int]:
    """Link keys extended by time for device rows that have neither a correlation nor a unique External id.

    ROCm writes correlation id 0 on some device activities (roctracer #100): 0 means absent. Such a row is
    joined to the launch call (``launches``: host launch rows) that has no device row yet and started last at
    or before the row's start — the launching thread's window that contains the start. Rows are taken in
    time order and each launch links one row; a row with no such launch stays unlinked.

    Args:
        key: int64 link key per row (-1 = none); orphans: the device rows to link; launches: host launch rows;
        is_gpu: device-side rows; ts_ns: int64 start per row.

    Returns:
        ``(keys, n_linked)``: the keys (a new array when any row was linked) and the rows linked.
    """
    dev = np.flatnonzero(orphans & (key < 0))
    if not len(dev):
        return key, 0
    host = np.flatnonzero(launches)
    if len(host):  # launches already linked to a device row are not free
        host = host[(key[host] < 0) | ~np.isin(key[host], key[(key >= 0) & is_gpu])]
    host = host[np.argsort(ts_ns[host], kind="stable")]
    free = ts_ns[host].tolist()
    used = np.zeros(len(host), bool)
    key = key.copy()
    base = int(key.max()) + 1 if len(key) else 0
    n = 0
    for d in dev[np.argsort(ts_ns[dev], kind="stable")].tolist():
        j = int(np.searchsorted(free, ts_ns[d], side="right")) - 1
        while j >= 0 and used[j]:
            j -= 1
        if j < 0:
            continue
        used[j] = True
        key[d] = key[host[j]] = base + n
        n += 1
    return key, n


def profiler_steps(
    name_arr,
    is_x: np.ndarray,
    is_gpu: np.ndarray,
    ts_ns: np.ndarray,
    end_ns: np.ndarray,
    corr: np.ndarray,
    corr_ok: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, int]:
    """ProfilerStep number of every row, as HTA splits iterations (``kineto_and_hta.md`` §1).

    A CPU row gets the ``N`` of the latest-starting CPU ``X`` slice named ``ProfilerStep#N`` (Kineto format
    §2.6: a ``user_annotation`` on the main thread) that starts at or before it, when that slice has not
    ended by the row's start (int ns, inclusive end; steps that do not nest are still split by time, B12).
    A device row gets the step of the first CPU row (in row order) with the same link key, i.e. its launch
    (``corr``: the keys of :func:`correlation_link_keys` / :func:`external_id_links`).

    Args:
        name_arr: Arrow string array (or ChunkedArray) of names; is_x: phase ``X``; is_gpu: device rows.
        ts_ns, end_ns: start and end, int64 ns; corr, corr_ok: int64 link key per row and its mask.

    Returns:
        ``(step, ok, n_steps)``: int64 step per row (0 where ``ok`` is False), and the number of
        distinct step numbers found.
    """
    n = len(ts_ns)
    step = np.zeros(n, np.int64)
    ok = np.zeros(n, bool)
    if n == 0:
        return step, ok, 0
    is_step = bool_np(pc.starts_with(name_arr, _STEP_PREFIX)) & is_x & ~is_gpu
    sidx = np.flatnonzero(is_step)
    nums, keep = [], []
    for i, nm in zip(sidx.tolist(), take_arrow(name_arr, pa.array(sidx)).to_pylist()):
        tail = nm[len(_STEP_PREFIX) :]
        if tail.isdigit():
            nums.append(int(tail))
            keep.append(i)
    if not keep:
        return step, ok, 0
    keep = np.array(keep, np.int64)
    nums = np.array(nums, np.int64)
    order = np.lexsort((keep, ts_ns[keep]))
    s_start, s_end, s_num = ts_ns[keep][order], end_ns[keep][order], nums[order]
    cpu = np.flatnonzero(~is_gpu)
    k = np.searchsorted(s_start, ts_ns[cpu], side="right") - 1
    inside = k >= 0
    inside[inside] = ts_ns[cpu[inside]] <= s_end[k[inside]]
    step[cpu[inside]] = s_num[k[inside]]
    ok[cpu[inside]] = True
    launch = np.flatnonzero(~is_gpu & corr_ok & ok)
    gpu = np.flatnonzero(is_gpu & corr_ok)
    if len(launch) and len(gpu):
        lc = corr[launch]
        o = np.argsort(lc, kind="stable")
        lc_s, ls = lc[o], step[launch][o]
        j = np.searchsorted(lc_s, corr[gpu])
        j_ok = j < len(lc_s)
        j_ok[j_ok] = lc_s[j[j_ok]] == corr[gpu[j_ok]]
        step[gpu[j_ok]] = ls[j[j_ok]]
        ok[gpu[j_ok]] = True
    return step, ok, int(len(np.unique(nums)))


def count_early_launches(
    key: np.ndarray, device: np.ndarray, launch_cat: np.ndarray, ts_ns: np.ndarray, end_ns: np.ndarray
) -> int:
    """Number of device-activity rows that start before the launch call they are linked to ends.

    ``bug_cases.md`` B08 (host/device clock skew under CUPTI): HTA's launch delay (kernel start − runtime
    end, ``cuda_kernel_analysis.py``) is then negative. Rows are linked by equal ``key`` (the first launch
    row of a key, in row order); times are int64 ns.

    Args:
        key: int64 link key per row (-1 = none); device: device-activity rows (kernel/memcpy/memset);
        launch_cat: host launch-call rows; ts_ns, end_ns: start and end, int64 ns.
    """
    dev = np.flatnonzero(device & (key >= 0))
    host = np.flatnonzero(launch_cat & (key >= 0))
    if not len(dev) or not len(host):
        return 0
    order = np.argsort(key[host], kind="stable")
    hk, hrow = key[host][order], host[order]
    j = np.searchsorted(hk, key[dev])
    ok = j < len(hk)
    ok[ok] = hk[j[ok]] == key[dev[ok]]
    return int((ts_ns[dev[ok]] < end_ns[hrow[j[ok]]]).sum())


def last_step_truncated(
    name_arr,
    is_x: np.ndarray,
    is_gpu: np.ndarray,
    category,
    ts_ns: np.ndarray,
    end_ns: np.ndarray,
    negative: np.ndarray,
) -> bool:
    """Does the trace look truncated inside its last ProfilerStep (``bug_cases.md`` B22)?

    True when the rows that start inside the last-starting CPU ``ProfilerStep#N`` slice (not annotations
    ``user_annotation``/``gpu_user_annotation``, not ``ProfilerStep`` rows, not negative durations, B06)
    all end before :data:`PARTIAL_TAIL_FRACTION` of the step: a profiler that stops collecting at a
    buffer limit leaves the enclosing step annotation intact while host and device events stop abruptly.
    False without a CPU step, with an empty step or no work inside it.

    Args:
        name_arr: Arrow string array of names; is_x: phase ``X``; is_gpu: device rows; category: Arrow
            string array of normalized categories; ts_ns, end_ns: int64 ns; negative: rows with dur < 0.
    """
    is_step = bool_np(pc.starts_with(name_arr, _STEP_PREFIX))
    cpu_steps = np.flatnonzero(is_step & is_x & ~is_gpu)
    if not len(cpu_steps):
        return False
    last = cpu_steps[np.argmax(ts_ns[cpu_steps])]
    s0, s1 = int(ts_ns[last]), int(end_ns[last])
    if s1 <= s0:
        return False
    span = bool_np(pc.is_in(category, pa.array(_SPAN_CATEGORIES)))
    work = ~is_step & ~span & ~negative & (ts_ns >= s0) & (ts_ns <= s1)
    if not work.any():
        return False
    return int(end_ns[work].max()) < s0 + PARTIAL_TAIL_FRACTION * (s1 - s0)
