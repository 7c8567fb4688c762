// The market explorer: plain browser JavaScript over the public API, drawn on canvas (uPlot for
// the lines, a canvas per outcome for depth). The key lives in sessionStorage and travels only
// as an Authorization header. Pages are fetched one after another and drawn as they arrive.
/* global uPlot */

const $ = (id) => document.getElementById(id);
const COINS = { 'wallet-prediction': ['btc', 'eth', 'bnb'], polymarket: ['btc', 'eth', 'sol', 'xrp'] };
const INTERVALS = [
  ['1s', 1e3],
  ['5s', 5e3],
  ['15s', 15e3],
  ['1m', 6e4],
  ['5m', 3e5],
  ['15m', 9e5],
  ['1h', 3.6e6],
];
const KEY_ITEM = 'pmh_key';
// Books answered just after a window closes belong to it: the API's ranges run this long past the end.
const CAPTURE_LAG_MS = 60_000;
const wholeMarket = (m) => [Date.parse(m.start_time), Date.parse(m.end_time) + CAPTURE_LAG_MS];

const state = {
  market: null, // the market record shown
  view: null, // [from, to) in ms
  snapshots: [], // loaded for the heatmaps, in time order
  series: { ts: [], chance: [], price: [], last_trade: [] },
  trades: [], // of the shown outcome in the view: { t, price, side, source }
  reference: { ts: [], price: [], gaps: [] }, // the coin's Chainlink price in the view, and its feed's gaps
  referencePlot: null,
  gaps: [],
  interval: null,
  loading: 0, // generation counter: a newer load abandons an older one
  ladderAt: null,
  ladder: null,
  plot: null,
  marketsCursor: null,
  pagesLoaded: 0,
};
window.explorer = state; // read by the browser test

// --- the API -------------------------------------------------------------------------------

function key() {
  return sessionStorage.getItem(KEY_ITEM) || '';
}

function status(text) {
  $('status').textContent = text;
}

async function api(path, params = {}, as = 'json') {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') url.searchParams.set(k, String(v));
  const res = await fetch(url, { headers: { Authorization: `Bearer ${key()}` } });
  if (!res.ok) {
    let message = `HTTP ${res.status}`;
    try {
      const body = await res.json();
      message = `${body.error.code}: ${body.error.message}`;
    } catch {
      /* not an envelope */
    }
    throw new Error(message);
  }
  return as === 'json' ? res.json() : res.blob();
}

const iso = (ms) => new Date(ms).toISOString();
const short = (ms) =>
  iso(ms)
    .replace('T', ' ')
    .replace(/\.000Z$|Z$/, '');
const fromLocalInput = (v) => (v ? Date.parse(`${v}:00Z`) : null);

function isWallet(m) {
  return m.venue === 'predict_fun';
}

function base(m) {
  return isWallet(m) ? `/v3/wallet-prediction/${m.market_id}` : `/v3/${m.coin}/markets/${m.market_id}`;
}

// --- browsing markets ------------------------------------------------------------------------

function fillCoins() {
  const coins = COINS[$('venue').value];
  $('coin').innerHTML =
    ($('venue').value === 'wallet-prediction' ? '<option value="">all</option>' : '') + coins.map((c) => `<option>${c}</option>`).join('');
}

function marketQuery() {
  const venue = $('venue').value;
  const params = { limit: 50, window: $('window').value, status: $('market-status').value, min_coverage: $('min-coverage').value };
  const from = fromLocalInput($('from').value);
  const to = fromLocalInput($('to').value);
  if (from) params.start_time = from;
  if (to) params.end_time = to;
  if (venue === 'wallet-prediction') return { path: '/v3/wallet-prediction/markets', params: { ...params, coin: $('coin').value } };
  return { path: `/v3/${$('coin').value}/markets`, params };
}

async function loadMarkets(more = false) {
  const { path, params } = marketQuery();
  if (!more) {
    $('markets').querySelector('tbody').innerHTML = '';
    state.marketsCursor = null;
  }
  status('loading markets...');
  try {
    const page = await api(path, { ...params, cursor: more ? state.marketsCursor : undefined });
    const body = $('markets').querySelector('tbody');
    for (const m of page.data) {
      const tr = document.createElement('tr');
      tr.dataset.marketId = m.market_id;
      const winner = m.winning_outcome ? m.winning_outcome.label : '';
      tr.innerHTML = `<td>${short(Date.parse(m.start_time))}</td><td title="${escapeHtml(m.title ?? '')}">${m.market_id}</td><td>${m.coin}</td><td>${m.window}</td><td>${m.status}</td><td>${m.resolution}</td><td>${escapeHtml(winner)}</td><td title="${coverageTitle(m)}">${coverageText(m)}</td>`;
      tr.addEventListener('click', () => openMarket(m, tr));
      body.append(tr);
    }
    state.marketsCursor = page.pagination.next_cursor;
    $('more').hidden = !page.pagination.has_more;
    status(`${body.children.length} markets`);
  } catch (err) {
    status(err.message);
  }
}

async function loadCoverage() {
  const body = $('coverage').querySelector('tbody');
  body.innerHTML = '';
  try {
    const { data } = await api('/v3/wallet-prediction/coverage');
    for (const r of data.recorded) {
      const tr = document.createElement('tr');
      tr.innerHTML = `<td>${r.dataset}</td><td>${r.coin}</td><td>${r.window}</td><td>${r.first ? short(Date.parse(r.first)) : '-'}</td><td>${r.last ? short(Date.parse(r.last)) : '-'}</td><td>${r.rows}</td><td>${r.files}</td>`;
      body.append(tr);
    }
  } catch (err) {
    body.innerHTML = `<tr><td colspan="7">${escapeHtml(err.message)}</td></tr>`;
  }
}

/** The sealed window's share covered, or why there is none yet. */
function coverageText(m) {
  return m.coverage ? `${(100 * m.coverage.share).toFixed(1)}%` : '-';
}

function coverageTitle(m) {
  if (!m.coverage) return 'open or not yet sealed: see the certificate';
  const missing = Object.entries(m.coverage.missing_seconds).filter(([, s]) => s > 0);
  return missing.length ? `missing: ${missing.map(([cause, s]) => `${cause} ${s} s`).join(', ')}` : 'nothing missing';
}

function escapeHtml(s) {
  return String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

// --- one market ------------------------------------------------------------------------------

async function openMarket(m, row) {
  for (const r of $('markets').querySelectorAll('tr.selected')) r.classList.remove('selected');
  row?.classList.add('selected');
  state.market = m;
  $('market').hidden = false;
  $('market-title').textContent = `${m.title ?? m.slug ?? m.market_id} (${m.market_id})`;
  const winner = m.winning_outcome ? `winner ${m.winning_outcome.label}` : 'no winner yet';
  $('market-facts').textContent =
    `${m.coin.toUpperCase()} ${m.window}, ${short(Date.parse(m.start_time))} to ${short(Date.parse(m.end_time))} UTC, ${m.status}, resolution ${m.resolution}, ${winner}, coverage ${coverageText(m)} (${coverageTitle(m)})`;
  $('outcome').innerHTML = m.outcomes.map((o) => `<option value="${o.index}">${escapeHtml(o.label)}</option>`).join('');
  $('heatmaps').innerHTML = m.outcomes
    .map(
      (o) =>
        `<figure><figcaption>${escapeHtml(o.label)}: bids green, asks red, brighter is more size</figcaption><canvas data-outcome="${o.index}" width="640" height="260"></canvas></figure>`,
    )
    .join('');
  for (const canvas of $('heatmaps').querySelectorAll('canvas')) {
    canvas.addEventListener('mousemove', (e) => {
      const r = canvas.getBoundingClientRect();
      scrubTo(state.view[0] + ((e.clientX - r.left) / r.width) * (state.view[1] - state.view[0]));
    });
  }
  loadCertificate(m);
  await setView(wholeMarket(m));
  loadFiles();
}

/** What vouched for the window's recorded books, from its certificate: checked against the venue, or not. */
async function loadCertificate(m) {
  const el = $('market-certificate');
  el.textContent = '';
  try {
    const { data } = await api(`${base(m)}/certificate`);
    if (state.market !== m) return;
    const { recorded, verified_by: by } = data.books;
    const checks = [
      ['the venue’s own book', by.snapshot],
      ['hash', by.hash],
      ['REST', by.rest],
      ['best bid/ask only', by.best_bid_ask],
      ['unchecked', by.none],
      ['not known', by.unknown],
    ].filter(([, n]) => n > 0);
    el.textContent = `${recorded} books recorded in the window${checks.length ? `: ${checks.map(([what, n]) => `${n} ${what}`).join(', ')}` : ''}`;
    el.dataset.books = String(recorded);
  } catch (err) {
    el.textContent = `certificate: ${err.message}`;
  }
}

/** The smallest interval that keeps the view to about two columns per canvas pixel; none when every record fits. */
function intervalFor(span) {
  const width = 640;
  if (span / 1000 <= width * 2) return null;
  for (const [name, ms] of INTERVALS) if (span / ms <= width * 2) return [name, ms];
  return INTERVALS[INTERVALS.length - 1];
}

async function setView(view) {
  const generation = ++state.loading;
  state.view = view;
  state.snapshots = [];
  state.series = { ts: [], chance: [], price: [], last_trade: [] };
  state.trades = [];
  state.reference = { ts: [], price: [], gaps: [] };
  state.gaps = [];
  state.pagesLoaded = 0;
  const chosen = intervalFor(view[1] - view[0]);
  state.interval = chosen ? chosen[0] : null;
  $('view').textContent =
    `${short(view[0])} to ${short(view[1])} UTC, ${state.interval ? `one book per ${state.interval}` : 'every recorded book'}`;
  drawSeries();
  drawReference();
  drawHeatmaps();
  status('loading books...');
  await Promise.all([loadSeries(generation), loadSnapshots(generation), loadTrades(generation), loadReference(generation)]);
  if (generation !== state.loading) return;
  drawSeries();
  drawReference();
  status(`${state.snapshots.length} snapshots, ${state.series.ts.length} samples, ${state.trades.length} trades`);
  scrubTo(state.ladderAt !== null && state.ladderAt >= view[0] && state.ladderAt < view[1] ? state.ladderAt : view[1] - 1);
}

/** Every page of a paged route, following its cursors. */
async function* pages(path, params) {
  let cursor;
  do {
    const page = await api(path, { ...params, cursor });
    yield page;
    cursor = page.pagination.has_more ? page.pagination.next_cursor : null;
  } while (cursor);
}

async function loadSnapshots(generation) {
  const m = state.market;
  const params = { start_time: state.view[0], end_time: state.view[1], limit: 1000, interval: state.interval };
  if (!isWallet(m)) params.include_orderbook = 'true';
  for await (const page of pages(`${base(m)}/snapshots`, params)) {
    if (generation !== state.loading) return;
    state.snapshots.push(...page.data.map((s) => ({ t: Date.parse(s.timestamp), books: s.books })));
    addGaps(page.meta.gaps);
    state.pagesLoaded++;
    if (!isWallet(m)) seriesFromBooks(page.data);
    drawHeatmaps();
    if (!isWallet(m)) drawSeries();
  }
}

/** Wallet markets have recorded chance, price and last trade; other venues get the mid from their books. */
async function loadSeries(generation) {
  const m = state.market;
  if (!isWallet(m)) return;
  const outcome = Number($('outcome').value || 0);
  const byMetric = {};
  for (const metric of ['chance', 'price', 'last_trade']) {
    const samples = [];
    const params = { metric, outcome, start_time: state.view[0], end_time: state.view[1], limit: 1000, interval: state.interval };
    for await (const page of pages(`${base(m)}/timeseries`, params)) {
      if (generation !== state.loading) return;
      samples.push(...page.data);
      addGaps(page.meta.gaps);
    }
    byMetric[metric] = new Map(samples.map((s) => [Date.parse(s.timestamp), s.value]));
  }
  const times = [...new Set(Object.values(byMetric).flatMap((mp) => [...mp.keys()]))].sort((a, b) => a - b);
  state.series = {
    ts: times,
    chance: times.map((t) => byMetric.chance.get(t) ?? null),
    price: times.map((t) => byMetric.price.get(t) ?? null),
    last_trade: times.map((t) => byMetric.last_trade.get(t) ?? null),
  };
  drawSeries();
}

/** The shown outcome's trades in the view, every one (trades are not downsampled). */
async function loadTrades(generation) {
  const m = state.market;
  const outcome = Number($('outcome').value || 0);
  const trades = [];
  for await (const page of pages(`${base(m)}/trades`, { outcome, start_time: state.view[0], end_time: state.view[1], limit: 1000 })) {
    if (generation !== state.loading) return;
    trades.push(...page.data.map((x) => ({ t: Date.parse(x.timestamp), price: x.price, side: x.side, source: x.source })));
  }
  state.trades = trades;
}

/** The coin's Chainlink price in the view (every observation: about one a second) and its feed's gaps. */
async function loadReference(generation) {
  const m = state.market;
  const ts = [];
  const price = [];
  const gaps = [];
  for await (const page of pages(`/v3/reference/${m.coin}`, { start_time: state.view[0], end_time: state.view[1], limit: 1000 })) {
    if (generation !== state.loading) return;
    for (const o of page.data) {
      ts.push(Date.parse(o.ts));
      price.push(o.price);
    }
    for (const g of page.meta.gaps)
      if (!gaps.some((x) => x.from === Date.parse(g.from))) gaps.push({ from: Date.parse(g.from), to: Date.parse(g.to) });
  }
  state.reference = { ts, price, gaps };
}

function seriesFromBooks(snapshots) {
  const outcome = Number($('outcome').value || 0);
  for (const s of snapshots) {
    const b = s.books.find((x) => x.outcome_index === outcome);
    if (!b) continue;
    const bid = b.bid_prices[0] ?? null;
    const ask = b.ask_prices[0] ?? null;
    state.series.ts.push(Date.parse(s.timestamp));
    state.series.chance.push(bid !== null && ask !== null ? (bid + ask) / 2 : null);
    state.series.price.push(bid);
    state.series.last_trade.push(ask);
  }
}

function addGaps(gaps = []) {
  for (const g of gaps) {
    const from = Date.parse(g.from);
    const to = Date.parse(g.to);
    if (!state.gaps.some((x) => x.from === from && x.to === to)) state.gaps.push({ from, to, reason: g.reason });
  }
}

// --- drawing ---------------------------------------------------------------------------------

function drawSeries() {
  const el = $('series');
  const wallet = !state.market || isWallet(state.market);
  $('series-title').textContent = wallet ? 'Chance, price and last trade' : 'Mid, best bid and best ask (from the books)';
  const names = wallet ? ['chance', 'price', 'last trade'] : ['mid', 'best bid', 'best ask'];
  // A null at each gap's start breaks the lines there: nothing is drawn across a span with no record.
  const rows = state.series.ts.map((t, i) => [t, state.series.chance[i], state.series.price[i], state.series.last_trade[i]]);
  for (const g of state.gaps) if (g.from > state.view[0] && g.from < state.view[1]) rows.push([g.from, null, null, null]);
  rows.sort((a, b) => a[0] - b[0]);
  const data = [rows.map((r) => r[0] / 1000), rows.map((r) => r[1]), rows.map((r) => r[2]), rows.map((r) => r[3])];
  if (state.plot) state.plot.destroy();
  const width = Math.max(300, el.clientWidth || 800);
  state.plot = new uPlot(
    {
      width,
      height: 240,
      tzDate: (ts) => uPlot.tzDate(new Date(ts * 1e3), 'Etc/UTC'),
      scales: { x: { time: true, min: state.view[0] / 1000, max: state.view[1] / 1000 }, y: { range: [0, 1] } },
      series: [
        {},
        { label: names[0], stroke: '#1f6feb', width: 1.5, spanGaps: false },
        { label: names[1], stroke: '#8250df', width: 1 },
        { label: names[2], stroke: '#bf8700', width: 1, paths: uPlot.paths.stepped({ align: 1 }) },
      ],
      cursor: { drag: { x: true, y: false } },
      hooks: {
        drawClear: [(u) => shadeGaps(u.ctx, (t) => u.valToPos(t / 1000, 'x', true), u.bbox.top, u.bbox.height)],
        draw: [(u) => (el.dataset.trades = String(markTrades(u)))],
        setSelect: [
          (u) => {
            if (u.select.width < 5) return;
            const from = u.posToVal(u.select.left, 'x') * 1000;
            const to = u.posToVal(u.select.left + u.select.width, 'x') * 1000;
            u.setSelect({ width: 0, height: 0 }, false);
            setView([Math.floor(from), Math.ceil(to)]);
          },
        ],
      },
    },
    data,
    el,
  );
  el.dataset.points = String(state.series.ts.length);
}

/**
 * The coin's reference price under the market's lines: the window's open and close as the market
 * record gives them (a dot each, the open's level dashed across), nothing where the record has none.
 */
function drawReference() {
  const el = $('reference');
  const m = state.market;
  if (!el || !m) return;
  const r = state.reference;
  const rows = r.ts.map((t, i) => [t, r.price[i]]);
  for (const g of r.gaps) if (g.from > state.view[0] && g.from < state.view[1]) rows.push([g.from, null]);
  rows.sort((a, b) => a[0] - b[0]);
  if (state.referencePlot) state.referencePlot.destroy();
  const marks = [m.reference?.open, m.reference?.close].filter(Boolean).map((p) => ({ t: Date.parse(p.ts), price: p.price }));
  const shown = marks.filter((p) => p.t >= state.view[0] && p.t < state.view[1]);
  const prices = [...r.price, ...shown.map((p) => p.price)];
  const [lo, hi] = prices.length ? [Math.min(...prices), Math.max(...prices)] : [0, 1];
  const pad = Math.max((hi - lo) * 0.1, hi * 1e-5);
  $('reference-title').textContent = `${m.coin.toUpperCase()}/USD, Chainlink (what the window resolves on)${
    m.reference?.outcome_by_reference ? `: ${m.reference.outcome_by_reference} by the reference` : ''
  }${m.reference?.agrees_with_resolution === false ? ', the venue resolved it the other way' : ''}`;
  state.referencePlot = new uPlot(
    {
      width: Math.max(300, el.clientWidth || 800),
      height: 160,
      tzDate: (ts) => uPlot.tzDate(new Date(ts * 1e3), 'Etc/UTC'),
      scales: { x: { time: true, min: state.view[0] / 1000, max: state.view[1] / 1000 }, y: { range: [lo - pad, hi + pad] } },
      series: [{}, { label: 'price', stroke: '#0969da', width: 1.25, spanGaps: false }],
      hooks: {
        drawClear: [
          (u) => {
            const ctx = u.ctx;
            ctx.save();
            ctx.fillStyle = 'rgba(120, 120, 120, 0.22)';
            for (const g of r.gaps) {
              const a = Math.max(u.valToPos(g.from / 1000, 'x', true), u.bbox.left);
              const b = Math.min(u.valToPos(g.to / 1000, 'x', true), u.bbox.left + u.bbox.width);
              if (b > a) ctx.fillRect(a, u.bbox.top, Math.max(1, b - a), u.bbox.height);
            }
            ctx.restore();
          },
        ],
        draw: [
          (u) => {
            const ctx = u.ctx;
            ctx.save();
            const open = marks[0] && m.reference?.open ? marks[0] : null;
            if (open) {
              const y = u.valToPos(open.price, 'y', true);
              ctx.setLineDash([4 * devicePixelRatio, 4 * devicePixelRatio]);
              ctx.strokeStyle = '#57606a';
              ctx.beginPath();
              ctx.moveTo(u.bbox.left, y);
              ctx.lineTo(u.bbox.left + u.bbox.width, y);
              ctx.stroke();
              ctx.setLineDash([]);
            }
            for (const p of shown) {
              ctx.fillStyle = '#cf222e';
              ctx.beginPath();
              ctx.arc(u.valToPos(p.t / 1000, 'x', true), u.valToPos(p.price, 'y', true), 4 * devicePixelRatio, 0, 2 * Math.PI);
              ctx.fill();
            }
            ctx.restore();
            el.dataset.marks = String(shown.length);
          },
        ],
      },
    },
    [rows.map((x) => x[0] / 1000), rows.map((x) => x[1])],
    el,
  );
  el.dataset.points = String(r.ts.length);
}

/**
 * Each trade of the view at its time and price: a fill the venue streamed as a triangle (up for a
 * buy, down for a sell), a last-trade price only seen changing over REST as a hollow circle.
 * Returns how many were drawn.
 */
function markTrades(u) {
  const ctx = u.ctx;
  const r = 3.5 * devicePixelRatio;
  let drawn = 0;
  ctx.save();
  for (const trade of state.trades) {
    if (trade.t < state.view[0] || trade.t >= state.view[1]) continue;
    const x = u.valToPos(trade.t / 1000, 'x', true);
    const y = u.valToPos(trade.price, 'y', true);
    ctx.beginPath();
    if (trade.source !== 'stream') {
      ctx.strokeStyle = '#57606a';
      ctx.arc(x, y, r, 0, 2 * Math.PI);
      ctx.stroke();
    } else {
      const dir = trade.side === 'sell' ? 1 : -1;
      ctx.fillStyle = trade.side === 'sell' ? '#cf222e' : '#1a7f37';
      ctx.moveTo(x, y + dir * r);
      ctx.lineTo(x - r, y - dir * r);
      ctx.lineTo(x + r, y - dir * r);
      ctx.closePath();
      ctx.fill();
    }
    drawn++;
  }
  ctx.restore();
  return drawn;
}

function shadeGaps(ctx, x, top, height) {
  ctx.save();
  ctx.fillStyle = 'rgba(120, 120, 120, 0.22)';
  for (const g of state.gaps) {
    const a = Math.max(x(g.from), x(state.view[0]));
    const b = Math.min(x(g.to), x(state.view[1]));
    if (b > a) ctx.fillRect(a, top, Math.max(1, b - a), height);
  }
  ctx.restore();
}

/** Pixels written straight into an ImageData: a 15-minute market recorded at every change is thousands of books. */
function drawHeatmaps() {
  if (!state.market) return;
  let maxSize = 1;
  for (const s of state.snapshots) for (const b of s.books) for (const z of b.bid_sizes.concat(b.ask_sizes)) if (z > maxSize) maxSize = z;
  const scale = Math.log1p(maxSize);
  const [v0, v1] = state.view;
  for (const canvas of $('heatmaps').querySelectorAll('canvas')) {
    const outcome = Number(canvas.dataset.outcome);
    const ctx = canvas.getContext('2d');
    const { width, height } = canvas;
    const image = ctx.createImageData(width, height);
    const px = image.data;
    for (let i = 0; i < px.length; i += 4) {
      px[i] = 13;
      px[i + 1] = 17;
      px[i + 2] = 23;
      px[i + 3] = 255;
    }
    const x = (t) => ((t - v0) / (v1 - v0)) * width;
    const rowHeight = Math.max(1, Math.round(height / 100));
    const paint = (x0, x1, price, size, [r, g, b]) => {
      const a = 0.15 + 0.85 * (Math.log1p(size) / scale);
      const top = Math.max(0, Math.round((1 - price) * height - rowHeight / 2));
      const bottom = Math.min(height, top + rowHeight);
      for (let yy = top; yy < bottom; yy++) {
        for (let xx = x0; xx < x1; xx++) {
          const o = (yy * width + xx) * 4;
          px[o] = 13 + (r - 13) * a;
          px[o + 1] = 17 + (g - 17) * a;
          px[o + 2] = 23 + (b - 23) * a;
        }
      }
    };
    let drawn = 0;
    for (let i = 0; i < state.snapshots.length; i++) {
      const s = state.snapshots[i];
      const book = s.books.find((q) => q.outcome_index === outcome);
      if (!book) continue;
      const left = Math.max(0, Math.floor(x(s.t)));
      // A book holds until the next one, or until a gap starts: depth is never drawn across a gap.
      let until =
        i + 1 < state.snapshots.length ? state.snapshots[i + 1].t : s.t + Math.max(1000, (v1 - v0) / Math.max(1, state.snapshots.length));
      for (const g of state.gaps) if (g.from >= s.t && g.from < until) until = g.from;
      const right = Math.min(width, Math.max(left + 1, Math.ceil(x(until))));
      for (let k = 0; k < book.bid_prices.length; k++) paint(left, right, book.bid_prices[k], book.bid_sizes[k], [46, 204, 113]);
      for (let k = 0; k < book.ask_prices.length; k++) paint(left, right, book.ask_prices[k], book.ask_sizes[k], [231, 76, 60]);
      drawn++;
    }
    ctx.putImageData(image, 0, 0);
    shadeGaps(ctx, x, 0, height);
    if (state.ladderAt !== null) {
      ctx.strokeStyle = '#ffd479';
      ctx.beginPath();
      ctx.moveTo(Math.round(x(state.ladderAt)) + 0.5, 0);
      ctx.lineTo(Math.round(x(state.ladderAt)) + 0.5, height);
      ctx.stroke();
    }
    canvas.dataset.snapshots = String(drawn);
  }
}

// --- the ladder at a time --------------------------------------------------------------------

let ladderTimer = null;

function scrubTo(t) {
  if (!state.view) return;
  const [v0, v1] = state.view;
  const at = Math.min(v1 - 1, Math.max(v0, Math.round(t)));
  state.ladderAt = at;
  $('scrub').value = String(Math.round(((at - v0) / (v1 - v0)) * 1000));
  $('scrub-time').textContent = `${iso(at)}`;
  drawHeatmaps();
  clearTimeout(ladderTimer);
  ladderTimer = setTimeout(() => loadLadder(at), 120);
}

/** The exact book in force at the scrubbed time, from the snapshots route (not the sampled heatmap). */
async function loadLadder(at) {
  const m = state.market;
  try {
    const page = await api(`${base(m)}/snapshots/at`, { timestamp: at, ...(isWallet(m) ? {} : { include_orderbook: 'true' }) });
    if (state.ladderAt !== at) return;
    state.ladder = { at, snapshot: page.data, age_ms: page.meta.age_ms };
    renderLadder();
  } catch (err) {
    status(err.message);
  }
}

function renderLadder() {
  const { at, snapshot, age_ms: age } = state.ladder;
  $('ladder-time').textContent = snapshot
    ? `${snapshot.timestamp} (asked ${iso(at)}, ${age} ms before)`
    : `${iso(at)}: nothing recorded yet`;
  $('ladders').dataset.timestamp = snapshot ? snapshot.timestamp : '';
  $('ladders').innerHTML = (snapshot?.books ?? [])
    .map((b) => {
      const depth = Math.max(b.bid_prices.length, b.ask_prices.length);
      let rows = '';
      for (let k = 0; k < depth; k++) {
        rows += `<tr><td class="num bid">${b.bid_sizes[k] ?? ''}</td><td class="num bid">${b.bid_prices[k] ?? ''}</td><td class="num ask">${b.ask_prices[k] ?? ''}</td><td class="num ask">${b.ask_sizes[k] ?? ''}</td></tr>`;
      }
      return `<table data-outcome="${b.outcome_index}"><caption>${escapeHtml(b.outcome)}</caption><thead><tr><th>bid size</th><th>bid</th><th>ask</th><th>ask size</th></tr></thead><tbody>${rows}</tbody></table>`;
    })
    .join('');
}

// --- downloads -------------------------------------------------------------------------------

async function saveAs(path, params, filename) {
  status(`downloading ${filename}...`);
  try {
    const blob = await api(path, params, 'blob');
    const a = document.createElement('a');
    a.href = URL.createObjectURL(blob);
    a.download = filename;
    a.click();
    setTimeout(() => URL.revokeObjectURL(a.href), 10_000);
    status(`${filename}: ${blob.size} bytes`);
  } catch (err) {
    status(err.message);
  }
}

function exportView(format) {
  const m = state.market;
  const [from, to] = state.view;
  const params = { start_time: from, end_time: to, interval: state.interval };
  if (!isWallet(m)) params.include_orderbook = 'true';
  saveAs(`${base(m)}/snapshots.${format}`, params, `${m.market_id}-snapshots-${iso(from)}-${iso(to)}.${format}`.replace(/:/g, ''));
}

async function loadFiles() {
  const m = state.market;
  const body = $('files').querySelector('tbody');
  body.innerHTML = '';
  const path = isWallet(m) ? '/v3/wallet-prediction/files' : `/v3/${m.coin}/files`;
  const params = { dataset: 'books', window: m.window, start_time: Date.parse(m.start_time), end_time: Date.parse(m.end_time), limit: 100 };
  if (isWallet(m)) params.coin = m.coin;
  try {
    const { data } = await api(path, params);
    for (const f of data) {
      const tr = document.createElement('tr');
      const name = f.url.split('/files/')[1];
      tr.innerHTML = `<td>${escapeHtml(decodeURIComponent(name))}</td><td>${f.rows}</td><td>${f.bytes}</td><td title="${f.sha256}">${f.sha256.slice(0, 12)}...</td><td><button type="button">Download</button></td>`;
      tr.querySelector('button').addEventListener('click', () => saveAs(f.url, {}, decodeURIComponent(name).replaceAll('/', '_')));
      body.append(tr);
    }
    if (!data.length) body.innerHTML = '<tr><td colspan="5">No sealed file yet (the open hour is sealed within about an hour)</td></tr>';
  } catch (err) {
    body.innerHTML = `<tr><td colspan="5">${escapeHtml(err.message)}</td></tr>`;
  }
}

// --- wiring ----------------------------------------------------------------------------------

$('key').value = key();
$('key-form').addEventListener('submit', (e) => {
  e.preventDefault();
  sessionStorage.setItem(KEY_ITEM, $('key').value.trim());
  $('key').value = key();
  loadMarkets();
  loadCoverage();
});
$('forget').addEventListener('click', () => {
  sessionStorage.removeItem(KEY_ITEM);
  $('key').value = '';
  status('key forgotten');
});
$('venue').addEventListener('change', fillCoins);
$('filters').addEventListener('submit', (e) => {
  e.preventDefault();
  loadMarkets();
});
$('more').addEventListener('click', () => loadMarkets(true));
$('outcome').addEventListener('change', () => state.market && setView(state.view));
$('zoom-out').addEventListener('click', () => state.market && setView(wholeMarket(state.market)));
$('scrub').addEventListener(
  'input',
  () => state.view && scrubTo(state.view[0] + (Number($('scrub').value) / 1000) * (state.view[1] - state.view[0])),
);
$('export-csv').addEventListener('click', () => exportView('csv'));
$('export-parquet').addEventListener('click', () => exportView('parquet'));
fillCoins();
if (key()) {
  loadMarkets();
  loadCoverage();
}
