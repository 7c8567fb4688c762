// A market's books followed in the spool (api/livebooks.ts) against what DuckDB makes of the same
// lines: rows added out of order and past every initial capacity come out in (time, outcome)
// order with the bytes the SQL path renders; a part followed as it grows is read from where it stopped.
import fs from 'node:fs/promises';
import path from 'node:path';
import t, { type Test } from 'tap';
import { GrowingBooks, LiveBooks } from '../src/api/livebooks.js';
import { marketBooksSql } from '../src/api/plan.js';
import { sql } from '../src/api/route.js';
import { Duck } from '../src/lake/duckdb.js';
import { BOOK_COLUMNS, relation } from '../src/lake/sql.js';
import { type MarketBooks, type SpooledBook, marketBooks } from '../src/pages/render.js';
import { testdir } from './helpers.js';

const T0 = Date.parse('2026-07-28T12:00:00Z');

/** Deterministic rows: two outcomes, deep ladders (a row is ~1.5 KB), text that needs escaping, some exchange times missing. */
function rows(n: number): (SpooledBook & { market_id: string; recv_ts: number })[] {
  let seed = 7;
  const rnd = () => (seed = (seed * 16807) % 2147483647) / 2147483647;
  const ladder = (lo: number, dir: 1 | -1) => Array.from({ length: 40 }, (_, i) => Math.round((lo + dir * i * 0.01) * 100) / 100);
  const sizes = () => Array.from({ length: 40 }, () => Math.round(rnd() * 1e6) / 100);
  return Array.from({ length: n }, (_, i) => {
    const outcome_index = i % 2;
    return {
      ts: T0 + Math.floor(i / 2) * 1000 + (i % 7 === 0 ? 1 : 0),
      recv_ts: T0 + i,
      market_id: 'm1',
      token_id: `tok-${outcome_index}-é`,
      outcome_index,
      outcome: outcome_index ? 'Dówn "x"' : 'Up\\',
      exchange_ts: i % 5 === 0 ? null : T0 + i * 997,
      bid_prices: ladder(0.45, -1),
      bid_sizes: sizes(),
      ask_prices: ladder(0.46, 1),
      ask_sizes: sizes(),
    };
  });
}

function same(t: Test, got: MarketBooks, want: MarketBooks): void {
  t.same([...got.ts], [...want.ts], 'times');
  t.same([...got.outcome], [...want.outcome], 'outcomes');
  t.same([...got.ladderAt], [...want.ladderAt], 'ladder offsets');
  t.ok(got.ladder.equals(want.ladder), 'ladders, byte for byte');
  t.same([...got.summaryAt], [...want.summaryAt], 'summary offsets');
  t.ok(got.summary.equals(want.summary), 'summaries, byte for byte');
  t.ok(got.heads.equals(want.heads), 'heads, byte for byte');
}

const duck = await Duck.open(1);
t.teardown(() => duck.close());

/** What the SQL path decodes from these lines as a spool part. */
async function fromSql(file: string): Promise<MarketBooks> {
  const wide = relation('books', { sealed: [], spool: [file] }, BOOK_COLUMNS)!;
  return marketBooks(await duck.chunks(...sql(marketBooksSql(wide, 'm1', T0 - 1, T0 + 86_400_000))));
}

t.test('rows added out of order, past every initial capacity, come out as DuckDB orders and renders them', async (t) => {
  const all = rows(900);
  const file = path.join(testdir(t), 'part.ndjson');
  await fs.writeFile(file, all.map((r) => `${JSON.stringify(r)}\n`).join(''));
  const grown = new GrowingBooks();
  // A later part first, then an earlier one (a restart's parts interleaved), each in order.
  for (const r of [...all.slice(450), ...all.slice(0, 450)]) grown.add(r);
  const view = grown.view();
  t.equal(view.ts.length, 900);
  same(t, view, await fromSql(file));
  t.ok(view.ladder.length > 256 * 1024, `${view.ladder.length} bytes of ladders (the buffer grew)`);
});

t.test('a part followed as it grows is read from where it stopped; a half-written line waits', async (t) => {
  const all = rows(600);
  const dir = testdir(t);
  const file = path.join(dir, 'part.ndjson');
  const lines = all.map((r) => `${JSON.stringify(r)}\n`);
  const live = new LiveBooks(64 * 1024 * 1024);
  await fs.writeFile(file, lines.slice(0, 100).join('') + lines[100].slice(0, 50));
  t.equal((await live.books('m1', [file])).ts.length, 100, 'the whole lines');
  t.equal(live.loads, 1);
  await fs.writeFile(file, lines.join(''));
  // Two at once: one read of what was appended, whoever asks.
  const [a, b] = await Promise.all([live.books('m1', [file]), live.books('m1', [file])]);
  t.equal(a, b, 'one read for both');
  same(t, a, await fromSql(file));
  t.equal(live.hits, 1, 'the second read followed the first');
  // A second part beside it (a new capture process), then the first removed (sealed): the entry starts over.
  const second = path.join(dir, 'part2.ndjson');
  const later = rows(650).slice(600);
  await fs.writeFile(second, later.map((r) => `${JSON.stringify(r)}\n`).join(''));
  t.equal((await live.books('m1', [file, second])).ts.length, 650, 'both parts');
  t.equal((await live.books('m1', [second])).ts.length, 50, 'only what the remaining part holds');
  t.equal(live.loads, 2, 'started over');
  t.ok(live.bytes > 0 && live.bytes <= live.maxBytes, `${live.bytes} bytes held`);
  const small = new LiveBooks(1024);
  await small.books('m1', [file]);
  t.equal(small.markets, 0, 'a market larger than the bound is not kept');
  t.equal(small.bytes, 0);
});
