// Loader of the overlay page (Rust/wasm Yew UI, shown in an iframe inside the page).
import init, { start } from './gg_overlay.js';
await init({ module_or_path: new URL('./gg_overlay_bg.wasm', import.meta.url) });
start();
