// Drives the browser bench (bench/web) in headless Chromium; started by `cargo xtask bench
// --browser`, which serves the page and the models and passes a JSON config file:
//   node bench/run-browser.mjs CONFIG.json OUT.json
// CONFIG: { url, chromium, runs, prefill, decodeContext, decodeTokens, models: [{ name, url }] }.
// For each model and run it alternates our runtime and onnxruntime-web (A/B/A/B), each in a fresh
// page, samples the JS heap + ArrayBuffers (DevTools protocol) + every wasm memory while the
// model loads, and writes every raw sample to OUT; xtask computes medians and ratios.
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
    '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
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

async function onePage(runtime, model, dtype) {
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  try {
    await page.goto(cfg.url, { waitUntil: 'load' });
    await page.waitForFunction(() => window.bench !== undefined, null, { timeout: 60000 });
    const cdp = await context.newCDPSession(page);
    await cdp.send('HeapProfiler.collectGarbage').catch(() => {});
    const [load, peak] = await peakHeap(page, cdp, () =>
      page.evaluate((o) => window.bench.load(o), { runtime, model: model.url, dtype }));
    const m = await page.evaluate((o) => window.bench.measure(o), {
      prefill: cfg.prefill, decodeContext: cfg.decodeContext, decodeTokens: cfg.decodeTokens,
    });
    return { ...m, load_s: load.load_s, peak_heap_bytes: peak, wasm_memory_bytes: load.wasm_memory_bytes };
  } catch (e) {
    const extra = errors.length ? ` (page: ${errors.slice(-3).join(' | ')})` : '';
    const msg = `${String(e.message ?? e).split('\n')[0]}${extra}`;
    return { error: msg.length > 600 ? `${msg.slice(0, 600)}…` : msg };
  } finally {
    await page.close();
  }
}

const out = { browser_version: context.browser()?.version() ?? null, models: {} };
try {
  const page = await context.newPage();
  await page.goto(cfg.url, { waitUntil: 'load' });
  await page.waitForFunction(() => window.bench !== undefined, null, { timeout: 60000 });
  out.user_agent = await page.evaluate(() => navigator.userAgent);
  out.adapter = await page.evaluate(() => window.bench.adapterName());
  const dtype = await page.evaluate(() => window.bench.defaultDtype());
  await page.close();
  if (!out.browser_version) out.browser_version = out.user_agent.match(/Chrome\/([\d.]+)/)?.[1] ?? null;
  for (const model of cfg.models) {
    const res = { dtype, ours: [], ort: [] };
    for (let run = 0; run < cfg.runs; run++) {
      for (const runtime of ['ours', 'ort']) {
        log(`${model.name}: run ${run + 1}/${cfg.runs}, ${runtime}`);
        const r = await onePage(runtime, model, dtype);
        if (r.error) log(`${model.name} ${runtime}: ${r.error}`);
        res[runtime].push(r);
      }
    }
    out.models[model.name] = res;
  }
} finally {
  await context.close();
  rmSync(userDataDir, { recursive: true, force: true });
}
writeFileSync(outPath, JSON.stringify(out, null, 2));
