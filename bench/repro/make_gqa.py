"""A one-node GroupQueryAttention case (the form compare.mjs reads), without any model.

    python bench/repro/make_gqa.py OUT [--seq 32] [--heads 1] [--head-size 16] [--window -1]
        [--shared P] [--seed 0]

A prompt of SEQ tokens, no past (empty past_key/past_value), no rotary, no bias: query, key and
value random normal (seeded), seqlens_k = SEQ - 1, total_sequence_length = SEQ. The expected
output is ONNX Runtime's CPU EP (written to OUT/cpu, as make_case.py does) and also checked here
against a causal softmax attention in numpy.

--shared P: a KV-shared layer as mobius exports Gemma 4's (the layers that reuse an earlier
layer's cache): key and value empty ([1, 0, D]), past_key/past_value the other layer's present
of P rows (random normal), seqlens_k = P - 1, total_sequence_length = P; SEQ query rows, the last
SEQ positions of the P (SEQ = P: the prompt; SEQ = 1: a decode step).
"""

import argparse
import json
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--heads", type=int, default=1)
    ap.add_argument("--head-size", type=int, default=16)
    ap.add_argument("--window", type=int, default=-1)
    ap.add_argument("--shared", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    s, n, d = a.seq, a.heads, a.head_size
    if a.shared and a.shared < s:
        raise SystemExit("--shared P needs P >= --seq")
    kv = 0 if a.shared else s  # rows of the new key/value
    total = a.shared or s
    node = helper.make_node(
        "GroupQueryAttention",
        ["query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length"],
        ["output", "present_key", "present_value"],
        domain="com.microsoft", num_heads=n, kv_num_heads=1, local_window_size=a.window, scale=1.0)
    f = lambda name, shape: helper.make_tensor_value_info(name, T.FLOAT, shape)
    g = helper.make_graph(
        [node], "gqa",
        [f("query", [1, s, n * d]), f("key", [1, kv, d]), f("value", [1, kv, d]), f("past_key", [1, 1, total - kv, d]),
         f("past_value", [1, 1, total - kv, d]), helper.make_tensor_value_info("seqlens_k", T.INT32, [1]),
         helper.make_tensor_value_info("total_sequence_length", T.INT32, [])],
        [f("output", None), f("present_key", None), f("present_value", None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 10
    os.makedirs(os.path.join(a.out, "cpu"), exist_ok=True)
    onnx.save(m, os.path.join(a.out, "model.onnx"))

    rng = np.random.default_rng(a.seed)
    feeds = {
        "query": rng.standard_normal((1, s, n * d), np.float32),
        "key": rng.standard_normal((1, kv, d), np.float32),
        "value": rng.standard_normal((1, kv, d), np.float32),
        "past_key": rng.standard_normal((1, 1, total - kv, d), np.float32),
        "past_value": rng.standard_normal((1, 1, total - kv, d), np.float32),
        "seqlens_k": np.array([total - 1], np.int32),
        "total_sequence_length": np.array(total, np.int32),
    }
    sess = ort.InferenceSession(os.path.join(a.out, "model.onnx"), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    res = dict(zip(names, sess.run(None, feeds)))

    # The same in numpy: causal (and windowed) softmax attention, every query head on the one key head.
    q = feeds["query"][0].reshape(s, n, d)
    # All keys: the past's rows, then the new ones; query row r sits at position total - s + r.
    k = np.concatenate([feeds["past_key"][0, 0], feeds["key"][0]])
    v = np.concatenate([feeds["past_value"][0, 0], feeds["value"][0]])
    want = np.zeros((s, n, d), np.float32)
    for r in range(s):
        pos = total - s + r
        lo = 0 if a.window < 0 else max(0, pos - a.window + 1)
        for h in range(n):
            sc = q[r, h] @ k[lo:pos + 1].T
            p = np.exp(sc - sc.max())
            want[r, h] = (p / p.sum()) @ v[lo:pos + 1]
    err = np.abs(want.reshape(1, s, n * d) - res["output"]).max()
    assert err < 1e-4, f"the CPU EP and numpy differ by {err}"

    case = {"ort_python": ort.__version__, "tokens": s, "node": "GroupQueryAttention", "inputs": [], "outputs": [], "order": names,
            "external_data": False, "about": f"GroupQueryAttention {'prompt' if s > 1 else 'step'} of {s}, {n} query heads on 1 kv head of size {d}, window {a.window}, no rotary"
                     + (f", KV-shared: empty key/value, past of {total}" if a.shared else "")}
    for k_, v_ in feeds.items():
        fn = f"in_{k_}.bin"
        v_.tofile(os.path.join(a.out, fn))
        case["inputs"].append({"name": k_, "type": str(v_.dtype), "dims": list(v_.shape), "file": fn})
    for k_ in names:
        fn = f"{k_}.bin"
        res[k_].tofile(os.path.join(a.out, "cpu", fn))
        case["outputs"].append({"name": k_, "type": str(res[k_].dtype), "dims": list(res[k_].shape), "file": fn})
    json.dump(case, open(os.path.join(a.out, "case.json"), "w"), indent=1)
    print(f"{case['about']}: CPU EP = numpy within {err:.1e}")


if __name__ == "__main__":
    main()
