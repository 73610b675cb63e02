"""Host launch calls: the runtime/driver API names that enqueue work on a device stream.

Three lists:

* :data:`HTA_LAUNCH_STATS_NAMES` — HTA 0.5.0 ``get_cuda_kernel_launch_stats``
  (``hta/analyzers/cuda_kernel_analysis.py``, ``include_memory_events=True``).
* :data:`HTA_QUEUE_NAMES` — HTA 0.5.0 ``TraceSymbolTable.get_runtime_launch_events_query``
  (``hta/common/trace_symbol_table.py``), used by its queue length and critical path.
* :data:`LAUNCH_NAMES` — ours, vendor-neutral: both HTA lists plus CUDA driver launches
  (``cuLaunchKernelEx`` — Triton/Inductor), cooperative and graph launches (``cudaGraphLaunch``,
  ``hipGraphLaunch``: one call, many kernels), HIP module launches and the async
  copy/set variants. A **deliberate difference** from HTA: HTA's launch statistics give 0 rows on
  AMD traces (``hipLaunchKernel``) and miss driver launches. Synchronous ``cudaMemcpy``/
  ``cudaMemset`` are not launch calls (they block the host; their time is not launch overhead).

:func:`launch_name_mask` matches a name exactly, after removing CUPTI's per-thread-stream and
version suffixes (``_ptsz``, ``_ptds``, ``_v7000``…), plus any ``extra_names`` given.

And the calls that do the opposite, block the host until the device catches up: :data:`SYNC_NAMES` (with its
ATen ops, device-wide syncs and the host copies that block on pageable memory), and the CUDA/HIP graph calls that
give a step's host work its context (:data:`GRAPH_LAUNCH_NAMES`, :data:`GRAPH_CAPTURE_NAMES`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "HTA_LAUNCH_STATS_NAMES",
    "HTA_QUEUE_NAMES",
    "LAUNCH_NAMES",
    "launch_name_mask",
    "is_launch_name",
    "pairs_on_key",
    "SYNC_NAMES",
    "ATEN_SYNC_NAMES",
    "DEVICE_SYNC_NAMES",
    "HOST_COPY_NAMES",
    "GRAPH_LAUNCH_NAMES",
    "GRAPH_CAPTURE_NAMES",
]

SYNC_NAMES: tuple[str, ...] = (
    "cudaDeviceSynchronize",
    "cudaStreamSynchronize",
    "cudaEventSynchronize",
    "cudaMemcpy",
    "hipDeviceSynchronize",
    "hipStreamSynchronize",
    "hipEventSynchronize",
    "hipMemcpy",
    "cuCtxSynchronize",
    "cuStreamSynchronize",
    "cuEventSynchronize",
    "aten::_local_scalar_dense",
    "aten::item",
    "aten::nonzero",
)
"""Host events that block until the device catches up (exact names): the runtime / driver
synchronize calls HTA treats as blocking (``CPGraph`` ``is_blocking``: cudaDeviceSynchronize,
cudaStreamSynchronize, cudaEventSynchronize, synchronous cudaMemcpy), their HIP and driver
equivalents, and the ATen ops ``torch.cuda.set_sync_debug_mode`` reports: ``aten::_local_scalar_dense``
(``Tensor.item()``, ``bool(tensor)``, ``.tolist()``), ``aten::item`` and ``aten::nonzero`` (output size
depends on device data). ``cudaMemcpyAsync`` is not listed: it blocks only for pageable memory, and
inside ``_local_scalar_dense`` it is covered by the op."""

#: ATen ops in :data:`SYNC_NAMES`: they block only when they reach the device (a runtime synchronize or copy inside
#: them); ``aten::item`` of a CPU tensor synchronizes nothing.
ATEN_SYNC_NAMES: tuple[str, ...] = ("aten::_local_scalar_dense", "aten::item", "aten::nonzero")
#: Device-wide synchronizations (``torch.cuda.synchronize()``): what a benchmark harness calls once per step.
DEVICE_SYNC_NAMES: tuple[str, ...] = ("cudaDeviceSynchronize", "hipDeviceSynchronize", "cuCtxSynchronize")
#: Asynchronous host copies: synchronous for pageable memory (``.item()`` and ``.cpu()`` copy through them).
HOST_COPY_NAMES: tuple[str, ...] = ("cudaMemcpyAsync", "hipMemcpyAsync", "hipMemcpyWithStream", "cuMemcpyDtoHAsync")
#: CUDA/HIP graph replays: one call launches a whole captured graph.
GRAPH_LAUNCH_NAMES: tuple[str, ...] = ("cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch")
#: CUDA/HIP graph capture and instantiation: host work that a graph replay avoids (done once, at warm-up).
GRAPH_CAPTURE_NAMES: tuple[str, ...] = (
    "cudaStreamBeginCapture",
    "cudaStreamBeginCaptureToGraph",
    "cudaStreamEndCapture",
    "cudaGraphInstantiate",
    "cudaGraphInstantiateWithFlags",
    "cuStreamBeginCapture",
    "cuStreamEndCapture",
    "cuGraphInstantiate",
    "hipStreamBeginCapture",
    "hipStreamEndCapture",
    "hipGraphInstantiate",
)

_MTIA_LAUNCH = "runFunction - job_prep_and_submit_for_execution"

HTA_LAUNCH_STATS_NAMES: tuple[str, ...] = (
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    _MTIA_LAUNCH,
    "cudaMemcpyAsync",
    "cudaMemsetAsync",
)
HTA_QUEUE_NAMES: tuple[str, ...] = (
    "cudaMemsetAsync",
    "cudaMemcpyAsync",
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cuLaunchKernel",
    _MTIA_LAUNCH,
    "hipLaunchKernel",
    "hipExtModuleLaunchKernel",
    "hipMemcpyAsync",
    "hipMemsetAsync",
    "hipMemcpyWithStream",
)
LAUNCH_NAMES: tuple[str, ...] = tuple(
    dict.fromkeys(
        (
            *HTA_LAUNCH_STATS_NAMES,
            *HTA_QUEUE_NAMES,
            # CUDA runtime
            "cudaLaunchCooperativeKernel",
            "cudaLaunchCooperativeKernelMultiDevice",
            "cudaLaunchKernelEx",
            "cudaGraphLaunch",
            "cudaMemcpy2DAsync",
            "cudaMemcpy3DAsync",
            "cudaMemcpyPeerAsync",
            "cudaMemcpyToSymbolAsync",
            "cudaMemcpyFromSymbolAsync",
            "cudaMemset2DAsync",
            "cudaMemset3DAsync",
            # CUDA driver
            "cuLaunchKernelEx",
            "cuLaunchCooperativeKernel",
            "cuGraphLaunch",
            "cuMemcpyAsync",
            "cuMemcpyHtoDAsync",
            "cuMemcpyDtoHAsync",
            "cuMemcpyDtoDAsync",
            "cuMemsetD8Async",
            "cuMemsetD16Async",
            "cuMemsetD32Async",
            # HIP
            "hipExtLaunchKernel",
            "hipModuleLaunchKernel",
            "hipLaunchCooperativeKernel",
            "hipExtLaunchKernelGGL",
            "hipGraphLaunch",
            "hipMemcpy2DAsync",
            "hipMemcpyPeerAsync",
            "hipMemsetD8Async",
            "hipMemsetD32Async",
        )
    )
)
_SUFFIX = re.compile(r"(?:_ptsz|_ptds|_v\d+)+$")


@lru_cache(maxsize=64)
def _name_set(names: tuple[str, ...]) -> frozenset[str]:
    return frozenset(names)


def is_launch_name(name: str | None, names: Sequence[str] = LAUNCH_NAMES) -> bool:
    """Whether ``name`` is a launch call of ``names`` (CUPTI suffixes ``_ptsz``/``_ptds``/``_vN`` ignored)."""
    if not name:
        return False
    s = _name_set(tuple(names))
    return name in s or _SUFFIX.sub("", name) in s


def launch_name_mask(names: pa.Array | pa.ChunkedArray, launch_names: Sequence[str] = LAUNCH_NAMES) -> np.ndarray:
    """Vectorized :func:`is_launch_name` (classifies each distinct name once).

    Returns:
        bool array of shape ``(n,)``.
    """
    arr = names.combine_chunks() if isinstance(names, pa.ChunkedArray) else names
    if len(arr) == 0:
        return np.zeros(0, bool)
    if not pa.types.is_dictionary(arr.type):
        arr = pc.dictionary_encode(arr)
    names_t = tuple(launch_names)
    hit = np.array([is_launch_name(n, names_t) for n in arr.dictionary.to_pylist()] + [False], bool)
    idx = arr.indices.fill_null(len(arr.dictionary)).to_numpy(zero_copy_only=False).astype(np.int64)
    return hit[idx]


def pairs_on_key(left: np.ndarray, right: np.ndarray, key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Inner join of two row sets on ``key`` (many-to-many, like ``pandas.merge(how="inner")``).

    Args:
        left, right: row indices (int arrays).
        key: per-row key of shape ``(n,)`` (int64).

    Returns:
        ``(l, r)``: row-index arrays of the joined pairs, ordered by left row then right row.
    """
    left = np.asarray(left, np.int64)
    right = np.asarray(right, np.int64)
    if left.size == 0 or right.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    r_order = np.lexsort((right, key[right]))
    r_sorted = right[r_order]
    r_keys = key[r_sorted]
    lo = np.searchsorted(r_keys, key[left], side="left")
    hi = np.searchsorted(r_keys, key[left], side="right")
    counts = hi - lo
    l_out = np.repeat(left, counts)
    if l_out.size == 0:
        return l_out, np.zeros(0, np.int64)
    starts = np.repeat(lo, counts)
    within = np.arange(l_out.size) - np.repeat(np.cumsum(counts) - counts, counts)
    return l_out, r_sorted[starts + within]
