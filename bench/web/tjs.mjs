// transformers.js side of the browser bench (`transformers_js`): the engine the original Gemma
// Gem uses, called as a user calls it: pipeline('text-generation', model, { device: 'webgpu',
// dtype }) on the same local model folder (served in the Hugging Face layout under /models/), and
// its generate() with a streamer. The prompt is given as ids (the pipeline's own model.generate,
// which the pipeline calls after tokenizing) so that every runtime gets the very same ids;
// greedy (do_sample false), never stopping at an end id (eos_token_id null), as ours and ort_web.
// The timestamps are taken with performance.now() in the streamer's put(): the first generated
// token, then each further one.
import * as T from '/tjs/transformers.min.js';

T.env.allowRemoteModels = false;
T.env.allowLocalModels = true;
// Every runtime loads from the local server in every run: without this, transformers.js keeps
// the model files in the page's Cache API storage, which outlives the page in the bench's browser
// context, and its later runs would load from there.
T.env.useBrowserCache = false;
T.env.localModelPath = '/models/';
// Its own onnxruntime-web build's wasm files, served locally (by default it fetches them from a CDN).
T.env.backends.onnx.wasm.wasmPaths = '/tjs-ort/';
if (T.env.backends.onnx.webgpu) T.env.backends.onnx.webgpu.powerPreference = 'high-performance';

export function settings() {
  return {
    version: T.env.version ?? null,
    onnxruntime_web: T.env.backends.onnx.versions?.web ?? null,
    crossOriginIsolated: globalThis.crossOriginIsolated === true,
    device: 'webgpu',
  };
}

/** `name`: the model folder's name under /models/. */
export async function load(name, dtype) {
  const pipe = await T.pipeline('text-generation', name, { device: 'webgpu', dtype });
  return { pipe, dtype };
}

/** Runs generate on `ids` for `newTokens` tokens (the first one included); resolves to the ids
 * and the performance.now() of each generated token, from `t0` taken just before the call. */
export async function run(h, ids, newTokens) {
  const stamps = [];
  const tokens = [];
  let prompt = true;
  const streamer = {
    put(value) {
      const now = performance.now();
      if (prompt) { prompt = false; return; } // the prompt ids come first
      stamps.push(now);
      tokens.push(Number(value[0][0]));
    },
    end() {},
  };
  const input_ids = new T.Tensor('int64', BigInt64Array.from(ids, BigInt), [1, ids.length]);
  const attention_mask = new T.Tensor('int64', new BigInt64Array(ids.length).fill(1n), [1, ids.length]);
  const t0 = performance.now();
  await h.pipe.model.generate({
    input_ids, attention_mask, max_new_tokens: newTokens, min_new_tokens: newTokens,
    do_sample: false, eos_token_id: null, streamer,
  });
  return { t0, stamps, tokens };
}
