// Foundation: the built extension loads in headless Chromium, the service worker runs, the
// launcher sits in a closed shadow root on every page, the offscreen document gets a WebGPU
// adapter, hostile page CSS cannot restyle the launcher, and the release build loads too.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, launchExtension, until, Pierce } from './harness.mjs';

const DEV = process.env.GG_EXT_DEV;
const RELEASE = process.env.GG_EXT_RELEASE;
let server, ext;

before(async () => {
  assert.ok(DEV, 'GG_EXT_DEV must point at dist/chrome-mv3-dev (run through `cargo xtask test`)');
  server = await startServer();
  ext = await launchExtension(DEV);
});
after(async () => { await ext?.close(); await server?.close(); });

async function launcherPage(url) {
  const page = await ext.context.newPage();
  const errors = [];
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  await page.goto(url);
  await page.waitForFunction(() => document.querySelector('gemma-gem-host') !== null, null, { timeout: 20000 });
  const pierce = await Pierce.open(page);
  const launcher = await until(() => pierce.byTestId('gg-launcher'), { what: 'the launcher inside the shadow root' });
  return { page, pierce, launcher, errors };
}

test('the service worker of the dev build is running', async () => {
  assert.match(ext.sw.url(), /^chrome-extension:\/\/[a-p]{32}\/background\.js$/);
  const manifest = await ext.sw.evaluate(() => chrome.runtime.getManifest());
  assert.equal(manifest.manifest_version, 3);
  assert.equal(manifest.background.type, 'module');
});

test('the launcher is mounted inside a closed shadow root', async () => {
  const { page, pierce, launcher, errors } = await launcherPage(`${server.url}/basic.html`);
  // Page scripts cannot see into the root.
  assert.equal(await page.evaluate(() => document.querySelector('gemma-gem-host').shadowRoot), null);
  assert.equal(await page.evaluate(() => document.querySelector('[data-testid="gg-launcher"]')), null);
  // The DevTools protocol (pierce) sees a closed root holding the launcher.
  const host = await pierce.find((n) => n.nodeName === 'GEMMA-GEM-HOST');
  assert.ok(host, 'host element present');
  assert.equal(host.shadowRoots?.length, 1);
  assert.equal(host.shadowRoots[0].shadowRootType, 'closed');
  assert.equal(Pierce.attrs(launcher)['aria-label'], 'Open Gemma Gem');
  const inside = [...Pierce.walk(host.shadowRoots[0])].some((n) => n.backendNodeId === launcher.backendNodeId);
  assert.ok(inside, 'the launcher lives in the closed root');
  assert.deepEqual(errors.filter((e) => e.includes('[Gemma Gem]')), []);
  await page.close();
});

test('the offscreen document starts and reports a WebGPU adapter', async () => {
  const report = await until(
    () => ext.sw.evaluate(async () => (await chrome.storage.session.get('offscreenStatus')).offscreenStatus),
    { timeout: 60000, what: 'the offscreen adapter report' },
  );
  assert.equal(report.webgpuAvailable, true, JSON.stringify(report));
  assert.equal(report.error, null, JSON.stringify(report));
  assert.ok(report.adapter.vendor || report.adapter.architecture, `adapter described: ${JSON.stringify(report.adapter)}`);
  assert.ok(report.adapter.maxStorageBufferBindingSize >= 128 * 1024 * 1024);
  const contexts = await ext.sw.evaluate(() => chrome.runtime.getContexts({ contextTypes: ['OFFSCREEN_DOCUMENT'] }));
  assert.equal(contexts.length, 1);
  assert.match(contexts[0].documentUrl, /\/offscreen\/offscreen\.html$/);
});

test('clicking the launcher opens the overlay page in an iframe', async () => {
  const { page, pierce, launcher } = await launcherPage(`${server.url}/basic.html`);
  await pierce.click(launcher);
  const frame = await until(() => page.frames().find((f) => f.url().endsWith('/overlay/overlay.html')), { what: 'overlay frame' });
  await frame.waitForSelector('[data-testid="gg-panel"]', { timeout: 20000 });
  const opened = await pierce.byTestId('gg-launcher');
  assert.equal(Pierce.attrs(opened)['aria-expanded'], 'true');
  await page.close();
});

test('hostile page CSS does not change how the launcher looks', async () => {
  const shot = async (url) => {
    const { page, pierce, launcher } = await launcherPage(url);
    const box = await pierce.box(launcher);
    await page.waitForTimeout(300); // let the hover/transition state settle
    const png = await page.screenshot({ clip: box });
    await page.close();
    return { box, png };
  };
  const plain = await shot(`${server.url}/basic.html`);
  const hostile = await shot(`${server.url}/hostile.html`);
  assert.deepEqual(hostile.box, plain.box, 'same place and size');
  assert.ok(plain.box.width >= 40 && plain.box.height >= 40, `launcher is visible: ${JSON.stringify(plain.box)}`);
  assert.ok(hostile.png.equals(plain.png), 'pixel-identical launcher on the hostile page');
});

test('the release build loads in Chromium without errors', async () => {
  assert.ok(RELEASE, 'GG_EXT_RELEASE must point at dist/chrome-mv3');
  const rel = await launchExtension(RELEASE);
  try {
    const manifest = await rel.sw.evaluate(() => chrome.runtime.getManifest());
    assert.equal(manifest.manifest_version, 3);
    assert.equal(manifest.name, 'Gemma Gem');
    // The release wasm (wasm-opt -Oz) instantiates: the service worker brings the offscreen
    // document up and it reports the adapter, as the dev build does.
    const report = await until(
      () => rel.sw.evaluate(async () => (await chrome.storage.session.get('offscreenStatus')).offscreenStatus),
      { timeout: 60000, what: 'the release offscreen adapter report' },
    );
    assert.equal(report.webgpuAvailable, true, JSON.stringify(report));
    assert.equal(report.error, null, JSON.stringify(report));
    const page = await rel.context.newPage();
    const errors = [];
    page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
    await page.goto(`${server.url}/basic.html`);
    await page.waitForFunction(() => document.querySelector('gemma-gem-host') !== null, null, { timeout: 20000 });
    assert.deepEqual(errors.filter((e) => e.includes('[Gemma Gem]') || e.includes('chrome-extension://')), []);
  } finally {
    await rel.close();
  }
});

test('on a page whose CSP forbids WebAssembly the launcher appears and the overlay opens', async () => {
  const { page, pierce, launcher, errors } = await launcherPage(`${server.url}/strict-csp/basic.html`);
  // The page really forbids wasm for its own scripts.
  const pageWasm = await page.evaluate(async () => {
    try { await WebAssembly.instantiate(new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0])); return 'allowed'; } catch (e) { return 'blocked'; }
  });
  assert.equal(pageWasm, 'blocked');
  await pierce.click(launcher);
  const frame = await until(() => page.frames().find((f) => f.url().endsWith('/overlay/overlay.html')), { what: 'overlay frame' });
  await frame.waitForSelector('[data-testid="gg-panel"]', { timeout: 20000 });
  assert.deepEqual(errors.filter((e) => e.includes('[Gemma Gem]')), []);
  await page.close();
});
