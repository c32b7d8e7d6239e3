// The bench page: the same measurements for our runtime (wasm, ./pkg) and onnxruntime-web
// (./ort.mjs). The driver (bench/run-browser.mjs) opens a fresh page per run and calls
// window.bench.load(...) then window.bench.measure(...). Timing is performance.now() here for both.
import init, * as ours from './pkg/gg_bench_wasm.js';
import * as ort from './ort.mjs';

let loaded = null; // { runtime, handle }
let wasm = null; // our module's exports (its memory)

function status(text) {
  document.getElementById('status').textContent = text;
}

/** 'q4f16' when the adapter has shader-f16 (our runtime's own rule), otherwise 'q4'. */
async function defaultDtype() {
  const adapter = await navigator.gpu?.requestAdapter();
  if (!adapter) throw new Error('this browser has no WebGPU adapter (run Chromium with --enable-unsafe-webgpu)');
  return adapter.features.has('shader-f16') ? 'q4f16' : 'q4';
}

async function adapterName() {
  const a = await navigator.gpu.requestAdapter();
  const i = a.info || {};
  return [i.vendor, i.architecture, i.device, i.description].filter(Boolean).join(' ') || 'unknown';
}

window.bench = {
  defaultDtype,
  adapterName,
  /** Loads `model` (a URL of a Hugging Face layout folder) with `runtime` 'ours' or 'ort'. */
  async load({ runtime, model, dtype }) {
    status(`${runtime}: loading ${model}`);
    const t0 = performance.now();
    let handle;
    if (runtime === 'ours') {
      wasm = await init();
      handle = await ours.load(model, dtype);
    } else {
      handle = await ort.load(model, dtype);
    }
    const load_s = (performance.now() - t0) / 1000;
    loaded = { runtime, handle };
    const wasm_memory_bytes = wasm ? wasm.memory.buffer.byteLength : null;
    return { load_s, wasm_memory_bytes };
  },
  /** Cold and warm prefill of `prefill` tokens, then `decodeTokens` steps after `decodeContext`. */
  async measure({ prefill, decodeContext, decodeTokens }) {
    const { runtime, handle } = loaded;
    const ms = async (f) => {
      const t0 = performance.now();
      const r = await f();
      return [(performance.now() - t0) / 1000, r];
    };
    status(`${runtime}: prefill ${prefill}`);
    let cold, warm, decode;
    if (runtime === 'ours') {
      [cold] = await ms(() => handle.prefill(prefill));
      [warm] = await ms(() => handle.prefill(prefill));
      status(`${runtime}: decode`);
      await handle.decode(8, 2); // warm-up: decode pipelines
      const r = JSON.parse(await handle.decode(decodeContext, decodeTokens));
      decode = { decode_s: r.decode_s, tokens: r.tokens, dispatches_per_token: r.dispatches_per_token,
        submits_per_token: r.submits_per_token, bytes_read_back_per_token: r.bytes_read_back_per_token,
        buffers_created_per_token: r.buffers_created_per_token, bytes_uploaded_per_token: r.bytes_uploaded_per_token,
        bind_groups_created_per_token: r.bind_groups_created_per_token, record_ms_per_token: r.record_ms_per_token };
    } else {
      [cold] = await ms(() => ort.prefill(handle, prefill));
      [warm] = await ms(() => ort.prefill(handle, prefill));
      status(`${runtime}: decode`);
      await ort.decode(handle, 8, 2);
      decode = await ort.decode(handle, decodeContext, decodeTokens);
    }
    const wasm_memory_bytes = wasm ? wasm.memory.buffer.byteLength : null;
    status(`${runtime}: done`);
    return {
      cold_ttft_s: cold,
      ttft_s: warm,
      prefill_tok_s: prefill / warm,
      decode_tok_s: decode.tokens / decode.decode_s,
      decode,
      wasm_memory_bytes_after: wasm_memory_bytes,
      dtype: runtime === 'ours' ? handle.dtype() : handle.dtype,
    };
  },
};
status('ready');
