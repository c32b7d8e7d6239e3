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

// The top frame of a tab changed: a running turn bound to another document (or origin) stops.
chrome.webNavigation.onCommitted.addListener((d) => {
  if (d.frameId === 0 && d.documentLifecycle !== 'prerender') ready.then((w) => w.on_navigation(d.tabId, d.frameId, d.documentId ?? '', d.url, false));
});
chrome.webNavigation.onHistoryStateUpdated.addListener((d) => {
  if (d.frameId === 0) ready.then((w) => w.on_navigation(d.tabId, d.frameId, d.documentId ?? '', d.url, true));
});

// Settings written in the old format (an older version on another device) are migrated at once.
chrome.storage.onChanged.addListener((changes, area) => {
  if (area === 'sync' && changes.settings) ready.then((w) => w.on_settings_changed());
});

// A closed tab's conversations and state are freed.
chrome.tabs.onRemoved.addListener((tabId) => ready.then((w) => w.on_tab_removed(tabId)));

// Injected by run_javascript into the page's main world (chrome.scripting needs a function object;
// the model's code arrives as data). Everything here runs among the page's own globals, which the
// page may have replaced (eval, JSON, Promise, String...): the answer is only data. Chrome
// serializes it; the service worker checks its shape, caps it and stops waiting after 10 s.
globalThis.ggPageEval = async function (code) {
  let value;
  try {
    value = await (0, eval)(code);
  } catch (e) {
    let message = 'unknown error';
    try { message = String(e && e.message || e); } catch { /* a throwing toString */ }
    const blocked = /Content Security Policy|unsafe-eval|EvalError/i.test(message) || (typeof EvalError === 'function' && e instanceof EvalError);
    return { status: blocked ? 'blocked' : 'error', message };
  }
  return { status: 'ok', value: value === undefined ? null : value };
};
