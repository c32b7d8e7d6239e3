// The page tools on pages as big as the web's: generated stress pages (tests/pages/stress/) and
// 44 saved real pages with the article text Mozilla Readability extracts from them
// (tests/pages/real/, Apache-2.0: see LICENSE.md and NOTICE there).
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { startServer, launchExtension, repo, until } from './harness.mjs';
import { toolsFor, envelope, observeLongTasks, withLongestTask } from './pagetools.mjs';

const DEV = process.env.GG_EXT_DEV;
let server, ext, t;
/** Console lines of the pages and the service worker. */
const consoleLines = [];

before(async () => {
  assert.ok(DEV, 'GG_EXT_DEV must point at dist/chrome-mv3-dev (run through `cargo xtask test`)');
  server = await startServer();
  ext = await launchExtension(DEV);
  t = toolsFor(ext);
  // Saved pages still name their sites' images, fonts and scripts: nothing leaves the machine.
  await ext.context.route((u) => /^https?:/.test(u.href) && !u.href.startsWith(server.url), (r) => r.abort());
  ext.context.on('page', (page) => page.on('console', (m) => consoleLines.push(`${m.type()}: ${m.text()}`)));
  ext.sw.on('console', (m) => consoleLines.push(`sw ${m.type()}: ${m.text()}`));
});
after(async () => {
  await ext?.close();
  await server?.close();
});

let opened = 0;
async function open(path) {
  opened += 1;
  const sep = path.includes('?') ? '&' : '?';
  return t.open(`${server.url}${path}${sep}tab=${opened}`, observeLongTasks);
}

const panics = () => consoleLines.filter((l) => /panic|RuntimeError|unreachable|abort|crashed/i.test(l) && !l.includes('__debug_panic'));

describe('regression: the content script panicked on pages of a few hundred elements', () => {
  // dlmalloc `validate_size` <- `free` <- RawVec drop <- dom::frame_document, then dead.
  for (const [what, path] of [
    ['600 buttons', '/stress/page.html?kind=buttons&n=600'],
    ['2,000 elements of nested lists and tables', '/stress/page.html?kind=nested&n=2000'],
  ]) {
    test(`snapshot_page on ${what} answers, and the next calls too`, async () => {
      const { page, tabId } = await open(path);
      const snap = await t.ok(tabId, 'snapshot_page', {});
      assert.ok(snap.elements_shown > 50, JSON.stringify(snap).slice(0, 300));
      const again = await t.ok(tabId, 'snapshot_page', { max_tokens: 100000 });
      assert.equal(again.complete, true, again.note);
      assert.equal(again.left_out, undefined);
      const title = await t.ok(tabId, 'get_page_title', {});
      assert.equal(title.title, 'Stress page');
      assert.deepEqual(panics(), []);
      await page.close();
    });
  }

  test('a panic in the page tools is answered with a tool error, logged, and they restart', async () => {
    const { page, tabId } = await open('/stress/page.html?kind=buttons&n=50');
    const before = await t.ok(tabId, 'snapshot_page', {});
    // Development builds only: `__debug_panic` panics at once, or in its first slice (`later`).
    for (const args of [{}, { later: true }]) {
      const seen = consoleLines.length;
      const r = await t.tool(tabId, '__debug_panic', args);
      assert.equal(r.err?.kind, 'failed', JSON.stringify(r));
      assert.match(r.err.message, /restarted/);
      const after = await t.ok(tabId, 'snapshot_page', {});
      assert.equal(after.elements_shown, before.elements_shown);
      assert.match(after.outline, /- button "Button 49" \[ref=e\d+\]/);
      assert.equal((await t.ok(tabId, 'get_page_title', {})).title, 'Stress page');
      // One host: the restarted copy replaced the failed one's.
      assert.equal(await page.evaluate(() => document.querySelectorAll('gemma-gem-host').length), 1);
      const logged = () => consoleLines.slice(seen);
      await until(() => logged().some((l) => /\[Gemma Gem\] the page tools crashed and were restarted: [\s\S]*__debug_panic asked for a panic/.test(l)),
        { what: `the restarted copy's log of the crash (${JSON.stringify(logged())})`, timeout: 5000 });
      assert.ok(logged().some((l) => /\[Gemma Gem\] the page tools panicked: [\s\S]*__debug_panic asked for a panic/.test(l)), JSON.stringify(logged()));
      // The service worker got the report (content_crashed) and logged it.
      const swLine = new RegExp(`^sw error: \\[Gemma Gem\\] the page tools of tab ${tabId} crashed and were restarted: [\\s\\S]*__debug_panic asked for a panic`);
      await until(() => logged().some((l) => swLine.test(l)),
        { what: `the service worker's log of the crash (${JSON.stringify(logged())})`, timeout: 5000 });
    }
    await page.close();
  });

  test('read_page_content on 12,000 elements reads to the end', async () => {
    const { page, tabId } = await open('/stress/page.html?kind=big&n=12000');
    const all = await t.ok(tabId, 'read_page_content', { max_chars: 10_000_000 });
    assert.equal(all.remaining_chars, 0, all.note);
    assert.match(all.content, /Section 1199\b/);
    assert.match(all.content, /THE-END of the big page\./);
    assert.deepEqual(panics(), []);
    await page.close();
  });
});

/** Main-thread tasks are timed on a shared machine, where one slice can be stretched by another
 * process. A task over 50 ms fails a test only when a second, fresh run (a new tab, a new content
 * script, its first calls included) has one too; every other failure fails at once. */
async function againIfSlow(body) {
  try {
    return await body();
  } catch (e) {
    if (!(e instanceof assert.AssertionError) || !/ ms task|longest task|click \d+ ms, type/.test(e.message)) throw e;
    console.log(`a long task on the first run (${e.message}); running it once more`);
    return await body();
  }
}

describe('pages of 100,000 elements and deep shadow/iframe trees', () => {
  test('the 100,000-element page: every tool answers within its time budget, no task over 50 ms', () => againIfSlow(async () => {
    const { page, tabId } = await open('/stress/page.html?kind=big&n=100000');
    const count = await page.evaluate(() => document.getElementsByTagName('*').length);
    assert.ok(count >= 100000, `${count} elements`);
    let started = Date.now();
    const snap = await withLongestTask(page, () => t.ok(tabId, 'snapshot_page', {}), t, tabId);
    const snapMs = Date.now() - started;
    assert.ok(snapMs < 15000, `snapshot took ${snapMs} ms`);
    assert.ok(snap.value.elements_shown > 20, snap.value.note);
    assert.equal(snap.value.complete, false);
    assert.match(snap.value.note, /left out|too large/);
    assert.ok(snap.ours < 50, `snapshot_page: a ${snap.ours} ms task`);

    started = Date.now();
    const read = await withLongestTask(page, () => t.ok(tabId, 'read_page_content', { max_chars: 4000 }), t, tabId);
    const readMs = Date.now() - started;
    assert.ok(readMs < 15000, `read took ${readMs} ms`);
    assert.ok(read.ours < 50, `read_page_content: a ${read.ours} ms task`);
    assert.match(read.value.content, /Section 0\b/);
    assert.match(read.value.content, /Visible after the hidden texts\./);
    for (const hidden of ['display-none', 'visibility-hidden', 'off-screen', 'zero-size', 'transparent', 'aria-hidden', 'attribute']) {
      assert.ok(!read.value.content.includes(`HIDDEN-${hidden}`), `HIDDEN-${hidden} was read`);
    }
    assert.ok(read.value.remaining_chars > 0);
    if (read.value.partial) assert.match(read.value.note, /time budget|larger than/);

    // The markup, written in slices too: its first page, its last, and what it leaves out.
    started = Date.now();
    const html = await withLongestTask(page, () => t.ok(tabId, 'read_page_content', { format: 'html', max_chars: 4000 }), t, tabId);
    const htmlMs = Date.now() - started;
    assert.ok(htmlMs < 15000, `read (html) took ${htmlMs} ms`);
    // The page's garbage collector may finish a major collection inside one of our slices
    // (25-38 ms on this page): the slices are short enough that the task stays under 50 ms.
    assert.ok(html.ours < 50, `read_page_content (html): a ${html.ours} ms task`);
    assert.equal(html.value.format, 'html');
    assert.match(html.value.content, /^<body> ?<main id="main"><h1>Stress page<\/h1><section id="hidden-texts"><h2>Hidden texts follow<\/h2>/);
    assert.match(html.value.content, /<p id="after-hidden">Visible after the hidden texts\.<\/p>/);
    assert.match(html.value.content, /<section id="s0"><h2>Section 0<\/h2>/);
    assert.ok(!html.value.content.includes('HIDDEN-'), html.value.content.slice(0, 1000));
    assert.ok(html.value.remaining_chars > 0);
    if (html.value.partial) assert.match(html.value.note, /time budget|larger than/);
    const total = html.value.total_chars;
    const last = await withLongestTask(page, () => t.ok(tabId, 'read_page_content', { format: 'html', offset: total - 300, max_chars: 4000 }), t, tabId);
    assert.ok(last.ours < 50, `read_page_content (html, last page): a ${last.ours} ms task`);
    assert.equal(last.value.total_chars, total);
    assert.equal(last.value.remaining_chars, 0);
    // Cut short or not, the markup ends with the elements it opened closed.
    assert.match(last.value.content, /<\/main> ?<\/body>$/);
    if (!html.value.partial) assert.match(last.value.content, /<div id="shadow-end"><input id="shadow-end-field" placeholder="Field in a shadow root"><button type="button" id="shadow-end-button">Button in a shadow root<\/button><\/div><\/main> ?<\/body>$/);
    console.log(`read_page_content (html) on the 100,000-element page: ${htmlMs} ms, ${total} characters${html.value.partial ? ' (partial)' : ''}, longest task ${html.ours} ms; last page: longest task ${last.ours} ms`);

    // Target lookup: a ref from the snapshot, and selectors.
    const ref = snap.value.outline.match(/- button "Act \d+" \[ref=(e\d+)\]/)?.[1];
    assert.ok(ref, snap.value.outline.slice(0, 500));
    const click = await withLongestTask(page, () => t.ok(tabId, 'click_element', { ref }), t, tabId);
    assert.match(click.value.clicked, /Act \d+/);
    const typed = await withLongestTask(page, () => t.ok(tabId, 'type_text', { selector: '#s9000 input', text: 'hello' }), t, tabId);
    assert.equal(await page.evaluate(() => document.querySelector('#s9000 input').value), 'hello');
    assert.ok(click.ours < 50 && typed.ours < 50, `click ${click.ours} ms, type ${typed.ours} ms`);

    // Selectors the document itself does not match: the lookup searches the open shadow roots
    // and frames in slices — the whole page for a selector that matches nothing.
    const lookups = [];
    const timed = async (what, fn) => {
      const at = Date.now();
      const r = await withLongestTask(page, fn, t, tabId);
      lookups.push(`${what}: ${Date.now() - at} ms, longest task ${r.ours} ms`);
      assert.ok(Date.now() - at < 15000, lookups.at(-1));
      assert.ok(r.ours < 50, lookups.at(-1));
      return r.value;
    };
    const deepClick = await timed('click by selector in a shadow root', () => t.ok(tabId, 'click_element', { selector: '#shadow-end-button' }));
    assert.match(deepClick.clicked, /Button in a shadow root/);
    // Typing here once forced the browser to lay out the whole page inside our task (a secret
    // check that read the field's box after its value changed: 56-68 ms); it is judged first.
    await timed('type by selector in a shadow root', () => t.ok(tabId, 'type_text', { selector: '#shadow-end-field', text: 'deep' }));
    assert.equal(await page.evaluate(() => document.querySelector('#shadow-end').shadowRoot.querySelector('input').value), 'deep');
    const facts = await timed('element facts by selector', () => t.send(tabId, envelope({ type: 'get_element_facts', target: { selector: '#shadow-end-button' } })));
    assert.equal(facts?.body?.type, 'element_facts', JSON.stringify(facts));
    assert.equal(facts.body.result.Ok?.field?.tag, 'button', JSON.stringify(facts.body.result));
    await timed('click by a selector that matches nothing', () => t.fails(tabId, 'click_element', { selector: '#no-such-element' }, 'not_found', /no element matches/));
    const within = await timed('read by selector in a shadow root', () => t.ok(tabId, 'read_page_content', { selector: '#shadow-end-button' }));
    assert.equal(within.content, 'Button in a shadow root');
    console.log(`selector lookups on the 100,000-element page:\n${lookups.join('\n')}`);
    assert.deepEqual(panics(), []);
    await page.close();
  }));

  test('deeply nested open shadow roots, same-origin iframes and a 1,000-deep chain', () => againIfSlow(async () => {
    const { page, tabId } = await open('/stress/page.html?kind=deep');
    await page.waitForFunction(() => {
      let doc = document;
      for (let i = 0; i < 4; i += 1) {
        const f = doc.querySelector('iframe');
        if (!f?.contentDocument?.documentElement?.dataset.built) return false;
        doc = f.contentDocument;
      }
      return true;
    }, null, { timeout: 20000 });
    const snap = await withLongestTask(page, () => t.ok(tabId, 'snapshot_page', { max_tokens: 50000 }), t, tabId);
    assert.ok(snap.ours < 50, `snapshot_page: a ${snap.ours} ms task`);
    const outline = snap.value.outline;
    for (const name of ['Shadow button 0.39', 'Shadow button 4.39', 'Chain button']) {
      assert.match(outline, new RegExp(`- button "${name}" \\[ref=e\\d+\\]`), `${name} missing`);
    }
    assert.match(outline, /- textbox "Deepest field 4" \[ref=e\d+\]/);
    const deepest = outline.match(/- button "Shadow button 4\.39" \[ref=(e\d+)\]/)[1];
    await t.ok(tabId, 'scroll_page', { ref: deepest });
    const clicked = await t.ok(tabId, 'click_element', { ref: deepest });
    assert.match(clicked.clicked, /Shadow button 4\.39/);
    const field = outline.match(/- textbox "Deepest field 4" \[ref=(e\d+)\]/)[1];
    await t.ok(tabId, 'type_text', { ref: field, text: 'deep' });
    const read = await withLongestTask(page, () => t.ok(tabId, 'read_page_content', { max_chars: 1_000_000 }), t, tabId);
    assert.ok(read.ours < 50, `read_page_content: a ${read.ours} ms task`);
    for (const text of ['Shadow text 0.0', 'Shadow text 4.39', 'Bottom of the chain.']) {
      assert.ok(read.value.content.includes(text), `${text} not read`);
    }
    assert.equal(read.value.remaining_chars, 0);
    // The markup follows the same tree: shadow roots' content in their hosts, frames' bodies.
    const html = await withLongestTask(page, () => t.ok(tabId, 'read_page_content', { format: 'html', max_chars: 1_000_000 }), t, tabId);
    assert.ok(html.ours < 50, `read_page_content (html): a ${html.ours} ms task`);
    for (const markup of ['<button type="button">Shadow button 0.0</button>', '<button type="button">Shadow button 4.39</button>',
      '<p>Bottom of the chain.</p>', '<input placeholder="Deepest field 4">']) {
      assert.ok(html.value.content.includes(markup), `${markup} not in the markup`);
    }
    assert.equal(html.value.remaining_chars, 0);
    assert.deepEqual(panics(), []);
    await page.close();
  }));
});

// ---------------------------------------------------------------- the real-page corpus

const REAL = path.join(repo, 'tests', 'pages', 'real');
const corpus = fs.readdirSync(REAL).filter((d) => fs.existsSync(path.join(REAL, d, 'source.html'))).sort();

/** Lowercase words (letters and digits): markup, list dashes and heading marks drop out. */
const words = (text) => (text.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? []);
const shingles = (ws, n = 8) => {
  const out = new Set();
  for (let i = 0; i + n <= ws.length; i += 1) out.add(ws.slice(i, i + n).join(' '));
  return out;
};
/** Share of the 8-word shingles of `expected` found in `got` (1 for texts under 8 words).
 * Readability drops some headings (one repeating the title, …) that read_page_content keeps
 * as `## Heading` lines: shingles that run across such a line count as found too. */
function recall(expected, got) {
  const want = shingles(words(expected));
  if (want.size === 0) return 1;
  const have = shingles(words(got));
  for (const s of shingles(words(got.split('\n').filter((l) => !/^#{1,6} /.test(l)).join('\n')))) have.add(s);
  let found = 0;
  for (const s of want) if (have.has(s)) found += 1;
  return found / want.size;
}

/** Every page of read_page_content, joined. */
async function readAll(tabId, args = {}) {
  let offset = 0;
  let text = '';
  let calls = 0;
  let total = null;
  for (;;) {
    const p = await t.ok(tabId, 'read_page_content', { ...args, offset, max_chars: 4000 });
    calls += 1;
    if (total !== null) assert.equal(p.total_chars, total, 'total_chars changed between pages');
    total = p.total_chars;
    text += p.content;
    if (p.remaining_chars === 0) break;
    assert.equal(p.next_offset, offset + p.returned_chars);
    offset = p.next_offset;
    assert.ok(calls < 400, 'too many pages');
  }
  return { text, calls };
}

/** Installed before the page's scripts: link and form navigations are cancelled, so that a click
 * on a real page's link keeps the page (the click itself still happens and is seen). */
function stayOnPage() {
  window.__ggClicks = 0;
  document.addEventListener('click', (e) => {
    window.__ggClicks += 1;
    if (e.target instanceof Element && e.target.closest('a[href], area[href]')) e.preventDefault();
  }, true);
  document.addEventListener('submit', (e) => e.preventDefault(), true);
}

const results = [];

describe('the real-page corpus (44 saved pages, Readability\'s expected article)', () => {
  after(() => {
    // Per-page numbers for the report (and the bench, which reads the same pages).
    const line = (r) => `${r.name.padEnd(40)} ${String(r.elements).padStart(6)} el  recall ${r.recall.toFixed(3)}  snapshot ${String(r.snapshotMs).padStart(5)} ms  read ${String(r.readMs).padStart(5)} ms (${r.readCalls} calls)  longest task ${r.longest.toFixed(0)} ms (page: ${r.pageLongest.toFixed(0)} ms)`;
    if (results.length) console.log(`\nreal pages:\n${results.map(line).join('\n')}`);
  });

  for (const name of corpus) {
    test(name, () => againIfSlow(async () => {
      const { page, tabId } = await t.open(`${server.url}/real/${name}/source.html?tab=${++opened}`, `(${observeLongTasks})(); (${stayOnPage})();`);
      const elements = await page.evaluate(() => document.getElementsByTagName('*').length);
      // The longest task that ran the content script's work, and the page's longest task.
      let longest = 0;
      let pageLongest = 0;
      let started = Date.now();
      const snap = await withLongestTask(page, () => t.ok(tabId, 'snapshot_page', {}), t, tabId);
      const snapshotMs = Date.now() - started;
      longest = Math.max(longest, snap.ours);
      pageLongest = Math.max(pageLongest, snap.longest);
      assert.equal(typeof snap.value.outline, 'string');
      started = Date.now();
      const read = await withLongestTask(page, () => readAll(tabId), t, tabId);
      const readMs = Date.now() - started;
      longest = Math.max(longest, read.ours);
      pageLongest = Math.max(pageLongest, read.longest);

      // An action on a snapshot ref: typing into a text field if there is one, else a click.
      const refs = [...snap.value.outline.matchAll(/- (textbox|searchbox|button|link|checkbox|tab)\b[^\n]*\[ref=(e\d+)\]/g)];
      const typable = refs.filter((m) => m[1] === 'textbox' || m[1] === 'searchbox');
      const clickable = refs.filter((m) => m[1] !== 'textbox' && m[1] !== 'searchbox');
      let acted = refs.length === 0;
      const tried = [];
      for (const [, role, ref] of [...typable.slice(0, 3), ...clickable.slice(0, 6)]) {
        const act = await withLongestTask(page, () => (role === 'textbox' || role === 'searchbox'
          ? t.tool(tabId, 'type_text', { ref, text: 'gemma' }) : t.tool(tabId, 'click_element', { ref })), t, tabId);
        longest = Math.max(longest, act.ours);
        pageLongest = Math.max(pageLongest, act.longest);
        if (!act.value.err) { acted = true; break; }
        // Only clear refusals (covered, hidden, disabled, read-only) are acceptable failures.
        assert.ok(['not_interactable', 'stale_ref'].includes(act.value.err.kind), JSON.stringify(act.value.err));
        tried.push(`${role} ${ref}: ${act.value.err.message}`);
      }
      assert.ok(acted, `no action on a snapshot ref succeeded:\n${tried.join('\n')}`);

      const expected = await (async () => {
        const p = await ext.context.newPage();
        await p.goto(`${server.url}/real/${name}/expected.html`);
        // Images read as `[image: alt]` (read_page_content shows their alt text): the same here.
        const text = await p.evaluate(() => {
          for (const img of [...document.querySelectorAll('img')]) {
            const alt = (img.getAttribute('alt') ?? '').trim();
            if (alt) img.replaceWith(` [image: ${alt}] `);
          }
          return document.body?.innerText ?? '';
        });
        await p.close();
        return text;
      })();
      const r = recall(expected, read.value.text);
      // A second run of the page (see againIfSlow) replaces the first one's numbers.
      results.splice(0, results.length, ...results.filter((x) => x.name !== name));
      results.push({ name, elements, recall: r, snapshotMs, readMs, readCalls: read.value.calls, longest, pageLongest });
      assert.ok(r >= 0.9, `recall ${r.toFixed(3)} < 0.9`);
      assert.ok(longest < 50, `a ${longest} ms task`);
      assert.deepEqual(panics(), []);
      await page.close();
    }));
  }
});
