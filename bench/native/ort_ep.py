#!/usr/bin/env python3
"""The native peer of `gemma-gem bench`: ONNX Runtime with its WebGPU plug-in execution provider
(PyPI `onnxruntime-ep-webgpu`: Dawn, the kernels of onnxruntime-web's WebGPU EP) on the same ONNX
files, the same synthetic prompt ids and the same measurements, printed as the same JSON
(`prefill[].runs[].{ttft_s, tok_s}`, `decode[].runs[].{decode_s, tok_s}`, `decode[].ids`).

    python bench/native/ort_ep.py --model DIR [--dtype q4|q4f16] [--prefill 128,512]
        [--decode-context 128,1024] [--decode-tokens 32] [--runs 1] [--token-ids]

At its best: the KV cache and the embeddings stay on the device (IOBinding: present.* bound to
'webgpu' and fed back as past_key_values.*), only the logits come back (argmax on the CPU, greedy,
as onnxruntime-web in the browser bench), graph optimizations all. Timed with time.perf_counter
around the same steps as ours: TTFT from the prompt ids to the first id on the CPU, decode from
then to the last of --decode-tokens further ids, nothing in flight before.

`--ep cpu`: ONNX Runtime's CPU EP (no plug-in needed), the reference the benches consult when
the runtimes' greedy ids differ.
`--judge FILE` (with `--ep cpu`): no measurement; each request of FILE (`[{"context", "ids",
"alternatives"}]`) is scored teacher-forced: the prompt ids of `context`, then the ids fed one
by one, and at each step the CPU EP's own pick, its logit and the fed id's logit (the benches
ask it, at the first id where two runtimes differ, which of the two it picks).
`--kv-shared-windowless` (with `--ep cpu`, on a GenAI package): the CPU EP on the graph with the
sliding window taken off every KV-shared GroupQueryAttention (a node whose past_key is another
node's present: mobius's Gemma 4 layers that reuse an earlier layer's cache), the other layers as
written. That is what ONNX Runtime's WebGPU kernels compute on such graphs (they keep those
layers without a window: onnxruntime #32462, bench/repro/README.md part 2), so the benches check
a peer's differing ids against it, free-running and, with `--judge`, teacher-forced on the
peer's ids; `kv_shared_windows_removed` in the JSON counts the nodes (the script fails when there
is none, with `--judge` too). With `--judge`, a request whose alternatives all lie inside the
smallest of those windows (context + step <= window: no query row up to there has a key outside
it, so the two graphs compute the same logits) is answered `{"inside_kv_shared_window": W}`
without running it.
`--model` is a folder in the onnx-community layout (embed_tokens_<dtype>.onnx +
decoder_model_merged_<dtype>.onnx) or an ONNX Runtime GenAI package (genai_config.json: mobius's
`embedding/` + `decoder/`, or one graph taking input_ids; one variant, --dtype ignored). On the CPU
EP a GenAI package's MatMulNBits run with accuracy_level 0 (exact fp32 dequantization, as our
runtime computes; mobius writes 4, with which the CPU kernel quantizes the activations to int8 and
the logits move by up to 14 on the tiny fixture: tools/fixtures/README.md), so the referee is exact
math; the WebGPU EP runs the graph as written.

Without a GPU: ORT_WEBGPU_EP_ALLOW_SOFTWARE_ADAPTER=1 and a Vulkan ICD Dawn accepts (Chromium's
SwiftShader, VK_ICD_FILENAMES=/usr/lib/chromium/vk_swiftshader_icd.json; Dawn refuses lavapipe),
for checking the script, not for speed.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import onnxruntime as ort


def prompt_ids(n: int, vocab: int) -> list[int]:
    """gg_llm::bench::prompt_ids: <bos>, then 3 + (i * 7919) mod (vocab - 3)."""
    span = max(vocab - 3, 1)
    return [2 if i == 0 else 3 + (i * 7919) % span for i in range(n)]


NP = {"tensor(float)": np.float32, "tensor(float16)": np.float16}


class Model:
    def __init__(self, folder: str, dtype: str | None, ep: str, windowless: bool = False):
        try:
            with open(f"{folder}/genai_config.json") as f:
                genai = json.load(f)["model"]
        except FileNotFoundError:
            genai = None
        if genai is None:
            with open(f"{folder}/config.json") as f:
                cfg = json.load(f)
            text = cfg.get("text_config", cfg)
            self.vocab = text["vocab_size"]
            self.limit = text.get("max_position_embeddings")
        else:
            import positions  # bench/native/positions.py, beside this script

            self.vocab = genai["vocab_size"]
            # genai_config.json's context, or fewer: the rows of the rotary tables.
            self.limit = positions.limit(folder)
        self.ep = ep
        if windowless and (ep != "cpu" or genai is None):
            raise SystemExit("ort_ep.py: --kv-shared-windowless needs --ep cpu and a GenAI package")
        self.windowless = windowless
        self.windows_removed: list[int] = []  # the KV-shared windows taken off, one per node
        # Where the cache and the embeddings live between steps.
        self.where = "webgpu" if ep == "webgpu" else "cpu"
        self.device = None
        if ep == "webgpu":
            import onnxruntime_ep_webgpu as webgpu_ep

            ort.register_execution_provider_library("webgpu", webgpu_ep.get_library_path())
            devices = [d for d in ort.get_ep_devices() if d.ep_name == webgpu_ep.get_ep_name()]
            if not devices:
                raise SystemExit(
                    "ort_ep.py: no WebGPU EP device (no GPU adapter; without one set "
                    "ORT_WEBGPU_EP_ALLOW_SOFTWARE_ADAPTER=1 and a Vulkan ICD that Dawn accepts)"
                )
            self.device = devices[0]
        self.dtype = dtype or "q4f16"
        t0 = time.perf_counter()
        if genai is None:
            self.embed = self._session(f"{folder}/onnx/embed_tokens_{self.dtype}.onnx")
            self.decoder = self._session(f"{folder}/onnx/decoder_model_merged_{self.dtype}.onnx")
        else:
            exact = ep == "cpu"
            emb = genai.get("embedding", {}).get("filename")
            self.embed = self._session(f"{folder}/{emb}", exact) if emb else None
            self.decoder = self._session(f"{folder}/{genai['decoder']['filename']}", exact)
        self.load_s = time.perf_counter() - t0
        self.inputs = {i.name: i for i in self.decoder.get_inputs()}
        if genai is not None:
            past = [i for n, i in self.inputs.items() if n.startswith("past_key_values.")]
            self.dtype = "q4f16" if past and past[0].type == "tensor(float16)" else "q4"
        self.cache = [
            (name, name.replace("past_key_values.", "present."), i)
            for name, i in self.inputs.items()
            if name.startswith("past_key_values.")
        ]
        self.embed_outputs = [o.name for o in self.embed.get_outputs()] if self.embed else []
        # GenAI embedding graphs take image features too: none here ([0, hidden]).
        self.embed_extra = {
            i.name: np.zeros((0, i.shape[-1]), dtype=NP[i.type])
            for i in (self.embed.get_inputs() if self.embed else [])
            if i.name != "input_ids"
        }

    def _session(self, path: str, exact: bool = False) -> ort.InferenceSession:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if exact:
            # MatMulNBits with accuracy_level 0 (see the module doc). The graph alone is rewritten
            # and passed as bytes; ONNX Runtime reads its external weights from the graph's folder
            # (the onnx package would refuse them when hard-linked, as bench/tjs_layout.py links
            # them, and would hold them all in Python).
            import os

            import onnx

            so.add_session_config_entry(
                "session.model_external_initializers_file_folder_path",
                os.path.dirname(os.path.abspath(path)),
            )
            m = onnx.load(path, load_external_data=False)
            for n in m.graph.node:
                if n.op_type == "MatMulNBits":
                    for a in n.attribute:
                        if a.name == "accuracy_level":
                            a.i = 0
            if self.windowless:
                self.windows_removed += remove_kv_shared_windows(m.graph)
            path = m.SerializeToString()
        if self.device is None:
            return ort.InferenceSession(path, sess_options=so, providers=["CPUExecutionProvider"])
        so.add_provider_for_devices([self.device], {})
        return ort.InferenceSession(path, sess_options=so)


def remove_kv_shared_windows(graph) -> list[int]:
    """Sets local_window_size -1 on every KV-shared GroupQueryAttention of `graph` (its past_key,
    input 3, is another node's output rather than a graph input: the source layer's present) that
    has a window; returns the windows taken off, one per node."""
    produced = {o for n in graph.node for o in n.output}
    removed = []
    for n in graph.node:
        if n.op_type != "GroupQueryAttention" or len(n.input) < 4 or n.input[3] not in produced:
            continue
        for a in n.attribute:
            if a.name == "local_window_size" and a.i > 0:
                removed.append(a.i)
                a.i = -1
    return removed


class Generation:
    def __init__(self, m: Model):
        self.m = m
        self.past = 0
        self.cache = None  # OrtValues on the device after the first step
        self.logits = None  # the last position's logits of the last step

    def step(self, ids: list[int]) -> int:
        m = self.m
        s = len(ids)
        total = self.past + s
        b = m.decoder.io_binding()
        if m.embed is not None:
            eb = m.embed.io_binding()
            eb.bind_cpu_input("input_ids", np.asarray([ids], dtype=np.int64))
            for name, v in m.embed_extra.items():
                eb.bind_cpu_input(name, v)
            for name in m.embed_outputs:
                eb.bind_output(name, m.where)
            m.embed.run_with_iobinding(eb)
            emb = dict(zip(m.embed_outputs, eb.get_outputs()))
            b.bind_ortvalue_input("inputs_embeds", emb["inputs_embeds"])
            if "per_layer_inputs" in m.inputs:
                b.bind_ortvalue_input("per_layer_inputs", emb["per_layer_inputs"])
        else:
            b.bind_cpu_input("input_ids", np.asarray([ids], dtype=np.int64))
        b.bind_cpu_input("attention_mask", np.ones((1, total), dtype=np.int64))
        if "position_ids" in m.inputs:
            b.bind_cpu_input("position_ids", np.arange(self.past, total, dtype=np.int64)[None, :])
        if "num_logits_to_keep" in m.inputs:
            b.bind_cpu_input("num_logits_to_keep", np.array(1, dtype=np.int64))
        for k, (name, _present, info) in enumerate(m.cache):
            if self.cache is None:
                heads, dim = info.shape[1], info.shape[3]
                b.bind_cpu_input(name, np.zeros((1, heads, 0, dim), dtype=NP[info.type]))
            else:
                b.bind_ortvalue_input(name, self.cache[k])
        out_names = [o.name for o in m.decoder.get_outputs()]
        for name in out_names:
            b.bind_output(name, "cpu" if name == "logits" else m.where)
        m.decoder.run_with_iobinding(b)
        outs = dict(zip(out_names, b.get_outputs()))
        self.cache = [outs[present] for _name, present, _info in m.cache]
        self.past = total
        logits = outs["logits"].numpy()
        self.logits = logits.reshape(-1, logits.shape[-1])[-1]
        return int(np.argmax(self.logits))


def timed(m: Model, context: int, tokens: int) -> tuple[float, float, list[int]]:
    """(ttft_s, decode_s, ids) of the first token after `context` prompt ids and `tokens` more."""
    g = Generation(m)
    t0 = time.perf_counter()
    ids = [g.step(prompt_ids(context, m.vocab))]
    t1 = time.perf_counter()
    for _ in range(tokens):
        ids.append(g.step([ids[-1]]))
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, ids


def judge(m: Model, requests: list[dict]) -> list[dict]:
    """Teacher-forced scores (`--judge`): for each request `{"context": C, "ids": [...],
    "alternatives": [{"step": k, "id": x}, ...]}`, the prompt is prompt_ids(C) and then ids[:-1]
    fed one by one; step i's entry is `{"top", "top_logit", "logit"}`: the model's own pick after
    prompt + ids[:i], its logit, and ids[i]'s logit there. Each alternative gets its id's logit at
    its step. Greedy decoding picks ids[i] at step i exactly when `top == ids[i]`.

    Windowless (`--kv-shared-windowless`): a request with alternatives, all at steps k with
    context + k <= the smallest window removed, is answered `{"inside_kv_shared_window": W}`
    unrun: up to there the last query row sits at position context + k - 1 < W and sees keys from
    position - W + 1 <= 0, so no window cuts anything and the two graphs are one model."""
    out = []
    for r in requests:
        context, ids = int(r["context"]), [int(t) for t in r["ids"]]
        if not ids:
            raise SystemExit("ort_ep.py: --judge: a request has no ids")
        if m.limit is not None and context + len(ids) > m.limit:
            raise SystemExit(
                f"ort_ep.py: --judge: {context} + {len(ids)} positions exceed the model's {m.limit}"
            )
        alts = [(int(a["step"]), int(a["id"])) for a in r.get("alternatives", [])]
        for k, t in alts:
            if not 0 <= k < len(ids) or not 0 <= t < m.vocab:
                raise SystemExit(f"ort_ep.py: --judge: alternative id {t} at step {k} is out of range")
        for t in ids:
            if not 0 <= t < m.vocab:
                raise SystemExit(f"ort_ep.py: --judge: id {t} is out of the vocabulary ({m.vocab})")
        w = min(m.windows_removed, default=None)
        if w is not None and alts and all(context + k <= w for k, _ in alts):
            out.append({"inside_kv_shared_window": w})
            continue
        g = Generation(m)
        steps, alt_logits = [], [None] * len(alts)
        g.step(prompt_ids(context, m.vocab))
        for i, t in enumerate(ids):
            lg = g.logits
            top = int(np.argmax(lg))
            steps.append({"top": top, "top_logit": float(lg[top]), "logit": float(lg[t])})
            for j, (k, a) in enumerate(alts):
                if k == i:
                    alt_logits[j] = float(lg[a])
            if i + 1 < len(ids):
                g.step([t])
        out.append({"steps": steps, "alternatives": alt_logits})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--dtype", choices=["q4", "q4f16"])
    ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    ap.add_argument("--prefill", type=ints, default=[128, 512])
    ap.add_argument("--decode-context", type=ints, default=[128, 1024])
    ap.add_argument("--decode-tokens", type=int, default=32)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--token-ids", action="store_true")
    ap.add_argument(
        "--ep",
        choices=["webgpu", "cpu"],
        default="webgpu",
        help="cpu: ONNX Runtime's CPU EP, the reference the benches' token check falls back on",
    )
    ap.add_argument(
        "--kv-shared-windowless",
        action="store_true",
        help="with --ep cpu on a GenAI package: no sliding window on KV-shared GroupQueryAttention "
        "layers (what ONNX Runtime's WebGPU kernels compute there)",
    )
    ap.add_argument(
        "--judge",
        metavar="FILE",
        help="with --ep cpu: score the id sequences of FILE teacher-forced instead of measuring "
        "(the benches' referee at the first differing id); prints {\"judged\": [...]}",
    )
    a = ap.parse_args()
    if a.judge and a.ep != "cpu":
        raise SystemExit("ort_ep.py: --judge needs --ep cpu (the reference)")
    m = Model(a.model, a.dtype, a.ep, a.kv_shared_windowless)
    if a.kv_shared_windowless and not m.windows_removed:
        raise SystemExit(
            "ort_ep.py: --kv-shared-windowless: no KV-shared GroupQueryAttention with a "
            f"local_window_size in {a.model}"
        )
    if a.judge:
        with open(a.judge) as f:
            requests = json.load(f)
        if not isinstance(requests, list):
            raise SystemExit(f"ort_ep.py: --judge: {a.judge} holds no JSON list of requests")
        print(json.dumps({"runtime": "ort_cpu", "onnxruntime": ort.__version__,
                          "judged": judge(m, requests)}))
        return
    log = lambda s: print(f"ort_ep: {s}", file=sys.stderr, flush=True)  # noqa: E731
    fits = lambda n: m.limit is None or n <= m.limit  # noqa: E731
    prefill = []
    for n in a.prefill:
        if not fits(n + 1):
            prefill.append({"tokens": n, "skipped": "over the model's context"})
            continue
        timed(m, n, 0)  # warm-up (shader compilation)
        runs = []
        for r in range(a.runs):
            ttft, _, ids = timed(m, n, 0)
            log(f"prefill {n}, run {r + 1}: {ttft:.3f} s ({n / ttft:.1f} tok/s)")
            runs.append({"ttft_s": ttft, "tok_s": n / ttft})
        prefill.append({"tokens": n, "runs": runs, "ids": ids})
    decode = []
    warm = False
    for c in a.decode_context:
        if not fits(c + a.decode_tokens + 1):
            decode.append({"context": c, "tokens": a.decode_tokens, "skipped": "over the model's context"})
            continue
        if not warm:
            timed(m, min(8, c), 2)
            warm = True
        runs = []
        for r in range(a.runs):
            _, dt, ids = timed(m, c, a.decode_tokens)
            log(f"decode {a.decode_tokens} after {c}, run {r + 1}: {a.decode_tokens / dt:.2f} tok/s")
            runs.append({"decode_s": dt, "tok_s": a.decode_tokens / dt})
        entry = {"context": c, "tokens": a.decode_tokens, "runs": runs}
        if a.token_ids:
            entry["ids"] = ids
        decode.append(entry)
    dev = m.device
    doc = {
        "runtime": "ort_webgpu_ep" if a.ep == "webgpu" else "ort_cpu",
        "onnxruntime": ort.__version__,
        "adapter": "cpu" if dev is None else " ".join(
            str(x) for x in [dev.device.vendor, dict(dev.device.metadata) or "", dev.device.type] if x
        ),
        "ep_metadata": {} if dev is None else dict(dev.ep_metadata),
        "dtype": m.dtype,
        "load_s": m.load_s,
        "kv_on_device": a.ep == "webgpu",
        "kv_shared_windows_removed": len(m.windows_removed),
        "prefill": prefill,
        "decode": decode,
    }
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
