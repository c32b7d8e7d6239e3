// The real model path of the dev build: `modelSource` points at a tiny random Gemma 4 served in
// the Hugging Face layout by the fixture server. The offscreen document downloads it into Cache
// Storage (progress in every overlay), loads it on WebGPU (SwiftShader here: q4, no shader-f16)
// and streams tokens into the overlay. A download cut off halfway resumes with a Range request.
// All UI interaction goes through the overlay iframe inside the page's closed shadow root.
//
// Slow on purpose-free machines: the agent's prompt (system prompt + tool declarations) is ~1600
// tokens with the fixture's tokenizer, and the runtime's prefill on SwiftShader takes minutes, so
// the answers are ended with Stop once model text has arrived (cancellation between steps).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, launchExtension, until, openOverlay as openOverlayAt, sendMessage } from './harness.mjs';

const MODEL = '/models/gemma4-tiny-agent';
let server, ext;

before(async () => {
  // Slow enough that the download is seen in progress (the model is ~2 MB).
  server = await startServer({ throttle: { bytes: 32 * 1024, delayMs: 40 } });
  ext = await launchExtension(process.env.GG_EXT_DEV);
});
after(async () => { await ext?.close(); await server?.close(); });

async function useModel(base) {
  await ext.sw.evaluate((s) => chrome.storage.sync.set({ settings: s }),
    { modelSource: base, maxIterations: 1, temperature: 1.0 });
}

const openOverlay = (path = '/basic.html') => openOverlayAt(ext, `${server.url}${path}`);
const send = sendMessage;

const modelStatus = (frame) => frame.$eval('[data-testid="gg-model-status"]',
  (e) => ({ status: e.dataset.status, text: e.innerText.trim() }));

/** Each answer: the model's text (answer and thinking, without the UI's notes), its state. */
const answers = (frame) => frame.$$eval('[data-testid="gg-message"][data-role="assistant"]',
  (els) => els.map((e) => {
    const copy = e.cloneNode(true);
    for (const n of copy.querySelectorAll('.gg-msg-note, summary')) n.remove();
    return {
      text: copy.textContent.trim(),
      streaming: e.dataset.streaming,
      stopped: [...e.querySelectorAll('.gg-msg-note')].some((n) => n.textContent.includes('Stopped')),
    };
  }));

const errors = (frame) => frame.$$eval('[data-testid="gg-error"]', (els) => els.map((e) => ({ kind: e.dataset.kind, text: e.innerText })));

const modelRequests = (prefix) => server.log.filter((r) => r.path.startsWith(prefix) && r.method === 'GET');

test('the first message downloads the model with progress in every overlay, then tokens stream; the second does not download', async () => {
  await useModel(`${server.url}${MODEL}`);
  const { page, frame } = await openOverlay();
  const other = await openOverlay('/basic.html');
  await page.bringToFront();
  await send(frame, 'Hello, who are you?');

  // Download progress, with numbers, in the tab that asked and in the other one.
  const seen = await until(async () => {
    const s = await modelStatus(frame);
    return s.status === 'downloading' && /%/.test(s.text) && s;
  }, { timeout: 60000, interval: 50, what: 'download progress in the overlay' });
  assert.match(seen.text, /Downloading Gemma 4 E2B/);
  const elsewhere = await until(async () => {
    const s = await modelStatus(other.frame);
    return ['downloading', 'initializing', 'ready'].includes(s.status) && s;
  }, { timeout: 60000, interval: 50, what: 'model status in the other tab' });
  assert.notEqual(elsewhere.status, 'not_loaded');
  await until(async () => (await modelStatus(frame)).status === 'ready', { timeout: 240000, interval: 100, what: 'the model to load' });
  assert.equal((await modelStatus(other.frame)).status, 'ready');

  // Model text streams into the overlay (random weights: any text); then the user stops it.
  // The random model may also end an answer by itself (it samples one of its end ids) before
  // the click lands: then it is asked again, a few times at most.
  assert.equal((await answers(frame)).at(-1).text, '', 'no text before the model writes');
  let ended;
  for (let attempt = 1; ; attempt += 1) {
    const streamed = await until(async () => {
      const errs = await errors(frame);
      if (errs.length) return { errors: errs };
      const a = (await answers(frame)).at(-1);
      return a.text.length > 0 && { answer: a };
    }, { timeout: 900000, interval: 250, what: 'model text in the overlay' });
    assert.ok(streamed.answer, `the overlay shows an error: ${JSON.stringify(streamed.errors)}`);
    if (streamed.answer.streaming === 'true') {
      await frame.click('[data-testid="gg-stop"]').catch(() => {});
    }
    ended = await until(async () => { const a = (await answers(frame)).at(-1); return a.streaming === 'false' && a; }, { what: 'the turn to end' });
    if (ended.stopped || attempt === 4) break;
    assert.deepEqual(await errors(frame), [], 'an answer that ended by itself ended without an error');
    const count = (await answers(frame)).length;
    await send(frame, 'Go on.');
    await until(async () => (await answers(frame)).length === count + 1, { what: 'the next answer to start' });
  }
  assert.ok(ended.stopped, 'the answer is marked as stopped');
  assert.ok(ended.text.length > 0, 'the streamed text stays');

  const files = modelRequests(`${MODEL}/`);
  for (const f of ['config.json', 'tokenizer.json', 'chat_template.jinja', 'onnx/decoder_model_merged_q4.onnx_data', 'onnx/embed_tokens_q4.onnx_data']) {
    assert.equal(files.filter((r) => r.path === `${MODEL}/${f}`).length, 1, `${f} downloaded once`);
  }
  // SwiftShader has no shader-f16: the q4 variant, never the q4f16 one.
  assert.equal(files.filter((r) => r.path.includes('q4f16')).length, 0);

  // The second message uses the loaded model: no request for any model file.
  const before = server.log.length;
  const count = (await answers(frame)).length;
  await send(frame, 'Tell me more.');
  await until(async () => (await answers(frame)).length === count + 1, { what: 'the second answer to start' });
  await new Promise((r) => setTimeout(r, 5000));
  assert.deepEqual(await errors(frame), []);
  assert.equal((await modelStatus(frame)).status, 'ready');
  await frame.click('[data-testid="gg-stop"]');
  await until(async () => (await answers(frame)).at(-1).streaming === 'false', { what: 'the second turn to end' });
  const later = server.log.slice(before).filter((r) => r.path.startsWith('/models/'));
  assert.deepEqual(later, [], 'no model file is requested again');
  await page.close();
  await other.page.close();
});

test('the settings list the downloaded model with its size, and Clear deletes its files from Cache Storage', async () => {
  // The model of the first test is loaded and its files are stored.
  await useModel(`${server.url}${MODEL}`);
  const { page, frame } = await openOverlay();
  await frame.click('[data-testid="gg-settings-open"]');
  const stored = await until(() => frame.$$eval('[data-testid="gg-clear-model"]',
    (els) => els.map((e) => ({ model: e.dataset.model, row: e.closest('li').innerText }))).then((l) => l.length > 0 && l),
  { timeout: 30000, what: 'the downloaded model in the settings' });
  assert.equal(stored.length, 1, JSON.stringify(stored));
  assert.equal(stored[0].model, 'e2b');
  assert.match(stored[0].row, /Gemma 4 E2B\s+\d+(\.\d+)?\s*(KB|MB)/);
  const keys = () => frame.evaluate(async (repo) => {
    const c = await caches.open('gemma-gem-models-v1');
    return (await c.keys()).filter((r) => decodeURIComponent(r.url).includes(repo)).length;
  }, `${server.url}${MODEL}/`);
  assert.ok(await keys() > 5, 'the files are in Cache Storage');

  await frame.click('[data-testid="gg-clear-model"][data-model="e2b"]');
  await until(async () => (await frame.$$('[data-testid="gg-clear-model"]')).length === 0, { timeout: 30000, what: 'the list to empty' });
  assert.match(await frame.$eval('[data-testid="gg-settings"]', (e) => e.innerText), /No model files are stored/);
  assert.equal(await keys(), 0, 'no cache entry of the repository is left');
  assert.deepEqual(await errors(frame), []);
  // The loaded model stays loaded.
  await frame.click('[data-testid="gg-settings-close"]');
  assert.equal((await modelStatus(frame)).status, 'ready');
  await page.close();
});

test('a download cut off halfway fails clearly, and the next attempt resumes with a Range request', async () => {
  const data = `${MODEL}/onnx/decoder_model_merged_q4.onnx_data`;
  const mirror = await startServer({ throttle: { bytes: 32 * 1024, delayMs: 20 }, cutOnce: new Set([data]) });
  try {
    await useModel(`${mirror.url}${MODEL}`);
    const { page, frame } = await openOverlay();
    await send(frame, 'Hello');
    const err = await until(async () => (await errors(frame))[0], { timeout: 120000, interval: 100, what: 'an error in the overlay' });
    assert.equal(err.kind, 'download_failed', err.text);
    const cut = mirror.log.find((r) => r.path === data && r.cut !== null);
    assert.ok(cut, 'the server cut the download');
    assert.match(err.text, /decoder_model_merged_q4\.onnx_data/);
    assert.match(err.text, new RegExp(`stopped at byte ${cut.cut} of \\d+`));
    assert.match(err.text, /resume/);
    assert.equal((await modelStatus(frame)).status, 'not_loaded');

    // The next attempt resumes where the download stopped, and the model loads.
    await send(frame, 'Hello again');
    await until(async () => (await modelStatus(frame)).status === 'ready', { timeout: 600000, interval: 100, what: 'the model to load' });
    assert.deepEqual(await errors(frame), [], 'the download error is gone once the model is ready');
    const requests = mirror.log.filter((r) => r.path === data && r.method === 'GET');
    assert.equal(requests.length, 2, JSON.stringify(requests));
    assert.equal(requests[0].range, null);
    assert.equal(requests[1].range, `bytes=${cut.cut}-`);
    assert.equal(requests[1].status, 206);
    // Files that were complete before the cut are not downloaded again.
    const embed = mirror.log.filter((r) => r.path === `${MODEL}/onnx/embed_tokens_q4.onnx_data` && r.method === 'GET');
    assert.equal(embed.length, 1);
    await page.close();
  } finally {
    await mirror.close();
  }
});

