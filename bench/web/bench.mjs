// The bench page: the same measurements for our runtime (wasm, ./pkg), onnxruntime-web (./ort.mjs:
// `ort_web`, and `ort_web_static` with a fixed-capacity cache and graph capture on GenAI packages)
// and transformers.js (./tjs.mjs). The driver (bench/run-browser.mjs) opens a fresh page per
// runtime and pair and calls window.bench.load(...) then window.bench.measure(...).
//
// One clock for all: performance.now() on this page, around the same awaited calls. A generation
// is timed as
//   t0 -> first token id on the CPU (TTFT) -> one untimed decode step, its id on the CPU -> t1
//      -> N decode steps, the last id on the CPU -> t2
// with nothing of ours in flight at t1 (our prompt step never runs ahead, nor does the untimed
// step; each timed step but the last runs the next one ahead, as a text stream does, and the last
// leaves nothing in flight), so decode = N / (t2 - t1) for every runtime, and the ids (N + 2 of
// them) are returned for the token check. The untimed step (DECODE_UNTIMED_STEPS) takes the
// kernels a decode step at this context needs but the warm-up's short context did not out of
// the clock, for every runtime: ours splits its attention from 256 keys, and compiled those
// kernels in its first step past them (mobius-tiny, 4 steps after 300: 4.3 tok/s against 32.8
// after 200, SwiftShader).
// Ours alone then measures decode inside a constrained tool call (`in_call`, BenchModel's
// decode_in_call: the generator's counters, which read performance.now() too).
import init, * as ours from './pkg/gg_bench_wasm.js';
import * as ort from './ort.mjs';

let loaded = null; // { runtime, handle }
let wasm = null; // our module's exports (its memory)

function status(text) {
  document.getElementById('status').textContent = text;
}

/** The same prompt ids for every runtime: <bos>, then 3 + (i * 7919) mod (vocab - 3)
 * (gg_llm::bench::prompt_ids). */
export function promptIds(n, vocab) {
  const span = Math.max(vocab - 3, 1);
  return Array.from({ length: n }, (_, i) => (i === 0 ? 2 : 3 + ((i * 7919) % span)));
}

async function requestAdapter() {
  const adapter = await navigator.gpu?.requestAdapter({ powerPreference: 'high-performance' });
  if (!adapter) throw new Error('this browser has no WebGPU adapter (run Chromium with --enable-unsafe-webgpu)');
  return adapter;
}

/** 'q4f16' when the adapter has shader-f16 (our runtime's own rule), otherwise 'q4'. */
async function defaultDtype() {
  return (await requestAdapter()).features.has('shader-f16') ? 'q4f16' : 'q4';
}

async function adapterInfo() {
  const i = (await requestAdapter()).info || {};
  const name = [i.vendor, i.architecture, i.device, i.description].filter(Boolean).join(' ') || 'unknown';
  return { name, vendor: i.vendor ?? null, architecture: i.architecture ?? null, device: i.device ?? null,
    description: i.description ?? null, isFallbackAdapter: i.isFallbackAdapter ?? null };
}

/** onnxruntime-web's prompt FlashAttention (1.30, 1.31.1, and transformers.js's 1.31 dev build) assumes
 * subgroups of at least 8 lanes: on narrower ones (SwiftShader's are 4) it scores 8 keys per step
 * with subgroupShuffle(x, 0..7) while advancing by 4, and from the 5th row of any prompt of 32
 * tokens or more its attention is wrong (bench/repro/README.md). On such an adapter the peers'
 * pages hide the `subgroups` feature, so that onnxruntime-web takes its kernels for devices
 * without subgroups (they compute what its CPU EP computes); recorded in the peers' settings.
 * Adapters with subgroups of 8 lanes or more (GPUs) are left as they are; ours never gets this. */
let narrowSubgroups = null;
async function peerSubgroups() {
  if (narrowSubgroups) return narrowSubgroups;
  const adapter = await requestAdapter();
  const min = adapter.info?.subgroupMinSize ?? null;
  const hide = adapter.features.has('subgroups') && typeof min === 'number' && min < 8;
  if (hide) {
    for (const proto of [GPUAdapter.prototype, GPUDevice.prototype]) {
      const get = Object.getOwnPropertyDescriptor(proto, 'features').get;
      Object.defineProperty(proto, 'features', {
        configurable: true,
        get() { return new Set([...get.call(this)].filter((f) => f !== 'subgroups')); },
      });
    }
    const request = GPUAdapter.prototype.requestDevice;
    GPUAdapter.prototype.requestDevice = function requestDevice(d = {}) {
      return request.call(this, { ...d, requiredFeatures: [...(d.requiredFeatures ?? [])].filter((f) => f !== 'subgroups') });
    };
  }
  narrowSubgroups = { subgroup_min_size: min, subgroups_hidden: hide };
  return narrowSubgroups;
}

/** The decode configurations' context, for onnxruntime-web on a decoder that computes the logits
 * of every position (mobius's exports have no num_logits_to_keep): filled in parts of at most this
 * many tokens (ort.mjs `promptSteps`). In one step a 1024-token context asks for 1 GiB of float32
 * logits at Gemma's vocabulary, which onnxruntime-web could not allocate on SwiftShader; the
 * decode clock starts after the context either way. The prefill measurements stay one step. Ours
 * computes the last position's logits only (gg_llm::last_row) and fills in one step;
 * transformers.js fills as its generate() does (one step). */
export const PEER_CONTEXT_FILL = 256;

/** Decode steps run after the first token and before the decode clock starts (see the top). */
export const DECODE_UNTIMED_STEPS = 1; // xtask bench UNTIMED_DECODE_STEPS: the same number

/** Generation handles with the same shape for each runtime: pull (first / next) or, for
 * transformers.js, its own loop reporting a timestamp per token. `fill`: onnxruntime-web's
 * context in parts (PEER_CONTEXT_FILL), 0 for one step. */
async function timed(runtime, handle, ids, decodeTokens, fill = 0) {
  const untimed = decodeTokens > 0 ? DECODE_UNTIMED_STEPS : 0;
  if (runtime === 'transformers_js') {
    const tjs = await import('./tjs.mjs');
    const want = 1 + untimed + decodeTokens;
    const r = await tjs.run(handle, ids, want);
    if (r.stamps.length !== want) {
      throw new Error(`transformers.js generated ${r.stamps.length} tokens, asked for ${want}`);
    }
    return { ttft_s: (r.stamps[0] - r.t0) / 1000, decode_s: (r.stamps.at(-1) - r.stamps[untimed]) / 1000, ids: r.tokens, untimed_steps: untimed };
  }
  const g = runtime === 'ours' ? handle.generation(Uint32Array.from(ids)) : ort.generation(handle, ids, fill);
  const prompt_steps = runtime === 'ours' ? 1 : g.promptSteps;
  try {
    const t0 = performance.now();
    const out = [await g.first()];
    const ttft = performance.now();
    // Untimed, leaving nothing in flight (ours' `last`: no run-ahead).
    for (let i = 0; i < untimed; i++) out.push(await g.next(true));
    if (runtime === 'ours' && decodeTokens > 0) g.mark(); // counters: the timed steps only
    const t1 = performance.now();
    for (let i = 0; i < decodeTokens; i++) out.push(await g.next(i === decodeTokens - 1));
    const t2 = performance.now();
    const counters = runtime === 'ours' && decodeTokens > 0 ? JSON.parse(g.counters()) : undefined;
    return { ttft_s: (ttft - t0) / 1000, decode_s: (t2 - t1) / 1000, ids: out, counters, prompt_steps, untimed_steps: untimed };
  } finally {
    if (runtime === 'ours') g.free(); else g.dispose();
  }
}

window.bench = {
  defaultDtype,
  adapterInfo,
  promptIds,
  async settings(runtime) {
    if (runtime === 'ort_web' || runtime === 'ort_web_static') return { ...ort.settings(runtime), ...await peerSubgroups() };
    if (runtime === 'transformers_js') return { ...(await import('./tjs.mjs')).settings(), ...await peerSubgroups() };
    return { crossOriginIsolated: globalThis.crossOriginIsolated === true, run_ahead: 'as the adapter tunes it (next steps only)' };
  },
  /** Loads `model` ({ name, url, capacity }: a Hugging Face layout folder or a GenAI package) with
   * `runtime`; `capacity`: the fixed cache's rows for `ort_web_static`. */
  async load({ runtime, model, dtype }) {
    status(`${runtime}: loading ${model.url}`);
    if (runtime !== 'ours') await peerSubgroups(); // before the clock (settings() made it already)
    const t0 = performance.now();
    let handle;
    if (runtime === 'ours') {
      wasm = await init();
      handle = await ours.load(model.url, dtype);
    } else if (runtime === 'ort_web' || runtime === 'ort_web_static') {
      handle = await ort.load(model.url, dtype, false, runtime, model.capacity ?? 0);
    } else if (runtime === 'transformers_js') {
      // A GenAI package: its onnx-community view (bench/tjs_layout.py) and that view's variant.
      handle = await (await import('./tjs.mjs')).load(model.tjs?.name ?? model.name, model.tjs?.dtype ?? dtype);
    } else {
      throw new Error(`unknown runtime ${runtime}`);
    }
    const load_s = (performance.now() - t0) / 1000;
    loaded = { runtime, handle };
    const wasm_memory_bytes = wasm ? wasm.memory.buffer.byteLength : null;
    return { load_s, wasm_memory_bytes };
  },
  /** Our vision encoder (`gg_llm::VisionEncoder`) on the model under `url` (a GenAI package
   * with `vision_encoder/`): a synthetic image of `softTokens` soft tokens, one untimed warm-up
   * encode (timed apart: it compiles the pipelines), then `runs` encodes, each timed with performance.now() from the host patches (made
   * before the clock starts) to the features read back. */
  async vision({ url, softTokens, runs }) {
    status(`vision: loading ${url}`);
    wasm = await init();
    const t0 = performance.now();
    const enc = await ours.load_vision(url);
    const load_s = (performance.now() - t0) / 1000;
    const image = enc.image(softTokens);
    status(`vision: ${softTokens} soft tokens, warm-up`);
    const tw = performance.now();
    let last = JSON.parse(await enc.encode(image));
    const warm_up_ms = performance.now() - tw;
    const runs_ms = [];
    for (let i = 0; i < runs; i++) {
      status(`vision: ${softTokens} soft tokens, run ${i + 1}/${runs}`);
      const t = performance.now();
      last = JSON.parse(await enc.encode(image));
      runs_ms.push(performance.now() - t);
    }
    status('vision: done');
    return {
      adapter: (await adapterInfo()).name, wgpu_adapter: enc.adapter(), soft_tokens: softTokens, slots: image.slots(), pooling: enc.pooling(),
      patch_values: enc.patch_values(), rows: last.rows, hidden: last.hidden, load_s,
      dispatches: last.dispatches, submits: last.submits, runs_ms,
      warm_up_ms, wasm_memory_bytes: wasm.memory.buffer.byteLength,
    };
  },
  /** onnxruntime-web's node placement: loads both sessions with verbose logging (the driver
   * keeps the console). */
  async placement({ model, dtype }) {
    await peerSubgroups();
    await ort.load(model.url, dtype, true);
    return true;
  },
  /** For each prefill length a cold and a warm prompt (TTFT); then one short warm-up generation
   * and each decode configuration: `tokens` steps after `context` prompt tokens; for ours then
   * `in_call`: `tokens` steps inside a constrained tool call after the shortest context. */
  async measure({ prefill, decode, vocab }) {
    const { runtime, handle } = loaded;
    const out = { prefill: [], decode: [] };
    for (const n of prefill) {
      status(`${runtime}: prefill ${n}`);
      const ids = promptIds(n, vocab);
      const cold = await timed(runtime, handle, ids, 0);
      const warm = await timed(runtime, handle, ids, 0);
      out.prefill.push({ tokens: n, cold_ttft_s: cold.ttft_s, ttft_s: warm.ttft_s, prefill_tok_s: n / warm.ttft_s, ids: warm.ids });
    }
    status(`${runtime}: decode warm-up`);
    await timed(runtime, handle, promptIds(8, vocab), 2);
    for (const { context, tokens } of decode) {
      status(`${runtime}: decode ${tokens} after ${context}`);
      const r = await timed(runtime, handle, promptIds(context, vocab), tokens, PEER_CONTEXT_FILL);
      // ttft_s: the context's step(s) to the first id (prompt_steps of them; TTFT ratios come
      // from the prefill measurements).
      out.decode.push({ context, tokens, ttft_s: r.ttft_s, decode_s: r.decode_s, decode_tok_s: tokens / r.decode_s,
        untimed_steps: r.untimed_steps, ids: r.ids, ...(r.prompt_steps ? { prompt_steps: r.prompt_steps } : {}), ...(r.counters ? { counters: r.counters } : {}) });
    }
    if (runtime === 'ours' && decode.length > 0) {
      // Ours only (the peers have no constraint): decode inside a constrained tool call after the
      // shortest context, timed by the generator's counters (performance.now() in wasm), after a
      // short warm-up (the matcher's vocabulary and grammar, the masked sampling kernel).
      const { context, tokens } = decode.reduce((a, b) => (b.context < a.context ? b : a));
      // A failure here is recorded (`in_call.error`) without losing the measurements above.
      try {
        status(`${runtime}: decode in a tool call, warm-up`);
        await handle.decode_in_call(Math.min(8, context), 2);
        status(`${runtime}: decode ${tokens} in a tool call after ${context}`);
        out.in_call = JSON.parse(await handle.decode_in_call(context, tokens));
      } catch (e) {
        out.in_call = { error: String(e?.message ?? e) };
      }
    }
    out.wasm_memory_bytes_after = wasm ? wasm.memory.buffer.byteLength : null;
    out.dtype = runtime === 'ours' ? handle.dtype() : handle.dtype;
    if (runtime === 'ort_web_static') out.graph_capture = handle.graphCapture;
    status(`${runtime}: done`);
    return out;
  },
};
status('ready');
