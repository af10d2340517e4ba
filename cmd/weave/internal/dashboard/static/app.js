// Weave dashboard: hand-written, no framework. The page arrives with the server's configuration
// and latest snapshot in it (#boot), so it renders at once; then the server pushes a snapshot
// about once a second (server-sent events); the stream is closed while the tab is hidden.
// Everything shown is built with DOM calls (text nodes), never HTML strings, since group IDs,
// keys and errors come from users; the server has already written their control, bidi and
// zero-width characters as visible escapes.
'use strict';

const $ = (sel) => document.querySelector(sel);
const STATES = ['pending', 'delayed', 'running', 'retrywait', 'done', 'failed', 'canceled'];
const STATE_LABEL = { pending: 'Pending', delayed: 'Delayed', running: 'Running', retrywait: 'Waiting to retry', done: 'Done', failed: 'Failed', canceled: 'Canceled' };
const VIEWS = ['overview', 'groups', 'resources', 'failed', 'lookup'];

let config = { actions: false, namespace: '', token_header: 'X-Weave-Token', history_seconds: 300 };
let snap = null; // the latest snapshot
let source = null; // the EventSource while the tab is visible

// h builds an element: h('td', {class: 'num'}, 'text', child, ...).
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}
const svg = (tag, attrs) => {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  return el;
};
const plural = (n, thing) => fmt(n) + ' ' + thing + (n === 1 ? '' : 's');
const fmt = (n) => (n === undefined || n === null ? '–' : Number(n).toLocaleString('en-US'));
const rate = (n) => (n === undefined || n === null ? '–' : n >= 100 ? Math.round(n).toLocaleString('en-US') : n.toFixed(1));
function dur(ms) {
  if (ms < 0) ms = 0;
  const s = Math.round(ms / 1000);
  if (s < 60) return s + 's';
  if (s < 3600) return Math.floor(s / 60) + 'm' + (s % 60 ? ' ' + (s % 60) + 's' : '');
  return Math.floor(s / 3600) + 'h' + (s % 3600 >= 60 ? ' ' + Math.floor((s % 3600) / 60) + 'm' : '');
}
const since = (t, now) => (!t || t.startsWith('0001') ? '–' : dur(now - Date.parse(t)));
// when formats a time as local "2006-01-02 15:04:05.000": attempts are often within a second.
function when(t) {
  const d = new Date(t), p = (n, w = 2) => String(n).padStart(w, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`;
}
// fill replaces a table's rows. Live tables are rebuilt every second: a control focused in a
// row (a keyboard user's) gets the focus back in the new row with the same key.
function fill(tbody, rows, cols, empty) {
  const focused = document.activeElement;
  const row = focused && tbody.contains(focused) ? focused.closest('tr') : null;
  const key = row ? JSON.stringify(row.dataset) : null;
  const at = row ? [...row.querySelectorAll('button, input, a')].indexOf(focused) : -1;
  tbody.replaceChildren(...(rows.length ? rows : [h('tr', {}, h('td', { colspan: cols, class: 'empty' }, empty))]));
  if (key === null || at < 0) return;
  const again = [...tbody.rows].find((r) => JSON.stringify(r.dataset) === key);
  const target = again && again.querySelectorAll('button, input, a')[at];
  if (target) target.focus();
}

// ---- views and navigation

function currentView() {
  const v = location.hash.replace(/^#/, '').split('&')[0];
  return VIEWS.includes(v) ? v : 'overview';
}
function showView() {
  const v = currentView();
  for (const s of document.querySelectorAll('main > section[data-view]')) s.hidden = s.dataset.view !== v;
  for (const a of document.querySelectorAll('nav a')) {
    if (a.dataset.view === v) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  document.title = 'Weave · ' + $('nav a[data-view="' + v + '"]').textContent;
  if (v === 'failed' && !failedLoaded) loadFailed();
  render();
}

// A token in the URL fragment (#token=… as weave dashboard prints it) is kept for this tab and
// removed from the address bar; the fragment is never sent to the server.
// A malformed one (a bad %-escape) is dropped with a note, and the page goes on.
function takeToken() {
  const m = location.hash.match(/token=([^&]*)/);
  if (m) {
    history.replaceState(null, '', location.pathname + '#' + currentView());
    let tok = null;
    try { tok = decodeURIComponent(m[1]); } catch (e) { /* a bad %-escape */ }
    if (tok) sessionStorage.setItem('weave-token', tok);
    else toast('The token in the address (#token=…) is malformed and was ignored: paste the token printed by weave dashboard in the field below.', true);
  }
  $('#token').value = sessionStorage.getItem('weave-token') || '';
}

// ---- live updates

function setConn(state, text) {
  $('#conn').className = 'conn ' + state;
  $('#conn-text').textContent = text;
}
function connect() {
  if (source) return;
  source = new EventSource('api/events');
  source.addEventListener('snapshot', (e) => {
    snap = JSON.parse(e.data);
    setConn(snap.error ? 'error' : 'live', snap.error ? 'no status' : 'live');
    render();
  });
  source.onerror = () => setConn('error', 'reconnecting');
}
function disconnect() {
  if (source) source.close();
  source = null;
  setConn('paused', 'paused (tab hidden)');
}
document.addEventListener('visibilitychange', () => (document.hidden ? disconnect() : connect()));

function render() {
  if (!snap) return;
  const banner = $('#banner');
  banner.hidden = !snap.error;
  banner.textContent = snap.error ? 'Cannot read the coordinator\'s status: ' + snap.error + (snap.status ? ' (showing the last one read)' : '') : '';
  if (!snap.status) return;
  for (const w of document.querySelectorAll('.window')) w.textContent = dur((config.history_seconds || 300) * 1000);
  switch (currentView()) {
    case 'overview': renderOverview(); break;
    case 'groups': renderGroups(); break;
    case 'resources': renderResources(); break;
  }
}

// ---- charts (SVG, drawn to the element's width)

const CH = { padL: 52, padR: 8, padT: 8, padB: 20 };
function frame(el) {
  const w = Math.max(el.clientWidth, 200), hgt = Math.max(el.clientHeight, 100);
  el.setAttribute('viewBox', `0 0 ${w} ${hgt}`);
  el.replaceChildren();
  return { w, hgt, x0: CH.padL, x1: w - CH.padR, y0: hgt - CH.padB, y1: CH.padT };
}
function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}
function axes(el, f, times, ymax, label) {
  for (const frac of [0, 0.5, 1]) {
    const y = f.y0 - (f.y0 - f.y1) * frac;
    el.append(svg('line', { x1: f.x0, x2: f.x1, y1: y, y2: y, class: 'grid' }));
    const t = svg('text', { x: f.x0 - 6, y: y + 4, 'text-anchor': 'end' });
    t.textContent = label(ymax * frac);
    el.append(t);
  }
  const span = times.length > 1 ? times[times.length - 1] - times[0] : 0;
  const l = svg('text', { x: f.x0, y: f.hgt - 4 });
  l.textContent = span ? '−' + dur(span) : '';
  const r = svg('text', { x: f.x1, y: f.hgt - 4, 'text-anchor': 'end' });
  r.textContent = 'now';
  el.append(l, r);
}
function xOf(f, times, i) {
  const t0 = times[0], t1 = times[times.length - 1];
  return t1 > t0 ? f.x0 + ((times[i] - t0) / (t1 - t0)) * (f.x1 - f.x0) : f.x1;
}
// lineChart draws series [{name, values, color}] (null values break the line); format formats
// the values.
function lineChart(el, legend, times, series, format) {
  const f = frame(el);
  let max = 0;
  for (const s of series) for (const v of s.values) if (v !== null && v > max) max = v;
  const ymax = niceMax(max);
  axes(el, f, times, ymax, format);
  for (const s of series) {
    let d = '', pen = false;
    s.values.forEach((v, i) => {
      if (v === null || v === undefined) { pen = false; return; }
      const x = xOf(f, times, i), y = f.y0 - (v / ymax) * (f.y0 - f.y1);
      d += (pen ? 'L' : 'M') + x.toFixed(1) + ' ' + y.toFixed(1);
      pen = true;
    });
    el.append(svg('path', { d, class: 'line', stroke: s.color }));
  }
  legend.replaceChildren(...series.map((s) => {
    const last = s.values.length ? s.values[s.values.length - 1] : null;
    const sw = h('i', { class: 'sw' });
    sw.style.setProperty('--c', s.color);
    return h('span', {}, sw, s.name + ' ', h('b', {}, format(last)));
  }));
  el.setAttribute('aria-label', series.map((s) => s.name + ' ' + format(s.values[s.values.length - 1])).join(', '));
}
// shareChart stacks layers [{name, values, color}] as areas, each sample scaled to 100%: each
// layer's share of the sum.
function shareChart(el, legend, times, layers) {
  const f = frame(el);
  const n = times.length;
  const tops = new Array(n).fill(0);
  const sums = new Array(n).fill(0);
  for (let i = 0; i < n; i++) for (const l of layers) sums[i] += l.values[i];
  axes(el, f, times, 1, (v) => Math.round(100 * v) + '%');
  const Y = (v) => f.y0 - v * (f.y0 - f.y1);
  for (const l of layers) {
    if (n === 0) break;
    const lower = tops.slice();
    for (let i = 0; i < n; i++) tops[i] += sums[i] ? l.values[i] / sums[i] : 0;
    let d = '';
    for (let i = 0; i < n; i++) d += (i ? 'L' : 'M') + xOf(f, times, i).toFixed(1) + ' ' + Y(tops[i]).toFixed(1);
    for (let i = n - 1; i >= 0; i--) d += 'L' + xOf(f, times, i).toFixed(1) + ' ' + Y(lower[i]).toFixed(1);
    const p = svg('path', { d: d + 'Z', fill: l.color, 'fill-opacity': '0.85' });
    const title = svg('title', {});
    title.textContent = l.name;
    p.append(title);
    el.append(p);
  }
  const total = sums[n - 1] || 0;
  legend.replaceChildren(...layers.map((l) => {
    const sw = h('i', { class: 'sw' });
    sw.style.setProperty('--c', l.color);
    const last = l.values[n - 1] || 0;
    return h('span', {}, sw, l.name + ' ', h('b', {}, fmt(last)), total ? ' (' + Math.round((100 * last) / total) + '%)' : '');
  }));
  el.setAttribute('aria-label', layers.length ? layers.map((l) => l.name + ' ' + (l.values[n - 1] || 0)).join(', ') : 'no jobs in flight');
}

// ---- Overview

function renderOverview() {
  const st = snap.status, ser = snap.series || { times: [], states: {}, rate_in: [], rate_out: [], slots: [], shares: [] };
  const last = (a) => (a && a.length ? a[a.length - 1] : null);
  // The coordinator counts the jobs of the groups it holds (open, and ended but retained);
  // the ended states' totals since it took over come below.
  const sub = { done: st.totals.done, failed: st.totals.failed, canceled: st.totals.canceled };
  const cards = STATES.map((s) => h('div', { class: 'card c-' + s, dataset: { state: s } },
    h('div', { class: 'label' }, STATE_LABEL[s]),
    h('div', { class: 'value', id: 'count-' + s }, fmt(st.jobs[s] || 0)),
    h('div', { class: 'sub' }, s in sub ? fmt(sub[s]) + ' since takeover' : 'in groups held')));
  cards.push(
    h('div', { class: 'card c-in' }, h('div', { class: 'label' }, 'In / s'), h('div', { class: 'value', id: 'rate-in' }, rate(last(ser.rate_in))), h('div', { class: 'sub' }, fmt(st.totals.admitted) + ' admitted')),
    h('div', { class: 'card c-out' }, h('div', { class: 'label' }, 'Out / s'), h('div', { class: 'value', id: 'rate-out' }, rate(last(ser.rate_out))), h('div', { class: 'sub' }, fmt(st.totals.done + st.totals.failed + st.totals.canceled) + ' ended')));
  $('#state-cards').replaceChildren(...cards);
  lineChart($('#chart-rates'), $('#legend-rates'), ser.times, [
    { name: 'in', values: ser.rate_in, color: 'var(--in)' },
    { name: 'out', values: ser.rate_out, color: 'var(--out)' }], rate);
  lineChart($('#chart-states'), $('#legend-states'), ser.times, ['pending', 'running', 'retrywait'].map((s) => ({
    name: STATE_LABEL[s].toLowerCase(), values: ser.states[s] || [], color: 'var(--' + s + ')' })), (v) => fmt(Math.round(v)));

  const alarms = st.alarms || [];
  $('#alarms').replaceChildren(...(alarms.length ? alarms.map((a) => h('div', { class: 'alarm', dataset: { alarm: a.name } },
    h('div', {}, h('span', { class: 'name' }, a.name), ' · raised ' + since(a.raised_at, Date.parse(st.time)) + ' ago'),
    a.message ? h('div', {}, a.message) : null,
    a.values && Object.keys(a.values).length ? h('dl', { class: 'kv' }, Object.entries(a.values).flatMap(([k, v]) =>
      [h('dt', {}, k), h('dd', {}, typeof v === 'number' ? rate(v) : typeof v === 'object' ? JSON.stringify(v) : String(v))])) : null))
    : [h('p', { class: 'ok' }, '✓ No active alarms')]));

  const now = Date.parse(st.time);
  let busy = 0, sleeping = 0, slots = 0;
  for (const w of st.workers || []) { busy += w.busy; sleeping += w.sleeping; }
  for (const p of st.pools || []) slots += p.slots;
  const kv = [
    ['Namespace', st.namespace], ['Epoch (leader term)', st.epoch], ['Policy', st.policy], ['Feeders', st.feeders],
    ['Open groups', fmt(Math.max(st.open_groups || 0, (st.groups || []).length)) + (st.unsealed ? ' (' + st.unsealed + ' not sealed)' : '')],
    ['Workers', fmt(Math.max(st.worker_count || 0, (st.workers || []).length)) + ' live, ' + fmt(slots) + ' slots: ' +
      fmt(busy) + ' busy, ' + fmt(sleeping) + ' sleeping' + (listedOf(st.workers, st.worker_count) ? ' (of the workers listed)' : '')],
    ['Status read', new Date(st.time).toLocaleTimeString() + (snap.error ? ' (stale)' : '')],
    ['Since takeover', fmt(st.totals.retried) + ' retried, ' + fmt(st.totals.rejected) + ' rejected, ' + fmt(st.totals.rescued) + ' rescued, ' + fmt(st.totals.lost_attempts) + ' attempts lapsed'],
  ];
  // The age of the oldest pending job, when the coordinator reports it.
  if (st.oldest_pending) kv.splice(4, 0, ['Oldest pending job', since(st.oldest_pending, now)]);
  else if (typeof st.oldest_pending_seconds === 'number') kv.splice(4, 0, ['Oldest pending job', dur(1000 * st.oldest_pending_seconds)]);
  $('#coordinator').replaceChildren(...kv.flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, String(v))]));
  // Standby coordinators: which process, waiting for the lease since when, last heard when.
  const sb = Array.isArray(st.standbys) ? st.standbys : [];
  const clock = (t) => (t && !String(t).startsWith('0001') ? new Date(t).toLocaleTimeString() : '–');
  const describe = (s) => (s && typeof s === 'object' ?
    [h('span', { class: 'mono' }, s.holder || '(unnamed)'), ' waiting since ' + clock(s.since) + ' (' + since(s.since, now) + '), last heard ' + since(s.last_seen, now) + ' ago'] :
    [String(s)]);
  $('#standbys').replaceChildren(...(sb.length ? [h('h2', {}, 'Standby coordinators'), h('ul', { id: 'standby-list' }, sb.map((s) => h('li', {}, describe(s))))] :
    [h('p', { class: 'muted' }, 'No standby coordinator reported.')]));
}

// ---- Groups

function groupCounts(g) {
  const j = g.jobs || {};
  const c = {};
  for (const s of STATES) c[s] = j[s] || 0;
  c.total = STATES.reduce((a, s) => a + c[s], 0);
  c.ended = c.done + c.failed + c.canceled;
  return c;
}
function progressBar(parts, total, label) {
  const bar = h('div', { class: 'bar', role: 'img', 'aria-label': label });
  for (const [cls, v] of parts) {
    if (!v) continue;
    const seg = h('div', { class: 'seg ' + cls, title: cls + ': ' + fmt(v), dataset: { part: cls, value: v } });
    seg.style.width = ((100 * v) / total).toFixed(2) + '%';
    bar.append(seg);
  }
  return bar;
}
// chainOf draws where a group stands in its chain: the groups it waits for, before it, and the
// groups waiting on it, after it. Text nodes only: group IDs are untrusted.
function chainOf(g) {
  const before = g.waits_for || [], after = g.followed_by || [];
  if (!before.length && !after.length) return null;
  return h('div', { class: 'chain' },
    before.length ? h('span', { class: 'flag', dataset: { chain: 'waits' }, title: 'held: none of its jobs runs before these have completed' }, 'waits for ' + before.join(', ')) : null,
    after.length ? h('span', { class: 'sub', dataset: { chain: 'then' }, title: 'groups that run after it' }, '→ ' + after.join(', ')) : null);
}
function renderGroups() {
  const st = snap.status, ser = snap.series || { times: [], shares: [], slots: [] };
  const palette = (i, name) => (name === '(other groups)' ? 'var(--g8)' : 'var(--g' + (i % 8) + ')');
  shareChart($('#chart-shares'), $('#legend-shares'), ser.times,
    (ser.shares || []).map((s, i) => ({ name: s.group, values: s.in_flight, color: palette(i, s.group) })));

  const prefix = $('#group-filter').value.trim();
  const want = $('#group-state').value;
  const now = Date.parse(st.time);
  const all = st.groups || [];
  const groups = all.filter((g) => {
    if (prefix && !g.id.startsWith(prefix)) return false;
    const c = groupCounts(g);
    switch (want) {
      case 'running': return c.running > 0;
      case 'pending': return c.pending + c.retrywait > 0;
      case 'failed': return c.failed > 0;
      case 'unsealed': return !g.sealed;
      case 'waiting': return (g.waits_for || []).length > 0;
    }
    return true;
  });
  $('#group-count').textContent = groups.length + ' of ' + all.length + ' open groups' + (all.length >= 100 ? ' (the coordinator lists the first 100)' : '');
  const rows = groups.map((g) => {
    const c = groupCounts(g);
    const sealed = g.abandoned ? h('span', { class: 'flag' }, 'abandoned') : g.sealed ? 'yes' :
      h('span', { class: 'flag' }, g.last_heard ? 'no, heard ' + since(g.last_heard, now) + ' ago' : 'no');
    const label = `${c.done} done, ${c.failed} failed, ${c.canceled} canceled, ${c.running} running, ${c.retrywait} waiting to retry, ${c.pending} pending, ${c.delayed} delayed of ${c.total}`;
    return h('tr', { dataset: { group: g.id } },
      h('td', { class: 'mono' }, g.id, chainOf(g)),
      h('td', {}, since(g.opened_at, now)),
      h('td', {}, sealed),
      h('td', {}, progressBar([['done', c.done], ['failed', c.failed], ['canceled', c.canceled], ['running', c.running], ['retrywait', c.retrywait], ['pending', c.pending], ['delayed', c.delayed]], c.total || 1, label)),
      h('td', { class: 'num', dataset: { ended: c.ended, total: c.total } }, fmt(c.ended) + ' / ' + fmt(c.total)),
      h('td', { class: 'num' }, fmt(g.in_flight)),
      h('td', { class: 'num', title: g.held ? 'pending jobs a limit holds back' : null }, fmt(g.queued) + (g.held ? ' + ' + fmt(g.held) + ' held' : '')),
      h('td', { class: 'num', title: 'Of the time its jobs were out (release to report), the share their handlers ran' }, Math.round(100 * (g.busy || 0)) + '%'),
      h('td', {}, config.actions ? h('button', { type: 'button', class: 'small danger', onclick: () => cancelGroup(g.id) }, 'Cancel') : null));
  });
  fill($('#groups-table tbody'), rows, 9, all.length ? 'No open group matches.' : 'No open groups: every group published has ended.');
  loadEnded();
  loadSchedules();
}

// The schedules are read from their stream, not pushed: at most every 5 s, while the groups view
// is shown.
let schedulesAt = 0;
async function loadSchedules() {
  if (Date.now() - schedulesAt < 5000) return;
  schedulesAt = Date.now();
  const r = await getJSON('api/schedules').catch((e) => ({ ok: false, body: { error: e.message } }));
  const tbody = $('#schedules-table tbody');
  if (!r.ok) { fill(tbody, [], 6, 'Cannot read the schedules: ' + r.body.error); return; }
  const now = snap && snap.status ? Date.parse(snap.status.time) : Date.now();
  const at = (t) => t ? new Date(t).toISOString().replace('T', ' ').slice(0, 19) : '–';
  fill(tbody, r.body.schedules.map((s) => h('tr', { dataset: { schedule: s.name } },
    h('td', { class: 'mono' }, s.name),
    h('td', { class: 'mono' }, s.when),
    h('td', { class: 'mono' }, s.group + '@…'),
    h('td', { class: 'num' }, fmt(s.jobs)),
    h('td', {}, s.last_fired ? at(s.last_fired) + ' (' + since(s.last_fired, now) + ' ago)' : '–'),
    h('td', {}, s.paused ? h('span', { class: 'flag' }, 'paused') : at(s.next)))),
  6, 'No schedule is stored.');
}

// The ended groups are read from the outcome records, not pushed: at most every 5 s, while the
// groups view is shown.
let endedAt = 0;
async function loadEnded() {
  if (Date.now() - endedAt < 5000) return;
  endedAt = Date.now();
  const r = await getJSON('api/ended').catch((e) => ({ ok: false, body: { error: e.message } }));
  const tbody = $('#ended-table tbody');
  if (!r.ok) { fill(tbody, [], 7, 'Cannot read the ended groups: ' + r.body.error); return; }
  const prefix = $('#group-filter').value.trim();
  const now = snap && snap.status ? Date.parse(snap.status.time) : Date.now();
  const shown = r.body.groups.filter((g) => !prefix || g.id.startsWith(prefix));
  fill(tbody, shown.map((g) => h('tr', { dataset: { ended: g.id } },
    h('td', { class: 'mono' }, g.id, g.abandoned ? h('span', { class: 'flag', title: 'its producer never sealed it' }, ' abandoned') : null),
    h('td', {}, since(g.ended_at, now) + ' ago'),
    h('td', {}, progressBar([['done', g.done], ['failed', g.failed], ['canceled', g.canceled]], g.jobs || 1,
      `${g.done} done, ${g.failed} failed, ${g.canceled} canceled of ${g.jobs}`)),
    h('td', { class: 'num' }, fmt(g.done)),
    h('td', { class: 'num' }, fmt(g.failed)),
    h('td', { class: 'num' }, fmt(g.canceled)),
    h('td', {}, config.actions && g.failed ? h('button', { type: 'button', class: 'small', onclick: () => retry(g.id, []) }, 'Retry failed') : null))),
  7, r.body.groups.length ? 'No ended group matches the prefix.' : 'No group has ended within the result retention.');
}

// ---- Resources and pools

// listedOf is the note "N of M" for a list the coordinator cut (its answer keeps within the
// server's max payload), or '' for a list it sent whole.
function listedOf(list, count) {
  const n = (list || []).length;
  return typeof count === 'number' && n < count ? fmt(n) + ' of ' + fmt(count) : '';
}

// limitText describes a limit as `weave limit list` does: "paused, 2 at once, 5 per 1s (burst 1)".
function limitText(l) {
  const parts = [];
  if (l.paused) parts.push('paused');
  if (l.concurrency) parts.push(fmt(l.concurrency) + ' at once');
  if (l.rate) parts.push(fmt(l.rate) + ' per ' + durationText(l.per) + ' (burst ' + fmt(Math.max(l.burst || 0, 1)) + ')');
  return parts.length ? parts.join(', ') : 'no limit';
}

// durationText writes a duration in nanoseconds (a Go time.Duration in JSON) briefly: 1s, 250ms, 1m30s.
function durationText(ns) {
  const ms = ns / 1e6;
  if (ms < 1000) return fmt(ms) + 'ms';
  const s = ms / 1000, m = Math.floor(s / 60), rest = s - 60 * m;
  return (m ? m + 'm' : '') + (rest || !m ? +rest.toFixed(3) + 's' : '');
}

function renderResources() {
  const st = snap.status;
  const cut = [['resources', st.resources, st.resource_count], ['limits', st.limits, st.limit_count], ['pools', st.pools, st.pool_count], ['workers', st.workers, st.worker_count]]
    .filter(([, list, count]) => listedOf(list, count)).map(([what, list, count]) => 'the first ' + listedOf(list, count) + ' ' + what);
  const note = $('#resources-cut');
  note.textContent = cut.length ? 'Listed: ' + cut.join(', ') + ". The coordinator's answer keeps within the server's maximum message size, so it cuts its longest lists." : '';
  note.hidden = !cut.length;
  const holders = {};
  for (const w of st.workers || []) for (const r of w.resources || []) (holders[r] = holders[r] || []).push(w.id);
  fill($('#resources-table tbody'), (st.resources || []).map((r) => {
    const req = r.required || {}, pref = r.preferred || {};
    const waiting = r.holders === 0 ? req.pending || 0 : 0;
    return h('tr', { dataset: { resource: r.name } },
      h('td', { class: 'mono' }, r.name),
      h('td', { class: 'num' }, fmt(r.holders)),
      h('td', { class: 'mono' }, (holders[r.name] || []).join(', ') || '–'),
      h('td', { class: 'num' }, fmt(req.pending || 0)),
      h('td', { class: 'num' }, fmt(req.running || 0)),
      h('td', { class: 'num' }, waiting ? h('span', { class: 'flag' }, fmt(waiting) + ' wait: no live holder') : '0'),
      h('td', { class: 'num' }, fmt(pref.pending || 0)),
      h('td', { class: 'num' }, fmt(pref.running || 0)));
  }), 8, 'No job names a resource.');
  fill($('#limits-table tbody'), (st.limits || []).map((l) => h('tr', { dataset: { limit: l.kind + '/' + l.name } },
    h('td', {}, l.kind),
    h('td', { class: 'mono' }, l.name),
    h('td', {}, l.paused ? h('span', { class: 'flag' }, limitText(l)) : limitText(l)),
    h('td', { class: 'num' }, fmt(l.running)),
    h('td', { class: 'num' }, fmt(l.waiting)))), 5, 'No limit is set.');
  fill($('#pools-table tbody'), (st.pools || []).map((p) => h('tr', {},
    h('td', { class: 'mono' }, p.key || '(no resources)'),
    h('td', {}, (p.resources || []).join(', ') || '–'),
    h('td', { class: 'num' }, fmt(p.workers)),
    h('td', { class: 'num' }, fmt(p.slots)),
    h('td', { class: 'num' }, fmt(p.outstanding)))), 5, 'No pool: no worker is live.');
  const now = Date.parse(st.time);
  fill($('#workers-table tbody'), (st.workers || []).map((w) => h('tr', { dataset: { worker: w.id } },
    h('td', { class: 'mono' }, w.id),
    h('td', { class: 'mono' }, w.pool || '–'),
    h('td', {}, (w.resources || []).join(', ') || '–'),
    h('td', {}, progressBar([['busy', w.busy], ['sleeping', w.sleeping]], w.concurrency || 1, `${w.busy} busy, ${w.sleeping} sleeping of ${w.concurrency} slots`)),
    h('td', { class: 'num' }, fmt(w.busy)),
    h('td', { class: 'num' }, fmt(w.sleeping)),
    h('td', {}, w.draining ? h('span', { class: 'flag' }, 'draining') : 'running'),
    h('td', {}, since(w.last_seen, now) + ' ago'))), 8, 'No live worker.');
}

// ---- Failed jobs

let failedLoaded = false;
const selected = new Map(); // "group\u0000id" -> {group, id}

async function getJSON(url) {
  const r = await fetch(url, { headers: { Accept: 'application/json' } });
  const body = await r.json().catch(() => ({ error: r.statusText }));
  return { ok: r.ok, status: r.status, body };
}
function historyTable(job) {
  if (!job.history.length) return h('p', { class: 'muted' }, 'No failed attempt recorded.');
  return h('table', { class: 'data history' },
    h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, '#'), h('th', { scope: 'col' }, 'When'), h('th', { scope: 'col' }, 'Worker'), h('th', { scope: 'col' }, 'Error'))),
    h('tbody', {}, job.history.map((a, i) => h('tr', { dataset: { attempt: i + 1 } },
      h('td', { class: 'num' }, i + 1), h('td', {}, when(a.at)), h('td', { class: 'mono' }, a.worker), h('td', {}, h('pre', {}, a.error), a.error_bytes ? h('span', { class: 'cut' }, '(cut: ' + plural(a.error_bytes, 'byte') + ' in all)') : null)))));
}
// The failed jobs come a page at a time, the latest first, each with its error cut; a job's
// attempts and whole error are fetched when it is opened.
let failedOffset = 0;
async function loadFailed(offset) {
  failedLoaded = true;
  if (offset !== undefined) failedOffset = offset;
  const group = $('#failed-group').value.trim();
  const q = new URLSearchParams({ offset: failedOffset, limit: config.page_size || 50 });
  if (group) q.set('group', group);
  $('#failed-count').textContent = 'loading…';
  const r = await getJSON('api/failed?' + q);
  if (!r.ok) {
    $('#failed-count').textContent = '';
    $('#failed-list').replaceChildren(h('p', { class: 'alarm' }, r.body.error));
    return;
  }
  const { jobs, total, limit } = r.body;
  selected.clear();
  updateSelection();
  const first = failedOffset + 1, last = failedOffset + jobs.length;
  $('#failed-count').textContent = jobs.length ? `${fmt(first)}–${fmt(last)} of ${plural(total, 'failed job')}, latest first` : plural(total, 'failed job');
  const pager = $('#failed-pager');
  pager.hidden = total <= limit;
  $('#failed-newer').disabled = failedOffset === 0;
  $('#failed-older').disabled = last >= total || failedOffset + limit > r.body.max_offset;
  $('#failed-page').textContent = 'page ' + fmt(Math.floor(failedOffset / limit) + 1) + ' of ' + fmt(Math.ceil(total / limit));
  const byGroup = new Map();
  for (const j of jobs) {
    if (!byGroup.has(j.group)) byGroup.set(j.group, []);
    byGroup.get(j.group).push(j);
  }
  const out = [];
  for (const [group, list] of byGroup) {
    out.push(h('div', { class: 'grouphead' }, h('h3', { class: 'mono' }, group), h('span', { class: 'muted' }, list.length + ' failed on this page'),
      config.actions ? h('button', { type: 'button', class: 'small', onclick: () => retry(group, []) }, 'Retry all of ' + group) : null));
    for (const j of list) {
      const box = config.actions ? h('input', { type: 'checkbox', 'aria-label': 'select job ' + j.id, onchange: (e) => {
        const k = j.group + '\u0000' + j.id;
        if (e.target.checked) selected.set(k, j); else selected.delete(k);
        updateSelection();
      }, onclick: (e) => e.stopPropagation() }) : h('span');
      const body = h('div', { class: 'body' }, h('p', { class: 'muted' }, 'loading…'));
      out.push(h('details', { class: 'job', dataset: { job: j.id, group: j.group }, ontoggle: (e) => { if (e.target.open) loadFailedJob(j, body, false); } },
        h('summary', {}, box, h('span', { class: 'mono' }, 'job ' + j.id), h('span', { class: 'badge failed' }, 'failed'),
          h('span', { class: 'mono key', title: j.key || '' }, j.key || '–'), h('span', {}, j.attempts + ' attempts'), h('span', { class: 'err' }, j.error),
          config.actions ? h('button', { type: 'button', class: 'small', onclick: (e) => { e.preventDefault(); retry(j.group, [j.id]); } }, 'Retry') : h('span')),
        body));
    }
  }
  $('#failed-list').replaceChildren(...(out.length ? out : [h('p', { class: 'ok' }, '✓ No failed jobs stored' + (group ? ' for ' + group : '') + '.')]));
}
// loadFailedJob fills an opened job's body: its whole error (or its first 64 KiB, with a button
// for the rest) and its attempts.
async function loadFailedJob(j, body, full) {
  const r = await getJSON('api/job?' + new URLSearchParams({ id: j.id, group: j.group, ...(full ? { full: 1 } : {}) }));
  if (!r.ok) { body.replaceChildren(h('p', { class: 'alarm' }, r.body.error)); return; }
  body.replaceChildren(...textBlock(r.body.error, r.body.error_bytes, () => loadFailedJob(j, body, true)), historyTable(r.body));
}
// textBlock shows a text that may have been cut: the text, and how much more there is with a
// button to fetch it.
function textBlock(text, bytes, more) {
  const out = [h('pre', {}, text)];
  if (bytes) out.push(h('p', { class: 'cut' }, 'Cut: ' + plural(bytes, 'byte') + ' in all. ', h('button', { type: 'button', class: 'small', onclick: more }, 'Show all')));
  return out;
}
function updateSelection() {
  const b = $('#retry-selected');
  b.disabled = selected.size === 0;
  b.textContent = selected.size ? 'Retry ' + selected.size + ' selected' : 'Retry selected';
}

// ---- actions

function toast(text, error) {
  const t = h('div', { class: error ? 'error' : '' }, text);
  $('#toast').append(t);
  setTimeout(() => t.remove(), error ? 9000 : 5000);
}
async function act(path, body) {
  const r = await fetch('api/' + path, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', [config.token_header]: $('#token').value.trim() },
    body: JSON.stringify(body),
  });
  const res = await r.json().catch(() => ({ error: r.statusText }));
  if (!r.ok) throw new Error(res.error || r.statusText);
  return res;
}
async function retry(group, ids) {
  try {
    const r = await act('retry', { group, ids });
    toast('Retry of ' + group + ': ' + plural(r.published, 'job') + ' published again');
    return true;
  } catch (e) {
    toast('Retry of ' + group + ' refused: ' + e.message, true);
    return false;
  }
}
async function cancel(group, ids) {
  const what = ids.length ? 'jobs ' + ids.join(', ') + ' of group ' + group : 'group ' + group;
  if (!confirm('Cancel ' + what + '?')) return;
  try {
    await act('cancel', { group, ids });
    toast('Canceled ' + what);
  } catch (e) {
    toast('Cancel of ' + what + ' refused: ' + e.message, true);
  }
}
const cancelGroup = (g) => cancel(g, []);

// ---- Job lookup

async function lookup(ev) {
  ev.preventDefault();
  const id = $('#lookup-id').value.trim(), group = $('#lookup-group').value.trim(), key = $('#lookup-key').value.trim();
  const q = new URLSearchParams();
  if (id) q.set('id', id);
  if (group) q.set('group', group);
  if (key) q.set('key', key);
  showJob(q);
}
async function showJob(q) {
  const out = $('#lookup-result');
  out.replaceChildren(h('p', { class: 'muted' }, 'looking up…'));
  const r = await getJSON('api/job?' + q);
  if (!r.ok) {
    out.replaceChildren(h('p', { class: r.status === 404 ? 'flag' : 'alarm' }, r.body.error));
    return;
  }
  const j = r.body;
  const kv = [['Group', j.group], ['Job ID', j.id], ['Key', j.key || '–'], ['State', h('span', { class: 'badge ' + j.state }, j.state)],
    ['Attempts', j.max_attempts ? j.attempts + ' of ' + j.max_attempts : j.attempts]];
  if (j.waiting) kv.push(['Waiting', j.waiting]);
  if (j.pool || j.worker) kv.push(['Running on', (j.worker || 'a worker of pool ' + (j.pool || '(none)'))]);
  for (const [label, t] of [['Published', j.published_at], ['Run at', j.run_at], ['Started', j.started_at], ['Retry at', j.retry_at], ['Ended', j.ended_at]]) {
    if (t) kv.push([label, when(t)]);
  }
  const again = () => { q.set('full', '1'); showJob(q); };
  if (j.result) kv.push(['Result', h('div', {}, ...textBlock(j.result, j.result_bytes, again))]);
  if (j.error) kv.push(['Error', h('div', {}, ...textBlock(j.error, j.error_bytes, again))]);
  out.replaceChildren(h('div', { class: 'panel', id: 'lookup-job', dataset: { state: j.state } },
    h('dl', { class: 'kv' }, kv.flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])),
    h('h2', {}, 'Failed attempts'), historyTable(j),
    config.actions && j.state === 'failed' ? h('p', {}, h('button', { type: 'button', onclick: () => retry(j.group, [j.id]) }, 'Retry this job')) : null));
}

// ---- start

async function start() {
  // The page came with the configuration and the latest snapshot: render them before anything
  // is fetched.
  let boot = null;
  try { boot = JSON.parse($('#boot').textContent); } catch (e) { /* an older server: fetch */ }
  if (boot) {
    config = boot.config;
    snap = boot.snapshot;
  } else {
    try {
      const r = await getJSON('api/config');
      if (r.ok) config = r.body;
    } catch (e) { /* the defaults do */ }
  }
  $('#namespace').textContent = config.namespace;
  for (const el of ['#tokenbar', '#failed-actions', '#cancel-panel']) $(el).hidden = !config.actions;
  takeToken();
  $('#token').addEventListener('change', (e) => sessionStorage.setItem('weave-token', e.target.value.trim()));
  $('#group-filter').addEventListener('input', () => { endedAt = 0; render(); });
  $('#group-state').addEventListener('change', render);
  $('#failed-form').addEventListener('submit', (e) => { e.preventDefault(); loadFailed(0); });
  $('#failed-newer').addEventListener('click', () => loadFailed(Math.max(0, failedOffset - (config.page_size || 50))));
  $('#failed-older').addEventListener('click', () => loadFailed(failedOffset + (config.page_size || 50)));
  $('#retry-selected').addEventListener('click', async () => {
    const byGroup = new Map();
    for (const j of selected.values()) {
      if (!byGroup.has(j.group)) byGroup.set(j.group, []);
      byGroup.get(j.group).push(j.id);
    }
    for (const [g, ids] of byGroup) await retry(g, ids);
  });
  $('#cancel-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const ids = $('#cancel-ids').value.split(/[\s,]+/).filter(Boolean).map(Number);
    if (ids.some((n) => !Number.isInteger(n) || n < 1)) { toast('Job IDs are whole numbers from 1', true); return; }
    cancel($('#cancel-group').value.trim(), ids);
  });
  $('#lookup-form').addEventListener('submit', lookup);
  window.addEventListener('hashchange', () => { takeToken(); showView(); });
  window.addEventListener('resize', render);
  // Keys 1–5 switch views, / focuses the view's first field (not while typing).
  document.addEventListener('keydown', (e) => {
    if (e.ctrlKey || e.metaKey || e.altKey || /^(INPUT|SELECT|TEXTAREA)$/.test(e.target.tagName)) return;
    if (e.key >= '1' && e.key <= '5') { location.hash = VIEWS[Number(e.key) - 1]; }
    else if (e.key === '/') {
      const f = document.querySelector('main > section:not([hidden]) input');
      if (f) { e.preventDefault(); f.focus(); }
    }
  });
  showView();
  if (!document.hidden) connect(); else disconnect();
}
start();
