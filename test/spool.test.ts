// Spool recovery cuts exactly the half-written tail, even when a line is longer than the
// window it reads from the end; rows encoded in a stream thread spool as appended rows do; the
// keeper's storage gaps hold no row it kept, late rows at a market's end included.
import fs from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { partitionOf } from '../src/lake/layout.js';
import { RunEncoder, Spool, listSpool, recoverSpool } from '../src/lake/spool.js';
import { GapLedger } from '../src/capture/gaps.js';
import { SpoolKeeper } from '../src/capture/keeper.js';
import type { BookRow, GapRow, Market, MetricRow } from '../src/records.js';
import { quiet, testdir } from './helpers.js';

t.test('a half-written tail longer than the read window is cut at the real line end', async (t) => {
  const dir = testdir(t);
  const file = path.join(dir, 'dead-seg/books/venue=polymarket/coin=btc/window=5m/date=2026-07-26/hour=13/000001.ndjson');
  await fs.mkdir(path.dirname(file), { recursive: true });
  const whole = `{"ts":1785070800000,"market_id":"m1","pad":"${'x'.repeat(600_000)}"}\n`;
  const partial = `{"ts":1785070801000,"market_id":"m1","pad":"${'y'.repeat(700_000)}`;
  await fs.writeFile(file, whole + partial);
  const r = await recoverSpool(dir, 'live-seg');
  t.equal(r.truncatedBytes, Buffer.byteLength(partial));
  t.equal(await fs.readFile(file, 'utf8'), whole);
  const again = await recoverSpool(dir, 'live-seg');
  t.equal(again.truncatedBytes, 0, 'recovery is idempotent');
});

t.test('recovery reports each market’s newest spooled row', async (t) => {
  const dir = testdir(t);
  const file = path.join(dir, 'dead-seg/metrics/venue=wallet-prediction/coin=btc/window=15m/date=2026-07-26/hour=13/000001.ndjson');
  await fs.mkdir(path.dirname(file), { recursive: true });
  await fs.writeFile(
    file,
    ['{"ts":10,"market_id":"a"}', '{"ts":30,"market_id":"b"}', '{"ts":20,"market_id":"a"}', '{"ts":99,"mark'].join('\n'),
  );
  const r = await recoverSpool(dir, 'live-seg');
  t.same(Object.fromEntries(r.lastTs), { 'metrics:a': 20, 'metrics:b': 30 });
});

t.test('a killed process’s books in doubt: the downtime starts at the last proof before them', async (t) => {
  const hour = Date.parse('2026-07-26T13:00:00Z');
  const row = (
    market: string,
    ts: number,
    outcome_index: number,
    verified_by: BookRow['verified_by'],
    hash_check: BookRow['hash_check'],
  ): BookRow => ({
    ts,
    recv_ts: ts + 2,
    market_id: market,
    token_id: `${market}-${outcome_index}`,
    outcome_index,
    outcome: outcome_index ? 'Down' : 'Up',
    exchange_ts: ts,
    bid_prices: [0.4],
    bid_sizes: [10],
    ask_prices: [0.41],
    ask_sizes: [5],
    verified_by,
    hash_check,
  });
  const rows = [
    // p: its Down token proved at +20, then a book whose hash did not reproduce, then one with no hash.
    row('p', hour + 10, 0, 'hash', 'match'),
    row('p', hour + 20, 1, 'hash', 'match'),
    row('p', hour + 30, 0, 'hash', 'match'),
    row('p', hour + 40, 1, 'best_bid_ask', 'mismatch'),
    row('p', hour + 50, 1, 'best_bid_ask', null),
    // q: a doubt a later hash proof settled.
    row('q', hour + 10, 0, 'snapshot', null),
    row('q', hour + 20, 0, 'best_bid_ask', 'unverifiable'),
    row('q', hour + 30, 0, 'hash', 'match'),
    // r: nothing proved in what was read, only doubted books.
    row('r', hour + 10, 0, 'best_bid_ask', 'unverifiable'),
    row('r', hour + 20, 0, 'best_bid_ask', 'unverifiable'),
    // w: the wallet's books carry no hash: nothing is in doubt.
    row('w', hour + 10, 0, 'snapshot', null),
    row('w', hour + 20, 1, 'none', null),
  ];
  const dir = testdir(t);
  const spool = new Spool(dir);
  for (const r of rows) spool.append(partitionOf('books', 'polymarket', 'btc', '5m', r.ts), [r]);
  await spool.close();
  const r = await recoverSpool(dir, 'live-seg');
  t.same(Object.fromEntries(r.unprovedFrom), { p: hour + 20, r: hour + 9 }, 'p from its Down token’s proof, r from before its first row');
  t.equal(r.lastTs.get('books:p'), hour + 50, 'the newest row is still reported');
});

t.test('runs encoded in another thread spool exactly the parts and lines that appending the rows makes', async (t) => {
  const hour = Date.parse('2026-07-26T13:00:00Z');
  const book = (market: string, ts: number, outcome_index: number, bid: number): BookRow => ({
    ts,
    recv_ts: ts + 3,
    market_id: market,
    token_id: `${market}-${outcome_index}`,
    outcome_index,
    outcome: outcome_index ? 'Down' : 'Up',
    exchange_ts: ts - 1,
    bid_prices: [bid],
    bid_sizes: [10],
    ask_prices: [bid + 0.01],
    ask_sizes: [5.5],
  });
  const metric = (market: string, ts: number, outcome_index: number): MetricRow => ({
    ts,
    market_id: market,
    token_id: `${market}-${outcome_index}`,
    outcome_index,
    outcome: outcome_index ? 'Down' : 'Up',
    chance: 0.5,
    price: 0.51,
    last_trade: null,
    recv_ts: ts,
  });
  // Two markets interleaved, one going back in time (a new part), one crossing into the next hour.
  const books = [
    book('a', hour + 10, 0, 0.4),
    book('a', hour + 10, 1, 0.6),
    book('b', hour + 11, 0, 0.3),
    book('a', hour + 20, 0, 0.41),
    book('a', hour + 15, 0, 0.42),
    book('b', hour + 3_600_000 + 5, 0, 0.31),
  ];
  const metrics = [metric('a', hour + 10, 0), metric('a', hour + 10, 1), metric('a', hour + 9, 0)];
  const partition = (dataset: 'books' | 'metrics', ts: number) => partitionOf(dataset, 'polymarket', 'btc', '5m', ts);

  const appended = new Spool(path.join(testdir(t), 'appended'));
  for (const r of books) appended.append(partition('books', r.ts), [r]);
  for (const r of metrics) appended.append(partition('metrics', r.ts), [r]);
  const encoder = new RunEncoder();
  for (const r of books) encoder.book(partition('books', r.ts), r);
  for (const r of metrics) encoder.line(partition('metrics', r.ts), r);
  t.equal(encoder.rows, books.length + metrics.length);
  const runs = encoder.take();
  t.equal(encoder.rows, 0, 'a take empties the encoder');
  t.ok(
    runs.every((r) => r.chunks.length === 1 && r.chunks[0].byteOffset === 0 && r.chunks[0].byteLength === r.chunks[0].buffer.byteLength),
    'each run travels as one chunk that owns its buffer (transferable)',
  );
  const encoded = new Spool(path.join(testdir(t), 'encoded'));
  // Structured clone, as a worker's message delivers them.
  for (const run of structuredClone(runs)) encoded.appendRun(run);
  t.equal(encoded.bufferedRows, appended.bufferedRows);
  t.equal(encoded.bufferedBytes, appended.bufferedBytes);
  await appended.close();
  await encoded.close();

  const contents = async (spool: Spool) => {
    const parts = await spool.sealable();
    const texts = await Promise.all(parts.map(async (p) => `${p.partition.dataset}:${p.market}:${await fs.readFile(p.file, 'utf8')}`));
    return texts.sort();
  };
  const expected = await contents(appended);
  t.equal(expected.length, 6, 'a part per run: books of a before and after going back, of b in each hour, metrics of a before and after');
  t.same(await contents(encoded), expected, 'the same parts with the same lines');
});

t.test('a storage gap never holds a row kept after it, late rows at its market’s end included', async (t) => {
  const dir = testdir(t);
  const spool = new Spool(dir);
  t.teardown(() => spool.close());
  const gaps = new GapLedger(spool, quiet, { gaps: 0 });
  // A bound of one byte: anything buffered makes the next row a drop, and a flush makes room again.
  const keeper = new SpoolKeeper(spool, 1, gaps, quiet);
  const END = Date.parse('2026-07-26T13:05:00Z');
  const LATE = 5000;
  const market = (id: string) => ({ market_id: id, venue: 'wallet-prediction', coin: 'btc', window: '5m', end_time: END }) as Market;
  const [a, b] = [market('a'), market('b')];
  const fill = () => spool.append(partitionOf('markets', 'wallet-prediction', 'btc', '5m', END), [{ market_id: 'filler' } as never]);

  fill();
  t.equal(keeper.keeps(a, 'books', END - 5000, 2), false, 'a row of a past the bound is dropped');
  t.equal(keeper.keeps(b, 'books', END - 5000, 2), false, 'and one of b');
  await keeper.flush();
  gaps.endMarkets('wallet-prediction', END + 100, LATE);
  t.equal(keeper.keeps(a, 'books', END - 2000, 2), true, 'a row of a arriving after its end, within the stall bound, is kept');
  gaps.endMarkets('wallet-prediction', END + LATE, LATE);
  // Gap rows are spooled rows too: room again for the rows below.
  await keeper.flush();
  t.equal(keeper.keeps(b, 'books', END - 1000, 2), false, 'b’s storage gap ended with b: a later row inside it is not kept');
  t.equal(keeper.keeps(b, 'books', END - 6000, 2), true, 'one from before the gap is');
  t.equal(keeper.health().dropped_rows, 6, 'each row not kept is counted');
  await keeper.flush();

  const written: GapRow[] = [];
  for (const part of await listSpool(dir))
    if (part.partition.dataset === 'gaps')
      for (const line of (await fs.readFile(part.file, 'utf8')).split('\n')) if (line) written.push(JSON.parse(line));
  t.same(
    written.map((g) => [g.market_id, g.from_ts - END, g.to_ts - END, g.reason]).sort(),
    [
      ['a', -5000, -2000, 'storage'],
      ['b', -5000, 0, 'storage'],
    ],
    'a’s gap ends at its late row; b’s at b’s end',
  );
});
