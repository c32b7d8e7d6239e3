// onnxruntime-web side of the browser bench (`ort_web`): the same embed_tokens ->
// decoder_model_merged loop as our runtime, on the WebGPU execution provider at its best settings
// for these graphs:
// - the adapter asked for with powerPreference 'high-performance', WebGPU validation off
//   (validationMode 'disabled', onnxruntime-web >= 1.22), graph optimizations 'all';
// - threads: the bench server sends COOP/COEP, so the page is cross-origin isolated and
//   onnxruntime-web picks its default thread count (ort.env.wasm.numThreads left unset);
// - every present.* output and both embed outputs stay on the GPU (preferredOutputLocation
//   'gpu-buffer') and are fed back as inputs, so the cache never visits the CPU;
// - only the logits are read back (getData, argmax on the CPU: greedy, as in ours).
// A fixed-capacity cache with graph capture (`ort_web_static`) does not apply to these graphs:
// their attention concatenates past and new keys (present = Concat(past, new)), so the cache
// grows every step and no shape is fixed; it needs GroupQueryAttention with a shared
// past/present buffer (the exporters' form), see bench/README.md.
import * as ort from '/ort/ort.webgpu.min.mjs';

ort.env.wasm.wasmPaths = '/ort/';
ort.env.webgpu.powerPreference = 'high-performance';
ort.env.logLevel = 'error';

/** The settings in effect (recorded with the results). */
export function settings() {
  return {
    version: ort.env.versions?.web ?? null,
    powerPreference: ort.env.webgpu.powerPreference,
    validationMode: 'disabled',
    crossOriginIsolated: globalThis.crossOriginIsolated === true,
    numThreads: ort.env.wasm.numThreads ?? null,
    preferredOutputLocation: 'gpu-buffer',
    graphCapture: false,
  };
}

function chunkNames(file, n) {
  // onnx-community layout: FILE_data, FILE_data_1, FILE_data_2, ...
  return Array.from({ length: n }, (_, i) => (i === 0 ? `${file}_data` : `${file}_data_${i}`));
}

function chunksOf(config, file) {
  const ext = config['transformers.js_config']?.use_external_data_format;
  if (ext === undefined || ext === false) return 0;
  if (ext === true) return 1;
  if (typeof ext === 'number') return ext;
  const v = ext[file];
  return v === true ? 1 : typeof v === 'number' ? v : 0;
}

async function session(base, config, name, dtype, verbose) {
  const file = `${name}_${dtype}.onnx`;
  const externalData = chunkNames(file, chunksOf(config, file)).map((path) => ({ path, data: `${base}onnx/${path}` }));
  try {
    return await ort.InferenceSession.create(`${base}onnx/${file}`, {
      executionProviders: [{ name: 'webgpu', validationMode: 'disabled' }],
      graphOptimizationLevel: 'all',
      // Verbose: the node placement ("Node(s) placed on [...]") goes to the console.
      ...(verbose ? { logSeverityLevel: 0, logVerbosityLevel: 0 } : {}),
      externalData,
      // Every output stays on the GPU; the logits are downloaded explicitly (getData).
      preferredOutputLocation: 'gpu-buffer',
    });
  } catch (e) {
    throw new Error(`onnxruntime-web could not load ${file}: ${e.message ?? e}`);
  }
}

/** Loads both sessions; `verbose` logs onnxruntime's node placement to the console. */
export async function load(model, dtype, verbose = false) {
  const base = model.endsWith('/') ? model : `${model}/`;
  const config = await (await fetch(`${base}config.json`)).json();
  const vocab = config.text_config?.vocab_size ?? config.vocab_size;
  if (verbose) ort.env.logLevel = 'verbose';
  const embed = await session(base, config, 'embed_tokens', dtype, verbose);
  const decoder = await session(base, config, 'decoder_model_merged', dtype, verbose);
  if (verbose) ort.env.logLevel = 'error';
  const meta = Object.fromEntries((decoder.inputMetadata ?? []).map((m) => [m.name, m]));
  const cache = decoder.inputNames.filter((n) => n.startsWith('past_key_values.')).map((name) => {
    const m = meta[name];
    if (!m?.shape) throw new Error(`onnxruntime-web gives no shape for ${name}`);
    const [, heads, , dim] = m.shape;
    return { name, present: name.replace('past_key_values.', 'present.'), type: m.type, heads, dim };
  });
  return { embed, decoder, cache, vocab, dtype, inputs: new Set(decoder.inputNames) };
}

function f16ToF32(h) {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const f = h & 0x3ff;
  if (e === 0) return s * 2 ** -14 * (f / 1024);
  if (e === 31) return f ? NaN : s * Infinity;
  return s * 2 ** (e - 15) * (1 + f / 1024);
}

async function argmax(t) {
  const d = await t.getData(true); // download, then release the GPU buffer
  const n = t.dims[t.dims.length - 1];
  const off = d.length - n; // the last position
  const get = t.type === 'float16' && !(d instanceof Float32Array) && typeof Float16Array === 'undefined'
    ? (i) => f16ToF32(d[i]) : (i) => Number(d[i]);
  let best = 0;
  let bv = -Infinity;
  for (let i = 0; i < n; i++) {
    const v = get(off + i);
    if (v > bv) { bv = v; best = i; }
  }
  return best;
}

/** One generation: the cache (GPU tensors) and the position. */
class Gen {
  constructor(h) {
    this.h = h;
    this.past = 0;
    this.cache = h.cache.map((c) => new ort.Tensor(c.type, c.type === 'float16' ? new Uint16Array(0) : new Float32Array(0), [1, c.heads, 0, c.dim]));
  }

  /** Runs both sessions on `ids` and returns the greedy next id. */
  async step(ids) {
    const { h } = this;
    const s = ids.length;
    const total = this.past + s;
    const idsT = new ort.Tensor('int64', BigInt64Array.from(ids, BigInt), [1, s]);
    const emb = await h.embed.run({ input_ids: idsT });
    const feeds = { inputs_embeds: emb.inputs_embeds };
    if (h.inputs.has('per_layer_inputs')) feeds.per_layer_inputs = emb.per_layer_inputs;
    feeds.attention_mask = new ort.Tensor('int64', new BigInt64Array(total).fill(1n), [1, total]);
    if (h.inputs.has('position_ids')) {
      feeds.position_ids = new ort.Tensor('int64', BigInt64Array.from({ length: s }, (_, i) => BigInt(this.past + i)), [1, s]);
    }
    if (h.inputs.has('num_logits_to_keep')) feeds.num_logits_to_keep = new ort.Tensor('int64', BigInt64Array.of(1n), []);
    h.cache.forEach((c, i) => { feeds[c.name] = this.cache[i]; });
    const out = await h.decoder.run(feeds);
    for (const t of Object.values(emb)) t.dispose();
    for (const [name, t] of Object.entries(out)) if (name !== 'logits' && !name.startsWith('present.')) t.dispose();
    for (const t of this.cache) t.dispose();
    this.cache = h.cache.map((c) => out[c.present]);
    this.past = total;
    const id = await argmax(out.logits);
    return id;
  }

  dispose() {
    for (const t of this.cache) t.dispose();
  }
}

/** A generation on `ids`, stepped by the bench page: first() is the prompt's step, next() one
 * decode step; each resolves to the greedy id once it is on the CPU. */
export function generation(h, ids) {
  const g = new Gen(h);
  let id = null;
  return {
    first: async () => (id = await g.step(ids)),
    next: async () => (id = await g.step([id])),
    dispose: () => g.dispose(),
  };
}
