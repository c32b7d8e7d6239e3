// Loader of the content script. Content scripts are classic scripts, so the module (Rust compiled
// to plain JavaScript, no WebAssembly: it must run on pages whose CSP forbids wasm) is imported.
// The loader hands it the messages and keeps it alive: when it throws (a Rust panic traps), a
// fresh copy of the module is started (`?instance=N`: a module of its own, with its own memory),
// answers the calls the failed copy left unanswered and tells the service worker.
(() => {
  const url = chrome.runtime.getURL('content/gg_content.js');
  let module = null;
  let instance = 0;
  let panicText = '';
  /** Calls taken and not yet answered: {message, sender, respond}. */
  const pending = new Set();
  // The module's panic handler reports its message here before it traps.
  globalThis.__ggContentPanic = (text) => { panicText = String(text); };
  const guard = (f) => {
    try { return f(); } catch (e) { crashed(e); return false; }
  };
  // The module's hooks: work that continues in a later task (slices that give the page back).
  // A MessageChannel task: unlike nested timers, it is not clamped to 4 ms.
  const queue = [];
  const channel = new MessageChannel();
  channel.port1.onmessage = () => { const f = queue.shift(); if (f) guard(f); };
  const later = (f) => { queue.push(f); channel.port2.postMessage(0); };
  // A call's first slice runs after the page's next rendering update, so that the style and
  // layout the page has pending are done by the browser in its own task, not forced inside ours
  // (a page that just built 100,000 elements). A hidden tab renders no frames: 100 ms at most.
  const afterFrame = (f) => {
    let done = false;
    const go = () => { if (!done) { done = true; later(f); } };
    requestAnimationFrame(go);
    setTimeout(go, 100);
  };
  const host = { later, afterFrame };
  const load = async () => {
    instance += 1;
    // The copy now in charge (this isolated world's global, which the page cannot see): what a
    // failed copy left running (its host guard's observer) stands down when it is not this.
    globalThis.__ggContentInstance = instance;
    const m = await import(instance === 1 ? url : `${url}?instance=${instance}`);
    m.start(host);
    module = m;
  };
  let ready = load();
  function crashed(e) {
    if (!module) return;
    const detail = panicText || `${e?.name ?? 'Error'}: ${e?.message ?? e}`;
    panicText = '';
    module = null;
    const left = [...pending];
    pending.clear();
    for (const p of left) p.taken = true;
    ready = load().then(() => {
      module.report_crash(detail);
      for (const p of left) guard(() => module.recover(p.message, p.sender, p.respond));
    });
    ready.catch((err) => console.error('[Gemma Gem] the page tools could not restart:', err));
  }
  const dispatch = (message, sender, respond) => {
    const entry = { message, sender, respond };
    pending.add(entry);
    const answer = (a) => { if (pending.delete(entry)) respond(a); };
    const later = guard(() => module.on_message(message, sender, answer));
    // A call the module crashed on is answered by the next copy: keep the channel open.
    if (entry.taken) return true;
    if (later !== true) pending.delete(entry);
    return later === true;
  };
  chrome.runtime.onMessage.addListener((message, sender, respond) => {
    if (module) return dispatch(message, sender, respond);
    // Starting (or restarting): answer once the module is there.
    ready.then(() => { if (!dispatch(message, sender, respond)) respond(undefined); }, () => respond(undefined));
    return true;
  });
  ready.catch((e) => console.error('[Gemma Gem] content script failed to start:', e));
})();
