#!/usr/bin/env python3
"""Real exporter graphs with random weights, checked against ONNX Runtime.

    # 1. write random external data for a real graph (every tensor keeps its name, shape, offset):
    .venv/bin/python tools/onnx/real_graph.py fill ../shared/fixtures/onnx-community-gemma3-graphs/embed_tokens_q4.onnx /tmp/gg-real
    # 2. inputs + ONNX Runtime reference outputs (.npy, named like gemma-gem-onnx names them):
    .venv/bin/python tools/onnx/real_graph.py reference /tmp/gg-real/embed_tokens_q4.onnx --seq 8 --past 0 --out /tmp/gg-real/ref
    # 3. run ours:
    cargo run --release -p gg-cli --bin gemma-gem-onnx -- run /tmp/gg-real/embed_tokens_q4.onnx \
        $(cat /tmp/gg-real/ref/inputs.args) --out /tmp/gg-real/ours
    # 4. compare (rel. tolerance on the largest |value| of each output; same argmax for logits):
    .venv/bin/python tools/onnx/real_graph.py compare /tmp/gg-real/ref /tmp/gg-real/ours --rtol 1e-3

Weights: uint8 packed quantised values uniform in [0, 255]; scales in [0.002, 0.02]; 1-D float
tensors (norm weights, biases) around 1 / 0; rotary cos/sin caches computed for real (theta 1e4).
"""

import argparse
import os
import shutil

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

NP = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16, TensorProto.UINT8: np.uint8,
      TensorProto.INT64: np.int64, TensorProto.INT32: np.int32, TensorProto.INT8: np.int8}


def fill(args):
    rng = np.random.default_rng(7)
    m = onnx.load(args.model, load_external_data=False)
    os.makedirs(args.out, exist_ok=True)
    shutil.copy(args.model, os.path.join(args.out, os.path.basename(args.model)))
    files = {}
    for t in m.graph.initializer:
        if t.data_location != TensorProto.EXTERNAL:
            continue
        ext = {e.key: e.value for e in t.external_data}
        dt = NP[t.data_type]
        shape = tuple(t.dims)
        n = int(np.prod(shape)) if shape else 1
        name = t.name.lower()
        if dt == np.uint8:
            arr = rng.integers(0, 256, n, dtype=np.uint8)
        elif "cos_cache" in name or "sin_cache" in name:
            half = shape[-1]
            inv = 1.0 / 10000.0 ** (np.arange(half) / half)
            f = np.outer(np.arange(shape[0]), inv)
            arr = (np.cos(f) if "cos" in name else np.sin(f)).astype(dt)
        elif np.issubdtype(dt, np.floating) and "scale" in name:
            arr = rng.uniform(0.002, 0.02, n).astype(dt)
        elif np.issubdtype(dt, np.floating) and len(shape) == 1:
            arr = (1.0 + 0.1 * rng.standard_normal(n)).astype(dt) if "norm" in name or "layernorm" in name else (0.02 * rng.standard_normal(n)).astype(dt)
        elif np.issubdtype(dt, np.floating):
            arr = (0.02 * rng.standard_normal(n)).astype(dt)
        else:
            arr = np.zeros(n, dtype=dt)
        raw = arr.tobytes()
        assert len(raw) == int(ext["length"]), (t.name, len(raw), ext["length"])
        path = os.path.join(args.out, ext["location"])
        if path not in files:
            files[path] = open(path, "wb")
        f = files[path]
        f.seek(int(ext.get("offset", 0)))
        f.write(raw)
    for f in files.values():
        f.close()
    print("wrote", ", ".join(files))


def reference(args):
    import onnxruntime as ort
    rng = np.random.default_rng(11)
    sess = ort.InferenceSession(args.model, providers=["CPUExecutionProvider"])
    os.makedirs(args.out, exist_ok=True)
    feeds = {}
    seq, past = args.seq, args.past
    for i in sess.get_inputs():
        dt = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64, "tensor(int32)": np.int32}[i.type]
        if i.name == "input_ids":
            v = rng.integers(0, 1000, (1, seq)).astype(dt)
        elif i.name == "attention_mask":
            v = np.ones((1, past + seq), dtype=dt)
        elif i.name == "position_ids":
            v = np.arange(past, past + seq, dtype=dt).reshape(1, seq)
        elif i.name == "num_logits_to_keep":
            v = np.array(1, dtype=dt)
        elif i.name.startswith("past_key_values"):
            shape = [1 if d == "batch_size" else past if not isinstance(d, int) else d for d in i.shape]
            v = rng.standard_normal(shape).astype(dt)
        else:
            shape = [1 if d == "batch_size" else seq if not isinstance(d, int) else d for d in i.shape]
            v = (rng.standard_normal(shape)).astype(dt)
        feeds[i.name] = v
    args_line = []
    for n, v in feeds.items():
        p = os.path.join(args.out, "in_" + n.replace("/", "_") + ".npy")
        np.save(p, v)
        args_line.append(f"--input {n}={p}")
    with open(os.path.join(args.out, "inputs.args"), "w") as f:
        f.write(" ".join(args_line))
    outs = sess.run(None, feeds)
    for o, v in zip(sess.get_outputs(), outs):
        np.save(os.path.join(args.out, o.name.replace("/", "_") + ".npy"), v)
    print("reference outputs:", [o.name for o in sess.get_outputs()][:5], "...")


def compare(args):
    bad = 0
    for f in sorted(os.listdir(args.ref)):
        if not f.endswith(".npy") or f.startswith("in_"):
            continue
        r = np.load(os.path.join(args.ref, f)).astype(np.float64)
        o = np.load(os.path.join(args.ours, f)).astype(np.float64)
        if r.shape != o.shape:
            print(f"FAIL {f}: shape {o.shape} expected {r.shape}")
            bad += 1
            continue
        scale = max(np.abs(r).max(), 1e-6) if r.size else 1.0
        err = np.abs(r - o).max() / scale if r.size else 0.0
        same_argmax = (r.reshape(-1, r.shape[-1]).argmax(-1) == o.reshape(-1, o.shape[-1]).argmax(-1)).all() if r.size else True
        ok = err <= args.rtol and (same_argmax or "logits" not in f)
        bad += 0 if ok else 1
        print(f"{'ok  ' if ok else 'FAIL'} {f}: max |diff| / max |ref| = {err:.2e}, argmax same: {same_argmax}")
    raise SystemExit(1 if bad else 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("fill"); a.add_argument("model"); a.add_argument("out")
    b = sub.add_parser("reference"); b.add_argument("model"); b.add_argument("--seq", type=int, default=8)
    b.add_argument("--past", type=int, default=0); b.add_argument("--out", required=True)
    c = sub.add_parser("compare"); c.add_argument("ref"); c.add_argument("ours"); c.add_argument("--rtol", type=float, default=1e-3)
    args = ap.parse_args()
    {"fill": fill, "reference": reference, "compare": compare}[args.cmd](args)


if __name__ == "__main__":
    main()
