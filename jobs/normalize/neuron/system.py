"""Neuron system profiles (runtime API events, ``nc_exec_running``, host CPU and memory) → ``events``.

Two documented forms, both mapped to the Parquet table names of schema 7.4.0 first
(``reference/neuron_profiles.md`` §2.3, §2.5):

* Explorer Parquet ``SystemProfileEvents`` (``id``, ``name``, ``start_ts``, ``end_ts``, ``duration_ns``,
  ``trace_event_source`` = ``neuron_rt`` / ``neuron_hw`` / ``framework``, ``instance_id``,
  ``process_id``, ``thread_id``, ``nc_idx``, ``pcore_idx``, ``worker_gid``, ``flow_id`` [string ids],
  ``framework_stream_id``, ``extra_attributes_json``), ``CpuUsage`` (``util_percent`` 0–100 per
  ``cpu_id``) and ``HostMemUsage`` (``used_bytes``, ``used_percent`` 0–100);
* ``view --output-format json`` ``system_profile.json`` (Profiler 2.0; docs example only, container
  **unverified**): ``trace_events`` (``timestamp``, ``duration`` ns, ``name``, ``group``, ``type``,
  ``process_id`` as text, ``thread_id``, ``lnc_idx``, ``instance_id``, ``id``, ``parent_id``),
  ``cpu_util`` (``cpu_id``, ``util`` 0–100) and ``mem_usage`` (``usage`` bytes, ``percent_usage`` 0–100).
  The event source is not written there: hardware-group names (``nc_exec_running``, ``cc_running``,
  ``cc_exec_barrier``, ``numerical_err``, ``nrt_model_switch``, ``timestamp_sync_point``,
  ``hw_notify``) are ``neuron_hw``, ``type`` 99999 / group ``framework-*`` is ``framework``, the rest
  ``neuron_rt`` (docs environment-variables.rst event groups).

Timestamps are **Unix epoch ns** (host clock), unlike device profiles (ns from profile start); the
two clocks are not aligned here (Neuron aligns them through ``timestamp_sync_point`` events and
documents that they are "not exactly synchronized").

Events: ``ph`` X; ``category`` ``neuron_runtime`` (neuron_rt), ``neuron_hardware`` (neuron_hw, ``is_gpu``
true, ``device`` = ``nc_idx``) or ``framework``; ``pid`` = ``process_id``, ``tid`` = ``thread_id``,
``process_name`` = ``<instance_id> pid <process_id>``; ``external_id`` = ``id``; ``flow_id`` = the first
``flow_id`` (all of them in ``args_json``; they link framework → ``nrt_execute`` → ``nc_exec_running``).
CPU and host memory samples are ``C`` counters ``cpu_util`` (tid 10000 + cpu) and ``host_memory``.
"""

from __future__ import annotations

import msgspec
import numpy as np
import pyarrow as pa

from jobs.normalize.errors import TraceError
from jobs.normalize.neuron.events import EventBlock, _args, _col, _i
from jobs.normalize.neuron.profile import NeuronProfile

__all__ = ["system_blocks", "parse_system_json", "is_system_json", "HW_EVENT_NAMES", "SOURCE_CATEGORY"]

#: Hardware event group (docs ``NEURON_RT_INSPECT_EVENT_FILTER_TYPE`` = ``hardware``).
HW_EVENT_NAMES = frozenset(
    {
        "nc_exec_running",
        "cc_running",
        "cc_exec_barrier",
        "numerical_err",
        "nrt_model_switch",
        "timestamp_sync_point",
        "hw_notify",
    }
)
#: ``trace_event_source`` → ``events.category``.
SOURCE_CATEGORY = {"neuron_rt": "neuron_runtime", "neuron_hw": "neuron_hardware", "framework": "framework"}


def is_system_json(doc) -> bool:
    """True for a ``system_profile.json`` document (an object with a ``trace_events`` list)."""
    return isinstance(doc, dict) and isinstance(doc.get("trace_events"), list) and "traceEvents" not in doc


def _source(e: dict) -> str:
    name = str(e.get("name") or "")
    if name in HW_EVENT_NAMES:
        return "neuron_hw"
    if e.get("type") == 99999 or str(e.get("group") or "").startswith("framework"):
        return "framework"
    return "neuron_rt"


def _int(v):
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def parse_system_json(data: bytes, profile_id: str) -> NeuronProfile:
    """``system_profile.json`` → :class:`NeuronProfile` with ``SystemProfileEvents``, ``CpuUsage``, ``HostMemUsage``.

    Raises:
        TraceError: invalid JSON or no ``trace_events`` list.
    """
    try:
        doc = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise TraceError(f"not valid JSON: {exc}") from None
    if not is_system_json(doc):
        raise TraceError("not a Neuron system_profile.json: no trace_events list")
    ev = [e for e in doc["trace_events"] if isinstance(e, dict)]
    known = {"timestamp", "duration", "name", "id", "instance_id", "process_id", "thread_id", "lnc_idx"}
    events = pa.table(
        {
            "id": pa.array([_int(e.get("id")) for e in ev], pa.int64()),
            "name": pa.array([str(e.get("name")) if e.get("name") is not None else None for e in ev], pa.string()),
            "start_ts": pa.array([_int(e.get("timestamp")) for e in ev], pa.int64()),
            "duration_ns": pa.array([_int(e.get("duration")) or 0 for e in ev], pa.int64()),
            "trace_event_source": pa.array([_source(e) for e in ev], pa.string()),
            "instance_id": pa.array([e.get("instance_id") for e in ev], pa.string()),
            "process_id": pa.array([_int(e.get("process_id")) for e in ev], pa.int64()),
            "thread_id": pa.array([_int(e.get("thread_id")) for e in ev], pa.int64()),
            "nc_idx": pa.array([_int(e.get("lnc_idx")) for e in ev], pa.int64()),
            "extra_attributes_json": pa.array(
                [msgspec.json.encode({k: v for k, v in e.items() if k not in known}).decode() for e in ev], pa.string()
            ),
        }
    )
    if events.num_rows and events.column("start_ts").null_count:
        raise TraceError("system_profile.json: trace_events without a numeric timestamp")
    events = events.append_column(
        "end_ts",
        pa.array(
            np.asarray(events.column("start_ts").to_numpy(zero_copy_only=False), np.int64)
            + np.asarray(events.column("duration_ns").to_numpy(zero_copy_only=False), np.int64)
        ),
    )
    cpu = [c for c in doc.get("cpu_util") or [] if isinstance(c, dict)]
    mem = [m for m in doc.get("mem_usage") or [] if isinstance(m, dict)]
    tables = {"SystemProfileEvents": events}
    if cpu:
        tables["CpuUsage"] = pa.table(
            {
                "timestamp": pa.array([_int(c.get("timestamp")) for c in cpu], pa.int64()),
                "util_percent": pa.array([c.get("util") for c in cpu], pa.float64()),
                "cpu_id": pa.array([str(c.get("cpu_id")) for c in cpu], pa.string()),
                "instance_id": pa.array([c.get("instance_id") for c in cpu], pa.string()),
            }
        )
    if mem:
        tables["HostMemUsage"] = pa.table(
            {
                "timestamp": pa.array([_int(m.get("timestamp")) for m in mem], pa.int64()),
                "used_bytes": pa.array([_int(m.get("usage")) for m in mem], pa.int64()),
                "used_percent": pa.array([m.get("percent_usage") for m in mem], pa.float64()),
                "instance_id": pa.array([m.get("instance_id") for m in mem], pa.string()),
            }
        )
    return NeuronProfile(profile_id=profile_id, source_format="neuron-system-json", tables=tables, time_base="epoch-ns")


def _first_flow(v):
    if not v:
        return None
    try:
        return int(v[0])
    except (TypeError, ValueError):
        return None


def system_blocks(p: NeuronProfile) -> list[EventBlock]:
    """Event blocks of the system tables of ``p`` (see the module docstring)."""
    blocks = []
    t = p.table("SystemProfileEvents")
    if t is not None:
        src = _col(t, "trace_event_source")
        cat = [SOURCE_CATEGORY.get(s, s or "neuron_runtime") for s in src]
        inst, pidv = _col(t, "instance_id"), _col(t, "process_id")
        tid = _col(t, "thread_id")
        nc = _col(t, "nc_idx")
        blocks.append(
            EventBlock(
                t.num_rows,
                ph="X",
                category=cat,
                raw_category="SystemProfileEvents",
                name=_col(t, "name"),
                ts_ns=_i(t, "start_ts"),
                dur_ns=_i(t, "duration_ns"),
                pid=pidv,
                tid=tid,
                process_name=[f"{i or 'host'} pid {p_}" for i, p_ in zip(inst, pidv)],
                thread_name=[
                    f"NeuronCore {n}" if s == "neuron_hw" and n is not None else f"thread {th}"
                    for s, n, th in zip(src, nc, tid)
                ],
                device=[n if s == "neuron_hw" else None for s, n in zip(src, nc)],
                is_gpu=[s == "neuron_hw" for s in src],
                external_id=_col(t, "id"),
                flow_id=[_first_flow(f) for f in _col(t, "flow_id")],
                args_json=_args(t, {"name", "start_ts", "end_ts", "duration_ns", "id", "process_id", "thread_id"}),
            )
        )
    t = p.table("CpuUsage")
    if t is not None:
        cpu = _col(t, "cpu_id")
        blocks.append(
            EventBlock(
                t.num_rows,
                ph="C",
                category="neuron_host",
                raw_category="CpuUsage",
                name="cpu_util",
                ts_ns=_i(t, "timestamp"),
                pid=None,
                tid=[10000 + (_int(c) or 0) for c in cpu],
                process_name=[f"{i or 'host'}" for i in _col(t, "instance_id")],
                thread_name=[f"cpu {c}" for c in cpu],
                is_gpu=False,
                args_json=_args(t, {"timestamp"}),
            )
        )
    t = p.table("HostMemUsage")
    if t is not None:
        blocks.append(
            EventBlock(
                t.num_rows,
                ph="C",
                category="neuron_host",
                raw_category="HostMemUsage",
                name="host_memory",
                ts_ns=_i(t, "timestamp"),
                pid=None,
                tid=9999,
                process_name=[f"{i or 'host'}" for i in _col(t, "instance_id")],
                thread_name="host memory",
                is_gpu=False,
                args_json=_args(t, {"timestamp"}),
            )
        )
    return blocks
