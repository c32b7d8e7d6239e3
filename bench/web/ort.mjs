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
// - `ort_web_static` (GenAI packages only): a fixed-capacity cache bound in place (each past and
//   its present are the same preallocated GPU tensor of `capacity` rows, so GroupQueryAttention
//   takes its shared-buffer path) and graph capture (`enableGraphCapture`): the prompt runs
//   uncaptured (run option gpu_graph_id -1); every decode step has fixed shapes and every input
//   and output in fixed GPU buffers (ids embedded into a fixed buffer, attention_mask a fixed
//   [1, capacity] buffer of ones then zeros, logits into a fixed buffer), so the first decode step
//   runs normally, the second is captured and the rest replay it. On the onnx-community graphs it
//   does not apply: their attention concatenates past and new keys (present = Concat(past, new)),
//   so the cache grows every step and no shape is fixed.
import * as ort from '/ort/ort.webgpu.min.mjs';

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
    graphCapture: fixed,
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
    const decoder = await genaiSession(base, g.decoder.filename, verbose, fixed ? { enableGraphCapture: true } : {});
    const emeta = Object.fromEntries((embed?.inputMetadata ?? []).map((m) => [m.name, m]));
    const dmeta = Object.fromEntries((decoder.outputMetadata ?? []).map((m) => [m.name, m]));
    const cache = cacheOf(decoder);
    h = {
      layout: 'genai', embed, decoder, cache, vocab: g.vocab_size,
      // One variant per package: its activation dtype.
      dtype: cache[0]?.type === 'float16' ? 'q4f16' : 'q4',
      inputs: new Set(decoder.inputNames),
      imageFeatures: embed?.inputNames.includes('image_features') ? emeta.image_features : null,
      logitsType: dmeta.logits?.type ?? 'float32',
      variant, capacity,
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

function f16ToF32(h) {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const f = h & 0x3ff;
  if (e === 0) return s * 2 ** -14 * (f / 1024);
  if (e === 31) return f ? NaN : s * Infinity;
  return s * 2 ** (e - 15) * (1 + f / 1024);
}

async function argmax(t, keep = false) {
  const d = await t.getData(!keep); // download, then (unless it is a fixed buffer) release it
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

const BYTES = { float32: 4, float16: 2, int64: 8 };

/** The fixed GPU buffers of `ort_web_static`, made once per handle: the cache (capacity rows),
 * the decode step's embedding outputs, attention mask and logits. */
async function fixedBuffers(h) {
  const device = await ort.env.webgpu.device;
  const U = GPUBufferUsage;
  const tensor = (type, dims, readable = false) => {
    const size = Math.ceil((dims.reduce((a, b) => a * b, 1) * BYTES[type]) / 16) * 16;
    const buffer = device.createBuffer({ size, usage: U.STORAGE | U.COPY_SRC | U.COPY_DST });
    const download = readable ? async () => {
      const staging = device.createBuffer({ size, usage: U.MAP_READ | U.COPY_DST });
      const enc = device.createCommandEncoder();
      enc.copyBufferToBuffer(buffer, 0, staging, 0, size);
      device.queue.submit([enc.finish()]);
      await staging.mapAsync(GPUMapMode.READ);
      const bytes = staging.getMappedRange().slice(0);
      staging.destroy();
      return type === 'float16' ? new Uint16Array(bytes) : new Float32Array(bytes);
    } : undefined;
    return { buffer, tensor: ort.Tensor.fromGpuBuffer(buffer, { dataType: type, dims, download }) };
  };
  const emb = (name) => h.embed.outputMetadata.find((m) => m.name === name);
  const hidden = emb('inputs_embeds').shape.at(-1);
  const pli = emb('per_layer_inputs')?.shape.at(-1);
  return {
    device,
    cache: h.cache.map((c) => tensor(c.type, [1, c.heads, h.capacity, c.dim])),
    inputsEmbeds: tensor(emb('inputs_embeds').type, [1, 1, hidden]),
    perLayerInputs: pli ? tensor(emb('per_layer_inputs').type, [1, 1, pli]) : null,
    mask: tensor('int64', [1, h.capacity]),
    logits: tensor(h.logitsType, [1, 1, h.vocab], true),
  };
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

/** `ort_web_static`: the cache is the handle's fixed buffers (capacity rows, each past bound as
 * its own present); the prompt runs uncaptured, the decode steps with fixed shapes and buffers
 * (graph capture: the first decode step of the session runs normally, the second is captured,
 * the rest replay). */
class StaticGen {
  constructor(h) {
    this.h = h;
    this.past = 0;
  }

  async step(ids) {
    const { h } = this;
    const f = h.fixed;
    const s = ids.length;
    const total = this.past + s;
    if (total > h.capacity) throw new Error(`ort_web_static: ${total} tokens over the fixed cache's ${h.capacity} rows`);
    const feeds = {};
    const fetches = {};
    h.cache.forEach((c, i) => { feeds[c.name] = f.cache[i].tensor; fetches[c.present] = f.cache[i].tensor; });
    let emb = {};
    if (s > 1) {
      // The prompt: shapes of its own, not captured.
      emb = await h.embed.run(embedFeeds(h, ids));
      feeds.inputs_embeds = emb.inputs_embeds;
      if (h.inputs.has('per_layer_inputs')) feeds.per_layer_inputs = emb.per_layer_inputs;
      feeds.attention_mask = new ort.Tensor('int64', new BigInt64Array(total).fill(1n), [1, total]);
      const out = await h.decoder.run(feeds, { ...fetches, logits: null }, { extra: { gpu_graph_id: '-1' } });
      for (const t of Object.values(emb)) t.dispose();
      this.past = total;
      return argmax(out.logits);
    }
    // A decode step: the embedding written into the fixed buffers, the mask [1, capacity] with
    // `total` ones, the logits into their fixed buffer.
    const efetch = { inputs_embeds: f.inputsEmbeds.tensor };
    if (f.perLayerInputs) efetch.per_layer_inputs = f.perLayerInputs.tensor;
    await h.embed.run(embedFeeds(h, ids), efetch);
    const mask = new BigInt64Array(h.capacity);
    mask.fill(1n, 0, total);
    f.device.queue.writeBuffer(f.mask.buffer, 0, mask);
    feeds.inputs_embeds = f.inputsEmbeds.tensor;
    if (h.inputs.has('per_layer_inputs')) feeds.per_layer_inputs = f.perLayerInputs.tensor;
    feeds.attention_mask = f.mask.tensor;
    fetches.logits = f.logits.tensor;
    await h.decoder.run(feeds, fetches);
    this.past = total;
    return argmax(f.logits.tensor, true);
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
