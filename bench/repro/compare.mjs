// Runs a case (make_case.py) with onnxruntime-web and compares every output with the CPU EP's.
//   node bench/repro/compare.mjs CASE_DIR [--where node|browser] [--ep wasm|webgpu]
//        [--chromium /usr/bin/chromium] [--tol 1e-3] [--all] [--save DIR] [--hide-feature F]
//        [--shaders DIR] [--ort-dist DIR]
// --where node: onnxruntime-web's wasm build in Node (the CPU kernels, no browser);
// --where browser: headless Chromium (WebGPU on whatever adapter it has: SwiftShader here),
// onnxruntime-web from bench/node_modules, served with COOP/COEP (threads), as the bench does.
// Prints, in graph order, each output's max |difference| and the first one beyond --tol
// (relative to the output's max |value|, at least 1); --all prints every output; --save writes
// onnxruntime-web's outputs into DIR (the names and files of case.json's outputs);
// --hide-feature (browser, WebGPU) hides that feature (e.g. `subgroups`) from every adapter and
// device of the page, so that onnxruntime-web runs without it; --shaders (browser, WebGPU) writes every
// WGSL module onnxruntime-web created into DIR (NNN.wgsl, in creation order);
// --ort-dist: another onnxruntime-web dist folder (default bench/node_modules/onnxruntime-web/dist;
// transformers.js's own: bench/node_modules/@huggingface/transformers/node_modules/onnxruntime-web/dist).
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { createServer } from 'node:http';
import { join, dirname, extname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runCase } from './case.mjs';
import { f16ToF32 } from '../web/f16.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const argv = process.argv.slice(2);
const caseDir = argv[0];
const opt = (k, d) => {
  const i = argv.indexOf(`--${k}`);
  return i < 0 ? d : argv[i + 1];
};
const where = opt('where', 'node');
const ep = opt('ep', where === 'node' ? 'wasm' : 'webgpu');
const tol = Number(opt('tol', '1e-3'));
const all = argv.includes('--all');
const c = JSON.parse(readFileSync(join(caseDir, 'case.json'), 'utf8'));

function numbers(type, buf) {
  const b = buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength);
  if (type === 'float32') return Float32Array.from(new Float32Array(b));
  if (type === 'float16') return Float32Array.from(new Uint16Array(b), f16ToF32);
  if (type === 'int64') return Float64Array.from(new BigInt64Array(b), Number);
  if (type === 'int32') return Float64Array.from(new Int32Array(b));
  return Float64Array.from(new Uint8Array(b));
}

let got;
if (where === 'node') {
  const ort = await import('onnxruntime-web');
  ort.env.logLevel = 'error';
  got = await runCase(ort, async (f) => {
    const b = readFileSync(join(caseDir, f));
    return b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength);
  }, { ep });
  for (const o of Object.values(got.outputs)) {
    const d = o.data;
    o.bytes = Buffer.from(d.buffer, d.byteOffset, d.byteLength);
  }
} else {
  const { chromium } = await import('playwright-core');
  const ortDir = opt('ort-dist', join(here, '..', 'node_modules', 'onnxruntime-web', 'dist'));
  const types = { '.mjs': 'text/javascript', '.js': 'text/javascript', '.wasm': 'application/wasm', '.html': 'text/html', '.json': 'application/json' };
  const server = createServer((req, res) => {
    const url = decodeURIComponent(req.url.split('?')[0]);
    let file = null;
    if (url.startsWith('/ort/')) file = join(ortDir, url.slice(5));
    else if (url.startsWith('/case/')) file = join(caseDir, url.slice(6));
    else if (url === '/case.mjs') file = join(here, 'case.mjs');
    else if (url === '/') file = null;
    try {
      const body = file ? readFileSync(file) : Buffer.from('<!doctype html><title>repro</title>');
      res.writeHead(200, {
        'content-type': types[file ? extname(file) : '.html'] ?? 'application/octet-stream',
        'cross-origin-opener-policy': 'same-origin',
        'cross-origin-embedder-policy': 'require-corp',
        'cross-origin-resource-policy': 'same-origin',
      });
      res.end(body);
    } catch {
      res.writeHead(404);
      res.end();
    }
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const base = `http://127.0.0.1:${server.address().port}`;
  const browser = await chromium.launch({
    executablePath: opt('chromium', '/usr/bin/chromium'),
    headless: true,
    args: ['--no-sandbox', '--enable-unsafe-webgpu'],
  });
  try {
    const page = await browser.newPage();
    page.on('console', (m) => { if (m.type() === 'error' || m.type() === 'warning') console.error(`page: ${m.text()}`); });
    await page.goto(`${base}/`);
    const bundle = ep === 'webgpu' ? 'ort.webgpu.min.mjs' : 'ort.wasm.min.mjs';
    got = await page.evaluate(async ({ bundle, ep, hide }) => {
      const shaders = [];
      if (globalThis.GPUDevice) {
        const create = GPUDevice.prototype.createShaderModule;
        GPUDevice.prototype.createShaderModule = function (d) {
          const code = d.code;
          shaders.push(code);
          return create.call(this, d);
        };
      }
      const ort = await import(`/ort/${bundle}`);
      ort.env.wasm.wasmPaths = '/ort/';
      if (ep === 'webgpu' && hide) {
        // Every adapter and device the page sees lists its features without `hide`, and no device
        // is requested with it: onnxruntime-web then generates its shaders for a device without it.
        for (const proto of [GPUAdapter.prototype, GPUDevice.prototype]) {
          const get = Object.getOwnPropertyDescriptor(proto, 'features').get;
          Object.defineProperty(proto, 'features', { configurable: true, get() { return new Set([...get.call(this)].filter((f) => f !== hide)); } });
        }
        const request = GPUAdapter.prototype.requestDevice;
        GPUAdapter.prototype.requestDevice = function (d = {}) {
          return request.call(this, { ...d, requiredFeatures: [...(d.requiredFeatures ?? [])].filter((f) => f !== hide) });
        };
      }
      ort.env.logLevel = 'error';
      const { runCase } = await import('/case.mjs');
      const r = await runCase(ort, async (f) => (await fetch(`/case/${f}`)).arrayBuffer(), { ep });
      const b64 = (d) => {
        const u = new Uint8Array(d.buffer, d.byteOffset, d.byteLength);
        let s = '';
        for (let i = 0; i < u.length; i += 0x8000) s += String.fromCharCode(...u.subarray(i, i + 0x8000));
        return btoa(s);
      };
      const outputs = {};
      for (const [k, o] of Object.entries(r.outputs)) outputs[k] = { type: o.type, dims: o.dims, b64: b64(o.data) };
      let adapter = null;
      try {
        const a = await navigator.gpu?.requestAdapter();
        adapter = a ? { vendor: a.info?.vendor, architecture: a.info?.architecture, subgroupMinSize: a.info?.subgroupMinSize,
          subgroupMaxSize: a.info?.subgroupMaxSize, features: [...a.features].filter((f) => f.startsWith('subgroup')) } : null;
      } catch { /* none */ }
      return { version: r.version, outputs, isolated: crossOriginIsolated, threads: ort.env.wasm.numThreads, adapter, shaders };
    }, { bundle, ep, hide: opt('hide-feature', null) });
    for (const o of Object.values(got.outputs)) o.bytes = Buffer.from(o.b64, 'base64');
    const shaderDir = opt('shaders', null);
    if (shaderDir) {
      mkdirSync(shaderDir, { recursive: true });
      got.shaders.forEach((code, i) => writeFileSync(join(shaderDir, `${String(i).padStart(3, '0')}.wgsl`), code));
      console.log(`${got.shaders.length} shader modules written to ${shaderDir}`);
    }
    console.log(`browser: crossOriginIsolated ${got.isolated}, adapter ${JSON.stringify(got.adapter)}`);
  } finally {
    await browser.close();
    server.close();
  }
}

console.log(`onnxruntime-web ${got.version} (${where}, ${ep}) vs onnxruntime ${c.ort_python} CPU EP, ${c.tokens} tokens`);
const order = [...c.order, ...c.outputs.map((o) => o.name).filter((n) => !c.order.includes(n))];
const save = opt('save', null);
if (save) {
  mkdirSync(save, { recursive: true });
  for (const o of c.outputs) if (got.outputs[o.name]) writeFileSync(join(save, o.file), got.outputs[o.name].bytes);
}
let first = null;
for (const name of order) {
  const ref = c.outputs.find((o) => o.name === name);
  const g = got.outputs[name];
  if (!g) { console.log(`${name}: missing`); continue; }
  const r = numbers(ref.type, readFileSync(join(caseDir, 'cpu', ref.file)));
  const v = numbers(g.type, g.bytes);
  if (r.length !== v.length) { console.log(`${name}: ${v.length} values, expected ${r.length}`); continue; }
  let maxd = 0, at = 0, maxr = 0;
  for (let i = 0; i < r.length; i++) {
    const d = Math.abs(r[i] - v[i]);
    if (d > maxd || (Number.isNaN(d) && !Number.isNaN(maxd))) { maxd = d; at = i; }
    maxr = Math.max(maxr, Math.abs(r[i]));
  }
  const bad = !(maxd <= tol * Math.max(1, maxr));
  if (bad && !first) first = name;
  if (all || bad || name === 'logits') {
    console.log(`${bad ? 'DIFF' : 'ok  '} ${name} [${ref.dims}] max|d| ${maxd.toExponential(3)} at ${at} (cpu ${r[at]}, web ${v[at]}), max|cpu| ${maxr.toExponential(3)}`);
  }
  if (name === 'logits') {
    const n = ref.dims[ref.dims.length - 1];
    const top2 = (a) => {
      // A loop, not Math.max(...last): a 262144-entry vocabulary overflows the call stack.
      let i = 0;
      let second = -Infinity;
      for (let j = 1; j < n; j++) {
        const x = a[a.length - n + j];
        if (x > a[a.length - n + i]) {
          second = a[a.length - n + i];
          i = j;
        } else if (x > second) {
          second = x;
        }
      }
      return `argmax ${i} (gap ${(a[a.length - n + i] - second).toFixed(6)})`;
    };
    console.log(`     logits, last position: cpu ${top2(r)}, web ${top2(v)}`);
  }
  if (first && !all && first !== name && order.indexOf(name) > order.indexOf(first) + 8) break;
}
console.log(first ? `first output beyond tolerance: ${first}` : 'all outputs within tolerance');
process.exit(0);
