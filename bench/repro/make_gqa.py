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
import sys

import numpy as np
import onnxruntime as ort

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "upstream"))
from gqa_webgpu import feeds as make_feeds, graph, numpy_attention  # noqa: E402  (the same node and reference)


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
    model = graph(s, kv, total, a.window, d, heads=n)
    os.makedirs(os.path.join(a.out, "cpu"), exist_ok=True)
    with open(os.path.join(a.out, "model.onnx"), "wb") as f:
        f.write(model)

    feeds = make_feeds(s, kv, total, d, heads=n, seed=a.seed)
    sess = ort.InferenceSession(os.path.join(a.out, "model.onnx"), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    res = dict(zip(names, sess.run(None, feeds)))

    # The same in numpy: causal (and windowed) softmax attention, every query head on the one key head.
    want = numpy_attention(feeds, s, total, a.window)
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
