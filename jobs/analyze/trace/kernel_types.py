"""Kernel types of GPU events: HTA 0.5.0's name rules, and our better rule.

Two classifications, both returning ``"COMMUNICATION"``, ``"MEMORY"``, ``"COMPUTATION"`` or
``"OTHER"``:

* :func:`hta_kernel_type` — exactly HTA 0.5.0 ``hta/utils/utils.py:get_kernel_type``, from the
  event name only. The ``ranks`` and ``steps`` tables use it so that their percentages agree with
  HTA (see ``tests/golden/test_hta_parity.py``):

  - COMMUNICATION if ``re.match(r"^nccl.*Kernel")``;
  - else MEMORY if ``re.match(r"(^Memcpy)|(^Memset)|(^dma)")``;
  - else COMPUTATION unless ``re.match(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")``
    succeeds, in which case OTHER. Because of the regex's grouping this means: OTHER when the
    name contains ``Memcpy`` or ``Sync`` anywhere or starts with ``Memset``. So ``Stream Wait
    Event`` is COMPUTATION, and so is any cpu_op that carries ``args.stream`` (HTA counts it as a
    GPU event).

* :func:`kernel_type` — our rule, available for analyses that say so. It also uses the
  collective metadata (``events.collective``) and a maintained, case-insensitive list of
  communication-kernel families. Where HTA 0.5.0 mis-types communication:

  - lower-case names such as ``nccldevkernel_*`` (HTA issue #247) and RCCL/HCCL/Gloo kernels not
    named ``nccl…Kernel`` (``rccl…``, ``hccl…``), custom all-reduce kernels named by the
    collective only (``nccl:all_reduce`` copied on a kernel, vLLM ``cross_device_reduce``…) → HTA
    says COMPUTATION, we say COMMUNICATION when the collective metadata or the family list says so;
  - ``ncclDevKernel_*`` (NCCL ≥ 2.19): HTA issue #122 reported it as COMPUTATION. In 0.5.0 the
    temporal breakdown and overlap regex ``^nccl.*Kernel`` does match it, but other HTA analyses
    still key on ``ncclKernel`` (straggler analysis, HTA issue #360); we always say COMMUNICATION.
  - ``hipMemcpy…``/``hipMemset…`` rows are MEMORY for us (HTA: OTHER / COMPUTATION), and
    ``Stream Wait Event`` is OTHER for us (HTA: COMPUTATION).

Vectorized forms (:func:`hta_kernel_types`, :func:`kernel_types`) classify each distinct name once,
so they are cheap on millions of rows.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import lru_cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "COMMUNICATION",
    "MEMORY",
    "COMPUTATION",
    "OTHER",
    "KERNEL_TYPES",
    "COMM_FAMILY_PATTERNS",
    "hta_kernel_type",
    "kernel_type",
    "hta_kernel_types",
    "kernel_types",
]

COMMUNICATION = "COMMUNICATION"
MEMORY = "MEMORY"
COMPUTATION = "COMPUTATION"
OTHER = "OTHER"
#: Codes used by the vectorized functions (index into this tuple).
KERNEL_TYPES = (COMMUNICATION, MEMORY, COMPUTATION, OTHER)
_CODE = {t: i for i, t in enumerate(KERNEL_TYPES)}

# HTA 0.5.0 hta/utils/utils.py, verbatim.
_HTA_COMM = re.compile(r"^nccl.*Kernel")
_HTA_MEMORY = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_HTA_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")

#: Communication-kernel name families (case-insensitive ``re.search``), maintained here.
COMM_FAMILY_PATTERNS: tuple[str, ...] = (
    r"^nccl.*kernel",  # ncclKernel_*, ncclDevKernel_* (NCCL), also RCCL builds named nccl*
    r"^rccl",  # RCCL kernels not renamed to nccl*
    r"^hccl",  # Huawei HCCL
    r"gloo",  # Gloo collectives on a device stream
    r"^nccl:",  # record_param_comms-style names copied on device events
    r"cross_device_reduce",  # vLLM custom all-reduce
)
# Anchored: copy/set activities are named "Memcpy HtoD …", "Memset (Device)", "hipMemcpy…", "dma…";
# a compute kernel that merely mentions memset (vLLM's ``_combined_routing_memset``) is not MEMORY.
_MEMORY = re.compile(r"^(hip|cuda)?(memcpy|memset)|^dma", re.IGNORECASE)
# CUDA synchronization rows (cat cuda_sync): "Event Sync", "Stream Sync", "Context Sync",
# "Stream Wait Event"; not "...Async".
_NOT_COMPUTE = re.compile(r"(?:^|\s)sync(?:\s|$)|synchroni[sz]e|^stream wait event", re.IGNORECASE)


def hta_kernel_type(name: str | None) -> str:
    """HTA 0.5.0 kernel type of one GPU event name (``get_kernel_type``); ``None`` → COMPUTATION.

    Source: ``hta/utils/utils.py`` (``is_comm_kernel``, ``is_memory_kernel``, ``is_compute_kernel``).
    """
    name = name or ""
    if _HTA_COMM.match(name):
        return COMMUNICATION
    if _HTA_MEMORY.match(name):
        return MEMORY
    if not _HTA_NOT_COMPUTE.match(name):
        return COMPUTATION
    return OTHER


def _comm_family(extra: Iterable[str] = ()) -> re.Pattern[str]:
    return _compile_family(tuple(extra))


@lru_cache(maxsize=32)
def _compile_family(extra: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{p})" for p in (*COMM_FAMILY_PATTERNS, *extra)), re.IGNORECASE)


def kernel_type(name: str | None, collective: str | None = None, extra_comm_patterns: Sequence[str] = ()) -> str:
    """Our kernel type of one GPU event.

    COMMUNICATION when ``collective`` (``events.collective``) is set, or the name matches
    :data:`COMM_FAMILY_PATTERNS` or ``extra_comm_patterns`` (regexes, case-insensitive, searched);
    else MEMORY when the name starts with ``Memcpy``/``Memset`` (optionally ``hip``/``cuda``-prefixed) or
    ``dma``; else OTHER for
    CUDA synchronization rows (``Event Sync``, ``Stream Sync``, ``Context Sync``,
    ``Stream Wait Event``, ``…Synchronize``); else COMPUTATION.
    """
    name = name or ""
    if collective or _comm_family(extra_comm_patterns).search(name):
        return COMMUNICATION
    if _MEMORY.search(name):
        return MEMORY
    if _NOT_COMPUTE.search(name):
        return OTHER
    return COMPUTATION


def _codes_by_unique_name(names: pa.Array | pa.ChunkedArray, classify) -> tuple[np.ndarray, np.ndarray]:
    """Dictionary-encode ``names``; return (per-row dictionary index, per-dictionary-entry code)."""
    arr = names.combine_chunks() if isinstance(names, pa.ChunkedArray) else names
    if not pa.types.is_dictionary(arr.type):
        arr = pc.dictionary_encode(arr)
    idx = arr.indices.to_numpy(zero_copy_only=False)
    if arr.null_count:
        idx = np.where(arr.is_null().to_numpy(zero_copy_only=False), len(arr.dictionary), idx)
    dict_names = arr.dictionary.to_pylist() + [None]
    codes = np.fromiter((_CODE[classify(n)] for n in dict_names), dtype=np.int8, count=len(dict_names))
    return idx.astype(np.int64), codes


def hta_kernel_types(names: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Vectorized :func:`hta_kernel_type`.

    Args:
        names: string (or dictionary) array of shape ``(n,)``.

    Returns:
        int8 array of shape ``(n,)``: index into :data:`KERNEL_TYPES`.
    """
    idx, codes = _codes_by_unique_name(names, hta_kernel_type)
    return codes[idx] if len(idx) else np.zeros(0, np.int8)


def kernel_types(
    names: pa.Array | pa.ChunkedArray,
    collectives: pa.Array | pa.ChunkedArray | None = None,
    extra_comm_patterns: Sequence[str] = (),
) -> np.ndarray:
    """Vectorized :func:`kernel_type` (int8 codes into :data:`KERNEL_TYPES`, shape ``(n,)``)."""

    def classify(n):
        return kernel_type(n, None, tuple(extra_comm_patterns))

    idx, codes = _codes_by_unique_name(names, classify)
    out = codes[idx] if len(idx) else np.zeros(0, np.int8)
    if collectives is not None and len(out):
        col = collectives.combine_chunks() if isinstance(collectives, pa.ChunkedArray) else collectives
        has = pc.and_(pc.is_valid(col), pc.not_equal(pc.utf8_length(pc.fill_null(col, "")), 0))
        out = np.where(has.to_numpy(zero_copy_only=False), _CODE[COMMUNICATION], out).astype(np.int8)
    return out
