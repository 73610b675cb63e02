"""msgspec shapes of a Kineto trace: only the fields the parser needs (the rest is skipped)."""

from __future__ import annotations

from typing import Any

import msgspec


class Event(msgspec.Struct, gc=False):
    """One ``traceEvents`` entry; ``args`` is kept as raw JSON text."""

    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    id: Any = None
    bp: Any = None
    args: msgspec.Raw = None  # type: ignore[assignment]


class Header(msgspec.Struct, gc=False):
    """Top-level object of a trace (the capture-level keys we use)."""

    traceEvents: list[Event] | None = None
    baseTimeNanoseconds: Any = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    host_name: Any = None
    hostname: Any = None
    metadata: Any = None  # dropped-event counters (bug_cases.md B22); a harness's environment (torch_version)
    torch_version: Any = None
    cuda_runtime_version: Any = None  # Kineto: CUDA_VERSION-style int (12090 = 12.9)
    hip_runtime_version: Any = None  # Kineto: HIP_VERSION-style int (60443483 = 6.4.43483)
    dropped_events: Any = None
    droppedEvents: Any = None
    # libkineto's logger output (output_json.cpp finalizeTrace): jobs/normalize/profiler_warnings.py
    WARNING: Any = None
    ERROR: Any = None
    INFO: Any = None


class TimeEvent(msgspec.Struct, gc=False):
    """``ts``/``dur`` as raw number text (for the exact decimal path)."""

    ts: msgspec.Raw = None  # type: ignore[assignment]
    dur: msgspec.Raw = None  # type: ignore[assignment]


class TimeHeader(msgspec.Struct, gc=False):
    traceEvents: list[TimeEvent] | None = None


class Args(msgspec.Struct, gc=False):
    """The ``args`` keys that become columns (kineto_and_hta.md §2.6)."""

    correlation: Any = None
    external_id: Any = msgspec.field(default=None, name="External id")
    external_id_legacy: Any = msgspec.field(default=None, name="external id")
    device: Any = None
    stream: Any = None
    collective: Any = msgspec.field(default=None, name="Collective name")
    pg_name: Any = msgspec.field(default=None, name="Process Group Name")
    group_size: Any = msgspec.field(default=None, name="Group size")
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    in_size: Any = msgspec.field(default=None, name="In msg size")
    out_size: Any = msgspec.field(default=None, name="Out msg size")
    dtype: Any = None
    seq: Any = msgspec.field(default=None, name="Seq")


DOCUMENT = msgspec.json.Decoder(Header | list[Event])
HEADER = msgspec.json.Decoder(Header)
EVENT_LIST = msgspec.json.Decoder(list[Event])
TIME_DOCUMENT = msgspec.json.Decoder(TimeHeader | list[TimeEvent])
TIME_LIST = msgspec.json.Decoder(list[TimeEvent])
ARGS_LIST = msgspec.json.Decoder(list[Args])
ARGS_ONE = msgspec.json.Decoder(Args)
RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])
EMPTY_OBJECT = msgspec.Raw(b"{}")
