// Images reach the model, end to end in the dev build (issue 31). The scripted model's script
// names a real model package (`"model"`: the mobius tiny split fixture, which has a vision
// encoder) served over HTTP by the fixture server; for each generation the offscreen document
// loads that model exactly as a turn does and prepares the prompt it would be given — the real
// preprocessing at the imageTokens setting, the vision encoder downloaded and loaded lazily on
// the first image and run on WebGPU (SwiftShader here), the image placeholders expanded — and the
// scripted turn reports what the model received: the prompt's `<|image|>` soft-token ids and the
// encoded features' rows. Only the model's output text is scripted; nothing is decoded.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { startServer, launchExtension, until, openOverlay, sendMessage, repo } from './harness.mjs';

const MODEL = 'mobius-tiny-gqa-int4-split';
const BUDGET = 70;
let server, ext;

before(async () => {
  server = await startServer();
  ext = await launchExtension(process.env.GG_EXT_DEV);
});
after(async () => { await ext?.close(); await server?.close(); });

/** The model's image processor settings (its `image_processor.json`). */
function processorConfig() {
  const json = JSON.parse(fs.readFileSync(path.join(repo, 'tests/fixtures/models', MODEL, 'image_processor.json'), 'utf8'));
  const attrs = json.processor.transforms.map((t) => t.operation).find((o) => o.type === 'Gemma4ImageTransform').attrs;
  return { patch: attrs.patch_size, pooling: attrs.pooling_kernel_size };
}

/**
 * Soft tokens of a `width`×`height` image at `budget` (Gemma 4's image processor: the aspect kept,
 * each side resized to a multiple of patch·pooling so that at most budget·pooling² patches fit).
 */
function softTokens(width, height, budget, { patch, pooling }) {
  const maxPatches = budget * pooling * pooling;
  const targetPx = maxPatches * patch * patch;
  const factor = Math.sqrt(targetPx / (width * height));
  const side = patch * pooling;
  let h = Math.floor((factor * height) / side) * side;
  let w = Math.floor((factor * width) / side) * side;
  const maxSide = Math.floor(maxPatches / (pooling * pooling)) * side;
  if (h === 0) { h = side; w = Math.min(Math.floor(width / height) * side, maxSide); }
  else if (w === 0) { w = side; h = Math.min(Math.floor(height / width) * side, maxSide); }
  assert.ok(h * w <= targetPx, 'the image fits the budget');
  return (h / side) * (w / side);
}

const answers = (frame) => frame.$$eval('[data-testid="gg-message"][data-role="assistant"]', (els) => els.map((e) => {
  const copy = e.cloneNode(true);
  for (const n of copy.querySelectorAll('.gg-msg-note, summary, [data-testid="gg-tool-step"]')) n.remove();
  return { text: copy.textContent.trim(), streaming: e.dataset.streaming };
}));
const errors = (frame) => frame.$$eval('[data-testid="gg-error"]', (els) => els.map((e) => e.innerText.trim()));

/** Sends `text`, then returns the new last answer once it holds `needle`; an error banner fails. */
async function ask(frame, text, needle) {
  const before = (await answers(frame)).length;
  await sendMessage(frame, text);
  return until(async () => {
    const shown = await errors(frame);
    if (shown.length > 0) return false;
    const a = await answers(frame);
    const last = a.at(-1);
    return a.length > before && last.streaming === 'false' && last.text.includes(needle) && last.text;
  }, { timeout: 90000, what: `an answer containing ${JSON.stringify(needle)}` }).catch(async (e) => {
    const shown = await errors(frame).catch(() => []);
    throw shown.length > 0 ? new Error(`the overlay shows an error: ${shown.join(' | ')}`) : e;
  });
}

/** Reads `Seen: N image tokens, feature rows S (a+b), budget B.` from an answer. */
function seen(text) {
  const m = /(\d+) image tokens, feature rows (\d+) \(([\d+]*)\)(?:, budget (\d+))?/.exec(text);
  assert.ok(m, `the answer reports what the model received: ${text}`);
  return { tokens: Number(m[1]), rows: Number(m[2]), perImage: m[3] ? m[3].split('+').map(Number) : [], budget: m[4] ? Number(m[4]) : null };
}

const visionRequests = () => server.log.filter((r) => r.path.startsWith(`/models/${MODEL}/vision_encoder/`));

test('a screenshot and a pasted image reach the model: image tokens and feature rows match the budget; the encoder downloads at the first image', async () => {
  const started = Date.now();
  const cfg = processorConfig();
  const script = `${server.url}/scripts/vision.json?run=${Date.now()}`;
  await ext.sw.evaluate((s) => chrome.storage.sync.set({ settings: s }), { modelSource: `script:${script}`, imageTokens: BUDGET, maxIterations: 4 });
  const { page, frame } = await openOverlay(ext, `${server.url}/basic.html`);

  // 1. A text-only message: the real model loads (its text files and sessions over HTTP), and
  // the vision encoder is not downloaded.
  const first = seen(await ask(frame, 'Hello', 'Text only'));
  assert.deepEqual(first, { tokens: 0, rows: 0, perImage: [], budget: null });
  const modelGets = server.log.filter((r) => r.path.startsWith(`/models/${MODEL}/`) && r.method === 'GET').map((r) => r.path);
  assert.ok(modelGets.includes(`/models/${MODEL}/decoder/model.onnx`), `the model was loaded: ${modelGets.join(', ')}`);
  assert.ok(modelGets.includes(`/models/${MODEL}/image_processor.json`), 'the image processor config goes with the text files');
  assert.deepEqual(visionRequests(), [], 'a text-only conversation fetches nothing of the vision encoder');
  const textLoaded = Date.now();

  // 2. The model takes a screenshot; the next model call receives it.
  const report = seen(await ask(frame, 'What does the page look like?', 'Seen:'));
  const step = await frame.waitForSelector('[data-testid="gg-tool-step"][data-tool="take_screenshot"][data-state="done"]', { timeout: 10000 });
  // The timeline shows what the model saw: the PNG of the tool's output, at the size it reports.
  const shot = await step.$eval('img', (img) => ({ src: img.src, w: img.naturalWidth, h: img.naturalHeight }));
  assert.match(shot.src, /^data:image\/png;base64,/);
  const result = await step.$eval('.gg-tool-result pre', (e) => e.textContent);
  const width = Number(/"width":\s*(\d+)/.exec(result)?.[1]);
  const height = Number(/"height":\s*(\d+)/.exec(result)?.[1]);
  assert.ok(width > 0 && height > 0, `the tool reports the screenshot's size: ${result}`);
  assert.deepEqual([shot.w, shot.h], [width, height], 'the thumbnail is the image the tool returned');
  const screenshotTokens = softTokens(width, height, BUDGET, cfg);
  assert.ok(screenshotTokens > 0 && screenshotTokens <= BUDGET);
  assert.deepEqual(report, { tokens: screenshotTokens, rows: screenshotTokens, perImage: [screenshotTokens], budget: BUDGET },
    `a ${width}×${height} screenshot at ${BUDGET} soft tokens`);
  // The encoder's files were fetched now, once each.
  const vision = visionRequests().filter((r) => r.method === 'GET').map((r) => r.path).sort();
  assert.deepEqual(vision, [`/models/${MODEL}/vision_encoder/model.onnx`, `/models/${MODEL}/vision_encoder/model.onnx.data`]);
  const screenshotDone = Date.now();

  // 3. A pasted image: shown in the composer, then in the user's message, and it reaches the
  // model after the screenshot (the prompt's images in order).
  const imageFile = path.join(repo, 'tests/fixtures/images/wide_300x80.png');
  const bytes = fs.readFileSync(imageFile).toString('base64');
  await frame.$eval('[data-testid="gg-input"]', (area, b64) => {
    const data = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    const files = new DataTransfer();
    files.items.add(new File([data], 'wide.png', { type: 'image/png' }));
    area.focus();
    area.dispatchEvent(new ClipboardEvent('paste', { clipboardData: files, bubbles: true, cancelable: true }));
  }, bytes);
  await frame.waitForSelector('[data-testid="gg-attachment"]', { timeout: 10000 });
  const pasted = seen(await ask(frame, 'And this image?', 'Seen:'));
  const sent = await frame.$$eval('[data-testid="gg-message"][data-role="user"]', (els) => els.map((e) =>
    [...e.querySelectorAll('[data-testid="gg-message-image"]')].map((img) => ({ src: img.src.slice(0, 22), w: img.naturalWidth, h: img.naturalHeight }))));
  assert.deepEqual(sent, [[], [], [{ src: 'data:image/png;base64,', w: 300, h: 80 }]], 'the pasted image is in the user\'s message');
  const pastedTokens = softTokens(300, 80, BUDGET, cfg);
  assert.deepEqual(pasted, {
    tokens: screenshotTokens + pastedTokens,
    rows: screenshotTokens + pastedTokens,
    perImage: [screenshotTokens, pastedTokens],
    budget: BUDGET,
  });
  // The encoder is not downloaded again.
  assert.equal(visionRequests().filter((r) => r.method === 'GET').length, 2);
  console.log(`vision e2e: screenshot ${width}x${height} -> ${screenshotTokens} tokens, pasted 300x80 -> ${pastedTokens}; `
    + `text load ${textLoaded - started} ms, screenshot turn ${screenshotDone - textLoaded} ms, pasted turn ${Date.now() - screenshotDone} ms`);
  await page.close();
});
