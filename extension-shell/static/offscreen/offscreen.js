// Loader of the offscreen document (Rust/wasm: hosts the runtime and the agent loop).
import init, { start, accepts, on_message } from './gg_offscreen.js';
await init({ module_or_path: new URL('./gg_offscreen_bg.wasm', import.meta.url) });
chrome.runtime.onMessage.addListener((message, sender, respond) => {
  if (!accepts(message)) return false;
  on_message(message, sender).then(respond, (e) => respond({ error: String(e) }));
  return true;
});
await start();
