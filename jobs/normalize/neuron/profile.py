"""One in-memory model for every Neuron profile output, in Neuron Explorer Parquet names.

The legacy JSON (``neuron-profile view --output-format json``), ``summary-json`` and the Explorer
Parquet export (schema 7.4.0 and later) are all read into a :class:`NeuronProfile`: a dict of
Arrow tables named and typed like the Parquet tables of schema 7.4.0 (``Instruction``,
``DmaPacket``, ``DmaPacketAggregated``, ``SemaphoreUpdate``, ``ActiveTime``, ``Throttle``,
``Flow``, ``CcOp``, ``CcInstruction``, ``PendingDma``, ``SystemProfileEvents``, ``CpuUsage``,
``HostMemUsage``), plus the ``Summary`` and ``Metadata`` rows as dicts. Events, the
``neuron_summary`` row and the critical path are computed from this one model, so the same
content gives the same numbers whatever the file format (``reference/neuron_profiles.md`` §2.7
is the legacy → Parquet crosswalk).

Units and traps (``reference/neuron_profiles.md`` §0.4–0.5), each normalized here once:

* device timestamps are **ns from profile start** (``first_hw_timestamp`` = 0); system-profile
  timestamps are **Unix epoch ns**: :attr:`NeuronProfile.time_base` says which;
* ``Summary`` durations are **seconds** (floats): :func:`seconds_to_ns`;
* ``*_percent`` fields are **0–1 fractions** in the legacy JSON and summary-json, and labelled
  ``percent`` in Parquet: :func:`percent_scale` decides per profile from the data;
* engine names differ between outputs (``Tensor``/``tensor``/``PE``/``TensorMatrix``…):
  :func:`engine_name` maps them to ``tensor``, ``vector``, ``scalar``, ``gpsimd``, ``sync``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import pyarrow as pa

from jobs.common.floats import finite_float
from jobs.normalize.errors import TraceError

__all__ = [
    "NeuronProfile",
    "UnsupportedFormatVersion",
    "ENGINES",
    "ENGINE_ALIASES",
    "engine_name",
    "percent_scale",
    "seconds_to_ns",
    "SETUP_OPCODES",
    "nth_exec_from_name",
]

#: Compute engines of a NeuronCore, in Summary naming (docs FrameworkInstruction.*_engine_instruction_count).
ENGINES = ("tensor", "vector", "scalar", "gpsimd", "sync")

#: Every engine spelling seen in Neuron outputs (lower-cased) → canonical engine. Hardware aliases
#: PE=Tensor, ACT=Scalar, DVE=Vector, POOL=GpSimd, SP=Sync (Neuron docs); legacy JSON timeline rows
#: ``TensorMatrix`` (MultiplyMoving) and ``Tensor`` (LoadStationary) are both the tensor engine;
#: ``Activation``/``Pool``/``Dve`` appear in CcOp.trigger_engine and queue names.
ENGINE_ALIASES = {
    "tensor": "tensor",
    "tensormatrix": "tensor",
    "pe": "tensor",
    "tensore": "tensor",
    "te": "tensor",
    "vector": "vector",
    "dve": "vector",
    "vectore": "vector",
    "scalar": "scalar",
    "act": "scalar",
    "activation": "scalar",
    "scalare": "scalar",
    "gpsimd": "gpsimd",
    "pool": "gpsimd",
    "gpsimde": "gpsimd",
    "sync": "sync",
    "sp": "sync",
    "synce": "sync",
}

#: Opcodes that set up or synchronize rather than compute (Summary ``total_exec_time`` definition,
#: ``reference/neuron_profiles.md`` §2.2).
SETUP_OPCODES = frozenset(
    {
        "NOP",
        "SET_ORDERING_MODE",
        "EVENT_SEMAPHORE",
        "EVENT_SEMAPHORE_RANGE_CLEAR",
        "NOTIFY",
        "COMPARE_BRANCH",
        "DRAIN",
        "WRITE",
        "TENSOR_LOAD",
        "MODIFY_POOL_CONFIG",
    }
)

_NTH_EXEC = re.compile(r"profile_exec_(\d+)\.ntff$")


def engine_name(value) -> str | None:
    """Canonical engine (``tensor``, ``vector``, ``scalar``, ``gpsimd``, ``sync``) of any spelling.

    Case-insensitive; ``None`` for ``None``/empty; unknown names are returned lower-cased (never
    dropped), e.g. a future engine.
    """
    if value is None:
        return None
    s = str(value).strip()
    if not s:
        return None
    return ENGINE_ALIASES.get(s.lower(), s.lower())


def seconds_to_ns(value) -> int | None:
    """A Summary duration in seconds (float) → integer ns (rounded); ``None`` for missing/non-finite."""
    v = finite_float(value)
    return None if v is None else int(round(v * 1e9))


def nth_exec_from_name(name) -> int | None:
    """N of an NTFF captured with ``--profile-nth-exec=N`` (named ``profile_exec_N.ntff``), else ``None``."""
    if not name:
        return None
    m = _NTH_EXEC.search(str(name))
    return int(m.group(1)) if m else None


def percent_scale(summary: dict) -> float:
    """Scale of the ``*_percent`` fields of one Summary: 1.0 (0–1 fractions) or 100.0 (0–100).

    The legacy JSON and summary-json write fractions (verified on the corpus); the Parquet schema
    labels the fields ``percent`` without saying which scale, and it changed between versions. Decided
    from the data: ``total_active_time_percent`` is compared with ``total_active_time / total_time``
    (then the per-engine and DMA ratios); when no ratio can be checked, any value above 1 means 0–100.
    """
    tt = _f(summary.get("total_time"))
    pairs = [("total_active_time_percent", "total_active_time"), ("dma_active_time_percent", "dma_active_time")]
    pairs += [(f"{e}_engine_active_time_percent", f"{e}_engine_active_time") for e in ENGINES]
    if tt and tt > 0:
        for pct_key, time_key in pairs:
            p, t = _f(summary.get(pct_key)), _f(summary.get(time_key))
            if p is None or t is None or t <= 0:
                continue
            ratio = t / tt
            if math.isclose(p, ratio, rel_tol=1e-3):
                return 1.0
            if math.isclose(p, ratio * 100, rel_tol=1e-3):
                return 100.0
    vals = [_f(v) for k, v in summary.items() if k.endswith("_percent")]
    return 100.0 if any(v is not None and v > 1.0 + 1e-9 for v in vals) else 1.0


_f = finite_float


class UnsupportedFormatVersion(TraceError):
    """A Neuron profile declares a format version newer than this reader knows (``bug_cases.md``
    B26): the file is quarantined with this reason and the flag :attr:`flag`, the batch continues."""

    flag = "unsupported_format_version"


@dataclass
class NeuronProfile:
    """One Neuron device and/or system profile in Parquet-schema naming.

    Attributes:
        profile_id: name of the profile within its file/capture (summary-json key, Parquet folder,
            JSON file stem).
        source_format: ``neuron-json``, ``neuron-summary-json``, ``neuron-parquet`` or ``neuron-system-json``.
        tables: Parquet table name → Arrow table with the schema-7.4.0 field names (only the tables
            the profile has; missing optional fields are absent or null).
        summary: the ``Summary`` row (``*_percent`` still on the file's scale; use :func:`percent_scale`).
        metadata: the ``Metadata`` row, with legacy names mapped to Parquet names
            (``pe_num_rows`` → ``tensor_engine_num_rows``, ``pe_clock_freq`` → ``tensor_engine_clock_freq``,
            ``pe_clock_others`` → ``neuroncore_clock_freq``), plus ``profiler_version``,
            ``instance_type``, ``neff_name``, ``ntff_name``, ``neuroncore_idx``, ``neuron_device_idx``
            when the file says so.
        time_base: ``device-relative-ns`` (device tables) or ``epoch-ns`` (system tables only).
        flags: data-quality flags found while reading.
    """

    profile_id: str
    source_format: str
    tables: dict[str, pa.Table] = field(default_factory=dict)
    summary: dict = field(default_factory=dict)
    metadata: dict = field(default_factory=dict)
    time_base: str = "device-relative-ns"
    flags: list[str] = field(default_factory=list)

    def table(self, name: str) -> pa.Table | None:
        """The named table, or ``None`` when the profile has no (or an empty) such table."""
        t = self.tables.get(name)
        return t if t is not None and t.num_rows else None

    def column(self, table: str, name: str, default=None) -> list:
        """Values of ``table.name`` as a Python list; ``[default] * rows`` when the field is absent."""
        t = self.tables.get(table)
        if t is None:
            return []
        if name in t.column_names:
            return t.column(name).to_pylist()
        return [default] * t.num_rows

    @property
    def has_device_data(self) -> bool:
        """True when the profile has device content (a Summary or device timeline tables)."""
        return bool(self.summary) or any(
            self.table(n) is not None for n in ("Instruction", "DmaPacket", "ActiveTime", "CcOp")
        )
