// The wallet venue's signed order-book stream (UPSTREAMS.md C2), from both ends: capture's
// recorder against a venue that checks the upgrade the way Binance's SApi does and sends the
// documented payload as a JSON string, and the stand-in refusing what the venue refuses.
import fs from 'node:fs';
import type http from 'node:http';
import t, { type Test } from 'tap';
import WebSocket, { WebSocketServer } from 'ws';
import { WalletStreamRecorder } from '../src/venues/wallet/recorder.js';
import { createClock } from '../src/clock.js';
import { bareMarket, type Book } from '../src/records.js';
import { StandIn } from '../src/standin/server.js';
import { signatureRefusal } from '../src/standin/signed.js';
import { WALLET_AGGREGATE_TOPIC, WALLET_STREAM_PATH } from '../src/standin/walletstream.js';
import { signedSocketUrl } from '../src/venues/wallet/signing.js';
import { quiet, testConfig, testdir } from './helpers.js';

const { payload } = JSON.parse(fs.readFileSync(new URL('./fixtures/wallet/orderbook.json', import.meta.url), 'utf8'));
const KEY = 'documented-key';
const SECRET = 'documented-secret';

/** The documented push's market, open, its outcomes' tokens named for their side. */
const openWalletMarket = () =>
  bareMarket({
    market_id: String(payload.marketId),
    venue: 'wallet-prediction',
    coin: 'btc',
    window: '15m',
    start_time: 0,
    end_time: Number.MAX_SAFE_INTEGER,
    status: 'open',
    tick_size: 0.01,
    outcomes: [
      { index: 0, label: 'Up', token_id: 'yes-token' },
      { index: 1, label: 'Down', token_id: 'no-token' },
    ],
  });

const until = async (done: () => boolean, bound = 10_000) => {
  for (let waited = 0; !done() && waited < bound; waited += 10) await new Promise((r) => setTimeout(r, 10));
};

t.test('the documented push, as a string in a signed connection: both outcome books, the No book mirrored', async (t) => {
  const upgrades: http.IncomingMessage[] = [];
  const wss = new WebSocketServer({
    port: 0,
    host: '127.0.0.1',
    // As the venue does: the upgrade itself is authenticated, there is no subscribe frame.
    verifyClient: (info, done) => {
      upgrades.push(info.req);
      const refusal = signatureRefusal(new URL(info.req.url!, 'http://venue'), info.req.headers, KEY, SECRET);
      done(refusal === null, refusal?.status);
    },
  });
  t.teardown(() => wss.close());
  await new Promise((r) => wss.once('listening', r));
  const sent: string[] = [];
  wss.on('connection', (ws) => {
    ws.on('message', (d) => sent.push(d.toString()));
    ws.send(JSON.stringify({ type: 'COMMAND', data: 'SUCCESS', subType: 'SUBSCRIBE', code: '00000000' }));
    ws.send(JSON.stringify({ type: 'DATA', topic: WALLET_AGGREGATE_TOPIC, data: JSON.stringify(payload) }));
    // A repeat of the same instant changes nothing; garbage is skipped.
    ws.send(JSON.stringify({ type: 'DATA', topic: WALLET_AGGREGATE_TOPIC, data: JSON.stringify(payload) }));
    ws.send(JSON.stringify({ type: 'DATA', topic: WALLET_AGGREGATE_TOPIC, data: '{"msgType":' }));
    const garbled = { ...payload, updateTimestampMs: payload.updateTimestampMs + 1, bids: [['half', '1']] };
    ws.send(JSON.stringify({ type: 'DATA', topic: WALLET_AGGREGATE_TOPIC, data: JSON.stringify(garbled) }));
  });
  const url = `ws://127.0.0.1:${(wss.address() as { port: number }).port}/sapi/wss`;
  const rows: { ts: number; books: Book[] }[] = [];
  const gaps: string[] = [];
  const config = testConfig(testdir(t), { WALLET_WS_URL: url, WALLET_API_KEY: KEY, WALLET_API_SECRET: SECRET });
  const rec = new WalletStreamRecorder(config, createClock(), quiet, {
    books: (_m, ts, _recvTs, books) => rows.push({ ts, books }),
    metrics: () => undefined,
    lost: (m, reason, _from, detail) => gaps.push(`${m.market_id} ${reason}: ${detail}`),
    recovered: () => undefined,
    tickSize: () => undefined,
  });
  t.teardown(() => rec.close());
  const market = openWalletMarket();
  rec.track([market], Date.now());
  await until(() => rows.length > 0 && rec.stats.duplicates > 0 && rec.stats.malformed > 0);

  const url0 = new URL(upgrades[0].url!, 'http://venue');
  t.equal(upgrades[0].headers['x-mbx-apikey'], KEY, 'the key goes in X-MBX-APIKEY, never in the URL');
  t.equal(url0.searchParams.get('topic'), WALLET_AGGREGATE_TOPIC, 'the topic is in the signed URL');
  t.same([...url0.searchParams.keys()], ['random', 'recvWindow', 'timestamp', 'topic', 'signature'], 'keys sorted, the signature last');
  t.same(sent, [], 'nothing to subscribe by frame');
  t.equal(rows.length, 1, 'one row for the push; the repeat is dropped');
  t.equal(rows[0].ts, payload.updateTimestampMs, "stamped with the venue's updateTimestampMs");
  t.same(
    rows[0].books.map((b) => [b.token_id, b.exchange_ts, b.bid_prices, b.bid_sizes, b.ask_prices, b.ask_sizes]),
    [
      ['yes-token', payload.updateTimestampMs, [0.51], [5000], [0.52], [3000]],
      ['no-token', payload.updateTimestampMs, [0.48], [3000], [0.49], [5000]],
    ],
    'the Yes book as sent; the No book its mirror (sides swapped, prices complemented)',
  );
  t.equal(rec.stats.malformed, 1, 'a push with a level that is not a number is counted and skipped (a string that is not JSON, skipped)');
  t.same(gaps, []);
});

t.test("a market ends by its own pushes, not another's later ones; one of its window after it went is a gap", async (t) => {
  const wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
  t.teardown(() => wss.close());
  await new Promise((r) => wss.once('listening', r));
  const end = Date.now() - 1;
  const push = (marketId: number, ts: number) =>
    JSON.stringify({ type: 'DATA', topic: WALLET_AGGREGATE_TOPIC, data: JSON.stringify({ ...payload, marketId, updateTimestampMs: ts }) });
  let socket: WebSocket | undefined;
  wss.on('connection', (ws) => {
    socket = ws;
    ws.send(JSON.stringify({ type: 'COMMAND', data: 'SUCCESS', subType: 'SUBSCRIBE', code: '00000000' }));
    ws.send(push(payload.marketId, end - 1_000));
    // Another market's push from past the end, sent ahead of this market's last (as a starved sender did).
    ws.send(push(payload.marketId + 1, end + 500));
  });
  const rows: { market: string; ts: number }[] = [];
  const gaps: string[] = [];
  // A stall bound no starved run reaches: only pushes may let the market go here, never the clock.
  const url = `ws://127.0.0.1:${(wss.address() as { port: number }).port}/sapi/wss`;
  const config = testConfig(testdir(t), { WALLET_WS_URL: url, WALLET_API_KEY: KEY, WALLET_API_SECRET: SECRET, STREAM_STALL_MS: '600000' });
  const rec = new WalletStreamRecorder(config, createClock(), quiet, {
    books: (m, ts) => rows.push({ market: m.market_id, ts }),
    metrics: () => undefined,
    lost: (m, reason, _from, detail) => gaps.push(`${m.market_id} ${reason}: ${detail}`),
    recovered: () => undefined,
    tickSize: () => undefined,
  });
  t.teardown(() => rec.close());
  const ending = { ...openWalletMarket(), end_time: end };
  const open = { ...openWalletMarket(), market_id: String(payload.marketId + 1) };
  rec.track([ending, open], Date.now());
  await until(() => rows.some((r) => r.market === open.market_id));
  rec.track([ending, open], Date.now());
  t.ok(rec.tracks(ending), 'the ended market is kept: nothing of its own says its last push has come');
  socket!.send(push(payload.marketId, end - 10));
  await until(() => rows.some((r) => r.market === ending.market_id && r.ts === end - 10));
  t.ok(
    rows.some((r) => r.market === ending.market_id && r.ts === end - 10),
    'its push from before the end, sent behind, is recorded',
  );
  socket!.send(push(payload.marketId, end));
  await until(() => {
    rec.track([ending, open], Date.now());
    return !rec.tracks(ending);
  });
  t.notOk(rec.tracks(ending), 'let go by its own push at its end');
  t.same(gaps, [], 'no gap so far');
  socket!.send(push(payload.marketId, end - 5));
  await until(() => gaps.length > 0);
  t.same(
    gaps,
    [`${ending.market_id} stream_late: a book of ${end - 5} arrived after the market was let go`],
    'a push of its window after it went: a gap',
  );
  t.notOk(
    rows.some((r) => r.ts === end - 5),
    'and no row',
  );
});

t.test('a market silent past its end goes only once its connection is read past the end: a push still unread is recorded', async (t) => {
  // A process frozen across the end resumes with the window's last pushes unread in its socket: a
  // WebSocket ping sent after the end and answered (a venue pongs in order) proves them read.
  const wss = new WebSocketServer({ port: 0, host: '127.0.0.1', autoPong: false });
  t.teardown(() => wss.close());
  await new Promise((r) => wss.once('listening', r));
  const end = Date.now() - 1;
  const push = (ts: number) =>
    JSON.stringify({ type: 'DATA', topic: WALLET_AGGREGATE_TOPIC, data: JSON.stringify({ ...payload, updateTimestampMs: ts }) });
  let socket: WebSocket | undefined;
  let pings = 0;
  wss.on('connection', (ws) => {
    socket = ws;
    ws.on('ping', () => pings++);
    ws.send(JSON.stringify({ type: 'COMMAND', data: 'SUCCESS', subType: 'SUBSCRIBE', code: '00000000' }));
    ws.send(push(end - 1_000));
  });
  const rows: { market: string; ts: number }[] = [];
  const gaps: string[] = [];
  const stallMs = 2000;
  const url = `ws://127.0.0.1:${(wss.address() as { port: number }).port}/sapi/wss`;
  const config = testConfig(testdir(t), {
    WALLET_WS_URL: url,
    WALLET_API_KEY: KEY,
    WALLET_API_SECRET: SECRET,
    STREAM_STALL_MS: String(stallMs),
    STREAM_PAUSE_MS: '600000',
    STREAM_PING_MS: '60000',
  });
  const rec = new WalletStreamRecorder(config, createClock(), quiet, {
    books: (m, ts) => rows.push({ market: m.market_id, ts }),
    metrics: () => undefined,
    lost: (m, reason, _from, detail) => gaps.push(`${m.market_id} ${reason}: ${detail}`),
    recovered: () => undefined,
    tickSize: () => undefined,
  });
  t.teardown(() => rec.close());
  const ending = { ...openWalletMarket(), end_time: end };
  rec.track([ending], Date.now());
  await until(() => rows.length > 0);
  while (Date.now() <= end + stallMs) await new Promise((r) => setTimeout(r, 50));
  rec.track([ending], Date.now());
  t.ok(rec.tracks(ending), 'past the end and the stall bound, silent, and kept');
  t.same(rec.holding(), [ending.market_id], 'held, so a heartbeat keeps naming it');
  await until(() => pings > 0);
  t.equal(pings, 1, 'a ping asks the venue to show its socket was read that far');
  socket!.send(push(end - 10));
  await until(() => rows.some((r) => r.ts === end - 10));
  t.ok(
    rows.some((r) => r.ts === end - 10),
    'the push from before the end, read only now, is recorded',
  );
  socket!.pong();
  await until(() => {
    rec.track([ending], Date.now());
    return !rec.tracks(ending);
  });
  t.notOk(rec.tracks(ending), 'let go once the pong came');
  t.same(gaps, [], 'nothing lost');
});

t.test('the stand-in refuses what the venue refuses, with its error shape', async (t) => {
  const standin = new StandIn({ clock: createClock(), apiKey: KEY, apiSecret: SECRET });
  const base = (await standin.start(0)).replace(/^http/, 'ws') + WALLET_STREAM_PATH;
  t.teardown(() => standin.stop());
  const attempt = (url: string, key: string) =>
    new Promise<{ status: number; body: unknown }>((resolve) => {
      const ws = new WebSocket(url, { headers: { 'X-MBX-APIKEY': key } });
      ws.once('open', () => {
        ws.once('message', (d) => {
          resolve({ status: 101, body: JSON.parse(d.toString()) });
          ws.close();
        });
      });
      ws.once('unexpected-response', (_req, res) => {
        let text = '';
        res.on('data', (d) => (text += d));
        res.on('end', () => resolve({ status: res.statusCode!, body: JSON.parse(text) }));
      });
      ws.once('error', () => undefined);
    });
  const good = signedSocketUrl(base, SECRET, [WALLET_AGGREGATE_TOPIC]);
  t.match(await attempt(good, KEY), { status: 101, body: { data: 'SUCCESS' } }, 'a signed upgrade is acknowledged');
  t.same(
    await attempt(signedSocketUrl(base, 'another-secret', [WALLET_AGGREGATE_TOPIC]), KEY),
    { status: 400, body: { code: -1022, msg: 'Signature for this request is not valid.' } },
    'a bad signature',
  );
  t.same(
    await attempt(good, 'another-key'),
    { status: 401, body: { code: -2015, msg: 'Invalid API-key, IP, or permissions for action.' } },
    'a bad key',
  );
  const stale = signedSocketUrl(base, SECRET, [WALLET_AGGREGATE_TOPIC], Date.now() - 60_000);
  t.match(await attempt(stale, KEY), { status: 400, body: { code: -1021 } }, 'a timestamp outside recvWindow');
});

/** A recorder whose stream is never open (a port nothing listens on: refused and retried), with the rows and gaps it reports. */
async function neverConnected(t: Test) {
  const closed = new WebSocketServer({ port: 0, host: '127.0.0.1' });
  await new Promise((r) => closed.once('listening', r));
  const port = (closed.address() as { port: number }).port;
  await new Promise((r) => closed.close(r));
  const rows: { ts: number; books: Book[] }[] = [];
  const gaps: { from: number; reason: string }[] = [];
  const config = testConfig(testdir(t), { WALLET_WS_URL: `ws://127.0.0.1:${port}/sapi/wss`, STREAM_STALL_MS: '5000' });
  const rec = new WalletStreamRecorder(config, createClock(), quiet, {
    books: (_m, ts, _recvTs, books) => rows.push({ ts, books }),
    metrics: () => undefined,
    lost: (_m, reason, from) => gaps.push({ from, reason }),
    recovered: () => undefined,
    tickSize: () => undefined,
  });
  t.teardown(() => rec.close());
  return { rec, rows, gaps };
}

t.test('before its connection ever opens, a market takes REST after a stall bound, under a gap until the stream delivers', async (t) => {
  const { rec, rows, gaps } = await neverConnected(t);
  const market = openWalletMarket();
  const tracked = 1_000_000;
  rec.track([market], tracked);
  // The No book the Yes book mirrored, as the venue keeps them.
  const book = (token_id: string, outcome_index: number, at: number): Book => ({
    market_id: market.market_id,
    token_id,
    outcome_index,
    outcome: outcome_index ? 'Down' : 'Up',
    exchange_ts: at,
    bid_prices: [outcome_index ? 0.49 : 0.5],
    bid_sizes: [outcome_index ? 20 : 10],
    ask_prices: [outcome_index ? 0.5 : 0.51],
    ask_sizes: [outcome_index ? 10 : 20],
  });
  const poll = (recvTs: number, at: number) => ({
    books: [book('yes-token', 0, at), book('no-token', 1, at)],
    quotes: [],
    recvTs,
    sentTs: recvTs - 10,
  });
  rec.rest(market, poll(tracked + 1000, tracked - 500));
  t.same(rows, [], 'within the stall bound REST waits for the connection');
  rec.rest(market, poll(tracked + 6000, tracked + 5500));
  t.same(
    rows.map((r) => r.ts),
    [tracked + 5500],
    "past it, REST's book is the first",
  );
  t.same(gaps, [{ from: tracked + 5500, reason: 'disconnected' }], 'and a gap runs from it until the stream delivers');
  rec.rest(market, poll(tracked + 7000, tracked + 6500));
  t.equal(gaps.length, 1, 'one loss, whatever REST brings next');
});

t.test("REST's two books straddling a change: the newer one and its mirror, never the newer one at the older time", async (t) => {
  const { rec, rows } = await neverConnected(t);
  const tracked = 1_000_000;
  // The venue's one book per market at `bid` (Yes bid; ask a cent above), as REST answers each token.
  const book = (market_id: string, outcome_index: number, at: number, bid: number): Book => ({
    market_id,
    token_id: outcome_index ? 'no-token' : 'yes-token',
    outcome_index,
    outcome: outcome_index ? 'Down' : 'Up',
    exchange_ts: at,
    bid_prices: [outcome_index ? Math.round(99 - bid * 100) / 100 : bid],
    bid_sizes: [outcome_index ? 20 : 10],
    ask_prices: [outcome_index ? Math.round(100 - bid * 100) / 100 : Math.round(bid * 100 + 1) / 100],
    ask_sizes: [outcome_index ? 10 : 20],
    verified_by: 'snapshot',
  });
  const poll = (market_id: string, recvTs: number, yes: [number, number], no: [number, number]) => ({
    books: [book(market_id, 0, ...yes), book(market_id, 1, ...no)],
    quotes: [],
    recvTs,
    sentTs: recvTs - 10,
  });
  const levels = (b: Book) => [b.exchange_ts, b.bid_prices[0], b.ask_prices[0]];

  const checked = openWalletMarket();
  rec.track([checked], tracked);
  rec.rest(checked, poll(checked.market_id, tracked + 6000, [tracked + 5500, 0.5], [tracked + 5500, 0.5]));
  t.same(
    rows.map((r) => r.ts),
    [tracked + 5500],
    'one instant: the first row, and the mapping is seen to hold',
  );
  // The Yes book asked before a change at +6200, the No book after it.
  rec.rest(checked, poll(checked.market_id, tracked + 6300, [tracked + 5500, 0.5], [tracked + 6200, 0.52]));
  t.same(rows[1].ts, tracked + 6200, "the row is at the newer book's time");
  t.same(
    rows[1].books.map(levels),
    [
      [tracked + 6200, 0.52, 0.53],
      [tracked + 6200, 0.47, 0.48],
    ],
    'its Yes book the No book mirrored',
  );
  // The other way round: the No book asked before a change at +7100.
  rec.rest(checked, poll(checked.market_id, tracked + 7200, [tracked + 7100, 0.49], [tracked + 6200, 0.52]));
  t.same(
    rows[2].books.map(levels),
    [
      [tracked + 7100, 0.49, 0.5],
      [tracked + 7100, 0.5, 0.51],
    ],
    'its No book the Yes book mirrored',
  );

  // A market whose mapping REST never showed at one instant: two instants make no row.
  const unchecked = { ...openWalletMarket(), market_id: 'unchecked' };
  rec.track([unchecked], tracked);
  rec.rest(unchecked, poll('unchecked', tracked + 6000, [tracked + 5500, 0.5], [tracked + 5800, 0.51]));
  t.equal(rows.length, 3, 'no row from books of two instants while the mapping is unchecked');
  rec.rest(unchecked, poll('unchecked', tracked + 7000, [tracked + 5800, 0.51], [tracked + 5800, 0.51]));
  t.same(
    rows.slice(3).map((r) => [r.ts, r.books.map(levels)]),
    [
      [
        tracked + 5800,
        [
          [tracked + 5800, 0.51, 0.52],
          [tracked + 5800, 0.48, 0.49],
        ],
      ],
    ],
    'the next poll of one instant is the row',
  );
});

t.test('a silence of the whole stream is a pause for every market held: each a gap from its last proof until pushed again', async (t) => {
  // A venue that pushes two markets, then sends nothing for 8 s of its own time (its upstream down),
  // then pushes one of them: the other may have changed unseen in the silence, and is not vouched for.
  const wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
  t.teardown(() => wss.close());
  await new Promise((r) => wss.once('listening', r));
  const t0 = payload.updateTimestampMs as number;
  const push = (ws: WebSocket, marketId: string, at: number, bid: string) =>
    ws.send(
      JSON.stringify({
        type: 'DATA',
        topic: WALLET_AGGREGATE_TOPIC,
        data: JSON.stringify({ ...payload, marketId: Number(marketId), updateTimestampMs: at, bids: [[bid, '100']] }),
      }),
    );
  let socket: WebSocket | null = null;
  wss.on('connection', (ws) => {
    socket = ws;
    ws.send(JSON.stringify({ type: 'COMMAND', data: 'SUCCESS', subType: 'SUBSCRIBE', code: '00000000' }));
  });
  const url = `ws://127.0.0.1:${(wss.address() as { port: number }).port}/sapi/wss`;
  const a = openWalletMarket();
  const b = { ...openWalletMarket(), market_id: String(Number(a.market_id) + 1) };
  const rows: { id: string; ts: number }[] = [];
  const gaps: { id: string; reason: string; from: number }[] = [];
  // Each market's gap opens with `lost` and closes at its next `recovered` (called on every push of a live market).
  const events: string[] = [];
  const config = testConfig(testdir(t), { WALLET_WS_URL: url, WALLET_API_KEY: KEY, WALLET_API_SECRET: SECRET, STREAM_PAUSE_MS: '5000' });
  const rec = new WalletStreamRecorder(config, createClock(), quiet, {
    books: (m, ts) => rows.push({ id: m.market_id, ts }),
    metrics: () => undefined,
    lost: (m, reason, from) => {
      gaps.push({ id: m.market_id, reason, from });
      events.push(`lost ${m.market_id === a.market_id ? 'a' : 'b'}`);
    },
    recovered: (m) => events.push(`recovered ${m.market_id === a.market_id ? 'a' : 'b'}`),
    tickSize: () => undefined,
  });
  t.teardown(() => rec.close());
  rec.track([a, b], Date.now());
  await until(() => socket !== null);
  push(socket!, a.market_id, t0, '0.50');
  push(socket!, b.market_id, t0 + 1000, '0.40');
  push(socket!, a.market_id, t0 + 2000, '0.51');
  await until(() => rows.length === 3);
  t.same(gaps, [], 'pushes a second apart: no silence');
  // Eight seconds of the venue's time with nothing sent, then market a again.
  push(socket!, a.market_id, t0 + 10_000, '0.52');
  await until(() => rows.length === 4);
  const since = events.lastIndexOf('lost a');
  t.same(
    gaps,
    [
      { id: a.market_id, reason: 'stream_paused', from: t0 + 2000 },
      { id: b.market_id, reason: 'stream_paused', from: t0 + 1000 },
    ],
    'both markets lose from their last book: the silence began after it',
  );
  t.notOk(events.slice(since).includes('recovered b'), 'the other stays lost until it is pushed');
  t.ok(events.slice(since).includes('recovered a'), 'the market pushed after the silence is vouched for again at once');
  t.equal(rec.stats.pauses, 1, 'one pause counted');
  push(socket!, b.market_id, t0 + 10_500, '0.41');
  await until(() => rows.length === 5);
  t.ok(events.slice(since).includes('recovered b'), 'the other when it is pushed again');
  // Pushes out of order across markets (the venue's at-most-once, unordered delivery) are no silence.
  push(socket!, a.market_id, t0 + 12_000, '0.53');
  push(socket!, b.market_id, t0 + 11_000, '0.42');
  push(socket!, b.market_id, t0 + 14_000, '0.43');
  await until(() => rows.length === 8);
  t.equal(gaps.length, 2, 'no further silence');
});

t.test("the stand-in's glitch (tamper): one connection gets a push altered, the other the venue's book", async (t) => {
  const standin = new StandIn({ clock: createClock(), apiKey: KEY, apiSecret: SECRET });
  const base = (await standin.start(0)).replace(/^http/, 'ws') + WALLET_STREAM_PATH;
  t.teardown(() => standin.stop());
  type Push = { marketId: number; updateTimestampMs: number; bids: [string, string][]; asks: [string, string][] };
  const pushes = [new Map<string, Push>(), new Map<string, Push>()];
  const sockets = await Promise.all(
    pushes.map(
      (seen) =>
        new Promise<WebSocket>((resolve) => {
          const ws = new WebSocket(signedSocketUrl(base, SECRET, [WALLET_AGGREGATE_TOPIC]), { headers: { 'X-MBX-APIKEY': KEY } });
          ws.on('message', (d) => {
            const frame = JSON.parse(d.toString()) as { type: string; data: string };
            if (frame.type !== 'DATA') return resolve(ws);
            const push = JSON.parse(frame.data) as Push;
            seen.set(`${push.marketId}@${push.updateTimestampMs}`, push);
          });
        }),
    ),
  );
  t.teardown(() => sockets.forEach((ws) => ws.close()));
  const both = () => [...pushes[0].keys()].filter((k) => pushes[1].has(k));
  // Of a market both connections follow (each follows a newly listed market from its own first pump on).
  // The venue's pace is the clock's (1x): a market may be quiet for seconds.
  await until(() => both().length > 0, 60_000);
  const marketId = both()[0].split('@')[0];
  const market = standin.sim.byCode('wallet-prediction', Number(marketId) - 50_000_000)!;
  Object.assign(standin.walletStream.faults, { tamper: 1, tamperTokens: market.tokenIds });
  const altered = () => {
    const [key] = standin.walletStream.tamperedKeys;
    return key && `${marketId}@${key.split('@')[1]}`;
  };
  await until(() => !!altered() && pushes.every((p) => p.has(altered()!)), 60_000);
  const differing = both().filter((k) => JSON.stringify(pushes[0].get(k)) !== JSON.stringify(pushes[1].get(k)));
  t.same(differing, [altered()], 'exactly one push differs between the connections: the altered one');
  const [a, b] = pushes.map((p) => p.get(differing[0])!);
  const [sideA, sideB] = a.bids.length ? [a.bids, b.bids] : [a.asks, b.asks];
  t.equal(Math.abs(Number(sideA[0][1]) - Number(sideB[0][1])), 1, 'one size, one more');
  t.same([sideA.slice(1), sideA[0][0]], [sideB.slice(1), sideB[0][0]], 'the rest as the venue has it');
  t.equal(standin.walletStream.faults.tamper, 0, 'the glitch spent');
});
