// Event-driven capture: the stand-in's book model and its WebSocket market channel, then
// capture recording every change over a real WebSocket, clean and under injected faults. The
// recorded books are compared with the books the model says the venue held at each instant.
import t from 'tap';
import type { Worker } from 'node:worker_threads';
import WebSocket, { WebSocketServer } from 'ws';
import { Capture } from '../src/capture/capture.js';
import { readHeartbeat } from '../src/capture/heartbeat.js';
import { lakePaths } from '../src/lake/layout.js';
import { type StreamSink } from '../src/venues/stream.js';
import { StreamRecorder } from '../src/venues/polymarket/recorder.js';
import { ThreadedStream } from '../src/capture/streamthreads.js';
import type { WalletStreamRecorder } from '../src/venues/wallet/recorder.js';
import { type Clock, createClock } from '../src/clock.js';
import { Duck } from '../src/lake/duckdb.js';
import { startApi } from '../src/api/server.js';
import { bestAsk, bestBid } from '../src/standin/orderbook.js';
import { StandIn } from '../src/standin/server.js';
import { Sim } from '../src/standin/sim.js';
import { SECOND } from '../src/time.js';
import { LocalBook, clobBookHash } from '../src/venues/polymarket/book.js';
import { createAdapters } from '../src/venues/index.js';
import { lakeTable, openMarket, quiet, sealAll, testConfig, testdir } from './helpers.js';
import { displayedPrice } from '../src/venues/polymarket/rest.js';
import type { Market } from '../src/records.js';
import { auditStream } from './streamaudit.js';
import { COINS, OPEN, streamRun, venuesAt } from './streamrun.js';

t.test('the book model: one history, however it is read', async (t) => {
  const sim = new Sim(7, COINS);
  const m = sim.market('polymarket', 'btc', '15m', OPEN);
  const changes = sim.bookChanges(m, 0, m.start - 1, m.end);
  const perSecond = new Map<number, number>();
  for (const c of changes) perSecond.set(Math.floor(c.t / SECOND), (perSecond.get(Math.floor(c.t / SECOND)) ?? 0) + 1);
  t.ok(changes.length > 2000, `a busy token changes thousands of times in 15 minutes (${changes.length})`);
  t.ok(Math.max(...perSecond.values()) >= 20, 'with bursts of tens of changes in a second');
  t.ok(
    changes.every((c, i) => i === 0 || (c.t >= changes[i - 1].t && c.seq === changes[i - 1].seq + 1)),
    'in time order, numbered',
  );

  // Replaying the changes from the opening book gives the book read at any instant, by another instance too.
  const fresh = new Sim(7, COINS);
  const sizes = fresh.bookState(m, 0, m.start - 1).sizes.slice();
  let compared = 0;
  let differ = 0;
  let crossed = 0;
  for (let i = 0; i < changes.length; i++) {
    const c = changes[i];
    sizes[(c.side === 'BUY' ? 0 : 100) + c.tick] = c.size;
    const b = bestBid(sizes);
    const a = bestAsk(sizes);
    if (b !== null && a !== null && b >= a) crossed++;
    if (i % 37 !== 0 || changes[i + 1]?.t === c.t) continue;
    const state = fresh.bookState(m, 0, c.t);
    if (state.seq !== c.seq || state.sizes.some((v, j) => v !== sizes[j])) differ++;
    compared++;
  }
  t.ok(compared > 50);
  t.equal(differ, 0, `the book read at ${compared} instants equals the replay of the changes`);
  t.equal(crossed, 0, 'the best bid is always below the best ask');

  // Read as the stand-in's faces read it (a pump's short windows, REST instants ahead and behind), an
  // instance keeping the seconds it decided gives the same history.
  const pumped = new Sim(7, COINS);
  const windowed: typeof changes = [];
  const span = 150 * SECOND;
  for (let from = m.start - 1; from < m.start - 1 + span; from += 250) {
    pumped.bookState(m, 0, from + 20 * SECOND);
    pumped.bookState(m, 0, from - 30 * SECOND);
    windowed.push(...pumped.bookChanges(m, 0, from, from + 250));
  }
  t.same(
    windowed,
    changes.filter((c) => c.t > m.start - 1 && c.t <= m.start - 1 + span),
    'read in windows, the same changes',
  );
  const behind = [...changes].reverse().filter((_, i) => i % 41 === 0);
  t.same(
    behind.map((c) => `${pumped.bookState(m, 0, c.t).seq}:${pumped.bookState(m, 0, c.t).sizes.join()}`),
    behind.map((c) => `${fresh.bookState(m, 0, c.t).seq}:${fresh.bookState(m, 0, c.t).sizes.join()}`),
    'and, read backwards, the same books',
  );

  const late = sim.book(m, 0, m.start + 14 * 60 * SECOND);
  const fair = sim.fairUp(m, m.start + 14 * 60 * SECOND);
  t.ok(Math.abs((late.bids[0][0] + late.asks[0][0]) / 2 - fair) < 0.06, 'the book follows the fair value');
  t.same(sim.bookChanges(m, 0, m.end, m.end + 60_000), [], 'nothing changes after the close');
  t.notSame(new Sim(8, COINS).book(m, 0, m.start + 60_000), sim.book(m, 0, m.start + 60_000), 'another seed, another history');
});

/** A client speaking the market channel by hand, for the protocol checks. */
async function channel(url: string) {
  const ws = new WebSocket(`${url.replace(/^http/, 'ws')}/ws/market`);
  const inbox: unknown[] = [];
  const waiters: (() => void)[] = [];
  ws.on('message', (d) => {
    const text = d.toString();
    // Bare text (PONG, INVALID OPERATION) is not JSON.
    inbox.push(text.startsWith('{') || text.startsWith('[') ? JSON.parse(text) : text);
    waiters.splice(0).forEach((w) => w());
  });
  await new Promise((r, j) => ws.once('open', r).once('error', j));
  const next = async (pred: (m: unknown) => boolean, timeoutMs = 5000) => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const i = inbox.findIndex(pred);
      if (i >= 0) return inbox.splice(i, 1)[0];
      if (Date.now() > deadline) throw new Error('no such message');
      await new Promise<void>((r) => {
        waiters.push(r);
        setTimeout(r, 50);
      });
    }
  };
  return { ws, inbox, next };
}

t.test('the stand-in speaks the market channel', async (t) => {
  let now = OPEN + 5 * 60 * SECOND;
  const clock: Clock = { now: () => now, sleep: async () => undefined, speed: 1 };
  const standin = new StandIn({ clock, coins: COINS });
  const url = await standin.start();
  t.teardown(() => standin.stop());
  const m = standin.sim.market('polymarket', 'btc', '15m', OPEN);
  const c = await channel(url);
  t.teardown(() => c.ws.terminate());

  c.ws.send('PING');
  t.equal(await c.next((x) => x === 'PONG'), 'PONG', 'PING is answered with PONG');

  // A subscription without `initial_dump` gets no snapshot, as the venue often does for later tokens.
  c.ws.send(JSON.stringify({ assets_ids: [m.tokenIds[1]], operation: 'subscribe', type: 'market' }));
  c.ws.send(
    JSON.stringify({ assets_ids: [m.tokenIds[0], 'not-a-token'], type: 'market', initial_dump: true, custom_feature_enabled: true }),
  );
  const books = (await c.next(Array.isArray)) as Record<string, unknown>[];
  t.equal(books.length, 1, 'one snapshot per known asset that asked for one, in one array');
  t.equal(standin.stream.withheldSnapshots, 1, 'none for the token subscribed without initial_dump');
  const rest = (await (await fetch(`${url}/book?token_id=${m.tokenIds[0]}`)).json()) as Record<string, unknown>;
  const snapshot = books[0];
  t.same(
    Object.keys(rest),
    ['market', 'asset_id', 'timestamp', 'hash', 'bids', 'asks', 'min_order_size', 'tick_size', 'neg_risk', 'last_trade_price'],
    "REST's book carries the ten fields, in the venue's order",
  );
  t.same(
    { ...snapshot, event_type: undefined },
    {
      market: rest.market,
      asset_id: rest.asset_id,
      timestamp: rest.timestamp,
      hash: rest.hash,
      bids: rest.bids,
      asks: rest.asks,
      tick_size: rest.tick_size,
      last_trade_price: rest.last_trade_price,
      event_type: undefined,
    },
    "the snapshot is the REST book of the same instant with its tick, the token's first on the connection with its last trade",
  );
  t.match(rest.hash, /^[0-9a-f]{40}$/, 'a 40-hex hash, as the CLOB sends');
  const { hash, ...summary } = rest as unknown as { hash: string } & Parameters<typeof clobBookHash>[0];
  t.equal(clobBookHash(summary), hash, 'which a client recomputes from the ten fields, hash emptied');

  // Changes arrive as the clock moves; a copy kept from them matches the venue's hashes throughout.
  const tickAt = standin.sim.tickChangeAt(m)!;
  t.ok(tickAt > now && tickAt < now + 20 * SECOND, 'the price passes 0.96 or 0.04 within the next 20 seconds');
  t.equal(rest.tick_size, '0.01', 'the tick is a cent before');
  const copy = new LocalBook(String(rest.market), m.tokenIds[0]);
  copy.reset(rest as unknown as Parameters<LocalBook['reset']>[0], Number(rest.timestamp));
  copy.note(rest);
  let verified = 0;
  let unverified = 0;
  let trades = 0;
  const ticks: Record<string, any>[] = [];
  for (let step = 0; step < 20; step++) {
    now += SECOND;
    await new Promise((r) => setTimeout(r, 70));
  }
  const until = now;
  for (;;) {
    const msg = (await c.next(() => true, 300).catch(() => null)) as Record<string, any> | null;
    if (!msg) break;
    if (msg.event_type === 'last_trade_price' && msg.asset_id === m.tokenIds[0]) {
      trades++;
      copy.note({ last_trade_price: msg.price });
    }
    if (msg.event_type === 'tick_size_change' && msg.asset_id === m.tokenIds[0]) {
      ticks.push(msg);
      copy.note({ tick_size: msg.new_tick_size });
    }
    if (msg.event_type !== 'price_change') continue;
    const mine = msg.price_changes.filter((ch: { asset_id: string }) => ch.asset_id === m.tokenIds[0]);
    if (!mine.length) continue;
    for (const ch of mine) copy.apply(ch, Number(msg.timestamp));
    const signed = mine.filter((ch: { hash?: string }) => ch.hash).at(-1);
    if (copy.hash(msg.timestamp) === signed.hash && signed.best_bid && signed.best_ask) verified++;
    else unverified++;
  }
  t.equal(unverified, 0, 'every message carries the hash of the book it leaves, with the best levels');
  const expected = new Set(standin.sim.bookChanges(m, 0, Number(rest.timestamp), until).map((x) => x.t)).size;
  t.equal(verified, expected, 'one message per instant at which the book changed, none missing');
  t.ok(trades > 0, 'trades are announced with last_trade_price');
  const finalRest = (await (await fetch(`${url}/book?token_id=${m.tokenIds[0]}`)).json()) as {
    hash: string;
    timestamp: string;
    tick_size: string;
  };
  t.equal(copy.hash(finalRest.timestamp), finalRest.hash, 'the copy ends equal to the REST book');
  t.same(
    ticks,
    [
      {
        event_type: 'tick_size_change',
        asset_id: m.tokenIds[0],
        market: rest.market,
        old_tick_size: '0.01',
        new_tick_size: '0.001',
        timestamp: String(tickAt),
      },
    ],
    'the tick change is announced once, at its instant',
  );
  t.equal(finalRest.tick_size, '0.001', 'and REST books carry the new tick');

  const bad = await channel(url);
  // Bare text, not JSON, as the venue answers what it cannot take.
  bad.ws.send('{not json');
  t.equal(await bad.next(() => true), 'INVALID OPERATION');
  bad.ws.send('{"type":"market"}');
  t.equal(await bad.next(() => true), 'INVALID OPERATION');
  bad.ws.terminate();
});

t.test('a freeze answers heartbeats and sends nothing; a disconnect window refuses connections', async (t) => {
  let now = OPEN + 60 * SECOND;
  const clock: Clock = { now: () => now, sleep: async () => undefined, speed: 1 };
  const standin = new StandIn({ clock, coins: COINS, streamFaults: { freezes: [{ from: OPEN, to: OPEN + 10 * 60 * SECOND }] } });
  const url = await standin.start();
  t.teardown(() => standin.stop());
  const m = standin.sim.market('polymarket', 'eth', '5m', OPEN);
  const c = await channel(url);
  c.ws.send(JSON.stringify({ assets_ids: m.tokenIds, type: 'market', initial_dump: true }));
  t.equal(((await c.next(Array.isArray)) as unknown[]).length, 2, 'the subscription is still answered');
  now += 30 * SECOND;
  await new Promise((r) => setTimeout(r, 200));
  c.ws.send('PING');
  t.equal(await c.next((x) => x === 'PONG'), 'PONG');
  t.same(
    c.inbox.filter((x) => x !== 'PONG'),
    [],
    'no data while frozen',
  );
  t.ok(standin.stream.stats.frozen > 0, 'the stand-in counts what it withheld');
  c.ws.terminate();

  Object.assign(standin.stream.faults, { freezes: [], disconnects: [{ from: now, to: now + 60_000 }] });
  const refused = new WebSocket(`${url.replace(/^http/, 'ws')}/ws/market`);
  const status = await new Promise((r) =>
    refused.once('unexpected-response', (_req, res) => r(res.statusCode)).once('error', () => r('error')),
  );
  t.equal(status, 503, 'the upgrade is refused during a disconnect window');
});

t.test('a change that leaves the copy as it was means an earlier one never arrived: a gap up to it, and a row at it', async (t) => {
  // A scripted venue: the snapshot, then (the change adding a level at 2000 lost on the way) the
  // change at 3000 that removes that level, signed with the venue's hash of its book.
  const market = '0xcondition';
  const [up, down] = ['up-token', 'down-token'];
  const snapshot = (asset: string) => ({
    market,
    asset_id: asset,
    timestamp: '1000',
    bids: [{ price: '0.4', size: '10' }],
    asks: [{ price: '0.6', size: '5' }],
  });
  const venue = new LocalBook(market, up);
  venue.reset(snapshot(up), 1000);
  venue.apply({ price: '0.41', size: '7', side: 'BUY' }, 2000);
  venue.apply({ price: '0.41', size: '0', side: 'BUY' }, 3000);
  const wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
  t.teardown(() => wss.close());
  await new Promise((r) => wss.once('listening', r));
  wss.on('connection', (ws) => {
    ws.once('message', () => {
      ws.send(JSON.stringify([up, down].map((a) => ({ event_type: 'book', ...snapshot(a), hash: clobBookHash(snapshot(a)) }))));
      const change = { asset_id: up, price: '0.41', size: '0', side: 'BUY', hash: venue.hash('3000') };
      ws.send(JSON.stringify({ event_type: 'price_change', market, timestamp: '3000', price_changes: [change] }));
    });
  });
  const config = testConfig(testdir(t), { POLYMARKET_WS_URL: `ws://127.0.0.1:${(wss.address() as { port: number }).port}` });
  const rows: { ts: number; exchange: number[] }[] = [];
  const gaps: string[] = [];
  const recorder = new StreamRecorder(config, createClock(), quiet, {
    books: (_m, ts, _recvTs, books) => rows.push({ ts, exchange: books.map((b) => b.exchange_ts ?? -1) }),
    metrics: () => undefined,
    lost: (_m, reason, from, detail) => gaps.push(`lost ${reason} from ${from}: ${detail}`),
    recovered: (_m, at) => gaps.push(`recovered at ${at}`),
    tickSize: () => undefined,
  });
  t.teardown(() => recorder.close());
  const m = openMarket('1', market, [up, down]);
  recorder.track([m], Date.now());
  for (let waited = 0; !rows.some((r) => r.ts === 3000) && waited < 10_000; waited += 20) await new Promise((r) => setTimeout(r, 20));
  t.same(rows[0], { ts: 1000, exchange: [1000, 1000] }, "one row for the dump's two books, at their time");
  t.equal(rows.length, 2, 'and one more');
  t.same(rows[1], { ts: 3000, exchange: [3000, 1000] }, 'the book at 3000, which the venue signed, beside the other outcome’s');
  t.equal(recorder.stats.verified, 1);
  t.match(gaps, [/^recovered at/, /^lost stream_resync from 1000: a change at 3000 left the streamed copy as it was/, 'recovered at 3000']);
});

t.test('capture records every change of the stream, verified against the venue', async (t) => {
  // One stream thread, so one connection carries both markets. The 5-minute market's tick changes
  // a simulated minute in: after the thread has started and subscribed, however loaded the machine.
  // The run lasts 110 simulated seconds past its first book however slow the machine (the tick change and 30 s after it).
  const run = await streamRun(t, {}, 6, 20, { env: { STREAM_THREADS: '1' }, start: OPEN + 11 * SECOND, spanMs: 110 * SECOND });
  const { expected, recorded, beforeFirst } = auditStream(t, run);
  t.ok(expected > 1000, `a few simulated minutes of two markets (${expected} change instants)`);
  // What came before a market's first book (a starved start) is unrecorded time, said, not a loss.
  t.equal(recorded, expected - beforeFirst, 'a clean stream loses nothing');
  t.equal(run.standin.stream.undelivered.size, 0);
  t.same(run.gaps, [], 'and records no gap');
  const stream = run.capture.streams.get('polymarket');
  t.ok(stream instanceof ThreadedStream, 'recorded in a stream thread');
  const rec = (stream as ThreadedStream).stats;
  t.equal(rec.mismatches, 0);
  t.ok(rec.verified >= 0.95 * expected, `the venue's hash proved the book after ${rec.verified} changes, ${rec.lateProofs} more later`);
  t.equal(rec.unverified, 0, 'and every other change was checked by its best bid and ask');
  t.equal(rec.connects, 1, 'one connection carries both markets');

  // The 5-minute market's price passes 0.96 or 0.04 during the run: its tick change is a market version from the stream.
  const fine = run.sim.market('polymarket', 'btc', '5m', OPEN);
  const tickAt = run.sim.tickChangeAt(fine)!;
  const versions = (await run.duck.rows(
    `SELECT epoch_ms(ts)::BIGINT AS ts, tick_size FROM ${lakeTable(run.dir, 'markets')} WHERE slug = $slug ORDER BY ts`,
    { slug: run.sim.slug(fine) },
  )) as { ts: bigint; tick_size: number }[];
  t.ok(tickAt > OPEN + 41 * SECOND && tickAt < run.end - 30 * SECOND, 'the change falls inside the run, after the subscription');
  t.ok(
    versions.every((v) => v.tick_size === (Number(v.ts) >= tickAt ? 0.001 : 0.01)),
    'each version has the tick of its time',
  );
  const first = versions.find((v) => v.tick_size === 0.001);
  t.ok(
    first && Number(first.ts) >= tickAt,
    `the new tick is recorded from ${first?.ts}, ${Number(first?.ts) - tickAt} ms after the change`,
  );
  t.ok(rec.tickChanges >= 2, 'announced on the stream for both tokens');

  // Quotes are written when they change: the price follows the recorded books, the last trade the trade events.
  const metrics = (await run.duck.rows(
    `SELECT market_id, outcome_index, epoch_ms(ts)::BIGINT AS ts, chance, price, last_trade FROM ${lakeTable(run.dir, 'metrics')} ORDER BY market_id, outcome_index, ts`,
  )) as { market_id: string; outcome_index: number; ts: bigint; chance: number | null; price: number | null; last_trade: number | null }[];
  let repeats = 0;
  let inconsistent = 0;
  let checked = 0;
  const written = new Map<string, string>();
  const groups = new Map<string, boolean>();
  for (const q of [...metrics].sort((a, b) => Number(a.ts) - Number(b.ts))) {
    const key = `${q.market_id}:${q.outcome_index}`;
    const text = `${q.chance}|${q.price}|${q.last_trade}`;
    const at = `${q.market_id}@${q.ts}`;
    groups.set(at, (groups.get(at) ?? false) || written.get(key) !== text);
    written.set(key, text);
    const book = run.rows.filter((r) => r.market_id === q.market_id && r.outcome_index === q.outcome_index && r.ts <= Number(q.ts)).at(-1);
    if (!book || q.price === null) continue;
    checked++;
    if (displayedPrice(book, q.last_trade) !== q.price) inconsistent++;
  }
  repeats = [...groups.values()].filter((changed) => !changed).length;
  t.ok(metrics.length > 100, `${metrics.length} quote rows`);
  t.equal(repeats, 0, 'quotes are written only at times when some outcome’s chance, price or last trade changed');
  t.ok(checked > 100);
  t.equal(inconsistent, 0, 'each price is the displayed price of the recorded book and last trade at that time');
  t.ok(
    metrics.some((q) => q.last_trade !== null),
    'last trades come from the trade events',
  );

  // The changes route, walked a page at a time, rebuilds every book the snapshots route serves.
  const api = await startApi(run.config, run.duck, createClock(run.end + 60 * SECOND, 1), quiet, { port: 0 });
  t.teardown(() => api.stop());
  const key = (await api.keys.issue('paid', 'test')).key;
  const get = async (path: string) => {
    const res = await fetch(`${api.url}${path}`, { headers: { authorization: `Bearer ${key}` } });
    if (res.status !== 200) t.fail(`${path}: ${res.status} ${await res.clone().text()}`);
    return (await res.json()) as { data: any[]; pagination: { next_cursor: string | null; has_more: boolean } };
  };
  const walk = async (path: string, limit: number) => {
    const out: any[] = [];
    let cursor: string | null = null;
    do {
      const page = await get(
        `${path}${path.includes('?') ? '&' : '?'}limit=${limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`,
      );
      if (page.data.length > limit) t.fail(`a page of ${page.data.length} items for limit ${limit}`);
      out.push(...page.data);
      cursor = page.pagination.next_cursor;
    } while (cursor);
    return out;
  };
  for (const marketId of new Set(run.rows.map((r) => r.market_id))) {
    const base = `/v3/btc/markets/${marketId}`;
    const snapshots = await walk(`${base}/snapshots?include_orderbook=true`, 500);
    const changes = await walk(`${base}/orderbook/changes`, 37);
    t.same(await walk(`${base}/orderbook/changes`, 1000), changes, 'pages of any size give the same changes');
    const books = new Map<number, Map<string, Map<number, number>>>();
    const rebuilt: string[] = [];
    for (const c of changes) {
      if (c.type === 'snapshot')
        books.set(
          c.outcome_index,
          new Map([
            ['bid', new Map()],
            ['ask', new Map()],
          ]),
        );
      const book = books.get(c.outcome_index)!;
      for (const [side, prices, sizes] of [
        ['bid', c.bid_prices, c.bid_sizes],
        ['ask', c.ask_prices, c.ask_sizes],
      ] as const) {
        prices.forEach((p: number, i: number) => (sizes[i] === 0 ? book.get(side)!.delete(p) : book.get(side)!.set(p, sizes[i])));
      }
      const ladder = (side: string, dir: number) => [...book.get(side)!].sort((a, b) => dir * (a[0] - b[0]));
      rebuilt.push(JSON.stringify([c.timestamp, c.outcome_index, ladder('bid', -1), ladder('ask', 1)]));
    }
    // Each snapshot's books, keeping only those that changed since the outcome's previous one.
    const served: string[] = [];
    const previous = new Map<number, string>();
    for (const s of snapshots) {
      for (const b of s.books) {
        const ladders = JSON.stringify([
          b.bid_prices.map((p: number, i: number) => [p, b.bid_sizes[i]]),
          b.ask_prices.map((p: number, i: number) => [p, b.ask_sizes[i]]),
        ]);
        if (previous.get(b.outcome_index) === ladders) continue;
        previous.set(b.outcome_index, ladders);
        served.push(JSON.stringify([s.timestamp, b.outcome_index, ...JSON.parse(ladders)]));
      }
    }
    t.ok(changes.length > 500, `${changes.length} changes of ${marketId}`);
    t.same(rebuilt, served, `applying the changes in order rebuilds every served book of ${marketId}`);

    // Each change's seq is its outcome's recorded books counted from the open: the same from any start.
    const times = new Map<number, string[]>();
    for (const s of snapshots) for (const b of s.books) times.set(b.outcome_index, [...(times.get(b.outcome_index) ?? []), s.timestamp]);
    const counted = (c: { seq: number; outcome_index: number; timestamp: string }) =>
      c.seq === times.get(c.outcome_index)!.indexOf(c.timestamp) + 1;
    t.ok(changes.every(counted), 'seq counts the outcome’s recorded books up to the change');
    const middle = changes[Math.floor(changes.length / 2)].timestamp;
    const later = await walk(`${base}/orderbook/changes?start_time=${encodeURIComponent(middle)}`, 50);
    t.ok(later.length > 0 && later.every(counted), 'and so in a range that starts later, deep pages included');
  }
});

t.test('a snapshot that never comes: the book is taken from REST after the bound, and the wait is a gap', async (t) => {
  // A minute of changes from the first (REST) book on, however long a busy machine takes to get there.
  const run = await streamRun(t, {}, 4, 20, { quirks: { snapshotLossRate: 1 }, spanMs: 60 * SECOND });
  const stats = (run.capture.streams.get('polymarket') as ThreadedStream).stats;
  t.ok(stats.snapshotTimeouts >= 4, `no snapshot came for any token (${stats.snapshotTimeouts} timed out)`);
  const { recorded } = auditStream(t, run);
  t.ok(recorded > 100, `${recorded} change instants recorded from the REST book on`);
  const markets = [...new Set(run.rows.map((r) => r.market_id))];
  t.equal(markets.length, 2, 'both markets are recorded');
  for (const id of markets) {
    const first = run.rows.find((r) => r.market_id === id)!;
    t.ok(
      run.gaps.some((g) => g.market_id === id && g.reason === 'stream_resync' && g.f < first.ts),
      `${id}: a gap from its subscription to its first book`,
    );
  }
});

t.test("a market is held from its first row with every outcome's book, not from one outcome's alone", async (t) => {
  // Half the snapshots lost: a market whose one token's snapshot came has rows of that outcome alone until the
  // other's REST book comes on its timeout. Such rows vouch for nothing of the other outcome's changes.
  const run = await streamRun(t, {}, 4, 20, { quirks: { snapshotLossRate: 0.5 }, spanMs: 60 * SECOND });
  const beat = (await readHeartbeat(lakePaths(run.dir)))!;
  let partial = 0;
  for (const id of new Set(run.rows.map((r) => r.market_id))) {
    const outcomes = new Map<number, Set<number>>();
    for (const r of run.rows.filter((r) => r.market_id === id)) outcomes.set(r.ts, (outcomes.get(r.ts) ?? new Set()).add(r.outcome_index));
    const first = Math.min(...[...outcomes].filter(([, o]) => o.size === 2).map(([ts]) => ts));
    const before = [...outcomes.keys()].filter((ts) => ts < first).length;
    partial += before;
    // A thread reports each batch's newest books: a bound later than the first whole row vouches for less, never more.
    const since = beat.open.find((m) => m.market_id === id)?.since;
    t.ok(
      since !== undefined && since >= first,
      `${id}: held from ${since} (its first whole row ${first}, ${before} rows of one outcome before it)`,
    );
  }
  t.ok(partial > 0, `some market had rows of one outcome alone first (${partial})`);
});

t.test("on capture's own thread (STREAM_THREADS=0) the recording is the same", async (t) => {
  // A span of the venue's time, not of this machine's: starved, the paced clock covers less in 4 real seconds (36 simulated s once).
  const run = await streamRun(t, {}, 4, 20, { env: { STREAM_THREADS: '0' }, spanMs: 90 * SECOND });
  const { expected, recorded, beforeFirst } = auditStream(t, run);
  t.ok(expected > 500, `${expected} change instants`);
  t.equal(recorded, expected - beforeFirst, 'a clean stream loses nothing');
  t.same(run.gaps, [], 'and records no gap');
  const stream = run.capture.streams.get('polymarket') as StreamRecorder;
  t.ok(stream instanceof StreamRecorder);
  t.equal(stream.channel.stats.connects, 1);
  t.equal(stream.stats.mismatches, 0);
});

t.test(
  "a market's gap starts at the earliest loss reported while it is open (one token may have lost track before the other)",
  async (t) => {
    let market: Market | undefined;
    const run = await streamRun(t, {}, 4, 20, {
      env: { STREAM_THREADS: '0' },
      during: async (capture, clock) => {
        // Reached into on purpose: the two tokens' losses arrive in the order no scripted feed reproduces at will.
        const recorder = capture.streams.get('polymarket') as unknown as { sink: StreamSink; tokens: Map<string, { market: Market }> };
        for (let waited = 0; recorder.tokens.size === 0 && waited < 10_000; waited += 20) await new Promise((r) => setTimeout(r, 20));
        market = [...recorder.tokens.values()][0].market;
        const now = clock.now();
        recorder.sink.lost(market, 'stream_resync', now - 3000, 'the second token, whose last proof was later');
        recorder.sink.lost(market, 'stream_resync', now - 5000, 'the first token, whose last proof was earlier');
        recorder.sink.recovered(market, now);
      },
    });
    const gaps = run.gaps.filter((g) => g.market_id === market!.market_id && g.reason === 'stream_resync');
    t.equal(gaps.length, 1, 'one gap');
    t.equal(gaps[0].t - gaps[0].f, 5000, 'from the earlier loss');
  },
);

t.test('a stream thread that dies is replaced: its markets resubscribe, and what it held is a gap', async (t) => {
  let victimMarkets: string[] = [];
  let failures = 0;
  // Judged by what capture did, not the machine's pace: the kill comes once books are recorded, and the
  // run goes on for 60 simulated s after the first (a loaded clean clone recorded nothing in 8 real s).
  const run = await streamRun(t, {}, 8, 20, {
    env: { STREAM_THREADS: '2' },
    spanMs: 60 * SECOND,
    during: async (capture) => {
      // Reached into on purpose: nothing outside the process can kill one thread of it.
      type Internals = { threads: { worker: Worker; tracked: Map<string, unknown>; failures: number }[] };
      const { threads } = capture.streams.get('polymarket') as unknown as Internals;
      for (let waited = 0; capture.stats.books === 0 && waited < 120_000; waited += 50) await new Promise((r) => setTimeout(r, 50));
      await new Promise((r) => setTimeout(r, 2000));
      const index = threads.findIndex((th) => th.tracked.size > 0);
      victimMarkets = [...threads[index].tracked.keys()];
      await threads[index].worker.terminate();
      // Killed again as soon as it is back: the third thread comes after a backoff.
      for (let waited = 0; threads[index].failures < 1 && waited < 5000; waited += 10) await new Promise((r) => setTimeout(r, 10));
      await new Promise((r) => setTimeout(r, 500));
      await threads[index].worker.terminate();
      for (let waited = 0; threads[index].failures < 2 && waited < 5000; waited += 10) await new Promise((r) => setTimeout(r, 10));
      failures = threads[index].failures;
    },
  });
  t.ok(victimMarkets.length > 0, `a thread with ${victimMarkets.length} market(s) was killed, twice`);
  t.equal(failures, 2, 'the second replacement counts two young deaths in a row (so it came after a backoff)');
  const { expected, recorded } = auditStream(t, run);
  t.ok(recorded > expected / 2, `recording went on (${recorded} of ${expected})`);
  const lost = run.gaps.filter((g) => g.reason === 'disconnected');
  t.same([...new Set(lost.map((g) => g.market_id))].sort(), victimMarkets.sort(), "each of the dead thread's markets has a gap");
  for (const g of lost) {
    t.ok(
      run.rows.some((r) => r.market_id === g.market_id && r.ts > g.t),
      `${g.market_id} is recorded again after its gap (${g.t - g.f} ms)`,
    );
  }
  t.ok((run.capture.streams.get('polymarket') as ThreadedStream).stats.connects >= 2, 'the new thread subscribed again');
});

t.test("the wallet venue's orderbook topics: every book it pushes is recorded, and what it loses is a gap", async (t) => {
  // Without faults, nothing may look stalled however loaded the machine: a stall bound of a second of real time.
  // 120 simulated s from the first book, however long a loaded machine takes (5 real s gave 46 on one).
  const clean = await streamRun(t, {}, 5, 20, { venue: 'wallet-prediction', env: { STREAM_STALL_MS: '20000' }, spanMs: 120 * SECOND });
  const { expected, recorded, beforeFirst } = auditStream(t, clean);
  t.ok(expected > 800, `${expected} book changes of the wallet markets`);
  t.equal(recorded, expected - beforeFirst, 'a clean stream loses nothing');
  t.same(
    clean.gaps.filter((g) => g.reason !== 'process_down'),
    [],
    'and records no gap',
  );
  const wallet = clean.capture.streams.get('wallet-prediction') as WalletStreamRecorder;
  // One push is the market's Yes book; its No book is derived from it, so a push makes two rows.
  t.ok(wallet.stats.books * 2 >= expected, `the books came over the topic stream (${wallet.stats.books} pushes)`);
  t.ok(wallet.stats.restRows <= 2 * 5, `REST gave at most each market's first rows (${wallet.stats.restRows})`);

  const faulty = await streamRun(
    t,
    {
      dropRate: 0.003,
      // A held frame goes out after the next one, of either market: a few percent, so that some
      // (about 15 a run) land behind a newer book of their own market, which is what makes one late.
      reorderRate: 0.03,
      duplicateRate: 0.05,
    },
    6,
    20,
    {
      venue: 'wallet-prediction',
      // From capture's first book, whenever a busy machine gets there.
      spanMs: 120 * SECOND,
      faultsFromFirstBook: (at) => ({
        freezes: [{ from: at + 30 * SECOND, to: at + 40 * SECOND }],
        disconnects: [{ from: at + 60 * SECOND, to: at + 63 * SECOND }],
      }),
    },
  );
  auditStream(t, faulty);
  const reasons = new Set(faulty.gaps.map((g) => g.reason));
  // The freeze is the venue's documented pause: not a broken socket, but REST showed the market trading meanwhile.
  for (const reason of ['stream_late', 'stream_resync', 'disconnected']) t.ok(reasons.has(reason), `a ${reason} gap`);
  t.notOk(reasons.has('stream_stalled'), 'a pause is not taken for a stalled socket');
});

t.test('a restart records no book twice: the unchanged books its snapshots bring again are already spooled', async (t) => {
  // Before the 12:00 markets open: their books are subscribed (a minute ahead) and do not change until then.
  const dir = testdir(t);
  // 2x: the 50 s before the open last 25 s of real time, room for two processes' starts on a busy machine.
  const clock = createClock(OPEN - 50 * SECOND, 2);
  const standin = new StandIn({ clock, coins: COINS, walletWeightPerMinute: Number.MAX_SAFE_INTEGER });
  const url = await standin.start();
  t.teardown(() => standin.stop());
  const config = testConfig(dir, {
    CAPTURE_STREAM: 'polymarket,wallet-prediction',
    CAPTURE_VENUES: 'polymarket,wallet-prediction',
    ...venuesAt(url),
  });
  const duck = await Duck.open(2);
  t.teardown(() => duck.close());
  const counts: number[] = [];
  for (let run = 0; run < 2; run++) {
    const capture = new Capture(config, clock, duck, createAdapters(config, clock), quiet, null);
    let stopped: Promise<void> | null = null;
    const stop = () => (stopped ??= capture.stop());
    t.teardown(stop);
    await capture.start();
    // Until both venues' pre-open books are in (however loaded the machine), then a little more.
    for (let waited = 0; capture.stats.books < 4 && waited < 30_000; waited += 50) await new Promise((r) => setTimeout(r, 50));
    await new Promise((r) => setTimeout(r, 500));
    await stop();
    counts.push(capture.stats.books);
  }
  t.ok(clock.now() < OPEN, 'both processes ran before the markets opened');
  await sealAll(duck, dir);
  const books = lakeTable(dir, 'books');
  const twice = await duck.rows(`SELECT market_id, token_id, epoch_ms(ts)::BIGINT AS ts FROM ${books} GROUP BY ALL HAVING count(*) > 1`);
  t.same(twice, [], 'no (market, token, time) twice');
  // A market's row whose every book is the previous row's, exchange time and levels alike, is the same book again.
  const again = await duck.rows(
    `WITH r AS (
       SELECT market_id, ts, exchange_ts, bid_prices, bid_sizes, ask_prices, ask_sizes,
         lag(exchange_ts) OVER w AS p_ex, lag(bid_prices) OVER w AS p_bp, lag(bid_sizes) OVER w AS p_bs,
         lag(ask_prices) OVER w AS p_ap, lag(ask_sizes) OVER w AS p_as
       FROM ${books} WINDOW w AS (PARTITION BY market_id, token_id ORDER BY ts))
     SELECT market_id, epoch_ms(ts)::BIGINT AS ts FROM r GROUP BY market_id, ts
     HAVING bool_and(p_ex IS NOT NULL AND exchange_ts = p_ex AND bid_prices = p_bp AND bid_sizes = p_bs AND ask_prices = p_ap AND ask_sizes = p_as)`,
  );
  const recorded = (await duck.rows(`SELECT count(DISTINCT market_id)::INTEGER AS markets FROM ${books}`)) as { markets: number }[];
  t.ok(
    recorded[0].markets >= 2,
    `pre-open books of ${recorded[0].markets} markets of both venues, over ${counts.join(' then ')} rows spooled`,
  );
  t.same(again, [], 'no row repeats the books of the one before it');
});
