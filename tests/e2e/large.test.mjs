// Opt-in (`cargo xtask test --large`, issue 27): Gemma 4 E2B's full shapes in headless Chromium,
// through the extension's real model path. `GG_E2B_FULL` is the generated 35-layer model
// (`tools/fixtures/gen_gemma4.py --preset e2b-full`, random weights, 3.25 GB at q4: its per-layer
// table 262144 × 8960 is ~1.2 GB, above SwiftShader's 1 GiB binding) with its ONNX Runtime
// reference (`reference/q4.json`). The fixture server serves it in the Hugging Face layout with
// the Hub's file listing (every file's hash); the offscreen document downloads it into Cache
// Storage (the overlay shows the progress), verifies each file, streams it onto the GPU
// (SwiftShader: q4, no shader-f16) and, asked by the development build's probe
// (`Body::DevGreedy`, sent from the service worker as the overlay's requests are), generates
// greedy tokens after the reference's input ids: they must equal ONNX Runtime's.
//
// Prints the download and load times, the offscreen document's wasm memory, the extension
// renderer's and the GPU process's peak resident memory (SwiftShader's "GPU" memory is host
// memory of the GPU process).
// Skipped unless `GG_E2B_FULL` is set.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { startServer, launchExtension, until, openOverlay } from './harness.mjs';

const DIR = process.env.GG_E2B_FULL;
const NAME = 'gemma4-e2b-full';
const HUB = `/large-test/${NAME}/resolve/main`;
let server, ext;

before(async () => {
  if (!DIR) return;
  server = await startServer({ models: { [NAME]: DIR } });
  ext = await launchExtension(process.env.GG_EXT_DEV);
});
after(async () => { await ext?.close(); await server?.close(); });

/** `/proc/PID/status` fields of the processes whose command line (one string) matches `test`. */
function processes(test) {
  const out = [];
  for (const pid of fs.readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      // Chromium's children rewrite their command line into one space-separated string.
      const cmdline = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
      if (!test(cmdline)) continue;
      const status = Object.fromEntries(fs.readFileSync(`/proc/${pid}/status`, 'utf8').split('\n')
        .map((l) => l.split(/:\s+/)).filter((kv) => kv.length === 2));
      out.push({ pid: Number(pid), status });
    } catch { /* gone meanwhile */ }
  }
  return out;
}

/** The peak resident memory (VmHWM, bytes) of this browser's process of `type` (`gpu-process`;
 * `renderer` with `--extension-process`: the one running the offscreen document); null unless
 * exactly one matches. Chromium's children name the profile (`--user-data-dir`) themselves. */
function peakRss(userDataDir, type, extra = null) {
  const found = processes((c) => c.includes(`--type=${type}`) && c.includes(`--user-data-dir=${userDataDir}`)
    && (extra === null || c.includes(extra)));
  if (found.length !== 1) return null;
  return Number(found[0].status.VmHWM.replace(/\s*kB$/, '')) * 1024;
}

const MiB = (b) => `${Math.round(b / 2 ** 20)} MiB`;

test('full-size E2B: downloaded through the extension into Cache Storage, loaded on WebGPU, its greedy tokens equal ONNX Runtime\'s', { skip: !DIR && 'GG_E2B_FULL is not set (cargo xtask test --large sets it)', timeout: 90 * 60 * 1000 }, async () => {
  const reference = JSON.parse(fs.readFileSync(path.join(DIR, 'reference', 'q4.json'), 'utf8'));
  const prompt = reference.prompts[0];
  const base = `${server.url}${HUB}`;
  await ext.sw.evaluate((s) => chrome.storage.sync.set({ settings: { modelSource: s, modelSize: 'e2b', maxIterations: 1 } }), base);
  await until(() => ext.sw.evaluate(async () => (await chrome.storage.session.get('offscreenStatus')).offscreenStatus),
    { timeout: 60000, what: 'the offscreen document' });
  const { page, frame } = await openOverlay(ext, `${server.url}/basic.html`);
  const status = () => frame.$eval('[data-testid="gg-model-status"]', (e) => ({ status: e.dataset.status, text: e.innerText.trim() }));
  assert.equal((await status()).status, 'not_loaded');

  const t0 = Date.now();
  const answer = ext.sw.evaluate((body) => chrome.runtime.sendMessage({ protocol: 'gemma-gem/1', id: 2701, from: 'service_worker', body }), {
    type: 'dev_greedy', model_source: base, model_size: 'e2b', input_ids: prompt.input_ids, max_new_tokens: prompt.greedy_tokens.length,
  });
  let settled = null;
  answer.then((a) => { settled = { a }; }, (e) => { settled = { e }; });

  // The overlay follows the model: downloading (with progress), then initializing (the weights
  // going to the GPU), then ready. `states`: each change, when it was seen.
  const states = [];
  await until(async () => {
    if (settled) return true;
    const s = await status();
    if (states.at(-1)?.status !== s.status) states.push({ ...s, ms: Date.now() - t0 });
    return s.status === 'ready' || s.status === 'failed';
  }, { timeout: 60 * 60 * 1000, interval: 250, what: 'the model to load' });
  const seen = new Map(states.map((s) => [s.status, s]));
  const loadedMs = Date.now() - t0;
  const result = await answer;
  assert.equal(result?.body?.type, 'dev_greedy_result', JSON.stringify(result?.body));
  assert.ok(seen.has('downloading'), `the overlay showed the download: ${JSON.stringify([...seen])}`);
  assert.match(seen.get('downloading').text, /Downloading Gemma 4 E2B/);
  assert.equal((await status()).status, 'ready');

  const r = result.body;
  assert.equal(r.dtype, 'q4', 'SwiftShader has no shader-f16: the q4 variant');
  assert.deepEqual(r.tokens, prompt.greedy_tokens, `greedy tokens (ONNX Runtime's top-1 margins ${prompt.top1_margins})`);

  // Every file was downloaded once, whole, from the fixture server, and is in Cache Storage.
  const gets = server.log.filter((e) => e.method === 'GET' && e.path.startsWith(`${HUB}/`));
  for (const f of ['config.json', 'tokenizer.json', 'onnx/decoder_model_merged_q4.onnx', 'onnx/decoder_model_merged_q4.onnx_data', 'onnx/embed_tokens_q4.onnx', 'onnx/embed_tokens_q4.onnx_data']) {
    const got = gets.filter((e) => e.path === `${HUB}/${f}`);
    assert.equal(got.length, 1, `${f}: ${JSON.stringify(got)}`);
    assert.equal(got[0].status, 200);
  }
  assert.ok(server.log.some((e) => e.path === `/api/models/large-test/${NAME}/tree/main`), 'the file listing (hashes) was read');
  const stored = await frame.evaluate(async (repo) => {
    const c = await caches.open('gemma-gem-models-v1');
    const metas = (await c.keys()).filter((k) => k.url.includes('/v1/meta?') && decodeURIComponent(k.url).includes(repo));
    return Promise.all(metas.map(async (k) => JSON.parse(await (await c.match(k)).text())));
  }, `${base}/`);
  // The two weight files (1.49 and 1.76 GB), whole and verified: their SHA-256 is the listing's.
  const listing = await (await fetch(`${server.url}/api/models/large-test/${NAME}/tree/main?recursive=true`)).json();
  for (const f of ['onnx/decoder_model_merged_q4.onnx_data', 'onnx/embed_tokens_q4.onnx_data']) {
    const listed = listing.find((e) => e.path === f);
    const m = stored.find((e) => e.size === listed.size);
    assert.ok(m, `${f} is in Cache Storage`);
    assert.equal(m.complete, true, f);
    assert.equal(m.sha256, listed.lfs.oid, `${f}: the SHA-256 recorded is the listing's`);
    assert.equal(m.parts.reduce((a, b) => a + b, 0), listed.size, `${f}: its parts add up to the file`);
  }

  const gpuPeak = peakRss(ext.userDataDir, 'gpu-process');
  const extensionPeak = peakRss(ext.userDataDir, 'renderer', '--extension-process');
  const bytes = fs.readdirSync(path.join(DIR, 'onnx')).reduce((n, f) => n + fs.statSync(path.join(DIR, 'onnx', f)).size, 0);
  const download = states.findIndex((s) => s.status === 'downloading');
  const downloadedMs = states.slice(download).find((s) => s.status === 'initializing')?.ms;
  console.log([
    `e2b-full q4 in Chromium (SwiftShader): ${(bytes / 1e9).toFixed(2)} GB of model files`,
    `download + verify ${downloadedMs === undefined ? '?' : (downloadedMs / 1000).toFixed(1)} s, ready after ${(loadedMs / 1000).toFixed(1)} s`,
    `${r.tokens.length} greedy tokens equal ONNX Runtime's (prefill ${(r.prefill_ms / 1000).toFixed(1)} s, ${r.tokens.length - 1} decode steps ${(r.decode_ms / 1000).toFixed(1)} s)`,
    `offscreen wasm memory ${MiB(r.wasm_memory_bytes)}, extension renderer peak RSS ${extensionPeak === null ? '?' : MiB(extensionPeak)}`,
    `GPU uploads ${MiB(r.gpu_bytes_uploaded)}, GPU process peak RSS ${gpuPeak === null ? '?' : MiB(gpuPeak)}`,
    `model states seen: ${states.map((v) => `${v.status}@${(v.ms / 1000).toFixed(1)}s`).join(', ')}`,
  ].join('; '));
  await page.close();
});
