// Loader of the Gemma Gem widget's model worker (a module Worker; Rust/wasm: gg-widget-worker).
// Messages the page posts while the module loads are kept and handed to start(), which handles
// them after posting `started`.
import init, { start } from './gg_widget_worker.js';
const early = [];
self.onmessage = (event) => early.push(event.data);
await init({ module_or_path: new URL('./gg_widget_worker_bg.wasm', import.meta.url) });
await start(early);
