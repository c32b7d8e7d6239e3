// Frames Gemma Gem's overlay page under the extension's id (given in the query: a real attacker
// learns it from the Web Store), invisible and on top, hoping to drive it or clickjack its
// approval buttons, and records whether it loaded.
const id = new URLSearchParams(location.search).get('ext');
for (const path of ['overlay/overlay.html', 'content/gg_content.js']) {
  const frame = document.createElement('iframe');
  frame.src = `chrome-extension://${id}/${path}`;
  frame.style.cssText = 'position:fixed;inset:0;width:100%;height:100%;opacity:0.01;z-index:2147483647';
  frame.dataset.path = path;
  frame.addEventListener('load', () => { document.body.dataset.loaded = `${document.body.dataset.loaded ?? ''}${path};`; });
  document.body.append(frame);
}
// A script tag for the content script's module, which a page could use to run it itself.
const script = document.createElement('script');
script.type = 'module';
script.src = `chrome-extension://${id}/content/gg_content.js`;
script.addEventListener('load', () => { document.body.dataset.script = 'loaded'; });
script.addEventListener('error', () => { document.body.dataset.script = 'blocked'; });
document.head.append(script);
