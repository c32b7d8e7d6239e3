// The embeddable widget's model worker (gg-widget-worker, dist/widget-dev) in headless Chromium,
// no extension: a plain page creates the module Worker and speaks gg_messages::widget with it
// directly (the widget's element and UI are tested by widget.test.mjs). The worker posts bytes
// (postcard); the page reads them as JSON with the development build's `wire_json` (the worker's
// own module, loaded in the page: the same types, the same serde). Checks: every message is
// bytes; `started` comes
// first (with SwiftShader's adapter) even when the page posts before the wasm loaded; a scripted
// turn asks the page to run a listed tool by id and streams its events; a tool outside the turn's
// list is refused without asking the page; Stop cancels a call the page never answers; `load`
// downloads the fixture model into the page origin's Cache Storage with progress, and a turn
// streams an answer with it until Stop.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { CHROMIUM, repo, until } from './harness.mjs';

const WIDGET = process.env.GG_WIDGET_DEV ?? path.join(repo, 'dist/widget-dev');
const MODELS = path.join(repo, 'tests/fixtures/models');
const PROTOCOL = 'gemma-gem-widget/1';

const SCRIPTS = {
  title: { turns: [
    'Let me look.<|tool_call>call:get_page_title{}<tool_call|><|tool_response>',
    'The page is called **Worker page**.<turn|>',
  ] },
  click: { turns: [
    'Let me press it.<|tool_call>call:click_element{selector:<|"|>#go<|"|>}<tool_call|><|tool_response>',
    'I could not press it.<turn|>',
  ] },
  snapshot: { turns: [
    'Looking.<|tool_call>call:snapshot_page{}<tool_call|><|tool_response>',
    'never reached<turn|>',
  ] },
};

const PAGE = `<!doctype html><title>Worker page</title><body><button id="go">Go</button>
<script type="module">
  import init, { wire_json } from '/widget/gg_widget_worker.js';
  const decoder = init({ module_or_path: '/widget/gg_widget_worker_bg.wasm' });
  const worker = new Worker('/widget/gemma-gem-widget-worker.js', { type: 'module' });
  const raw = [];
  worker.onmessage = (e) => raw.push(e.data);
  worker.onerror = (e) => raw.push({ workerError: String(e.message ?? e) });
  window.send = (body) => worker.postMessage({ protocol: '${PROTOCOL}', body });
  // Each message as JSON (what is not bytes, or not a message, is kept as it is, and fails below).
  window.received = async () => {
    await decoder;
    return raw.map((m) => {
      if (!(m instanceof Uint8Array)) return { notBytes: m };
      try { return JSON.parse(wire_json(m)); } catch (e) { return { undecodable: String(e) }; }
    });
  };
</script>`;

const TYPES = { '.js': 'text/javascript', '.wasm': 'application/wasm', '.json': 'application/json' };

/** The page, the widget's files under /widget/, the scripts, the fixture models under /models/. */
async function serve() {
  const server = http.createServer((req, res) => {
    const rel = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    if (rel === '/') {
      res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8' });
      res.end(PAGE);
      return;
    }
    const script = /^\/scripts\/(\w+)\.json$/.exec(rel);
    if (script && SCRIPTS[script[1]]) {
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify(SCRIPTS[script[1]]));
      return;
    }
    const [base, sub] = rel.startsWith('/widget/') ? [WIDGET, rel.slice(7)]
      : rel.startsWith('/models/') ? [MODELS, rel.slice(7)] : [null, null];
    const file = base && path.join(base, path.normalize(sub));
    if (!file || !file.startsWith(base) || !fs.existsSync(file) || fs.statSync(file).isDirectory()) {
      res.writeHead(404);
      res.end('not found');
      return;
    }
    res.writeHead(200, {
      'Content-Type': TYPES[path.extname(file)] ?? 'application/octet-stream',
      'Content-Length': String(fs.statSync(file).size),
    });
    if (req.method === 'HEAD') { res.end(); return; }
    fs.createReadStream(file).pipe(res);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${server.address().port}`, close: () => new Promise((r) => server.close(r)) };
}

function settings(repository, tools) {
  return {
    repository, model_size: 'E2B', thinking: false, max_iterations: 3, temperature: 0,
    image_tokens: 280, constrain_tool_calls: true, system_prompt: null, tools,
  };
}

async function setup() {
  assert.ok(fs.existsSync(path.join(WIDGET, 'gemma-gem-widget-worker.js')), `${WIDGET}: run \`cargo xtask build\` first`);
  const server = await serve();
  const browser = await chromium.launch({
    executablePath: CHROMIUM, headless: true, args: ['--no-sandbox', '--enable-unsafe-webgpu'],
  });
  const page = await browser.newPage();
  const logs = [];
  page.on('console', (m) => logs.push(m.text()));
  page.on('worker', (w) => w.on('console', (m) => logs.push(`[worker] ${m.text()}`)));
  await page.goto(server.url);
  const received = () => page.evaluate(() => window.received());
  const raw = async () => (await received()).map((m) => {
    assert.equal(m.protocol, PROTOCOL, JSON.stringify(m));
    return m.body;
  });
  // The worker's messages as `{type, ...fields}`, read from their wire form.
  const bodies = async () => (await raw()).map((b) => untag(b));
  const send = (body) => page.evaluate((b) => window.send(b), body);
  const close = async () => { await browser.close(); await server.close(); };
  return { server, page, logs, raw, bodies, send, close };
}

/**
 * An externally tagged value, the form of the worker's messages, of the agent events in them, of
 * a `done`'s reason and of a `model_status`'s state on the wire (`"stop"`, `{"agent": {"turn": 1, "event": {"token": {...}}}}`),
 * as `{[key]: variant, ...fields}`: the form the assertions below read.
 */
const untag = (value, key = 'type') => {
  if (typeof value === 'string') return { [key]: value };
  const entries = Object.entries(value);
  assert.equal(entries.length, 1, `externally tagged: ${JSON.stringify(value)}`);
  const [[variant, fields]] = entries;
  return { [key]: variant, ...fields };
};
/** An agent event as `{type, ...fields}`, a `done`'s reason as `{kind, ...fields}`. */
const event = (e) => {
  const out = untag(e);
  if (out.type === 'done') out.reason = untag(out.reason, 'kind');
  return out;
};
/** The events of `turn` among `bodies`. */
const events = (bodies, turn) => bodies.filter((b) => b.type === 'agent' && b.turn === turn).map((b) => event(b.event));
const ended = (evs) => evs.some((e) => e.type === 'done' || e.type === 'error');

test('the worker starts first, runs listed tools through the page by id, refuses the others, and stops', async () => {
  const s = await setup();
  try {
    // Posted at once: the worker keeps it until it started.
    await s.send({ type: 'ask', turn: 1, text: 'What is this page?', settings: settings(`script:${s.server.url}/scripts/title.json`, ['get_page_title']) });
    const run = await until(async () => (await s.bodies()).find((b) => b.type === 'run_tool'), { timeout: 60000, what: 'run_tool' });
    const first = (await s.bodies())[0];
    assert.equal(first.type, 'started', JSON.stringify(first));
    assert.equal(first.adapter.webgpuAvailable, true, JSON.stringify(first.adapter));
    assert.ok(first.adapter.adapter, `an adapter: ${JSON.stringify(first.adapter)}`);
    assert.equal(run.call.name, 'get_page_title');
    await s.send({ type: 'tool_result', id: run.id, result: { Ok: { value: { title: 'Worker page' } } } });
    const turn1 = await until(async () => { const e = events(await s.bodies(), 1); return ended(e) && e; }, { what: 'turn 1 ends' });
    assert.deepEqual(turn1.at(-1), { type: 'done', reason: { kind: 'end_of_turn' } });
    // On the wire, both the message and the event are externally tagged.
    assert.ok((await s.raw()).some((b) => JSON.stringify(b) === JSON.stringify({ agent: { turn: 1, event: { done: { reason: 'end_of_turn' } } } })), JSON.stringify(await s.raw()));
    assert.ok(turn1.some((e) => e.type === 'tool_result' && e.output.value.title === 'Worker page'), JSON.stringify(turn1));
    assert.match(turn1.filter((e) => e.type === 'token').map((e) => e.text).join(''), /Worker page/);

    // click_element is not in this turn's list: refused, never asked of the page.
    await s.send({ type: 'ask', turn: 2, text: 'Press Go', settings: settings(`script:${s.server.url}/scripts/click.json`, ['get_page_title']) });
    const turn2 = await until(async () => { const e = events(await s.bodies(), 2); return ended(e) && e; }, { what: 'turn 2 ends' });
    const refused = turn2.find((e) => e.type === 'tool_error');
    assert.ok(refused && /click_element/.test(refused.error.message), JSON.stringify(turn2));
    assert.equal((await s.bodies()).filter((b) => b.type === 'run_tool' || b.type === 'describe_element').length, 1);

    // Stop while the page has not answered: the turn ends as cancelled.
    await s.send({ type: 'ask', turn: 3, text: 'Look', settings: settings(`script:${s.server.url}/scripts/snapshot.json`, ['snapshot_page']) });
    await until(async () => (await s.bodies()).filter((b) => b.type === 'run_tool').length === 2, { what: 'run_tool of turn 3' });
    await s.send({ type: 'stop' });
    const turn3 = await until(async () => { const e = events(await s.bodies(), 3); return ended(e) && e; }, { what: 'turn 3 ends' });
    assert.deepEqual(turn3.at(-1), { type: 'done', reason: { kind: 'cancelled' } });
    assert.ok(!(await s.bodies()).some((b) => b.type === 'error'), JSON.stringify(await s.bodies()));
  } catch (e) {
    console.log(s.logs.join('\n'));
    throw e;
  } finally {
    await s.close();
  }
});

test('load downloads the fixture model into Cache Storage with progress, and a turn streams with it until Stop', async () => {
  const s = await setup();
  try {
    const repository = `${s.server.url}/models/gemma4-tiny-agent`;
    const l0 = Date.now();
    await s.send({ type: 'load', repository, model_size: 'E2B' });
    const states = async () => (await s.bodies()).filter((b) => b.type === 'model_status').map((b) => untag(b.state, 'phase'));
    await until(async () => (await states()).some((st) => st.phase === 'ready' || st.phase === 'failed'), { timeout: 180000, what: 'the model is ready' });
    console.log(`loaded after ${Date.now() - l0} ms`);
    const all = await states();
    assert.ok(all.some((st) => st.phase === 'downloading'), JSON.stringify(all));
    const ready = all.find((st) => st.phase === 'ready');
    assert.ok(ready, JSON.stringify(all.at(-1)));
    const cached = await s.page.evaluate(async () => (await (await caches.open('gemma-gem-models-v1')).keys()).length);
    assert.ok(cached > 0, 'model files in the page origin\'s Cache Storage');

    // The fixture model streams tokens (its text is noise); Stop ends the answer.
    const t0 = Date.now();
    await s.send({ type: 'ask', turn: 1, text: 'Hello', settings: { ...settings(repository, []), max_iterations: 1 } });
    await until(async () => events(await s.bodies(), 1).some((e) => e.type === 'token' && e.text.length > 0), { timeout: 120000, what: 'a token' });
    console.log(`first token after ${Date.now() - t0} ms`);
    await s.send({ type: 'stop' });
    const turn = await until(async () => { const e = events(await s.bodies(), 1); return ended(e) && e; }, { timeout: 60000, what: 'the turn ends' });
    assert.ok(['cancelled', 'end_of_turn', 'max_new_tokens'].includes(turn.at(-1).reason?.kind), JSON.stringify(turn.at(-1)));
  } catch (e) {
    console.log(s.logs.join('\n'));
    throw e;
  } finally {
    await s.close();
  }
});
