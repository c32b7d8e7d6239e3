"""Cuts one node out of a case's graph (make_case.py --outputs all) into a case of its own.

    python bench/repro/extract_node.py CASE NODE_NAME OUT [--attr NAME=INT ...] [--drop-input I ...]
        [--rows N]

The new graph is that node alone: its tensor inputs become graph inputs fed with the values the
CPU EP computed in CASE (initializers stay initializers), its outputs the graph outputs; the CPU
EP's outputs are written as make_case.py does, so compare.mjs runs it. --attr overrides an
integer attribute, --drop-input empties an optional input (by index), --rows keeps the first N
rows of the inputs whose axis 1 is the sequence (for GroupQueryAttention: query/key/value and the
bias's axis 2, with seqlens_k / total_sequence_length adjusted).
"""

import argparse
import json
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

NP = {"float32": np.float32, "int64": np.int64, "int32": np.int32, "float16": np.float16, "bool": np.bool_}
ONNX = {np.float32: 1, np.int64: 7, np.int32: 6, np.float16: 10, np.bool_: 9}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case")
    ap.add_argument("node")
    ap.add_argument("out")
    ap.add_argument("--attr", action="append", default=[])
    ap.add_argument("--drop-input", type=int, action="append", default=[])
    ap.add_argument("--rows", type=int, default=0)
    a = ap.parse_args()
    c = json.load(open(os.path.join(a.case, "case.json")))
    m = onnx.load(os.path.join(a.case, "model.onnx"))
    node = next(n for n in m.graph.node if n.name == a.node)
    inits = {t.name: t for t in m.graph.initializer}

    def value(name):
        for kind, lst, sub in (("in", c["inputs"], ""), ("out", c["outputs"], "cpu")):
            for o in lst:
                if o["name"] == name:
                    return np.fromfile(os.path.join(a.case, sub, o["file"]), NP[o["type"]]).reshape(o["dims"])
        for o in c.get("empty", []):
            if o["name"] == name:
                return np.zeros(o["dims"], NP[o["type"]])
        raise SystemExit(f"{name}: not an input or output of the case (make it with --outputs all)")

    new = helper.make_node(node.op_type, list(node.input), list(node.output), name=node.name, domain=node.domain)
    for at in node.attribute:
        new.attribute.append(at)
    for kv in a.attr:
        k, v = kv.split("=")
        for at in list(new.attribute):
            if at.name == k:
                new.attribute.remove(at)
        new.attribute.append(helper.make_attribute(k, int(v)))
    for i in a.drop_input:
        new.input[i] = ""
    while new.input and new.input[-1] == "":
        new.input.pop()

    feeds, ginputs, ginits = {}, [], []
    for i, name in enumerate(new.input):
        if not name:
            continue
        if name in feeds or any(t.name == name for t in ginits):
            continue  # the same tensor in two slots (a KV-shared layer's empty key and value)
        if name in inits:
            ginits.append(inits[name])
            continue
        v = value(name)
        if a.rows and node.op_type == "GroupQueryAttention":
            if i in (0, 1, 2):
                v = v[:, : a.rows]
            elif i == 5:  # seqlens_k = total - 1
                v = np.full_like(v, a.rows - 1)
            elif i == 6:
                v = np.array(a.rows, v.dtype).reshape(v.shape)
            elif i == 10:
                v = v[:, :, : a.rows, : a.rows]
        feeds[name] = np.ascontiguousarray(v).reshape(v.shape)
        ginputs.append(helper.make_tensor_value_info(name, ONNX[v.dtype.type], list(v.shape)))
    outs = [helper.make_tensor_value_info(o, 1, None) for o in new.output if o]
    g = helper.make_graph([new], "one_node", ginputs, outs, ginits)
    model = helper.make_model(g, opset_imports=list(m.opset_import))
    model.ir_version = m.ir_version
    os.makedirs(os.path.join(a.out, "cpu"), exist_ok=True)
    onnx.save(model, os.path.join(a.out, "model.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
              location="model.onnx_data", size_threshold=0)
    sess = ort.InferenceSession(os.path.join(a.out, "model.onnx"), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    res = sess.run(None, feeds)
    safe = lambda s: s.replace("/", "_").replace(":", "_").lstrip("_")
    case = {"ort_python": ort.__version__, "tokens": c["tokens"], "node": node.name, "attrs": a.attr,
            "dropped": a.drop_input, "rows": a.rows, "inputs": [], "outputs": [], "order": names}
    for k, v in feeds.items():
        f = f"in_{safe(k)}.bin"
        v.tofile(os.path.join(a.out, f))
        case["inputs"].append({"name": k, "type": str(v.dtype) if v.dtype != np.bool_ else "bool", "dims": list(v.shape), "file": f})
    for k, v in zip(names, res):
        f = f"{safe(k)}.bin"
        v.tofile(os.path.join(a.out, "cpu", f))
        case["outputs"].append({"name": k, "type": str(v.dtype), "dims": list(v.shape), "file": f})
    json.dump(case, open(os.path.join(a.out, "case.json"), "w"), indent=1)
    print(f"{node.op_type} {node.name}: inputs {[(k, list(v.shape)) for k, v in feeds.items()]}")


if __name__ == "__main__":
    main()
