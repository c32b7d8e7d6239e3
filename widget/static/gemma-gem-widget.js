// Gemma Gem widget loader: defines <gemma-gem-widget> and hands everything to the wasm module
// (gg_widget.js, same folder). The model runs in gemma-gem-widget-worker.js (same folder).
import init, { Widget } from './gg_widget.js';

const ready = init({ module_or_path: new URL('./gg_widget_bg.wasm', import.meta.url) });
const workerUrl = new URL('./gemma-gem-widget-worker.js', import.meta.url).href;
const OBSERVED = ['model-source', 'model-size', 'thinking', 'max-iterations', 'temperature', 'tools', 'scope', 'corner', 'open', 'theme', 'system-prompt', 'greeting', 'allow-javascript', 'image-tokens', 'constrain-tool-calls'];

class GemmaGemWidget extends HTMLElement {
  static get observedAttributes() { return OBSERVED; }
  #widget = ready.then(() => new Widget(this, workerUrl));
  connectedCallback() { this.#widget.then((w) => w.connected()); }
  disconnectedCallback() { this.#widget.then((w) => w.disconnected()); }
  attributeChangedCallback(name) { this.#widget.then((w) => w.attribute_changed(name)); }
  ask(text) { return this.#widget.then((w) => w.ask(String(text))); }
  stop() { return this.#widget.then((w) => w.stop()); }
  clear() { return this.#widget.then((w) => w.clear()); }
}

if (!customElements.get('gemma-gem-widget')) customElements.define('gemma-gem-widget', GemmaGemWidget);
