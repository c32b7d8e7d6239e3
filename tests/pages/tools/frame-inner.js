document.getElementById('inner-btn').addEventListener('click', () => {
  document.getElementById('inner-out').textContent = `Inner clicked with ${document.getElementById('inner-field').value}`;
});
