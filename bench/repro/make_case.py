"""Prepares a case for comparing ONNX Runtime's CPU EP (python) with onnxruntime-web.

    python bench/repro/make_case.py --model tests/fixtures/models/gemma4-tiny --dtype q4 \
        --tokens 64 --out /tmp/case [--outputs all|NAME,NAME]  (all: every node output of a known type;
        float: every float one)

MODEL is an onnx-community folder (config.json, onnx/embed_tokens_DTYPE.onnx,
onnx/GRAPH_DTYPE.onnx) or an ONNX Runtime GenAI package (genai_config.json with its embedding
and decoder files, as mobius writes them; --dtype and --graph do not apply).

Writes into OUT: the decoder graph (its weights in one external file), with extra graph outputs
when asked (`all`: every node output of a known type; else the listed tensor names), the decoder's inputs
for one prompt of TOKENS synthetic ids (the bench's: <bos>, then 3 + (i * 7919) mod (vocab - 3)),
embedded by the model's embed_tokens graph on the CPU EP (so that every runtime gets the same
float inputs), as raw little-endian files with `case.json` describing them, and the CPU EP's
value of every graph output (`cpu/NAME.bin`).
"""

import argparse
import json
import os

import numpy as np
import onnx
import onnxruntime as ort




def prompt_ids(n, vocab):
    span = max(vocab - 3, 1)
    return [2 if i == 0 else 3 + (i * 7919) % span for i in range(n)]


def safe(name):
    return name.replace("/", "_").replace(":", "_").lstrip("_")


def set_attrs(graph, settings):
    """Sets OP.NAME=INT attributes (make_case's --accuracy-level and --set-attr) on every node of the op."""
    for op, name, value in settings:
        for n in graph.node:
            if n.op_type == op:
                keep = [x for x in n.attribute if x.name != name]
                del n.attribute[:]
                n.attribute.extend(keep)
                n.attribute.append(onnx.helper.make_attribute(name, value))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--dtype", default="q4")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--outputs", default="")
    ap.add_argument("--past", type=int, default=0,
                    help="a decode step instead: TOKENS of prompt run on the CPU EP first, then one step on the CPU EP's greedy id with that cache as past")
    ap.add_argument("--graph", default="decoder_model_merged", help="graph file stem in MODEL/onnx")
    ap.add_argument("--accuracy-level", type=int, default=None,
                    help="set every MatMulNBits' accuracy_level in the case's graph (0: exact math; the CPU EP's int8 path at 4 is another computation)")
    ap.add_argument("--set-attr", action="append", default=[], metavar="OP.NAME=INT",
                    help="set an integer attribute on every node of that op type in the case's graph and in the prompt run of --past "
                         "(e.g. GroupQueryAttention.local_window_size=-1)")
    ap.add_argument("--part", choices=["decoder", "embedding"], default="decoder",
                    help="embedding: a case of the embedding graph itself (its inputs: the ids and, in a GenAI package, empty image features)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(os.path.join(a.out, "cpu"), exist_ok=True)
    genai = os.path.exists(os.path.join(a.model, "genai_config.json"))
    if genai:
        # An ONNX Runtime GenAI package (mobius): embedding/model.onnx takes the ids and empty
        # image features; decoder/model.onnx has no position_ids (GroupQueryAttention derives the
        # positions from the mask).
        gc = json.load(open(os.path.join(a.model, "genai_config.json")))["model"]
        vocab = gc["vocab_size"]
        emb_path = os.path.join(a.model, gc["embedding"]["filename"])
        dec_path = os.path.join(a.model, gc["decoder"]["filename"])
    else:
        cfg = json.load(open(os.path.join(a.model, "config.json")))
        vocab = cfg.get("text_config", cfg)["vocab_size"]
        emb_path = os.path.join(a.model, "onnx", f"embed_tokens_{a.dtype}.onnx")
        dec_path = os.path.join(a.model, "onnx", f"{a.graph}_{a.dtype}.onnx")
    ids = np.array([prompt_ids(a.tokens, vocab)], dtype=np.int64)

    emb = ort.InferenceSession(emb_path, providers=["CPUExecutionProvider"])

    def embed_feeds(ids):
        """The embedding graph's inputs: the ids, and empty image features in a GenAI package."""
        feeds = {"input_ids": ids}
        for i in emb.get_inputs():
            if i.name == "image_features":
                feeds[i.name] = np.zeros((0, i.shape[1]), np.float32 if i.type == "tensor(float)" else np.float16)
        return feeds

    def embed(ids):
        return dict(zip([o.name for o in emb.get_outputs()], emb.run(None, embed_feeds(ids))))

    e = embed(ids)

    settings = [("MatMulNBits", "accuracy_level", a.accuracy_level)] if a.accuracy_level is not None else []
    for kv in a.set_attr:
        k, v = kv.split("=")
        op, name = k.split(".")
        settings.append((op, name, int(v)))

    m = onnx.load(dec_path)
    g = m.graph
    past, start = {}, 0
    if a.past:
        # The prompt on the CPU EP; its cache becomes the past of one decode step.
        pm = onnx.load(dec_path)
        set_attrs(pm.graph, settings)
        full = ort.InferenceSession(pm.SerializeToString(), providers=["CPUExecutionProvider"])
        pf = {k: v for k, v in e.items()}
        pf["attention_mask"] = np.ones((1, a.tokens), np.int64)
        pf["position_ids"] = np.arange(a.tokens, dtype=np.int64)[None]
        pf["num_logits_to_keep"] = np.array(1, np.int64)
        for i in full.get_inputs():
            if i.name.startswith("past_key_values."):
                pf[i.name] = np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32 if i.type == "tensor(float)" else np.float16)
        names = [o.name for o in full.get_outputs()]
        res = dict(zip(names, full.run(None, {k: v for k, v in pf.items() if k in {i.name for i in full.get_inputs()}})))
        nxt = int(np.argmax(res["logits"][0, -1]))
        print(f"prompt of {a.tokens} on the CPU EP: greedy id {nxt}")
        past = {k.replace("present.", "past_key_values."): v for k, v in res.items() if k.startswith("present.")}
        start = a.tokens
        ids = np.array([[nxt]], np.int64)
        e = embed(ids)
    n = ids.shape[1]
    feeds = {}
    if a.part == "embedding":
        m = onnx.load(emb_path)
        g = m.graph
        feeds = embed_feeds(ids)
    for i in (g.input if a.part == "decoder" else []):
        dims = [d.dim_value if d.HasField("dim_value") else None for d in i.type.tensor_type.shape.dim]
        if i.name in e:
            feeds[i.name] = e[i.name]
        elif i.name == "attention_mask":
            feeds[i.name] = np.ones((1, start + n), np.int64)
        elif i.name == "position_ids":
            feeds[i.name] = np.arange(start, start + n, dtype=np.int64)[None]
        elif i.name in past:
            feeds[i.name] = past[i.name]
        elif i.name == "num_logits_to_keep":
            feeds[i.name] = np.array(1, np.int64)
        elif i.name.startswith("past_key_values."):
            feeds[i.name] = np.zeros((1, dims[1], 0, dims[3]), np.float32 if i.type.tensor_type.elem_type == 1 else np.float16)
        else:
            raise SystemExit(f"unknown input {i.name}")

    set_attrs(g, settings)
    extra = []
    if a.outputs:
        inferred = onnx.shape_inference.infer_shapes(m)
        types = {v.name: v.type.tensor_type.elem_type for v in list(inferred.graph.value_info) + list(g.output)}
        types.update({i.name: i.type.tensor_type.elem_type for i in g.input})
        types.update({t.name: t.data_type for t in g.initializer})
        # Contrib ops (GroupQueryAttention, MatMulNBits, SimplifiedLayerNormalization, ...) get
        # no inferred types: their outputs have the type of their first input when it is float.
        for n in g.node:
            if n.input and n.input[0]:
                t = types.get(n.input[0])
                for o in n.output:
                    if o and o not in types and t in (1, 10):
                        types[o] = t
        have = {o.name for o in g.output}
        if a.outputs in ("all", "float"):
            kinds = (1, 6, 7, 9, 10) if a.outputs == "all" else (1, 10)
            # Not the present K/V of a GroupQueryAttention that is no graph output: those are
            # mobius's KV-shared layers, whose present ONNX Runtime's WebGPU EP never allocates
            # (asking for them fails the run with "Unsupported OrtValue type"); nothing reads them.
            # Nor the optional mean / inverse-std outputs of the layer norms (WebGPU computes none).
            not_made = {o for n in g.node if n.op_type == "GroupQueryAttention" for o in n.output[1:]}
            not_made |= {o for n in g.node if n.op_type.endswith("LayerNormalization") for o in n.output[1:3]}
            not_made -= {o.name for o in g.output}
            want = [o for n in g.node for o in n.output if o and types.get(o) in kinds and o not in not_made]
        else:
            want = a.outputs.split(",")
        for name in want:
            if name in have:
                continue
            t = types.get(name)
            if t is None:
                raise SystemExit(f"no type for {name}")
            g.output.append(onnx.helper.make_tensor_value_info(name, t, None))
            extra.append(name)
    onnx.save(m, os.path.join(a.out, "model.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
              location="model.onnx_data", size_threshold=1024)

    so = ort.SessionOptions()
    sess = ort.InferenceSession(os.path.join(a.out, "model.onnx"), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    outs = sess.run(None, feeds)
    # Empty tensors (a KV-shared layer's ConstantOfShape K/V) as extra outputs make ONNX Runtime's
    # WebGPU EP fail the run ("Unsupported OrtValue type"): leave them out of the saved graph (its
    # weights stay in model.onnx_data as written) and of the outputs, which they do not change.
    empties = [{"name": k, "type": str(v.dtype), "dims": list(v.shape)} for k, v in zip(names, outs) if v.size == 0 and k in extra]
    if empties:
        empty = {e["name"] for e in empties}
        saved = onnx.load(os.path.join(a.out, "model.onnx"), load_external_data=False)
        kept = [o for o in saved.graph.output if o.name not in empty]
        del saved.graph.output[:]
        saved.graph.output.extend(kept)
        onnx.save(saved, os.path.join(a.out, "model.onnx"))
        outs = [v for k, v in zip(names, outs) if k not in empty]
        names = [k for k in names if k not in empty]
    case = {"ort_python": ort.__version__, "tokens": a.tokens, "past": start, "ids": ids[0].tolist(), "inputs": [], "outputs": [],
            "empty": empties}  # the empty tensors left out of the outputs (for extract_node.py)
    for k, v in feeds.items():
        v = np.ascontiguousarray(v).reshape(v.shape)
        f = f"in_{safe(k)}.bin"
        v.tofile(os.path.join(a.out, f))
        case["inputs"].append({"name": k, "type": str(v.dtype), "dims": list(v.shape), "file": f})
    for k, v in zip(names, outs):
        f = f"{safe(k)}.bin"
        v.tofile(os.path.join(a.out, "cpu", f))
        case["outputs"].append({"name": k, "type": str(v.dtype), "dims": list(v.shape), "file": f})
    # Graph order of the outputs, for "first node that differs".
    case["order"] = [o for n in g.node for o in n.output if o in set(names)]
    json.dump(case, open(os.path.join(a.out, "case.json"), "w"), indent=1)
    if "logits" not in names:
        print(f"{len(names)} outputs ({len(extra)} extra)")
        return
    lg = outs[names.index("logits")][0, -1]
    top = np.argsort(lg)[::-1][:2]
    print(f"{len(names)} outputs ({len(extra)} extra); cpu argmax {top[0]} top-2 gap {lg[top[0]] - lg[top[1]]:.6g}")


if __name__ == "__main__":
    main()
