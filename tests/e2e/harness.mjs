// Test harness: a local HTTP server for fixture pages and models, headless Chromium with the
// built extension, and helpers that reach into the closed shadow root through the DevTools
// protocol (DOM.getDocument with pierce) — never through a test-only open root.
import http from 'node:http';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = path.dirname(fileURLToPath(import.meta.url));
export const repo = path.resolve(here, '..', '..');
const pagesDir = path.join(repo, 'tests', 'pages');
const modelsDir = path.join(repo, 'tests', 'fixtures', 'models');

export const STRICT_CSP = "default-src 'self'; script-src 'self'";
/** The CSP a site must allow for the embeddable widget (README, "Embed it on your site"). */
export const WIDGET_CSP = "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; worker-src 'self'";

const TYPES = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript', '.mjs': 'text/javascript', '.css': 'text/css',
  '.json': 'application/json', '.png': 'image/png', '.wasm': 'application/wasm', '.jinja': 'text/plain' };

/**
 * Starts the fixture server on a free port. Pages under /strict-csp/ get a CSP that forbids wasm.
 * Files are served with `ETag`, `Accept-Ranges: bytes`, and `Range: bytes=N-[M]` requests are
 * answered with 206 + `Content-Range` (416 when unsatisfiable).
 *
 * `options` (also changeable later through the returned `options`):
 * - `throttle: { bytes, delayMs }` — files under /models/ are sent `bytes` at a time with a pause
 *   between chunks (so that download progress is observable);
 * - `cutOnce: Set<path>` — the first full GET of each of these paths sends the headers of the
 *   whole file, then only its first half, then closes the connection; the log entry says `cut`;
 * - `corrupt: Set<path>` — these paths are served with one byte changed (same size), as a broken
 *   mirror or a tampering proxy would; the log entry says `corrupt`;
 * - `listingPage: n` — the file listing comes in pages of `n` entries, each with the Hub's
 *   `Link: <...&cursor=K>; rel="next"` header to the next (the log entry has the `cursor`);
 * - `unlisted: Set<repository path>` — these files' listing entries carry no hash (no `oid`, no
 *   `lfs`), as a listing that publishes none for them;
 * - `models: { NAME: dir }` — more repositories, served from directories outside
 *   `tests/fixtures/models` (a generated model under `bench/cache/`), under `NAME` like the others;
 * - `pages: dir` — serve the pages from `dir` instead of `tests/pages` (the built demo site);
 * - `widget: dir` — the built embeddable widget (`dist/widget-dev/`), served under `/gg-widget/`.
 *   Pages under `/widget-csp/` are the pages of `tests/pages` served with `WIDGET_CSP`.
 *
 * Models are also served in the Hugging Face layout, as the Hub serves them:
 * `/ORG/NAME/resolve/main/PATH` is `tests/fixtures/models/NAME/PATH` (any ORG), and
 * `/api/models/ORG/NAME/tree/main?recursive=true` lists its files as the Hub's API does: `path`,
 * `size`, the git blob `oid`, and for the LFS-stored files (`.onnx`, `.onnx_data`, and files of
 * 50 KB or more) `lfs: {oid: SHA-256 of the content, size, pointerSize}` — computed from the
 * files on disk, so a `corrupt` file no longer matches its listed hash.
 */
export async function startServer(options = {}) {
  const log = [];
  const opts = { throttle: null, cutOnce: new Set(), corrupt: new Set(), listingPage: 0, unlisted: new Set(), models: {}, widget: null, pages: pagesDir, ...options };
  /** The directory of repository `name` and the root it must stay inside. */
  const repository = (name) => {
    const extra = Object.hasOwn(opts.models, name) ? path.resolve(opts.models[name]) : null;
    return extra ? { root: extra, dir: extra } : { root: modelsDir, dir: path.join(modelsDir, path.normalize(name)) };
  };
  const server = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://x');
    const entry = { method: req.method, path: url.pathname, range: req.headers.range ?? null, status: 0, cut: null };
    log.push(entry);
    let rel = decodeURIComponent(url.pathname);
    let base = path.resolve(opts.pages);
    const headers = {};
    const tree = /^\/api\/models\/[^/]+\/([^/]+)\/tree\/main\/?$/.exec(rel);
    if (tree) {
      const { root, dir } = repository(tree[1]);
      if (!dir.startsWith(root) || !fs.existsSync(dir)) { entry.status = 404; res.writeHead(404); res.end('{"error":"Repository not found"}'); return; }
      let listing = hubListing(dir).map((e) => {
        if (!opts.unlisted.has(e.path)) return e;
        const { oid, lfs, ...rest } = e;
        return rest;
      });
      const headers = { 'Content-Type': 'application/json' };
      if (opts.listingPage > 0) {
        const cursor = Number(url.searchParams.get('cursor') ?? 0);
        entry.cursor = cursor;
        const end = cursor + opts.listingPage;
        if (end < listing.length) {
          const next = new URL(url.pathname, 'http://x');
          next.searchParams.set('recursive', 'true');
          next.searchParams.set('cursor', String(end));
          headers.Link = `<${next.pathname}${next.search}>; rel="next"`;
        }
        listing = listing.slice(cursor, end);
      }
      entry.status = 200;
      res.writeHead(200, headers);
      res.end(JSON.stringify(listing));
      return;
    }
    const hub = /^\/[^/]+\/([^/]+)\/resolve\/main(\/.*)$/.exec(rel) ?? /^\/models\/([^/]+)(\/.*)$/.exec(rel);
    let isModel = false;
    if (hub) {
      const { root, dir } = repository(hub[1]);
      isModel = true;
      base = root;
      rel = path.relative(root, dir) ? `/${path.relative(root, dir)}${hub[2]}` : hub[2];
    }
    else if (rel.startsWith('/strict-csp/')) { rel = rel.slice('/strict-csp'.length); headers['Content-Security-Policy'] = STRICT_CSP; }
    else if (rel.startsWith('/widget-csp/')) { rel = rel.slice('/widget-csp'.length); headers['Content-Security-Policy'] = WIDGET_CSP; }
    else if (rel.startsWith('/gg-widget/') && opts.widget) { base = path.resolve(opts.widget); rel = rel.slice('/gg-widget'.length); }
    const file = path.join(base, path.normalize(rel));
    if (!file.startsWith(base) || !fs.existsSync(file) || fs.statSync(file).isDirectory()) {
      entry.status = 404; res.writeHead(404); res.end('not found'); return;
    }
    const stat = fs.statSync(file);
    const size = stat.size;
    headers['Content-Type'] = TYPES[path.extname(file)] ?? 'application/octet-stream';
    headers['Accept-Ranges'] = 'bytes';
    headers['ETag'] = `"${size.toString(16)}-${Math.floor(stat.mtimeMs).toString(16)}"`;
    let start = 0, end = size - 1, status = 200;
    if (req.headers.range) {
      const m = /^bytes=(\d+)-(\d*)$/.exec(req.headers.range.trim());
      const s = m ? Number(m[1]) : NaN;
      const e = m && m[2] !== '' ? Math.min(Number(m[2]), size - 1) : size - 1;
      if (!m || s >= size || e < s) {
        entry.status = 416;
        res.writeHead(416, { 'Content-Range': `bytes */${size}` }); res.end(); return;
      }
      start = s; end = e; status = 206;
      headers['Content-Range'] = `bytes ${start}-${end}/${size}`;
    }
    headers['Content-Length'] = String(end - start + 1);
    entry.status = status;
    res.writeHead(status, headers);
    if (req.method === 'HEAD') { res.end(); return; }
    const cut = req.method === 'GET' && status === 200 && opts.cutOnce.has(url.pathname);
    const corrupt = opts.corrupt.has(url.pathname);
    if (!cut && !corrupt && !(isModel && opts.throttle)) { fs.createReadStream(file, { start, end }).pipe(res); return; }
    if (cut) opts.cutOnce.delete(url.pathname);
    const whole = fs.readFileSync(file);
    if (corrupt) {
      const at = Math.floor(whole.length / 2);
      whole[at] ^= 0xff;
      entry.corrupt = at;
    }
    const data = whole.subarray(start, end + 1);
    const stop = cut ? Math.floor(data.length / 2) : data.length;
    if (cut) entry.cut = stop;
    const step = opts.throttle?.bytes ?? stop;
    const delay = opts.throttle?.delayMs ?? 0;
    let at = 0;
    const next = () => {
      if (at >= stop) {
        // A cut: the client has the first half and then sees the connection close early.
        if (cut) setTimeout(() => res.socket?.end(), 100); else res.end();
        return;
      }
      const chunk = data.subarray(at, Math.min(at + step, stop));
      at += chunk.length;
      res.write(chunk, () => setTimeout(next, delay));
    };
    next();
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  return { url: `http://127.0.0.1:${port}`, log, options: opts, close: () => new Promise((r) => server.close(r)) };
}

/** Files at least this large are hashed in chunks, and their hashes are kept (see `fileHashes`). */
const BIG_FILE = 64 << 20;
const hashMemo = new Map();

/**
 * The git blob SHA-1 and the SHA-256 of the file at `full`. Large files (a generated full-size
 * model: several GB, more than one Buffer holds) are read in chunks, and their hashes are kept in
 * memory and in `HASHES` beside the repository directory (`DIR.hub-hashes.json`), keyed by path,
 * size and modification time, so that a second listing or a later run does not read them again.
 */
function fileHashes(dir, rel) {
  const full = path.join(dir, rel);
  const stat = fs.statSync(full);
  const key = `${rel}:${stat.size}:${Math.floor(stat.mtimeMs)}`;
  if (stat.size < BIG_FILE) {
    const data = fs.readFileSync(full);
    return {
      blob: crypto.createHash('sha1').update(`blob ${data.length}\0`).update(data).digest('hex'),
      sha256: crypto.createHash('sha256').update(data).digest('hex'),
    };
  }
  const store = `${dir.replace(/[\\/]+$/, '')}.hub-hashes.json`;
  if (!hashMemo.has(store)) {
    let saved = {};
    try { saved = JSON.parse(fs.readFileSync(store, 'utf8')); } catch { /* none yet, or unreadable: hash again */ }
    hashMemo.set(store, saved);
  }
  const memo = hashMemo.get(store);
  if (memo[key]) return memo[key];
  const sha1 = crypto.createHash('sha1').update(`blob ${stat.size}\0`);
  const sha256 = crypto.createHash('sha256');
  const buf = Buffer.allocUnsafe(16 << 20);
  const fd = fs.openSync(full, 'r');
  try {
    for (let n; (n = fs.readSync(fd, buf, 0, buf.length, null)) > 0;) {
      const chunk = buf.subarray(0, n);
      sha1.update(chunk);
      sha256.update(chunk);
    }
  } finally {
    fs.closeSync(fd);
  }
  memo[key] = { blob: sha1.digest('hex'), sha256: sha256.digest('hex') };
  fs.writeFileSync(store, JSON.stringify(memo, null, 1));
  return memo[key];
}

/** The Hugging Face API's recursive tree listing of a model directory (see `startServer`). */
export function hubListing(dir) {
  const out = [];
  const walk = (sub) => {
    for (const name of fs.readdirSync(path.join(dir, sub)).sort()) {
      const rel = sub ? `${sub}/${name}` : name;
      const full = path.join(dir, rel);
      const stat = fs.statSync(full);
      if (stat.isDirectory()) {
        out.push({ type: 'directory', oid: '0'.repeat(40), size: 0, path: rel });
        walk(rel);
        continue;
      }
      const { blob, sha256 } = fileHashes(dir, rel);
      const entry = { type: 'file', oid: blob, size: stat.size, path: rel };
      if (/\.onnx(_data)?$/.test(name) || stat.size >= 50 * 1024) {
        entry.lfs = { oid: sha256, size: stat.size, pointerSize: 134 };
      }
      out.push(entry);
    }
  };
  walk('');
  return out;
}

/** Serves the files of `dir` (the built demo site) on a free port. */
export async function startStaticServer(dir) {
  const server = http.createServer((req, res) => {
    const rel = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    const file = path.join(dir, path.normalize(rel === '/' ? '/index.html' : rel));
    if (!file.startsWith(dir) || !fs.existsSync(file) || fs.statSync(file).isDirectory()) {
      res.writeHead(404); res.end('not found'); return;
    }
    res.writeHead(200, { 'Content-Type': TYPES[path.extname(file)] ?? 'application/octet-stream' });
    fs.createReadStream(file).pipe(res);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  return { url: `http://127.0.0.1:${port}`, close: () => new Promise((r) => server.close(r)) };
}

export const CHROMIUM = process.env.GG_CHROMIUM ?? '/usr/bin/chromium';

/** Headless Chromium in a fresh profile (removed by `close`), with `args` after the flags every
 * test browser gets. */
async function launchChromium(args) {
  const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'gg-e2e-'));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1000, height: 760 },
    args: [
      '--no-sandbox', '--disable-background-networking', '--disable-component-update', '--disable-sync',
      '--no-first-run', ...args,
    ],
  });
  const close = async () => { await context.close(); fs.rmSync(userDataDir, { recursive: true, force: true }); };
  return { context, userDataDir, close };
}

/** Launches headless Chromium with the unpacked extension at `extDir`. */
export async function launchExtension(extDir) {
  if (!fs.existsSync(path.join(extDir, 'manifest.json'))) {
    throw new Error(`${extDir} has no manifest.json: run \`cargo xtask build\` first`);
  }
  const browser = await launchChromium([
    `--disable-extensions-except=${extDir}`, `--load-extension=${extDir}`,
    '--disable-features=DisableLoadExtensionCommandLineSwitch', '--enable-unsafe-webgpu',
  ]);
  const { context } = browser;
  const sw = context.serviceWorkers()[0] ?? (await context.waitForEvent('serviceworker', { timeout: 30000 }));
  const extensionId = new URL(sw.url()).host;
  return { ...browser, sw, extensionId };
}

/** Headless Chromium without any extension (WebGPU on SwiftShader), as a visitor of a site that
 * embeds the widget. `webgpu: false` leaves WebGPU off (on Linux it is behind a flag), as a
 * browser without it. */
export async function launchBrowser({ webgpu = true } = {}) {
  return launchChromium(webgpu ? ['--enable-unsafe-webgpu'] : ['--disable-gpu']);
}

/** Polls `fn` until it returns a truthy value or `timeout` ms pass. */
export async function until(fn, { timeout = 30000, interval = 200, what = 'condition' } = {}) {
  const end = Date.now() + timeout;
  let last;
  while (Date.now() < end) {
    try { last = await fn(); if (last) return last; } catch (e) { last = e; }
    await new Promise((r) => setTimeout(r, interval));
  }
  throw new Error(`timed out waiting for ${what} (last: ${last instanceof Error ? last.message : JSON.stringify(last)})`);
}

/** A DevTools view of the page's DOM that pierces shadow roots (closed ones included). */
export class Pierce {
  static async open(page) {
    const cdp = await page.context().newCDPSession(page);
    await cdp.send('DOM.enable');
    return new Pierce(cdp);
  }
  constructor(cdp) { this.cdp = cdp; }
  async tree() { return (await this.cdp.send('DOM.getDocument', { depth: -1, pierce: true })).root; }
  static attrs(node) {
    const out = {};
    for (let i = 0; i + 1 < (node.attributes ?? []).length; i += 2) out[node.attributes[i]] = node.attributes[i + 1];
    return out;
  }
  static *walk(node) {
    yield node;
    for (const c of node.children ?? []) yield* Pierce.walk(c);
    for (const s of node.shadowRoots ?? []) yield* Pierce.walk(s);
    if (node.contentDocument) yield* Pierce.walk(node.contentDocument);
  }
  /** The first node whose attributes or name match. */
  async find(pred) {
    const root = await this.tree();
    for (const n of Pierce.walk(root)) if (pred(n, Pierce.attrs(n))) return n;
    return null;
  }
  async byTestId(id) { return this.find((_, a) => a['data-testid'] === id); }
  async box(node) {
    const { model } = await this.cdp.send('DOM.getBoxModel', { backendNodeId: node.backendNodeId });
    const [x1, y1, x2, , , y3] = model.border;
    return { x: x1, y: y1, width: x2 - x1, height: y3 - y1 };
  }
  /** Clicks the centre of a node with real input events. */
  async click(node) {
    await this.cdp.send('DOM.scrollIntoViewIfNeeded', { backendNodeId: node.backendNodeId });
    const b = await this.box(node);
    const x = b.x + b.width / 2, y = b.y + b.height / 2;
    for (const type of ['mouseMoved', 'mousePressed', 'mouseReleased']) {
      await this.cdp.send('Input.dispatchMouseEvent', { type, x, y, button: 'left', clickCount: 1 });
    }
  }
}

/** Opens `url` in a tab (a new one unless `page` is given), clicks the launcher through the
 * closed root, and returns the page and the overlay's frame once its message box is there. */
export async function openOverlay(ext, url, page = null) {
  page ??= await ext.context.newPage();
  await page.goto(url);
  await page.bringToFront();
  await page.waitForFunction(() => document.querySelector('gemma-gem-host') !== null, null, { timeout: 20000 });
  const pierce = await Pierce.open(page);
  const launcher = await until(() => pierce.byTestId('gg-launcher'), { what: 'launcher' });
  await pierce.click(launcher);
  const frame = await until(() => page.frames().find((f) => f.url().endsWith('/overlay/overlay.html')), { what: 'overlay frame' });
  await frame.waitForSelector('[data-testid="gg-input"]', { timeout: 20000 });
  return { page, frame };
}

/** Types `text` into the overlay's message box and sends it. */
export async function sendMessage(frame, text) {
  await frame.fill('[data-testid="gg-input"]', text);
  await frame.click('[data-testid="gg-send"]');
}
