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
// Two graph forms: the onnx-community layout (embed_tokens_<dtype>.onnx + decoder_model_merged_<dtype>.onnx,
// our generator's form) and an ONNX Runtime GenAI package (genai_config.json; mobius's export:
// `embedding/model.onnx` + `decoder/model.onnx`, or one `model.onnx` taking input_ids), whose
// decoder derives the positions from attention_mask and runs GroupQueryAttention everywhere.
// Two variants:
// - `ort_web`: the KV cache grows each step (present fed back as past), as above;
// - `ort_web_static` (GenAI packages only): a fixed-capacity cache bound in place: each past and
//   its present are the same preallocated GPU tensor of `capacity` rows, so GroupQueryAttention
//   takes its shared-buffer path (past_present_share_buffer, as ONNX Runtime GenAI runs these
//   packages), the mask [1, total] as GenAI gives it. Graph capture (`enableGraphCapture`) is
//   asked for first, on a probe session: onnxruntime-web (1.30, 1.31) refuses it when any node is placed
//   on the CPU EP, and mobius's decoder has 6 + 2 per KV-shared layer there (the mask's ReduceSum / Sub / Cast into
//   seqlens_k, Shape / Gather / Cast into total_sequence_length, the KV-shared layers' Concat /
//   ConstantOfShape for their empty K/V); the answer is recorded (`graph_capture`) and the
//   fixed cache is measured without capture. On the onnx-community graphs the variant does not
//   apply: their attention concatenates past and new keys (present = Concat(past, new)), so the
//   cache grows every step.
import * as ort from '/ort/ort.webgpu.min.mjs';
import { f16ToF32 } from './f16.mjs';

ort.env.wasm.wasmPaths = '/ort/';
ort.env.webgpu.powerPreference = 'high-performance';
ort.env.logLevel = 'error';

/** The settings in effect for `variant` (recorded with the results). */
export function settings(variant = 'ort_web') {
  const fixed = variant === 'ort_web_static';
  return {
    version: ort.env.versions?.web ?? null,
    powerPreference: ort.env.webgpu.powerPreference,
    validationMode: 'disabled',
    crossOriginIsolated: globalThis.crossOriginIsolated === true,
    numThreads: ort.env.wasm.numThreads ?? null,
    preferredOutputLocation: 'gpu-buffer',
    kvCache: fixed ? 'fixed capacity, past and present the same GPU tensor (GroupQueryAttention shared buffer)' : 'grows each step (present fed back as past)',
    graphCapture: fixed ? 'asked for on a probe session; the answer is under graph_capture, the measured session runs without it' : false,
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

async function createSession(url, externalData, verbose, extra = {}) {
  const file = url.split('/').slice(-2).join('/');
  try {
    return await ort.InferenceSession.create(url, {
      executionProviders: [{ name: 'webgpu', validationMode: 'disabled' }],
      graphOptimizationLevel: 'all',
      // Verbose: the node placement ("Node(s) placed on [...]") goes to the console.
      ...(verbose ? { logSeverityLevel: 0, logVerbosityLevel: 0 } : {}),
      externalData,
      // Every output stays on the GPU; the logits are downloaded explicitly (getData).
      preferredOutputLocation: 'gpu-buffer',
      ...extra,
    });
  } catch (e) {
    throw new Error(`onnxruntime-web could not load ${file}: ${e.message ?? e}`);
  }
}

function session(base, config, name, dtype, verbose) {
  const file = `${name}_${dtype}.onnx`;
  const externalData = chunkNames(file, chunksOf(config, file)).map((path) => ({ path, data: `${base}onnx/${path}` }));
  return createSession(`${base}onnx/${file}`, externalData, verbose);
}

/** A GenAI package's graph `file` (relative to the package) with its `<file>.data` when served. */
async function genaiSession(base, file, verbose, extra) {
  const data = `${file}.data`;
  const name = data.split('/').at(-1);
  // Whether it is served: the response's status (its body is not read).
  const probe = await fetch(`${base}${data}`).catch(() => null);
  probe?.body?.cancel();
  const externalData = probe?.ok ? [{ path: name, data: `${base}${data}` }] : [];
  return createSession(`${base}${file}`, externalData, verbose, extra);
}

function cacheOf(decoder) {
  const meta = Object.fromEntries((decoder.inputMetadata ?? []).map((m) => [m.name, m]));
  return decoder.inputNames.filter((n) => n.startsWith('past_key_values.')).map((name) => {
    const m = meta[name];
    if (!m?.shape) throw new Error(`onnxruntime-web gives no shape for ${name}`);
    const [, heads, , dim] = m.shape;
    return { name, present: name.replace('past_key_values.', 'present.'), type: m.type, heads, dim };
  });
}

/** Loads the sessions of `model` (a folder URL) for `variant` (`ort_web` or `ort_web_static`);
 * `verbose` logs onnxruntime's node placement to the console; `capacity`: the fixed cache's rows
 * (`ort_web_static`). */
export async function load(model, dtype, verbose = false, variant = 'ort_web', capacity = 0) {
  const base = model.endsWith('/') ? model : `${model}/`;
  const genaiResp = await fetch(`${base}genai_config.json`);
  if (verbose) ort.env.logLevel = 'verbose';
  let h;
  if (genaiResp.ok) {
    const g = (await genaiResp.json()).model;
    const fixed = variant === 'ort_web_static';
    const embed = g.embedding?.filename ? await genaiSession(base, g.embedding.filename, verbose) : null;
    // `ort_web_static`: whether onnxruntime-web accepts graph capture on this graph (a probe
    // session, released; the measured session runs without it).
    let graphCapture = null;
    if (fixed) {
      try {
        const probe = await genaiSession(base, g.decoder.filename, false, { enableGraphCapture: true });
        await probe.release();
        graphCapture = { accepted: true, error: null, measured: false };
      } catch (e) {
        graphCapture = { accepted: false, error: String(e.message ?? e), measured: false };
      }
    }
    const decoder = await genaiSession(base, g.decoder.filename, verbose);
    const emeta = Object.fromEntries((embed?.inputMetadata ?? []).map((m) => [m.name, m]));
    const cache = cacheOf(decoder);
    h = {
      layout: 'genai', embed, decoder, cache, vocab: g.vocab_size,
      // One variant per package: its activation dtype.
      dtype: cache[0]?.type === 'float16' ? 'q4f16' : 'q4',
      inputs: new Set(decoder.inputNames),
      imageFeatures: embed?.inputNames.includes('image_features') ? emeta.image_features : null,
      variant, capacity, graphCapture,
    };
    if (fixed) h.fixed = await fixedBuffers(h);
  } else {
    if (variant !== 'ort_web') throw new Error(`${variant} needs GroupQueryAttention's shared past/present buffer (a GenAI package); ${model} is in the onnx-community layout`);
    const config = await (await fetch(`${base}config.json`)).json();
    const vocab = config.text_config?.vocab_size ?? config.vocab_size;
    const embed = await session(base, config, 'embed_tokens', dtype, verbose);
    const decoder = await session(base, config, 'decoder_model_merged', dtype, verbose);
    h = { layout: 'onnx-community', embed, decoder, cache: cacheOf(decoder), vocab, dtype, inputs: new Set(decoder.inputNames), variant };
  }
  if (verbose) ort.env.logLevel = 'error';
  return h;
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

const BYTES = { float32: 4, float16: 2 };

/** The fixed cache of `ort_web_static`, made once per handle: one GPU tensor of `capacity`
 * rows per past/present pair. */
async function fixedBuffers(h) {
  const device = await ort.env.webgpu.device;
  const cache = h.cache.map((c) => {
    const dims = [1, c.heads, h.capacity, c.dim];
    const size = Math.ceil((dims.reduce((a, b) => a * b, 1) * BYTES[c.type]) / 16) * 16;
    const buffer = device.createBuffer({ size, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST });
    return ort.Tensor.fromGpuBuffer(buffer, { dataType: c.type, dims, dispose: () => buffer.destroy() });
  });
  return { cache };
}

function emptyImageFeatures(h) {
  const m = h.imageFeatures;
  const dim = m.shape.at(-1);
  return new ort.Tensor(m.type, m.type === 'float16' ? new Uint16Array(0) : new Float32Array(0), [0, dim]);
}

/** The embedding session's feeds for `ids` (GenAI packages: with empty image features). */
function embedFeeds(h, ids) {
  const feeds = { input_ids: new ort.Tensor('int64', BigInt64Array.from(ids, BigInt), [1, ids.length]) };
  if (h.imageFeatures) feeds.image_features = emptyImageFeatures(h);
  return feeds;
}

/** One generation: the cache (GPU tensors) and the position. */
class Gen {
  constructor(h) {
    this.h = h;
    this.past = 0;
    this.cache = h.cache.map((c) => new ort.Tensor(c.type, c.type === 'float16' ? new Uint16Array(0) : new Float32Array(0), [1, c.heads, 0, c.dim]));
  }

  /** Runs the sessions on `ids` and returns the greedy next id. */
  async step(ids) {
    const { h } = this;
    const s = ids.length;
    const total = this.past + s;
    const feeds = {};
    let emb = {};
    if (h.embed) {
      emb = await h.embed.run(embedFeeds(h, ids));
      feeds.inputs_embeds = emb.inputs_embeds;
      if (h.inputs.has('per_layer_inputs')) feeds.per_layer_inputs = emb.per_layer_inputs;
    } else {
      feeds.input_ids = new ort.Tensor('int64', BigInt64Array.from(ids, BigInt), [1, s]);
    }
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

/** `ort_web_static`: the cache is the handle's fixed tensors, each past bound as its own present
 * (GroupQueryAttention writes the new rows in place); only the logits are allocated per step. */
class StaticGen {
  constructor(h) {
    this.h = h;
    this.past = 0;
  }

  async step(ids) {
    const { h } = this;
    const total = this.past + ids.length;
    if (total > h.capacity) throw new Error(`ort_web_static: ${total} tokens over the fixed cache's ${h.capacity} rows`);
    const feeds = {};
    const fetches = { logits: null };
    h.cache.forEach((c, i) => { feeds[c.name] = h.fixed.cache[i]; fetches[c.present] = h.fixed.cache[i]; });
    let emb = {};
    if (h.embed) {
      emb = await h.embed.run(embedFeeds(h, ids));
      feeds.inputs_embeds = emb.inputs_embeds;
      if (h.inputs.has('per_layer_inputs')) feeds.per_layer_inputs = emb.per_layer_inputs;
    } else {
      feeds.input_ids = new ort.Tensor('int64', BigInt64Array.from(ids, BigInt), [1, ids.length]);
    }
    feeds.attention_mask = new ort.Tensor('int64', new BigInt64Array(total).fill(1n), [1, total]);
    const out = await h.decoder.run(feeds, fetches);
    for (const t of Object.values(emb)) t.dispose();
    this.past = total;
    return argmax(out.logits);
  }

  dispose() {}
}

/** A generation on `ids`, stepped by the bench page: first() is the prompt's step, next() one
 * decode step; each resolves to the greedy id once it is on the CPU. */
export function generation(h, ids) {
  const g = h.variant === 'ort_web_static' ? new StaticGen(h) : new Gen(h);
  let id = null;
  return {
    first: async () => (id = await g.step(ids)),
    next: async () => (id = await g.step([id])),
    dispose: () => g.dispose(),
  };
}
