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
//   asked for on a second decoder session: onnxruntime-web refuses it when any node is placed on
//   the CPU EP (mobius's `--ep cpu` decoder has 6 + 2 per KV-shared layer there: the mask's
//   ReduceSum / Sub / Cast into seqlens_k, Shape / Gather / Cast into total_sequence_length, the
//   KV-shared layers' Concat / ConstantOfShape for their empty K/V); 1.31.1 accepts it on mobius's
//   `--ep webgpu` decoder in float16. Accepted, the decode steps replay the graph captured there
//   (`CapturedGen`: fixed shapes and buffers, the mask [1, capacity]); refused, the fixed cache
//   runs without it. The answer is recorded (`graph_capture`: accepted, measured, error). On the
//   onnx-community graphs the variant does not
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
    graphCapture: fixed ? 'asked for on a second decoder session; where onnxruntime-web accepts it, the decode steps replay the graph captured there (the prompt runs on the first, uncaptured session; load time and memory include both), else the fixed cache runs without it; the answer is under graph_capture' : false,
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
    // `ort_web_static`: whether onnxruntime-web accepts graph capture on this graph; if it does
    // (and the decoder takes nothing the capture loop cannot feed), that session runs the decode
    // steps (`CapturedGen`), else it is released and the fixed cache runs without capture.
    let graphCapture = null;
    let captured = null;
    if (fixed) {
      try {
        captured = await genaiSession(base, g.decoder.filename, false, { enableGraphCapture: true });
        const other = captured.inputNames.filter((n) => !CAPTURE_INPUTS.has(n) && !n.startsWith('past_key_values.'));
        const outs = captured.outputNames.filter((n) => n !== 'logits' && !n.startsWith('present.'));
        if (other.length || outs.length) {
          await captured.release();
          captured = null;
          graphCapture = { accepted: true, error: `the capture loop feeds only ${[...CAPTURE_INPUTS].join(', ')} and the cache, and fetches logits and present.*; this decoder also has ${[...other, ...outs].join(', ')}`, measured: false };
        } else {
          graphCapture = { accepted: true, error: null, measured: true };
        }
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
      variant, capacity, graphCapture, captured,
    };
    if (fixed) h.fixed = await fixedBuffers(h);
    if (h.captured) {
      // Capture, then one replay, on the fixed buffers (a one-token mask) right after loading.
      // Observed with onnxruntime-web 1.31.1: when the graph was first captured inside a
      // generation (after a prompt on the uncaptured session and an embedding run), the next
      // captured run failed in onnxruntime-web's output handling ("Cannot set properties of
      // undefined (setting 'Symbol(gpuBufferMetadata)')", its `webgpuRegisterBuffer` given no
      // buffer); captured here first, every later replay ran and gave the same ids as ours.
      // Should the replay fail, the session is released and the fixed cache runs without
      // capture, the error recorded. The rows written here are overwritten by every prompt.
      try {
        await captureReplay(h);
      } catch (e) {
        graphCapture.measured = false;
        graphCapture.error = `session created, but a replay failed: ${e.message ?? e}`;
        await h.captured.release();
        h.captured = null;
      }
    }
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

/** The greedy id from `logits` (a GPU tensor, released either way), or null unread. */
async function logitsOf(logits, read) {
  if (read) return argmax(logits);
  logits.dispose();
  return null;
}

async function argmax(t) {
  const d = await t.getData(true); // download, then release the GPU buffer
  const n = t.dims[t.dims.length - 1];
  return argmaxRow(d, d.length - n, n, t.type); // the last position
}

/** The index of the largest of `n` logits of type `type` in `d` from `off` (float16 either a
 * Float16Array or its raw bits in a Uint16Array). */
function argmaxRow(d, off, n, type) {
  const get = type === 'float16' && d instanceof Uint16Array ? (i) => f16ToF32(d[i]) : (i) => Number(d[i]);
  let best = 0;
  let bv = -Infinity;
  for (let i = 0; i < n; i++) {
    const v = get(off + i);
    if (v > bv) { bv = v; best = i; }
  }
  return best;
}

const BYTES = { float32: 4, float16: 2, int64: 8 };

/** The fixed cache of `ort_web_static`, made once per handle: one GPU tensor of `capacity`
 * rows per past/present pair. */
async function fixedBuffers(h) {
  const device = await ort.env.webgpu.device;
  const tensor = (type, dims, usage) => {
    const size = Math.ceil((dims.reduce((a, b) => a * b, 1) * BYTES[type]) / 16) * 16;
    const buffer = device.createBuffer({ size, usage: GPUBufferUsage.STORAGE | usage });
    return { buffer, tensor: ort.Tensor.fromGpuBuffer(buffer, { dataType: type, dims, dispose: () => buffer.destroy() }) };
  };
  // Each past and its present: one tensor, bound as both.
  const past = {};
  const present = {};
  for (const c of h.cache) {
    const t = tensor(c.type, [1, c.heads, h.capacity, c.dim], GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST).tensor;
    past[c.name] = t;
    present[c.present] = t;
  }
  if (!h.captured) return { past, present };
  // The captured decode step's other inputs and its logits: the same GPU buffers in every run
  // (a replay reads and writes the buffers bound when the graph was captured).
  const meta = Object.fromEntries((h.captured.inputMetadata ?? []).map((m) => [m.name, m]));
  const outMeta = Object.fromEntries((h.captured.outputMetadata ?? []).map((m) => [m.name, m]));
  const width = (name) => {
    const w = meta[name]?.shape?.at(-1);
    if (typeof w !== 'number') throw new Error(`onnxruntime-web gives no width for ${name}`);
    return w;
  };
  const feeds = {
    inputs_embeds: tensor(meta.inputs_embeds.type, [1, 1, width('inputs_embeds')], GPUBufferUsage.COPY_DST),
    attention_mask: tensor('int64', [1, h.capacity], GPUBufferUsage.COPY_DST),
  };
  if (meta.per_layer_inputs) {
    feeds.per_layer_inputs = tensor(meta.per_layer_inputs.type, [1, 1, width('per_layer_inputs')], GPUBufferUsage.COPY_DST);
  }
  const logitsType = outMeta.logits?.type ?? meta.inputs_embeds.type;
  const logits = tensor(logitsType, [1, 1, h.vocab], GPUBufferUsage.COPY_SRC);
  const staging = device.createBuffer({ size: logits.buffer.size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  // What every captured run is given: always these tensors.
  const run = {
    feeds: { ...past, ...Object.fromEntries(Object.entries(feeds).map(([name, f]) => [name, f.tensor])) },
    fetches: { logits: logits.tensor, ...present },
  };
  return { past, present, feeds, logits, logitsType, staging, run, mask: new BigInt64Array(h.capacity) };
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

  /** Runs the sessions on `ids` and returns the greedy next id (`read` false: the logits are
   * released unread and null is returned). */
  async step(ids, read = true) {
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
    return logitsOf(out.logits, read);
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

  async step(ids, read = true) {
    const { h } = this;
    const total = this.past + ids.length;
    if (total > h.capacity) throw new Error(`ort_web_static: ${total} tokens over the fixed cache's ${h.capacity} rows`);
    const feeds = { ...h.fixed.past };
    const fetches = { logits: null, ...h.fixed.present };
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
    return logitsOf(out.logits, read);
  }

  dispose() {}
}

/** Two runs of the captured session (capture, replay) on the fixed buffers with a one-token
 * mask, the embedding inputs as they are (zeros when fresh). */
async function captureReplay(h) {
  const F = h.fixed;
  const device = await ort.env.webgpu.device;
  F.mask.fill(0n);
  F.mask[0] = 1n;
  device.queue.writeBuffer(F.feeds.attention_mask.buffer, 0, F.mask);
  for (let i = 0; i < 2; i++) await h.captured.run(F.run.feeds, F.run.fetches);
}

/** The decoder inputs the capture loop feeds (besides the cache). */
const CAPTURE_INPUTS = new Set(['inputs_embeds', 'per_layer_inputs', 'attention_mask']);

/** `ort_web_static` with graph capture (onnxruntime-web accepted it on this decoder): the prompt
 * runs as in `StaticGen` on the uncaptured session (its length differs from run to run), every
 * decode step on the captured one with fixed shapes and buffers: the embedding session's outputs
 * are copied into the bound input buffers, the mask is [1, capacity] with ones for the tokens so
 * far and zeros after (the exporter's WebGPU graph takes the length from the mask's sum, as ONNX
 * Runtime GenAI feeds it under capture), the cache is the fixed tensors bound as past and present,
 * and the logits land in a bound buffer that is copied out and read. The first decode step of the
 * session captures the graph, later ones replay it. */
class CapturedGen extends StaticGen {
  async step(ids, read = true) {
    // The prompt, or a part of it (`fill`), on the uncaptured session.
    if (this.past === 0 || ids.length !== 1 || !read) return super.step(ids, read);
    const { h } = this;
    const F = h.fixed;
    const total = this.past + ids.length;
    if (ids.length !== 1) throw new Error('ort_web_static: a captured step decodes one token');
    if (total > h.capacity) throw new Error(`ort_web_static: ${total} tokens over the fixed cache's ${h.capacity} rows`);
    const device = await ort.env.webgpu.device;
    const emb = await h.embed.run(embedFeeds(h, ids));
    const encoder = device.createCommandEncoder();
    for (const name of ['inputs_embeds', 'per_layer_inputs']) {
      if (!F.feeds[name]) continue;
      const from = emb[name];
      const bytes = from.dims.reduce((a, b) => a * b, 1) * BYTES[from.type];
      encoder.copyBufferToBuffer(from.gpuBuffer, 0, F.feeds[name].buffer, 0, bytes);
    }
    F.mask.fill(0n);
    F.mask.fill(1n, 0, total);
    device.queue.writeBuffer(F.feeds.attention_mask.buffer, 0, F.mask);
    device.queue.submit([encoder.finish()]);
    await h.captured.run(F.run.feeds, F.run.fetches);
    for (const t of Object.values(emb)) t.dispose();
    this.past = total;
    const copy = device.createCommandEncoder();
    copy.copyBufferToBuffer(F.logits.buffer, 0, F.staging, 0, F.staging.size);
    device.queue.submit([copy.finish()]);
    await F.staging.mapAsync(GPUMapMode.READ);
    const bytes = F.staging.getMappedRange().slice(0);
    F.staging.unmap();
    const n = h.vocab;
    const d = F.logitsType === 'float16' ? new Uint16Array(bytes, 0, n) : new Float32Array(bytes, 0, n);
    return argmaxRow(d, 0, n, F.logitsType);
  }
}

/** The prompt `ids` as the decoder's steps: one, or, with `fill` > 0 and a decoder that computes
 * the logits of every position (no num_logits_to_keep, as mobius's exports), consecutive parts of
 * at most `fill` tokens. */
export function promptSteps(h, ids, fill = 0) {
  if (!(fill > 0) || h.inputs.has('num_logits_to_keep') || ids.length <= fill) return [ids];
  const steps = [];
  for (let i = 0; i < ids.length; i += fill) steps.push(ids.slice(i, i + fill));
  return steps;
}

/** A generation on `ids`, stepped by the bench page: first() is the prompt's step(s), next() one
 * decode step; each resolves to the greedy id once it is on the CPU. `fill` (the decode
 * configurations' context): the prompt in parts of at most `fill` tokens where the decoder
 * computes every position's logits (`promptSteps`): a 1024-token prompt through mobius's decoder
 * asks for 1024 x vocab float32 logits (1 GiB at 262144), which onnxruntime-web could not
 * allocate on SwiftShader; only the last part's logits are read. The decode clock starts after
 * first() either way. */
export function generation(h, ids, fill = 0) {
  const g = h.variant !== 'ort_web_static' ? new Gen(h) : h.captured ? new CapturedGen(h) : new StaticGen(h);
  const steps = promptSteps(h, ids, fill);
  let id = null;
  return {
    promptSteps: steps.length,
    first: async () => {
      for (const part of steps.slice(0, -1)) await g.step(part, false);
      return (id = await g.step(steps.at(-1)));
    },
    next: async () => (id = await g.step([id])),
    dispose: () => g.dispose(),
  };
}
