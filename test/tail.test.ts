// An API process beside capture (not inside it) answers the latest book from memory, kept
// current by following the spool: the same books capture holds, and new rows within a second.
import pino from 'pino';
import t from 'tap';
import { startApi } from '../src/api/server.js';
import { fill } from '../src/capture/fill.js';
import { StandInUpstream } from '../src/standin/upstream.js';
import { createClock } from '../src/clock.js';
import { Duck } from '../src/lake/duckdb.js';
import { lakePaths, partitionOf } from '../src/lake/layout.js';
import { Spool } from '../src/lake/spool.js';
import { sealAll, testConfig, testdir } from './helpers.js';

const START = Date.parse('2026-07-28T10:00:00Z');
const END = START + 7 * 60_000;
const dir = testdir(t);
const config = testConfig(dir, { RATE_PAID_PER_SECOND: '100000' });
const duck = await Duck.open(2);
// The hour is still open when the fill ends, so every book is in the spool, none sealed.
const run = await fill(
  config,
  duck,
  pino({ level: 'silent' }),
  { hours: 0, speed: 100, start: START, until: END, pollMs: 3000 },
  new StandInUpstream(),
);
const lines: Record<string, unknown>[] = [];
const api = await startApi(
  config,
  duck,
  createClock(END, 1),
  pino({ level: 'info' }, { write: (l: string) => lines.push(JSON.parse(l)) }),
  { port: 0 },
);
const { key } = await api.keys.issue('paid', 'tail');
t.teardown(async () => {
  await api.stop();
  await duck.close();
});

async function latest(venue: string, id: string, requestId: string) {
  const res = await fetch(`${api.url}/v3/${venue === 'polymarket' ? 'provider-alias' : 'wallet-prediction'}/${id}/orderbook/latest`, {
    headers: { authorization: `Bearer ${key}`, 'x-request-id': requestId },
  });
  return { status: res.status, body: await res.json() };
}

const wallet = [...run.capture.latest.entries()].filter(([k]) => k.startsWith('wallet-prediction:'));
// Of the markets whose whole window passed during the fill, the one with the most captures
// (a loaded machine polls less often at a given clock speed).
const captures = async (id: string) =>
  (
    await (
      await fetch(`${api.url}/v3/wallet-prediction/${id}/snapshots?limit=1000`, { headers: { authorization: `Bearer ${key}` } })
    ).json()
  ).data.length as number;
const whole: typeof wallet = [];
let most = 0;
for (const [k, mem] of wallet) {
  const m = api.lake.market('wallet-prediction', k.split(':')[1], END);
  if (mem.books.length !== 2 || !m || m.start_time < START || m.end_time > END) continue;
  const n = await captures(m.market_id);
  if (n > most) whole.unshift([k, mem]);
  most = Math.max(most, n);
}

t.test('every market capture saw: the same newest book, read from memory', async (t) => {
  t.ok(wallet.length >= 6, `${wallet.length} wallet markets captured`);
  for (const [k, mem] of wallet) {
    const id = k.split(':')[1];
    const r = await latest('wallet-prediction', id, `same-${id}`);
    t.equal(r.status, 200);
    t.equal(r.body.data.timestamp, new Date(mem.ts).toISOString(), `${id}: newest capture time`);
    t.same(
      r.body.data.books.map((b: { bid_prices: number[]; ask_sizes: number[] }) => [b.bid_prices, b.ask_sizes]),
      mem.books.map((b) => [b.bid_prices, b.ask_sizes]),
      `${id}: the same ladders`,
    );
    t.same(
      r.body.data.books.map((b: { outcome_index: number }) => b.outcome_index),
      mem.books.map((b) => b.outcome_index),
    );
    t.match(
      lines.find((l) => l.req_id === `same-${id}`),
      { status: 200, partitions: 0 },
      'no partition was read',
    );
  }
});

t.test('a row capture appends is served within a second; a sealed hour does not lose it', async (t) => {
  const [k, mem] = whole[0];
  const id = k.split(':')[1];
  const ts = mem.ts + 1000;
  const m = api.lake.market('wallet-prediction', id, END)!;
  const writer = new Spool(lakePaths(dir).spool);
  writer.append(
    partitionOf('books', 'wallet-prediction', m.coin, m.window, ts),
    mem.books.map((b) => ({ ...b, ts, recv_ts: ts + 30, bid_sizes: b.bid_sizes.map(() => 7) })),
  );
  await writer.close();
  let body: { data: { timestamp: string; books: { bid_sizes: number[] }[] } } | null = null;
  for (let i = 0; i < 100; i++) {
    body = (await latest('wallet-prediction', id, `new-${i}`)).body;
    if (body!.data.timestamp === new Date(ts).toISOString()) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  t.equal(body!.data.timestamp, new Date(ts).toISOString(), 'the appended row is the latest book');
  t.same(
    body!.data.books.map((b) => b.bid_sizes.every((size) => size === 7)),
    [true, true],
    'both outcomes of the new poll',
  );
  await sealAll(duck, dir);
  await new Promise((r) => setTimeout(r, 700));
  const after = await latest('wallet-prediction', id, 'after-seal');
  t.equal(after.body.data.timestamp, new Date(ts).toISOString(), 'still the newest after the spool was sealed away');
});

t.test('a page is whole capture times even when a time holds more rows than outcomes', async (t) => {
  t.ok(most >= 6, `${most} captures of the market paged below`);
  const [k, mem] = whole[0];
  const id = k.split(':')[1];
  const m = api.lake.market('wallet-prediction', id, END)!;
  const get = async (q: string) =>
    (await fetch(`${api.url}/v3/wallet-prediction/${id}/snapshots?${q}`, { headers: { authorization: `Bearer ${key}` } })).json();
  const before = await get('limit=3');
  const times = before.data.map((s: { timestamp: string }) => Date.parse(s.timestamp));
  // The same books once more at the page's first two times (as an overlapping backfill would).
  const writer = new Spool(lakePaths(dir).spool);
  for (const ts of times.slice(0, 2))
    writer.append(
      partitionOf('books', 'wallet-prediction', m.coin, m.window, ts),
      mem.books.map((b) => ({ ...b, ts, recv_ts: ts })),
    );
  await writer.close();
  const after = await get('limit=3');
  t.same(
    after.data.map((s: { timestamp: string }) => Date.parse(s.timestamp)),
    times,
    'still the same three times',
  );
  t.same(
    after.data.map((s: { books: unknown[] }) => s.books.length),
    [4, 4, 2],
    'with every row of each',
  );
  t.equal(after.pagination.has_more, true);
  let cursor = after.pagination.next_cursor;
  const seen = [...times];
  while (cursor) {
    const next = await get(`limit=3&cursor=${encodeURIComponent(cursor)}`);
    seen.push(...next.data.map((s: { timestamp: string }) => Date.parse(s.timestamp)));
    cursor = next.pagination.next_cursor;
  }
  t.equal(new Set(seen).size, seen.length, 'each time once across the walk');
  t.same(
    seen,
    [...seen].sort((a, b) => a - b),
    'in order',
  );
});

t.test('a timeseries page never splits the samples of one time', async (t) => {
  const [k, mem] = whole[0];
  const id = k.split(':')[1];
  const m = api.lake.market('wallet-prediction', id, END)!;
  const get = async (q: string) =>
    (
      await fetch(`${api.url}/v3/wallet-prediction/${id}/timeseries?metric=chance&${q}`, { headers: { authorization: `Bearer ${key}` } })
    ).json();
  const walk = async (limit: number) => {
    const seen: [string, number][] = [];
    let cursor: string | null = null;
    do {
      const r = await get(`limit=${limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
      seen.push(...r.data.map((s: { timestamp: string; value: number }) => [s.timestamp, s.value] as [string, number]));
      cursor = r.pagination.next_cursor;
    } while (cursor);
    return seen;
  };
  const before = await walk(1000);
  const times = before.slice(0, 2).map(([ts]) => Date.parse(ts));
  const writer = new Spool(lakePaths(dir).spool);
  const b = mem.books[0];
  for (const ts of times) {
    writer.append(partitionOf('metrics', 'wallet-prediction', m.coin, m.window, ts), [
      {
        ts,
        market_id: id,
        token_id: b.token_id,
        outcome_index: 0,
        outcome: b.outcome,
        chance: 0.123,
        price: null,
        last_trade: null,
        recv_ts: ts,
      },
    ]);
  }
  await writer.close();
  const first = await get('limit=2');
  t.same(
    first.data.map((s: { timestamp: string }) => Date.parse(s.timestamp)),
    [times[0], times[0], times[1], times[1]],
    'two times, each with both of its samples',
  );
  t.equal(first.pagination.has_more, true);
  const after = await walk(2);
  t.equal(after.length, before.length + 2, 'every sample once across the walk');
  t.same(
    [...new Set(after.map(([ts]) => ts))],
    before.map(([ts]) => ts),
    'every time once, in order',
  );
});
