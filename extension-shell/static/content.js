// Loader of the content script. Content scripts are classic scripts, so the module (Rust compiled
// to plain JavaScript, no WebAssembly: it must run on pages whose CSP forbids wasm) is imported.
(async () => { (await import(chrome.runtime.getURL('content/gg_content.js'))).start(); })()
  .catch((e) => console.error('[Gemma Gem] content script failed to start:', e));
