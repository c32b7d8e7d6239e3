"""The onnx-community view of an ONNX Runtime GenAI package, the layout transformers.js reads.

    python bench/tjs_layout.py SRC DST [--check]

`cargo xtask bench --browser` runs this for the `transformers_js` peer on the exporters' graph
form (mobius's GenAI packages): transformers.js picks its sessions by file name
(`onnx/embed_tokens_<dtype>.onnx`, `onnx/decoder_model_merged_<dtype>.onnx`) and its model class
from `config.json`, and a GenAI package has neither. DST gets the package's own two graphs, with
the same nodes and the same weights, under those names:

- `onnx/embed_tokens_<dtype>.onnx`: the embedding graph with its image-features input bound to an
  empty constant ([0, hidden]: a text-only prompt, what the other runtimes feed it), because
  transformers.js feeds `input_ids` alone to this session.
- `onnx/decoder_model_merged_<dtype>.onnx`: the decoder graph. Its batch dimension is renamed
  `batch_size` in the graph's declared shapes (a label only): transformers.js sizes its empty
  first cache from the decoder's input metadata by that name and takes any other name as 0.
- Inputs and outputs are renamed to transformers.js's names where genai_config.json names them
  otherwise (`inputs_embeds`, `per_layer_inputs`, `attention_mask`, `past_key_values.N.key` /
  `.value`, `logits`, `present.N.key` / `.value`).
- Each graph's external weights become `<file>.onnx_data` (`_1`, `_2`... when there are several
  files), hard-linked from the package where the file system allows it, else copied; the graphs'
  `location` fields are rewritten to match.
- `config.json` (model_type `gemma4`, its `text_config` from genai_config.json and from the
  decoder's cache inputs: the layers without one share another layer's cache), a
  `generation_config.json`, and the tokenizer files.

`--check` then runs the package and the view with ONNX Runtime's CPU EP on the same prompt and one
decode step after it, the view fed as transformers.js feeds it (`input_ids` alone, an empty
first cache sized by `batch_size`), and fails unless every output is bit-identical.

`<dtype>` is transformers.js's name of the package's one weight variant: `q4` (4-bit MatMulNBits
weights, float32 activations) or `q4f16` (float16 activations), from the decoder's
`inputs_embeds` type; printed last (`dtype <name>`) for the caller. DST is reused while its stamp
(`.tjs_layout.json`: this script's and every source file's size and mtime) is current.
"""

import hashlib
import json
import os
import re
import shutil
import sys

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from stamp import source_files

STAMP = ".tjs_layout.json"
SUPPORTED_TYPES = ("gemma4_text", "gemma4")


def fail(msg):
    raise SystemExit(f"tjs_layout: {msg}")


def rename_values(graph, renames):
    """Renames graph inputs / outputs (and every node's use of them) by `renames`."""
    if not renames:
        return
    for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
        if vi.name in renames:
            vi.name = renames[vi.name]
    for n in graph.node:
        for i, name in enumerate(n.input):
            if name in renames:
                n.input[i] = renames[name]
        for i, name in enumerate(n.output):
            if name in renames:
                n.output[i] = renames[name]
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                rename_values(a.g, renames)


def rename_dim(graph, old, new):
    """Renames the symbolic dimension `old` to `new` in every declared shape of the graph."""
    changed = 0
    for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
        if not vi.type.HasField("tensor_type"):
            continue
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param == old:
                d.dim_param = new
                changed += 1
    return changed


def relocate_external_data(model, src_dir, dst_dir, base):
    """Points every external tensor at `<base>_data` (`_data_1`...) in dst_dir and links (or copies)
    the files there. Returns the number of data files."""
    names = {}
    for t in list(model.graph.initializer):
        if t.data_location != TensorProto.EXTERNAL:
            continue
        for e in t.external_data:
            if e.key == "location":
                if e.value not in names:
                    names[e.value] = f"{base}_data" + ("" if not names else f"_{len(names)}")
                e.value = names[e.value]
    for old, new in names.items():
        s = os.path.normpath(os.path.join(src_dir, old))
        if not os.path.isfile(s):
            fail(f"external data file {s} (named by {base}'s source graph) does not exist")
        d = os.path.join(dst_dir, new)
        try:
            os.link(s, d)
        except OSError:
            shutil.copyfile(s, d)
    return len(names)


def template_index(template, name):
    """N when `name` is `template` (a genai_config.json name with %d) filled with N, else None."""
    m = re.fullmatch(re.escape(template).replace("%d", r"(\d+)"), name)
    return int(m.group(1)) if m else None


def np_type(ort_type):
    """numpy's type for an ONNX Runtime input type string (float or float16 tensors)."""
    return np.float32 if ort_type == "tensor(float)" else np.float16


def io_names(section, key, default):
    return (section or {}).get(key, default)


def check(src, dst, genai, dtype):
    """Runs the package and its view on the CPU EP: a prompt, then one decode step."""
    import onnxruntime as ort

    g = genai["model"]
    emb_cfg, dec_cfg = g["embedding"], g["decoder"]
    so = ort.SessionOptions()
    so.log_severity_level = 3
    cpu = ["CPUExecutionProvider"]

    def session(path):
        return ort.InferenceSession(path, so, providers=cpu)

    e0 = session(os.path.join(src, emb_cfg["filename"]))
    d0 = session(os.path.join(src, dec_cfg["filename"]))
    e1 = session(os.path.join(dst, "onnx", f"embed_tokens_{dtype}.onnx"))
    d1 = session(os.path.join(dst, "onnx", f"decoder_model_merged_{dtype}.onnx"))
    vocab = int(g.get("vocab_size") or 256)
    e_ins, e_outs = emb_cfg.get("inputs", {}), emb_cfg.get("outputs", {})
    d_ins, d_outs = dec_cfg.get("inputs", {}), dec_cfg.get("outputs", {})
    ids_name, image_name = e_ins.get("input_ids", "input_ids"), e_ins.get("image_features")
    pk = d_ins.get("past_key_names", "past_key_values.%d.key")
    pv = d_ins.get("past_value_names", "past_key_values.%d.value")
    ok = d_outs.get("present_key_names", "present.%d.key")
    ov = d_outs.get("present_value_names", "present.%d.value")

    def run_package(ids, past, total):
        feeds = {ids_name: ids}
        for i in e0.get_inputs():
            if i.name == image_name:
                feeds[i.name] = np.zeros((0, i.shape[1]), np_type(i.type))
        emb = dict(zip([o.name for o in e0.get_outputs()], e0.run(None, feeds)))
        feeds = {
            d_ins.get("inputs_embeds", "inputs_embeds"): emb[e_outs.get("inputs_embeds", "inputs_embeds")],
            d_ins.get("attention_mask", "attention_mask"): np.ones((1, total), np.int64),
        }
        pli = d_ins.get("per_layer_inputs", "per_layer_inputs")
        if pli in {i.name for i in d0.get_inputs()}:
            feeds[pli] = emb[e_outs.get("per_layer_inputs", "per_layer_inputs")]
        for i in d0.get_inputs():
            for t, kind in ((pk, "key"), (pv, "value")):
                n = template_index(t, i.name)
                if n is not None:
                    feeds[i.name] = past[(n, kind)] if past else np.zeros(
                        [1, i.shape[1], 0, i.shape[3]], np_type(i.type))
        out = dict(zip([o.name for o in d0.get_outputs()], d0.run(None, feeds)))
        logits = out[d_outs.get("logits", "logits")]
        presents = {}
        for name, v in out.items():
            for t, kind in ((ok, "key"), (ov, "value")):
                n = template_index(t, name)
                if n is not None:
                    presents[(n, kind)] = v
        return logits, presents

    def run_view(ids, past, total):
        emb = dict(zip([o.name for o in e1.get_outputs()], e1.run(None, {"input_ids": ids})))
        feeds = {"inputs_embeds": emb["inputs_embeds"], "attention_mask": np.ones((1, total), np.int64)}
        names = {i.name for i in d1.get_inputs()}
        if "per_layer_inputs" in names:
            feeds["per_layer_inputs"] = emb["per_layer_inputs"]
        for i in d1.get_inputs():
            m = re.fullmatch(r"past_key_values\.(\d+)\.(key|value)", i.name)
            if m:
                if past:
                    feeds[i.name] = past[(int(m.group(1)), m.group(2))]
                else:  # transformers.js: batch_size -> 1, any other symbol -> 0
                    shape = [d if isinstance(d, int) else (1 if d == "batch_size" else 0) for d in i.shape]
                    feeds[i.name] = np.zeros(shape, np_type(i.type))
        out = dict(zip([o.name for o in d1.get_outputs()], d1.run(None, feeds)))
        presents = {}
        for name, v in out.items():
            m = re.fullmatch(r"present\.(\d+)\.(key|value)", name)
            if m:
                presents[(int(m.group(1)), m.group(2))] = v
        return out["logits"], presents

    prompt = np.array([[(7 + 13 * i) % vocab for i in range(6)]], np.int64)
    step = np.array([[(prompt[0, -1] * 5 + 3) % vocab]], np.int64)
    l0, p0 = run_package(prompt, None, 6)
    l1, p1 = run_view(prompt, None, 6)
    s0, _ = run_package(step, p0, 7)
    s1, _ = run_view(step, p1, 7)
    if sorted(p0) != sorted(p1):
        fail(f"check: the view's cache outputs {sorted(p1)} differ from the package's {sorted(p0)}")
    for what, a, b in [("prompt logits", l0, l1), ("decode logits", s0, s1)] + [
        (f"present {k}", p0[k], p1[k]) for k in sorted(p0)
    ]:
        if a.shape != b.shape or not np.array_equal(a, b):
            d = float(np.abs(a - b).max()) if a.shape == b.shape else float("nan")
            fail(f"check: {what} differ between the package and the view (shapes {a.shape} / {b.shape}, max |d| {d})")
    print(f"check: the view's outputs are bit-identical to the package's (a prompt of 6, one decode step; {len(p0)} cache tensors)")


def main():
    args = [a for a in sys.argv[1:] if a != "--check"]
    if len(args) != 2 or len(sys.argv) - 1 > 3:
        raise SystemExit(__doc__)
    src, dst = os.path.abspath(args[0]), os.path.abspath(args[1])
    want_check = "--check" in sys.argv[1:]
    cfg_path = os.path.join(src, "genai_config.json")
    if not os.path.isfile(cfg_path):
        fail(f"{src} is not an ONNX Runtime GenAI package (no genai_config.json)")
    with open(cfg_path) as f:
        genai = json.load(f)
    g = genai.get("model") or {}
    mtype = g.get("type")
    if mtype not in SUPPORTED_TYPES:
        fail(f"model type {mtype!r}: transformers.js's Gemma 4 classes read {SUPPORTED_TYPES} only")
    emb_cfg, dec_cfg = g.get("embedding"), g.get("decoder")
    if not emb_cfg or not emb_cfg.get("filename") or not dec_cfg or not dec_cfg.get("filename"):
        fail("genai_config.json names no embedding or no decoder graph (model.embedding / model.decoder .filename)")

    files = source_files(src)
    with open(__file__, "rb") as f:
        script = hashlib.sha256(f.read()).hexdigest()
    stamp = {"source": src, "script": script, "files": files}
    try:
        with open(os.path.join(dst, STAMP)) as f:
            old = json.load(f)
        if {k: old.get(k) for k in stamp} == stamp:
            print(f"{dst}: current")
            if want_check:
                check(src, dst, genai, old["dtype"])
            print(f"dtype {old['dtype']}")
            return
    except (OSError, ValueError, KeyError):
        pass
    if os.path.exists(dst):
        shutil.rmtree(dst)
    os.makedirs(os.path.join(dst, "onnx"))

    # --- decoder -------------------------------------------------------------------------------
    dec_path = os.path.join(src, dec_cfg["filename"])
    dec = onnx.load(dec_path, load_external_data=False)
    ins, outs = io_names(dec_cfg, "inputs", {}), io_names(dec_cfg, "outputs", {})
    renames = {}
    for key, want in (("inputs_embeds", "inputs_embeds"), ("per_layer_inputs", "per_layer_inputs"),
                      ("attention_mask", "attention_mask")):
        have = ins.get(key, want)
        if have != want:
            renames[have] = want
    if outs.get("logits", "logits") != "logits":
        renames[outs["logits"]] = "logits"
    pk = ins.get("past_key_names", "past_key_values.%d.key")
    pv = ins.get("past_value_names", "past_key_values.%d.value")
    ok = outs.get("present_key_names", "present.%d.key")
    ov = outs.get("present_value_names", "present.%d.value")

    cache_layers = set()
    for vi in dec.graph.input:
        for template, want in ((pk, "past_key_values.%d.key"), (pv, "past_key_values.%d.value")):
            i = template_index(template, vi.name)
            if i is not None:
                cache_layers.add(i)
                if vi.name != want % i:
                    renames[vi.name] = want % i
    for vi in dec.graph.output:
        for template, want in ((ok, "present.%d.key"), (ov, "present.%d.value")):
            i = template_index(template, vi.name)
            if i is not None and vi.name != want % i:
                renames[vi.name] = want % i
    rename_values(dec.graph, renames)
    dec_inputs = {vi.name: vi for vi in dec.graph.input}
    known = {"inputs_embeds", "per_layer_inputs", "attention_mask", "position_ids", "num_logits_to_keep"}
    extra = [n for n in dec_inputs if n not in known and not n.startswith("past_key_values.")]
    if extra:
        fail(f"the decoder has inputs transformers.js does not feed: {extra}")
    if "inputs_embeds" not in dec_inputs or "attention_mask" not in dec_inputs:
        fail("the decoder has no inputs_embeds or no attention_mask input")
    if "logits" not in {vi.name for vi in dec.graph.output}:
        fail("the decoder has no logits output")
    if sorted(cache_layers) != list(range(len(cache_layers))):
        fail(f"the decoder's cache inputs are not layers 0..n-1: {sorted(cache_layers)}")
    emb_t = dec_inputs["inputs_embeds"].type.tensor_type
    act = emb_t.elem_type
    if act not in (TensorProto.FLOAT, TensorProto.FLOAT16):
        fail(f"inputs_embeds has element type {TensorProto.DataType.Name(act)}; expected FLOAT or FLOAT16")
    quantized = any(n.op_type == "MatMulNBits" for n in dec.graph.node)
    dtype = ("q4" if act == TensorProto.FLOAT else "q4f16") if quantized else ("fp32" if act == TensorProto.FLOAT else "fp16")
    batch = emb_t.shape.dim[0]
    batch_renamed = 0
    if batch.HasField("dim_param") and batch.dim_param != "batch_size":
        batch_renamed = rename_dim(dec.graph, batch.dim_param, "batch_size")
    dec_name = f"decoder_model_merged_{dtype}.onnx"
    dec_chunks = relocate_external_data(dec, os.path.dirname(dec_path), os.path.join(dst, "onnx"), dec_name)
    onnx.save(dec, os.path.join(dst, "onnx", dec_name))

    # --- embedding -----------------------------------------------------------------------------
    emb_path = os.path.join(src, emb_cfg["filename"])
    emb = onnx.load(emb_path, load_external_data=False)
    e_ins, e_outs = io_names(emb_cfg, "inputs", {}), io_names(emb_cfg, "outputs", {})
    renames = {}
    if e_ins.get("input_ids", "input_ids") != "input_ids":
        renames[e_ins["input_ids"]] = "input_ids"
    for key in ("inputs_embeds", "per_layer_inputs"):
        if e_outs.get(key, key) != key:
            renames[e_outs[key]] = key
    rename_values(emb.graph, renames)
    image = e_ins.get("image_features")
    bound = []
    for vi in list(emb.graph.input):
        if vi.name == "input_ids":
            continue
        if vi.name != image:
            fail(f"the embedding graph has an input transformers.js does not feed: {vi.name}")
        t = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
        if len(dims) != 2 or dims[1] is None:
            fail(f"{vi.name}: expected [num_image_tokens, hidden] with a fixed hidden size, got {dims}")
        empty = np.zeros((0, dims[1]), dtype=onnx.helper.tensor_dtype_to_np_dtype(t.elem_type))
        emb.graph.initializer.append(numpy_helper.from_array(empty, vi.name))
        emb.graph.input.remove(vi)
        bound.append(vi.name)
    out_names = {vi.name for vi in emb.graph.output}
    if "input_ids" not in {vi.name for vi in emb.graph.input} or "inputs_embeds" not in out_names:
        fail("the embedding graph has no input_ids input or no inputs_embeds output")
    emb_name = f"embed_tokens_{dtype}.onnx"
    emb_chunks = relocate_external_data(emb, os.path.dirname(emb_path), os.path.join(dst, "onnx"), emb_name)
    onnx.save(emb, os.path.join(dst, "onnx", emb_name))

    # --- config and tokenizer ------------------------------------------------------------------
    layers = int(dec_cfg.get("num_hidden_layers") or 0)
    if layers < len(cache_layers) or not cache_layers:
        fail(f"num_hidden_layers {layers} with {len(cache_layers)} cache inputs")
    text = {
        "model_type": "gemma4_text",
        "num_hidden_layers": layers,
        "num_kv_shared_layers": layers - len(cache_layers),
        "num_attention_heads": dec_cfg.get("num_attention_heads"),
        "num_key_value_heads": dec_cfg.get("num_key_value_heads"),
        "head_dim": dec_cfg.get("head_size"),
        "hidden_size": dec_cfg.get("hidden_size"),
        "vocab_size": g.get("vocab_size"),
        "max_position_embeddings": g.get("context_length"),
        "bos_token_id": g.get("bos_token_id"),
        "eos_token_id": g.get("eos_token_id"),
        "pad_token_id": g.get("pad_token_id"),
        "use_cache": True,
    }
    external = {}
    if emb_chunks:
        external[emb_name] = emb_chunks
    if dec_chunks:
        external[dec_name] = dec_chunks
    config = {
        "architectures": ["Gemma4ForConditionalGeneration"],
        "model_type": "gemma4",
        "text_config": text,
        "vision_config": None,
        "audio_config": None,
        "bos_token_id": g.get("bos_token_id"),
        "eos_token_id": g.get("eos_token_id"),
        "pad_token_id": g.get("pad_token_id"),
        "image_token_id": g.get("image_token_id"),
        "transformers.js_config": {"use_external_data_format": external},
        "_layout": {
            "source": src,
            "made_by": "bench/tjs_layout.py",
            "note": "the GenAI package's own graphs and weights under transformers.js's file names",
            "embedding_inputs_bound_empty": bound,
            "decoder_batch_dim_renamed": batch_renamed,
        },
    }
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    gen = {k: g.get(k) for k in ("bos_token_id", "eos_token_id", "pad_token_id")}
    with open(os.path.join(dst, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json"):
        if os.path.isfile(os.path.join(src, name)):
            shutil.copyfile(os.path.join(src, name), os.path.join(dst, name))
    if not os.path.isfile(os.path.join(dst, "tokenizer.json")):
        fail(f"{src} has no tokenizer.json (transformers.js's pipeline loads the tokenizer)")
    with open(os.path.join(dst, STAMP), "w") as f:
        json.dump({**stamp, "dtype": dtype}, f)
    print(f"{dst}: {emb_name} ({len(bound)} input(s) bound empty), {dec_name} "
          f"({len(cache_layers)} cache layers of {layers}, {batch_renamed} batch dims renamed)")
    if want_check:
        check(src, dst, genai, dtype)
    print(f"dtype {dtype}")


if __name__ == "__main__":
    main()
