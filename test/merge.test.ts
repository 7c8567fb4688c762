// Merging recorders' sealed records: each recorder's lake is written through the real spool and
// sealed by the real writer, then merged; the merged Parquet is read back.
import fs from 'node:fs/promises';
import path from 'node:path';
import { createHash } from 'node:crypto';
import t, { type Test } from 'tap';
import { Duck } from '../src/lake/duckdb.js';
import { lakePaths, partitionDir, partitionOf } from '../src/lake/layout.js';
import { readManifest } from '../src/lake/manifest.js';
import {
  type RecorderClaims,
  disagreements,
  doubtedSpans,
  mergeGaps,
  mergeRows,
  readGaps,
  recorderClaims,
  stageDoubts,
  wholeFrom,
  writeGaps,
} from '../src/lake/merge.js';
import { sealDue } from '../src/lake/seal.js';
import { Spool } from '../src/lake/spool.js';
import { sqlPath } from '../src/lake/sql.js';
import type { BookRow, GapRow, TradeRow } from '../src/records.js';
import { HOUR } from '../src/time.js';
import { testdir } from './helpers.js';

const HOUR0 = Date.parse('2026-07-26T13:00:00Z');
const books = partitionOf('books', 'polymarket', 'btc', '5m', HOUR0);
const trades = partitionOf('trades', 'polymarket', 'btc', '5m', HOUR0);
const gaps = partitionOf('gaps', 'polymarket', 'btc', '5m', HOUR0);

function book(ts: number, outcome: 0 | 1, size: number, recvDelay = 5): BookRow {
  return {
    ts,
    recv_ts: ts + recvDelay,
    market_id: 'm1',
    token_id: `m1-${outcome}`,
    outcome_index: outcome,
    outcome: outcome ? 'Down' : 'Up',
    exchange_ts: ts,
    bid_prices: [0.49, 0.48],
    bid_sizes: [size, 10],
    ask_prices: [0.51],
    ask_sizes: [size + 1],
  };
}

function trade(ts: number, size: number): TradeRow {
  return {
    ts,
    market_id: 'm1',
    token_id: 'm1-0',
    outcome_index: 0,
    outcome: 'Up',
    price: 0.5,
    size,
    side: 'buy',
    fee_rate_bps: 0,
    transaction_hash: '0xabc',
    source: 'stream',
    exchange_ts: ts,
    recv_ts: ts + 3,
  };
}

/** A recorder's lake sealed from these rows; returns its sealed files by dataset. */
async function recorderLake(t: Test, rows: { books: BookRow[]; trades: TradeRow[]; gaps: GapRow[] }) {
  const dir = testdir(t);
  const spool = new Spool(lakePaths(dir).spool);
  spool.append(books, rows.books);
  spool.append(trades, rows.trades);
  spool.append(gaps, rows.gaps);
  await spool.flush();
  await spool.close();
  const duck = await Duck.open(1);
  await sealDue(duck, lakePaths(dir), HOUR0 + 2 * HOUR, () => 0);
  await duck.close();
  const files = async (p: typeof books) =>
    (await readManifest(lakePaths(dir).manifest, p)).files.map((f) => path.join(lakePaths(dir).lake, partitionDir(p), f.name));
  return { books: await files(books), trades: await files(trades), gaps: await files(gaps) };
}

const gap = (from: number, to: number, reason = 'process_down'): GapRow => ({
  market_id: 'm1',
  dataset: 'books',
  from_ts: from,
  to_ts: to,
  reason,
  detail: null,
  failures: 1,
});

t.test('books and trades both recorders kept are stored once, naming both; a disagreement is neither', async (t) => {
  const S = HOUR0 + 60_000;
  const a = await recorderLake(t, {
    books: [book(S, 0, 1), book(S, 1, 2), book(S + 1000, 0, 3), book(S + 2000, 0, 4), book(S + 3000, 0, 5), book(S + 5000, 1, 10)],
    // Two identical fills at one instant are two trades, in both records.
    trades: [trade(S + 10, 7), trade(S + 10, 7), trade(S + 500, 1)],
    gaps: [],
  });
  const b = await recorderLake(t, {
    // B saw the book at S+1000 later (another recv_ts: the same observation), not the one at S+2000
    // (its own loss), and a different book at S+3000.
    books: [
      book(S, 0, 1, 9),
      book(S, 1, 2, 9),
      book(S + 1000, 0, 3, 40),
      book(S + 3000, 0, 6),
      book(S + 4000, 0, 8),
      // Asked at the instant A asked, answered with the venue's book of an instant before: not a disagreement.
      { ...book(S + 5000, 1, 99), exchange_ts: S + 4500 },
    ],
    trades: [trade(S + 10, 7), trade(S + 10, 7), trade(S + 900, 2)],
    gaps: [],
  });
  const duck = await Duck.open(1);
  t.teardown(() => duck.close());
  const out = testdir(t);
  const inputs = (d: 'books' | 'trades') => [
    { recorder: 'rec-a', files: a[d] },
    { recorder: 'rec-b', files: b[d] },
  ];
  const entry = await mergeRows(duck, out, books, inputs('books'), 'merged.parquet', { sources: ['x'], writtenAt: 5 });
  t.ok(entry);
  t.equal(entry!.written_at, 5, 'written_at is the one given, not the clock');
  const file = path.join(out, partitionDir(books), 'merged.parquet');
  const rows = await duck.rows(
    `SELECT epoch_ms(ts)::DOUBLE AS ts, outcome_index, bid_sizes[1] AS size, epoch_ms(recv_ts)::DOUBLE AS recv, recorders FROM read_parquet(${sqlPath(file)}) ORDER BY ts, outcome_index`,
  );
  t.same(
    rows.map((r) => [Number(r.ts) - S, r.outcome_index, r.size, r.recorders]),
    [
      [0, 0, 1, ['rec-a', 'rec-b']],
      [0, 1, 2, ['rec-a', 'rec-b']],
      [1000, 0, 3, ['rec-a', 'rec-b']],
      [2000, 0, 4, ['rec-a']],
      [4000, 0, 8, ['rec-b']],
      [5000, 1, 10, ['rec-a']],
    ],
    'each observation once with who kept it; the disputed book at +3000 is in neither form; of two books asked for at +5000, the newer venue instant',
  );
  t.equal(Number(rows[2].recv) - S, 1005, 'of equal books, the first recorder by name gives the row');
  t.equal(entry!.rows, 6);
  t.same(entry!.markets?.m1?.slice(0, 3), [6, S, S + 5000], 'the manifest entry spans the merged rows');

  const found = await disagreements(duck, inputs('books'));
  t.same(
    found,
    [{ market_id: 'm1', token_id: 'm1-0', ts: S + 3000, next_ts: S + 4000, recorders: ['rec-a', 'rec-b'] }],
    'only the books of one venue instant that differ',
  );

  const tradeEntry = await mergeRows(duck, out, trades, inputs('trades'), 'trades.parquet', { sources: ['x'], writtenAt: 5 });
  const tradeRows = await duck.rows(
    `SELECT epoch_ms(ts)::DOUBLE - ${S} AS at, size, recorders FROM read_parquet(${sqlPath(path.join(out, partitionDir(trades), 'trades.parquet'))}) ORDER BY ts, size`,
  );
  t.equal(tradeEntry!.rows, 4);
  t.same(
    tradeRows.map((r) => [Number(r.at), r.size, r.recorders]),
    [
      [10, 7, ['rec-a', 'rec-b']],
      [10, 7, ['rec-a', 'rec-b']],
      [500, 1, ['rec-a']],
      [900, 2, ['rec-b']],
    ],
    'identical fills stay two; each recorder-only trade is kept',
  );

  // Any merger of the same inputs writes the same bytes, in either order of the inputs.
  const again = testdir(t);
  const reversed = await mergeRows(duck, again, books, inputs('books').reverse(), 'merged.parquet', { sources: ['x'], writtenAt: 5 });
  const sha = async (f: string) =>
    createHash('sha256')
      .update(await fs.readFile(f))
      .digest('hex');
  t.equal(reversed!.sha256, entry!.sha256, 'sha256-equal files');
  t.equal(await sha(path.join(again, partitionDir(books), 'merged.parquet')), await sha(file));
});

t.test("a recorder's books inside its own gap are left out where another vouches for the span, kept where none does", async (t) => {
  const S = HOUR0 + 60_000;
  const end = HOUR0 + HOUR;
  // A's copy missed a change after +1000: its books at +2000 and +3000 are wrong, and its gap
  // (found at the resync, +4000) reaches back over them. B saw the change at +2500 and has no book
  // at +2000 or +3000, so no instant is disputed: without the gap's claim A's books would stand.
  const stale = (ts: number, size: number) => book(ts, 0, size);
  const a = await recorderLake(t, {
    books: [book(S, 0, 1), book(S + 1000, 0, 3), stale(S + 2000, 99), stale(S + 3000, 98), book(S + 4000, 0, 5)],
    trades: [],
    gaps: [gap(S + 1000, S + 4000, 'stream_unproved')],
  });
  const b = await recorderLake(t, {
    books: [book(S, 0, 1), book(S + 1000, 0, 3), book(S + 2500, 0, 4), book(S + 4000, 0, 5)],
    trades: [],
    gaps: [],
  });
  const duck = await Duck.open(1);
  t.teardown(() => duck.close());
  const inputs = [
    { recorder: 'a', files: a.books },
    { recorder: 'b', files: b.books },
  ];
  const claimsOf = (bHorizon: number): RecorderClaims[] => {
    const own = [gap(S + 1000, S + 4000, 'stream_unproved')];
    return [
      { recorder: 'a', own, near: own, first: new Map([['m1', S]]), horizon: 2 * end },
      { recorder: 'b', own: [], near: [], first: new Map([['m1', S]]), horizon: bHorizon },
    ];
  };
  const merged = async (claims: RecorderClaims[]) => {
    const out = testdir(t);
    const doubted = await stageDoubts(out, doubtedSpans(claims));
    await mergeRows(duck, out, books, inputs, 'm.parquet', { sources: ['x'], writtenAt: 1, doubted });
    const rows = await duck.rows(
      `SELECT epoch_ms(ts)::DOUBLE AS ts, bid_sizes[1] AS size, recorders FROM read_parquet(${sqlPath(path.join(out, partitionDir(books), 'm.parquet'))}) ORDER BY ts`,
    );
    return {
      rows: rows.map((r) => [Number(r.ts) - S, r.size, r.recorders]),
      gaps: mergeGaps(claims, await disagreements(duck, inputs, doubted), end).map((g) => [g.from_ts - S, g.to_ts - S, g.recorders]),
    };
  };

  // B vouches for all of A's gap: A's books inside it go, the gap goes, B's books are the record.
  t.same(doubtedSpans(claimsOf(2 * end)), [{ recorder: 'a', market_id: 'm1', after_ms: S + 1000, before_ms: S + 4000 }]);
  t.same(await merged(claimsOf(2 * end)), {
    rows: [
      [0, 1, ['a', 'b']],
      [1000, 3, ['a', 'b']],
      [2500, 4, ['b']],
      [4000, 5, ['a', 'b']],
    ],
    gaps: [],
  });

  // B vouches only up to +2200 (its horizon): A's book at +2000 goes; the rest of A's gap stays,
  // with A's book at +3000 inside it, as with no other recorder.
  t.same(await merged(claimsOf(S + 2200)), {
    rows: [
      [0, 1, ['a', 'b']],
      [1000, 3, ['a', 'b']],
      [2500, 4, ['b']],
      [3000, 98, ['a']],
      [4000, 5, ['a', 'b']],
    ],
    gaps: [[2200, 4000, ['a']]],
  });

  // No doubts staged (no other recorder vouches): every book as before.
  t.same(doubtedSpans(claimsOf(S)), []);
  t.equal(await stageDoubts(testdir(t), []), null);
});

t.test("a recorder's gap that starts at the book its copy found wrong: that book goes where another vouches", async (t) => {
  const S = HOUR0 + 60_000;
  const end = HOUR0 + HOUR;
  // Seen under load in the faults-on run: A's resync gap began at A's own wrong book (its hash a
  // mismatch); B vouched for the instant, so the merge dropped the gap but kept the book, wrong, in no gap.
  const own = [gap(S + 1000, S + 4000, 'stream_resync')];
  const a = await recorderLake(t, { books: [book(S, 0, 1), book(S + 1000, 0, 99), book(S + 4000, 0, 5)], trades: [], gaps: own });
  const b = await recorderLake(t, { books: [book(S, 0, 1), book(S + 4000, 0, 5)], trades: [], gaps: [] });
  const duck = await Duck.open(1);
  t.teardown(() => duck.close());
  const inputs = [
    { recorder: 'a', files: a.books },
    { recorder: 'b', files: b.books },
  ];
  const claims: RecorderClaims[] = [
    { recorder: 'a', own, near: own, first: new Map([['m1', S]]), horizon: 2 * end },
    { recorder: 'b', own: [], near: [], first: new Map([['m1', S]]), horizon: 2 * end },
  ];
  const out = testdir(t);
  const doubted = await stageDoubts(out, doubtedSpans(claims));
  await mergeRows(duck, out, books, inputs, 'm.parquet', { sources: ['x'], writtenAt: 1, doubted });
  const rows = await duck.rows(
    `SELECT epoch_ms(ts)::DOUBLE AS ts, bid_sizes[1] AS size FROM read_parquet(${sqlPath(path.join(out, partitionDir(books), 'm.parquet'))}) ORDER BY ts`,
  );
  t.same(
    rows.map((r) => [Number(r.ts) - S, r.size]),
    [
      [0, 1],
      [4000, 5],
    ],
    "A's wrong book at its gap's start is not in the record",
  );
  t.same(mergeGaps(claims, await disagreements(duck, inputs, doubted), end), [], 'and no gap: B was whole there');
});

t.test('a gap survives only where no other recorder vouches for the span', async (t) => {
  const S = HOUR0 + 60_000;
  const claims = (recorder: string, own: GapRow[], first: number | null, horizon: number): RecorderClaims => ({
    recorder,
    own,
    near: own,
    first: new Map(first === null ? [] : [['m1', first]]),
    horizon,
  });
  const end = HOUR0 + HOUR;
  // A was down for 60 s while B recorded: no gap.
  t.same(mergeGaps([claims('a', [gap(S + 10_000, S + 70_000)], S, 2 * end), claims('b', [], S, 2 * end)], [], end), []);
  // B started 30 s into A's downtime: the first 30 s stay A's gap.
  t.same(
    mergeGaps([claims('a', [gap(S + 10_000, S + 70_000)], S, 2 * end), claims('b', [], S + 40_000, 2 * end)], [], end).map((g) => [
      g.from_ts - S,
      g.to_ts - S,
      g.recorders,
    ]),
    [[10_000, 40_000, ['a']]],
  );
  // Both down over part of it: that span is a gap with each recorder's reason.
  const both = mergeGaps(
    [claims('a', [gap(S + 10_000, S + 70_000)], S, 2 * end), claims('b', [gap(S + 50_000, S + 90_000, 'stream_stalled')], S, 2 * end)],
    [],
    end,
  );
  t.same(
    both.map((g) => [g.from_ts - S, g.to_ts - S, g.reason, g.recorders]),
    [
      [50_000, 70_000, 'process_down', ['a']],
      [50_000, 70_000, 'stream_stalled', ['b']],
    ],
  );
  // B vouches for nothing past its horizon (still down, its downtime not yet a gap), nor for a market it never recorded.
  t.same(
    mergeGaps([claims('a', [gap(S + 10_000, S + 70_000)], S, 2 * end), claims('b', [], S, S + 30_000)], [], end).map((g) => [
      g.from_ts - S,
      g.to_ts - S,
    ]),
    [[30_000, 70_000]],
  );
  t.same(
    mergeGaps([claims('a', [gap(S, S + 1000)], S, 2 * end), claims('b', [], null, 2 * end)], [], end).map((g) => g.to_ts - g.from_ts),
    [1000],
  );
  // The same series gap from both recorders is one row naming both.
  const series: GapRow = { market_id: null, dataset: 'markets', from_ts: S, to_ts: S + 5000, reason: 'timeout', detail: null, failures: 2 };
  t.same(
    mergeGaps([claims('a', [series], S, 2 * end), claims('b', [series], S, 2 * end)], [], end).map((g) => g.recorders),
    [['a', 'b']],
  );
  // A disagreement is a gap from just before its instant (whose book is left out) until the next book.
  t.same(
    mergeGaps(
      [claims('a', [], S, 2 * end)],
      [{ market_id: 'm1', token_id: 'm1-0', ts: S, next_ts: S + 10, recorders: ['a', 'b'] }],
      end,
    ).map((g) => [g.reason, g.from_ts, g.to_ts, g.recorders]),
    [['recorders_disagree', S - 1, S + 10, ['a', 'b']]],
  );
  // Disagreements one after another (a copy that missed a change, until it resyncs) are one gap; a
  // later one after an agreed book, and another outcome's, are gaps of their own.
  const chain = (ts: number, next: number | null, token = 'm1-0') => ({
    market_id: 'm1',
    token_id: token,
    ts,
    next_ts: next,
    recorders: ['a', 'b'],
  });
  t.same(
    mergeGaps(
      [claims('a', [], S, 2 * end)],
      [chain(S, S + 10), chain(S + 10, S + 25), chain(S + 25, S + 40), chain(S + 60, null), chain(S + 10, S + 20, 'm1-1')],
      end,
    ).map((g) => [g.from_ts - S, g.to_ts - S, g.failures, g.detail]),
    [
      [-1, 40, 3, 'token m1-0: a, b kept different books at 3 instants in a row'],
      [9, 20, 1, 'token m1-1: a, b kept different books at this instant'],
      [59, end - S, 1, 'token m1-0: a, b kept different books at this instant'],
    ],
  );

  // Written and read back: the merged gaps file holds them, with who recorded each.
  const duck = await Duck.open(1);
  t.teardown(() => duck.close());
  const out = testdir(t);
  const bothClaims = [
    claims('a', [gap(S + 10_000, S + 70_000)], S, 2 * end),
    claims('b', [gap(S + 50_000, S + 90_000, 'stream_stalled')], null, end),
  ];
  const entry = await writeGaps(duck, out, gaps, both, 'gaps.parquet', {
    sources: ['x'],
    writtenAt: 1,
    claims: recorderClaims(bothClaims),
  });
  t.equal(entry.rows, 2);
  // Each recorder's claim as the entry keeps it: every market either saw, its own first book and gaps.
  t.same(entry.recorders, {
    a: { horizon: 2 * end, markets: { m1: { first: S, gaps: [[S + 10_000, S + 70_000, 'process_down']] } } },
    b: { horizon: end, markets: { m1: { first: null, gaps: [[S + 50_000, S + 90_000, 'stream_stalled']] } } },
  });
  // No gap left: a file of no rows, so the claims are kept all the same.
  const none = await writeGaps(duck, out, gaps, [], 'none.parquet', { sources: ['x'], writtenAt: 1, claims: recorderClaims(bothClaims) });
  t.equal(none.rows, 0);
  t.same(Object.keys(none.recorders!), ['a', 'b']);
  t.same(await readGaps(duck, [path.join(out, partitionDir(gaps), 'none.parquet')]), []);
  const file = path.join(out, partitionDir(gaps), 'gaps.parquet');
  t.same(
    (await readGaps(duck, [file])).map((g) => g.reason),
    ['process_down', 'stream_stalled'],
  );
  t.same(
    (await duck.rows(`SELECT recorders FROM read_parquet(${sqlPath(file)}) ORDER BY reason`)).map((r) => r.recorders),
    [['a'], ['b']],
  );
});

t.test('a recorder holds a market whole only from its first book of every outcome: before, another’s gap stands', async (t) => {
  const S = HOUR0 + 60_000;
  // B's first rows hold the Down book alone (its Up snapshot came 20 s later), then both.
  const rows = [
    ...[0, 5000, 10_000, 15_000].map((d) => book(S + d, 1, d)),
    ...[20_000, 25_000].flatMap((d) => [book(S + d, 0, d), book(S + d, 1, d)]),
  ];
  const dir = testdir(t);
  const spool = new Spool(lakePaths(dir).spool);
  spool.append(books, rows);
  await spool.close();
  const duck = await Duck.open(1);
  t.teardown(() => duck.close());
  await sealDue(duck, lakePaths(dir), HOUR0 + 2 * HOUR, () => 0);
  const files = (await readManifest(lakePaths(dir).manifest, books)).files;
  t.same(files[0].markets?.m1?.[5], [S + 20_000, S], 'the manifest gives each outcome’s first book');
  t.same([...wholeFrom(files)], [['m1', S + 20_000]], 'whole from the Up book’s first');
  t.same(
    [...wholeFrom([{ markets: { m1: [2, S + 1000, S + 2000, 2, 0] } }, { markets: { m1: [1, S + 500, S + 500, 1, 0] } }])],
    [['m1', S + 500]],
    'files sealed before outcomes were kept: the market’s first book, as before',
  );
  t.same([...wholeFrom([{ markets: { m2: [1, S, S, 1, 0, [null, S]] } }])], [], 'one outcome alone: never whole');

  // A was down over B's first 30 s: B vouches from S + 20 s only, so A's gap stands before it.
  const end = HOUR0 + HOUR;
  const claims = (recorder: string, own: GapRow[], first: Map<string, number>): RecorderClaims => ({
    recorder,
    own,
    near: own,
    first,
    horizon: 2 * end,
  });
  t.same(
    mergeGaps([claims('a', [gap(S - 1000, S + 30_000)], new Map([['m1', S - 60_000]])), claims('b', [], wholeFrom(files))], [], end).map(
      (g) => [g.from_ts - S, g.to_ts - S, g.recorders],
    ),
    [[-1000, 20_000, ['a']]],
  );
});
