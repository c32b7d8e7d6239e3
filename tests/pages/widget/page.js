// The widget test page: the query string becomes the widget's attributes (`hostile=1` adds a
// stylesheet that attacks it), every event the element fires is recorded in `window.ggEvents`,
// and the name field is a controlled input in React's manner: the app's state is the truth, a
// value set without the input event it listens to is undone, and an input event whose value
// equals the value last written through the field's own `value` setter is ignored.
(() => {
  const params = new URLSearchParams(location.search);
  if (params.get('hostile') === '1') {
    const link = document.createElement('link');
    link.rel = 'stylesheet';
    link.href = 'hostile.css';
    document.head.append(link);
  }
  const widget = document.createElement('gemma-gem-widget');
  for (const [name, value] of params) if (name !== 'hostile' && name !== 'n') widget.setAttribute(name, value);
  window.ggEvents = [];
  for (const type of ['gg-status', 'gg-token', 'gg-tool', 'gg-answer', 'gg-error']) {
    widget.addEventListener(type, (e) => window.ggEvents.push({ type, detail: e.detail }));
  }
  document.body.append(widget);

  const state = { name: '' };
  const input = document.getElementById('name');
  const native = Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, 'value');
  let tracked = '';
  Object.defineProperty(input, 'value', {
    configurable: true,
    get() { return native.get.call(this); },
    set(v) { tracked = String(v); native.set.call(this, v); },
  });
  const render = () => {
    if (input.value !== state.name) input.value = state.name;
    document.getElementById('preview').textContent = state.name ? `Order for ${state.name}` : '';
  };
  input.addEventListener('input', () => {
    const now = native.get.call(input);
    if (now === tracked) return;
    tracked = now;
    state.name = now;
    render();
  });
  setInterval(render, 200);
  window.clicks = [];
  document.getElementById('order').addEventListener('submit', (e) => {
    e.preventDefault();
    window.clicks.push('send');
    document.getElementById('result').textContent = `Ordered for ${state.name || 'nobody'}`;
  });
  document.getElementById('danger').addEventListener('click', () => window.clicks.push('danger'));
})();
