// Calling the page tools the way the product does: from the extension's service worker with
// chrome.tabs.sendMessage and the typed envelope of extension-shell/messages. Shared by
// tools.test.mjs and realpages.test.mjs.
import assert from 'node:assert/strict';

export const PROTOCOL = 'gemma-gem/1';
let nextId = 1;

export function envelope(body) {
  return { protocol: PROTOCOL, id: nextId++, from: 'service_worker', body };
}

/** A tool caller bound to a launched extension (`launchExtension`). `answers` collects the JSON
 * of every answer, for checks over all of them (no password ever shown, …). */
export function toolsFor(ext, answers = []) {
  /** Sends an envelope from the service worker; resolves to the answer or to 'no answer'. */
  const send = (tabId, message) => ext.sw.evaluate(async ([t, m]) => {
    try { return (await chrome.tabs.sendMessage(t, m)) ?? 'no answer'; } catch (e) { return 'no answer'; }
  }, [tabId, message]);

  /** Runs a tool; returns `{ ok, err }` from the `tool_outcome` answer. */
  const tool = async (tabId, name, args = {}) => {
    const message = envelope({ type: 'execute_tool', call_id: `c${nextId}`, call: { name, args } });
    const answer = await send(tabId, message);
    answers.push(JSON.stringify(answer));
    assert.notEqual(answer, 'no answer', `${name}: the content script did not answer`);
    assert.equal(answer.protocol, PROTOCOL, JSON.stringify(answer));
    assert.equal(answer.id, message.id);
    assert.equal(answer.from, 'content');
    assert.equal(answer.body.type, 'tool_outcome');
    assert.equal(answer.body.call_id, message.body.call_id);
    const { result } = answer.body;
    assert.ok(('Ok' in result) !== ('Err' in result), JSON.stringify(result));
    return { ok: result.Ok?.value, err: result.Err };
  };

  const ok = async (tabId, name, args) => {
    const r = await tool(tabId, name, args);
    assert.equal(r.err, undefined, `${name} ${JSON.stringify(args)} failed: ${JSON.stringify(r.err)}`);
    return r.ok;
  };

  const fails = async (tabId, name, args, kind, pattern) => {
    const r = await tool(tabId, name, args);
    assert.ok(r.err, `${name} ${JSON.stringify(args)} should fail, got ${JSON.stringify(r.ok)}`);
    assert.equal(r.err.kind, kind, JSON.stringify(r.err));
    if (pattern) assert.match(r.err.message, pattern);
    return r.err;
  };

  /** Opens `url` in a new tab once our host is there; returns the page and its tab id. `init`
   * runs in the page before its own scripts (e.g. a long-task observer). */
  const open = async (url, init = null) => {
    const page = await ext.context.newPage();
    if (init) await page.addInitScript(init);
    await page.goto(url);
    await page.waitForFunction(() => document.querySelector('gemma-gem-host') !== null, null, { timeout: 20000 });
    const at = page.url();
    const tabId = await ext.sw.evaluate(async (u) => (await chrome.tabs.query({})).find((t) => t.url === u)?.id, at);
    assert.ok(Number.isInteger(tabId), `tab of ${at}`);
    return { page, tabId };
  };

  return { send, tool, ok, fails, open, answers };
}

/** The ref of the outline line `- role "name" [ref=eN]`. */
export function refOf(outline, role, name) {
  const escaped = name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const m = outline.match(new RegExp(`- ${role} "${escaped}" \\[ref=(e\\d+)\\]`));
  assert.ok(m, `no ${role} "${name}" in the outline:\n${outline}`);
  return m[1];
}

/** Installed before the page's scripts: records every main-thread task over 50 ms. */
export function observeLongTasks() {
  window.__ggLongTasks = [];
  try {
    new PerformanceObserver((list) => {
      for (const e of list.getEntries()) window.__ggLongTasks.push({ start: e.startTime, duration: e.duration });
    }).observe({ type: 'longtask', buffered: true });
  } catch (e) { window.__ggLongTasks = null; }
}

/** Runs `fn` and returns its value with the longest main-thread task of `page` while it ran
 * (`longest`, 0 when none was over 50 ms). With `tools` and `tabId` (a development build's
 * content script), also `ours`: the longest of those long tasks that ran the content script's
 * own work (its tasks' times from `get_content_stats`: a long task of the page's own, or one
 * that a loaded machine stretched while the page rendered, is not ours), and `slice`: the
 * content script's longest task as it measured it. */
export async function withLongestTask(page, fn, tools = null, tabId = null) {
  if (tools) await tools.send(tabId, envelope({ type: 'get_content_stats' }));
  const start = await page.evaluate(() => performance.now());
  const value = await fn();
  // Long-task entries arrive after the task ends: give the observer a moment.
  await page.evaluate(() => new Promise((r) => setTimeout(r, 50)));
  const tasks = await page.evaluate((s) => {
    if (window.__ggLongTasks === null) throw new Error('no longtask observer in this browser');
    return window.__ggLongTasks.filter((t) => t.start + t.duration >= s);
  }, start);
  const longest = Math.max(0, ...tasks.map((t) => t.duration));
  if (!tools) return { value, longest };
  const stats = await tools.send(tabId, envelope({ type: 'get_content_stats' }));
  assert.equal(stats?.body?.type, 'content_stats', `content stats: ${JSON.stringify(stats)}`);
  const worked = stats.body.tasks;
  const ours = Math.max(0, ...tasks
    .filter((t) => worked.some(([a, b]) => a < t.start + t.duration && b > t.start))
    .map((t) => t.duration));
  return { value, longest, ours, slice: stats.body.longest_task_ms };
}
