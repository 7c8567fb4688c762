// The pure steps of a request, without a server: partitions planned from a market's span and a
// range, SQL with every value bound, and cursors. The HTTP tests run the same steps end to end.
import t from 'tap';
import { Cursors } from '../src/api/cursor.js';
import { ApiError } from '../src/edge/errors.js';
import { marketJson, numbers } from '../src/api/shape.js';
import { bareMarket } from '../src/records.js';
import {
  CAPTURE_LAG_MS,
  type PageQuery,
  exportSql,
  scansInOrder,
  planPartitions,
  bookCountsSql,
  marketBooksSql,
  snapshotBooksSql,
  snapshotPageSql,
  snapshotTimesSql,
  timeseriesSql,
} from '../src/api/plan.js';
import { partitionDir } from '../src/lake/layout.js';
import { BOOK_COLUMNS, relation } from '../src/lake/sql.js';

const at = (iso: string) => Date.parse(iso);
const market = {
  venue: 'wallet-prediction' as const,
  coin: 'btc',
  window: '15m' as const,
  start_time: at('2026-07-27T23:45:00Z'),
  end_time: at('2026-07-28T00:00:00Z'),
};

t.test('planPartitions: the hours of the market span, clipped to the range', async (t) => {
  const all = planPartitions('books', market, null, null);
  t.same(
    all.partitions.map(partitionDir),
    [
      'books/venue=wallet-prediction/coin=btc/window=15m/date=2026-07-27/hour=23',
      'books/venue=wallet-prediction/coin=btc/window=15m/date=2026-07-28/hour=00',
    ],
    "a market ending on the hour reaches into the next one by the last poll's lag, across midnight",
  );
  t.same([all.from, all.to], [market.start_time, market.end_time + CAPTURE_LAG_MS]);

  const inside = planPartitions('metrics', market, at('2026-07-27T23:50:00Z'), at('2026-07-27T23:55:00Z'));
  t.same(
    inside.partitions.map((p) => [p.dataset, new Date(p.hour).toISOString()]),
    [['metrics', '2026-07-27T23:00:00.000Z']],
    'a range inside one hour plans one partition',
  );
  t.same([inside.from, inside.to], [at('2026-07-27T23:50:00Z'), at('2026-07-27T23:55:00Z')]);

  t.same(
    planPartitions('books', market, at('2026-07-28T00:01:00Z'), null).partitions,
    [],
    'a range after the market (and its lag) plans nothing',
  );
  t.same(planPartitions('books', market, null, market.start_time).partitions, [], 'the end of a range is exclusive');
  t.same(
    planPartitions('books', market, at('2020-01-01T00:00:00Z'), at('2030-01-01T00:00:00Z')).partitions.length,
    2,
    'a wide range never plans more than the market span',
  );
  const fiveMinute = { ...market, window: '5m' as const, start_time: at('2026-07-28T10:20:00Z'), end_time: at('2026-07-28T10:25:00Z') };
  t.equal(planPartitions('books', fiveMinute, null, null).partitions.length, 1, 'a market inside an hour: one partition');
});

t.test('relation: exactly the computed files, quoted; none is null', async (t) => {
  t.equal(relation('books', { sealed: [], spool: [] }, BOOK_COLUMNS), null);
  const sql = relation('books', { sealed: ["/lake/a'b/part.parquet", '/lake/c/part.parquet'], spool: ['/spool/s/000001.ndjson'] }, [
    'ts',
    'market_id',
  ])!;
  t.match(
    sql,
    /^SELECT "ts", "market_id" FROM read_parquet\(\['\/lake\/a''b\/part\.parquet', '\/lake\/c\/part\.parquet'\]\) UNION ALL SELECT "ts", "market_id" FROM \(SELECT .* FROM read_json\(\['\/spool\/s\/000001\.ndjson'\]/s,
  );
  t.notMatch(sql, /\*\*|\*\.parquet/, 'never a glob');
});

t.test('relation: files sealed before a column was added read it as NULL, only when it is selected', async (t) => {
  const files = {
    sealed: ['/lake/old.parquet', '/lake/new.parquet', '/lake/mid.parquet'],
    spool: [],
    lacking: new Map([
      ['/lake/old.parquet', ['verified_by', 'hash_check']],
      ['/lake/mid.parquet', ['hash_check']],
    ]),
  };
  t.equal(
    relation('books', files, ['ts', 'verified_by']),
    `SELECT "ts", "verified_by" FROM read_parquet(['/lake/new.parquet', '/lake/mid.parquet']) UNION ALL SELECT "ts", NULL::VARCHAR AS "verified_by" FROM read_parquet(['/lake/old.parquet'])`,
  );
  t.equal(
    relation('books', files, ['ts', 'verified_by', 'hash_check']),
    `SELECT "ts", "verified_by", "hash_check" FROM read_parquet(['/lake/new.parquet']) UNION ALL ` +
      `SELECT "ts", "verified_by", NULL::VARCHAR AS "hash_check" FROM read_parquet(['/lake/mid.parquet']) UNION ALL ` +
      `SELECT "ts", NULL::VARCHAR AS "verified_by", NULL::VARCHAR AS "hash_check" FROM read_parquet(['/lake/old.parquet'])`,
    'each file reads the columns it has',
  );
  t.equal(
    relation('books', files, ['ts', 'market_id']),
    `SELECT "ts", "market_id" FROM read_parquet(['/lake/old.parquet', '/lake/new.parquet', '/lake/mid.parquet'])`,
    'one scan, in the planned order, when no missing column is asked for',
  );
});

const hostile = "x' OR 1=1; DROP TABLE books; --";
const page = (over: Partial<PageQuery> = {}): PageQuery => ({
  marketId: hostile,
  from: market.start_time,
  to: market.end_time,
  order: 'asc',
  after: null,
  limit: 100,
  intervalMs: null,
  outcomeIndex: null,
  ...over,
});

t.test('SQL builders bind every value; user text never reaches the statement', async (t) => {
  const cases = {
    times: snapshotTimesSql('SELECT 1', page({ after: 1, outcomeIndex: 1, intervalMs: 60_000 })),
    books: snapshotBooksSql('SELECT 1', page({ outcomeIndex: 0, intervalMs: 5_000 }), [3, 1, 2]),
    series: timeseriesSql('SELECT 1', page({ order: 'desc', after: 5 }), 'chance', 101),
    downsampled: timeseriesSql('SELECT 1', page({ order: 'desc', after: 5, intervalMs: 60_000 }), 'price', 101),
    export: exportSql('SELECT 1', page(), 'snapshots', 'csv', true),
    // The statement behind most snapshot pages, and the one the book cache decodes markets with.
    page: snapshotPageSql('SELECT 1', page({ after: 7, outcomeIndex: 1 }), 202),
    pageDesc: snapshotPageSql('SELECT 1', page({ order: 'desc' }), 101),
    market: { sql: marketBooksSql('SELECT 1', hostile, 1, 2).sql, params: marketBooksSql('SELECT 1', hostile, 1, 2).params },
    // Where the changes route's sequence numbers go on from.
    counts: bookCountsSql('SELECT 1', hostile, 10, 20),
  };
  for (const [name, { sql, params }] of Object.entries(cases)) {
    t.notOk(sql.includes(hostile) || sql.includes('DROP'), `${name}: the market id is not in the SQL`);
    t.equal(params.market_id, hostile, `${name}: it is a parameter`);
    for (const name of sql.match(/\$[a-z_]+/g) ?? []) t.ok(name.slice(1) in params, `${name} is bound`);
    for (const key of Object.keys(params)) t.ok(sql.includes(`$${key}`), `${key} is used`);
  }
  t.match(cases.times.sql, /GROUP BY floor\(epoch_ms\(ts\) \/ \$interval::BIGINT\)/, 'interval downsampling happens in SQL');
  t.match(cases.times.params, { after: 1, outcome_index: 1, interval: 60_000, limit: 101 });
  t.match(cases.series.sql, /ts < epoch_ms\(\$after::BIGINT\)[\s\S]*ORDER BY ts DESC LIMIT \$rows/, 'a descending keyset');
  t.match(
    cases.downsampled.sql,
    /GROUP BY floor\(epoch_ms\(ts\) \/ \$interval::BIGINT\)\) WHERE true AND ts < epoch_ms\(\$after::BIGINT\)/,
    'the keyset applies to buckets, after downsampling',
  );
  t.match(cases.page.params, { after: 7, outcome_index: 1, rows: 202 }, 'the page: keyset, outcome and row budget bound');
  t.match(cases.page.sql, /ts > epoch_ms\(\$after::BIGINT\)[\s\S]*ORDER BY ts ASC, outcome_index LIMIT \$rows::BIGINT/);
  t.match(cases.pageDesc.sql, /ORDER BY ts DESC, outcome_index/);
  t.match(cases.counts.params, { from: 10, to: 20 }, 'the counted span is bound');
  t.match(cases.counts.sql, /ts >= epoch_ms\(\$from::BIGINT\) AND ts < epoch_ms\(\$to::BIGINT\) GROUP BY outcome_index/);
  t.same(
    [cases.books.params.lo, cases.books.params.hi, cases.books.params.times],
    [1, 3, '3,1,2'],
    "the page's bounds and, with interval, its chosen times",
  );
});

t.test('a page without interval is selected by its bounds alone', async (t) => {
  const { sql, params } = snapshotBooksSql('SELECT 1', page(), [10, 20, 30]);
  t.notMatch(sql, /list_contains|ORDER BY/, 'no time list and no sort of list columns');
  t.same(params, { market_id: hostile, lo: 10, hi: 30 });
});

t.test('an ascending full export streams in file order; others sort', async (t) => {
  t.notMatch(exportSql('SELECT 1', page(), 'snapshots', 'parquet', true).sql, /ORDER BY/);
  t.match(exportSql('SELECT 1', page(), 'snapshots', 'parquet', false).sql, /ORDER BY ts ASC, outcome_index/);
  t.match(exportSql('SELECT 1', page({ order: 'desc' }), 'snapshots', 'parquet', true).sql, /ORDER BY ts DESC, outcome_index/);
  t.match(exportSql('SELECT 1', page({ intervalMs: 1000 }), 'timeseries', 'csv', true, 'price').sql, /GROUP BY floor/);

  const hour = (h: number) => `/lake/books/venue=polymarket/coin=btc/window=5m/date=2026-07-26/hour=${h}`;
  t.ok(scansInOrder({ sealed: [`${hour(12)}/part-a.parquet`, `${hour(13)}/part-b.parquet`], spool: [] }), 'a file an hour scans in order');
  t.notOk(
    scansInOrder({ sealed: [`${hour(12)}/part-a.parquet`, `${hour(12)}/part-b.parquet`], spool: [] }),
    'two files of one hour may interleave a market',
  );
  t.notOk(scansInOrder({ sealed: [`${hour(12)}/part-a.parquet`], spool: ['/spool/s/x/000001.ndjson'] }), 'so may spool parts');
});

t.test('cursors: a keyset bound to the scope and every filter', async (t) => {
  const cursors = new Cursors(Buffer.from('k'.repeat(32)));
  const filters = { start_time: '2026-07-27', order: 'asc', outcome: undefined };
  const c = cursors.issue('wp.snapshots:1', filters, [1_785_000_000_000]);
  t.same(
    cursors.read(c, 'wp.snapshots:1', { order: 'asc', start_time: '2026-07-27' }),
    [1_785_000_000_000],
    'filter order and undefined filters do not matter',
  );
  const refused = (f: () => unknown, why: RegExp) => {
    try {
      f();
      t.fail('accepted');
    } catch (err) {
      t.ok(err instanceof ApiError && err.code === 'INVALID_CURSOR' && why.test(err.message), (err as Error).message);
    }
  };
  refused(() => cursors.read(c, 'wp.snapshots:2', filters), /another route or market/);
  refused(() => cursors.read(c, 'wp.snapshots:1', { ...filters, order: 'desc' }), /other filters/);
  refused(() => cursors.read(`${c.slice(0, 5)}A${c.slice(6)}`, 'wp.snapshots:1', filters), /altered/);
  refused(() => new Cursors(Buffer.from('another secret')).read(c, 'wp.snapshots:1', filters), /altered/);
  refused(() => cursors.read('abc', 'wp.snapshots:1', filters), /not issued/);
  refused(() => cursors.read(`${c}.x`, 'wp.snapshots:1', filters), /not issued/);
});

t.test('numbers: exactly what JSON.stringify writes', async (t) => {
  const samples = [
    0,
    -0,
    1,
    0.5,
    0.49,
    0.01,
    0.001,
    0.0001,
    0.00015,
    1e-7,
    5000,
    4999.99,
    1234567.89,
    0.1 + 0.2,
    1 / 3,
    2 ** 53,
    1e21,
    -0.5,
    -12.34,
    123456789012.3456,
    0.07,
    0.99,
    100.1,
  ];
  for (let i = 0; i < 20_000; i++) samples.push(Math.round(Math.random() * 10 ** (2 + (i % 8))) / 10 ** (i % 6), Math.random() * 1000);
  const xs = Float64Array.from(samples);
  t.equal(numbers(xs), JSON.stringify(Array.from(xs)));
  t.equal(numbers([]), '[]');
});

t.test('latest books: old ones leave memory unless read within the hour', async (t) => {
  const { LatestReads, KEEP_RECENT_MS, KEEP_READ_MS } = await import('../src/api/latest.js');
  const now = Date.parse('2026-07-28T12:00:00Z');
  const book = (ts: number) => ({ ts, books: [] });
  const latest = new Map([
    ['recent', book(now - 60_000)],
    ['old', book(now - KEEP_RECENT_MS - 1)],
    ['old-read', book(now - 2 * KEEP_RECENT_MS)],
  ]);
  const reads = new LatestReads();
  reads.read('old-read', now - KEEP_READ_MS + 1000);
  t.equal(reads.prune(latest, now), 1);
  t.same([...latest.keys()], ['recent', 'old-read'], 'a recent capture and a recently read one stay');
  t.equal(reads.prune(latest, now + 2000), 1, 'once nobody has read it for an hour, it goes too');
  t.same([...latest.keys()], ['recent']);
});

t.test('the typed query has a field for every query parameter the specs declare, and no other', async (t) => {
  const { P } = await import('../src/api/params.js');
  const { QUERY_FIELDS } = await import('../src/api/route.js');
  const declared = [
    ...new Set(
      Object.values(P)
        .filter((p) => p.in === 'query')
        .map((p) => p.name),
    ),
  ].sort();
  t.same([...QUERY_FIELDS].sort(), declared);
});

t.test('a market record says how long after its window the venue resolved it', async (t) => {
  const span = { market_id: '9', venue: 'polymarket', coin: 'btc', window: '5m', start_time: 0, end_time: 300_000, outcomes: [] } as const;
  const open = marketJson({ ...bareMarket({ ...span, status: 'open', outcomes: [] }) } as never);
  t.equal(open.resolution_latency_seconds, null, 'null until it resolves');
  const resolved = marketJson({ ...bareMarket({ ...span, status: 'resolved', outcomes: [] }), resolved_time: 312_500 } as never);
  t.equal(resolved.resolved_time, '1970-01-01T00:05:12.500Z');
  t.equal(resolved.resolution_latency_seconds, 12.5, 'the venue resolved it 12.5 s after the window ended');
});
