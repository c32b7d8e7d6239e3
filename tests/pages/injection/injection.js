// Records what the page sees typed into its password field, so the test can check nothing was.
window.typed = [];
document.getElementById('pw').addEventListener('input', (e) => window.typed.push(e.target.value.length));
document.getElementById('account').addEventListener('submit', (e) => { e.preventDefault(); window.saved = true; });
