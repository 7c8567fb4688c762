// The venue's own documented messages and its client libraries' hash vectors, fed through the
// real parsers: the hash function, the local book, and the recorder over a real WebSocket.
import fs from 'node:fs';
import t, { type Test } from 'tap';
import { WebSocketServer, type WebSocket } from 'ws';
import { StreamRecorder } from '../src/venues/polymarket/recorder.js';
import { createClock } from '../src/clock.js';
import { type Book, resolvedAt, withStreamFacts } from '../src/records.js';
import { type ClobBookSummary, type HashLayout, LocalBook, clobBookHash } from '../src/venues/polymarket/book.js';
import { openMarket, quiet, testConfig, testdir } from './helpers.js';

const fixture = (name: string) => JSON.parse(fs.readFileSync(new URL(`./fixtures/polymarket/${name}.json`, import.meta.url), 'utf8'));

t.test("the client libraries' hash vectors reproduce, by the function and by a kept book", async (t) => {
  const { vectors } = fixture('hash_vectors') as { vectors: { summary: ClobBookSummary; layout: HashLayout; hash: string }[] };
  for (const v of vectors) {
    t.equal(clobBookHash(v.summary, v.layout), v.hash, `${v.hash} from the summary`);
    t.not(clobBookHash(v.summary, v.layout === 'hash-last' ? 'hash-fourth' : 'hash-last'), v.hash, 'and not with hash placed elsewhere');
    // A kept book holds levels in the venue's order (asks descending); a vector written otherwise is not one it could hold.
    const asks = v.summary.asks.map((l) => Number(l.price));
    if (asks.some((p, i) => i > 0 && p > asks[i - 1])) continue;
    const book = new LocalBook(v.summary.market, v.summary.asset_id);
    book.reset(v.summary, 0);
    book.note(v.summary);
    t.equal(book.hash(v.summary.timestamp, v.layout), v.hash, 'from a local copy of the book');
  }
});

t.test("the documented book's prices without a leading zero hash as REST writes them", async (t) => {
  const { message } = fixture('book');
  const extras = { min_order_size: '5', tick_size: '0.01', neg_risk: false, last_trade_price: '0.500' };
  const asRest = (levels: { price: string; size: string }[]) => levels.map((l) => ({ ...l, price: `0${l.price}` }));
  // REST's order, best last on both sides (the example writes its asks best first).
  const byPrice = (levels: { price: string; size: string }[], sign: number) =>
    [...levels].sort((x, y) => sign * (Number(x.price) - Number(y.price)));
  const rest: ClobBookSummary = { ...message, bids: asRest(byPrice(message.bids, 1)), asks: asRest(byPrice(message.asks, -1)), ...extras };
  const copy = new LocalBook(message.market, message.asset_id);
  copy.reset(message, Number(message.timestamp));
  copy.note(extras);
  t.equal(copy.hash(message.timestamp), clobBookHash(rest), 'the copy of the channel\'s ".48" book hashes as REST\'s "0.48" one');
  t.same(
    copy.summary(message.timestamp).bids.map((l) => l.price),
    ['0.48', '0.49', '0.50'],
    'and holds its levels in that text',
  );
});

/** A scripted venue: records the frames it is sent and sends what the test scripts on each. */
async function venue(t: Test, script: (frame: Record<string, unknown>, ws: WebSocket) => void) {
  const wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
  t.teardown(() => wss.close());
  await new Promise((r) => wss.once('listening', r));
  const frames: Record<string, unknown>[] = [];
  wss.on('connection', (ws) =>
    ws.on('message', (d) => {
      const text = d.toString();
      if (text === 'PING') return ws.send('PONG');
      const frame = JSON.parse(text) as Record<string, unknown>;
      frames.push(frame);
      script(frame, ws);
    }),
  );
  return { url: `ws://127.0.0.1:${(wss.address() as { port: number }).port}`, frames };
}

/** An empty `book` snapshot of one token, as the channel sends on subscribe. */
function emptyBook(market: string, asset: string) {
  return { event_type: 'book', asset_id: asset, market, timestamp: '1757908892000', hash: '', bids: [], asks: [] };
}

function recorder(t: Test, url: string, env: Record<string, string> = {}) {
  const rows: { market: string; ts: number; books: Book[] }[] = [];
  const gaps: string[] = [];
  const resolutions: { market: string; winner: number; ts: number }[] = [];
  const quotes: number[] = [];
  const rec = new StreamRecorder(testConfig(testdir(t), { POLYMARKET_WS_URL: url, ...env }), createClock(), quiet, {
    books: (m, ts, _recvTs, books) => rows.push({ market: m.market_id, ts, books }),
    metrics: (_m, ts) => quotes.push(ts),
    lost: (m, reason, _from, detail) => gaps.push(`${m.market_id} ${reason}: ${detail}`),
    recovered: () => undefined,
    tickSize: () => undefined,
    resolved: (m, winner, ts) => resolutions.push({ market: m.market_id, winner, ts }),
  });
  t.teardown(() => rec.close());
  return { rec, rows, gaps, resolutions, quotes };
}

/**
 * REST's answer for a token with a hashed book (`book`) and the market's other token (empty): it
 * carries the fields the channel's books lack (minimum size, neg-risk).
 */
function restOf(book: ClobBookSummary) {
  return async (ids: string[]) => ({
    summaries: ids.map((id) =>
      id === book.asset_id ? structuredClone(book) : { ...book, asset_id: id, timestamp: '1757908892000', bids: [], asks: [] },
    ),
    recvTs: Date.now(),
  });
}

type Levels = [string, string][];

/**
 * The venue's book of one token, kept by hand in REST's order (bids ascending, asks descending)
 * with the fields REST carries, and its hash by the client libraries' function (vectors checked above).
 */
function hashedBook(market: string, asset: string, timestamp: number, bids: Levels, asks: Levels, trade = '0.500') {
  const summary: ClobBookSummary = {
    market,
    asset_id: asset,
    timestamp: String(timestamp),
    bids: bids.map(([price, size]) => ({ price, size })),
    asks: asks.map(([price, size]) => ({ price, size })),
    min_order_size: '5',
    tick_size: '0.01',
    neg_risk: false,
    last_trade_price: trade,
  };
  return { summary, hash: clobBookHash(summary) };
}

/** A venue answering the subscription with a dump of `first` (hashed) and the market's other token empty; `send` speaks on that socket. */
async function dumpingVenue(t: Test, first: ReturnType<typeof hashedBook>, other: string) {
  let socket: WebSocket | undefined;
  const { url } = await venue(t, (frame, ws) => {
    if (frame.operation) return;
    socket = ws;
    ws.send(JSON.stringify([{ event_type: 'book', ...first.summary, hash: first.hash }, emptyBook(first.summary.market, other)]));
  });
  return { url, send: (body: unknown) => socket!.send(JSON.stringify(body)) };
}

const until = async (done: () => boolean) => {
  for (let waited = 0; !done() && waited < 10_000; waited += 10) await new Promise((r) => setTimeout(r, 10));
};

t.test('the documented messages, through the recorder: subscribe frames, a book, a two-token price_change', async (t) => {
  const book = fixture('book').message;
  const change = fixture('price_change').message;
  const [yes, no] = change.price_changes.map((c: { asset_id: string }) => c.asset_id);
  const { url, frames } = await venue(t, (frame, ws) => {
    if (frame.operation) return;
    ws.send(JSON.stringify([book, emptyBook(change.market, yes), emptyBook(change.market, no)]));
    ws.send(JSON.stringify(fixture('tick_size_change').message));
    ws.send(JSON.stringify(change));
    ws.send(JSON.stringify(fixture('last_trade_price').message));
    ws.send('INVALID OPERATION');
  });
  const { rec, rows, gaps } = recorder(t, url);
  const a = openMarket('a', book.market, [book.asset_id, 'a-down']);
  const b = openMarket('b', change.market, [yes, no]);
  rec.track([a, b], Date.now());
  await until(() => rows.some((r) => r.ts === Number(change.timestamp)));

  t.same(
    frames[0],
    { assets_ids: [book.asset_id, 'a-down', yes, no], type: 'market', initial_dump: true, custom_feature_enabled: true },
    'the first frame asks for snapshots and the custom feature events',
  );
  const first = rows.find((r) => r.market === 'a')!;
  t.same(
    first.books.map((x) => [x.exchange_ts, x.bid_prices, x.bid_sizes, x.ask_prices, x.ask_sizes]),
    [[123456789000, [0.5, 0.49, 0.48], [15, 20, 30], [0.52, 0.53, 0.54], [25, 60, 10]]],
    'the book, best first, prices written without the leading zero read as numbers',
  );
  const after = rows.find((r) => r.ts === Number(change.timestamp))!;
  t.same(
    after.books.map((x) => [x.outcome_index, x.bid_prices, x.bid_sizes, x.ask_prices, x.ask_sizes]),
    [
      [0, [0.5], [200], [], []],
      [1, [], [], [0.5], [200]],
    ],
    'one message, both tokens: one row of the market at its time',
  );
  t.equal(rec.stats.bestChecked, 2, "each entry's best bid and ask agree with the copy ('0' and '1' for an empty side)");
  t.equal(rec.stats.mismatches, 0);
  t.same(gaps, [], 'nothing disproved');

  // A market added later goes on the open connection, asking for its snapshot again.
  const c = openMarket('c', '0xc', ['c-up', 'c-down']);
  rec.track([a, b, c], Date.now());
  await until(() => frames.length > 1);
  t.same(frames[1], { assets_ids: ['c-up', 'c-down'], operation: 'subscribe', type: 'market', initial_dump: true });
});

t.test("a dump's books of one market are one row, at its newest book's time: no instant the venue never sent", async (t) => {
  const up = { ...emptyBook('0xd', 'd-up'), timestamp: '1757908892000', bids: [{ price: '.48', size: '10' }] };
  const down = { ...emptyBook('0xd', 'd-down'), timestamp: '1757908891500', asks: [{ price: '.52', size: '10' }] };
  const change = {
    event_type: 'price_change',
    market: '0xd',
    timestamp: '1757908893000',
    price_changes: [{ asset_id: 'd-up', price: '0.47', size: '5', side: 'BUY', hash: '', best_bid: '0.48', best_ask: '1' }],
  };
  const { url } = await venue(t, (frame, ws) => {
    if (frame.operation) return;
    ws.send(JSON.stringify([up, down]));
    ws.send(JSON.stringify(change));
  });
  const { rec, rows, gaps } = recorder(t, url);
  rec.track([openMarket('d', '0xd', ['d-up', 'd-down'])], Date.now());
  await until(() => rows.some((r) => r.ts === 1757908893000));
  t.same(
    rows.map((r) => [r.ts, r.books.map((b) => [b.outcome_index, b.exchange_ts])]),
    [
      [
        1757908892000,
        [
          [0, 1757908892000],
          [1, 1757908891500],
        ],
      ],
      [
        1757908893000,
        [
          [0, 1757908893000],
          [1, 1757908891500],
        ],
      ],
    ],
    "the dump's row at the newest book's time, each book with its own; then the change's",
  );
  t.same(gaps, []);
});

t.test("a poll answered before a market's first book writes no quote: the book keeps its venue time", async (t) => {
  const up = { ...emptyBook('0xe', 'e-up'), timestamp: '1757908892000', bids: [{ price: '.48', size: '10' }] };
  const down = { ...emptyBook('0xe', 'e-down'), timestamp: '1757908892000', asks: [{ price: '.52', size: '10' }] };
  const { url } = await venue(t, (frame, ws) => {
    if (!frame.operation) ws.send(JSON.stringify([up, down]));
  });
  const { rec, rows, quotes } = recorder(t, url);
  const m = openMarket('e', '0xe', ['e-up', 'e-down']);
  rec.track([m], Date.now());
  // Its answer arrives (by the clock) ahead of the venue instants of books still on their way.
  rec.polled(m, [{ outcome_index: 0, chance: 0.5, price: null, last_trade: null }], 1757908899000);
  await until(() => rows.length > 0);
  t.same(
    rows.map((r) => r.ts),
    [1757908892000],
    "the first book at the venue's time, not stamped past the poll's arrival",
  );
  t.same(quotes, [1757908892000], 'the chance is written with the first book');
});

t.test("a token's snapshot wait runs from its first subscription, whatever reconnects came since", async (t) => {
  const stallMs = 300;
  let first = 0;
  let connections = 0;
  const { url } = await venue(t, (frame, ws) => {
    if (frame.operation) return;
    connections++;
    if (connections === 1) {
      // The first connection answers one token only (the other's snapshot withheld), then drops: late in the bound,
      // so that the reconnect's frame is recent when the snapshot comes (a wait timed from it would end in no gap).
      first = Date.now();
      ws.send(JSON.stringify([{ ...emptyBook('0xw', 'w-up'), bids: [{ price: '.40', size: '1' }] }]));
      setTimeout(() => ws.close(), stallMs - 100);
      return;
    }
    // The reconnect's snapshots come past the bound since the first frame (and within it since this one, as may be).
    setTimeout(
      () => ws.send(JSON.stringify([emptyBook('0xw', 'w-up'), emptyBook('0xw', 'w-down')])),
      Math.max(0, first + stallMs + 50 - Date.now()),
    );
  });
  const { rec, rows, gaps } = recorder(t, url, {
    STREAM_STALL_MS: String(stallMs),
    STREAM_BACKOFF_MIN_MS: '10',
    STREAM_BACKOFF_MAX_MS: '20',
  });
  rec.track([openMarket('w', '0xw', ['w-up', 'w-down'])], Date.now());
  await until(() => rows.some((r) => r.books.length === 2));
  t.equal(connections, 2, 'the first connection dropped and the tokens were subscribed again');
  t.match(
    gaps,
    [
      /^w disconnected/,
      `w stream_resync: no snapshot of Down within ${stallMs} ms of its subscription; its book is taken from a later book`,
    ],
    "the synced token's loss, then the other's whole wait: a gap from when capture asked for it",
  );
});

t.test('an entry without a size is never applied as if whole: the token resyncs and no row comes of it', async (t) => {
  const change = fixture('price_change').message;
  const [yes, no] = change.price_changes.map((c: { asset_id: string }) => c.asset_id);
  const { size: _dropped, ...partial } = change.price_changes[0];
  const { url } = await venue(t, (frame, ws) => {
    if (frame.operation) return;
    ws.send(JSON.stringify([emptyBook(change.market, yes), emptyBook(change.market, no)]));
    ws.send(JSON.stringify({ ...change, price_changes: [partial] }));
  });
  const { rec, rows, gaps } = recorder(t, url);
  rec.track([openMarket('b', change.market, [yes, no])], Date.now());
  await until(() => rec.stats.incomplete > 0);
  t.equal(rec.stats.incomplete, 1);
  t.equal(rows.filter((r) => r.ts === Number(change.timestamp)).length, 0, 'no row at its time');
  t.match(gaps, [/b stream_resync: a price_change entry at 1757908892351 lacks a usable price, side or size/]);
});

t.test("each book's hash verdict: match, explained by a trade sent after the book, mismatch once the bound has passed", async (t) => {
  // The venue's book of one token, kept by hand in REST's order (bids ascending, asks descending)
  // and hashed by the client libraries' function (its vectors are checked above).
  const market = '0x' + 'ab'.repeat(32);
  const [up, down] = ['71321045679252212594626385532706912750332728571942532289631379312455583992563', '2'];
  const venueBook = (timestamp: number, bids: Levels, asks: Levels, trade?: string) => hashedBook(market, up, timestamp, bids, asks, trade);
  const t0 = 1_764_000_000_000;
  const bids: [string, string][] = [
    ['0.47', '10'],
    ['0.48', '30'],
  ];
  const asks: [string, string][] = [
    ['0.53', '10'],
    ['0.52', '25'],
  ];
  const first = venueBook(t0, bids, asks);
  const { url, send } = await dumpingVenue(t, first, down);
  const rows: { ts: number; checks: (string | null | undefined)[] }[] = [];
  const gaps: string[] = [];
  const rec = new StreamRecorder(testConfig(testdir(t), { POLYMARKET_WS_URL: url }), createClock(), quiet, {
    books: (_m, ts, _recvTs, books) => rows.push({ ts, checks: books.map((b) => b.hash_check) }),
    metrics: () => undefined,
    lost: (m, reason, _from, detail) => gaps.push(`${m.market_id} ${reason}: ${detail}`),
    recovered: () => undefined,
    tickSize: () => undefined,
    fetchBooks: restOf(first.summary),
  });
  t.teardown(() => rec.close());
  rec.track([openMarket('m', market, [up, down])], Date.now());
  await until(() => rows.length > 0 && rec.stats.refetches > 0);
  const change = (ts: number, price: string, size: string, side: 'BUY' | 'SELL', hash: string) => ({
    event_type: 'price_change',
    market,
    timestamp: String(ts),
    price_changes: [{ asset_id: up, price, size, side, hash }],
  });
  // 1: the hash of the book after it, with the fields the copy knows.
  bids[1] = ['0.48', '40'];
  send(change(t0 + 100, '0.48', '40', 'BUY', venueBook(t0 + 100, bids, asks).hash));
  // 2: hashed with a trade at 0.520 whose last_trade_price comes 88 ms after the change.
  asks[1] = ['0.52', '5'];
  send(change(t0 + 200, '0.52', '5', 'SELL', venueBook(t0 + 200, bids, asks, '0.520').hash));
  send({
    event_type: 'last_trade_price',
    asset_id: up,
    market,
    price: '0.520',
    side: 'BUY',
    size: '20',
    fee_rate_bps: '0',
    timestamp: String(t0 + 288),
  });
  // 3: a hash nothing the copy holds or sees within the bound reproduces.
  bids[0] = ['0.47', '12'];
  send(change(t0 + 300, '0.47', '12', 'BUY', 'f'.repeat(40)));
  // Rows wait for their verdicts, in order: nothing of 3 until the venue's time has passed its bound.
  await until(() => rows.some((r) => r.ts === t0 + 200));
  t.notOk(
    rows.some((r) => r.ts === t0 + 300),
    'the book whose hash did not reproduce is held while a trade may still explain it',
  );
  // 4: a later change (a second past 3) ends its wait; its own hash reproduces.
  bids[1] = ['0.48', '41'];
  send(change(t0 + 1_400, '0.48', '41', 'BUY', venueBook(t0 + 1_400, bids, asks, '0.520').hash));
  await until(() => rows.some((r) => r.ts === t0 + 1_400));
  const byTs = new Map(rows.map((r) => [r.ts, r.checks[0]]));
  t.same(
    [t0, t0 + 100, t0 + 200, t0 + 300, t0 + 1_400].map((ts) => byTs.get(ts)),
    ['match', 'match', 'explained', 'mismatch', 'match'],
    'the snapshot (its fields from REST), a change, a change explained by the trade after it, one that stays unexplained, the next',
  );
  t.same(
    rows.map((r) => r.ts),
    [...rows.map((r) => r.ts)].sort((a, b) => a - b),
    'rows handed over in time order',
  );
  t.equal(rows.at(-1)!.checks[1], null, 'the empty book sent with no hash: nothing to check');
  t.same(
    gaps,
    [`m stream_resync: 1 book(s) whose hash did not reproduce before ${t0 + 1_400}`],
    'the explained book is proved; the unexplained one, once a later hash proves the copy, leaves a gap since the last proof',
  );
});

t.test("a gap a later hash proves over a token's books reaches their rows' time, stamped past the market's other token", async (t) => {
  // The market's other token changed at a later venue instant first (a trade, or a connection
  // ahead): the token's next books are stamped past it, and the gap its later proof closes must
  // reach over those rows by their own time, which the certificate and a merge read, not only by
  // their venue time (beside stress-ng such rows stood 3.8 s past the gap, outside it).
  const market = '0x' + 'cd'.repeat(32);
  const [up, down] = ['31321045679252212594626385532706912750332728571942532289631379312455583992563', '3'];
  const t0 = 1_764_000_000_000;
  const bids: Levels = [['0.48', '30']];
  const asks: Levels = [['0.52', '25']];
  const venueBook = (timestamp: number) => hashedBook(market, up, timestamp, bids, asks);
  const first = venueBook(t0);
  const { url, send } = await dumpingVenue(t, first, down);
  const rows: { ts: number; up: Book }[] = [];
  const spans: { from: number; to: number | null }[] = [];
  const rec = new StreamRecorder(testConfig(testdir(t), { POLYMARKET_WS_URL: url }), createClock(), quiet, {
    books: (_m, ts, _recvTs, books) => rows.push({ ts, up: books.find((b) => b.token_id === up)! }),
    metrics: () => undefined,
    lost: (_m, _reason, from) => {
      if (spans.at(-1)?.to !== null) spans.push({ from, to: null });
    },
    recovered: (_m, at) => {
      const open = spans.at(-1);
      if (open && open.to === null) open.to = at;
    },
    tickSize: () => undefined,
    fetchBooks: restOf(first.summary),
  });
  t.teardown(() => rec.close());
  rec.track([openMarket('m', market, [up, down])], Date.now());
  await until(() => rows.length > 0 && rec.stats.refetches > 0);
  const change = (asset: string, ts: number, price: string, size: string, side: 'BUY' | 'SELL', hash: string) => ({
    event_type: 'price_change',
    market,
    timestamp: String(ts),
    price_changes: [{ asset_id: asset, price, size, side, hash }],
  });
  send(change(down, t0 + 5_000, '0.55', '10', 'SELL', ''));
  // A change whose hash nothing reproduces (the venue's book held another change the copy never got), then one the hash proves.
  bids[0] = ['0.48', '31'];
  send(change(up, t0 + 100, '0.48', '31', 'BUY', 'f'.repeat(40)));
  bids[0] = ['0.48', '32'];
  send(change(up, t0 + 1_400, '0.48', '32', 'BUY', venueBook(t0 + 1_400).hash));
  await until(() => rows.some((r) => r.up.exchange_ts === t0 + 1_400) && spans.at(-1)?.to != null);
  const doubted = rows.filter((r) => r.up.hash_check === 'mismatch');
  t.same(
    doubted.map((r) => [r.up.exchange_ts, r.ts]),
    [[t0 + 100, t0 + 5_001]],
    "the book in doubt is stamped past the other token's row, after its own venue time",
  );
  t.equal(spans.length, 1, 'one gap');
  const [gap] = spans;
  t.ok(
    gap.from < t0 + 100 && gap.to! >= t0 + 5_001,
    `the gap [${gap.from - t0}, ${gap.to! - t0}] (from t0) reaches over the doubted row at +5001`,
  );
  t.equal(gap.to, rows.find((r) => r.up.exchange_ts === t0 + 1_400)!.ts, 'and ends at the row of the book the hash proved');
});

t.test("an ended market stays subscribed until the venue's market_resolved gives its resolution time, then is let go", async (t) => {
  const resolved = fixture('market_resolved').message;
  const [up, down] = resolved.assets_ids as [string, string];
  const { url, frames } = await venue(t, (frame, ws) => {
    if (frame.operation) return;
    // Another market's resolution first: a winner that is none of a market's tokens is not taken.
    ws.send(JSON.stringify({ ...resolved, market: '0xother', assets_ids: ['x-up', 'x-down'], winning_asset_id: 'x-down' }));
    ws.send(JSON.stringify(resolved));
  });
  const { rec, resolutions } = recorder(t, url);
  const ended = { ...openMarket('r', resolved.market, [up, down]), start_time: Date.now() - 400_000, end_time: Date.now() - 100_000 };
  // An open market keeps the connection: the ended one's tokens are let go by an unsubscribe frame.
  rec.track([ended, openMarket('o', '0xo', ['o-up', 'o-down'])], Date.now());
  t.notOk(rec.tracks(ended), 'its books are no longer taken');
  await until(() => frames.some((f) => f.operation === 'unsubscribe'));
  t.same(frames[0].assets_ids, [up, down, 'o-up', 'o-down'], 'but its tokens were subscribed, for the resolution');
  t.same(resolutions, [{ market: 'r', winner: 1, ts: 1757908892351 }], "the venue's time and its winning token's outcome");
  t.equal(rec.stats.resolutions, 1);
  t.same(frames.at(-1), { assets_ids: [up, down], operation: 'unsubscribe', type: 'market' }, 'then the tokens are let go');
});

t.test("a market ends by its own events, not another's later ones; one of its window after it went is a gap", async (t) => {
  // Without hashes: a book in doubt waits for REST up to the stall bound, and here nothing may wait on the clock.
  const documented = fixture('price_change').message;
  const change = { ...documented, price_changes: documented.price_changes.map((c: object) => ({ ...c, hash: '' })) };
  const [yes, no] = change.price_changes.map((c: { asset_id: string }) => c.asset_id);
  let socket: WebSocket | undefined;
  const { url } = await venue(t, (frame, ws) => {
    if (frame.operation) return;
    socket = ws;
    ws.send(
      JSON.stringify([emptyBook(change.market, yes), emptyBook(change.market, no), emptyBook('0xo', 'o-up'), emptyBook('0xo', 'o-down')]),
    );
  });
  const send = (body: unknown) => socket!.send(JSON.stringify(body));
  // A stall bound no starved run reaches: only events may let the market go here, never the clock.
  const { rec, rows, gaps } = recorder(t, url, { STREAM_STALL_MS: '600000' });
  const end = Date.now() - 1;
  const ending = { ...openMarket('e', change.market, [yes, no]), end_time: end };
  const open = openMarket('o', '0xo', ['o-up', 'o-down']);
  rec.track([ending, open], Date.now());
  await until(() => rows.filter((r) => r.market === 'e' || r.market === 'o').length >= 2);
  // Another market's change from past the end (another connection's, or sent ahead by a starved sender).
  const otherAhead = {
    ...change,
    market: '0xo',
    timestamp: String(end + 500),
    price_changes: [{ ...change.price_changes[0], asset_id: 'o-up' }],
  };
  send(otherAhead);
  await until(() => rows.some((r) => r.market === 'o' && r.ts === end + 500));
  rec.track([ending, open], Date.now());
  t.ok(rec.tracks(ending), 'the ended market is kept: nothing of its own says its last change has come');
  // Its own last change of the window, sent behind the other market's: recorded.
  send({ ...change, timestamp: String(end - 10) });
  await until(() => rows.some((r) => r.market === 'e' && r.ts === end - 10));
  t.ok(
    rows.some((r) => r.market === 'e' && r.ts === end - 10),
    'its change from before the end is recorded',
  );
  // Its own event at the end: nothing more of its window to come, and it is let go.
  send({ ...fixture('last_trade_price').message, market: change.market, asset_id: yes, timestamp: String(end + 1) });
  send({ ...fixture('last_trade_price').message, market: change.market, asset_id: no, timestamp: String(end + 1) });
  await until(() => {
    rec.track([ending, open], Date.now());
    return !rec.tracks(ending);
  });
  t.notOk(rec.tracks(ending), 'let go by its own events at its end');
  t.same(gaps, [], 'no gap so far');
  // A change of its window arriving after it went cannot be recorded: a gap, not silence.
  send({ ...change, timestamp: String(end - 5) });
  await until(() => gaps.length > 0);
  t.same(gaps, [`e stream_late: a price_change of ${end - 5} arrived after the market was let go`]);
  t.equal(rec.stats.late, 1);
  t.notOk(
    rows.some((r) => r.market === 'e' && r.ts === end - 5),
    'and no row',
  );
});

t.test('a change REST showed that the stream never delivered before its market ended is a gap to the end', async (t) => {
  // A stream frozen across a market's end (found by the fault audit with a freeze over one): the
  // change REST saw waits for the stream up to the stall bound, which outlasts the market.
  let socket: WebSocket | undefined;
  const { url } = await venue(t, (frame, ws) => {
    if (frame.operation) return;
    socket = ws;
    ws.send(JSON.stringify([emptyBook('0xf', 'f-up'), emptyBook('0xf', 'f-down'), emptyBook('0xo', 'o-up'), emptyBook('0xo', 'o-down')]));
  });
  const { rec, rows, gaps } = recorder(t, url, { STREAM_STALL_MS: '600000' });
  const end = Date.now() - 1;
  const frozen = { ...openMarket('f', '0xf', ['f-up', 'f-down']), end_time: end };
  const open = openMarket('o', '0xo', ['o-up', 'o-down']);
  rec.track([frozen, open], Date.now());
  await until(() => rows.some((r) => r.market === 'f'));
  const summary = (asset: string, bids: { price: string; size: string }[]) => ({
    market: '0xf',
    asset_id: asset,
    timestamp: String(end - 1000),
    hash: '',
    bids,
    asks: [],
    min_order_size: '5',
    tick_size: '0.01',
    neg_risk: false,
    last_trade_price: '0.5',
  });
  // REST's book of the up token has a bid the stream never sent; the down token's is the copy's.
  const summaries = [summary('f-up', [{ price: '0.45', size: '10' }]), summary('f-down', [])];
  rec.rest(frozen, { books: [], summaries, quotes: [], recvTs: end - 900 });
  t.same(gaps, [], 'within the stall bound, the change may still be on its way');
  // The market's own events at its end: it is let go with the change still undelivered.
  for (const asset of ['f-up', 'f-down'])
    socket!.send(JSON.stringify({ ...fixture('last_trade_price').message, market: '0xf', asset_id: asset, timestamp: String(end + 1) }));
  await until(() => {
    rec.track([frozen, open], Date.now());
    return !rec.tracks(frozen);
  });
  t.notOk(rec.tracks(frozen), 'let go at its end');
  t.same(
    gaps,
    [
      `f stream_resync: the stream never delivered the change REST showed at ${end - 1000} before its market ended; streamed copy at 1757908892000`,
    ],
    "the loss is a gap (from the copy's last proof to the end), not silence",
  );
});

t.test('a market silent past its end goes only once its connection is read past the end: a change still unread is recorded', async (t) => {
  // A process frozen across a market's end resumes with the clock far past it and the window's last
  // changes unread in its socket (found in storage.test: they vanished with no gap). The venue
  // answers a PING after everything it sent before, so an answer to one sent past the end proves them read.
  const documented = fixture('price_change').message;
  const change = { ...documented, price_changes: documented.price_changes.map((c: object) => ({ ...c, hash: '' })) };
  const [yes, no] = change.price_changes.map((c: { asset_id: string }) => c.asset_id);
  const wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
  t.teardown(() => wss.close());
  await new Promise((r) => wss.once('listening', r));
  let socket: WebSocket | undefined;
  let pings = 0;
  wss.on('connection', (ws) =>
    ws.on('message', (d) => {
      // Heartbeats are counted and left unanswered until the test answers them.
      if (d.toString() === 'PING') return void pings++;
      socket = ws;
      ws.send(JSON.stringify([emptyBook(change.market, yes), emptyBook(change.market, no)]));
    }),
  );
  const url = `ws://127.0.0.1:${(wss.address() as { port: number }).port}`;
  const stallMs = 2000;
  // Regular heartbeats out of the way: only the recorder's own asks for one.
  const { rec, rows, gaps } = recorder(t, url, { STREAM_STALL_MS: String(stallMs), STREAM_PING_MS: '60000' });
  const end = Date.now() - 1;
  const ended = { ...openMarket('e', change.market, [yes, no]), end_time: end };
  rec.track([ended], Date.now());
  await until(() => rows.some((r) => r.market === 'e'));
  while (Date.now() <= end + stallMs) await new Promise((r) => setTimeout(r, 50));
  rec.track([ended], Date.now());
  t.ok(rec.tracks(ended), 'past the end and the stall bound, silent, and kept: nothing shows its socket was read that far');
  t.same(rec.holding(), ['e'], 'held, so a heartbeat keeps naming it');
  await until(() => pings > 0);
  t.equal(pings, 1, 'a PING asks the venue to show it');
  rec.track([ended], Date.now());
  t.equal(pings, 1, 'once');
  // The window's last change, read only now.
  socket!.send(JSON.stringify({ ...change, timestamp: String(end - 10) }));
  await until(() => rows.some((r) => r.ts === end - 10));
  t.ok(
    rows.some((r) => r.market === 'e' && r.ts === end - 10),
    'the change from before the end is recorded',
  );
  socket!.send('PONG');
  await until(() => {
    rec.track([ended], Date.now());
    return !rec.tracks(ended);
  });
  t.notOk(rec.tracks(ended), 'let go once the answer came');
  t.same(gaps, [], 'nothing lost');
});

t.test("a connection that never answers past a market's end vouches for nothing after the market's last event", async (t) => {
  let pinged = false;
  const wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
  t.teardown(() => wss.close());
  await new Promise((r) => wss.once('listening', r));
  wss.on('connection', (ws) =>
    ws.on('message', (d) => {
      if (d.toString() === 'PING') return void (pinged = true);
      ws.send(JSON.stringify([emptyBook('0xn', 'n-up'), emptyBook('0xn', 'n-down')]));
    }),
  );
  const { rec, rows, gaps } = recorder(t, `ws://127.0.0.1:${(wss.address() as { port: number }).port}`, {
    STREAM_STALL_MS: '200',
    STREAM_PING_MS: '60000',
  });
  const end = Date.now() - 1;
  const ended = { ...openMarket('n', '0xn', ['n-up', 'n-down']), end_time: end };
  rec.track([ended], Date.now());
  await until(() => rows.some((r) => r.market === 'n'));
  await until(() => {
    rec.track([ended], Date.now());
    return !rec.tracks(ended);
  });
  t.ok(pinged, 'asked');
  t.notOk(rec.tracks(ended), 'let go once the answer is overdue');
  t.match(gaps, [/^n stream_late: the connection of .* never showed it was read past the market's end$/], 'with a gap from its last event');
});

t.test('a resolution the stream announced stays with the market until the catalogue knows one', async (t) => {
  const base = openMarket('r', '0xr', ['u', 'd']);
  const announced = resolvedAt(base, 1, 1_000);
  t.match(announced, { resolved_time: 1_000, status: 'resolved', resolution: 'resolved', winning_outcome_index: 1 });
  t.equal(withStreamFacts(base, undefined), base, 'nothing known: the catalogue as it is');
  t.match(withStreamFacts({ ...base, status: 'closed' }, announced), {
    resolved_time: 1_000,
    status: 'resolved',
    winning_outcome_index: 1,
  });
  const settled = { ...base, status: 'resolved' as const, resolution: 'resolved' as const, winning_outcome_index: 1 };
  t.match(
    withStreamFacts(settled, announced),
    { resolved_time: 1_000, status: 'resolved' },
    "the catalogue's resolution keeps the venue's time",
  );
  t.match(withStreamFacts({ ...settled, resolved_time: 2_000 }, announced), { resolved_time: 2_000 }, "a time of the catalogue's own wins");
});
