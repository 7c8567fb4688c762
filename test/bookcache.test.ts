// Pages from decoded books (the cache) equal pages from SQL, byte for byte, over every
// combination of order, interval, outcome filter, range and keyset, on rows with duplicated
// times and missing outcomes; then the cache's bound and its reload when files change.
import t from 'tap';
import { BookCache } from '../src/api/bookcache.js';
import { type PageQuery, marketBooksSql, snapshotBooksSql, snapshotPageSql, snapshotTimesSql } from '../src/api/plan.js';
import { type MarketBooks, type RenderedSnapshots, marketBooks, pageFromBooks, snapshotsJson } from '../src/api/shape.js';
import { Duck } from '../src/lake/duckdb.js';

const duck = await Duck.open(1);
t.teardown(() => duck.close());
const T0 = Date.parse('2026-07-26T12:00:00Z');
// 400 capture times 700-1300 ms apart; outcome 1 missing at some, a time recorded twice at others.
await duck.run(`CREATE TABLE b AS
  WITH times AS (SELECT i, ${T0} + i * 1000 + (i * 7919 % 600) - 300 AS t FROM range(400) r(i))
  SELECT epoch_ms(t)::TIMESTAMPTZ AS ts, 'm1' AS market_id, 'tok-' || o AS token_id, o::INTEGER AS outcome_index,
    CASE o WHEN 0 THEN 'Up' ELSE 'Down' END AS outcome, epoch_ms(t - 50)::TIMESTAMPTZ AS exchange_ts,
    [round(0.5 - i % 7 * 0.01, 2), 0.4]::DOUBLE[] AS bid_prices, [i * 1.5, 10.25]::DOUBLE[] AS bid_sizes,
    [0.6, 0.61 + o * 0.01]::DOUBLE[] AS ask_prices, [o + 0.5, 3.0]::DOUBLE[] AS ask_sizes
  FROM times, range(2) x(o), range(CASE WHEN i % 37 = 0 THEN 2 ELSE 1 END) d(dup)
  WHERE NOT (o = 1 AND i % 11 = 0)`);
const wide = 'SELECT * FROM b';
const span = { from: T0 - 1000, to: T0 + 500_000 };
const books: MarketBooks = marketBooks(
  await duck.chunks(...(Object.values(marketBooksSql(wide, 'm1', span.from, span.to)) as [string, Record<string, string | number>])),
);

async function sqlPage(q: PageQuery, ladders: boolean): Promise<RenderedSnapshots> {
  const limit = q.limit;
  if (q.intervalMs === null) {
    for (let rows = (limit + 1) * (q.outcomeIndex === null ? 2 : 1); ; rows *= 2) {
      const s = snapshotPageSql(wide, q, rows);
      const chunks = await duck.chunks(s.sql, s.params);
      const r = snapshotsJson(chunks, ladders, q.order, limit);
      if (chunks.reduce((n, c) => n + c.rowCount, 0) < rows || r.times > limit) return r;
    }
  }
  const ts = snapshotTimesSql('SELECT ts, market_id, outcome_index FROM b', q);
  const times = (await duck.rows(ts.sql, ts.params)).map((r) => Number(r.ts));
  const shown = times.slice(0, limit);
  const chunks = shown.length
    ? await duck.chunks(...(Object.values(snapshotBooksSql(wide, q, shown)) as [string, Record<string, string | number>]))
    : [];
  return { ...snapshotsJson(chunks, ladders, q.order, limit), times: times.length };
}

t.test('every page from the cache equals the page from SQL', async (t) => {
  let compared = 0;
  for (const order of ['asc', 'desc'] as const) {
    for (const intervalMs of [null, 5000, 60_000]) {
      for (const outcomeIndex of [null, 1]) {
        for (const [from, to] of [
          [span.from, span.to],
          [T0 + 50_000, T0 + 170_500],
        ]) {
          for (const limit of [1, 7, 100]) {
            // Walk the whole range page by page, both ways at once.
            let after: number | null = null;
            for (let pages = 0; pages < 500; pages++) {
              const q: PageQuery = { marketId: 'm1', from, to, order, after, limit, intervalMs, outcomeIndex };
              const ladders = pages % 2 === 0;
              const fromSql = await sqlPage(q, ladders);
              const fromCache = pageFromBooks(books, q, ladders, limit);
              if (
                fromCache.json.toString() !== fromSql.json.toString() ||
                Math.min(fromCache.times, limit + 1) !== Math.min(fromSql.times, limit + 1) ||
                fromCache.last !== fromSql.last
              ) {
                t.fail(`differs: ${JSON.stringify({ order, intervalMs, outcomeIndex, from, to, limit, after })}`);
                return;
              }
              compared++;
              if (fromSql.times <= limit) break;
              after = fromSql.last;
            }
          }
        }
      }
    }
  }
  t.ok(compared > 500, `${compared} pages compared`);
});

t.test('the cache is bounded, loads once for concurrent readers, and reloads when the files change', async (t) => {
  const cache = new BookCache(books.bytes * 4 + 1);
  let reads = 0;
  const read = async () => {
    reads++;
    return books;
  };
  const [a, b] = await Promise.all([cache.load('m1', 'files-v1', read), cache.load('m1', 'files-v1', read)]);
  t.equal(reads, 1, 'one read for two concurrent askers');
  t.equal(a, b);
  t.equal(cache.peek('m1', 'files-v1'), books);
  t.equal(cache.peek('m1', 'files-v2'), null, 'other files (compaction, backfill): not this entry');
  for (const k of ['m2', 'm3', 'm4', 'm5']) await cache.load(k, 'v', read);
  t.ok(cache.bytes <= cache.maxBytes, 'never above its bound');
  t.equal(cache.peek('m1', 'files-v1'), null, 'the least recently used went first');
  t.not(cache.peek('m5', 'v'), null, 'the newest stays');
});

t.test('a market is decoded at its second page: a first page alone is one statement', async (t) => {
  const cache = new BookCache(1024);
  t.equal(cache.askedBefore('a'), false, 'the first miss takes the SQL path');
  t.equal(cache.askedBefore('b'), false);
  t.equal(cache.askedBefore('a'), true, 'the second loads the market');
  // Counted lately: the counts halve as requests go by, and a market asked for once is forgotten.
  for (let i = 0; i < 40_000; i++) cache.askedBefore(`m${i}`);
  t.equal(cache.askedBefore('b'), false, 'b was forgotten after 40,000 other requests');
  t.equal(cache.askedBefore('m39999'), true, 'the newest is remembered');
});

t.test('a market is loaded only where it pushes out none asked for as often', async (t) => {
  const size = books.bytes;
  const cache = new BookCache(size * 4 + 1);
  const read = async () => books;
  const ask = async (key: string) => {
    if (cache.peek(key, 'v')) return 'hit';
    if (!cache.worthLoading(key, 2)) return 'miss';
    await cache.load(key, 'v', read);
    return 'load';
  };
  // A cycle over eight markets, twice what fits: with least-recently-used alone each load would
  // evict the market asked for next, and no request would ever hit.
  const seen: Record<string, number> = { hit: 0, miss: 0, load: 0 };
  for (let round = 0; round < 20; round++) for (let m = 0; m < 8; m++) seen[await ask(`m${m}`)]++;
  t.equal(seen.load, 4, 'the four that fit were loaded, and no other: each would evict one asked for as often');
  t.equal(seen.hit, 4 * 17, 'those four hit from their fourth request on');
  t.equal(seen.miss, 160 - 4 - 68, 'the others are served as with no cache');
  t.equal(cache.refused, 4 * 18, 'every request of the other four from their third on was refused a load');
  // A market asked for more often than those held gets in, pushing out the least recently used.
  let hot = '';
  for (let i = 0; i < 40 && hot !== 'load'; i++) hot = await ask('hot');
  t.equal(hot, 'load', 'a hot market is let in');
  t.equal(cache.peek('m0', 'v'), null, 'in place of the least recently used');
  t.ok(cache.bytes <= cache.maxBytes);
  // A market too large to keep is not loaded again and again.
  const small = new BookCache(size * 2);
  let loads = 0;
  for (let i = 0; i < 10; i++)
    if (small.worthLoading('big', 2))
      await small.load('big', 'v', async () => {
        loads++;
        return books;
      });
  t.equal(loads, 1, 'loaded once, found too large (over a quarter of the bound), not again');
});
