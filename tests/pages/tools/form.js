// A tiny controlled-form app in the spirit of React (no library: nothing is fetched).
// - State is the truth; render() writes it back into the DOM on every input event, on change,
//   on blur and every 200 ms, so a value set without the events the app listens to is undone.
// - Like React's inputValueTracking, each field gets an own `value` property that remembers the
//   value last written through it, and an input event whose value equals that tracked value is
//   ignored. Setting `field.value = x` from page code therefore does NOT reach the state; only
//   the prototype's native setter followed by an input event does.
const state = { username: '', password: '', bio: '', country: 'fr', remember: false };
let renders = 0;
const form = document.getElementById('login');
const fields = [...form.querySelectorAll('input:not([type=checkbox]), textarea, select')];

function nativeDescriptor(node) {
  return Object.getOwnPropertyDescriptor(Object.getPrototypeOf(node), 'value');
}
for (const node of fields) {
  const native = nativeDescriptor(node);
  let tracked = native.get.call(node);
  Object.defineProperty(node, 'value', {
    configurable: true,
    get() { return native.get.call(this); },
    set(v) { tracked = String(v); native.set.call(this, v); },
  });
  node._tracker = { get: () => tracked, set: (v) => { tracked = v; } };
}
function changed(node) {
  const now = nativeDescriptor(node).get.call(node);
  if (now === node._tracker.get()) return false;
  node._tracker.set(now);
  return true;
}
function render() {
  renders += 1;
  for (const node of fields) {
    if (node.value !== state[node.name]) node.value = state[node.name];
  }
  form.elements.remember.checked = state.remember;
  document.getElementById('preview').textContent = state.username ? `Hello, ${state.username}` : '';
  document.getElementById('renders').textContent = String(renders);
}
form.addEventListener('input', (e) => {
  const t = e.target;
  if (t.type === 'checkbox') { state.remember = t.checked; render(); return; }
  if (!changed(t)) return;
  state[t.name] = t.value;
  render();
});
form.addEventListener('change', (e) => {
  const t = e.target;
  if (t.type === 'checkbox') state.remember = t.checked;
  else if (t.tagName === 'SELECT') state.country = t.value;
  render();
});
form.addEventListener('focusout', render);
setInterval(render, 200);
form.addEventListener('submit', (e) => {
  e.preventDefault();
  window.submitted = { ...state };
  document.getElementById('result').textContent = `Submitted as ${state.username} from ${state.country}`;
});
document.getElementById('legacy').addEventListener('submit', (e) => { e.preventDefault(); });
window.appState = state;
render();
