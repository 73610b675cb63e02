"""The per-rank trace model: one capture's ``events`` typed once, read by every per-rank analysis.

As HTA builds one ``Trace`` (``hta/common/trace.py``) and hands it to every analyzer, the rank stage
(:func:`jobs.analyze.job.rank_stage`) builds one :class:`RankTrace` per (job, attempt, rank, capture)
with :func:`build_rank_trace` and passes it to the breakdown and HTA statistics
(:mod:`jobs.analyze.hta`), the kernel table, the communication calls
(:mod:`jobs.analyze.collectives.calls`) and the critical path (:mod:`jobs.analyze.critical_path`, which
derives its graph inputs from the model).

The model holds the identity of the capture, the Arrow rows cast to their EVENTS types, and per-row
numpy columns (all of shape ``(n,)``) computed on first use and then kept: times (exact ns, or HTA's
µs rounding), HTA's loading rules (:mod:`jobs.analyze.trace.hta_filter`), interned names and
categories, the ``step`` of every row, kernel types, and the **launch links** between host calls and
device events.

Launch links (who launched a device event):

* :attr:`RankTrace.launcher` — ours: the host row (not ``is_gpu``) with the same ``correlation``;
  when several host rows share it, the earliest-starting one (the outermost call). On a file merged
  from several ranks that reuse correlation ids (``bug_cases.md`` B19), a reused id links only rows
  of the same ``pid`` (:func:`jobs.normalize.kineto.linkage.correlation_link_keys`), never another rank's. A device row
  without a ``correlation`` is joined on ``external_id`` (``args["External id"]``) when exactly one
  host *launch call* (:func:`jobs.analyze.trace.launches.launch_name_mask`) carries that External id and
  exactly one such device row does (bug case B18: ROCm traces whose device events have only
  ``External id``).
* :attr:`RankTrace.hta_partner` — HTA 0.5.0 ``transform_correlation_to_index``
  (``hta/common/trace.py``): over the loaded rows, GPU side = ``stream >= 0 and correlation >= 0``
  (HTA's stream and correlation, see :mod:`jobs.analyze.trace.hta_filter`) or named ``Event Sync`` /
  ``Context Sync``; host side = the other rows with a correlation; a GPU-side row's partner is the
  host-side row with the same correlation, and a host-side row's partner the GPU-side row, the
  **last** one in trace order when several (pandas assignment order). Used only in
  HTA-compatibility mode.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.analyze.trace import hta_filter
from jobs.analyze.trace.kernel_types import kernel_types
from jobs.analyze.trace.launches import launch_name_mask
from jobs.normalize.kineto.linkage import correlation_link_keys
from schemas.tables import EVENTS

__all__ = [
    "RankTrace",
    "build_rank_trace",
    "as_rank_trace",
    "typed_events",
    "IDENTITY",
    "REQUIRED_COLUMNS",
    "OPTIONAL_COLUMNS",
    "NO_STEP",
    "DEVICE_ACTIVITY_CATEGORIES",
]

#: Identity (and partition) columns of one capture.
IDENTITY = ("date", "job_id", "attempt", "rank", "capture_id")
#: EVENTS columns :func:`build_rank_trace` needs.
REQUIRED_COLUMNS = (
    *IDENTITY,
    "ph",
    "category",
    "raw_category",
    "name",
    "ts_ns",
    "dur_ns",
    "stream",
    "is_gpu",
    "correlation",
    "step",
)
#: EVENTS columns kept when present (launch links, kernel types, memcpy sizes, the critical path's
#: threads, collective metadata); see the :class:`RankTrace` properties for the defaults when absent.
OPTIONAL_COLUMNS = (
    "args_json",
    "event_id",
    "external_id",
    "pid",
    "collective",
    "tid",
    "process_name",
    "dur_raw_ns",
    "thread_name",
    "parent",
    "pg_name",
    "group_size",
    "msg_bytes",
    "seq",
)
#: ``step`` value of rows outside any ProfilerStep.
NO_STEP = np.iinfo(np.int64).min
#: Normalized categories of device *activity* (what occupies a stream): kernels, copies, sets,
#: MTIA/HPU ops. Not ``gpu_user_annotation`` (a span over other activity) nor ``cuda_sync``
#: (a wait record).
DEVICE_ACTIVITY_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset", "mtia_ccp_events", "hpu_op")
_SYNC_NAMES = ("Event Sync", "Context Sync")


def _np(col, dtype, fill) -> np.ndarray:
    return pc.fill_null(col, fill).to_numpy(zero_copy_only=False).astype(dtype)


def _mask(col) -> np.ndarray:
    return pc.fill_null(col, False).to_numpy(zero_copy_only=False).astype(bool)


def _interned(col) -> tuple[np.ndarray, list[str]]:
    """(int64 code per row, distinct values in order of first appearance); null as ``""``."""
    enc = pc.dictionary_encode(pc.fill_null(col, "")).combine_chunks()
    return enc.indices.to_numpy(zero_copy_only=False).astype(np.int64), enc.dictionary.to_pylist()


def _code_mask(code: np.ndarray, values: list[str], wanted: Iterable[str]) -> np.ndarray:
    wanted = set(wanted)
    return np.array([v in wanted for v in values] + [False], bool)[code]


def typed_events(events: pa.Table) -> pa.Table:
    """The columns the model reads, cast to their EVENTS types.

    Keeps :data:`REQUIRED_COLUMNS` and those of :data:`OPTIONAL_COLUMNS` present, in that order; tolerates e.g.
    ``large_string`` or all-null ``null``-typed columns. Raises ``KeyError`` for a missing column.
    """
    names = [*REQUIRED_COLUMNS, *(c for c in OPTIONAL_COLUMNS if c in events.column_names)]
    schema = EVENTS.arrow_schema()
    cols = []
    for c in names:
        col = events.column(c)
        want = schema.field(c).type
        cols.append(col if col.type == want else col.cast(want))
    return pa.table(cols, names=names)


def _identity(events: pa.Table) -> dict:
    ident = {}
    for c in IDENTITY:
        vals = pc.unique(events.column(c))
        if len(vals) > 1:
            raise ValueError(
                f"rank trace: expected one {c} per call, got {vals.to_pylist()[:5]}"
                f" (events of one (job_id, attempt, rank, capture_id) only)"
            )
        ident[c] = vals[0].as_py() if len(vals) else None
    return ident


class RankTrace:
    """One rank's capture: identity, typed rows and per-row numpy columns (shape ``(n,)``), computed once.

    Build it with :func:`build_rank_trace`. Every array property is computed on first use and kept.

    Attributes:
        events: the rows (:func:`typed_events`: :data:`REQUIRED_COLUMNS` + present :data:`OPTIONAL_COLUMNS`).
        identity: ``{date, job_id, attempt, rank, capture_id}`` → value (``None`` for an empty trace).
        n: number of rows.
        ts, dur, end: start, duration and end of every row, int64 ns (µs-rounded inward when
            ``hta_us_rounding``, see :func:`jobs.analyze.trace.hta_filter.hta_round_us`); null
            durations as 0.
        hta_us_rounding, time_base_ns: the time mode the model was built with.
    """

    def __init__(
        self,
        events: pa.Table,
        identity: dict,
        ts_ns: np.ndarray,
        dur_ns: np.ndarray,
        *,
        hta_us_rounding: bool = False,
        time_base_ns: int = 0,
    ):
        self.events = events
        self.identity = identity
        self.n = events.num_rows
        self.ts = np.asarray(ts_ns, np.int64)
        self.dur = np.asarray(dur_ns, np.int64)
        self.end = self.ts + self.dur
        self.hta_us_rounding = hta_us_rounding
        self.time_base_ns = time_base_ns

    @property
    def columns(self) -> list[str]:
        """Names of the columns of :attr:`events`."""
        return self.events.column_names

    def _opt(self, name: str, fill: int) -> np.ndarray:
        if name not in self.events.column_names:
            return np.full(self.n, fill, np.int64)
        return _np(self.events.column(name), np.int64, fill)

    # -- plain columns ---------------------------------------------------------------------------

    @cached_property
    def event_id(self) -> np.ndarray:
        """``event_id`` (position in ``traceEvents``; −1 when null), or the row position when absent."""
        if "event_id" not in self.events.column_names:
            return np.arange(self.n, dtype=np.int64)
        return _np(self.events.column("event_id"), np.int64, -1)

    @cached_property
    def names(self) -> pa.ChunkedArray:
        """``name`` column (Arrow)."""
        return self.events.column("name")

    @cached_property
    def _names_interned(self) -> tuple[np.ndarray, list[str]]:
        return _interned(self.events.column("name"))

    @property
    def name_code(self) -> np.ndarray:
        """Interned names: int64 code of every row's name, ``symbols[name_code[i]]`` is row ``i``'s name."""
        return self._names_interned[0]

    @property
    def symbols(self) -> list[str]:
        """The distinct names, in order of first appearance (a null name is ``""``)."""
        return self._names_interned[1]

    @cached_property
    def category_codes(self) -> tuple[np.ndarray, list[str]]:
        """Interned normalized ``category``: (int64 code per row, distinct values; null as ``""``)."""
        return _interned(self.events.column("category"))

    @cached_property
    def raw_category_codes(self) -> tuple[np.ndarray, list[str]]:
        """Interned ``raw_category`` (``cat`` as written): (int64 code per row, distinct values; null as ``""``)."""
        return _interned(self.events.column("raw_category"))

    @cached_property
    def is_gpu(self) -> np.ndarray:
        """``is_gpu`` (device-side row), null as False."""
        return _mask(self.events.column("is_gpu"))

    @cached_property
    def is_x(self) -> np.ndarray:
        """``ph == "X"`` (complete events)."""
        return _mask(pc.equal(self.events.column("ph"), "X"))

    @cached_property
    def has_dur(self) -> np.ndarray:
        """``dur_ns`` is not null."""
        return _mask(pc.is_valid(self.events.column("dur_ns")))

    @cached_property
    def step(self) -> np.ndarray:
        """``step`` (ProfilerStep N), :data:`NO_STEP` when null."""
        return _np(self.events.column("step"), np.int64, NO_STEP)

    @cached_property
    def stream(self) -> np.ndarray:
        """Our ``stream`` column, −1 when null."""
        return _np(self.events.column("stream"), np.int64, -1)

    @cached_property
    def device(self) -> np.ndarray:
        """``pid`` (device index for device rows), −1 when null or absent."""
        return self._opt("pid", -1)

    @cached_property
    def pid_null(self) -> np.ndarray:
        """``pid`` is null (or the column is absent)."""
        if "pid" not in self.events.column_names:
            return np.ones(self.n, bool)
        return _mask(pc.is_null(self.events.column("pid")))

    @cached_property
    def correlation(self) -> np.ndarray:
        """Our ``correlation`` column (args.correlation or the launch-flow id), −1 when null."""
        return _np(self.events.column("correlation"), np.int64, -1)

    @cached_property
    def external_id(self) -> np.ndarray:
        """``external_id``, −1 when null or absent."""
        return self._opt("external_id", -1)

    @cached_property
    def kernel_type_codes(self) -> np.ndarray:
        """Our kernel type of every row (:func:`jobs.analyze.trace.kernel_types.kernel_types`, no extra
        patterns): int8 codes into :data:`jobs.analyze.trace.kernel_types.KERNEL_TYPES`."""
        names = pa.DictionaryArray.from_arrays(
            pa.array(self.name_code, pa.int64()), pa.array(self.symbols, pa.string())
        )
        coll = self.events.column("collective") if "collective" in self.events.column_names else None
        return kernel_types(names, coll)

    # -- HTA's loading rules ---------------------------------------------------------------------

    @cached_property
    def loaded(self) -> np.ndarray:
        """Rows HTA loads (:func:`jobs.analyze.trace.hta_filter.loaded_mask`)."""
        return hta_filter.loaded_mask(self.events)

    @cached_property
    def hta_stream(self) -> np.ndarray:
        """The stream of every device row (:func:`jobs.analyze.trace.hta_filter.hta_stream`), −1 = none or a host
        row; with ``hta_us_rounding`` HTA's own rule (a host row with ``args.stream`` counts as GPU work)."""
        return hta_filter.hta_stream(self.events, hta_rule=self.hta_us_rounding)

    @cached_property
    def hta_correlation(self) -> np.ndarray:
        """HTA's correlation (:func:`jobs.analyze.trace.hta_filter.hta_correlation`)."""
        return hta_filter.hta_correlation(self.events)

    @cached_property
    def hta_keep(self) -> np.ndarray:
        """Rows HTA keeps after its last-step filter (:func:`jobs.analyze.trace.hta_filter.last_step_keep_mask`,
        on :attr:`ts`)."""
        return hta_filter.last_step_keep_mask(self.events, self.loaded, self.hta_stream, self.hta_correlation, self.ts)

    # -- masks -----------------------------------------------------------------------------------

    def category_in(self, values: Sequence[str]) -> np.ndarray:
        """Rows whose normalized ``category`` is in ``values``."""
        return _code_mask(*self.category_codes, values)

    def raw_category_in(self, values: Sequence[str]) -> np.ndarray:
        """Rows whose ``raw_category`` (``cat`` as written) is in ``values``."""
        return _code_mask(*self.raw_category_codes, values)

    def name_in(self, values: Sequence[str]) -> np.ndarray:
        """Rows whose ``name`` is exactly one of ``values``."""
        return _code_mask(self.name_code, self.symbols, values)

    @cached_property
    def host(self) -> np.ndarray:
        """Loaded host rows: ``X`` events that are not device-side."""
        return self.loaded & ~self.is_gpu & self.is_x

    @cached_property
    def device_activity(self) -> np.ndarray:
        """Loaded device rows in :data:`DEVICE_ACTIVITY_CATEGORIES`."""
        return self.loaded & self.is_gpu & self.category_in(DEVICE_ACTIVITY_CATEGORIES)

    @cached_property
    def parent_row(self) -> np.ndarray:
        """Per row: row index of its enclosing host call (the ``parent`` column's ``event_id``), else −1."""
        out = np.full(self.n, -1, np.int64)
        if "parent" not in self.columns or self.n == 0:
            return out
        parent = _np(self.events.column("parent"), np.int64, -1)
        order = np.argsort(self.event_id, kind="stable")
        ids = self.event_id[order]
        has = np.flatnonzero(parent >= 0)
        j = np.minimum(np.searchsorted(ids, parent[has]), ids.size - 1)
        ok = ids[j] == parent[has]
        out[has[ok]] = order[j[ok]]
        return out

    @cached_property
    def launch_call(self) -> np.ndarray:
        """Loaded host rows named like a launch call (:func:`jobs.analyze.trace.launches.launch_name_mask`)."""
        return self.host & launch_name_mask(self.names)

    # -- launch links ----------------------------------------------------------------------------

    @cached_property
    def launcher(self) -> np.ndarray:
        """Per row: row index of the host call that launched it (ours, see module doc), else −1.

        Set for :attr:`device_activity` rows only.
        """
        out = np.full(self.n, -1, np.int64)
        corr, _ = correlation_link_keys(self.correlation, self.correlation >= 0, self.device, ~self.is_gpu)
        dev = np.flatnonzero(self.device_activity & (corr >= 0))
        cpu = np.flatnonzero(self.host & (corr >= 0))
        if dev.size and cpu.size:
            # earliest-starting host row per correlation (ties: first row)
            order = np.lexsort((cpu, self.ts[cpu], corr[cpu]))
            cpu_sorted = cpu[order]
            keys = corr[cpu_sorted]
            first = np.ones(keys.size, bool)
            first[1:] = keys[1:] != keys[:-1]
            ukeys, urows = keys[first], cpu_sorted[first]
            j = np.searchsorted(ukeys, corr[dev])
            ok = j < ukeys.size
            ok[ok] = ukeys[j[ok]] == corr[dev[ok]]
            out[dev[ok]] = urows[j[ok]]
        # B18: device rows without correlation, joined on a unique External id of a launch call.
        ext = self.external_id
        dev_nc = np.flatnonzero(self.device_activity & (corr < 0) & (ext >= 0))
        launches = np.flatnonzero(self.launch_call & (ext >= 0))
        if dev_nc.size and launches.size:
            lk, lc = np.unique(ext[launches], return_counts=True)
            dk, dc = np.unique(ext[dev_nc], return_counts=True)
            unique_keys = np.intersect1d(lk[lc == 1], dk[dc == 1])
            if unique_keys.size:
                l_sel = launches[np.isin(ext[launches], unique_keys)]
                d_sel = dev_nc[np.isin(ext[dev_nc], unique_keys)]
                lo = np.argsort(ext[l_sel])
                do = np.argsort(ext[d_sel])
                out[d_sel[do]] = l_sel[lo]
        return out

    @cached_property
    def hta_partner(self) -> np.ndarray:
        """Per row: HTA's ``index_correlation`` partner row index (see module doc), else −1.

        Set both ways: a GPU-side row points to its host-side row and a host-side row to its
        GPU-side row (the last one in trace order when several).
        """
        out = np.full(self.n, -1, np.int64)
        corr = self.hta_correlation
        has = self.loaded & (corr != -1)
        gpu_side = ((self.hta_stream >= 0) & (corr >= 0)) | self.name_in(_SYNC_NAMES)
        cpu = np.flatnonzero(has & ~gpu_side)
        gpu = np.flatnonzero(has & gpu_side)
        if cpu.size == 0 or gpu.size == 0:
            return out
        for src, dst in ((gpu, cpu), (cpu, gpu)):
            # last row of the other side (trace order) with the same correlation
            order = np.lexsort((-self.event_id[dst], corr[dst]))
            dst_sorted = dst[order]
            keys = corr[dst_sorted]
            first = np.ones(keys.size, bool)
            first[1:] = keys[1:] != keys[:-1]
            ukeys, urows = keys[first], dst_sorted[first]
            j = np.searchsorted(ukeys, corr[src])
            ok = j < ukeys.size
            ok[ok] = ukeys[j[ok]] == corr[src[ok]]
            out[src[ok]] = urows[j[ok]]
        return out


def build_rank_trace(events: pa.Table, *, hta_us_rounding: bool = False, time_base_ns: int = 0) -> RankTrace:
    """The :class:`RankTrace` of one capture's ``events``.

    Args:
        events: EVENTS rows (``schemas.tables.EVENTS``) of ONE (job_id, attempt, rank, capture_id), any
            row order, with at least :data:`REQUIRED_COLUMNS` (:data:`OPTIONAL_COLUMNS` kept when present);
            may be empty.
        hta_us_rounding: read the trace as HTA does, for comparisons with HTA only: sub-µs times rounded
            inward (:func:`jobs.analyze.trace.hta_filter.hta_round_us`; the warehouse keeps exact ns) and a device
            event's own ``dur`` where the parser clipped it on its stream (``dur_raw_ns``).
        time_base_ns: with ``hta_us_rounding``, the trace's ``baseTimeNanoseconds``
            (``captures.base_time_ns``; 0 for absolute-µs traces).

    Raises:
        ValueError: a required column is missing, or ``events`` mixes several captures/ranks.
    """
    missing = [c for c in REQUIRED_COLUMNS if c not in events.column_names]
    if missing:
        raise ValueError(f"rank trace: events lack column(s) {missing}")
    events = typed_events(events)
    ident = _identity(events)
    ts = _np(events.column("ts_ns"), np.int64, 0)
    dur = _np(events.column("dur_ns"), np.int64, 0)
    if hta_us_rounding:
        if "dur_raw_ns" in events.column_names:  # HTA does not clip overlapping device events
            raw = events.column("dur_raw_ns")
            dur = np.where(_np(pc.is_valid(raw), bool, False), _np(raw, np.int64, 0), dur)
        ts, dur = hta_filter.hta_round_us(ts, dur, time_base_ns)
    return RankTrace(events, ident, ts, dur, hta_us_rounding=hta_us_rounding, time_base_ns=time_base_ns)


def as_rank_trace(
    trace: RankTrace | pa.Table,
    need: Sequence[str] = (),
    who: str = "rank trace",
    *,
    hta_us_rounding: bool | None = False,
    time_base_ns: int = 0,
) -> RankTrace:
    """``trace`` itself, or the :class:`RankTrace` of an events table (the convenience of the analyses).

    Args:
        trace: a :class:`RankTrace`, or EVENTS rows of one capture (modelled with :func:`build_rank_trace`).
        need: columns the caller reads; checked first, so the error names the caller (``who``).
        hta_us_rounding, time_base_ns: for a table, as :func:`build_rank_trace` (``None``: False); for
            a model they must match the mode it was built with (``None``: any mode).

    Raises:
        ValueError: a column of ``need`` or :data:`REQUIRED_COLUMNS` is missing, ``events`` mixes
            captures, or a model built in another time mode than asked for.
    """
    cols = trace.columns if isinstance(trace, RankTrace) else trace.column_names
    missing = [c for c in need if c not in cols]
    if missing:
        raise ValueError(f"{who}: events lack column(s) {missing}")
    if isinstance(trace, RankTrace):
        if hta_us_rounding is not None and (
            hta_us_rounding != trace.hta_us_rounding or (hta_us_rounding and time_base_ns != trace.time_base_ns)
        ):
            raise ValueError(
                f"{who}: the rank trace was built with hta_us_rounding={trace.hta_us_rounding}, "
                f"time_base_ns={trace.time_base_ns}; build it with the mode wanted"
            )
        return trace
    return build_rank_trace(trace, hta_us_rounding=bool(hta_us_rounding), time_base_ns=time_base_ns)
