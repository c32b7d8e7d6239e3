// The demo page's own behaviour (a page for the assistant to act on): show what was submitted.
document.getElementById('demo-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const data = new FormData(e.target);
  document.getElementById('result').textContent = `Thanks, ${data.get('name') || 'stranger'}: ${data.get('topic')} received.`;
});
