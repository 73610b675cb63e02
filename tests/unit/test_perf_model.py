"""FLOPs and bytes per op call (jobs.analyze.efficiency.perf_model) against hand-computed shapes; the args are as
Kineto records them (several copied from corpus traces: the H100 OWLv2 and MI300X ResNet captures)."""

from __future__ import annotations

import json

import pytest

from jobs.analyze.efficiency.perf_model import ATTENTION_BACKWARD_RATIO, NORM_FLOPS_PER_ELEMENT, op_cost

BF16 = "c10::BFloat16"


def _args(dims, types, concrete=None):
    a = {"Input Dims": dims, "Input type": types}
    if concrete is not None:
        a["Concrete Inputs"] = concrete
    return a


def test_mm_is_2mnk_flops_and_each_operand_once():
    c = op_cost("aten::mm", _args([[4096, 1024], [1024, 1024]], [BF16, BF16]))
    assert c.kind == "gemm" and c.precision == "bf16" and c.dtype == BF16
    assert c.flops == 2 * 4096 * 1024 * 1024 == 8_589_934_592
    assert c.bytes == (4096 * 1024 + 1024 * 1024 + 4096 * 1024) * 2 == 18_874_368
    assert c.shape_sig == "[4096,1024]x[1024,1024]"
    assert c.intensity == pytest.approx(8_589_934_592 / 18_874_368)


def test_addmm_and_linear_of_the_owlv2_trace_agree():
    # aten::linear and the aten::addmm it calls, as recorded in the H100 OWLv2 trace
    addmm = op_cost(
        "aten::addmm",
        _args(
            [[1024], [5185, 1024], [1024, 1024], [], []], [BF16, BF16, BF16, "Scalar", "Scalar"], ["", "", "", "1", "1"]
        ),
    )
    linear = op_cost("aten::linear", _args([[1, 5185, 1024], [1024, 1024], [1024]], [BF16, BF16, BF16]))
    flops = 2 * 5185 * 1024 * 1024 + 5185 * 1024  # the GEMM, then the bias add
    nbytes = (5185 * 1024 + 1024 * 1024 + 5185 * 1024 + 1024) * 2
    assert (addmm.flops, addmm.bytes) == (linear.flops, linear.bytes) == (flops, nbytes)


def test_bmm_baddbmm_and_broadcast_matmul():
    bmm = op_cost("aten::bmm", _args([[16, 5185, 64], [16, 64, 5185]], [BF16, BF16]))
    assert bmm.flops == 2 * 16 * 5185 * 5185 * 64
    assert bmm.bytes == 16 * (5185 * 64 + 64 * 5185 + 5185 * 5185) * 2
    badd = op_cost("aten::baddbmm", _args([[16, 8, 8], [16, 8, 4], [16, 4, 8]], ["float"] * 3))
    assert badd.flops == 2 * 16 * 8 * 8 * 4 + 16 * 8 * 8 and badd.precision == "fp32"
    # [8, 1, 128, 64] @ [4, 64, 32]: batch dims broadcast to [8, 4]
    mm = op_cost("aten::matmul", _args([[8, 1, 128, 64], [4, 64, 32]], ["c10::Half"] * 2))
    assert mm.flops == 2 * (8 * 4) * 128 * 32 * 64
    # a vector operand is promoted: [64] @ [64, 32] is one row
    assert op_cost("aten::matmul", _args([[64], [64, 32]], [BF16, BF16])).flops == 2 * 64 * 32


def test_conv2d_output_size_from_stride_padding_dilation():
    # the MI300X ResNet trace: conv2d(input, weight, bias, stride=[2,2], padding=[1,1], dilation=[1,1], groups=1)
    args = _args(
        [[10, 256, 14, 14], [512, 256, 3, 3], [], [], [], [], []],
        [BF16, BF16, "", "ScalarList", "ScalarList", "ScalarList", "Scalar"],
        ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "1"],
    )
    c = op_cost("aten::conv2d", args)
    out = (14 + 2 * 1 - 1 * (3 - 1) - 1) // 2 + 1
    assert out == 7
    assert c.kind == "conv" and c.flops == 2 * 10 * 512 * out * out * 256 * 3 * 3 == 1_156_055_040
    assert c.bytes == (10 * 256 * 14 * 14 + 512 * 256 * 9 + 10 * 512 * 7 * 7) * 2
    # the same call as aten::miopen_convolution records it: padding before stride
    miopen = op_cost(
        "aten::miopen_convolution",
        _args(
            [[10, 256, 14, 14], [512, 256, 3, 3], [], [], [], [], [], [], []],
            [BF16, BF16, "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "Scalar", "Scalar"],
            ["", "", "", "[1, 1]", "[2, 2]", "[1, 1]", "1", "False", "False"],
        ),
    )
    assert (miopen.flops, miopen.bytes, miopen.shape_sig) == (c.flops, c.bytes, c.shape_sig)
    # the shapes alone do not decide the work: the signature carries what does, so one group is one cost
    assert c.shape_sig == "[10,256,14,14]x[512,256,3,3] stride=[2,2] padding=[1,1] dilation=[1,1] groups=1"
    stride1 = op_cost("aten::conv2d", {**args, "Concrete Inputs": ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "1"]})
    assert stride1.flops == 4 * c.flops and stride1.shape_sig != c.shape_sig  # a 14 x 14 output, not 7 x 7


def test_grouped_conv_and_conv_without_concrete_inputs():
    # depthwise: groups = channels, weight [C, 1, k, k]
    dw = op_cost(
        "aten::convolution",
        _args(
            [[2, 32, 8, 8], [32, 1, 3, 3], [32], [], [], [], [], [], []],
            ["float", "float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"],
            ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "32"],
        ),
    )
    assert dw.flops == 2 * 2 * 32 * 8 * 8 * 1 * 9 + 2 * 32 * 8 * 8  # + the bias add
    # the 2021 traces record no concrete inputs: the output size is unknown, so no cost (never a guess)
    assert op_cost("aten::conv2d", _args([[10, 256, 14, 14], [512, 256, 3, 3], [], [], [], [], []],
                                          [BF16, BF16, "", "ScalarList", "ScalarList", "ScalarList", "Scalar"])) is None  # fmt: skip


def test_convolution_backward_counts_the_gradients_its_mask_asks_for():
    dims = [[10, 512, 7, 7], [10, 512, 7, 7], [512, 512, 3, 3], [], [], [], [], [], [], [], []]
    types = [BF16, BF16, BF16, "ScalarList", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList"]
    types += ["Scalar", "ScalarList"]
    concrete = ["", "", "", "[0]", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1", "[True, True, False]"]
    fwd = 2 * 10 * 512 * 49 * 512 * 9
    both = op_cost("aten::convolution_backward", _args(dims, types, concrete))
    assert both.flops == 2 * fwd
    # read grad_out, input, weight; write grad input, grad weight
    assert both.bytes == (3 * 10 * 512 * 49 + 2 * 512 * 512 * 9) * 2
    weight_only = op_cost("aten::convolution_backward", _args(dims, types, [*concrete[:-1], "[False, True, False]"]))
    assert weight_only.flops == fwd and weight_only.shape_sig.endswith(" mask=[False,True,False]")


def test_attention_forward_causal_and_backward():
    q = [2, 8, 1024, 64]
    fwd_args = _args([q, q, q, [], []], [BF16, BF16, BF16, "Scalar", "Scalar"], ["", "", "", "0.0", "False"])
    fwd = op_cost("aten::_scaled_dot_product_flash_attention", fwd_args)
    assert fwd.kind == "attention" and fwd.flops == 2 * 2 * 8 * 1024 * 1024 * (64 + 64)
    assert fwd.bytes == 4 * (2 * 8 * 1024 * 64) * 2  # q, k, v read, out written: never the 1024 x 1024 scores
    causal = op_cost(
        "aten::_scaled_dot_product_flash_attention", {**fwd_args, "Concrete Inputs": ["", "", "", "0.0", "True"]}
    )
    assert causal.flops == fwd.flops / 2 and causal.shape_sig == fwd.shape_sig + " causal"
    bwd = op_cost(
        "aten::_scaled_dot_product_flash_attention_backward",
        _args([q, q, q, q, q, [], []], [BF16] * 5 + ["Scalar", "Scalar"], ["", "", "", "", "", "0.0", "False"]),
    )
    assert bwd.flops == ATTENTION_BACKWARD_RATIO * fwd.flops == 2.5 * fwd.flops


def test_elementwise_and_normalization_are_counted_by_bytes():
    # aten::mul(bf16 [1, 5185, 1024], 0-d double tensor) from the OWLv2 trace
    mul = op_cost("aten::mul", _args([[1, 5185, 1024], []], [BF16, "double"], ["", ""]))
    n = 5185 * 1024
    assert mul.kind == "elementwise" and mul.flops == n
    assert mul.bytes == n * 2 + 8 + n * 2
    assert op_cost("aten::add", _args([[4, 1], [1, 8]], ["float", "float"])).flops == 32  # broadcast output
    ln = op_cost(
        "aten::layer_norm",
        _args([[1, 5185, 1024], [], [1024], [1024], [], []], [BF16, "ScalarList", BF16, BF16, "Scalar", "Scalar"]),
    )
    assert ln.kind == "normalization" and ln.flops == NORM_FLOPS_PER_ELEMENT * n
    assert ln.bytes == 2 * n * 2 + 2 * 1024 * 2


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("aten::view", _args([[4, 4], []], ["float", "ScalarList"])),  # not modelled
        ("aten::mm", {}),  # record_shapes=False
        ("aten::add_", _args([[], [], []], ["long int", "long int", "Scalar"])),  # integer: no FLOP
        ("aten::mm", _args([[4, 3], [5, 6]], ["float", "float"])),  # inner dimensions differ
        ("aten::mm", _args([[4, 3]], ["float", "float"])),  # dims and types of unequal length
        ("aten::bmm", "not json"),
    ],
)
def test_what_the_model_cannot_determine_is_none(name, args):
    assert op_cost(name, args) is None


def test_args_json_text_is_accepted():
    args = _args([[8, 16], [16, 4]], ["float", "float"])
    assert op_cost("aten::mm", json.dumps(args)) == op_cost("aten::mm", args)
