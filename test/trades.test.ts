// Trades: the venue's documented `last_trade_price` through the parser; capture against the
// stand-in recording every trade it sent, once, with what it said; the wallet venue's REST
// last-trade changes labelled as such; and the trades routes over that lake (pages, cursors,
// exports, files).
import t from 'tap';
import { startApi } from '../src/api/server.js';
import { createClock } from '../src/clock.js';
import type { Market } from '../src/records.js';
import { tradeMessage } from '../src/standin/stream.js';
import { SECOND } from '../src/time.js';
import { type ClobLastTradeMessage, tradeOf } from '../src/venues/polymarket/book.js';
import { lakeTable, quiet } from './helpers.js';
import { streamRun } from './streamrun.js';

const MARKET = {
  market_id: '1',
  outcomes: [
    { index: 0, label: 'Up', token_id: '114122071509644379678018727908709560226618148003371446110114509806601493071694' },
    { index: 1, label: 'Down', token_id: '2' },
  ],
} as Market;

t.test("the venue's documented last_trade_price is one trade row, every field kept", async (t) => {
  // The example of Polymarket's market-channel documentation (also the venue's Rust client's test fixture).
  const documented = JSON.parse(`{
    "asset_id": "114122071509644379678018727908709560226618148003371446110114509806601493071694",
    "event_type": "last_trade_price",
    "fee_rate_bps": "0",
    "market": "0x6a67b9d828d53862160e470329ffea5246f338ecfffdf2cab45211ec578b0347",
    "price": "0.456",
    "side": "BUY",
    "size": "219.217767",
    "timestamp": "1750428146322",
    "transaction_hash": "0xeeefffggghhh"
  }`) as ClobLastTradeMessage;
  t.same(tradeOf(MARKET, documented, 1750428146400), {
    ts: 1750428146322,
    market_id: '1',
    token_id: documented.asset_id,
    outcome_index: 0,
    outcome: 'Up',
    price: 0.456,
    size: 219.217767,
    side: 'buy',
    fee_rate_bps: 0,
    transaction_hash: '0xeeefffggghhh',
    source: 'stream',
    exchange_ts: 1750428146322,
    recv_ts: 1750428146400,
    // The venue's text: "0.456" and "219.217767".
    price_decimals: 3,
    size_decimals: 6,
  });
  // The venue's clients treat every field but the price as optional: what is missing stays null, never guessed.
  const bare = { event_type: 'last_trade_price', asset_id: '2', price: '.57' } as ClobLastTradeMessage;
  t.same(tradeOf(MARKET, bare, 5000), {
    ts: 5000,
    market_id: '1',
    token_id: '2',
    outcome_index: 1,
    outcome: 'Down',
    price: 0.57,
    size: null,
    side: null,
    fee_rate_bps: null,
    transaction_hash: null,
    source: 'stream',
    exchange_ts: null,
    recv_ts: 5000,
    // ".57" fits no code: read back in the shortest form ("0.57").
    price_decimals: null,
    size_decimals: null,
  });
  t.equal(tradeOf(MARKET, { ...documented, asset_id: '3' }, 0), null, 'a token of another market is not this market’s trade');
  t.equal(tradeOf(MARKET, { ...documented, price: 'x' }, 0), null, 'nor is a trade without a price');
});

interface Recorded {
  market_id: string;
  token_id: string;
  ts: number;
  price: number;
  size: number | null;
  side: string | null;
  fee_rate_bps: number | null;
  transaction_hash: string | null;
  source: string;
  exchange_ts: number | null;
}

t.test('capture records every trade the market channel sent, once, as sent; the routes serve them', async (t) => {
  const run = await streamRun(t, {}, 5, 20, { env: { STREAM_THREADS: '1' }, spanMs: 90_000 });
  const rows = (await run.duck.rows(
    `SELECT market_id, token_id, epoch_ms(ts)::DOUBLE AS ts, price, size, side, fee_rate_bps, transaction_hash, source,
       epoch_ms(exchange_ts)::DOUBLE AS exchange_ts FROM ${lakeTable(run.dir, 'trades')} ORDER BY ts, token_id`,
  )) as unknown as Recorded[];
  const key = (token: string, ts: number) => `${token}@${ts}`;
  const recorded = new Map<string, Recorded[]>();
  for (const r of rows) recorded.set(key(r.token_id, r.ts), [...(recorded.get(key(r.token_id, r.ts)) ?? []), r]);
  // What the venue sent each subscribed token: the model's trade of every second after its subscription, up to
  // the stop less what may still have been in flight, outside the market's gaps (a busy machine's stalled or
  // resubscribed feed loses trades it says it lost: books gaps, and their copies for trades).
  const allGaps = (await run.duck.rows(
    `SELECT market_id, epoch_ms(from_ts)::DOUBLE AS f, epoch_ms(to_ts)::DOUBLE AS t FROM ${lakeTable(run.dir, 'gaps')}`,
  )) as unknown as { market_id: string; f: number; t: number }[];
  const inGap = (id: string, at: number) => allGaps.some((g) => g.market_id === id && g.f <= at && at <= g.t);
  let expected = 0;
  const wrong: string[] = [];
  // The clock ran on while capture stopped and the lake was sealed: a market's newest book marks its stop.
  const stop = new Map<string, number>();
  for (const r of run.rows) stop.set(r.market_id, Math.max(stop.get(r.market_id) ?? -Infinity, r.ts));
  for (const m of run.markets) {
    for (const index of [0, 1] as const) {
      const sim = run.sim.byCode('polymarket', Number(m.market_id) - 1_000_000)!;
      const subscribed = run.subscribedAt(m.market_id, index);
      if (subscribed === undefined) continue;
      for (
        let s = Math.floor(subscribed / SECOND) + 1;
        s * SECOND <= Math.min(sim.end, (stop.get(m.market_id) ?? -Infinity) - run.slackMs);
        s++
      ) {
        const price = run.sim.tradeAt(sim, index, s);
        if (price === null || inGap(m.market_id, s * SECOND)) continue;
        expected++;
        const sent = tradeMessage(run.sim, sim, index, s, price);
        const got = recorded.get(key(sent.asset_id, s * SECOND)) ?? [];
        const want = {
          market_id: m.market_id,
          token_id: sent.asset_id,
          ts: s * SECOND,
          price: Number(sent.price),
          size: Number(sent.size),
          side: sent.side.toLowerCase(),
          fee_rate_bps: 0,
          transaction_hash: sent.transaction_hash,
          source: 'stream',
          exchange_ts: s * SECOND,
        };
        if (got.length !== 1 || JSON.stringify(got[0]) !== JSON.stringify(want))
          wrong.push(`${key(sent.asset_id, s * SECOND)}: ${JSON.stringify(got)} for ${JSON.stringify(want)}`);
      }
    }
  }
  t.ok(expected > 30, `${expected} trades sent over the run`);
  t.same(wrong.slice(0, 5), [], `each recorded once, with the venue's price, size, side, fee, hash and time (${wrong.length} not)`);
  const invented = rows.filter((r) => {
    const found = run.sim.byToken('polymarket', r.token_id)!;
    return run.sim.tradeAt(found.market, found.index, r.ts / SECOND) !== r.price;
  });
  t.same(invented, [], 'and nothing recorded that the venue did not trade');
  t.equal(run.capture.stats.trades, rows.length, 'capture counted what it spooled');
  // Trades before a subscription never came: a market subscribed after its open says so, from the open, and its
  // trades gaps together reach its subscription (a snapshot that came late is a gap of its own, written for trades too).
  const gaps = (await run.duck.rows(
    `SELECT market_id, epoch_ms(from_ts)::DOUBLE AS f, epoch_ms(to_ts)::DOUBLE AS t, reason FROM ${lakeTable(run.dir, 'gaps')} WHERE dataset = 'trades'`,
  )) as unknown as { market_id: string; f: number; t: number; reason: string }[];
  const simOf = (id: string) => run.sim.byCode('polymarket', Number(id) - 1_000_000)!;
  const subscribed = (id: string) => Math.max(...([0, 1] as const).map((i) => run.subscribedAt(id, i) ?? -Infinity));
  const late = run.markets.filter((m) => subscribed(m.market_id) > simOf(m.market_id).start);
  t.ok(late.length > 0 && late.length < run.markets.length, `${late.length} of ${run.markets.length} markets subscribed after their open`);
  const unsubscribed = gaps.filter((g) => g.reason === 'not_subscribed');
  t.same(
    unsubscribed.map((g) => g.market_id).sort(),
    late.map((m) => m.market_id).sort(),
    'each of them, and no other, has a not_subscribed trades gap',
  );
  t.ok(
    unsubscribed.every((g) => g.f === simOf(g.market_id).start),
    'from its open',
  );
  const reached = (id: string) => {
    // How far from the open the market's trades gaps reach without a break.
    let to = simOf(id).start;
    for (const g of gaps.filter((x) => x.market_id === id).sort((a, b) => a.f - b.f)) if (g.f <= to) to = Math.max(to, g.t);
    return to;
  };
  t.same(
    late.filter((m) => reached(m.market_id) < Math.min(subscribed(m.market_id), simOf(m.market_id).end)).map((m) => m.market_id),
    [],
    'and its trades gaps reach its subscription without a break',
  );

  // The routes: a cursor walk gives every row in order, the exports the same rows.
  const api = await startApi(run.config, run.duck, createClock(run.end + 3_600_000, 1), quiet, { port: 0 });
  t.teardown(() => api.stop());
  const { key: apiKey } = await api.keys.issue('paid', 'trades');
  const get = async (path: string) => {
    const res = await fetch(`${api.url}${path}`, { headers: { authorization: `Bearer ${apiKey}` } });
    return { status: res.status, body: res.headers.get('content-type')?.includes('json') ? await res.json() : await res.text() };
  };
  // The market with the most trade instants (how many each has depends on how far a loaded machine got).
  const instants = (id: string) => new Set(rows.filter((r) => r.market_id === id).map((r) => r.ts)).size;
  const market = run.markets.reduce((best, m) => (instants(m.market_id) > instants(best.market_id) ? m : best));
  const mine = rows.filter((r) => r.market_id === market.market_id);
  const walked: any[] = [];
  let cursor: string | null = null;
  let pages = 0;
  do {
    const page = await get(`/v3/btc/markets/${market.market_id}/trades?limit=7${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
    t.equal(page.status, 200);
    walked.push(...page.body.data);
    cursor = page.body.pagination.next_cursor;
    pages++;
  } while (cursor);
  t.ok(
    pages >= 2 && pages === Math.ceil(instants(market.market_id) / 7),
    `${pages} pages of at most 7 times each, for ${instants(market.market_id)} trade instants`,
  );
  t.same(
    walked.map((w) => [Date.parse(w.timestamp), w.token_id, w.price, w.size, w.side, w.transaction_hash, w.source]),
    mine.map((r) => [r.ts, r.token_id, r.price, r.size, r.side, r.transaction_hash, r.source]),
    `the walk returns the market's ${mine.length} trades in time order, each once`,
  );
  t.ok(
    walked.every((w) => w.exchange_time === w.timestamp && Date.parse(w.recv_time) >= Date.parse(w.timestamp) - 1000),
    'each with the venue’s time of the trade and the time capture received it',
  );
  const desc = await get(`/v3/btc/markets/${market.market_id}/trades?order=desc&limit=1000&outcome=1`);
  t.same(
    desc.body.data.map((w: any) => w.transaction_hash),
    mine
      .filter((r) => r.token_id === run.sim.byCode('polymarket', Number(market.market_id) - 1_000_000)!.tokenIds[1])
      .map((r) => r.transaction_hash)
      .reverse(),
    'one outcome, newest first',
  );
  const csv = await get(`/v3/btc/markets/${market.market_id}/trades?format=csv`);
  t.equal(csv.status, 200);
  const lines = (csv.body as string).trimEnd().split('\n');
  t.match(
    lines[0],
    /^timestamp,market_id,outcome_index,outcome,token_id,price,size,side,fee_rate_bps,transaction_hash,source,exchange_time,recv_time$/,
  );
  t.equal(lines.length - 1, mine.length, 'the CSV export holds every trade of the market');
  const files = await get('/v3/btc/files?dataset=trades');
  t.ok(files.body.data.length > 0 && files.body.data.every((f: any) => f.dataset === 'trades'), 'bulk files list the trades dataset');
  const bad = await get(`/v3/btc/markets/${market.market_id}/trades?interval=1m`);
  t.equal(bad.status, 400, 'trades are not downsampled: interval is refused');
});

t.test('the wallet venue sends no trades: its REST last-trade changes are kept as such, never as fills', async (t) => {
  const run = await streamRun(t, {}, 5, 20, { venue: 'wallet-prediction' });
  const rows = (await run.duck.rows(
    `SELECT market_id, outcome_index, epoch_ms(ts)::DOUBLE AS ts, price, size, side, transaction_hash, source, exchange_ts
     FROM ${lakeTable(run.dir, 'trades')} ORDER BY market_id, outcome_index, ts`,
  )) as unknown as { market_id: string; outcome_index: number; ts: number; price: number; size: null; side: null; source: string }[];
  t.ok(rows.length > 0, `${rows.length} last-trade changes`);
  t.ok(
    rows.every(
      (r: any) =>
        r.source === 'rest_last_trade' && r.size === null && r.side === null && r.transaction_hash === null && r.exchange_ts === null,
    ),
    'labelled rest_last_trade, with no size, side, hash or venue time',
  );
  const repeats = rows.filter(
    (r, i) =>
      i > 0 && rows[i - 1].market_id === r.market_id && rows[i - 1].outcome_index === r.outcome_index && rows[i - 1].price === r.price,
  );
  t.same(repeats, [], 'a row only where the price changed');
  // Each is the metrics' last trade at that time.
  const metrics = (await run.duck.rows(
    `SELECT market_id, outcome_index, epoch_ms(ts)::DOUBLE AS ts, last_trade FROM ${lakeTable(run.dir, 'metrics')}`,
  )) as unknown as { market_id: string; outcome_index: number; ts: number; last_trade: number }[];
  const at = new Map(metrics.map((m) => [`${m.market_id}:${m.outcome_index}:${m.ts}`, m.last_trade]));
  t.ok(
    rows.every((r) => at.get(`${r.market_id}:${r.outcome_index}:${r.ts}`) === r.price),
    'each equals the last trade polled at its time',
  );
});
