// The embeddable widget (issue 32), as a visitor of a site that embeds it: headless Chromium with
// no extension, the development build of dist/widget-dev/ served under /gg-widget/, on a plain
// page and on the same page served with the CSP the README tells sites to allow
// (`default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; worker-src 'self'`).
// The widget's UI is in a closed shadow root: it is reached through the DevTools protocol
// (DOM.getDocument with pierce), never through a test-only open root.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { startServer, launchBrowser, Pierce, until, repo } from './harness.mjs';

const WIDGET = process.env.GG_WIDGET_DEV;
const SHOTS = process.env.GG_SCREENSHOTS;
let server, browser;
let opened = 0;

before(async () => {
  assert.ok(WIDGET, 'GG_WIDGET_DEV must point at dist/widget-dev (run through `cargo xtask test`)');
  assert.ok(fs.existsSync(path.join(WIDGET, 'gemma-gem-widget.js')), `${WIDGET} has no gemma-gem-widget.js: run \`cargo xtask build\``);
  server = await startServer({ widget: WIDGET });
  browser = await launchBrowser();
});
after(async () => {
  await browser?.close();
  await server?.close();
});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Opens the test page with `attrs` as the widget's attributes (`csp`: served with the widget's
 * CSP). Returns the page, a piercing DevTools session, and the console's messages. */
async function openWidget(attrs, { csp = false, hostile = false } = {}) {
  opened += 1;
  const params = new URLSearchParams({ ...attrs, n: String(opened) });
  if (hostile) params.set('hostile', '1');
  const page = await browser.context.newPage();
  const console = [];
  page.on('console', (m) => console.push(`${m.type()}: ${m.text()}`));
  page.on('pageerror', (e) => console.push(`pageerror: ${e.message}`));
  await page.goto(`${server.url}${csp ? '/widget-csp' : ''}/widget/page.html?${params}`);
  await page.waitForFunction(() => customElements.get('gemma-gem-widget') !== undefined, null, { timeout: 30000 });
  const pierce = await Pierce.open(page);
  await until(() => pierce.byTestId('gg-launcher'), { what: 'the widget\'s launcher', timeout: 30000 });
  return { page, pierce, console };
}

async function openPanel(pierce) {
  const launcher = await pierce.byTestId('gg-launcher');
  await pierce.click(launcher);
  return until(() => pierce.byTestId('gg-input'), { what: 'the message box' });
}

/** Types `text` into the widget's message box (closed root: focus through DevTools) and sends it. */
async function sendFromUi(page, pierce, text) {
  const input = await openPanel(pierce);
  await pierce.cdp.send('DOM.focus', { backendNodeId: input.backendNodeId });
  await pierce.cdp.send('Input.insertText', { text });
  await page.keyboard.press('Enter');
}

const events = (page) => page.evaluate(() => window.ggEvents);
const answer = (page) => until(async () => (await events(page)).find((e) => e.type === 'gg-answer' || e.type === 'gg-error'), { what: 'the end of the turn', timeout: 120000 });

/** Approves the pending call of `tool` once its buttons are armed. */
async function approve(pierce, tool) {
  await until(() => pierce.find((n, a) => a['data-testid'] === 'gg-tool-step' && a['data-tool'] === tool && a['data-state'] === 'awaiting_approval'), { what: `approval of ${tool}`, timeout: 60000 });
  await until(() => pierce.find((n, a) => a['data-testid'] === 'gg-approval' && a['data-arming'] === 'armed'), { what: 'armed approval buttons' });
  await pierce.click(await pierce.byTestId('gg-approve-once'));
}

for (const csp of [false, true]) {
  const where = csp ? 'with the widget\'s CSP' : 'on a plain page';

  test(`${where}: a scripted turn snapshots the page, types into a React-controlled input and clicks an approved button; events fire in order`, async () => {
    const { page, pierce, console } = await openWidget({ 'model-source': 'script:/scripts/widget-act.json', scope: '#main' }, { csp });
    await sendFromUi(page, pierce, 'Order a gem for Ada');
    await approve(pierce, 'click_element');
    const end = await answer(page);
    assert.equal(end.type, 'gg-answer', `${JSON.stringify(end)}\n${console.join('\n')}`);
    assert.equal(end.detail.text, 'Your order for **Ada** is sent.');
    // The panel shows the answer's Markdown, which the worker parsed (the page links no parser).
    const strongAda = (n) => n.nodeName === 'STRONG' && (n.children ?? []).some((c) => c.nodeValue === 'Ada');
    await until(async () => [...Pierce.walk(await pierce.tree())]
      .filter((n) => Pierce.attrs(n).class === 'gg-md')
      .some((md) => [...Pierce.walk(md)].some(strongAda)), { what: 'the answer\'s Markdown in the panel' });
    assert.equal(await page.inputValue('#name'), 'Ada');
    assert.equal(await page.textContent('#preview'), 'Order for Ada', 'the app\'s own state took the typed value');
    assert.deepEqual(await page.evaluate(() => window.clicks), ['send']);
    // The events, in order: text, then each tool's start and end, then the answer.
    const seq = (await events(page)).filter((e) => e.type !== 'gg-status').map((e) => e.type === 'gg-tool' ? `tool:${e.detail.phase}:${e.detail.name ?? ''}` : e.type);
    const squashed = seq.filter((t, i) => t !== 'gg-token' || seq[i - 1] !== 'gg-token');
    assert.deepEqual(squashed, [
      'gg-token', 'tool:start:snapshot_page', 'tool:end:', 'tool:start:type_text', 'tool:end:',
      'tool:start:click_element', 'tool:approval:click_element', 'tool:end:', 'gg-token', 'gg-answer',
    ], JSON.stringify(seq));
    const ends = (await events(page)).filter((e) => e.type === 'gg-tool' && e.detail.phase === 'end');
    assert.ok(ends.every((e) => e.detail.ok), JSON.stringify(ends));
    assert.ok(!console.some((l) => /Content Security Policy|Refused to/.test(l)), `CSP violations:\n${console.join('\n')}`);
    await page.close();
  });
}

test('scope keeps every tool inside its subtree', async () => {
  const { page } = await openWidget({ 'model-source': 'script:/scripts/widget-outside.json', scope: '#main' });
  await page.evaluate(() => document.querySelector('gemma-gem-widget').ask('Delete my account'));
  const end = await answer(page);
  assert.equal(end.type, 'gg-answer');
  const tools = (await events(page)).filter((e) => e.type === 'gg-tool' && e.detail.phase === 'end');
  assert.equal(tools.length, 2, JSON.stringify(tools));
  const read = JSON.stringify(tools[0].detail.result);
  assert.ok(read.includes('Order a gem'), read);
  assert.ok(!read.includes('7319'), `text outside the scope was read: ${read}`);
  assert.equal(tools[1].detail.ok, false);
  assert.match(tools[1].detail.error.message, /scope/);
  assert.deepEqual(await page.evaluate(() => window.clicks), [], 'nothing outside the scope was clicked');
  await page.close();
});

test('tools="read" refuses typing and clicking with a clear tool error', async () => {
  const { page } = await openWidget({ 'model-source': 'script:/scripts/widget-act.json', tools: 'read' });
  await page.evaluate(() => document.querySelector('gemma-gem-widget').ask('Order a gem for Ada'));
  const end = await answer(page);
  assert.equal(end.type, 'gg-answer');
  const ends = (await events(page)).filter((e) => e.type === 'gg-tool' && e.detail.phase === 'end');
  assert.equal(ends[0].detail.ok, true, 'snapshot_page is a read tool');
  for (const e of ends.slice(1)) {
    assert.equal(e.detail.ok, false);
    assert.match(e.detail.error.message, /no tool named `(type_text|click_element)`; the tools are: read_page_content, snapshot_page, scroll_page, get_page_title$/);
  }
  assert.equal(await page.inputValue('#name'), '');
  assert.deepEqual(await page.evaluate(() => window.clicks), []);
  await page.close();
});

test('stop() cancels a streaming answer; the next question is answered', async () => {
  const { page } = await openWidget({ 'model-source': 'script:/scripts/widget-long.json' });
  const asked = page.evaluate(() => document.querySelector('gemma-gem-widget').ask('Talk'));
  await until(async () => (await events(page)).filter((e) => e.type === 'gg-token').length >= 3, { what: 'streaming tokens' });
  await page.evaluate(() => document.querySelector('gemma-gem-widget').stop());
  const partial = await asked;
  assert.ok(partial.length < 300, `the answer went on after stop(): ${partial.length} characters`);
  const count = (await events(page)).filter((e) => e.type === 'gg-token').length;
  await sleep(600);
  assert.equal((await events(page)).filter((e) => e.type === 'gg-token').length, count, 'tokens kept coming');
  const next = await page.evaluate(() => document.querySelector('gemma-gem-widget').ask('Again'));
  assert.equal(next, 'Short answer after the stop.');
  await page.close();
});

test('without WebGPU the panel says what to do, ask() rejects with it, and the page keeps working', async () => {
  const plain = await launchBrowser({ webgpu: false });
  try {
    const page = await plain.context.newPage();
    await page.goto(`${server.url}/widget/page.html?model-source=/models/gemma4-tiny-agent`);
    await page.waitForFunction(() => customElements.get('gemma-gem-widget') !== undefined, null, { timeout: 30000 });
    const failed = await page.evaluate(() => document.querySelector('gemma-gem-widget').ask('Hello').then(() => null, (e) => e.message));
    assert.match(failed ?? '', /WebGPU is not available.*hardware acceleration/s);
    const pierce = await Pierce.open(page);
    await openPanel(pierce);
    const banner = await until(() => pierce.byTestId('gg-error'), { what: 'the error banner' });
    assert.ok(banner);
    const errors = await page.evaluate(() => window.ggEvents.filter((e) => e.type === 'gg-error').map((e) => e.detail.kind));
    assert.ok(errors.includes('webgpu_unavailable'), JSON.stringify(errors));
    // The page's own form still works.
    await page.fill('#name', 'Grace');
    await page.click('#send');
    assert.equal(await page.textContent('#result'), 'Ordered for Grace');
  } finally {
    await plain.close();
  }
});

test('an element removed mid-answer ends its turn and worker; put back, it answers again', async () => {
  const { page } = await openWidget({ 'model-source': 'script:/scripts/widget-long.json' });
  const asked = page.evaluate(() => document.querySelector('gemma-gem-widget').ask('Talk').then(() => 'resolved', (e) => e.message));
  await until(async () => (await events(page)).filter((e) => e.type === 'gg-token').length >= 3, { what: 'streaming tokens' });
  await page.evaluate(() => { window.gem = document.querySelector('gemma-gem-widget'); window.gem.remove(); });
  assert.match(await asked, /removed from the page/);
  await page.evaluate(() => document.body.append(window.gem));
  const again = await page.evaluate(() => window.gem.ask('Again'));
  assert.match(again, /^This answer goes on and on/, 'a new worker replays the script from its start');
  await page.close();
});

test('bad attribute values warn with the attribute and the value used', async () => {
  const { page, console } = await openWidget({ 'model-source': 'script:/scripts/hello.json', temperature: 'hot', corner: 'middle', tools: 'click_element bogus' });
  await until(() => console.filter((l) => l.startsWith('warning')).length >= 3, { what: 'warnings' });
  const warnings = console.filter((l) => l.startsWith('warning')).join('\n');
  assert.match(warnings, /temperature="hot".*using 1/);
  assert.match(warnings, /corner="middle".*using bottom-right/);
  assert.match(warnings, /tools="click_element bogus".*bogus \(no such tool\)/);
  await page.close();
});

test('hostile page CSS changes no pixel of the widget', async () => {
  const shots = [];
  for (const hostile of [false, true]) {
    const { page, pierce } = await openWidget({ 'model-source': 'script:/scripts/hello.json', greeting: 'Hello! Ask me about this page.', theme: 'light' }, { hostile });
    await openPanel(pierce);
    await sleep(500);
    const panel = await pierce.byTestId('gg-panel');
    const box = await pierce.box(panel);
    shots.push({ box, png: await page.screenshot({ clip: box, animations: 'disabled', caret: 'hide' }) });
    await page.close();
  }
  assert.deepEqual(shots[1].box, shots[0].box, 'the panel moved');
  assert.ok(shots[0].png.equals(shots[1].png), 'the panel looks different on the hostile page');
});

test('with the widget\'s CSP: the fixture model downloads with progress into Cache Storage and streams an answer', { timeout: 10 * 60 * 1000 }, async () => {
  server.options.throttle = { bytes: 256 * 1024, delayMs: 10 };
  try {
    const { page, console } = await openWidget({ 'model-source': '/models/gemma4-tiny-agent', tools: 'read', 'max-iterations': '1' }, { csp: true });
    // Random weights: the answer is text until the token limit. Once it streams, stop() ends it.
    const asked = page.evaluate(() => document.querySelector('gemma-gem-widget').ask('Hello'));
    await until(async () => (await events(page)).filter((e) => e.type === 'gg-token').length >= 5, { what: 'streaming tokens', timeout: 8 * 60 * 1000 });
    await page.evaluate(() => document.querySelector('gemma-gem-widget').stop());
    const text = await asked;
    const all = await events(page);
    const status = all.filter((e) => e.type === 'gg-status').map((e) => e.detail);
    const downloads = status.filter((s) => s.phase === 'downloading');
    assert.ok(downloads.length >= 2, `download progress: ${JSON.stringify(status)}\n${console.join('\n')}`);
    assert.ok(downloads.every((d, i) => i === 0 || d.loaded_bytes >= downloads[i - 1].loaded_bytes), 'progress went backwards');
    assert.ok(downloads.at(-1).total_bytes > 0);
    assert.ok(status.some((s) => s.phase === 'ready'), JSON.stringify(status));
    const tokens = all.filter((e) => e.type === 'gg-token');
    assert.ok(tokens.length > 0, 'no token streamed');
    const ends = all.filter((e) => e.type === 'gg-answer');
    assert.equal(ends.length, 1);
    assert.ok(['cancelled', 'end_of_turn'].includes(ends[0].detail.reason.kind), JSON.stringify(ends[0].detail));
    assert.equal(ends[0].detail.text, text);
    assert.equal(text, tokens.map((e) => e.detail.text).join(''), 'the answer is the streamed text');
    // The files are in this origin's Cache Storage.
    const cached = await page.evaluate(async () => (await (await caches.open('gemma-gem-models-v1')).keys()).length);
    assert.ok(cached > 0, 'nothing in Cache Storage');
    await page.close();
  } finally {
    server.options.throttle = null;
  }
});

test('the demo site\'s index page answers a question with the fixture model', { timeout: 10 * 60 * 1000 }, async () => {
  const demo = process.env.GG_DEMO_SITE;
  assert.ok(demo && fs.existsSync(path.join(demo, 'widget', 'gemma-gem-widget.js')), 'GG_DEMO_SITE must hold the built demo site with its widget folder');
  // Served as `cargo xtask start` serves it: the site at /, the fixture models under /models/.
  const site = await startServer({ pages: demo });
  const page = await browser.context.newPage();
  const console = [];
  page.on('console', (m) => console.push(`${m.type()}: ${m.text()}`));
  try {
    await page.goto(`${site.url}/index.html`);
    await page.waitForFunction(() => customElements.get('gemma-gem-widget') !== undefined, null, { timeout: 30000 });
    await page.evaluate(() => {
      const w = document.querySelector('gemma-gem-widget');
      window.ggEnd = new Promise((resolve) => {
        w.addEventListener('gg-answer', (e) => resolve({ type: 'answer', ...e.detail }));
        w.addEventListener('gg-error', (e) => resolve({ type: 'error', ...e.detail }));
      });
    });
    const pierce = await Pierce.open(page);
    await until(() => pierce.byTestId('gg-launcher'), { what: 'the launcher' });
    await page.evaluate(() => {
      window.ggTokens = 0;
      document.querySelector('gemma-gem-widget').addEventListener('gg-token', () => { window.ggTokens += 1; });
    });
    await sendFromUi(page, pierce, 'What is this page about?');
    // Random weights write until the token limit: once the answer streams, the user stops it.
    await until(() => page.evaluate(() => window.ggTokens >= 5), { what: 'the answer to stream', timeout: 8 * 60 * 1000 });
    await pierce.click(await pierce.byTestId('gg-stop'));
    const end = await page.evaluate(() => window.ggEnd);
    assert.equal(end.type, 'answer', `${JSON.stringify(end)}\n${console.join('\n')}`);
    assert.ok(end.text.length > 0);
    // The greeting, then the answer, both in the panel, none streaming any more. (The fixture
    // model's random weights may also write a tool call, which the page's URL changes from run
    // to run: its steps are more assistant messages.)
    const messages = async () => [...Pierce.walk(await pierce.tree())].map((n) => Pierce.attrs(n)).filter((a) => a['data-testid'] === 'gg-message');
    const answers = async () => (await messages()).filter((a) => a['data-role'] === 'assistant');
    try {
      await until(async () => { const a = await answers(); return a.length >= 2 && a.every((m) => m['data-streaming'] === 'false'); }, { what: 'the answer in the panel' });
    } catch (e) {
      throw new Error(`${e.message}; the panel's messages: ${JSON.stringify(await messages())}; the end: ${JSON.stringify(end).slice(0, 500)}`);
    }
    const missing = site.log.filter((r) => r.status === 404).map((r) => r.path);
    // Optional model files (genai_config.json, the image processor's configs) are probed: 404s.
    const failures = console.filter((l) => l.startsWith('error') && !l.includes('Failed to load resource'));
    assert.deepEqual(failures, [], `404: ${missing.join(', ')}`);
    if (SHOTS) {
      // The README's picture of the widget on the demo page.
      fs.mkdirSync(SHOTS, { recursive: true });
      await page.screenshot({ path: path.join(SHOTS, 'widget-demo.png'), animations: 'disabled', caret: 'hide' });
    }
  } finally {
    await page.close();
    await site.close();
  }
});
