// Loader of the service worker (Rust/wasm in ./background/). Chrome requires event listeners to be
// registered synchronously at start-up, so they are registered here and forwarded once wasm is ready.
import init, * as gg from './background/gg_background.js';
const ready = init({ module_or_path: new URL('./background/gg_background_bg.wasm', import.meta.url) }).then(() => (gg.start(), gg));
chrome.runtime.onMessage.addListener((message, sender, respond) => {
  ready.then((w) => w.on_message(message, sender)).then(respond, (e) => respond({ error: String(e) }));
  return true;
});
chrome.runtime.onInstalled.addListener(() => ready.then((w) => w.on_startup()).catch(() => {}));
chrome.runtime.onStartup.addListener(() => ready.then((w) => w.on_startup()).catch(() => {}));
// The keyboard command and the toolbar button toggle the panel (a named global, so the tests can
// call exactly what Chrome calls: synthetic key presses do not reach browser shortcuts).
globalThis.ggOnCommand = (command, tab) => ready.then((w) => w.on_command(command, tab?.id));
chrome.commands.onCommand.addListener(globalThis.ggOnCommand);
chrome.action.onClicked.addListener((tab) => globalThis.ggOnCommand('toggle-overlay', tab));

// Injected by run_javascript into the page's main world (chrome.scripting needs a function object;
// the model's code arrives as data). It returns a JSON-safe, size-capped result.
globalThis.ggPageEval = async function (code) {
  const cap = (s) => (s.length > 8000 ? s.slice(0, 8000) + ` … (${s.length - 8000} more characters)` : s);
  let value;
  try {
    value = await (0, eval)(code);
  } catch (e) {
    const blocked = e instanceof EvalError || /Content Security Policy|unsafe-eval/i.test(String(e));
    return { status: blocked ? 'blocked' : 'error', message: String(e && e.message || e) };
  }
  const seen = new WeakSet();
  const json = JSON.stringify(value === undefined ? null : value, (k, v) => {
    if (typeof v === 'bigint') return v.toString();
    if (typeof v === 'function') return `[function ${v.name || 'anonymous'}]`;
    if (v instanceof Node) return `[${v.nodeName.toLowerCase()} element]`;
    if (v && typeof v === 'object') { if (seen.has(v)) return '[circular]'; seen.add(v); }
    return v;
  }) ?? 'null';
  return { status: 'ok', value: json.length > 8000 ? cap(json) : JSON.parse(json) };
};
