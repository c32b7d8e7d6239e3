// Logs every click and submit instead of doing it (submits are prevented), so that the test can
// check that nothing happened before the user approved it.
const log = (what) => { document.body.dataset.log = `${document.body.dataset.log ?? ''}${what};`; };
for (const id of ['delete', 'buy', 'pay', 'go', 'send']) {
  document.getElementById(id).addEventListener('click', () => log(`click:${id}`));
}
for (const form of document.forms) {
  form.addEventListener('submit', (e) => { e.preventDefault(); log(`submit:${form.id}`); });
}
