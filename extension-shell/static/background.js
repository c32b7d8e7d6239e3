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
