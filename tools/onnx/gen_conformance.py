#!/usr/bin/env python3
"""Writes the ONNX backend *node* conformance cases of the installed `onnx` package to a folder.

Layout (the same as onnx/backend/test/cmd_tools.py):
    OUT/<case>/model.onnx
    OUT/<case>/test_data_set_N/input_J.pb, output_J.pb   (TensorProto)
    OUT/<case>/case.json                                   ({"rtol": .., "atol": ..})
Cases with non-tensor inputs/outputs (sequences, maps, optionals) are written with
`"skip": "<reason>"` in case.json and no data.

Usage (from the repository root):
    .venv/bin/python tools/onnx/gen_conformance.py [--out target/onnx-node-cases]
Then: cargo test -p gg-runtime --test conformance -- --nocapture
"""

import argparse
import json
import os
import shutil

import numpy as np
from onnx import TensorProto, numpy_helper
from onnx.backend.test.case import node as node_cases


def write_tensor(path, value, name):
    if isinstance(value, TensorProto):
        data = value.SerializeToString()
    else:
        data = numpy_helper.from_array(np.asarray(value), name).SerializeToString()
    with open(path, "wb") as f:
        f.write(data)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="target/onnx-node-cases")
    args = ap.parse_args()
    if os.path.exists(args.out):
        shutil.rmtree(args.out)
    os.makedirs(args.out)
    cases = node_cases.collect_testcases(None)
    written = skipped = 0
    for case in cases:
        if case.kind != "node" or case.model is None:
            continue
        out = os.path.join(args.out, case.name)
        os.makedirs(out)
        with open(os.path.join(out, "model.onnx"), "wb") as f:
            f.write(case.model.SerializeToString())
        meta = {"rtol": case.rtol, "atol": case.atol}
        g = case.model.graph
        non_tensor = [v.name for v in list(g.input) + list(g.output) if not v.type.HasField("tensor_type")]
        if non_tensor:
            meta["skip"] = "non-tensor inputs/outputs: " + ", ".join(non_tensor)
            skipped += 1
        else:
            for i, (inputs, outputs) in enumerate(case.data_sets):
                ds = os.path.join(out, f"test_data_set_{i}")
                os.makedirs(ds)
                for j, value in enumerate(inputs):
                    write_tensor(os.path.join(ds, f"input_{j}.pb"), value, g.input[j].name)
                for j, value in enumerate(outputs):
                    write_tensor(os.path.join(ds, f"output_{j}.pb"), value, g.output[j].name)
            written += 1
        with open(os.path.join(out, "case.json"), "w") as f:
            json.dump(meta, f)
    print(f"wrote {written} node cases ({skipped} more marked skip) to {args.out}")


if __name__ == "__main__":
    main()
