// Model file integrity and model sources. The fixture server serves the tiny model in the Hugging
// Face layout (`/ORG/NAME/resolve/main/...`) with the Hub's file listing
// (`/api/models/ORG/NAME/tree/main`), whose LFS entries carry each file's SHA-256 and whose
// files kept in git carry their git blob SHA-1. A file served with one byte changed no longer
// matches: the offscreen document deletes it from Cache Storage and the overlay says why; served
// intact, it is verified and kept. Files the listing publishes no hash for are named in the
// model status. A plain http:// mirror on another machine
// is used only after the user confirmed it in the settings.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { startServer, launchExtension, until, openOverlay, sendMessage, repo, hubListing } from './harness.mjs';

const HUB = '/test-org/gemma4-tiny-agent/resolve/main';
const BROKEN = 'onnx/embed_tokens_q4.onnx_data';
let server, ext;

before(async () => {
  server = await startServer({ corrupt: new Set([`${HUB}/${BROKEN}`]), unlisted: new Set(['generation_config.json']) });
  ext = await launchExtension(process.env.GG_EXT_DEV);
});
after(async () => { await ext?.close(); await server?.close(); });

const errors = (frame) => frame.$$eval('[data-testid="gg-error"]', (els) => els.map((e) => ({ kind: e.dataset.kind, text: e.innerText })));
const modelStatus = (frame) => frame.$eval('[data-testid="gg-model-status"]', (e) => e.dataset.status);

/** What Cache Storage holds of one file of the repository: its entry (JSON) and part count. */
const cached = (frame, url) => frame.evaluate(async (u) => {
  const c = await caches.open('gemma-gem-models-v1');
  const keys = (await c.keys()).map((r) => r.url).filter((k) => decodeURIComponent(k.split('?u=')[1] ?? '') === u);
  const meta = keys.find((k) => k.includes('/v1/meta?'));
  return { keys: keys.length, meta: meta ? JSON.parse(await (await c.match(meta)).text()) : null };
}, url);

test('a model file whose SHA-256 is not the repository\'s is deleted from the cache and the overlay says so; served intact it is verified', async () => {
  const base = `${server.url}${HUB}`;
  const file = fs.readFileSync(path.join(repo, 'tests/fixtures/models/gemma4-tiny-agent', BROKEN));
  const expected = crypto.createHash('sha256').update(file).digest('hex');
  await ext.sw.evaluate((s) => chrome.storage.sync.set({ settings: { modelSource: s, maxIterations: 1 } }), base);
  const { page, frame } = await openOverlay(ext, `${server.url}/basic.html`);
  await sendMessage(frame, 'Hello');

  const error = await until(async () => (await errors(frame)).find((e) => /SHA-256/.test(e.text)),
    { timeout: 120000, what: 'the integrity error in the overlay' });
  assert.ok(server.log.some((r) => r.path === `${HUB}/${BROKEN}` && r.corrupt !== undefined), 'the server sent the changed file');
  assert.ok(server.log.some((r) => r.path === '/api/models/test-org/gemma4-tiny-agent/tree/main'), 'the file listing was read');
  assert.match(error.text, new RegExp(`${BROKEN.replace(/\./g, '\\.')} is damaged or was changed on the way: its SHA-256 is [0-9a-f]{64}, but the repository says ${expected}`));
  assert.match(error.text, /The file was deleted from the cache/);
  assert.deepEqual(await cached(frame, `${base}/${BROKEN}`), { keys: 0, meta: null }, 'nothing of the file is left in Cache Storage');
  const config = await cached(frame, `${base}/config.json`);
  assert.equal(config.meta?.complete, true, 'the other files stay');
  const configSha = crypto.createHash('sha256').update(fs.readFileSync(path.join(repo, 'tests/fixtures/models/gemma4-tiny-agent/config.json'))).digest('hex');
  assert.equal(config.meta.sha256, configSha, 'config.json (kept in git, not LFS) was verified by its git blob SHA-1');

  // Served intact: downloaded again, verified, kept, and the model loads.
  server.options.corrupt.clear();
  const gets = () => server.log.filter((r) => r.path === `${HUB}/${BROKEN}` && r.method === 'GET').length;
  const count = gets();
  await frame.click('[data-testid="gg-error"] [data-action="dismiss"]').catch(() => {});
  await sendMessage(frame, 'Hello again');
  await until(async () => (await cached(frame, `${base}/${BROKEN}`)).meta?.complete === true,
    { timeout: 120000, what: 'the file stored again' });
  assert.equal(gets(), count + 1, 'downloaded once more');
  assert.equal((await cached(frame, `${base}/${BROKEN}`)).meta.sha256, expected);
  await until(async () => (await modelStatus(frame)) === 'ready', { timeout: 300000, interval: 250, what: 'the model to load' });
  const unverified = await frame.$eval('[data-testid="gg-model-unverified"]', (e) => ({ text: e.innerText, files: e.title.split('\n') }));
  assert.deepEqual(unverified, { text: 'generation_config.json has no published hash: checked by size only', files: ['generation_config.json'] },
    'only the file the listing has no hash for is unverified');
  await frame.click('[data-testid="gg-stop"]').catch(() => {});
  await page.close();
});

test('a plain http:// mirror on another machine is used only once the user confirmed it in the settings', async () => {
  const mirror = 'http://mirror.example/models/tiny';
  // Stored without a confirmation (another device, a hand edit): refused before any download.
  await ext.sw.evaluate((s) => chrome.storage.sync.set({ settings: { modelSource: s } }), mirror);
  const { page, frame } = await openOverlay(ext, `${server.url}/basic.html`);
  await sendMessage(frame, 'Hello');
  const refused = await until(async () => (await errors(frame)).find((e) => /plain http:\/\//.test(e.text)), { what: 'the refusal' });
  assert.match(refused.text, /Confirm this address in the settings/);

  // In the settings: the address alone is not applied; the confirmation applies it.
  await ext.sw.evaluate(() => chrome.storage.sync.set({ settings: {} }));
  await frame.click('[data-testid="gg-settings-open"]');
  await frame.selectOption('[data-testid="gg-setting-source"]', 'mirror');
  await frame.fill('[data-testid="gg-setting-mirror-url"]', mirror);
  await frame.press('[data-testid="gg-setting-mirror-url"]', 'Tab');
  const box = await frame.waitForSelector('[data-testid="gg-setting-mirror-http-confirm"]');
  await page.waitForTimeout(500);
  const stored = () => ext.sw.evaluate(async () => (await chrome.storage.sync.get('settings')).settings ?? {});
  assert.notEqual((await stored()).modelSource, mirror, 'not applied before the confirmation');
  await box.check();
  const after = await until(async () => { const s = await stored(); return s.modelSource === mirror && s; }, { what: 'the confirmed mirror stored' });
  assert.equal(after.confirmedHttpMirror, mirror);
  // Localhost needs no confirmation.
  await frame.fill('[data-testid="gg-setting-mirror-url"]', 'http://127.0.0.1:9/m');
  await frame.press('[data-testid="gg-setting-mirror-url"]', 'Tab');
  await until(async () => (await stored()).modelSource === 'http://127.0.0.1:9/m', { what: 'the local mirror stored' });
  assert.equal((await stored()).confirmedHttpMirror, '');
  assert.equal(await frame.$('[data-testid="gg-setting-mirror-http-confirm"]'), null);
  await ext.sw.evaluate(() => chrome.storage.sync.set({ settings: {} }));
  await page.close();
});

test('a file kept in git (not LFS) is checked against its git blob SHA-1, with the listing read page by page', async () => {
  // Another repository path (its own cache entries), a listing in pages of 2 entries, and
  // config.json (a small file kept in git) served with one byte changed.
  const hub = '/git-org/gemma4-tiny-agent/resolve/main';
  const base = `${server.url}${hub}`;
  const dir = path.join(repo, 'tests/fixtures/models/gemma4-tiny-agent');
  const config = fs.readFileSync(path.join(dir, 'config.json'));
  const blob = crypto.createHash('sha1').update(`blob ${config.length}\0`).update(config).digest('hex');
  server.options.corrupt.clear();
  server.options.unlisted.clear();
  server.options.corrupt.add(`${hub}/config.json`);
  server.options.listingPage = 2;
  try {
    await ext.sw.evaluate((s) => chrome.storage.sync.set({ settings: { modelSource: s, maxIterations: 1 } }), base);
    const { page, frame } = await openOverlay(ext, `${server.url}/basic.html`);
    await sendMessage(frame, 'Hello');
    const error = await until(async () => (await errors(frame)).find((e) => /git blob SHA-1/.test(e.text)),
      { timeout: 120000, what: 'the integrity error for config.json' });
    assert.match(error.text, new RegExp(`config\\.json is damaged or was changed on the way: its git blob SHA-1 is [0-9a-f]{40}, but the repository says ${blob}`));
    assert.deepEqual(await cached(frame, `${base}/config.json`), { keys: 0, meta: null }, 'nothing of config.json is left in Cache Storage');
    const pages = server.log.filter((r) => r.path === '/api/models/git-org/gemma4-tiny-agent/tree/main').map((r) => r.cursor);
    const entries = hubListing(dir).length;
    assert.deepEqual(pages, Array.from({ length: Math.ceil(entries / 2) }, (_, i) => i * 2), 'every page of the listing was read once, in order');

    // Served intact: verified, and with every page read, no file is unverified.
    server.options.corrupt.clear();
    await frame.click('[data-testid="gg-error"] [data-action="dismiss"]').catch(() => {});
    await sendMessage(frame, 'Hello again');
    await until(async () => (await modelStatus(frame)) === 'ready', { timeout: 300000, interval: 250, what: 'the model to load' });
    const sha = crypto.createHash('sha256').update(config).digest('hex');
    assert.equal((await cached(frame, `${base}/config.json`)).meta.sha256, sha);
    assert.equal(await frame.$('[data-testid="gg-model-unverified"]'), null, 'every file was verified');
    await frame.click('[data-testid="gg-stop"]').catch(() => {});
    await page.close();
  } finally {
    server.options.corrupt.clear();
    server.options.listingPage = 0;
    await ext.sw.evaluate(() => chrome.storage.sync.set({ settings: {} }));
  }
});
