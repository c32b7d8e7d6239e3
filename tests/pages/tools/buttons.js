// Records what happens to the fixture's buttons so the tests can check it.
window.events = [];
let count = 0;
const ok = document.getElementById('ok');
for (const type of ['pointerdown', 'mousedown', 'pointerup', 'mouseup', 'click']) {
  ok.addEventListener(type, (e) => window.events.push(`${type}:${e.isTrusted ? 't' : 's'}:${e.clientX > 0 && e.clientY > 0}`));
}
ok.addEventListener('click', () => { count += 1; document.getElementById('count').textContent = String(count); });
for (const id of ['gone', 'attr-hidden', 'invisible', 'disabled', 'covered', 'bottom']) {
  document.getElementById(id).addEventListener('click', () => window.events.push(`clicked:${id}`));
}
document.getElementById('editor').addEventListener('input', (e) => window.events.push(`editor-input:${e.inputType}`));
const links = document.getElementById('links');
for (let i = 1; i <= 60; i += 1) {
  const li = document.createElement('li');
  const a = document.createElement('a');
  a.href = `/tools/page-${i}.html`;
  a.textContent = `Link number ${i}`;
  li.append(a);
  links.append(li);
}
