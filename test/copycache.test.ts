// The ring that keeps what pages read from serving copies: a piece comes back as kept or not at
// all (never bytes the writer has come round to), the newest stay, the index stays as small as
// the ring, and a block's table comes back as decoded.
import t from 'tap';
import { CopyCache } from '../src/pages/copycache.js';
import { decodeTable, encodeBlock, tableOfPiece, tablePiece } from '../src/pages/copyformat.js';
import { marketBooks } from '../src/pages/render.js';
import { marketBooksSql } from '../src/api/plan.js';
import { Duck } from '../src/lake/duckdb.js';

const T0 = Date.parse('2026-07-26T12:00:00Z');

t.test('a piece comes back as kept, or not at all once the ring has come round to it', async (t) => {
  const cache = new CopyCache(64 * 1024);
  let seed = 7;
  const random = () => (seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31;
  const kept = new Map<string, Buffer>();
  let [back, gone] = [0, 0];
  for (let i = 0; i < 5000; i++) {
    const piece = Buffer.alloc(1 + Math.floor(random() * 9000), i % 251);
    // Two parts: kept as one, in order.
    const cut = Math.floor(random() * piece.length);
    cache.keep(`k${i}`, [piece.subarray(0, cut), piece.subarray(cut)], [i]);
    kept.set(`k${i}`, piece);
    // One of the last 30 kept: about half still in a ring that holds 14 of them on average.
    const k = `k${Math.max(0, i - Math.floor(random() * 30))}`;
    const got = cache.get(k);
    if (got) {
      if (!got.bytes.equals(kept.get(k)!) || got.meta[0] !== Number(k.slice(1))) return t.fail(`${k}: other bytes than kept`);
      back++;
    } else gone++;
    if (!cache.get(`k${i}`)) return t.fail(`k${i}: the newest is not there`);
  }
  t.ok(back > 1000 && gone > 1000, `${back} pieces back as kept, ${gone} written over and not returned`);
  t.ok(cache.bytes <= cache.maxBytes, 'never more than its bound');
  t.ok((cache as unknown as { pieces: Map<string, unknown> }).pieces.size < 64, 'the index holds only what the ring holds');
  // Nothing over a quarter of the ring, and nothing empty.
  cache.keep('big', [Buffer.alloc(16 * 1024 + 1)]);
  cache.keep('empty', []);
  t.equal(cache.get('big'), null);
  t.equal(cache.get('empty'), null);
  t.equal(new CopyCache(0).get('k1'), null, 'a cache of no bytes keeps nothing');
  // Across 4 GiB written (a few hours of pages): positions are not 32-bit integers, and a piece written over stays gone.
  const long = new CopyCache(1000);
  (long as unknown as { written: number }).written = 2 ** 32 - 300;
  long.keep('before', [Buffer.alloc(200, 1)]);
  for (let i = 0; i < 20; i++) long.keep(`after${i}`, [Buffer.alloc(200, 2 + i)]);
  t.equal(long.get('before'), null, 'written over past 4 GiB: not returned');
  t.ok(long.get('after19')?.bytes.equals(Buffer.alloc(200, 21)), 'the newest as kept');
});

t.test('a block is kept only when asked for again before the ring would have come round to it', async (t) => {
  // A ring of 1 MiB, blocks of 100 KiB: it holds 10 of them.
  const cache = new CopyCache(1 << 20);
  const ask = (block: string) => {
    const again = cache.admit(block);
    if (again && !cache.get(block)) cache.keep(block, [Buffer.alloc(100 * 1024)], [], true);
    return again;
  };
  // Drawn over 200 blocks in turn: each asked again only 200 blocks later, long after it would have been written over.
  let admitted = 0;
  for (let round = 0; round < 3; round++) for (let b = 0; b < 200; b++) admitted += Number(ask(`wide${b}`));
  t.equal(admitted, 0, 'never kept: nothing copied that no page would read');
  t.equal(cache.kept, 0);
  // Over 6 blocks in turn: kept at their second request, read from the ring from the third.
  for (let round = 0; round < 5; round++) for (let b = 0; b < 6; b++) ask(`hot${b}`);
  t.equal(cache.kept, 6, 'each kept once');
  t.equal(cache.hits, 6 * 3, 'and found from its third request on');
});

t.test("a block's table comes back from the ring as decoded", async (t) => {
  // 250 capture times of two outcomes, the second missing at some: chunks of 100 times.
  const duck = await Duck.open(1);
  t.teardown(() => duck.close());
  const { sql, params } = marketBooksSql(
    `SELECT epoch_ms(${T0} + i * 1000)::TIMESTAMPTZ AS ts, 'm' AS market_id, 'tok-' || o AS token_id, o::INTEGER AS outcome_index,
      CASE o WHEN 0 THEN 'Up' ELSE 'Down' END AS outcome, NULL::TIMESTAMPTZ AS exchange_ts,
      [0.5 - i % 7 / 100]::DOUBLE[] AS bid_prices, [i + 0.5]::DOUBLE[] AS bid_sizes,
      [0.6]::DOUBLE[] AS ask_prices, [o + 1.0]::DOUBLE[] AS ask_sizes
    FROM range(250) r(i), range(2) x(o) WHERE o = 0 OR i % 9 <> 0`,
    'm',
    T0,
    T0 + 250_000,
  );
  const books = marketBooks(await duck.chunks(sql, params));
  const { block, table } = await encodeBlock(books);
  const decoded = decodeTable(block.subarray(0, table), books.ts.length, 100, block.length - table);
  const cache = new CopyCache(1 << 20);
  cache.keep('unaligned', [Buffer.alloc(3)]);
  const { parts, meta } = tablePiece(decoded);
  cache.keep('table', parts, meta);
  const got = cache.get('table')!;
  t.equal(got.bytes.byteOffset % 8, 0, 'kept 8-aligned');
  // Copied out, as a page copies it into its arena (8-aligned), before the ring is written again.
  const own = Buffer.allocUnsafeSlow(got.bytes.length);
  got.bytes.copy(own);
  cache.keep('next', [Buffer.alloc(1000)]);
  const again = tableOfPiece(own, got.meta);
  t.same([again.n, again.k, again.chunks, again.times], [decoded.n, 100, 3, 250]);
  for (const name of ['ts', 'outcome', 'lengths', 'firstRow'] as const) t.same(Array.from(again[name]), Array.from(decoded[name]), name);
  for (const name of ['at', 'crc', 'length', 'zcrc'] as const)
    t.same(Array.from(again.table[name]), Array.from(decoded.table[name]), `chunk ${name}`);
});
