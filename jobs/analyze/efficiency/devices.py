"""Accelerator peaks from public datasheets, and the roofline an op's achieved rate is judged against.

:data:`DEVICES` holds, per device as a profiler names it (``deviceProperties[].name`` in Kineto, ``ranks.device_name``
here), the dense peak FLOP/s per precision and the memory bandwidth, for ONE device as the framework sees it: an AMD
MI250X/MI250 package is two GCDs, each its own torch device, so its figures are halved; a Trainium chip holds
several NeuronCores, each profiled alone, so its figures are divided by ``cores``. Figures are the vendors' own, dense
(without 2:4 sparsity), boost clock:

* NVIDIA: Tesla V100 datasheet (SXM2, PCIe), A100 datasheet (SXM4 40/80 GB, PCIe 40/80 GB), H100 datasheet (SXM5,
  PCIe), H800 SXM product brief, H200 datasheet (SXM), HGX B200 specifications (÷ 8 GPUs, ÷ 2 for the sparsity their
  tensor figures assume; no fp32/fp64 figure taken), L4 datasheet.
* AMD: Instinct MI210, MI250X and MI250 data sheets (÷ 2 GCDs for MI250X/MI250), MI300X data sheet.
* AWS: Neuron documentation, "Trainium architecture" and "Trainium2 architecture" (per chip, ÷ NeuronCores).

A device not in the table has no peak: :func:`device_peaks` returns ``None`` and callers say "unknown device", never a
guess. A name shared by two parts (ROCm calls both MI250X and MI250 ``AMD Instinct MI250X / MI250``) gets the larger
figures, so no efficiency can exceed 100 % (it may understate on the smaller part; :attr:`DevicePeaks.note` says so).

The roofline (Williams, Waterman and Patterson, "Roofline: an insightful visual performance model", CACM 2009):
attainable FLOP/s = min(peak FLOP/s, intensity × bandwidth), intensity = FLOPs / bytes; an op is memory-bound when its
intensity is below the ridge point peak / bandwidth.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["DEVICES", "DevicePeaks", "Roofline", "device_peaks", "roofline"]

T = 1e12  # TFLOP/s → FLOP/s, TB/s → bytes/s


@dataclass(frozen=True)
class DevicePeaks:
    """One device's datasheet peaks.

    Attributes:
        name: the part (``"NVIDIA H100 SXM5"``).
        pattern: a regular expression matched (case-insensitive, ``re.search``) against the profiler's device name.
        flops: dense peak per precision (``fp64``, ``fp32``, ``tf32``, ``bf16``, ``fp16``, ``fp8``, ``int8``), FLOP/s
            (OP/s for int8), for one framework device.
        bandwidth: device memory bandwidth, bytes/s, for one framework device.
        source: the datasheet the figures come from.
        note: a caveat shown with the figures (empty when none).
    """

    name: str
    pattern: str
    flops: dict[str, float]
    bandwidth: float
    source: str
    note: str = ""
    _re: re.Pattern = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "_re", re.compile(self.pattern, re.IGNORECASE))

    def matches(self, device_name: str) -> bool:
        return bool(self._re.search(device_name))

    def peak_flops(self, precision: str | None, kind: str = "gemm") -> float | None:
        """The peak for ``precision`` (``None`` when the device has none for it). For fp32 matrix work (``kind`` gemm,
        conv or attention) the larger of the fp32 and tf32 peaks: cuDNN convolutions run fp32 as TF32 by default and
        matmuls do under ``allow_tf32``, so only the larger bounds every fp32 op."""
        if precision == "fp32" and kind in ("gemm", "conv", "attention"):
            got = [self.flops[p] for p in ("fp32", "tf32") if p in self.flops]
            return max(got) if got else None
        return self.flops.get(precision or "")


#: NVIDIA parts: name, pattern, fp64, fp32, tf32, fp16 (= bf16 when the part has it), fp8, int8 (dense TFLOP/s or
#: TOP/s; None: not on the datasheet), memory TB/s, bf16?, source.
# fmt: off
_NVIDIA = (
    ("NVIDIA Tesla V100 SXM2", r"V100[- ](SXM2|DGXS)", 7.8, 15.7, None, 125, None, None, 0.9, False,
     "NVIDIA Tesla V100 datasheet (DGX Station: the SXM2 part)"),
    ("NVIDIA Tesla V100S PCIe", r"V100S", 8.2, 16.4, None, 130, None, None, 1.134, False,
     "NVIDIA Tesla V100S datasheet"),
    ("NVIDIA Tesla V100 PCIe", r"V100[- ]PCIE", 7, 14, None, 112, None, None, 0.9, False,
     "NVIDIA Tesla V100 datasheet"),
    ("NVIDIA A100 SXM4 80GB", r"A100[- ]SXM4?[- ]80GB|A100-PG509-210", 9.7, 19.5, 156, 312, None, 624, 2.039, True,
     "NVIDIA A100 datasheet"),
    ("NVIDIA A100 PCIe 80GB", r"A100 80GB PCIe", 9.7, 19.5, 156, 312, None, 624, 1.935, True,
     "NVIDIA A100 datasheet"),
    ("NVIDIA A100 40GB", r"A100[- ](SXM4?|PCIE)[- ]40GB|A100-PG509-200", 9.7, 19.5, 156, 312, None, 624, 1.555, True,
     "NVIDIA A100 datasheet"),
    ("NVIDIA H100 PCIe", r"H100 PCIe", 26, 51, 378, 756, 1513, 1513, 2.0, True, "NVIDIA H100 datasheet"),
    ("NVIDIA H100 SXM5", r"H100 80GB HBM3|H100 SXM", 34, 67, 494.7, 989.4, 1978.9, 1978.9, 3.35, True,
     "NVIDIA H100 datasheet"),
    ("NVIDIA H800 SXM", r"H800", 1, 67, 494.7, 989.4, 1978.9, 1978.9, 3.35, True, "NVIDIA H800 SXM product brief"),
    ("NVIDIA H200 SXM", r"H200", 34, 67, 494.7, 989.4, 1978.9, 1978.9, 4.8, True, "NVIDIA H200 datasheet"),
    ("NVIDIA B200", r"\bB200\b", None, None, 1125, 2250, 4500, 4500, 8.0, True,
     "NVIDIA HGX B200 specifications (÷ 8 GPUs, ÷ 2 for the sparsity of their tensor figures)"),
    ("NVIDIA L4", r"\bL4\b", None, 30.3, 60, 121, 242.5, 242.5, 0.3, True, "NVIDIA L4 datasheet"),
)
# fmt: on


def _nv(name, pattern, fp64, fp32, tf32, half, fp8, int8, tbps, bf16, source) -> DevicePeaks:
    """An :data:`_NVIDIA` row as :class:`DevicePeaks` (a figure that is None is left out)."""
    figures = {"fp64": fp64, "fp32": fp32, "tf32": tf32, "fp16": half, "bf16": half if bf16 else None, "fp8": fp8}
    flops = {p: v * T for p, v in {**figures, "int8": int8}.items() if v}
    return DevicePeaks(name, pattern, flops, tbps * T, source)


#: The table, most specific pattern first (the first match wins).
DEVICES: tuple[DevicePeaks, ...] = (
    *(_nv(*row) for row in _NVIDIA),
    DevicePeaks(
        "AMD Instinct MI210",
        r"MI210",
        {"fp64": 45.3 * T, "fp32": 45.3 * T, "fp16": 181 * T, "bf16": 181 * T, "int8": 181 * T},
        1.6 * T,
        "AMD Instinct MI210 data sheet (fp64/fp32: matrix)",
    ),
    DevicePeaks(
        "AMD Instinct MI250X (one GCD)",
        r"MI250",
        {"fp64": 95.7 / 2 * T, "fp32": 95.7 / 2 * T, "fp16": 383 / 2 * T, "bf16": 383 / 2 * T, "int8": 383 / 2 * T},
        3.2768 / 2 * T,
        "AMD Instinct MI250X data sheet (÷ 2 GCDs; fp64/fp32: matrix)",
        "ROCm names MI250X and MI250 alike: the MI250X's figures, so an MI250's efficiency reads up to 6 % low",
    ),
    DevicePeaks(
        "AMD Instinct MI300X",
        r"MI300X",
        {
            "fp64": 163.4 * T,
            "fp32": 163.4 * T,
            "tf32": 653.7 * T,
            "fp16": 1307.4 * T,
            "bf16": 1307.4 * T,
            "fp8": 2614.9 * T,
            "int8": 2614.9 * T,
        },
        5.3 * T,
        "AMD Instinct MI300X data sheet (fp64/fp32: matrix)",
    ),
    DevicePeaks(
        "AWS Trainium2 (one NeuronCore-v3)",
        r"trainium2|trn2|NeuronCore-?v3",
        {"fp32": 181 / 8 * T, "tf32": 667 / 8 * T, "bf16": 667 / 8 * T, "fp16": 667 / 8 * T, "fp8": 1299 / 8 * T},
        2.9 / 8 * T,
        "AWS Neuron docs, Trainium2 architecture (per chip ÷ 8 NeuronCores)",
    ),
    DevicePeaks(
        "AWS Trainium (one NeuronCore-v2)",
        r"trainium|trn1|NeuronCore-?v2",
        {"fp32": 47.5 / 2 * T, "tf32": 190 / 2 * T, "bf16": 190 / 2 * T, "fp16": 190 / 2 * T, "fp8": 190 / 2 * T},
        0.82 / 2 * T,
        "AWS Neuron docs, Trainium architecture (per chip ÷ 2 NeuronCores)",
    ),
)


def device_peaks(device_name: str | None) -> DevicePeaks | None:
    """The :data:`DEVICES` entry of a profiler's device name (``"NVIDIA H100 80GB HBM3"``), or ``None`` when unknown."""
    if not device_name:
        return None
    return next((d for d in DEVICES if d.matches(device_name)), None)


@dataclass(frozen=True)
class Roofline:
    """Where one op's achieved rate sits on its device's roofline.

    Attributes:
        achieved_flops: FLOP/s achieved (FLOPs / duration).
        achieved_bandwidth: bytes/s achieved (bytes / duration).
        intensity: FLOP/byte.
        ridge: the device's ridge point, peak FLOP/s / bandwidth, FLOP/byte.
        bound: ``"compute"`` (intensity ≥ ridge), ``"memory"``, or ``"cache"``: faster than device memory allows
            (achieved bandwidth above its peak), so the operands came from on-chip cache (an H100's 50 MB L2 holds a
            10 MB activation written by the kernel before); FLOP/s never exceed the peak (a test checks the corpus).
        pct_of_peak_flops: achieved / peak FLOP/s × 100, %.
        pct_of_peak_bandwidth: achieved / peak bandwidth × 100, %.
        pct_of_roofline: achieved / attainable FLOP/s × 100, % (= the larger of the two above).
    """

    achieved_flops: float
    achieved_bandwidth: float
    intensity: float
    ridge: float
    bound: str
    pct_of_peak_flops: float
    pct_of_peak_bandwidth: float
    pct_of_roofline: float


def roofline(flops: float, nbytes: float, duration_ns: float, peak_flops: float, bandwidth: float) -> Roofline:
    """The roofline position of work ``flops`` (FLOP) moving ``nbytes`` (bytes) in ``duration_ns`` (ns) on a device
    of ``peak_flops`` (FLOP/s) and ``bandwidth`` (bytes/s).

    Raises:
        ValueError: a duration, byte count or peak that is not positive.
    """
    if duration_ns <= 0 or nbytes <= 0 or peak_flops <= 0 or bandwidth <= 0:
        raise ValueError(f"roofline needs positive duration, bytes and peaks: {duration_ns=} {nbytes=}")
    seconds = duration_ns * 1e-9
    af, ab = flops / seconds, nbytes / seconds
    intensity, ridge = flops / nbytes, peak_flops / bandwidth
    pf, pb = 100 * af / peak_flops, 100 * ab / bandwidth
    bound = "compute" if intensity >= ridge else "cache" if pb > 100 else "memory"
    return Roofline(af, ab, intensity, ridge, bound, pf, pb, max(pf, pb))
