// The in-page host end to end: Escape closes the panel and gives the focus back to the page
// (without the page seeing the key), the launcher is dragged or Alt+arrow-moved to a corner that
// is remembered, disabled hosts get no overlay and come back without a reload, settings
// changed in one tab show at once in another tab's panel, settings in the old format are
// migrated, and a change that cannot be stored is shown. All UI interaction goes through the
// real closed shadow root (DevTools protocol with pierce) and the overlay's iframe.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, launchExtension, until, Pierce } from './harness.mjs';

let server, ext;

before(async () => {
  server = await startServer();
  ext = await launchExtension(process.env.GG_EXT_DEV);
});
after(async () => { await ext?.close(); await server?.close(); });

const setStored = (area, items) => ext.sw.evaluate(([a, i]) => chrome.storage[a].set(i), [area, items]);
const getStored = (area, key) => ext.sw.evaluate(async ([a, k]) => (await chrome.storage[a].get(k))[k], [area, key]);

/** A new tab on `path` whose page records every key event it can see (capture phase). */
async function openPage(path = '/basic.html', base = server.url) {
  const page = await ext.context.newPage();
  await page.addInitScript(() => {
    window.__seen = [];
    for (const target of [window, document]) {
      for (const type of ['keydown', 'keyup', 'keypress', 'input']) {
        target.addEventListener(type, (e) => window.__seen.push(`${type}:${e.key ?? ''}`), true);
      }
    }
  });
  await page.goto(`${base}${path}`);
  await page.bringToFront();
  const pierce = await Pierce.open(page);
  return { page, pierce };
}

async function launcherOf(pierce) {
  return until(() => pierce.byTestId('gg-launcher'), { what: 'launcher' });
}

async function openPanel(page, pierce) {
  await pierce.click(await launcherOf(pierce));
  const frame = await until(() => page.frames().find((f) => f.url().endsWith('/overlay/overlay.html')), { what: 'overlay frame' });
  await frame.waitForSelector('[data-testid="gg-input"]', { timeout: 20000 });
  return frame;
}

const expanded = async (pierce) => Pierce.attrs(await launcherOf(pierce))['aria-expanded'];
const hostPresent = (page) => page.evaluate(() => document.querySelector('gemma-gem-host') !== null);

test('the overlay page is styled by the component kit and fills its frame; the message log scrolls, not the page', async () => {
  const { page, pierce } = await openPage();
  const frame = await openPanel(page, pierce);
  const facts = await frame.evaluate(() => {
    const style = (sel) => { const e = document.querySelector(sel); return e && getComputedStyle(e); };
    const panel = document.querySelector('[data-testid="gg-panel"]').getBoundingClientRect();
    return {
      sheets: document.styleSheets.length,
      root: document.querySelector('.gg-root')?.dataset.theme ?? null,
      panelDisplay: style('[data-testid="gg-panel"]').display,
      logOverflow: style('.gg-log').overflowY,
      bodyMargin: style('body').margin,
      panel: [panel.width, panel.height],
      viewport: [innerWidth, innerHeight],
      pageScrolls: document.scrollingElement.scrollHeight > innerHeight,
    };
  });
  assert.ok(facts.sheets >= 2, `the kit's style sheets are in the page: ${JSON.stringify(facts)}`);
  assert.equal(facts.root, 'auto');
  assert.equal(facts.panelDisplay, 'flex');
  assert.equal(facts.logOverflow, 'auto');
  assert.equal(facts.bodyMargin, '0px');
  assert.deepEqual(facts.panel, facts.viewport, 'the panel fills the frame');
  assert.equal(facts.pageScrolls, false);
  await page.close();
});

test('Escape in the overlay closes the panel and gives the focus back to the page element that had it', async () => {
  const { page, pierce } = await openPage();
  await page.focus('#go');
  const frame = await openPanel(page, pierce);
  // Opening moved the focus into the overlay's message box.
  await until(() => frame.evaluate(() => document.activeElement?.dataset?.testid === 'gg-input'), { what: 'focus in the message box' });
  assert.equal(await page.evaluate(() => document.activeElement.tagName), 'GEMMA-GEM-HOST');
  await page.keyboard.type('draft');
  await page.keyboard.press('Escape');
  await until(async () => (await expanded(pierce)) === 'false', { what: 'the panel to close' });
  const frameNode = await pierce.byTestId('gg-panel-frame');
  assert.ok('hidden' in Pierce.attrs(frameNode), 'the iframe is hidden');
  await until(() => page.evaluate(() => document.activeElement?.id === 'go'), { what: 'focus back on the page button' });
  // The page saw none of it: not the typing, not the Escape (the overlay closes on the key's
  // release, so its keyup cannot land on the page element that gets the focus back), also a
  // moment later.
  assert.deepEqual(await page.evaluate(() => window.__seen), []);
  await page.waitForTimeout(300);
  assert.deepEqual(await page.evaluate(() => window.__seen), []);
  // Reopening keeps the draft (the overlay page stays loaded).
  await pierce.click(await launcherOf(pierce));
  await until(async () => (await expanded(pierce)) === 'true', { what: 'the panel to reopen' });
  assert.equal(await frame.inputValue('[data-testid="gg-input"]'), 'draft');
  // The overlay's close button does the same as Escape.
  await frame.click('[data-testid="gg-close"]');
  await until(async () => (await expanded(pierce)) === 'false', { what: 'the close button to close the panel' });
  await page.close();
});

test('Escape on the launcher closes the panel; with nothing focused before, the focus goes to the launcher', async () => {
  const { page, pierce } = await openPage();
  await openPanel(page, pierce);
  const launcher = await launcherOf(pierce);
  await pierce.cdp.send('DOM.focus', { backendNodeId: launcher.backendNodeId });
  await page.keyboard.press('Escape');
  await until(async () => (await expanded(pierce)) === 'false', { what: 'the panel to close' });
  // The closed root hides which element inside it has the focus; the host has it.
  assert.equal(await page.evaluate(() => document.activeElement.tagName), 'GEMMA-GEM-HOST');
  await page.close();
});

test('the launcher is dragged to another corner, which every page then uses; Alt+arrow keys move it too', async () => {
  const { page, pierce } = await openPage();
  const launcher = await launcherOf(pierce);
  const start = await pierce.box(launcher);
  assert.ok(start.x > 800 && start.y > 600, `starts bottom right: ${JSON.stringify(start)}`);
  const from = { x: start.x + start.width / 2, y: start.y + start.height / 2 };
  const mouse = (type, x, y) => pierce.cdp.send('Input.dispatchMouseEvent', { type, x, y, button: 'left', clickCount: 1 });
  await mouse('mousePressed', from.x, from.y);
  for (let i = 1; i <= 10; i++) {
    await mouse('mouseMoved', from.x + (80 - from.x) * (i / 10), from.y + (90 - from.y) * (i / 10));
  }
  await mouse('mouseReleased', 80, 90);
  const moved = await until(async () => {
    const b = await pierce.box(await launcherOf(pierce));
    return b.x < 100 && b.y < 100 && b;
  }, { what: 'the launcher in the top-left corner' });
  assert.ok(moved.width >= 40, 'still the same launcher');
  // A drag is not a click: the panel stayed closed.
  assert.equal(await expanded(pierce), 'false');
  assert.equal(await getStored('local', 'launcherCorner'), 'top-left');

  // Another page starts in that corner, and its panel opens below the launcher.
  const second = await openPage();
  const there = await pierce.box(await launcherOf(second.pierce));
  assert.ok(there.x < 100 && there.y < 100, `new page uses the corner: ${JSON.stringify(there)}`);
  await openPanel(second.page, second.pierce);
  const frameBox = await second.pierce.box(await second.pierce.byTestId('gg-panel-frame'));
  const launcherBox = await second.pierce.box(await launcherOf(second.pierce));
  assert.ok(frameBox.y > launcherBox.y, `panel below the launcher: ${JSON.stringify({ frameBox, launcherBox })}`);
  await second.page.close();

  // Keyboard: Alt+ArrowDown on the focused launcher moves it to the bottom-left corner; the
  // other open page follows (the corner is shared through storage).
  await page.bringToFront();
  await pierce.cdp.send('DOM.focus', { backendNodeId: (await launcherOf(pierce)).backendNodeId });
  await page.keyboard.press('Alt+ArrowDown');
  await until(async () => (await getStored('local', 'launcherCorner')) === 'bottom-left', { what: 'the corner saved' });
  const after = await until(async () => {
    const b = await pierce.box(await launcherOf(pierce));
    return b.x < 100 && b.y > 600 && b;
  }, { what: 'the launcher in the bottom-left corner' });
  assert.ok(after);
  await setStored('local', { launcherCorner: 'bottom-right' });
  await page.close();
});

test('a disabled host gets no overlay, "Disable on this site" removes it live, and re-enabling brings it back without a reload', async () => {
  await setStored('sync', { settings: {} });
  const a = await openPage();
  const frame = await openPanel(a.page, a.pierce);
  await frame.click('[data-testid="gg-settings-open"]');
  await frame.click('[data-testid="gg-disable-site"]');
  await until(async () => !(await hostPresent(a.page)), { what: 'the host to leave the disabled site' });
  // Stored by the service worker in chrome.storage.local, one key per host; not synced.
  assert.equal(await getStored('local', 'disabled:127.0.0.1'), true);
  assert.equal((await getStored('sync', 'settings')).disabledHosts, undefined);
  // The page keeps its focus and its own content.
  assert.equal(await a.page.evaluate(() => document.querySelector('#go') !== null), true);

  const b = await openPage();
  await b.page.waitForTimeout(1500); // the content script has long run by now
  assert.equal(await hostPresent(b.page), false, 'no host on a new page of the disabled site');

  await ext.sw.evaluate(() => chrome.storage.local.remove('disabled:127.0.0.1'));
  for (const p of [a.page, b.page]) {
    await until(() => hostPresent(p), { what: 'the host back without a reload' });
  }
  const launcher = await launcherOf(b.pierce);
  assert.equal(Pierce.attrs(launcher)['aria-label'], 'Open Gemma Gem');
  await a.page.close();
  await b.page.close();
});

test('settings changed in one tab show at once in the other tabs, and are stored under "settings"', async () => {
  await setStored('sync', { settings: {} });
  const a = await openPage();
  const b = await openPage();
  const frameB = await openPanel(b.page, b.pierce);
  await frameB.click('[data-testid="gg-settings-open"]');
  assert.equal(await frameB.isChecked('[data-testid="gg-setting-thinking"]'), false);
  await a.page.bringToFront();
  const frameA = await openPanel(a.page, a.pierce);
  await frameA.click('[data-testid="gg-settings-open"]');
  await frameA.click('[data-testid="gg-setting-thinking"]');
  await b.page.bringToFront();
  await until(() => frameB.isChecked('[data-testid="gg-setting-thinking"]'), { what: 'the other tab to show thinking on' });
  const stored = await getStored('sync', 'settings');
  assert.equal(stored.thinking, true);
  assert.equal(stored.modelSize, 'E2B');
  assert.equal(stored.maxIterations, 10);
  assert.equal(stored.constrainToolCalls, true);
  assert.deepEqual(Object.keys(stored).sort(), ['confirmedHttpMirror', 'constrainToolCalls', 'imageTokens', 'maxIterations', 'modelSize', 'modelSource', 'temperature', 'thinking']);
  await a.page.close();
  await b.page.close();
});

test('settings in the old format (disabled hosts and permissions inside the synced item) are migrated once, and the panel shows and edits them', async () => {
  const localhost = server.url.replace('127.0.0.1', 'localhost');
  const shop = `${localhost}`;
  // What an older version stored: everything in one synced item.
  await setStored('sync', { settings: {
    thinking: true,
    maxIterations: 7,
    disabledHosts: ['127.0.0.1'],
    sitePermissions: { sites: { [shop]: { disabled: false, always_allowed: ['submit_form', 'run_javascript', { consequential: 'purchase' }] } } },
  } });
  // The service worker migrates it as soon as it changes (and at every start).
  const migrated = await until(async () => {
    const s = await getStored('sync', 'settings');
    return s && s.disabledHosts === undefined && s.sitePermissions === undefined && s;
  }, { what: 'the synced item rewritten without the per-site data' });
  assert.equal(migrated.thinking, true);
  assert.equal(migrated.maxIterations, 7);
  assert.equal(await getStored('local', 'disabled:127.0.0.1'), true);
  assert.deepEqual(await getStored('local', `site:${shop}`), { alwaysAllowed: ['submit_form', { consequential: 'purchase' }] },
    'run_javascript is never kept for good');

  // The disabled host has no panel; on the other origin the panel shows what was migrated.
  const off = await openPage();
  await off.page.waitForTimeout(1500);
  assert.equal(await hostPresent(off.page), false, 'no host on the migrated disabled host');
  const on = await openPage('/basic.html', localhost);
  const frame = await openPanel(on.page, on.pierce);
  await frame.click('[data-testid="gg-settings-open"]');
  assert.equal(await frame.isChecked('[data-testid="gg-setting-thinking"]'), true);
  const rows = () => frame.$$eval('[data-testid="gg-permission-remove"]', (els) => els.map((e) => e.getAttribute('aria-label')));
  await until(async () => (await rows()).length === 2, { what: 'the two migrated permissions listed' });
  assert.ok((await rows()).some((r) => r.includes('submit forms') && r.includes(shop)), JSON.stringify(await rows()));
  assert.ok(await frame.$eval('[data-testid="gg-settings"]', (e) => e.innerText.includes('127.0.0.1')), 'the disabled host listed');

  // Forgetting a row: the service worker rewrites that site's key.
  await frame.click('[data-testid="gg-permission-remove"][aria-label*="submit forms"]');
  await until(async () => JSON.stringify(await getStored('local', `site:${shop}`)) === JSON.stringify({ alwaysAllowed: [{ consequential: 'purchase' }] }),
    { what: 'the permission withdrawn in storage' });
  await frame.click('[data-testid="gg-permission-remove"]');
  await until(async () => (await getStored('local', `site:${shop}`)) === undefined, { what: 'the site key removed with its last permission' });
  // Turned back on from the panel of another site.
  await frame.click('[data-testid="gg-site-remove"]');
  await until(async () => (await getStored('local', 'disabled:127.0.0.1')) === undefined, { what: 'the host turned back on' });
  await until(() => hostPresent(off.page), { what: 'the host back without a reload' });
  await setStored('sync', { settings: {} });
  await off.page.close();
  await on.page.close();
});

test('a change that cannot be stored is shown in the panel, which goes back to what is stored', async () => {
  await setStored('sync', { settings: {} });
  const { page, pierce } = await openPage();
  const frame = await openPanel(page, pierce);
  await frame.click('[data-testid="gg-settings-open"]');
  assert.equal(await frame.isChecked('[data-testid="gg-setting-thinking"]'), false);
  // chrome.storage.sync refuses writes (its quota, say): only the service worker writes it.
  await ext.sw.evaluate(() => {
    globalThis.__ggRealSyncSet = chrome.storage.sync.set;
    chrome.storage.sync.set = () => Promise.reject(new Error('QUOTA_BYTES_PER_ITEM quota exceeded'));
  });
  try {
    await frame.click('[data-testid="gg-setting-thinking"]');
    const banner = await until(() => frame.$('[data-testid="gg-error"][data-kind="save_failed"]'), { what: 'the save error in the panel' });
    const text = await banner.innerText();
    assert.match(text, /Your change was not saved/);
    assert.match(text, /could not save the settings: .*QUOTA_BYTES_PER_ITEM quota exceeded/);
    await until(async () => !(await frame.isChecked('[data-testid="gg-setting-thinking"]')), { what: 'the checkbox back to what is stored' });
    assert.equal((await getStored('sync', 'settings')).thinking, undefined);
  } finally {
    await ext.sw.evaluate(() => { chrome.storage.sync.set = globalThis.__ggRealSyncSet; });
  }
  await page.close();
});

test('the keyboard command (Alt+Shift+G) opens and closes the panel of the tab it is used in', async () => {
  const commands = await ext.sw.evaluate(() => chrome.commands.getAll());
  const toggle = commands.find((c) => c.name === 'toggle-overlay');
  assert.ok(toggle, JSON.stringify(commands));
  assert.match(toggle.description, /Open or close Gemma Gem/);
  assert.equal(toggle.shortcut, 'Alt+Shift+G');
  const { page, pierce } = await openPage();
  await page.focus('#go');
  await launcherOf(pierce);
  // Chrome calls the onCommand listener with the active tab; synthetic key presses do not reach
  // browser shortcuts, so the test calls that same listener.
  const command = () => ext.sw.evaluate(async () => {
    const [tab] = await chrome.tabs.query({ active: true, lastFocusedWindow: true });
    await globalThis.ggOnCommand('toggle-overlay', tab);
  });
  await command();
  await until(async () => (await expanded(pierce)) === 'true', { what: 'the command to open the panel' });
  const frame = await until(() => page.frames().find((f) => f.url().endsWith('/overlay/overlay.html')), { what: 'overlay frame' });
  await until(() => frame.evaluate(() => document.activeElement?.dataset?.testid === 'gg-input'), { what: 'focus in the message box' });
  await command();
  await until(async () => (await expanded(pierce)) === 'false', { what: 'the command to close the panel' });
  await until(() => page.evaluate(() => document.activeElement?.id === 'go'), { what: 'focus back on the page' });
  await page.close();
});
