// The Farm dashboard: one view of the whole farm per server-sent event from /api/events, redrawn
// in place; controls POST to /api/... with the X-Farm-Dashboard header and show the one line they
// answer (or their error) in the notice. No framework, nothing from the internet.
'use strict';

const $ = id => document.getElementById(id);
const esc = text => String(text ?? '').replace(/[&<>"']/g, c => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
const num = n => (n ?? 0).toLocaleString('en-US');
const rate = r => r >= 100 ? Math.round(r).toLocaleString('en-US') : r >= 1 ? r.toFixed(1) : r > 0 ? r.toFixed(2) : '0';
const seconds = s => s == null ? '—' : s < 10 ? s.toFixed(2) + ' s' : s.toFixed(1) + ' s';
const clock = t => new Date(t).toLocaleTimeString('en-GB');

// Draws a part of the page the feed redraws (a table body, the node cards), changing only what
// changed. Redrawing all of it on every event swapped buttons under a click in progress (pressed on
// one button, released on its replacement), and the browser then clicked no button at all: a lost
// click for a person, a failed step for the dashboard's browser test. A row or card whose figures
// change (a rate, a heartbeat's age) keeps its elements: only their text and attributes are set.
const drawn = new Map();
function draw(id, html) {
  if (drawn.get(id) === html) return;
  drawn.set(id, html);
  const next = document.createElement('template');
  next.innerHTML = html;
  morphChildren($(id), next.content);
}

// Makes the drawn node `old` look like `next`, keeping every element whose tag and place stay.
function morph(old, next) {
  if (old.isEqualNode(next)) return;
  if (old.nodeType !== next.nodeType || old.nodeName !== next.nodeName) {
    old.replaceWith(next);
    return;
  }
  if (old.nodeType !== Node.ELEMENT_NODE) {
    old.nodeValue = next.nodeValue;
    return;
  }
  for (const a of [...old.attributes]) if (!next.hasAttribute(a.name)) old.removeAttribute(a.name);
  for (const a of next.attributes) if (old.getAttribute(a.name) !== a.value) old.setAttribute(a.name, a.value);
  morphChildren(old, next);
}

// Morphs each child of `old` into the child of `next` at its place; other counts replace them all.
function morphChildren(old, next) {
  const before = [...old.childNodes];
  const after = [...next.childNodes];
  if (before.length !== after.length) {
    old.replaceChildren(...after);
    return;
  }
  before.forEach((child, i) => morph(child, after[i]));
}

let view = null;          // the last view from the node
let controlsAllowed = false;
let processesAvailable = false;
let detail = null;         // { kind, name, path, deadLetter }
const history = [];        // [{ at, send, receive }] for the chart, two minutes

// ---- the live feed ----------------------------------------------------------------------------

function connect() {
  const events = new EventSource('/api/events');
  events.onopen = () => setConnection('live', 'live');
  events.onmessage = e => render(JSON.parse(e.data));
  events.onerror = () => {
    setConnection('dead', 'reconnecting…');
    // This node may be the one that died: point at the others' dashboards.
    const others = (view?.nodes ?? []).filter(n => n.live && n.id !== view.servedBy && n.dashboardUrl);
    if (others.length) {
      showNotice('This node does not answer. Other nodes serve the same dashboard: ' +
        others.map(n => `<a href="${esc(n.dashboardUrl)}">node ${n.id}</a>`).join(', '), true, true);
    }
  };
}

function setConnection(kind, text) {
  const pill = $('connection');
  pill.className = 'pill ' + kind;
  pill.textContent = text;
}

// ---- drawing ------------------------------------------------------------------------------------

function render(next) {
  view = next;
  controlsAllowed = next.controls.allowed;
  processesAvailable = next.controls.processes;
  $('served-by').textContent = `dashboard of node ${next.servedBy}`;
  $('updated').textContent = 'updated ' + clock(next.at);
  $('controls-note').textContent = next.controls.note;
  $('process-note').textContent = next.controls.processNote;
  draw('problems', next.problems.map(p => `<li>${esc(p)}</li>`).join(''));
  renderNodes(next);
  renderTimeline(next);
  renderQueues(next);
  renderTopics(next);
  renderChart(next);
  refreshMoveForm(next);
  if (detail) renderDetailSummary();
  document.querySelectorAll('[data-control]').forEach(b => b.disabled = !controlsAllowed);
}

function renderNodes(v) {
  const unowned = v.containers.filter(c => !c.owner || !v.nodes.some(n => n.id === c.owner));
  const cards = v.nodes.map(n => {
    const alive = n.live ? 'live' : 'dead';
    const process = n.process === 'unknown' ? '' : ` · process ${esc(n.process)}`;
    const chips = n.containers.map(id => {
      const c = v.containers.find(x => x.id === id);
      const server = c?.server ? ` · on ${esc(c.server)}` : '';
      return `<span class="container" data-testid="container-${id}">container ${id} · epoch ${c?.epoch ?? '?'} · entities ${c?.entities ?? 0}${server}</span>`;
    }).join('') || '<span class="muted">no containers</span>';
    const processButtons = ['kill', 'pause', 'resume', 'stop', 'start'].map(verb =>
      `<button data-control data-process data-node="${n.id}" data-action="${verb}" ${verb === 'kill' ? 'class="danger"' : ''}
        data-testid="node-${n.id}-${verb}" ${processesAvailable ? '' : 'title="node processes cannot be reached from this node"'}>${verb}</button>`).join('');
    return `<div class="node ${alive}" data-testid="node-${n.id}" data-live="${n.live}">
      <h3>Node ${n.id} <span class="pill ${n.live ? 'live' : 'dead'}" data-testid="node-${n.id}-state">${n.live ? esc(n.state) : 'down'}</span>
        ${n.process === 'paused' ? '<span class="pill warn">paused</span>' : ''}</h3>
      <div class="facts">${esc(n.address)}${n.amqpAddress ? ` · ${esc(n.amqpAddress)}` : ''} · heartbeat ${seconds(n.heartbeatAgeSeconds)} ago · pid ${n.processId}${process}
        ${n.dashboardUrl ? ` · <a href="${esc(n.dashboardUrl)}">its dashboard</a>` : ''}</div>
      <div class="containers" data-testid="node-${n.id}-containers">${chips}</div>
      <div class="actions">${processButtons}
        <button data-control data-node="${n.id}" data-action="drain" data-testid="node-${n.id}-drain">drain</button></div>
    </div>`;
  });
  if (unowned.length) {
    cards.push(`<div class="node dead" data-testid="unowned"><h3>Without an owner</h3><div class="containers">${
      unowned.map(c => `<span class="container unowned" data-testid="container-${c.id}">container ${c.id} · epoch ${c.epoch}</span>`).join('')}</div></div>`);
  }
  draw('nodes', cards.join(''));
  $('nodes').querySelectorAll('button[data-process]').forEach(b => { if (!processesAvailable) b.disabled = true; });
}

function renderTimeline(v) {
  draw('timeline', v.changes.map(c => `<tr data-kind="${esc(c.kind)}">
    <td>${clock(c.at)}</td><td>${c.container}</td><td>${c.from ? 'node ' + c.from : '—'} → node ${c.to}</td>
    <td>${esc(c.kind)}</td><td class="num">${seconds(c.unownedSeconds)}</td></tr>`).join('')
    || '<tr><td colspan="5" class="muted">no ownership changes yet</td></tr>');
}

function countsCells(c) {
  return c ? `<td class="num">${num(c.active)}</td><td class="num">${num(c.deadLetter)}</td>`
    : '<td class="muted">—</td><td class="muted">—</td>';
}

function entityButtons(path, kind, name, topic) {
  const data = `data-path="${esc(path)}" data-kind="${kind}" data-name="${esc(name)}" data-topic="${esc(topic ?? '')}"`;
  return `<div class="actions">
    <button ${data} data-open="messages">peek</button>
    <button ${data} data-open="dead-letters">dead letters</button>
    <button data-control class="danger" ${data} data-delete>delete</button></div>`;
}

function renderQueues(v) {
  draw('queues', v.queues.map(q => {
    const c = q.counts;
    return `<tr data-testid="queue-${esc(q.name)}">
      <td><a class="entity" data-path="${esc(q.name)}" data-kind="queue" data-name="${esc(q.name)}" data-open="messages">${esc(q.name)}</a>${q.problem ? ` <span class="pill warn">${esc(q.problem)}</span>` : ''}</td>
      <td>${q.container}</td>
      ${c ? `<td class="num" data-testid="queue-${esc(q.name)}-active">${num(c.active)}</td><td class="num" data-testid="queue-${esc(q.name)}-dead-letters">${num(c.deadLetter)}</td>
      <td class="num">${num(c.scheduled)}</td><td class="num">${num(c.deferred)}</td><td class="num">${num(c.locked)}</td>`
        : '<td colspan="5" class="muted">counts unavailable (owner moving)</td>'}
      <td class="num" data-testid="queue-${esc(q.name)}-send-rate">${rate(q.sendRate)}</td>
      <td class="num" data-testid="queue-${esc(q.name)}-receive-rate">${rate(q.receiveRate)}</td>
      <td>${entityButtons(q.name, 'queue', q.name)}</td></tr>`;
  }).join('') || '<tr><td colspan="10" class="muted">no queues</td></tr>');
}

function renderTopics(v) {
  draw('topics', v.topics.map(t => {
    const subs = t.subscriptions.map(s => `<tr class="sub" data-testid="subscription-${esc(s.path)}">
      <td><a class="entity" data-path="${esc(s.path)}" data-kind="subscription" data-name="${esc(s.name)}" data-topic="${esc(t.name)}" data-open="messages">${esc(s.name)}</a></td>
      <td></td><td></td>${countsCells(s.counts)}<td></td><td class="num">${rate(s.receiveRate)}</td>
      <td>${entityButtons(s.path, 'subscription', s.name, t.name)}</td></tr>`).join('');
    return `<tr data-testid="topic-${esc(t.name)}">
      <td><a class="entity" data-path="${esc(t.name)}" data-kind="topic" data-name="${esc(t.name)}" data-open="topic">${esc(t.name)}</a>${t.problem ? ` <span class="pill warn">${esc(t.problem)}</span>` : ''}</td>
      <td>${t.container}</td>
      <td><span data-testid="topic-${esc(t.name)}-ordering">${t.supportOrdering ? 'on' : 'off'}</span>
        <button data-control data-ordering="${esc(t.name)}" data-value="${!t.supportOrdering}" data-testid="topic-${esc(t.name)}-ordering-switch">turn ${t.supportOrdering ? 'off' : 'on'}</button></td>
      <td class="num">${num(t.messages)}</td><td></td><td class="num">${rate(t.sendRate)}</td><td></td>
      <td><div class="actions"><button data-control class="danger" data-path="${esc(t.name)}" data-kind="topic" data-name="${esc(t.name)}" data-delete>delete</button></div></td></tr>${subs}`;
  }).join('') || '<tr><td colspan="8" class="muted">no topics</td></tr>');
}

function renderChart(v) {
  const send = v.queues.reduce((s, q) => s + q.sendRate, 0) + v.topics.reduce((s, t) => s + t.sendRate, 0);
  const receive = v.queues.reduce((s, q) => s + q.receiveRate, 0)
    + v.topics.reduce((s, t) => s + t.subscriptions.reduce((x, sub) => x + sub.receiveRate, 0), 0);
  history.push({ at: Date.parse(v.at), send, receive });
  while (history.length && history[0].at < Date.parse(v.at) - 120_000) history.shift();
  const top = Math.max(10, ...history.map(h => Math.max(h.send, h.receive))) * 1.1;
  const start = Date.parse(v.at) - 120_000;
  const line = key => history.map(h => `${((h.at - start) / 120_000 * 600).toFixed(1)},${(160 - h[key] / top * 150).toFixed(1)}`).join(' ');
  $('chart').innerHTML = `<text x="4" y="12" font-size="10" fill="#6b7280">${rate(top)}/s</text>
    <polyline fill="none" stroke="var(--send)" stroke-width="2" points="${line('send')}"/>
    <polyline fill="none" stroke="var(--receive)" stroke-width="2" points="${line('receive')}"/>`;
  $('rate-now').textContent = `now: ${rate(send)} sent/s, ${rate(receive)} received/s`;
}

function refreshMoveForm(v) {
  setOptions($('move-container'), v.containers.map(c => [c.id, `container ${c.id} (node ${c.owner || '—'})`]));
  setOptions($('move-to'), v.nodes.map(n => [n.id, `node ${n.id}${n.live ? '' : ' (down)'}`]));
}

// Replaces a select's options only when they changed, so a choice being made is not reset.
function setOptions(select, options) {
  const html = options.map(([value, text]) => `<option value="${value}">${esc(text)}</option>`).join('');
  if (select.dataset.html === html) return;
  const chosen = select.value;
  select.innerHTML = html;
  select.dataset.html = html;
  if ([...select.options].some(o => o.value === chosen)) select.value = chosen;
}

// ---- the entity panel: a topic's settings, an entity's messages or dead letters -------------

function findTopic(name) { return view?.topics.find(t => t.name === name); }

function renderDetailSummary() {
  if (detail.kind === 'topic') {
    const t = findTopic(detail.name);
    $('detail-summary').textContent = t
      ? `Topic ${t.name} in container ${t.container}: SupportOrdering is ${t.supportOrdering ? 'on' : 'off'}; ${t.subscriptions.length} subscription(s), ${num(t.messages)} message(s) stored.`
      : `Topic ${detail.name} no longer exists.`;
  }
}

async function openDetail(target) {
  detail = { kind: target.dataset.kind, name: target.dataset.name, path: target.dataset.path, topic: target.dataset.topic,
    deadLetter: target.dataset.open === 'dead-letters', mode: target.dataset.open };
  $('detail').hidden = false;
  $('messages').innerHTML = '';
  $('detail-summary').textContent = '';
  if (detail.mode === 'topic') {
    const t = findTopic(detail.name);
    $('detail-title').textContent = `Topic ${detail.name}`;
    $('detail-actions').innerHTML = t ? `<button data-control data-ordering="${esc(t.name)}" data-value="${!t.supportOrdering}" data-testid="detail-ordering-switch">turn SupportOrdering ${t.supportOrdering ? 'off' : 'on'}</button>` : '';
    renderDetailSummary();
    $('detail').scrollIntoView({ block: 'nearest' });
    return;
  }
  $('detail-title').textContent = `${detail.deadLetter ? 'Dead letters of' : 'Messages of'} ${detail.path}`;
  const buttons = [`<button data-refresh>refresh</button>`];
  if (detail.deadLetter) {
    buttons.push(`<button data-control data-resubmit-all data-testid="resubmit-all">resubmit all</button>`);
  }
  buttons.push(`<button data-control class="danger" data-purge data-testid="purge">purge ${detail.deadLetter ? 'dead letters' : 'messages'}</button>`);
  $('detail-actions').innerHTML = buttons.join('');
  await peek();
  $('detail').scrollIntoView({ block: 'nearest' });
}

async function peek() {
  const query = new URLSearchParams({ entity: detail.path, deadLetter: detail.deadLetter, max: 50 });
  const answer = await call('GET', '/api/messages?' + query, null, true);
  if (!answer) return;
  $('detail-summary').textContent = `${answer.messages.length} message(s) peeked (at most 50, lowest sequence number first).`;
  $('messages').innerHTML = answer.messages.map(m => `<tr data-testid="message-${m.sequenceNumber}">
    <td>${m.sequenceNumber}</td><td>${esc(m.state)}</td><td>${m.deliveryCount}</td><td>${esc(m.messageId)}</td><td>${esc(m.subject)}</td>
    <td><pre>${esc(m.body)}${m.bodyIsBase64 ? ' (base64)' : ''}</pre></td>
    <td><pre>${esc(Object.entries(m.properties).map(([k, v]) => `${k}=${v}`).join('\n'))}</pre></td>
    <td>${esc(m.deadLetterReason)}${m.deadLetterDescription ? ': ' + esc(m.deadLetterDescription) : ''}</td>
    <td>${detail.deadLetter ? `<button data-control data-resubmit="${m.sequenceNumber}" data-testid="resubmit-${m.sequenceNumber}">resubmit</button>` : ''}</td></tr>`).join('')
    || '<tr><td colspan="9" class="muted">no messages</td></tr>';
  document.querySelectorAll('#detail [data-control]').forEach(b => b.disabled = !controlsAllowed);
}

// ---- controls -----------------------------------------------------------------------------------

function showNotice(html, isError, raw) {
  const notice = $('notice');
  notice.hidden = false;
  notice.className = isError ? 'error' : '';
  if (raw) notice.innerHTML = html; else notice.textContent = html;
}

// Calls the node's API; shows the answer's one line (or error) and returns the JSON, or null on error.
async function call(method, url, body, quiet) {
  try {
    const response = await fetch(url, {
      method,
      headers: { 'X-Farm-Dashboard': '1', ...(body ? { 'Content-Type': 'application/json' } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    const answer = await response.json().catch(() => ({ error: `${response.status} ${response.statusText}` }));
    if (!response.ok) {
      showNotice(answer.error ?? `${response.status} ${response.statusText}`, true);
      return null;
    }
    if (!quiet) showNotice(answer.message ?? 'done', false);
    return answer;
  } catch (e) {
    showNotice(`The node did not answer: ${e.message}`, true);
    return null;
  }
}

async function act(button, method, url, body) {
  button.disabled = true;
  showNotice(`${button.textContent.trim()}…`, false);
  try {
    const answer = await call(method, url, body);
    if (answer && detail && detail.mode !== 'topic') await peek();
  } finally {
    button.disabled = !controlsAllowed;
  }
}

document.addEventListener('click', e => {
  const b = e.target.closest('button, a.entity');
  if (!b) return;
  const d = b.dataset;
  if (d.open) return void openDetail(b);
  if (d.refresh !== undefined) return void peek();
  if (d.action) return void act(b, 'POST', `/api/nodes/${d.node}/${d.action}`);
  if (d.ordering) return void act(b, 'POST', '/api/topics/ordering', { topic: d.ordering, supportOrdering: d.value === 'true' });
  if (d.delete !== undefined) {
    if (!confirm(`Delete ${d.kind} ${d.path} and every message in it?`)) return;
    return void act(b, 'POST', '/api/entities/delete', { kind: d.kind, name: d.name, topic: d.topic || null });
  }
  if (d.resubmit) return void act(b, 'POST', '/api/dead-letters/resubmit', { entity: detail.path, sequenceNumbers: [Number(d.resubmit)] });
  if (d.resubmitAll !== undefined) return void act(b, 'POST', '/api/dead-letters/resubmit', { entity: detail.path });
  if (d.purge !== undefined) {
    if (!confirm(`Purge ${detail.deadLetter ? 'the dead letters' : 'the messages'} of ${detail.path}?`)) return;
    return void act(b, 'POST', '/api/messages/purge', { entity: detail.path, deadLetter: detail.deadLetter });
  }
});

$('move-form').addEventListener('submit', e => {
  e.preventDefault();
  act(e.submitter, 'POST', `/api/containers/${$('move-container').value}/move`, { toNode: Number($('move-to').value) });
});

$('create-kind').addEventListener('change', () => {
  const kind = $('create-kind').value;
  $('create-topic').hidden = kind !== 'subscription';
  $('create-ordering-label').hidden = kind !== 'topic';
});

$('create-form').addEventListener('submit', e => {
  e.preventDefault();
  act(e.submitter, 'POST', '/api/entities', {
    kind: $('create-kind').value, name: $('create-name').value, topic: $('create-topic').value || null,
    supportOrdering: $('create-ordering').checked,
  });
});

connect();
