// Loader of the overlay page (Rust/wasm Yew UI, shown in an iframe inside the page).
import init, { start, on_broadcast, on_settings_changed } from './gg_overlay.js';
await init({ module_or_path: new URL('./gg_overlay_bg.wasm', import.meta.url) });
// Broadcasts of the agent's events; the service worker answers requests, this page never does.
chrome.runtime.onMessage.addListener((message, sender) => {
  if (sender.id === chrome.runtime.id) on_broadcast(message);
  return false;
});
// Settings changed in any tab apply here at once.
// Settings (sync) and per-site data (local, one key per site) changed in any tab apply here at once.
chrome.storage.onChanged.addListener((changes, area) => {
  const perSite = area === 'local' && Object.keys(changes).some((k) => k.startsWith('site:') || k.startsWith('disabled:'));
  if ((area === 'sync' && changes.settings) || perSite) on_settings_changed();
});
start();
