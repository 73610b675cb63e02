"""The work an op does, from the shapes torch.profiler records: FLOPs and bytes per call.

Input is one CPU op event's ``args`` as Kineto writes it with ``record_shapes=True``: ``Input Dims`` (one list per
input: a tensor's sizes, ``[]`` for a scalar, a 0-d tensor or ``None``), ``Input type`` (``c10::BFloat16``,
``float``, ``Scalar``, …) and, since torch 2.1, ``Concrete Inputs`` (the values of int, bool and int-list inputs as
text: ``"[2, 2]"``, ``"False"``). The output is an :class:`OpCost`, or ``None`` for an op this model does not cover
or whose inputs do not determine the work (never a guess).

Formulas (per call; ``es`` = bytes per element of the op's dtype; FLOP = one multiply or one add, so a
multiply-accumulate is 2, as in the MLPerf and PaLM MFU conventions and AMD TraceLens ``PerfModel``):

* GEMM ``C[M,N] = A[M,K] · B[K,N]`` (``aten::mm``, ``addmm``, ``linear``, ``matmul``, ``bmm``, ``baddbmm``): FLOPs
  = 2·M·N·K per batch entry, plus M·N for a bias or ``beta·C`` add; bytes = (M·K + K·N + M·N [+ bias]) · es: each
  operand read once and the result written once, the roofline's compulsory traffic (Williams, Waterman and Patterson,
  "Roofline", CACM 2009).
* Convolution (``aten::convolution``, ``conv1d/2d/3d``, ``_convolution``, ``cudnn_convolution``,
  ``miopen_convolution``): FLOPs = 2 · N · C_out · Π(out spatial) · (C_in / groups) · Π(kernel); out = ⌊(in + 2·pad −
  dilation·(k − 1) − 1) / stride⌋ + 1 per spatial dim (``torch.nn.Conv2d`` docs); bytes = (input + weight + output
  [+ bias]) · es. ``convolution_backward``: the forward FLOPs once for each of the input and weight gradients its
  ``output_mask`` asks for (both when the mask is not recorded); bytes = (grad_out + input + weight + the gradients
  written) · es.
* Attention (``aten::scaled_dot_product_attention``, ``_scaled_dot_product_flash_attention``,
  ``_scaled_dot_product_efficient_attention``, ``_scaled_dot_product_cudnn_attention``, ``_flash_attention_forward``):
  q ``[B, H, Lq, D]``, k ``[B, H, Lk, D]``, v ``[B, H, Lk, Dv]``: FLOPs = 2·B·H·Lq·Lk·(D + Dv) (Q·Kᵀ and P·V),
  halved when ``is_causal`` is recorded true; bytes = (q + k + v + out) · es (a fused kernel never writes the
  Lq × Lk matrix). Their ``…_backward``: 2.5 × the forward FLOPs (five Lq × Lk GEMMs against two: Dao,
  "FlashAttention-2", 2023, §3.1), bytes = (q + k + v + out + grad_out) read + (grad q, k, v) written.
* Elementwise (``add``, ``mul``, ``gelu``, ``relu``, …, in-place forms too): one FLOP per output element; bytes =
  every tensor input read + the output (the broadcast shape) written. Normalizations and softmax (``layer_norm``,
  ``native_layer_norm``, ``rms_norm``, ``batch_norm``, ``native_batch_norm``, ``group_norm``, ``softmax``,
  ``_softmax``, ``log_softmax``): bytes = input read + output of the input's shape written + parameters; FLOPs = 5
  per element (a count of convention, as TraceLens; these ops are memory-bound on every device in
  :mod:`jobs.analyze.efficiency.devices`, so the bytes decide).

Shapes in the trace are what the op received: a view's strides are not followed, so bytes are the compulsory
traffic, not what the kernel moved (a lower bound on memory traffic).
"""

from __future__ import annotations

import ast
import json
import math
from dataclasses import dataclass

__all__ = ["DTYPE_BYTES", "MODELLED_OPS", "OpCost", "op_cost", "precision_of"]

#: Bytes per element of each dtype name Kineto writes in ``Input type`` (``c10::ScalarType`` names as printed).
DTYPE_BYTES: dict[str, int] = {
    "double": 8,
    "float": 4,
    "c10::Half": 2,
    "c10::BFloat16": 2,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
    "c10::Float8_e4m3fnuz": 1,
    "c10::Float8_e5m2fnuz": 1,
    "long int": 8,
    "int": 4,
    "short int": 2,
    "signed char": 1,
    "unsigned char": 1,
    "bool": 1,
    "c10::complex<float>": 8,
    "c10::complex<double>": 16,
}

#: The precision class of a dtype: the key of a device's peak in :mod:`jobs.analyze.efficiency.devices`.
_PRECISION = {
    "double": "fp64",
    "float": "fp32",
    "c10::Half": "fp16",
    "c10::BFloat16": "bf16",
    "c10::Float8_e4m3fn": "fp8",
    "c10::Float8_e5m2": "fp8",
    "c10::Float8_e4m3fnuz": "fp8",
    "c10::Float8_e5m2fnuz": "fp8",
    "long int": "int64",
    "int": "int32",
    "signed char": "int8",
    "unsigned char": "int8",
}

_GEMM = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear"}
_CONV = {
    "aten::convolution",
    "aten::_convolution",
    "aten::conv1d",
    "aten::conv2d",
    "aten::conv3d",
    "aten::cudnn_convolution",
    "aten::miopen_convolution",
}
_ATTENTION = {
    "aten::scaled_dot_product_attention",
    "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_cudnn_attention",
    "aten::_flash_attention_forward",
    "aten::_efficient_attention_forward",
}
_ATTENTION_BACKWARD = {
    "aten::_scaled_dot_product_flash_attention_backward",
    "aten::_scaled_dot_product_efficient_attention_backward",
    "aten::_scaled_dot_product_cudnn_attention_backward",
    "aten::_flash_attention_backward",
    "aten::_efficient_attention_backward",
}
_ELEMENTWISE = {
    f"aten::{n}{suffix}"
    for n in (
        "add",
        "sub",
        "mul",
        "div",
        "relu",
        "gelu",
        "silu",
        "sigmoid",
        "tanh",
        "exp",
        "neg",
        "sqrt",
        "rsqrt",
        "pow",
        "clamp",
        "clamp_min",
        "threshold_backward",
        "gelu_backward",
        "silu_backward",
        "sigmoid_backward",
        "tanh_backward",
        "addcmul",
        "addcdiv",
        "where",
    )
    for suffix in ("", "_")
}
_NORMALIZATION = {
    "aten::layer_norm",
    "aten::native_layer_norm",
    "aten::rms_norm",
    "aten::_fused_rms_norm",
    "aten::batch_norm",
    "aten::native_batch_norm",
    "aten::group_norm",
    "aten::native_group_norm",
    "aten::softmax",
    "aten::_softmax",
    "aten::log_softmax",
    "aten::_log_softmax",
}
#: Every op name :func:`op_cost` has a formula for.
MODELLED_OPS = frozenset(
    {*_GEMM, *_CONV, "aten::convolution_backward", *_ATTENTION, *_ATTENTION_BACKWARD, *_ELEMENTWISE, *_NORMALIZATION}
)
#: FLOPs per element of a normalization or softmax (module docstring).
NORM_FLOPS_PER_ELEMENT = 5
#: FLOPs of an attention backward over its forward (FlashAttention-2 §3.1).
ATTENTION_BACKWARD_RATIO = 2.5


@dataclass(frozen=True)
class OpCost:
    """The work of one call of an op.

    Attributes:
        kind: ``gemm``, ``conv``, ``attention``, ``elementwise`` or ``normalization``.
        flops: floating-point operations per call (FLOP).
        bytes: compulsory memory traffic per call, bytes (operands read once, results written once).
        dtype: the ``Input type`` of the op's first tensor input (``c10::BFloat16``, ``float``, …).
        precision: its class (``bf16``, ``fp16``, ``fp32``, ``fp8``, ``fp64``, …; ``None`` when unknown): the peak to
            compare with (:func:`jobs.analyze.efficiency.devices.peak_flops`).
        shape_sig: the tensor inputs' sizes, ``"[4096,1024]x[1024,1024]"``, then what else decides the work
            (``stride=[2,2] padding=[1,1] dilation=[1,1] groups=1`` of a convolution, ``causal`` of an attention,
            ``mask=[True,True,False]`` of a convolution backward): the group key with the op name, so calls in one
            group do the same work.
    """

    kind: str
    flops: float
    bytes: float
    dtype: str
    precision: str | None
    shape_sig: str

    @property
    def intensity(self) -> float | None:
        """Arithmetic intensity, FLOP/byte (``None`` for zero bytes)."""
        return self.flops / self.bytes if self.bytes else None


def precision_of(dtype: str | None) -> str | None:
    """The precision class of a Kineto ``Input type`` (``"c10::BFloat16"`` → ``"bf16"``); ``None`` when unknown."""
    return _PRECISION.get(dtype or "")


def op_cost(name: str, args: dict | str | None) -> OpCost | None:
    """FLOPs and bytes of one call of CPU op ``name`` with Kineto ``args`` (a dict, or ``events.args_json`` text).

    Returns:
        The :class:`OpCost` (module docstring for each formula), or ``None`` when the op is not modelled, its args
        carry no shapes (``record_shapes=False``), or what the formula needs is not recorded (a convolution's stride
        without ``Concrete Inputs``, a non-floating dtype).
    """
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not isinstance(dims, list) or not isinstance(types, list) or len(dims) != len(types):
        return None
    concrete = args.get("Concrete Inputs")
    ins = _Inputs(dims, types, concrete if isinstance(concrete, list) and len(concrete) == len(dims) else None)
    try:
        if name in _GEMM:
            return _gemm(name, ins)
        if name in _CONV:
            return _conv(name, ins)
        if name == "aten::convolution_backward":
            return _conv_backward(ins)
        if name in _ATTENTION:
            return _attention(ins, backward=False)
        if name in _ATTENTION_BACKWARD:
            return _attention(ins, backward=True)
        if name in _ELEMENTWISE:
            return _elementwise(ins)
        if name in _NORMALIZATION:
            return _normalization(ins)
    except (ValueError, IndexError, TypeError, ZeroDivisionError):
        return None  # shapes that do not fit the op's signature: not modelled
    return None


class _Inputs:
    """The recorded inputs of one call: tensors (sizes + dtype) and concrete values by position."""

    def __init__(self, dims: list, types: list, concrete: list | None):
        self.dims, self.types, self.concrete = dims, types, concrete

    def is_tensor(self, i: int) -> bool:
        return i < len(self.types) and self.types[i] in DTYPE_BYTES and _is_sizes(self.dims[i])

    def tensors(self) -> list[int]:
        return [i for i in range(len(self.dims)) if self.is_tensor(i)]

    def shape(self, i: int) -> list[int]:
        if not self.is_tensor(i):
            raise ValueError(f"input {i} is not a tensor")
        return [int(x) for x in self.dims[i]]

    def numel(self, i: int) -> int:
        return math.prod(self.shape(i))

    def value(self, i: int):
        """The concrete value of input ``i`` parsed from its text (a list of ints, an int, a bool), or ``None``."""
        if self.concrete is None or i >= len(self.concrete) or self.concrete[i] in ("", None):
            return None
        text = str(self.concrete[i]).strip()
        if len(text) > 256:  # a size list is short; anything longer is not one of the values the formulas read
            return None
        try:  # Python literals as ATen prints them: "[2, 2]", "1", "False", "[True, True, False]"
            return ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return None

    def first_dtype(self) -> str:
        t = self.tensors()
        if not t:
            raise ValueError("no tensor input")
        return self.types[t[0]]

    def sig(self) -> str:
        return "x".join("[" + ",".join(str(int(x)) for x in self.dims[i]) + "]" for i in self.tensors())


def _is_sizes(d) -> bool:
    return isinstance(d, list) and all(isinstance(x, int) and x >= 0 for x in d)


def _floating(dtype: str) -> bool:
    return precision_of(dtype) in ("fp64", "fp32", "fp16", "bf16", "fp8")


def _cost(kind: str, flops: float, nbytes: float, ins: _Inputs, params: str = "") -> OpCost | None:
    dtype = ins.first_dtype()
    if not _floating(dtype):
        return None
    sig = ins.sig() + (f" {params}" if params else "")
    return OpCost(kind, float(flops), float(nbytes), dtype, precision_of(dtype), sig)


def _ints(v: list[int]) -> str:
    return "[" + ",".join(str(x) for x in v) + "]"


def _gemm(name: str, ins: _Inputs) -> OpCost | None:
    es = DTYPE_BYTES[ins.first_dtype()]
    if name == "aten::mm":
        (m, k), (k2, n) = ins.shape(0), ins.shape(1)
        return _gemm_cost(1, m, n, k, k2, 0, es, ins)
    if name == "aten::addmm":  # addmm(self=bias, mat1, mat2)
        (m, k), (k2, n) = ins.shape(1), ins.shape(2)
        return _gemm_cost(1, m, n, k, k2, ins.numel(0), es, ins)
    if name == "aten::bmm":
        (b, m, k), (b2, k2, n) = ins.shape(0), ins.shape(1)
        if b != b2:
            raise ValueError("batch mismatch")
        return _gemm_cost(b, m, n, k, k2, 0, es, ins)
    if name == "aten::baddbmm":  # baddbmm(self, batch1, batch2)
        (b, m, k), (_, k2, n) = ins.shape(1), ins.shape(2)
        return _gemm_cost(b, m, n, k, k2, ins.numel(0), es, ins)
    if name == "aten::linear":  # linear(input[..., K], weight[N, K], bias[N]?)
        x, w = ins.shape(0), ins.shape(1)
        m, k = math.prod(x[:-1]), x[-1]
        n, k2 = w
        bias = ins.numel(2) if ins.is_tensor(2) else 0
        return _gemm_cost(1, m, n, k, k2, bias, es, ins)
    # aten::matmul: 1-D operands are promoted, batch dims broadcast (torch.matmul docs)
    a, b = ins.shape(0), ins.shape(1)
    a2 = [1, *a] if len(a) == 1 else a
    b2 = [*b, 1] if len(b) == 1 else b
    batch = _broadcast(a2[:-2], b2[:-2])
    return _gemm_cost(math.prod(batch), a2[-2], b2[-1], a2[-1], b2[-2], 0, es, ins)


def _gemm_cost(batch: int, m: int, n: int, k: int, k2: int, bias_numel: int, es: int, ins: _Inputs) -> OpCost | None:
    if k != k2:
        raise ValueError("inner dimensions differ")
    flops = 2 * batch * m * n * k + (batch * m * n if bias_numel else 0)
    nbytes = (batch * (m * k + k * n + m * n) + bias_numel) * es
    return _cost("gemm", flops, nbytes, ins)


def _broadcast(a: list[int], b: list[int]) -> list[int]:
    out = []
    for x, y in zip([1] * (len(b) - len(a)) + a, [1] * (len(a) - len(b)) + b, strict=True):
        if x != y and 1 not in (x, y):
            raise ValueError("shapes do not broadcast")
        out.append(max(x, y))
    return out


#: Positions of (stride, padding, dilation, groups) and of ``transposed`` in each convolution signature (ATen's
#: native_functions.yaml); ``None``: not in the signature.
_CONV_ARGS = {
    "aten::convolution": (3, 4, 5, 8, 6),
    "aten::_convolution": (3, 4, 5, 8, 6),
    "aten::conv1d": (3, 4, 5, 6, None),
    "aten::conv2d": (3, 4, 5, 6, None),
    "aten::conv3d": (3, 4, 5, 6, None),
    "aten::cudnn_convolution": (3, 2, 4, 5, None),  # (input, weight, padding, stride, dilation, groups, …)
    "aten::miopen_convolution": (4, 3, 5, 6, None),  # (input, weight, bias, padding, stride, dilation, groups, …)
}


def _conv(name: str, ins: _Inputs) -> OpCost | None:
    i_stride, i_pad, i_dil, i_groups, i_transposed = _CONV_ARGS[name]
    if i_transposed is not None and ins.value(i_transposed):
        return None  # transposed convolution: not modelled
    x, w = ins.shape(0), ins.shape(1)
    n, c_in, spatial = x[0], x[1], x[2:]
    c_out, c_in_g, kernel = w[0], w[1], w[2:]
    nd = len(spatial)
    stride, pad, dil = (_per_dim(ins.value(i), nd) for i in (i_stride, i_pad, i_dil))
    groups = ins.value(i_groups)
    if None in (stride, pad, dil) or not isinstance(groups, int) or groups < 1 or c_in != c_in_g * groups:
        return None  # the output size is not determined by what was recorded
    out = [(s + 2 * p - d * (k - 1) - 1) // st + 1 for s, p, d, k, st in zip(spatial, pad, dil, kernel, stride)]
    if min(out, default=1) < 1:
        raise ValueError("empty output")
    flops = 2 * n * c_out * math.prod(out) * c_in_g * math.prod(kernel)
    bias = ins.numel(2) if name != "aten::cudnn_convolution" and ins.is_tensor(2) else 0
    out_numel = n * c_out * math.prod(out)
    es = DTYPE_BYTES[ins.first_dtype()]
    params = f"stride={_ints(stride)} padding={_ints(pad)} dilation={_ints(dil)} groups={groups}"
    nbytes = (ins.numel(0) + ins.numel(1) + bias + out_numel) * es
    return _cost("conv", flops + (out_numel if bias else 0), nbytes, ins, params)


def _per_dim(v, nd: int) -> list[int] | None:
    if isinstance(v, int) and not isinstance(v, bool):
        return [v] * nd
    if isinstance(v, list) and all(isinstance(x, int) for x in v):
        return v * nd if len(v) == 1 else v if len(v) == nd else None
    return None


def _conv_backward(ins: _Inputs) -> OpCost | None:
    """convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
    output_padding, groups, output_mask)."""
    if ins.value(7):
        return None  # transposed
    g, x, w = ins.shape(0), ins.shape(1), ins.shape(2)
    fwd = 2 * g[0] * g[1] * math.prod(g[2:]) * w[1] * math.prod(w[2:])
    mask = ins.value(10)
    recorded = isinstance(mask, list) and len(mask) == 3
    if not recorded:
        mask = [True, True, False]
    flops = fwd * (int(bool(mask[0])) + int(bool(mask[1])))
    es = DTYPE_BYTES[ins.first_dtype()]
    read = math.prod(g) + math.prod(x) + math.prod(w)
    written = (math.prod(x) if mask[0] else 0) + (math.prod(w) if mask[1] else 0) + (g[1] if mask[2] else 0)
    params = "mask=[" + ",".join(str(bool(m)) for m in mask) + "]" if recorded else ""
    return _cost("conv", flops, (read + written) * es, ins, params)


def _attention(ins: _Inputs, backward: bool) -> OpCost | None:
    # forward: (query, key, value, …); backward: (grad_out, query, key, value, out, …)
    q_i = 1 if backward else 0
    q, k, v = ins.shape(q_i), ins.shape(q_i + 1), ins.shape(q_i + 2)
    if len(q) != 4 or len(k) != 4 or len(v) != 4:
        return None
    b, h, lq, d = q
    lk, dv = k[2], v[3]
    if k[3] != d or v[2] != lk:
        raise ValueError("q, k, v do not fit")
    flops = 2 * b * h * lq * lk * (d + dv)
    causal = _is_causal(ins, backward)
    if causal:
        flops /= 2
    out = b * h * lq * dv
    es = DTYPE_BYTES[ins.first_dtype()]
    if backward:
        flops *= ATTENTION_BACKWARD_RATIO
        nbytes = (math.prod(q) + math.prod(k) + math.prod(v) + 2 * out) + (math.prod(q) + math.prod(k) + math.prod(v))
    else:
        nbytes = math.prod(q) + math.prod(k) + math.prod(v) + out
    return _cost("attention", flops, nbytes * es, ins, "causal" if causal else "")


def _is_causal(ins: _Inputs, backward: bool) -> bool:
    """``is_causal`` when recorded: the first bool concrete input after q, k, v (its position differs by variant)."""
    start = 4 if backward else 3
    for i in range(start, len(ins.dims)):
        v = ins.value(i)
        if isinstance(v, bool):
            return v
    return False


def _elementwise(ins: _Inputs) -> OpCost | None:
    t = ins.tensors()
    if not t:
        return None
    out: list[int] = []
    for i in t:
        out = _broadcast(out, ins.shape(i))
    n_out = math.prod(out)
    read = sum(ins.numel(i) * DTYPE_BYTES[ins.types[i]] for i in t)
    es = DTYPE_BYTES[ins.first_dtype()]
    return _cost("elementwise", n_out, read + n_out * es, ins)


def _normalization(ins: _Inputs) -> OpCost | None:
    t = ins.tensors()
    if not t:
        return None
    n = ins.numel(t[0])
    params = sum(ins.numel(i) * DTYPE_BYTES[ins.types[i]] for i in t[1:])
    es = DTYPE_BYTES[ins.first_dtype()]
    return _cost("normalization", NORM_FLOPS_PER_ELEMENT * n, 2 * n * es + params, ins)
