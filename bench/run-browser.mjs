// Drives the browser bench (bench/web) in headless Chromium; started by `cargo xtask bench
// --browser`, which serves the page and the models (with COOP/COEP) and passes a JSON config:
//   node bench/run-browser.mjs CONFIG.json OUT.json
// CONFIG: { url, chromium, chromiumArgs, pairs, seed, runtimes: ['ours', 'ort_web', ...],
//           prefill: [n...], decode: [{ context, tokens }...], requireGpu,
//           models: [{ name, url, vocab, runtimes, capacity }], vision: { url, softTokens, runs } }
// (a model's `runtimes`, when given, replaces the list for it: the peers that can read its graph
// form; `capacity`: the fixed cache's rows of `ort_web_static`).
// Per model: onnxruntime-web's node placement (verbose log, its own page, untimed), then `pairs`
// pairs; in each pair every runtime runs once in a fresh page, in an order shuffled with a PRNG
// seeded by `seed` (recorded). While a model loads it samples the JS heap + ArrayBuffers
// (DevTools protocol) + every wasm memory. Every sample goes to OUT; xtask computes medians,
// spreads, per-pair ratios and checks that the greedy ids agree. With `vision`, one more fresh
// page times our vision encoder (window.bench.vision: a warm-up, then `runs` encodes of a
// synthetic image) -> OUT.vision, or { error } when it fails.
import { chromium } from 'playwright-core';
import { readFileSync, writeFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const [configPath, outPath] = process.argv.slice(2);
if (!configPath || !outPath) {
  console.error('usage: node bench/run-browser.mjs CONFIG.json OUT.json');
  process.exit(2);
}
const cfg = JSON.parse(readFileSync(configPath, 'utf8'));
const userDataDir = mkdtempSync(join(tmpdir(), 'gg-bench-'));
const context = await chromium.launchPersistentContext(userDataDir, {
  executablePath: cfg.chromium,
  headless: true,
  args: ['--no-sandbox', '--enable-unsafe-webgpu', '--enable-precise-memory-info',
    '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run',
    ...(cfg.chromiumArgs ?? [])],
});
const log = (m) => console.error(`bench: ${m}`);

// Every WebAssembly memory a page creates (ours from wasm-bindgen, onnxruntime-web's from
// Emscripten), so that the heap samples include wasm linear memory: the DevTools heap numbers
// count ArrayBuffers but not WebAssembly.Memory.
await context.addInitScript(() => {
  const mems = new Set();
  globalThis.__ggWasmBytes = () => [...mems].reduce((n, m) => n + m.buffer.byteLength, 0);
  const keep = (exports) => {
    for (const v of Object.values(exports ?? {})) if (v instanceof WebAssembly.Memory) mems.add(v);
  };
  const NativeMemory = WebAssembly.Memory;
  WebAssembly.Memory = function Memory(desc) {
    const m = new NativeMemory(desc);
    mems.add(m);
    return m;
  };
  WebAssembly.Memory.prototype = NativeMemory.prototype;
  for (const name of ['instantiate', 'instantiateStreaming']) {
    const native = WebAssembly[name].bind(WebAssembly);
    WebAssembly[name] = async (...args) => {
      const r = await native(...args);
      keep((r.instance ?? r).exports);
      return r;
    };
  }
});

/** Peak of (JS heap used + ArrayBuffer backing stores + wasm memories) while `work` runs. */
async function peakHeap(page, cdp, work) {
  let peak = 0;
  let sampling = true;
  const sample = async () => {
    const u = await cdp.send('Runtime.getHeapUsage');
    const wasm = await page.evaluate(() => globalThis.__ggWasmBytes?.() ?? 0);
    peak = Math.max(peak, (u.usedSize ?? 0) + (u.backingStorageSize ?? 0) + wasm);
  };
  const loop = (async () => {
    while (sampling) {
      await sample().catch(() => {});
      await new Promise((r) => setTimeout(r, 20));
    }
  })();
  try {
    const result = await work();
    return [result, peak];
  } finally {
    sampling = false;
    await loop;
    await sample().catch(() => {});
  }
}

/** mulberry32: a small seeded PRNG, so that an order can be replayed from the recorded seed. */
function prng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function shuffled(list, rand) {
  const a = [...list];
  for (let i = a.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [a[i], a[j]] = [a[j], a[i]];
  }
  return a;
}

async function openBench(page) {
  await page.goto(cfg.url, { waitUntil: 'load' });
  await page.waitForFunction(() => window.bench !== undefined, null, { timeout: 60000 });
}

function pageError(e, errors) {
  const extra = errors.length ? ` (page: ${errors.slice(-3).join(' | ')})` : '';
  const msg = `${String(e.message ?? e).split('\n')[0]}${extra}`;
  return msg.length > 600 ? `${msg.slice(0, 600)}…` : msg;
}

async function onePage(runtime, model, dtype) {
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  try {
    await openBench(page);
    const cdp = await context.newCDPSession(page);
    await cdp.send('HeapProfiler.collectGarbage').catch(() => {});
    const settings = await page.evaluate((r) => window.bench.settings(r), runtime);
    const [load, peak] = await peakHeap(page, cdp, () =>
      page.evaluate((o) => window.bench.load(o), { runtime, model, dtype }));
    const m = await page.evaluate((o) => window.bench.measure(o), {
      prefill: model.prefill, decode: model.decode, vocab: model.vocab,
    });
    return { ...m, settings, load_s: load.load_s, peak_heap_bytes: peak, wasm_memory_bytes: load.wasm_memory_bytes };
  } catch (e) {
    return { error: pageError(e, errors) };
  } finally {
    await page.close();
  }
}

/** onnxruntime-web's verbose log while it creates both sessions: the node placement. */
async function placement(model, dtype) {
  const page = await context.newPage();
  const lines = [];
  page.on('console', (m) => lines.push(m.text()));
  try {
    await openBench(page);
    await page.evaluate((o) => window.bench.placement(o), { model, dtype });
  } catch (e) {
    lines.push(`placement failed: ${pageError(e, [])}`);
  } finally {
    await page.close();
  }
  // "Node(s) placed on [CPUExecutionProvider]. Number of nodes: 3" and the node lines after it.
  const log = lines.join('\n');
  const cpu = [];
  const providers = {};
  const text = log.split('\n');
  for (let i = 0; i < text.length; i++) {
    const m = text[i].match(/placed on \[(\w+)\]\. Number of nodes: (\d+)/);
    if (!m) continue;
    providers[m[1]] = (providers[m[1]] ?? 0) + Number(m[2]);
    if (m[1] === 'CPUExecutionProvider') {
      // The node lines after it: "...VerifyEachNodeIsAssignedToAnEp]   Shape (/model/...)".
      for (let j = i + 1; j < text.length; j++) {
        const n = text[j].match(/VerifyEachNodeIsAssignedToAnEp\]\s+(\S+ \(.*\))\s*$/);
        if (!n || /placed on \[/.test(text[j])) break;
        cpu.push(n[1]);
      }
    }
  }
  return { providers, cpu_nodes: cpu, cpu_node_count: providers.CPUExecutionProvider ?? 0, log };
}

const seed = Number.isFinite(cfg.seed) ? cfg.seed : Date.now() % 2 ** 31;
const out = { browser_version: context.browser()?.version() ?? null, seed, models: {} };
try {
  const page = await context.newPage();
  await openBench(page);
  out.user_agent = await page.evaluate(() => navigator.userAgent);
  out.adapter_info = await page.evaluate(() => window.bench.adapterInfo());
  out.adapter = out.adapter_info.name;
  out.cross_origin_isolated = await page.evaluate(() => globalThis.crossOriginIsolated === true);
  const dtype = cfg.dtype ?? await page.evaluate(() => window.bench.defaultDtype());
  await page.close();
  if (!out.browser_version) out.browser_version = out.user_agent.match(/Chrome\/([\d.]+)/)?.[1] ?? null;
  const software = /swiftshader|llvmpipe|lavapipe/i.test(JSON.stringify(out.adapter_info)) || out.adapter_info.isFallbackAdapter === true;
  if (cfg.requireGpu && software) {
    throw new Error(`--require-gpu: Chromium's WebGPU adapter is a software one (${out.adapter}); check the GPU flags and drivers`);
  }
  const rand = prng(seed);
  for (const model of cfg.models) {
    const res = { dtype, pairs: [] };
    const runtimes = model.runtimes ?? cfg.runtimes;
    if (runtimes.includes('ort_web')) {
      log(`${model.name}: onnxruntime-web node placement`);
      res.ort_web_placement = await placement(model, dtype);
      log(`${model.name}: placement ${JSON.stringify(res.ort_web_placement.providers)}`);
    }
    for (let pair = 0; pair < cfg.pairs; pair++) {
      const order = shuffled(runtimes, rand);
      const runs = {};
      for (const runtime of order) {
        log(`${model.name}: pair ${pair + 1}/${cfg.pairs}, ${runtime} (order ${order.join(' ')})`);
        const r = await onePage(runtime, model, dtype);
        if (r.error) log(`${model.name} ${runtime}: ${r.error}`);
        runs[runtime] = r;
      }
      res.pairs.push({ order, runs });
    }
    out.models[model.name] = res;
  }
  if (cfg.vision) {
    log(`vision encoder: ${cfg.vision.softTokens} soft tokens, ${cfg.vision.runs} runs`);
    const page = await context.newPage();
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
    try {
      await openBench(page);
      out.vision = await page.evaluate((v) => window.bench.vision(v), cfg.vision);
      log(`vision encoder: ${out.vision.runs_ms.map((x) => x.toFixed(1)).join(', ')} ms`);
    } catch (e) {
      out.vision = { error: pageError(e, errors) };
      log(`vision encoder: ${out.vision.error}`);
    } finally {
      await page.close();
    }
  }
} finally {
  await context.close();
  rmSync(userDataDir, { recursive: true, force: true });
}
writeFileSync(outPath, JSON.stringify(out, null, 2));
