// Generated stress pages for the page tools (tests/e2e/realpages.test.mjs, `cargo xtask bench
// --pages`). Deterministic: the same query string always builds the same DOM.
//   ?kind=buttons&n=N  N buttons in a flat list (the snapshot used to panic from ~500)
//   ?kind=nested&n=N   nested lists and tables of about N elements (panicked from ~1,600)
//   ?kind=big&n=N      about N elements of sections with headings, text, links, buttons, fields;
//                      hidden text of every kind that read_page_content must leave out; at the
//                      end, a field and a button in an open shadow root
//   ?kind=deep         nested open shadow roots, same-origin iframes (frame.html?level=L) and
//                      a 1,000-deep chain of <div>s
// Every generated text is unique (`w<n>` words), so a test can tell which text was read.
(() => {
  const q = new URLSearchParams(location.search);
  const kind = q.get('kind') ?? 'frame';
  const n = Math.max(1, Number(q.get('n') ?? '1000'));
  const words = (seed, count) => {
    const out = [];
    for (let i = 0; i < count; i += 1) out.push(`w${(seed * 7919 + i * 104729) % 1000003}`);
    return out.join(' ');
  };
  const el = (tag, attrs = {}, ...children) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    for (const c of children) e.append(c);
    return e;
  };
  const hidden = () => {
    // Text that must never be read: one element per way of hiding.
    const box = el('section', { id: 'hidden-texts' }, el('h2', {}, 'Hidden texts follow'));
    const ways = {
      'display-none': 'display:none',
      'visibility-hidden': 'visibility:hidden',
      'off-screen': 'position:absolute;left:-10000px;top:0;width:300px',
      'zero-size': 'width:0;height:0;overflow:hidden',
      transparent: 'opacity:0',
    };
    for (const [id, style] of Object.entries(ways)) {
      box.append(el('p', { style, 'data-hidden': id }, `HIDDEN-${id} secret words`));
    }
    box.append(el('p', { 'aria-hidden': 'true', 'data-hidden': 'aria-hidden' }, 'HIDDEN-aria-hidden secret words'));
    box.append(el('p', { hidden: '' }, 'HIDDEN-attribute secret words'));
    box.append(el('p', { id: 'after-hidden' }, 'Visible after the hidden texts.'));
    return box;
  };
  const build = () => {
    const main = document.getElementById('main');
    let count = 0;
    if (kind === 'buttons') {
      const list = el('div', { id: 'buttons' });
      for (let i = 0; i < n; i += 1) list.append(el('button', { type: 'button' }, `Button ${i}`));
      main.append(list);
    } else if (kind === 'nested') {
      while (count < n) {
        const b = count;
        const inner = el('ul', {}, el('li', {}, `Inner ${b} `, el('a', { href: `#i${b}` }, `link ${b}`)),
          el('li', {}, el('ol', {}, el('li', {}, el('button', { type: 'button' }, `Deep ${b}`)))));
        const table = el('table', {}, el('tbody', {}, el('tr', {}, el('th', {}, `Head ${b}`), el('td', {}, el('button', { type: 'button' }, `Cell ${b}`))),
          el('tr', {}, el('td', {}, el('ul', {}, el('li', {}, `Row ${b}`))), el('td', {}, el('input', { placeholder: `Field ${b}` })))));
        main.append(el('ul', {}, el('li', {}, `Outer ${b}`, inner, table)));
        count += 24;
      }
    } else if (kind === 'big') {
      main.append(hidden());
      let i = 0;
      while (count < n) {
        const section = el('section', { id: `s${i}` },
          el('h2', {}, `Section ${i}`),
          el('p', {}, `Paragraph ${i}: ${words(i, 12)} `, el('a', { href: `#s${i + 1}` }, `next ${i}`), '.'),
          el('ul', {}, el('li', {}, `Point ${i} a`), el('li', {}, `Point ${i} b`)),
          el('button', { type: 'button' }, `Act ${i}`),
          el('input', { placeholder: `Field ${i}` }));
        main.append(section);
        count += 9;
        i += 1;
      }
      main.append(el('p', { id: 'the-end' }, 'THE-END of the big page.'));
      // After everything, inside an open shadow root: a selector finds it only by searching
      // the shadow roots (the document's own querySelector does not look inside them).
      const host = el('div', { id: 'shadow-end' });
      main.append(host);
      host.attachShadow({ mode: 'open' }).append(el('input', { id: 'shadow-end-field', placeholder: 'Field in a shadow root' }),
        el('button', { type: 'button', id: 'shadow-end-button' }, 'Button in a shadow root'));
    } else if (kind === 'deep' || kind === 'frame') {
      const level = Number(q.get('level') ?? '0');
      // Nested open shadow roots, each with a heading, text and a button.
      let host = main;
      for (let d = 0; d < 40; d += 1) {
        const h = el('div', { class: 'host' });
        host.append(h);
        const root = h.attachShadow({ mode: 'open' });
        root.append(el('h3', {}, `Shadow ${level}.${d}`), el('p', {}, `Shadow text ${level}.${d} ${words(level * 100 + d, 4)}`),
          el('button', { type: 'button' }, `Shadow button ${level}.${d}`));
        host = root;
      }
      host.append(el('input', { placeholder: `Deepest field ${level}` }));
      if (kind === 'deep') {
        // A deep chain of divs (deeper than the HTML parser would build).
        let div = el('div', { id: 'chain' });
        main.append(div);
        for (let d = 0; d < 1000; d += 1) {
          const next = el('div');
          div.append(next);
          div = next;
        }
        div.append(el('p', {}, 'Bottom of the chain.'), el('button', { type: 'button' }, 'Chain button'));
      }
      if (level < 4) {
        main.append(el('iframe', { src: `frame.html?level=${level + 1}`, title: `Frame ${level + 1}`, style: 'width:600px;height:300px' }));
      }
    }
    document.documentElement.dataset.built = 'yes';
  };
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', build);
  else build();
})();
