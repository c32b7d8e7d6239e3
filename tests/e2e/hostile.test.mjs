// Hostile pages against the agent, end to end with the scripted model of the dev build
// (`modelSource` = `script:URL`, tests/pages/scripts/hostile-*.json), on plain and strict-CSP
// pages and on two local origins (the same server as http://127.0.0.1:PORT and
// http://localhost:PORT). Every check is about what must NOT happen: a call of a turn running on
// a page the user did not ask about, or a sensitive action without the user's approval.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, launchExtension, until, openOverlay, sendMessage } from './harness.mjs';

let server, ext;

before(async () => {
  server = await startServer();
  ext = await launchExtension(process.env.GG_EXT_DEV);
});
after(async () => { await ext?.close(); await server?.close(); });

/** The other local origin of the fixture server. */
const otherOrigin = () => server.url.replace('127.0.0.1', 'localhost');

/** Uses `tests/pages/scripts/NAME.json`; `run` makes the URL unique, so the script starts over. */
async function useScript(name, run) {
  const modelSource = `script:${server.url}/scripts/${name}.json?run=${run}`;
  await ext.sw.evaluate((s) => chrome.storage.sync.set({ settings: { modelSource: s } }), modelSource);
}

const answers = (frame) =>
  frame.$$eval('[data-testid="gg-message"][data-role="assistant"]', (els) => els.map((e) => e.innerText.trim()));

for (const prefix of ['', '/strict-csp']) {
  const kind = prefix ? 'strict-CSP' : 'plain';
  test(`a page that navigates itself mid-turn ends the turn: no call runs on the second origin (${kind})`, async () => {
    await useScript('hostile-nav', kind);
    const hitsBefore = server.log.filter((e) => e.path === '/hit').length;
    const { page } = await openOverlay(ext, `${server.url}${prefix}/hostile-nav/start.html`);
    const frame = page.frames().find((f) => f.url().endsWith('/overlay/overlay.html'));
    await sendMessage(frame, 'Press Next');
    // The first click sends the tab to the other origin.
    await page.waitForURL((url) => url.origin === otherOrigin(), { timeout: 30000 });
    await page.waitForFunction(() => document.getElementById('next') !== null, null, { timeout: 20000 });
    // The stopped turn is over: the overlay opened on the new page says why.
    const again = await openOverlay(ext, page.url(), page);
    const said = await until(async () => (await answers(again.frame)).find((a) => /the page changed — the task was stopped/i.test(a)),
      { timeout: 30000, what: 'the page-changed notice' });
    assert.doesNotMatch(said, /pressed Next on both pages/);
    // Give a late call every chance to land, then check that none did.
    await new Promise((r) => setTimeout(r, 1500));
    assert.equal(await page.evaluate(() => document.body.dataset.clicked ?? null), null, 'nothing was clicked on the second origin');
    assert.equal(server.log.filter((e) => e.path === '/hit').length, hitsBefore, 'the second origin never saw a click');
    const steps = await again.frame.$$eval('[data-testid="gg-tool-step"]', (els) => els.map((e) => e.dataset.tool));
    assert.ok(steps.length <= 2, `at most the first click (and one refused call) of the turn: ${steps}`);
    await page.close();
  });
}
