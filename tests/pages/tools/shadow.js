// A widget in an open shadow root (with a slot) whose button reads the shadow input.
class FancySearch extends HTMLElement {
  connectedCallback() {
    const root = this.attachShadow({ mode: 'open' });
    root.innerHTML = '<label>Shadow query <input id="q" name="q"></label>'
      + '<button id="go" type="button">Shadow search</button><p><slot name="hint"></slot></p>'
      + '<p id="shadow-text">Text inside the shadow root</p>';
    root.getElementById('go').addEventListener('click', () => {
      document.getElementById('shadow-out').textContent = `Searched: ${root.getElementById('q').value}`;
    });
  }
}
customElements.define('fancy-search', FancySearch);
