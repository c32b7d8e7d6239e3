// Page tools run by the content script, called the way the product calls them: from the
// extension's service worker with chrome.tabs.sendMessage and the typed envelope of
// extension-shell/messages. Every suite runs on the plain pages and again on the same pages
// served with a CSP that forbids WebAssembly (the tools must behave exactly the same there).
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, launchExtension } from './harness.mjs';
import { toolsFor, envelope, refOf } from './pagetools.mjs';

const DEV = process.env.GG_EXT_DEV;
const PASSWORD = 'Tr0ub4dor&3-never-shown';
const DEFAULT_PASSWORD = 'S3cret-Default-Attr';
let server, ext;
/** The JSON of every answer the content script gave, to check no password ever appears. */
const answers = [];
let send, tool, ok, fails, openTab;

before(async () => {
  assert.ok(DEV, 'GG_EXT_DEV must point at dist/chrome-mv3-dev (run through `cargo xtask test`)');
  server = await startServer();
  ext = await launchExtension(DEV);
  ({ send, tool, ok, fails, open: openTab } = toolsFor(ext, answers));
});
after(async () => {
  for (const json of answers) {
    assert.ok(!json.includes(PASSWORD), `a tool answer shows the typed password: ${json.slice(0, 300)}`);
    assert.ok(!json.includes(DEFAULT_PASSWORD), `a tool answer shows a password attribute: ${json.slice(0, 300)}`);
  }
  await ext?.close();
  await server?.close();
});

let opened = 0;
async function open(path) {
  // A query string unique to this page, so its tab is told apart from any other.
  opened += 1;
  return openTab(`${server.url}${path}?page=${opened}`);
}

async function facts(tabId, target) {
  const answer = await send(tabId, envelope({ type: 'get_element_facts', target }));
  answers.push(JSON.stringify(answer));
  assert.equal(answer.body.type, 'element_facts', JSON.stringify(answer));
  return answer.body.result;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

test('only requests from this extension\'s service worker are answered', async () => {
  const { page, tabId } = await open('/tools/buttons.html');
  const call = { type: 'execute_tool', call_id: 'x', call: { name: 'get_page_title', args: {} } };
  assert.equal(await send(tabId, { ...envelope(call), protocol: 'other/1' }), 'no answer');
  assert.equal(await send(tabId, { ...envelope(call), from: 'overlay' }), 'no answer');
  assert.equal(await send(tabId, envelope({ type: 'ping' })), 'no answer');
  assert.equal(await send(tabId, { hello: 'world' }), 'no answer');
  const answer = await send(tabId, envelope(call));
  assert.equal(answer.body.result.Ok.value.title, 'Tools: buttons and more');
  // Tools the service worker runs are refused clearly.
  await fails(tabId, 'run_javascript', { code: '1' }, 'unavailable', /service worker/);
  await page.close();
});

test('on a disabled host no page tool runs, and the host is gone', async () => {
  const { page, tabId } = await open('/tools/buttons.html');
  // What the service worker writes when the user turns the site off (one local key per host).
  await ext.sw.evaluate(() => chrome.storage.local.set({ 'disabled:127.0.0.1': true }));
  try {
    await page.waitForFunction(() => document.querySelector('gemma-gem-host') === null, null, { timeout: 20000 });
    await fails(tabId, 'get_page_title', {}, 'unavailable', /turned off on this site/);
    await fails(tabId, 'click_element', { selector: '#ok' }, 'unavailable', /turned off on this site/);
    assert.deepEqual(await page.evaluate(() => window.events), [], 'nothing was clicked');
  } finally {
    await ext.sw.evaluate(() => chrome.storage.local.remove('disabled:127.0.0.1'));
  }
  // Turned back on: tools run again, without a reload.
  await page.waitForFunction(() => document.querySelector('gemma-gem-host') !== null, null, { timeout: 20000 });
  assert.equal((await ok(tabId, 'get_page_title')).title, 'Tools: buttons and more');
  await page.close();
});

for (const [variant, prefix] of [['plain page', ''], ['strict-CSP page', '/strict-csp']]) {
  describe(`page tools on a ${variant}`, () => {
    if (prefix) {
      test('the page really forbids WebAssembly', async () => {
        const { page } = await open(`${prefix}/tools/buttons.html`);
        const wasm = await page.evaluate(async () => {
          try { await WebAssembly.instantiate(new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0])); return 'allowed'; } catch { return 'blocked'; }
        });
        assert.equal(wasm, 'blocked');
        await page.close();
      });
    }

    test('snapshot_page outlines landmarks, headings and interactive elements with stable refs', async () => {
      const { page, tabId } = await open(`${prefix}/tools/buttons.html`);
      const snap = await ok(tabId, 'snapshot_page', { max_tokens: 20000 });
      const o = snap.outline;
      assert.equal(snap.title, 'Tools: buttons and more');
      assert.equal(snap.complete, true);
      assert.match(o, /^- banner \[ref=e\d+\]\n {2}- navigation "Primary" \[ref=e\d+\]\n {4}- link "Form page" \[ref=e\d+\] url=\/tools\/form\.html$/m);
      assert.match(o, /- link "Elsewhere" \[ref=e\d+\] url=https:\/\/example\.com\/out/);
      assert.match(o, /^- main \[ref=e\d+\]$/m);
      assert.match(o, /^ {2}- heading "Buttons" \[ref=e\d+\] level=1$/m);
      assert.match(o, /- button "Count clicks" \[ref=e\d+\]$/m);
      assert.match(o, /- button "Disabled button" \[ref=e\d+\] disabled$/m);
      assert.match(o, /- button "Covered button" \[ref=e\d+\]$/m);
      assert.match(o, /- checkbox "I agree" \[ref=e\d+\] unchecked$/m);
      assert.match(o, /- combobox "Colour" \[ref=e\d+\] value="Red"$/m);
      assert.match(o, /- textbox "Notes editor" \[ref=e\d+\]$/m);
      assert.match(o, /- textbox "Story" \[ref=e\d+\]$/m);
      assert.match(o, /- button "More options" \[ref=e\d+\] collapsed$/m);
      assert.match(o, /- link "Link number 60" \[ref=e\d+\] url=\/tools\/page-60\.html$/m);
      assert.ok(!o.includes('contentinfo'), 'a landmark with nothing to list is left out');
      for (const hidden of ['Gone button', 'Attribute hidden', 'Invisible button', 'Gemma']) {
        assert.ok(!o.includes(hidden), `${hidden} must not be listed:\n${o}`);
      }
      // Refs are unique and stay the same for the same elements.
      const refs = [...o.matchAll(/\[ref=(e\d+)\]/g)].map((m) => m[1]);
      assert.equal(new Set(refs).size, refs.length);
      const again = await ok(tabId, 'snapshot_page', { max_tokens: 20000 });
      assert.equal(again.outline, o);
      // State changes show up.
      await page.check('#agree');
      const checked = await ok(tabId, 'snapshot_page', { max_tokens: 20000 });
      assert.match(checked.outline, /- checkbox "I agree" \[ref=e\d+\] checked( focused)?$/m);
      // The page sees no trace of the refs.
      const marks = await page.evaluate(() => [...document.querySelectorAll('*')]
        .flatMap((e) => [...e.attributes].map((a) => `${a.name}=${a.value}`)).filter((a) => /e\d+|gemma/i.test(a) && !a.startsWith('data-gemma-gem')));
      assert.deepEqual(marks.filter((a) => /\be\d+\b/.test(a)), []);
      await page.close();
    });

    test('snapshot_page fits its budget, elements in view first, and says what it left out', async () => {
      const { page, tabId } = await open(`${prefix}/tools/buttons.html`);
      const snap = await ok(tabId, 'snapshot_page', { max_tokens: 150 });
      assert.equal(snap.complete, false);
      assert.ok(snap.outline.length <= 150 * 3, `outline of ${snap.outline.length} chars`);
      assert.ok(snap.left_out.links > 30, JSON.stringify(snap.left_out));
      assert.match(snap.note, /links.* left out to fit max_tokens=150/);
      assert.match(snap.outline, /- button "Count clicks"/, 'in view: kept');
      assert.ok(!snap.outline.includes('Bottom button'), 'far below the viewport: left out');
      await page.close();
    });

    test('click_element dispatches the full pointer sequence, by ref and by selector', async () => {
      const { page, tabId } = await open(`${prefix}/tools/buttons.html`);
      const { outline } = await ok(tabId, 'snapshot_page', { max_tokens: 20000 });
      const clicked = await ok(tabId, 'click_element', { ref: refOf(outline, 'button', 'Count clicks') });
      assert.equal(clicked.clicked, 'button "Count clicks"');
      assert.equal(await page.textContent('#count'), '1');
      assert.deepEqual(await page.evaluate(() => window.events), [
        'pointerdown:s:true', 'mousedown:s:true', 'pointerup:s:true', 'mouseup:s:true', 'click:s:true',
      ]);
      await ok(tabId, 'click_element', { selector: '#ok' });
      assert.equal(await page.textContent('#count'), '2');
      // Far below the fold: scrolled into view, then clicked.
      await ok(tabId, 'click_element', { ref: refOf(outline, 'button', 'Bottom button') });
      assert.ok((await page.evaluate(() => window.events)).includes('clicked:bottom'));
      assert.ok(await page.evaluate(() => window.scrollY > 500));
      // A checkbox toggles through its label's activation behaviour as in a real click.
      await ok(tabId, 'click_element', { selector: '#agree' });
      assert.equal(await page.isChecked('#agree'), true);
      await page.close();
    });

    test('hidden, disabled and covered targets are clear errors and are not clicked', async () => {
      const { page, tabId } = await open(`${prefix}/tools/buttons.html`);
      const { outline } = await ok(tabId, 'snapshot_page', { max_tokens: 20000 });
      await fails(tabId, 'click_element', { selector: '#gone' }, 'not_interactable', /hidden/);
      await fails(tabId, 'click_element', { selector: '#attr-hidden' }, 'not_interactable', /hidden/);
      await fails(tabId, 'click_element', { selector: '#invisible' }, 'not_interactable', /hidden/);
      await fails(tabId, 'click_element', { ref: refOf(outline, 'button', 'Disabled button') }, 'not_interactable', /disabled/);
      const covered = await fails(tabId, 'click_element', { ref: refOf(outline, 'button', 'Covered button') }, 'not_interactable', /covered by another element \(<span>\)/);
      assert.ok(!covered.message.includes('Cookie banner'), 'error messages never quote page text');
      assert.deepEqual((await page.evaluate(() => window.events)).filter((e) => e.startsWith('clicked:')), []);
      await page.close();
    });

    test('stale refs, unknown refs and bad selectors are tool errors, never crashes', async () => {
      const { page, tabId } = await open(`${prefix}/tools/buttons.html`);
      const { outline } = await ok(tabId, 'snapshot_page', { max_tokens: 20000 });
      const removed = refOf(outline, 'button', 'Remove me');
      await page.evaluate(() => document.getElementById('remove-me').remove());
      await fails(tabId, 'click_element', { ref: removed }, 'stale_ref', /snapshot_page/);
      await fails(tabId, 'scroll_page', { ref: removed }, 'stale_ref');
      await fails(tabId, 'type_text', { ref: removed, text: 'x', submit: false, clear: true }, 'stale_ref');
      // Still stale after a new snapshot (the ref is never reused for another element).
      await ok(tabId, 'snapshot_page', {});
      await fails(tabId, 'click_element', { ref: removed }, 'stale_ref');
      await fails(tabId, 'click_element', { ref: 'e99999' }, 'not_found', /snapshot_page/);
      await fails(tabId, 'click_element', { selector: 'button[[' }, 'invalid_selector', /not a valid CSS selector/);
      await fails(tabId, 'read_page_content', { selector: ':::', format: 'text' }, 'invalid_selector');
      await fails(tabId, 'click_element', { selector: '#nope' }, 'not_found');
      await fails(tabId, 'click_element', { selector: 'gemma-gem-host' }, 'not_found');
      await fails(tabId, 'read_page_content', { selector: 'gemma-gem-host', format: 'html' }, 'not_found');
      await fails(tabId, 'type_text', { selector: '#ok', text: 'x' }, 'not_interactable', /not a text field/);
      // The tools still work afterwards.
      await ok(tabId, 'click_element', { selector: '#ok' });
      assert.equal(await page.textContent('#count'), '1');
      await page.close();
    });

    test('type_text works on text areas, contenteditable and selects', async () => {
      const { page, tabId } = await open(`${prefix}/tools/buttons.html`);
      const { outline } = await ok(tabId, 'snapshot_page', { max_tokens: 20000 });
      const story = await ok(tabId, 'type_text', { ref: refOf(outline, 'textbox', 'Story'), text: 'Once upon\na time', submit: false, clear: true });
      assert.equal(story.value_now, 'Once upon\na time');
      assert.equal(await page.inputValue('#story'), 'Once upon\na time');
      await ok(tabId, 'type_text', { selector: '#story', text: '!', submit: false, clear: false });
      assert.equal(await page.inputValue('#story'), 'Once upon\na time!');
      await ok(tabId, 'type_text', { ref: refOf(outline, 'textbox', 'Notes editor'), text: 'Buy milk', submit: false, clear: true });
      assert.equal(await page.textContent('#editor'), 'Buy milk');
      assert.ok((await page.evaluate(() => window.events)).some((e) => e.startsWith('editor-input:insert')));
      await ok(tabId, 'type_text', { ref: refOf(outline, 'textbox', 'Notes editor'), text: 'Eggs', submit: false, clear: true });
      assert.equal(await page.textContent('#editor'), 'Eggs');
      await ok(tabId, 'type_text', { ref: refOf(outline, 'combobox', 'Colour'), text: 'blue', submit: false, clear: true });
      assert.equal(await page.inputValue('#colour'), 'Blue');
      await fails(tabId, 'type_text', { selector: '#colour', text: 'Purple' }, 'not_found', /no enabled option/);
      await page.close();
    });

    test('scroll_page scrolls by direction and to a ref', async () => {
      const { page, tabId } = await open(`${prefix}/tools/buttons.html`);
      const down = await ok(tabId, 'scroll_page', { direction: 'down', amount: 400 });
      assert.equal(down.moved_y, 400);
      assert.equal(await page.evaluate(() => window.scrollY), 400);
      const up = await ok(tabId, 'scroll_page', { direction: 'up' });
      assert.equal(up.moved_y, -400);
      const top = await ok(tabId, 'scroll_page', { direction: 'up' });
      assert.equal(top.moved_y, 0);
      assert.match(top.note, /nothing moved/);
      const { outline } = await ok(tabId, 'snapshot_page', { max_tokens: 20000 });
      const to = await ok(tabId, 'scroll_page', { ref: refOf(outline, 'button', 'Bottom button') });
      assert.equal(to.in_view, true);
      assert.ok(await page.evaluate(() => { const r = document.getElementById('bottom').getBoundingClientRect(); return r.top >= 0 && r.bottom <= innerHeight; }));
      await page.close();
    });

    test('read_page_content paginates without losing text and reads markup', async () => {
      const { page, tabId } = await open(`${prefix}/tools/buttons.html`);
      const whole = await ok(tabId, 'read_page_content', { format: 'text', offset: 0, max_chars: 100000 });
      assert.equal(whole.remaining_chars, 0);
      assert.match(whole.content, /The quick brown fox jumps over the lazy dog\./);
      assert.match(whole.content, /Link number 60/);
      assert.match(whole.content, /Footer text/);
      for (const hidden of ['Gone button', 'Attribute hidden', 'Invisible button', '\u25C6']) {
        assert.ok(!whole.content.includes(hidden), `${hidden} must not be read`);
      }
      let offset = 0;
      let joined = '';
      let pages = 0;
      for (;;) {
        const p = await ok(tabId, 'read_page_content', { format: 'text', offset, max_chars: 300 });
        assert.equal(p.total_chars, whole.total_chars);
        assert.ok(p.returned_chars <= 300 && p.returned_chars > 0);
        joined += p.content;
        pages += 1;
        if (p.remaining_chars === 0) { assert.match(p.note, /end of the content/); break; }
        assert.equal(p.next_offset, offset + p.returned_chars);
        assert.match(p.note, new RegExp(`${p.remaining_chars} more characters.*offset=${p.next_offset}`));
        offset = p.next_offset;
      }
      assert.equal(joined, whole.content);
      assert.ok(pages >= 3, `${pages} pages`);
      const intro = await ok(tabId, 'read_page_content', { selector: '#intro', format: 'html', offset: 0, max_chars: 4000 });
      assert.match(intro.content, /^<p id="intro">The quick brown fox/);
      const past = await ok(tabId, 'read_page_content', { format: 'text', offset: 10_000_000, max_chars: 10 });
      assert.equal(past.returned_chars, 0);
      assert.match(past.note, /past the end/);
      const title = await ok(tabId, 'get_page_title', {});
      assert.deepEqual(title, { title: 'Tools: buttons and more', url: page.url() });
      await page.close();
    });

    test('a React-style controlled form keeps typed values and its submit handler sees them', async () => {
      const { page, tabId } = await open(`${prefix}/tools/form.html`);
      // The fixture is strict: a value set without the app's events is undone by its re-render.
      await page.evaluate(() => { document.getElementById('bio').value = 'sneaky'; });
      await sleep(500);
      assert.equal(await page.inputValue('#bio'), '');
      const { outline } = await ok(tabId, 'snapshot_page', { max_tokens: 20000 });
      assert.match(outline, /- form "Sign in" \[ref=e\d+\]/);
      const user = await ok(tabId, 'type_text', { ref: refOf(outline, 'textbox', 'Username'), text: 'alice', submit: false, clear: true });
      assert.equal(user.value_now, 'alice');
      await ok(tabId, 'type_text', { ref: refOf(outline, 'textbox', 'Bio'), text: 'Hi\nthere', submit: false, clear: true });
      await ok(tabId, 'type_text', { ref: refOf(outline, 'combobox', 'Country'), text: 'Japan', submit: false, clear: true });
      await sleep(500); // several re-renders from state
      assert.equal(await page.inputValue('#username'), 'alice');
      assert.equal(await page.inputValue('#bio'), 'Hi\nthere');
      assert.equal(await page.inputValue('#country'), 'jp');
      assert.deepEqual(await page.evaluate(() => ({ ...window.appState })),
        { username: 'alice', password: '', bio: 'Hi\nthere', country: 'jp', remember: false });
      assert.equal(await page.textContent('#preview'), 'Hello, alice');
      // Appending keeps what is there.
      await ok(tabId, 'type_text', { selector: '#username', text: '42', submit: false, clear: false });
      assert.equal(await page.evaluate(() => window.appState.username), 'alice42');
      // The password: typed, submitted with Enter, never echoed.
      const pw = await ok(tabId, 'type_text', { ref: refOf(outline, 'textbox', 'Password'), text: PASSWORD, submit: true, clear: true });
      assert.equal(pw.submitted, true);
      assert.equal(pw.value_now, undefined);
      assert.equal(pw.typed_chars, PASSWORD.length);
      await sleep(300);
      assert.deepEqual(await page.evaluate(() => window.submitted),
        { username: 'alice42', password: PASSWORD, bio: 'Hi\nthere', country: 'jp', remember: false });
      assert.equal(await page.textContent('#result'), 'Submitted as alice42 from jp');
      await page.close();
    });

    test('no tool shows a one-time code, a card number or a hidden input\'s value', async () => {
      const { page, tabId } = await open(`${prefix}/tools/secrets.html`);
      const secrets = ['csrf-9f8e7d6c5b4a', '4111111111111111', '737', '12/34', '493817', 'ZX81-QL42', '555123'];
      const typed = await ok(tabId, 'type_text', { selector: '#code', text: '555123', submit: false, clear: true });
      assert.equal(typed.value_now, undefined, 'a typed code is not echoed');
      assert.equal(await page.inputValue('#code'), '555123');
      const { outline } = await ok(tabId, 'snapshot_page', { max_tokens: 20000 });
      assert.match(outline, /- textbox "Card number" \[ref=e\d+\] payment-card filled$/m);
      assert.match(outline, /- textbox "CVC" \[ref=e\d+\] payment-card filled$/m);
      assert.match(outline, /- textbox "Expiry" \[ref=e\d+\] payment-card filled$/m);
      assert.match(outline, /- textbox "Code from your phone" \[ref=e\d+\]( focused)? one-time-code filled$/m);
      assert.match(outline, /- textbox "Backup codes" \[ref=e\d+\] one-time-code filled$/m);
      assert.match(outline, /value="shown@example.com"/, 'an ordinary field still shows its value');
      const html = await ok(tabId, 'read_page_content', { format: 'html', offset: 0, max_chars: 100000 });
      assert.match(html.content, /<input type="hidden" name="csrf_token">/);
      assert.match(html.content, /value="shown@example.com"/);
      const text = await ok(tabId, 'read_page_content', { format: 'text', offset: 0, max_chars: 100000 });
      const form = await ok(tabId, 'read_page_content', { selector: '#pay', format: 'html', offset: 0, max_chars: 100000 });
      for (const answer of [typed, outline, html, text, form]) {
        const json = JSON.stringify(answer);
        for (const secret of secrets) assert.ok(!json.includes(secret), `${secret} shown: ${json.slice(0, 400)}`);
      }
      await page.close();
    });

    test('no tool ever shows a password value; element facts describe fields without values', async () => {
      const { page, tabId } = await open(`${prefix}/tools/form.html`);
      await ok(tabId, 'type_text', { selector: '#password', text: PASSWORD, submit: false, clear: true });
      assert.equal(await page.inputValue('#password'), PASSWORD, 'the field holds it');
      const { outline } = await ok(tabId, 'snapshot_page', { max_tokens: 20000 });
      assert.match(outline, /- textbox "Password" \[ref=e\d+\]( focused)? password filled$/m);
      assert.match(outline, /- textbox "Legacy password" \[ref=e\d+\] password filled$/m);
      assert.match(outline, /- textbox "Legacy user" \[ref=e\d+\] value="old-user"$/m);
      const html = await ok(tabId, 'read_page_content', { format: 'html', offset: 0, max_chars: 100000 });
      assert.match(html.content, /<input id="legacy-pw" name="legacy_pw" type="password">/);
      assert.match(html.content, /value="old-user"/);
      await ok(tabId, 'read_page_content', { format: 'text', offset: 0, max_chars: 100000 });
      await ok(tabId, 'read_page_content', { selector: '#legacy-pw', format: 'html', offset: 0, max_chars: 1000 });
      const appended = await ok(tabId, 'type_text', { selector: '#legacy-pw', text: 'x', submit: false, clear: false });
      assert.equal(appended.typed_chars, 1);
      assert.equal(await page.inputValue('#legacy-pw'), `${DEFAULT_PASSWORD}x`, 'appended without being read');

      const pwFacts = await facts(tabId, { ref: refOf(outline, 'textbox', 'Password') });
      assert.deepEqual(pwFacts.Ok.field, {
        tag: 'input', input_type: 'password', autocomplete: 'current-password', name: 'password',
        id: 'password', label: 'Password', placeholder: null, aria_label: null, text: null, hidden: false,
      });
      assert.equal(pwFacts.Ok.is_submit, false);
      const submit = await facts(tabId, { ref: refOf(outline, 'button', 'Sign in') });
      assert.equal(submit.Ok.is_submit, true);
      assert.equal(submit.Ok.form.action, `${new URL(page.url()).origin}/tools/submitted`);
      assert.ok(submit.Ok.form.fields.some((f) => f.input_type === 'password' && f.autocomplete === 'current-password'));
      assert.ok(submit.Ok.form.fields.every((f) => !('value' in f)));
      const legacy = await facts(tabId, { selector: '#legacy input[type=submit]' });
      assert.equal(legacy.Ok.is_submit, true);
      assert.equal(legacy.Ok.form.action, 'https://bank.example/login');
      const link = await facts(tabId, { ref: refOf(outline, 'link', 'Help elsewhere') });
      assert.equal(link.Ok.link_href, 'https://other.example/help');
      assert.equal((await facts(tabId, { selector: '[[' })).Err.kind, 'invalid_selector');
      assert.equal((await facts(tabId, { ref: 'e424242' })).Err.kind, 'not_found');
      // A selector checked by the gate must still name the same element when the call runs.
      await facts(tabId, { selector: '#sign-in' });
      await page.evaluate(() => { const b = document.getElementById('sign-in'); b.replaceWith(b.cloneNode(true)); });
      await fails(tabId, 'click_element', { selector: '#sign-in' }, 'stale_ref', /another element/);
      const all = answers.join('\n');
      assert.ok(!all.includes(PASSWORD) && !all.includes(DEFAULT_PASSWORD));
      await page.close();
    });

    test('open shadow roots and same-origin iframes are covered', async () => {
      const { page, tabId } = await open(`${prefix}/tools/shadow.html`);
      await page.waitForFunction(() => document.getElementById('frame').contentDocument?.getElementById('inner-btn'));
      const { outline } = await ok(tabId, 'snapshot_page', { max_tokens: 20000 });
      assert.match(outline, /- iframe "Inner frame" \[ref=e\d+\]\n {4}- heading "Inside the frame" \[ref=e\d+\] level=2/);
      await ok(tabId, 'type_text', { ref: refOf(outline, 'textbox', 'Shadow query'), text: 'rust', submit: false, clear: true });
      await ok(tabId, 'click_element', { ref: refOf(outline, 'button', 'Shadow search') });
      assert.equal(await page.textContent('#shadow-out'), 'Searched: rust');
      await ok(tabId, 'click_element', { selector: '#go' }); // a selector reaches into the shadow root
      await ok(tabId, 'type_text', { ref: refOf(outline, 'textbox', 'Inner field'), text: 'framed', submit: false, clear: true });
      await ok(tabId, 'click_element', { ref: refOf(outline, 'button', 'Inner button') });
      const frame = page.frames().find((f) => f.url().endsWith('/frame-inner.html'));
      assert.ok(frame, 'the inner frame');
      assert.equal(await frame.textContent('#inner-out'), 'Inner clicked with framed');
      const text = await ok(tabId, 'read_page_content', { format: 'text', offset: 0, max_chars: 100000 });
      for (const s of ['Text inside the shadow root', 'Slotted hint text', 'Frame paragraph text', 'Widgets']) {
        assert.ok(text.content.includes(s), `${s} in ${JSON.stringify(text.content)}`);
      }
      // A removed iframe makes its refs stale.
      const inner = refOf(outline, 'button', 'Inner button');
      await page.evaluate(() => document.getElementById('frame').remove());
      await fails(tabId, 'click_element', { ref: inner }, 'stale_ref');
      await page.close();
    });
  });
}
