// Loader of the offscreen document (Rust/wasm: hosts the runtime and the agent loop).
import init, { start } from './gg_offscreen.js';
await init({ module_or_path: new URL('./gg_offscreen_bg.wasm', import.meta.url) });
await start();
