// The component playground in headless Chromium: every specimen renders without errors, its
// screenshot (light and dark side by side) is written for people to look at — `cargo xtask test`
// keeps them in docs/screenshots/ — and the components are pixel-identical on a page whose global
// CSS tries to restyle everything.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { CHROMIUM, startStaticServer } from './harness.mjs';

const SITE = process.env.GG_DEMO_SITE;
const OUT = process.env.GG_SCREENSHOTS ?? fs.mkdtempSync(path.join(os.tmpdir(), 'gg-shots-'));
let server, browser;

before(async () => {
  assert.ok(SITE && fs.existsSync(path.join(SITE, 'playground.html')), 'GG_DEMO_SITE must point at the built demo site (dist/demo-site)');
  server = await startStaticServer(path.resolve(SITE));
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox', '--hide-scrollbars'] });
  fs.mkdirSync(OUT, { recursive: true });
});
after(async () => { await browser?.close(); await server?.close(); });

async function open(query) {
  // Reduced motion: the components then stop their spinners and cursors (Playwright's own
  // "animations: disabled" cannot reach into closed shadow roots), so pictures are deterministic.
  const page = await browser.newPage({ viewport: { width: 1060, height: 720 }, deviceScaleFactor: 1, reducedMotion: 'reduce' });
  const errors = [];
  // Failed loads are reported by URL below (the console line has none); browsers ask for a
  // favicon the demo site does not have.
  page.on('console', (m) => { if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) errors.push(m.text()); });
  page.on('response', (r) => { if (r.status() >= 400 && !r.url().endsWith('/favicon.ico')) errors.push(`${r.status()} ${r.url()}`); });
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(`${server.url}/playground.html?${query}`);
  await page.waitForSelector('[data-specimen]', { timeout: 30000 });
  await page.evaluate(() => document.fonts.ready);
  await page.waitForTimeout(400); // streaming cursors and transitions settle
  return { page, errors };
}

/** Screenshots of the components' hosts (`<gemma-gem>`, each with a closed shadow root), each
 * put in the same box at the same whole-pixel place in both pages (the hostile sheet pads and
 * shifts the page; subpixel offsets would change antialiasing, not style). */
async function hostShots(page) {
  const count = await page.$$eval('gemma-gem', (hs) => hs.length);
  const shots = [];
  for (let i = 0; i < count; i++) {
    const height = await page.evaluate((k) => {
      // Nothing else paints: transparent corners show the same (white) canvas in both pages.
      document.documentElement.style.setProperty('background', '#fff', 'important');
      document.body.style.setProperty('visibility', 'hidden', 'important');
      document.querySelectorAll('gemma-gem').forEach((h, n) => {
        const set = (prop, value) => h.style.setProperty(prop, value, 'important');
        set('visibility', n === k ? 'visible' : 'hidden');
        if (n === k) { set('position', 'fixed'); set('left', '0px'); set('top', '0px'); set('width', '400px'); set('z-index', '2147483647'); }
      });
      return Math.ceil(document.querySelectorAll('gemma-gem')[k].getBoundingClientRect().height);
    }, i);
    await page.waitForTimeout(300);
    shots.push(await page.screenshot({ clip: { x: 0, y: 0, width: 400, height: Math.min(height, 700) }, animations: 'disabled' }));
    await page.evaluate((k) => { const h = document.querySelectorAll('gemma-gem')[k]; for (const p of ['position', 'left', 'top', 'width', 'z-index']) h.style.removeProperty(p); }, i);
  }
  return shots;
}

test('every specimen renders without errors, and its screenshot is kept', async () => {
  const { page, errors } = await open('');
  const ids = await page.$$eval('[data-specimen]', (els) => els.map((e) => e.dataset.specimen));
  await page.close();
  assert.ok(ids.length >= 12, `specimens: ${ids}`);
  assert.deepEqual(errors, []);
  for (const id of ids) {
    const { page: p, errors: errs } = await open(`only=${id}`);
    const section = await p.$(`[data-specimen="${id}"]`);
    const box = await section.boundingBox();
    assert.ok(box.width > 300 && box.height > 60, `${id} has a size: ${JSON.stringify(box)}`);
    const hosts = await p.$$('gemma-gem');
    assert.ok(hosts.length >= 2, `${id}: light and dark hosts`);
    // The components live in closed roots: the page cannot see into them.
    assert.equal(await p.evaluate(() => [...document.querySelectorAll('gemma-gem')].some((h) => h.shadowRoot)), false);
    const png = await p.screenshot({ fullPage: true, animations: 'disabled' });
    assert.ok(png.length > 5000, `${id}: a real picture`);
    fs.writeFileSync(path.join(OUT, `${id}.png`), png);
    assert.deepEqual(errs, [], `${id}: no console errors`);
    await p.close();
  }
});

test('hostile global CSS changes nothing inside the components', async () => {
  for (const id of ['tools', 'settings', 'launcher']) {
    const plain = await open(`only=${id}`);
    const hostile = await open(`only=${id}&hostile=1`);
    // The page around them is wrecked (the hostile sheet really applies)...
    const bodyFont = (p) => p.evaluate(() => getComputedStyle(document.body).fontFamily);
    assert.notEqual(await bodyFont(hostile.page), await bodyFont(plain.page), 'the hostile CSS applies to the page');
    if (id === 'tools') {
      fs.writeFileSync(path.join(OUT, 'tools-hostile-css.png'), await hostile.page.screenshot({ fullPage: true, animations: 'disabled' }));
    }
    // ...the components are the same, pixel for pixel.
    const a = await hostShots(plain.page);
    const b = await hostShots(hostile.page);
    assert.equal(a.length, b.length);
    a.forEach((png, i) => assert.ok(png.equals(b[i]), `${id}: host ${i} looks the same under hostile CSS`));
    await plain.page.close();
    await hostile.page.close();
  }
});
