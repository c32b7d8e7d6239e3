// The start page sends the tab to the same server under another origin (127.0.0.1 <-> localhost);
// the target page reports every click it receives to the server (/hit?...), which the test reads.
const button = document.getElementById('next');
button.addEventListener('click', () => {
  if (button.dataset.go === 'other-origin') {
    const other = location.hostname === 'localhost' ? '127.0.0.1' : 'localhost';
    const csp = location.pathname.startsWith('/strict-csp/') ? '/strict-csp' : '';
    location.href = `http://${other}:${location.port}${csp}/hostile-nav/target.html`;
  } else {
    document.body.dataset.clicked = 'yes';
    fetch(`/hit?clicked-on=${encodeURIComponent(location.origin)}`).catch(() => {});
  }
});
