#!/usr/bin/env python3
"""Generates reference cases for the com.microsoft ops (and Gemma-relevant standard ops) with
ONNX Runtime's CPU provider: one folder per case under tests/fixtures/ops/ holding model.onnx,
test_data_set_0/input_J.pb + output_J.pb (TensorProto) and case.json (rtol/atol). Seeded, small.

Usage (repository root):
    .venv/bin/python tools/onnx/gen_contrib_refs.py [--out tests/fixtures/ops]
Checked by: cargo test -p gg-runtime --test contrib_ops
"""

import argparse
import json
import os
import shutil

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(1234)
MS = "com.microsoft"
F32_TOL = {"rtol": 1e-4, "atol": 1e-4}
F16_TOL = {"rtol": 5e-3, "atol": 5e-3}


def tt(dtype):
    return {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16, np.int64: TensorProto.INT64,
            np.int32: TensorProto.INT32, np.uint8: TensorProto.UINT8, np.bool_: TensorProto.BOOL}[dtype]


def make(name, node, inputs, outputs_meta, opset=21, inits=(), ir=10):
    g_inputs = [helper.make_tensor_value_info(n, tt(a.dtype.type), a.shape) for n, a in inputs if a is not None]
    g_outputs = [helper.make_tensor_value_info(n, tt(d), None) for n, d in outputs_meta]
    graph = helper.make_graph([node], name, g_inputs, g_outputs, initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)])
    model.ir_version = ir
    return model


def save(out, name, node, inputs, outputs_meta, tol, opset=21, inits=(), ir=10, reference=None):
    """inputs: list of (name, array or None); outputs_meta: list of (name, np dtype).
    `reference`: (node, inputs) of an equivalent graph ONNX Runtime runs, for a form it refuses."""
    model = make(name, node, inputs, outputs_meta, opset, inits, ir)
    ref_node, ref_inputs = reference or (node, inputs)
    ref_model = make(name, ref_node, ref_inputs, outputs_meta, opset, inits, ir)
    feeds = {n: a for n, a in ref_inputs if a is not None}
    sess = ort.InferenceSession(ref_model.SerializeToString(), providers=["CPUExecutionProvider"])
    results = sess.run([n for n, _ in outputs_meta], feeds)
    d = os.path.join(out, name)
    os.makedirs(os.path.join(d, "test_data_set_0"))
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(model.SerializeToString())
    j = 0
    for n, a in inputs:
        if a is None:
            continue
        with open(os.path.join(d, "test_data_set_0", f"input_{j}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(a, n).SerializeToString())
        j += 1
    for j, ((n, _), r) in enumerate(zip(outputs_meta, results)):
        with open(os.path.join(d, "test_data_set_0", f"output_{j}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(r, n).SerializeToString())
    with open(os.path.join(d, "case.json"), "w") as f:
        json.dump(tol, f)


def nbits_case(out, rng, bits, block, k, n, m, zp, dt, bias):
    """One MatMulNBits case: A [m, k], random B blocks, scales, optional zero points and bias."""
    nb = (k + block - 1) // block
    blob = block * bits // 8
    a = rng.standard_normal((m, k)).astype(dt)
    b = rng.integers(0, 256, (n, nb, blob), dtype=np.uint8)
    scales = (rng.random((n * nb,)) * 0.1 + 0.01).astype(dt)
    inputs = [("A", a), ("B", b), ("scales", scales)]
    names = ["A", "B", "scales"]
    if zp:
        zb = (nb * bits + 7) // 8
        inputs.append(("zero_points", rng.integers(0, 256, (n * zb,), dtype=np.uint8)))
        names.append("zero_points")
    if bias:
        if not zp:
            names.append("")
        names += ["", "bias"]
        inputs.append(("bias", rng.standard_normal((n,)).astype(dt)))
    node = helper.make_node("MatMulNBits", names, ["Y"], domain=MS, K=k, N=n, bits=bits, block_size=block)
    name = f"matmulnbits_b{bits}_blk{block}_k{k}_n{n}_m{m}_{'zp' if zp else 'nozp'}_{np.dtype(dt).name}{'_bias' if bias else ''}"
    save(out, name, node, inputs, [("Y", dt)], F16_TOL if dt == np.float16 else F32_TOL)


def matmul_nbits(out):
    for bits, block, k, n, m, zp, dt, bias in [
        (4, 32, 64, 24, 1, True, np.float32, False),
        (4, 32, 80, 24, 1, True, np.float32, False),   # K not a multiple of the block
        (4, 16, 48, 16, 3, False, np.float32, True),
        (4, 64, 128, 20, 1, True, np.float16, False),
        (4, 128, 200, 12, 2, False, np.float16, True),
        (8, 32, 96, 16, 1, True, np.float32, False),
        (8, 16, 40, 8, 4, False, np.float32, False),
        (8, 64, 64, 10, 1, True, np.float16, True),
        (4, 32, 72, 20, 11, True, np.float32, True),    # two row tiles, the second partial
        (4, 32, 64, 18, 9, False, np.float16, False),
    ]:
        nbits_case(out, RNG, bits, block, k, n, m, zp, dt, bias)


def gather_block_quantized(out):
    for bits, block, rows, k, zp, dt in [(4, 32, 10, 64, True, np.float32), (4, 16, 7, 48, False, np.float16),
                                          (4, 32, 9, 96, True, np.float16), (8, 32, 6, 64, True, np.float32)]:
        nb = (k + block - 1) // block
        data = RNG.integers(0, 256, (rows, k * bits // 8), dtype=np.uint8)
        scales = (RNG.random((rows, nb)) * 0.1 + 0.01).astype(dt)
        idx = RNG.integers(0, rows, (2, 3)).astype(np.int64)
        inputs = [("data", data), ("indices", idx), ("scales", scales)]
        names = ["data", "indices", "scales"]
        if zp:
            inputs.append(("zero_points", RNG.integers(0, 256, (rows, (nb * bits + 7) // 8), dtype=np.uint8)))
            names.append("zero_points")
        node = helper.make_node("GatherBlockQuantized", names, ["Y"], domain=MS, bits=bits, block_size=block, gather_axis=0, quantize_axis=1)
        save(out, f"gatherblockquantized_b{bits}_blk{block}_{'zp' if zp else 'nozp'}_{np.dtype(dt).name}", node, inputs, [("Y", dt)],
             F16_TOL if dt == np.float16 else F32_TOL)


def norms(out):
    for dt in (np.float32, np.float16):
        tol = F16_TOL if dt == np.float16 else F32_TOL
        x = RNG.standard_normal((2, 3, 64)).astype(dt)
        g = RNG.standard_normal((64,)).astype(dt)
        node = helper.make_node("SimplifiedLayerNormalization", ["x", "g"], ["y"], epsilon=1e-6, axis=-1, stash_type=1)
        save(out, f"simplifiedlayernorm_{np.dtype(dt).name}", node, [("x", x), ("g", g)], [("y", dt)], tol)
        skip = RNG.standard_normal((2, 3, 64)).astype(dt)
        bias = RNG.standard_normal((64,)).astype(dt)
        node = helper.make_node("SkipSimplifiedLayerNormalization", ["x", "skip", "g", "bias"], ["y", "", "", "sum"], domain=MS, epsilon=1e-6)
        save(out, f"skipsimplifiedlayernorm_bias_{np.dtype(dt).name}", node, [("x", x), ("skip", skip), ("g", g), ("bias", bias)],
             [("y", dt), ("sum", dt)], tol)
        node = helper.make_node("SkipSimplifiedLayerNormalization", ["x", "skip", "g"], ["y"], domain=MS, epsilon=1e-5)
        save(out, f"skipsimplifiedlayernorm_{np.dtype(dt).name}", node, [("x", x), ("skip", skip), ("g", g)], [("y", dt)], tol)


def gelu(out):
    for approx in ("none", "tanh"):
        for dt in (np.float32, np.float16):
            x = (RNG.standard_normal((3, 50)) * 3).astype(dt)
            node = helper.make_node("Gelu", ["x"], ["y"], approximate=approx)
            save(out, f"gelu_{approx}_{np.dtype(dt).name}", node, [("x", x)], [("y", dt)], F16_TOL if dt == np.float16 else F32_TOL, opset=21)
    x = (RNG.standard_normal((3, 50)) * 3).astype(np.float32)
    save(out, "gelu_ms_float32", helper.make_node("Gelu", ["x"], ["y"], domain=MS), [("x", x)], [("y", np.float32)], F32_TOL)


def rope_cache(max_pos, half, theta=10000.0):
    inv = 1.0 / theta ** (np.arange(half) / half)
    f = np.outer(np.arange(max_pos), inv)
    return np.cos(f), np.sin(f)


def rotary(out):
    for interleaved in (0, 1):
        for dt in (np.float32, np.float16):
            b, s, h, d = 2, 5, 3, 16
            x = RNG.standard_normal((b, s, h * d)).astype(dt)
            pos = np.array([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11]], dtype=np.int64)
            cos, sin = rope_cache(32, d // 2)
            node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain=MS, interleaved=interleaved, num_heads=h)
            save(out, f"rotaryembedding_ms_i{interleaved}_{np.dtype(dt).name}", node,
                 [("x", x), ("pos", pos), ("cos", cos.astype(dt)), ("sin", sin.astype(dt))], [("y", dt)],
                 F16_TOL if dt == np.float16 else F32_TOL)


def gqa_inputs(rng, b, s, h, kvh, d, past, dt):
    """GroupQueryAttention's first seven inputs, drawn in this order: q, k, v [B, S, heads * D],
    past K and V [B, kvH, past, D], seqlens_k (total - 1 per batch) and total_sequence_length."""
    total = past + s
    q = rng.standard_normal((b, s, h * d)).astype(dt)
    k = rng.standard_normal((b, s, kvh * d)).astype(dt)
    v = rng.standard_normal((b, s, kvh * d)).astype(dt)
    pk = rng.standard_normal((b, kvh, past, d)).astype(dt)
    pv = rng.standard_normal((b, kvh, past, d)).astype(dt)
    seqlens = np.full((b,), total - 1, dtype=np.int32)
    tot = np.array(total, dtype=np.int32)
    return [("q", q), ("k", k), ("v", v), ("pk", pk), ("pv", pv), ("seqlens", seqlens), ("total", tot)]


def gqa(out):
    h, kvh, d = 4, 2, 16
    configs = [
        # name, S, past, rotary, interleaved, window, softcap, scale, bias, dtype
        ("prompt", 5, 0, 0, 0, -1, 0.0, 0.0, False, np.float32),
        ("prompt_rotary", 5, 0, 1, 0, -1, 0.0, 0.0, False, np.float32),
        ("prompt_rotary_interleaved", 5, 0, 1, 1, -1, 0.0, 0.0, False, np.float32),
        ("decode_rotary", 1, 7, 1, 0, -1, 0.0, 0.0, False, np.float32),
        ("prefill_past_rotary", 3, 4, 1, 0, -1, 0.0, 0.0, False, np.float32),
        ("window_prompt", 8, 0, 1, 0, 3, 0.0, 0.0, False, np.float32),
        ("window_decode", 1, 9, 1, 0, 3, 0.0, 0.0, False, np.float32),
        ("softcap_scale", 4, 2, 1, 0, -1, 5.0, 0.3, False, np.float32),
        ("bias_prompt", 6, 0, 1, 0, -1, 0.0, 1.0, True, np.float32),
        ("bias_decode_window", 1, 6, 1, 0, 4, 0.0, 0.0, True, np.float32),
        ("f16_prompt_rotary", 5, 0, 1, 0, -1, 0.0, 0.0, True, np.float16),
        ("f16_decode_rotary", 1, 5, 1, 0, 2, 0.0, 0.0, False, np.float16),
    ]
    for name, s, past, rot, inter, window, softcap, scale, bias, dt in configs:
        b = 1
        total = past + s
        inputs = gqa_inputs(RNG, b, s, h, kvh, d, past, dt)
        cos, sin = rope_cache(64, d // 2)
        names = ["q", "k", "v", "pk", "pv", "seqlens", "total", "cos" if rot else "", "sin" if rot else ""]
        if rot:
            inputs += [("cos", cos.astype(dt)), ("sin", sin.astype(dt))]
        if bias:
            names += ["", "bias"]
            mask = np.where(RNG.random((b, 1, s, total)) < 0.2, -10000.0, RNG.standard_normal((b, 1, s, total)) * 0.5)
            inputs.append(("bias", mask.astype(dt)))
        attrs = dict(num_heads=h, kv_num_heads=kvh, do_rotary=rot, rotary_interleaved=inter, local_window_size=window, softcap=softcap)
        if scale:
            attrs["scale"] = scale
        node = helper.make_node("GroupQueryAttention", names, ["y", "present_k", "present_v"], domain=MS, **attrs)
        save(out, f"gqa_{name}", node, inputs, [("y", dt), ("present_k", dt), ("present_v", dt)], F16_TOL if dt == np.float16 else F32_TOL)


def standard(out):
    """A representative case per standard op family (elementwise, cast, matmul, reduce/softmax,
    norm, movement, shape), also run in the browser by runtime/tests/browser_ops.rs."""
    f32, f16 = np.float32, np.float16
    x = lambda *shape, dt=f32: RNG.standard_normal(shape).astype(dt)  # noqa: E731
    init = lambda name, a: numpy_helper.from_array(np.asarray(a), name)  # noqa: E731
    save(out, "std_add_broadcast_float32", helper.make_node("Add", ["a", "b"], ["y"]),
         [("a", x(2, 3, 4)), ("b", x(4))], [("y", f32)], F32_TOL)
    save(out, "std_mul_float16", helper.make_node("Mul", ["a", "b"], ["y"]),
         [("a", x(3, 5, dt=f16)), ("b", x(3, 5, dt=f16))], [("y", f16)], F16_TOL)
    save(out, "std_div_broadcast_float32", helper.make_node("Div", ["a", "b"], ["y"]),
         [("a", x(2, 1, 4)), ("b", (RNG.random((3, 1)) + 0.5).astype(f32))], [("y", f32)], F32_TOL)
    save(out, "std_tanh_float32", helper.make_node("Tanh", ["a"], ["y"]), [("a", x(4, 9))], [("y", f32)], F32_TOL)
    save(out, "std_sqrt_float32", helper.make_node("Sqrt", ["a"], ["y"]),
         [("a", RNG.random((5, 6)).astype(f32) * 4)], [("y", f32)], F32_TOL)
    save(out, "std_where_float32", helper.make_node("Where", ["c", "a", "b"], ["y"]),
         [("c", RNG.random((3, 4)) > 0.5), ("a", x(3, 4)), ("b", x(1, 4))], [("y", f32)], F32_TOL)
    save(out, "std_cast_float32_to_float16", helper.make_node("Cast", ["a"], ["y"], to=TensorProto.FLOAT16),
         [("a", x(4, 7))], [("y", f16)], F16_TOL)
    save(out, "std_cast_float16_to_float32", helper.make_node("Cast", ["a"], ["y"], to=TensorProto.FLOAT),
         [("a", x(6, 5, dt=f16))], [("y", f32)], F32_TOL)
    save(out, "std_matmul_batched_float32", helper.make_node("MatMul", ["a", "b"], ["y"]),
         [("a", x(2, 3, 8)), ("b", x(8, 5))], [("y", f32)], F32_TOL)
    save(out, "std_matmul_float16", helper.make_node("MatMul", ["a", "b"], ["y"]),
         [("a", x(4, 16, dt=f16)), ("b", x(16, 8, dt=f16))], [("y", f16)], {"rtol": 1e-2, "atol": 1e-2})
    save(out, "std_gemm_transb_float32", helper.make_node("Gemm", ["a", "b", "c"], ["y"], transB=1, alpha=0.5),
         [("a", x(3, 6)), ("b", x(4, 6)), ("c", x(4))], [("y", f32)], F32_TOL)
    save(out, "std_softmax_float32", helper.make_node("Softmax", ["a"], ["y"], axis=-1),
         [("a", x(2, 3, 7) * 4)], [("y", f32)], F32_TOL)
    save(out, "std_reducemean_float32", helper.make_node("ReduceMean", ["a", "axes"], ["y"], keepdims=1),
         [("a", x(2, 5, 6))], [("y", f32)], F32_TOL, inits=[init("axes", np.array([-1], np.int64))])
    save(out, "std_layernorm_float32",
         helper.make_node("LayerNormalization", ["a", "scale", "bias"], ["y"], axis=-1, epsilon=1e-5),
         [("a", x(3, 8)), ("scale", x(8)), ("bias", x(8))], [("y", f32)], F32_TOL)
    save(out, "std_transpose_float32", helper.make_node("Transpose", ["a"], ["y"], perm=[1, 0, 2]),
         [("a", x(2, 3, 4))], [("y", f32)], F32_TOL)
    save(out, "std_concat_float32", helper.make_node("Concat", ["a", "b"], ["y"], axis=1),
         [("a", x(2, 3, 4)), ("b", x(2, 1, 4))], [("y", f32)], F32_TOL)
    save(out, "std_gather_float32", helper.make_node("Gather", ["table", "ids"], ["y"], axis=0),
         [("table", x(10, 6)), ("ids", np.array([[3, 0], [9, 3]], np.int64))], [("y", f32)], F32_TOL)
    save(out, "std_slice_float32", helper.make_node("Slice", ["a", "starts", "ends", "axes", "steps"], ["y"]),
         [("a", x(4, 10))], [("y", f32)], F32_TOL,
         inits=[init("starts", np.array([1, -8], np.int64)), init("ends", np.array([4, 9], np.int64)),
                init("axes", np.array([0, 1], np.int64)), init("steps", np.array([1, 3], np.int64))])
    save(out, "std_reshape_float32", helper.make_node("Reshape", ["a", "shape"], ["y"]),
         [("a", x(2, 3, 4))], [("y", f32)], F32_TOL, inits=[init("shape", np.array([-1, 4], np.int64))])
    save(out, "std_expand_float32", helper.make_node("Expand", ["a", "shape"], ["y"]),
         [("a", x(3, 1))], [("y", f32)], F32_TOL, inits=[init("shape", np.array([2, 3, 4], np.int64))])


def mha(out):
    """com.microsoft MultiHeadAttention: separate Q/K/V [B, S, hidden], optional bias,
    key_padding_mask (int32 [B, T] or [B, S, T]), attention_bias, past/present KV, unidirectional.
    Own generator so the cases above stay byte-identical."""
    rng = np.random.default_rng(2026)
    configs = [
        # name, B, S, P, N, H, Hv, bias, kpm, attention_bias, unidirectional, scale, filter, dtype
        ("prompt", 2, 5, 0, 2, 8, 8, False, None, None, 0, 0.0, None, np.float32),
        ("prompt_bias", 2, 5, 0, 2, 8, 8, True, None, None, 0, 0.0, None, np.float32),
        ("prompt_uni", 1, 6, 0, 3, 4, 4, False, None, None, 1, 0.0, None, np.float32),
        ("decode_past", 2, 1, 6, 2, 8, 8, False, None, None, 0, 0.0, None, np.float32),
        ("prefill_past_bias_uni", 1, 3, 4, 2, 8, 8, True, None, None, 1, 0.0, None, np.float32),
        ("kpm_past", 2, 3, 2, 2, 8, 8, False, "2d", None, 0, 0.0, None, np.float32),
        ("kpm3d_uni_filter", 2, 3, 2, 2, 8, 8, False, "3d", None, 1, 0.0, -1e9, np.float32),
        ("kpm_uni_attnbias_past", 2, 4, 3, 2, 8, 8, True, "2d", (1, 2), 1, 0.0, None, np.float32),
        ("attnbias_batch_scale", 2, 3, 0, 2, 8, 8, False, None, (2, 1), 0, 0.2, None, np.float32),
        ("odd_heads_past", 1, 4, 3, 3, 7, 7, True, "2d", None, 1, 0.0, None, np.float32),
        ("odd_heads_vsize", 2, 4, 0, 3, 7, 5, True, "2d", None, 0, 0.0, None, np.float32),
        ("long_past_h80", 1, 2, 150, 1, 80, 80, True, None, (1, 1), 1, 0.0, None, np.float32),
        ("f16_prompt_bias_kpm", 2, 5, 0, 2, 8, 8, True, "2d", None, 0, 0.0, None, np.float16),
        ("f16_decode_past_uni_attnbias", 1, 1, 7, 2, 6, 6, False, None, (1, 2), 1, 0.0, None, np.float16),
        ("f16_odd_heads_past", 2, 3, 5, 3, 5, 5, True, "2d", None, 1, 0.0, None, np.float16),
        ("kpm_fully_padded_batch", 2, 3, 2, 2, 8, 8, False, "none_b1", None, 1, 0.0, None, np.float32),
        # f16 written by the attention kernel itself with two output dims per thread (80 > 64).
        ("f16_long_past_h80", 1, 2, 150, 2, 80, 80, True, None, (1, 1), 1, 0.0, None, np.float16),
    ]
    for name, b, s, past, n, h, hv, bias, kpm, ab, uni, scale, filt, dt in configs:
        t = past + s
        q = rng.standard_normal((b, s, n * h)).astype(dt)
        k = rng.standard_normal((b, s, n * h)).astype(dt)
        v = rng.standard_normal((b, s, n * hv)).astype(dt)
        names = ["q", "k", "v"]
        inputs = [("q", q), ("k", k), ("v", v)]
        names.append("bias" if bias else "")
        if bias:
            inputs.append(("bias", (rng.standard_normal((2 * n * h + n * hv,)) * 0.5).astype(dt)))
        names.append("kpm" if kpm else "")
        if kpm:
            # Right padding per batch; every query row keeps at least one key.
            lens = rng.integers(max(1, t - 3), t + 1, (b,))
            m = (np.arange(t)[None, :] < lens[:, None]).astype(np.int32)
            m[:, 0] = 1
            if kpm == "none_b1":
                # Batch 1 fully padded: ORT adds mask_filter_value to every key (no zeroed rows).
                m[1, :] = 0
            if kpm == "3d":
                m = np.repeat(m[:, None, :], s, axis=1)
                m[:, -1, t // 2] = 0
            inputs.append(("kpm", m))
        names.append("ab" if ab else "")
        if ab:
            inputs.append(("ab", (rng.standard_normal((ab[0], ab[1], s, t)) * 0.5).astype(dt)))
        names += ["pk" if past else "", "pv" if past else ""]
        if past:
            inputs.append(("pk", rng.standard_normal((b, n, past, h)).astype(dt)))
            inputs.append(("pv", rng.standard_normal((b, n, past, hv)).astype(dt)))
        while names and not names[-1]:
            names.pop()
        attrs = dict(num_heads=n, unidirectional=uni)
        if scale:
            attrs["scale"] = scale
        if filt is not None:
            attrs["mask_filter_value"] = filt
        node = helper.make_node("MultiHeadAttention", names, ["y", "present_k", "present_v"], domain=MS, **attrs)
        save(out, f"mha_{name}", node, inputs, [("y", dt), ("present_k", dt), ("present_v", dt)],
             F16_TOL if dt == np.float16 else F32_TOL)


def attention(out):
    """ai.onnx Attention (opset 23) as ONNX Runtime runs it: a representative 3-D grouped-query
    case with a KV cache, causal masking and softcap, and a 4-D float16 case with a boolean mask
    (the browser test embeds these; the full ONNX node suite runs natively)."""
    rng = np.random.default_rng(2027)
    b, s, past, hq, hkv, d = 2, 3, 4, 4, 2, 8
    q = rng.standard_normal((b, s, hq * d)).astype(np.float32)
    k = rng.standard_normal((b, s, hkv * d)).astype(np.float32)
    v = rng.standard_normal((b, s, hkv * d)).astype(np.float32)
    pk = rng.standard_normal((b, hkv, past, d)).astype(np.float32)
    pv = rng.standard_normal((b, hkv, past, d)).astype(np.float32)
    node = helper.make_node("Attention", ["q", "k", "v", "", "pk", "pv"], ["y", "present_k", "present_v"],
                            q_num_heads=hq, kv_num_heads=hkv, is_causal=1, softcap=2.0)
    save(out, "attention_3d_gqa_causal_past_softcap_float32", node,
         [("q", q), ("k", k), ("v", v), ("pk", pk), ("pv", pv)],
         [("y", np.float32), ("present_k", np.float32), ("present_v", np.float32)], F32_TOL, opset=23)
    f16 = np.float16
    q = rng.standard_normal((1, 2, 5, 8)).astype(f16)
    k = rng.standard_normal((1, 2, 7, 8)).astype(f16)
    v = rng.standard_normal((1, 2, 7, 6)).astype(f16)
    mask = rng.random((5, 7)) < 0.7
    mask[:, 0] = True
    node = helper.make_node("Attention", ["q", "k", "v", "mask"], ["y"], scale=0.25)
    save(out, "attention_4d_boolmask_float16", node, [("q", q), ("k", k), ("v", v), ("mask", mask)],
         [("y", f16)], F16_TOL, opset=23)
    # More keys than one 64-key softmax chunk, a float mask with -inf
    # entries (a fully masked row included), the softmax probabilities as the 4th output.
    b, s, past, h, d = 1, 3, 90, 2, 16
    t = past + s
    q = rng.standard_normal((b, h, s, d)).astype(np.float32)
    k = rng.standard_normal((b, h, s, d)).astype(np.float32)
    v = rng.standard_normal((b, h, s, d)).astype(np.float32)
    pk = rng.standard_normal((b, h, past, d)).astype(np.float32)
    pv = rng.standard_normal((b, h, past, d)).astype(np.float32)
    mask = (rng.standard_normal((s, t)) * 0.5).astype(np.float32)
    mask[rng.random((s, t)) < 0.3] = -np.inf
    mask[1, :] = -np.inf
    node = helper.make_node("Attention", ["q", "k", "v", "mask", "pk", "pv"],
                            ["y", "present_k", "present_v", "qk"], qk_matmul_output_mode=3)
    save(out, "attention_4d_long_past_neginf_mask_softmax_out_float32", node,
         [("q", q), ("k", k), ("v", v), ("mask", mask), ("pk", pk), ("pv", pv)],
         [("y", np.float32), ("present_k", np.float32), ("present_v", np.float32), ("qk", np.float32)],
         F32_TOL, opset=23)


def tiled(out):
    """Edge cases of the tiled MatMulNBits GEMM (M, N not multiples of the tile, M just above 1, a
    partial last K block) and of the flash / split-K GroupQueryAttention (long contexts split into
    chunks, head sizes 256 and 512, a head size that is not a multiple of the staged chunk, batch 2).
    Own generator so the earlier cases stay byte-identical."""
    rng = np.random.default_rng(4321)
    for bits, block, k, n, m, zp, dt, bias in [
        (4, 32, 80, 70, 2, True, np.float32, True),     # M just above 1, partial last block
        (4, 16, 48, 130, 9, False, np.float16, False),  # two row groups, three column tiles
        (4, 32, 100, 65, 33, True, np.float32, True),   # second row tile partial, K % block = 4
        (8, 64, 72, 66, 17, True, np.float16, True),
        (8, 16, 64, 20, 40, False, np.float32, False),
        (4, 128, 256, 96, 70, True, np.float32, False),
    ]:
        nbits_case(out, rng, bits, block, k, n, m, zp, dt, bias)

    configs = [
        # name, B, H, kvH, D, S, past, rotary, window, softcap, bias, dtype
        ("tile_prompt_d256", 1, 8, 1, 256, 21, 0, 1, -1, 0.0, False, np.float32),
        ("tile_decode_long_split", 1, 8, 1, 64, 1, 300, 1, -1, 0.0, False, np.float32),
        ("tile_decode_window_split", 1, 4, 2, 32, 1, 400, 1, 300, 5.0, False, np.float32),
        ("tile_prefill_past_split", 1, 4, 2, 48, 3, 300, 0, -1, 0.0, False, np.float32),
        ("tile_decode_d512", 1, 2, 1, 512, 1, 40, 1, -1, 0.0, False, np.float32),
        ("tile_decode_bias_split", 1, 4, 1, 16, 1, 260, 1, -1, 0.0, True, np.float32),
        ("tile_prompt_window_mh", 1, 6, 3, 80, 37, 0, 1, 9, 0.0, False, np.float32),
        ("tile_f16_decode_split", 1, 4, 2, 32, 1, 270, 1, -1, 0.0, False, np.float16),
        ("tile_batch2_decode", 2, 4, 2, 16, 1, 12, 1, -1, 0.0, False, np.float32),
    ]
    for name, b, h, kvh, d, s, past, rot, window, softcap, bias, dt in configs:
        total = past + s
        inputs = gqa_inputs(rng, b, s, h, kvh, d, past, dt)
        cos, sin = rope_cache(total + 1, d // 2)
        names = ["q", "k", "v", "pk", "pv", "seqlens", "total", "cos" if rot else "", "sin" if rot else ""]
        if rot:
            inputs += [("cos", cos.astype(dt)), ("sin", sin.astype(dt))]
        if bias:
            names += ["", "bias"]
            mask = np.where(rng.random((b, 1, s, total)) < 0.2, -10000.0, rng.standard_normal((b, 1, s, total)) * 0.5)
            inputs.append(("bias", mask.astype(dt)))
        attrs = dict(num_heads=h, kv_num_heads=kvh, do_rotary=rot, local_window_size=window, softcap=softcap)
        node = helper.make_node("GroupQueryAttention", names, ["y", "present_k", "present_v"], domain=MS, **attrs)
        save(out, f"gqa_{name}", node, inputs, [("y", dt), ("present_k", dt), ("present_v", dt)],
             F16_TOL if dt == np.float16 else F32_TOL)


def register_block(out):
    """The tiled MatMulNBits GEMM at each register-block width (column quads per invocation 2 for
    5..8 rows, 4 from 9 rows; M above and below a row tile, N not a multiple of the 64-column
    tile). Own generator so the earlier cases stay byte-identical."""
    rng = np.random.default_rng(2468)
    for bits, block, k, n, m, zp, dt, bias in [
        (4, 32, 96, 100, 6, True, np.float32, True),
        (4, 16, 64, 130, 7, False, np.float16, False),
        (4, 32, 64, 72, 20, True, np.float16, True),
        (8, 32, 64, 68, 130, True, np.float32, False),
    ]:
        nbits_case(out, rng, bits, block, k, n, m, zp, dt, bias)


def gqa_packed(out):
    """GroupQueryAttention with packed QKV (key and value inputs empty: the heads are taken from
    one [B, S, (H + 2 kvH) D] row), rotary, past > 0 and past 0, f32 and f16. Own generator so the
    earlier cases stay byte-identical."""
    rng = np.random.default_rng(77)
    for name, s, past, inter, dt in [
        ("packed_prefill_past_rotary", 3, 2, 0, np.float32),
        ("packed_prompt_rotary_interleaved", 4, 0, 1, np.float32),
        ("packed_f16_decode_rotary", 1, 5, 0, np.float16),
    ]:
        b, h, kvh, d = 1, 4, 2, 16
        total = past + s
        qkv = rng.standard_normal((b, s, (h + 2 * kvh) * d)).astype(dt)
        pk = rng.standard_normal((b, kvh, past, d)).astype(dt)
        pv = rng.standard_normal((b, kvh, past, d)).astype(dt)
        seqlens = np.array([total - 1], dtype=np.int32)
        tot = np.array(total, dtype=np.int32)
        cos, sin = rope_cache(64, d // 2)
        names = ["qkv", "", "", "pk", "pv", "seqlens", "total", "cos", "sin"]
        inputs = [("qkv", qkv), ("pk", pk), ("pv", pv), ("seqlens", seqlens), ("total", tot),
                  ("cos", cos.astype(dt)), ("sin", sin.astype(dt))]
        node = helper.make_node("GroupQueryAttention", names, ["y", "present_k", "present_v"], domain=MS,
                                num_heads=h, kv_num_heads=kvh, do_rotary=1, rotary_interleaved=inter)
        save(out, f"gqa_{name}", node, inputs, [("y", dt), ("present_k", dt), ("present_v", dt)],
             F16_TOL if dt == np.float16 else F32_TOL)


def gqa_cache_inits(out):
    """GroupQueryAttention whose rotary cos/sin caches are initializers, as in the exported models:
    the runtime packs the two into one buffer at load and binds it once. Own generator so the
    earlier cases stay byte-identical."""
    rng = np.random.default_rng(97531)
    for name, s, past, dt in [("decode", 1, 40, np.float32), ("f16_prompt", 6, 0, np.float16)]:
        b, h, kvh, d = 1, 4, 2, 32
        inputs = gqa_inputs(rng, b, s, h, kvh, d, past, dt)
        cos, sin = rope_cache(64, d // 2)
        inits = [numpy_helper.from_array(cos.astype(dt), "cos_cache"), numpy_helper.from_array(sin.astype(dt), "sin_cache")]
        names = ["q", "k", "v", "pk", "pv", "seqlens", "total", "cos_cache", "sin_cache"]
        node = helper.make_node("GroupQueryAttention", names, ["y", "present_k", "present_v"], domain=MS, num_heads=h,
                                kv_num_heads=kvh, do_rotary=1)
        save(out, f"gqa_cache_init_{name}_rotary", node, inputs, [("y", dt), ("present_k", dt), ("present_v", dt)],
             F16_TOL if dt == np.float16 else F32_TOL, inits=inits)


def f16_odd_columns(out):
    """A prefill MatMulNBits with f16 activations and an odd N: the GEMM cannot store f16 column
    pairs, so it writes f32 and a Cast follows (even N writes f16 directly). Own generator so the
    earlier cases stay byte-identical."""
    nbits_case(out, np.random.default_rng(8642), 4, 32, 64, 33, 5, True, np.float16, True)


def gqa_shared_kv(out):
    """GroupQueryAttention with zero new K/V tokens (Gemma 4's KV-shared layers as the mobius
    exporter writes them, ONNX Runtime #28242): key and value [B, 0, kvH * D], the past another
    layer's present holding every token (the query's included), seqlens_k = T - 1, query
    positions and rotary from T - S; the sliding window and softcap still apply. Presents alias
    the past, or are absent; a past buffer longer than T (its rows after seqlens_k unused) is run
    with y only (ONNX Runtime zeroes those rows of its presents, the runtime returns the past
    itself). The `qonly` cases are the same with key and value absent and a query of H * D (a
    form ONNX Runtime refuses at shape inference): their reference is ONNX Runtime on the
    [B, 0, kv] form. Own generator so the earlier cases stay byte-identical."""
    rng = np.random.default_rng(2026)
    h, kvh, d = 4, 1, 32
    for name, b, s, t, buf, rot, window, softcap, presents, dt in [
        # name, B, S, T (tokens), past buffer rows, rotary, window, softcap, presents, dtype
        ("prefill_rotary", 1, 5, 5, 5, 1, -1, 0.0, True, np.float32),
        ("decode_rotary", 1, 1, 9, 9, 1, -1, 0.0, True, np.float32),
        ("decode_window", 1, 1, 20, 20, 1, 8, 0.0, True, np.float32),
        ("prefill_window_softcap", 1, 6, 20, 20, 0, 8, 30.0, False, np.float32),
        ("prefill_past_window", 1, 3, 14, 14, 1, 5, 0.0, True, np.float32),
        ("decode_long_buffer", 1, 1, 9, 16, 1, -1, 0.0, False, np.float32),
        ("batch2_decode", 2, 1, 7, 7, 1, 4, 0.0, True, np.float32),
        ("f16_decode_window", 1, 1, 24, 24, 1, 8, 0.0, True, np.float16),
        # long pasts: the split-key decode kernels
        ("decode_long", 1, 1, 300, 300, 1, -1, 0.0, True, np.float32),
        ("decode_long_window", 1, 1, 700, 700, 1, 64, 0.0, False, np.float32),
    ]:
        cos, sin = rope_cache(max(64, t), d // 2)
        q = rng.standard_normal((b, s, h * d)).astype(dt)
        pk = rng.standard_normal((b, kvh, buf, d)).astype(dt)
        pv = rng.standard_normal((b, kvh, buf, d)).astype(dt)
        empty = np.zeros((b, 0, kvh * d), dtype=dt)
        seqlens = np.full((b,), t - 1, dtype=np.int32)
        tot = np.array(t, dtype=np.int32)
        rest = [("pk", pk), ("pv", pv), ("seqlens", seqlens), ("total", tot)]
        if rot:
            rest += [("cos", cos.astype(dt)), ("sin", sin.astype(dt))]
        tail = ["pk", "pv", "seqlens", "total"] + (["cos", "sin"] if rot else [])
        attrs = dict(num_heads=h, kv_num_heads=kvh, do_rotary=rot, local_window_size=window, softcap=softcap)
        outs = ["y", "present_k", "present_v"] if presents else ["y"]
        meta = [(o, dt) for o in outs]
        tol = F16_TOL if dt == np.float16 else F32_TOL
        node = helper.make_node("GroupQueryAttention", ["q", "k", "v"] + tail, outs, domain=MS, **attrs)
        inputs = [("q", q), ("k", empty), ("v", empty)] + rest
        save(out, f"gqa_shared_{name}", node, inputs, meta, tol)
        if name in ("decode_window", "prefill_window_softcap"):
            qonly = helper.make_node("GroupQueryAttention", ["q", "", ""] + tail, outs, domain=MS, **attrs)
            save(out, f"gqa_shared_qonly_{name}", qonly, [("q", q)] + rest, meta, tol, reference=(node, inputs))


def matmul_nbits_accuracy_level(out):
    """MatMulNBits with accuracy_level 4 (ONNX Runtime then quantises the activations to int8;
    the runtime reads the level and ignores it, dequantising exactly): the reference is ONNX
    Runtime with level 0, the exact product. Own generator so the earlier cases stay
    byte-identical."""
    rng = np.random.default_rng(3141)
    k, n, m, block = 64, 24, 3, 32
    nb = k // block
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.integers(0, 256, (n, nb, block // 2), dtype=np.uint8)
    scales = (rng.random((n * nb,)) * 0.1 + 0.01).astype(np.float32)
    inputs = [("A", a), ("B", b), ("scales", scales)]
    attrs = dict(K=k, N=n, bits=4, block_size=block)
    node = helper.make_node("MatMulNBits", ["A", "B", "scales"], ["Y"], domain=MS, accuracy_level=4, **attrs)
    exact = helper.make_node("MatMulNBits", ["A", "B", "scales"], ["Y"], domain=MS, accuracy_level=0, **attrs)
    save(out, "matmulnbits_b4_blk32_k64_n24_m3_nozp_float32_acc4", node, inputs, [("Y", np.float32)], F32_TOL,
         reference=(exact, inputs))


def rms_normalization(out):
    """ai.onnx 23 RMSNormalization with the scale broadcast unidirectionally to X in the forms
    the ONNX node suite does not have (1s inside the normalised shape, a scale varying over the
    leading axes, a one-element scale) and f16. (An f16 X with an f32 scale, Y of the scale's type
    by the schema, is not here: ONNX Runtime fails to bind its function body's types.) Written with IR
    11 and opset 24 (the versions the mobius exporter writes). Own generator so the earlier cases
    stay byte-identical."""
    rng = np.random.default_rng(4711)
    for name, xs, axis, ws, dx, dw, eps in [
        ("row_scale_ones", (2, 3, 4, 5), 1, (4, 1), np.float32, np.float32, 1e-5),
        ("lead_scale", (2, 3, 4, 5), 2, (2, 3, 1, 5), np.float32, np.float32, 1e-3),
        ("scalar_scale", (3, 7), -1, (1,), np.float32, np.float32, 1e-5),
        ("f16", (1, 3, 2, 48), -2, (2, 48), np.float16, np.float16, 1e-6),
    ]:
        x = (rng.standard_normal(xs) * 3).astype(dx)
        w = (1 + 0.5 * rng.standard_normal(ws)).astype(dw)
        node = helper.make_node("RMSNormalization", ["x", "scale"], ["y"], axis=axis, epsilon=eps)
        # Y has the scale's type (V in the schema; ONNX Runtime follows it).
        save(out, f"rmsnormalization_{name}", node, [("x", x), ("scale", w)], [("y", dw)],
             F16_TOL if dx == np.float16 else F32_TOL, opset=24, ir=11)


def write_case(out, name, model, feeds, tol):
    """A whole-model case (not one node): ONNX Runtime's outputs for `feeds`."""
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    outs = [o.name for o in model.graph.output]
    results = sess.run(outs, feeds)
    d = os.path.join(out, name)
    os.makedirs(os.path.join(d, "test_data_set_0"))
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(model.SerializeToString())
    for j, i in enumerate(model.graph.input):
        with open(os.path.join(d, "test_data_set_0", f"input_{j}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(feeds[i.name], i.name).SerializeToString())
    for j, (n, r) in enumerate(zip(outs, results)):
        with open(os.path.join(d, "test_data_set_0", f"output_{j}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(r, n).SerializeToString())
    with open(os.path.join(d, "case.json"), "w") as f:
        json.dump(tol, f)


def model_local_functions(out):
    """A model with model-local functions (ModelProto.functions), as the mobius exporter ships
    fallback bodies: `test.fn:ScaledSoftmax` (attributes by reference: `alpha` required and used
    by a Constant, `beta` and `axis` with defaults in attribute_proto) calls the nested
    `test.fn:Square`; it is called twice (defaults and overrides) and its body's value names
    (`xa`, `t`) collide with the graph's own; one call leaves its second output unnamed.
    `com.microsoft:SkipSimplifiedLayerNormalization` is also defined as a function (a deliberately
    wrong body: Sub) but is a registered kernel in both runtimes, so the kernel runs. The runtime must inline the first two and keep the third
    (checked by tests/loader.rs). Own generator so the earlier cases stay byte-identical."""
    rng = np.random.default_rng(1618)
    fd = "test.fn"
    opsets = [helper.make_opsetid("", 21)]
    square = helper.make_function(fd, "Square", ["X"], ["Y"], [helper.make_node("Mul", ["X", "X"], ["Y"])], opsets)
    def ref(name, parent, kind):
        return onnx.AttributeProto(name=name, ref_attr_name=parent, type=kind)

    alpha = ref("value_float", "alpha", onnx.AttributeProto.FLOAT)
    beta = ref("value_float", "beta", onnx.AttributeProto.FLOAT)
    axis = ref("axis", "axis", onnx.AttributeProto.INT)
    body = [
        helper.make_node("Constant", [], ["a"]),
        helper.make_node("Mul", ["X", "a"], ["xa"]),
        helper.make_node("Square", ["xa"], ["sq"], domain=fd),
        helper.make_node("Constant", [], ["b"]),
        helper.make_node("Mul", ["sq", "b"], ["t"]),
        helper.make_node("Add", ["t", "Bias"], ["tb"]),
        helper.make_node("Softmax", ["tb"], ["Y"]),
        helper.make_node("Identity", ["sq"], ["Sq"]),
    ]
    body[0].attribute.append(alpha)
    body[3].attribute.append(beta)
    body[6].attribute.append(axis)
    scaled = helper.make_function(fd, "ScaledSoftmax", ["X", "Bias"], ["Y", "Sq"], body,
                                  opsets + [helper.make_opsetid(fd, 1)], attributes=["alpha"])
    scaled.attribute_proto.extend([helper.make_attribute("beta", 0.5), helper.make_attribute("axis", -1)])
    wrong = helper.make_function(MS, "SkipSimplifiedLayerNormalization", ["x", "skip", "gamma"], ["y"],
                                 [helper.make_node("Sub", ["x", "skip"], ["y"])], opsets)
    nodes = [
        helper.make_node("Identity", ["x"], ["xa"], name="graph_xa"),
        helper.make_node("ScaledSoftmax", ["xa", "bias"], ["t", ""], domain=fd, name="call0", alpha=0.7),
        helper.make_node("ScaledSoftmax", ["t", "bias"], ["y", "sq1"], domain=fd, name="call1", alpha=1.3, beta=0.25, axis=1),
        helper.make_node("SkipSimplifiedLayerNormalization", ["y", "x", "gamma"], ["z"], domain=MS, name="skipnorm",
                         epsilon=1e-5),
    ]
    b, s, h = 2, 3, 8
    graph = helper.make_graph(
        nodes, "model_local_functions",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [b, s, h]),
         helper.make_tensor_value_info("bias", TensorProto.FLOAT, [h])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("sq1", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array((1 + 0.2 * rng.standard_normal(h)).astype(np.float32), "gamma")])
    model = helper.make_model(graph, functions=[square, scaled, wrong],
                              opset_imports=opsets + [helper.make_opsetid(fd, 1), helper.make_opsetid(MS, 1)])
    model.ir_version = 10
    feeds = {"x": rng.standard_normal((b, s, h)).astype(np.float32),
             "bias": rng.standard_normal(h).astype(np.float32)}
    write_case(out, "function_model_local_inlined", model, feeds, F32_TOL)


def variadic_and_onehot(out):
    """ai.onnx Max / Min / Mean with more inputs than one dispatch combines (3), broadcast shapes
    and NaNs (ONNX Runtime propagates them in Max / Min); OneHot with float indices and float16
    values, and a graph whose OneHot depth is computed at run time from its input (ReduceMax,
    Add, as the Gemma 4 vision pooler's soft-token count), negative and out-of-range indices
    included. Own generator so the earlier cases stay byte-identical."""
    rng = np.random.default_rng(3141)
    f32, f16 = np.float32, np.float16
    shapes = [(2, 3, 4), (4,), (3, 1), (1, 3, 4), (2, 1, 1)]
    xs = [rng.standard_normal(s).astype(f32) for s in shapes]
    xs[0][0, 1, 2] = np.nan
    xs[1][3] = np.nan
    names = [f"x{i}" for i in range(len(xs))]
    save(out, "std_max_variadic_nan_float32", helper.make_node("Max", names, ["y"]),
         list(zip(names, xs)), [("y", f32)], F32_TOL, opset=13)
    hs = [rng.standard_normal(s).astype(f16) for s in [(3, 5), (5,), (3, 1), (1, 5)]]
    hn = names[:4]
    save(out, "std_min_variadic_float16", helper.make_node("Min", hn, ["y"]),
         list(zip(hn, hs)), [("y", f16)], F16_TOL, opset=13)
    save(out, "std_mean_variadic_float32", helper.make_node("Mean", hn, ["y"]),
         list(zip(hn, [rng.standard_normal(s).astype(f32) for s in [(2, 3), (3,), (2, 1), (1, 3)]])),
         [("y", f32)], F32_TOL, opset=13)
    # Float indices are truncated toward zero (-1.5 -> -1 -> depth - 1), the depth 4.7 -> 4.
    idx = np.array([[0.0, 2.9, -1.5], [3.2, -4.0, 7.0]], f32)
    save(out, "std_onehot_float_indices_float16", helper.make_node("OneHot", ["i", "depth", "values"], ["y"], axis=0),
         [("i", idx), ("depth", np.array(4.7, f32)), ("values", np.array([-2.0, 0.5], f16))], [("y", f16)],
         F16_TOL, opset=11)
    # depth = max(pos) + 1 at run time; indices = pos - 1 (one negative per row, counted from depth).
    nodes = [
        helper.make_node("ReduceMax", ["pos"], ["m"], keepdims=0),
        helper.make_node("Add", ["m", "one"], ["depth"]),
        helper.make_node("Sub", ["pos", "one"], ["idx"]),
        helper.make_node("OneHot", ["idx", "depth", "values"], ["y"], axis=-2),
    ]
    graph = helper.make_graph(
        nodes, "onehot_runtime_depth",
        [helper.make_tensor_value_info("pos", TensorProto.INT64, ["b", "p"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(np.array(1, np.int64), "one"),
                     numpy_helper.from_array(np.array([0.0, 1.0 / 9.0], f32), "values")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    pos = np.array([[0, 3, 5, 6, 1], [2, 0, 4, 9, 8]], np.int64)
    write_case(out, "std_onehot_runtime_depth", model, {"pos": pos}, F32_TOL)


def float16_gemms(out):
    """Float16 MatMul / Gemm with several rows (the tiled GEMM): an even N stores f16 itself (a
    batched MatMul, a Gemm with C and alpha/beta, a transposed A), an odd N writes f32 and casts.
    Own generator so the earlier cases stay byte-identical."""
    rng = np.random.default_rng(9753)
    f16 = np.float16
    a = (rng.standard_normal((2, 3, 20, 40)) * 0.5).astype(f16)
    b = (rng.standard_normal((3, 40, 66)) * 0.5).astype(f16)
    save(out, "std_matmul_batched_n66_float16", helper.make_node("MatMul", ["a", "b"], ["y"]),
         [("a", a), ("b", b)], [("y", f16)], F16_TOL)
    a = (rng.standard_normal((37, 24)) * 0.5).astype(f16)
    b = (rng.standard_normal((24, 130)) * 0.5).astype(f16)
    save(out, "std_matmul_m37_n130_float16", helper.make_node("MatMul", ["a", "b"], ["y"]),
         [("a", a), ("b", b)], [("y", f16)], F16_TOL)
    a = (rng.standard_normal((9, 16)) * 0.5).astype(f16)
    b = (rng.standard_normal((16, 33)) * 0.5).astype(f16)
    save(out, "std_matmul_n33_float16", helper.make_node("MatMul", ["a", "b"], ["y"]),
         [("a", a), ("b", b)], [("y", f16)], F16_TOL)
    a = (rng.standard_normal((24, 7)) * 0.5).astype(f16)
    b = (rng.standard_normal((24, 10)) * 0.5).astype(f16)
    c = (rng.standard_normal((1, 10)) * 0.5).astype(f16)
    save(out, "std_gemm_transa_c_float16", helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=1,
                                                            alpha=0.75, beta=-1.5),
         [("a", a), ("b", b), ("c", c)], [("y", f16)], F16_TOL)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/fixtures/ops")
    args = ap.parse_args()
    if os.path.exists(args.out):
        shutil.rmtree(args.out)
    os.makedirs(args.out)
    for gen in (matmul_nbits, gather_block_quantized, norms, gelu, rotary, gqa, standard, mha, attention, tiled, gqa_packed,
                register_block, gqa_cache_inits, f16_odd_columns, gqa_shared_kv, rms_normalization,
                matmul_nbits_accuracy_level, model_local_functions, variadic_and_onehot, float16_gemms):
        gen(args.out)
    print(f"wrote {len(os.listdir(args.out))} cases to {args.out}")


if __name__ == "__main__":
    main()
