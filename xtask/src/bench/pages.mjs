// `cargo xtask bench --pages`: the page tools on the real-page corpus (tests/pages/real/) and the
// generated stress pages, in headless Chromium with the dev extension (GG_EXT_DEV). For every
// page: snapshot_page time, read_page_content time (all pages of text), the longest main-thread
// task while they ran, and the content script's memory afterwards (wasm2js memory never shrinks,
// so that is its peak). Writes the measurements as JSON to GG_PAGES_OUT.
import fs from 'node:fs';
import path from 'node:path';
import { startServer, launchExtension, repo } from '../../../tests/e2e/harness.mjs';
import { toolsFor, envelope, observeLongTasks, withLongestTask } from '../../../tests/e2e/pagetools.mjs';

const out = process.env.GG_PAGES_OUT;
if (!process.env.GG_EXT_DEV || !out) throw new Error('run through `cargo xtask bench --pages` (GG_EXT_DEV, GG_PAGES_OUT)');
const real = path.join(repo, 'tests', 'pages', 'real');
const pages = [
  ...fs.readdirSync(real).filter((d) => fs.existsSync(path.join(real, d, 'source.html'))).sort()
    .map((d) => ({ name: d, kind: 'real', path: `/real/${d}/source.html` })),
  { name: 'stress-100k', kind: 'stress', path: '/stress/page.html?kind=big&n=100000' },
  { name: 'stress-deep', kind: 'stress', path: '/stress/page.html?kind=deep' },
];

const server = await startServer();
const ext = await launchExtension(process.env.GG_EXT_DEV);
const t = toolsFor(ext);
// Saved pages still name their sites' images, fonts and scripts: nothing leaves the machine (a
// request to the closed network can hang the page's load event past the navigation timeout).
await ext.context.route((u) => /^https?:/.test(u.href) && !u.href.startsWith(server.url), (r) => r.abort());
const rows = [];
try {
  for (const p of pages) {
    const { page, tabId } = await t.open(`${server.url}${p.path}${p.path.includes('?') ? '&' : '?'}bench=1`, observeLongTasks);
    const elements = await page.evaluate(() => document.getElementsByTagName('*').length);
    let started = performance.now();
    const snap = await withLongestTask(page, () => t.ok(tabId, 'snapshot_page', {}), t, tabId);
    const snapshotMs = performance.now() - started;
    started = performance.now();
    const read = await withLongestTask(page, async () => {
      let offset = 0;
      let calls = 0;
      for (;;) {
        const r = await t.ok(tabId, 'read_page_content', { offset, max_chars: 4000 });
        calls += 1;
        if (r.remaining_chars === 0 || r.next_offset === undefined || calls >= (p.kind === 'stress' ? 1 : 200)) return { calls, chars: r.total_chars, partial: !!r.partial };
        offset = r.next_offset;
      }
    }, t, tabId);
    const readMs = performance.now() - started;
    const stats = await t.send(tabId, envelope({ type: 'get_content_stats' }));
    rows.push({
      name: p.name, kind: p.kind, elements,
      snapshot_ms: Math.round(snapshotMs), snapshot_partial: !!snap.value.partial,
      read_ms: Math.round(readMs), read_calls: read.value.calls, read_chars: read.value.chars, read_partial: read.value.partial,
      longest_task_ms: Math.round(Math.max(snap.ours, read.ours)),
      page_longest_task_ms: Math.round(Math.max(snap.longest, read.longest)),
      content_longest_task_ms: Math.round(Math.max(snap.slice, read.slice)),
      content_memory_bytes: stats?.body?.memory_bytes ?? null,
    });
    console.error(`${p.name}: ${JSON.stringify(rows.at(-1))}`);
    await page.close();
  }
} finally {
  await ext.close();
  await server.close();
}
fs.writeFileSync(out, JSON.stringify({ browser: ext.context.browser()?.version() ?? null, pages: rows }, null, 2));
