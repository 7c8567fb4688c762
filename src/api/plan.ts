// Pure steps of a request: which hourly partitions it needs, and the SQL over the files the
// server found for them. Every value is bound; the only spliced text is the quoted file list.
import { HASH_CHECKS, VERIFICATIONS } from '../records.js';
import path from 'node:path';
import { type Files, bookSelect } from '../lake/sql.js';

// Partition planning is the lake's (lake/layout.ts); re-exported for the routes.
export { CAPTURE_LAG_MS, type MarketSpan, type Plan, planPartitions } from '../lake/layout.js';

export interface PageQuery {
  marketId: string;
  from: number;
  to: number;
  order: 'asc' | 'desc';
  /** Keyset: the last timestamp of the previous page. */
  after: number | null;
  /** Capture times the page shows; statements read one more, whose presence says a next page exists. */
  limit: number;
  intervalMs: number | null;
  outcomeIndex: number | null;
}

function filtered(source: string, q: PageQuery, extra = ''): string {
  return (
    `SELECT * FROM (${source}) WHERE market_id = $market_id AND ts >= epoch_ms($from::BIGINT) AND ts < epoch_ms($to::BIGINT)` +
    `${q.outcomeIndex === null ? '' : ' AND outcome_index = $outcome_index::INTEGER'}${extra}`
  );
}

function pageOfTimes(q: PageQuery): string {
  const times =
    q.intervalMs === null
      ? 'SELECT DISTINCT ts FROM rows'
      : 'SELECT max(ts) AS ts FROM rows GROUP BY floor(epoch_ms(ts) / $interval::BIGINT)';
  const cmp = q.order === 'asc' ? '>' : '<';
  const after = q.after === null ? '' : `WHERE ts ${cmp} epoch_ms($after::BIGINT)`;
  return `times AS (${times}), page AS (SELECT ts FROM times ${after} ORDER BY ts ${q.order.toUpperCase()} LIMIT $limit::BIGINT)`;
}

function binds(q: PageQuery): Record<string, string | number> {
  const p: Record<string, string | number> = { market_id: q.marketId, from: q.from, to: q.to };
  // One time more than the page shows: its presence says a next page exists.
  if (q.limit > 0) p.limit = q.limit + 1;
  if (q.outcomeIndex !== null) p.outcome_index = q.outcomeIndex;
  if (q.intervalMs !== null) p.interval = q.intervalMs;
  if (q.after !== null) p.after = q.after;
  return p;
}

/**
 * With `interval`, snapshots take two statements: a narrow scan (timestamps only) picks the
 * page's capture times, downsampled in SQL, then the wide ladders are read for exactly those
 * times, bounded by constants so row-group statistics prune everything else.
 */
export function snapshotTimesSql(narrow: string, q: PageQuery): { sql: string; params: Record<string, string | number> } {
  const sql = `WITH rows AS (${filtered(narrow, q)}), ${pageOfTimes(q)}
    SELECT epoch_ms(ts)::DOUBLE AS ts FROM page ORDER BY ts ${q.order.toUpperCase()}`;
  return { sql, params: binds(q) };
}

/**
 * A page without `interval` in one statement: the rows of the first `rows` (time, outcome)
 * pairs after the keyset. A page is `limit` capture times, not rows, so the caller asks for
 * (limit + 1) x outcomes rows and asks again for more only if some time had more rows than
 * outcomes. One statement instead of two saved a bind and a scan (about 2 ms).
 */
export function snapshotPageSql(wide: string, q: PageQuery, rows: number): { sql: string; params: Record<string, string | number> } {
  const cmp = q.order === 'asc' ? '>' : '<';
  const after = q.after === null ? '' : ` AND ts ${cmp} epoch_ms($after::BIGINT)`;
  const sql = `SELECT ${bookSelect()}
    FROM (${filtered(wide, q, after)}) ORDER BY ts ${q.order.toUpperCase()}, outcome_index LIMIT $rows::BIGINT`;
  const params: Record<string, string | number> = { market_id: q.marketId, from: q.from, to: q.to, rows };
  if (q.outcomeIndex !== null) params.outcome_index = q.outcomeIndex;
  if (q.after !== null) params.after = q.after;
  return { sql, params };
}

/** How many books each outcome of a market recorded in [from, to): where a page's sequence numbers go on from. */
export function bookCountsSql(
  narrow: string,
  marketId: string,
  from: number,
  to: number,
): { sql: string; params: Record<string, string | number> } {
  const sql = `SELECT outcome_index, count(*)::BIGINT AS books
    FROM (${narrow}) WHERE market_id = $market_id AND ts >= epoch_ms($from::BIGINT) AND ts < epoch_ms($to::BIGINT) GROUP BY outcome_index`;
  return { sql, params: { market_id: marketId, from, to } };
}

/** Every book of one market in its span, in (time, outcome) order: what the book cache decodes once. */
export function marketBooksSql(
  wide: string,
  marketId: string,
  from: number,
  to: number,
): { sql: string; params: Record<string, string | number> } {
  const sql = `SELECT ${bookSelect()}
    FROM (${wide}) WHERE market_id = $market_id AND ts >= epoch_ms($from::BIGINT) AND ts < epoch_ms($to::BIGINT) ORDER BY ts, outcome_index`;
  return { sql, params: { market_id: marketId, from, to } };
}

const ISO = `'%Y-%m-%dT%H:%M:%S.%gZ'`;

/**
 * The books at the page's times. When the page is every capture time between its first and
 * last, the bounds alone select it; with `interval` the chosen times are listed.
 * No ORDER BY: sorting rows that carry four lists cost as much as reading them, so shape.ts
 * orders the (at most a few hundred) rows by (ts, outcome_index) itself.
 */
export function snapshotBooksSql(wide: string, q: PageQuery, times: number[]): { sql: string; params: Record<string, string | number> } {
  const chosen = q.intervalMs === null ? '' : ` AND list_contains(string_split($times, ',')::BIGINT[], epoch_ms(ts))`;
  const sql =
    `SELECT ${bookSelect()}
    FROM (${wide}) WHERE market_id = $market_id AND ts >= epoch_ms($lo::BIGINT) AND ts <= epoch_ms($hi::BIGINT)${chosen}` +
    `${q.outcomeIndex === null ? '' : ' AND outcome_index = $outcome_index::INTEGER'}`;
  const params: Record<string, string | number> = { market_id: q.marketId, lo: Math.min(...times), hi: Math.max(...times) };
  if (q.intervalMs !== null) params.times = times.join(',');
  if (q.outcomeIndex !== null) params.outcome_index = q.outcomeIndex;
  return { sql, params };
}

export const METRIC_COLUMNS = { chance: 'chance', price: 'price', last_trade: 'last_trade' } as const;

/**
 * A page of one metric of one outcome, in one scan; samples without a value are not samples.
 * With `interval`, each bucket's newest sample (downsampled in SQL, the keyset applied to the
 * buckets). Without it, the first `rows` samples after the keyset: the caller asks again for
 * more only when a capture time repeats (the page must hold every sample of its last time).
 */
export function timeseriesSql(
  source: string,
  q: PageQuery,
  metric: keyof typeof METRIC_COLUMNS,
  rows: number,
): { sql: string; params: Record<string, string | number> } {
  const column = `"${METRIC_COLUMNS[metric]}"`;
  const cmp = q.order === 'asc' ? '>' : '<';
  const after = q.after === null ? '' : ` AND ts ${cmp} epoch_ms($after::BIGINT)`;
  const samples =
    q.intervalMs === null
      ? `SELECT ts, ${column} AS value FROM (${filtered(source, q, ` AND ${column} IS NOT NULL${after}`)})`
      : `SELECT * FROM (SELECT max(ts) AS ts, arg_max(${column}, ts) AS value FROM (${filtered(source, q, ` AND ${column} IS NOT NULL`)})
        GROUP BY floor(epoch_ms(ts) / $interval::BIGINT)) WHERE true${after}`;
  const sql = `SELECT epoch_ms(ts)::DOUBLE AS ts, value FROM (${samples}) ORDER BY ts ${q.order.toUpperCase()} LIMIT $rows::BIGINT`;
  const { limit: _, ...params } = binds(q);
  return { sql, params: { ...params, rows } };
}

/** A trade's columns as a page reads them: times as epoch ms, the rest as stored. */
export const TRADE_COLUMNS = [
  'ts',
  'market_id',
  'outcome_index',
  'outcome',
  'token_id',
  'price',
  'size',
  'side',
  'fee_rate_bps',
  'transaction_hash',
  'source',
  'exchange_ts',
  'recv_ts',
] as const;
const TRADE_TIMES: ReadonlySet<string> = new Set(['ts', 'exchange_ts', 'recv_ts']);

/**
 * The first `rows` trades after the keyset, in an order that is total within a time (several
 * trades may share one): the caller asks again for more only when a time repeats, since a page
 * holds every trade of its last time and the cursor is that time.
 */
export function tradesSql(source: string, q: PageQuery, rows: number): { sql: string; params: Record<string, string | number> } {
  const cmp = q.order === 'asc' ? '>' : '<';
  const after = q.after === null ? '' : ` AND ts ${cmp} epoch_ms($after::BIGINT)`;
  const dir = q.order.toUpperCase();
  const select = TRADE_COLUMNS.map((c) => (TRADE_TIMES.has(c) ? `epoch_ms(${c})::DOUBLE AS ${c}` : c)).join(', ');
  const sql = `SELECT ${select} FROM (${filtered(source, q, after)})
    ORDER BY ts ${dir}, outcome_index, recv_ts, transaction_hash NULLS FIRST, price, size NULLS FIRST LIMIT $rows::BIGINT`;
  const { limit: _, ...params } = binds(q);
  return { sql, params: { ...params, rows } };
}

export interface CertificateParams extends Record<string, string | number> {
  market_id: string;
  start: number;
  end: number;
  /** Rows up to the window's end plus capture's lag. */
  recorded_until: number;
}

/**
 * A market's first book (pre-open ones included), the instant from which every one of its
 * `outcomes` has a book (`whole`: before it one outcome's book was not known, so the record vouches
 * for nothing of the market; null while an outcome has none), its books in the window, those by what vouched
 * for them (`verified_by`, each label bound; `unknown`: null) and by what the venue's hash said
 * (`hash_check`, as `hash_<check>`; `hash_none`: null), and their receive-less-exchange
 * time quantiles: one scan.
 */
export function certificateBooksSql(source: string, params: CertificateParams, outcomes: number) {
  const inWindow = 'ts >= epoch_ms($start::BIGINT) AND ts < epoch_ms($end::BIGINT)';
  const offset = 'epoch_ms(recv_ts) - epoch_ms(exchange_ts)';
  const timed = `exchange_ts IS NOT NULL AND ${inWindow}`;
  const labels = Object.fromEntries(VERIFICATIONS.map((v, i) => [`label${i}`, v]));
  const byLabel = VERIFICATIONS.map((v, i) => `(count(*) FILTER (WHERE ${inWindow} AND verified_by = $label${i}))::DOUBLE AS "${v}"`);
  const checks = Object.fromEntries(HASH_CHECKS.map((v, i) => [`check${i}`, v]));
  const byCheck = HASH_CHECKS.map((v, i) => `(count(*) FILTER (WHERE ${inWindow} AND hash_check = $check${i}))::DOUBLE AS "hash_${v}"`);
  return {
    sql: `SELECT epoch_ms(min(ts))::DOUBLE AS first,
      (SELECT CASE WHEN count(*) >= $outcomes THEN epoch_ms(max(f))::DOUBLE END FROM (SELECT min(ts) AS f FROM (${source})
        WHERE market_id = $market_id AND ts < epoch_ms($recorded_until::BIGINT) GROUP BY outcome_index)) AS whole,
      (count(*) FILTER (WHERE ${inWindow}))::DOUBLE AS books,
      ${byLabel.join(', ')}, (count(*) FILTER (WHERE ${inWindow} AND verified_by IS NULL))::DOUBLE AS unknown,
      ${byCheck.join(', ')}, (count(*) FILTER (WHERE ${inWindow} AND hash_check IS NULL))::DOUBLE AS hash_none,
      quantile_cont(${offset}, 0.5) FILTER (WHERE ${timed})::DOUBLE AS p50,
      quantile_cont(${offset}, 0.99) FILTER (WHERE ${timed})::DOUBLE AS p99
      FROM (${source}) WHERE market_id = $market_id AND ts < epoch_ms($recorded_until::BIGINT)`,
    params: { ...params, ...labels, ...checks, outcomes },
  };
}

/** A market's trades in its window, counted by source. */
export function certificateTradesSql(source: string, { recorded_until: _, ...params }: CertificateParams) {
  return {
    sql: `SELECT source, count(*)::DOUBLE AS n FROM (${source})
      WHERE market_id = $market_id AND ts >= epoch_ms($start::BIGINT) AND ts < epoch_ms($end::BIGINT) GROUP BY source ORDER BY source`,
    params,
  };
}

/** The newest book of every market in `source`: what a restarted API keeps in memory for recent markets. */
export function newestBooksSql(source: string): string {
  return `WITH rows AS (${source}), newest AS (SELECT market_id, max(ts) AS ts FROM rows GROUP BY market_id)
    SELECT r.market_id, ${bookSelect('r')} FROM rows r JOIN newest USING (market_id, ts) ORDER BY r.market_id, r.outcome_index`;
}

export function latestSql(source: string): string {
  return `WITH rows AS (SELECT * FROM (${source}) WHERE market_id = $market_id),
    newest AS (SELECT max(ts) AS ts FROM rows)
    SELECT ${bookSelect('r')} FROM rows r JOIN newest USING (ts) ORDER BY r.outcome_index`;
}

/**
 * Whether a plain scan of `files` gives each market's rows in time order: hours are planned in
 * order and every sealed file is sorted, but two files of one hour (a busy hour sealed a stretch
 * at a time while it was written) or spool parts (a late row starts a part of its own) may interleave.
 */
export function scansInOrder(files: Files): boolean {
  const hours = files.sealed.map((f) => path.dirname(f));
  return files.spool.length === 0 && new Set(hours).size === hours.length;
}

/**
 * The whole range as rows for a file: CSV with ISO times and ladders as JSON arrays in cells,
 * Parquet with the lake's own column types. The same filters and interval as the JSON pages.
 */
export function exportSql(
  source: string,
  q: PageQuery,
  kind: 'snapshots' | 'timeseries' | 'trades',
  format: 'csv' | 'parquet',
  inOrder: boolean,
  metric?: keyof typeof METRIC_COLUMNS,
): { sql: string; params: Record<string, string | number> } {
  const extra = kind === 'timeseries' ? ` AND "${METRIC_COLUMNS[metric!]}" IS NOT NULL` : '';
  const times =
    q.intervalMs === null
      ? 'SELECT DISTINCT ts FROM rows'
      : 'SELECT max(ts) AS ts FROM rows GROUP BY floor(epoch_ms(ts) / $interval::BIGINT)';
  const t = (c: string) =>
    format === 'csv'
      ? `strftime(${c}, ${ISO}) AS ${c === 'ts' ? 'timestamp' : c === 'exchange_ts' ? 'exchange_time' : c === 'recv_ts' ? 'recv_time' : c}`
      : c;
  const columns =
    kind === 'trades'
      ? TRADE_COLUMNS.map((c) => (TRADE_TIMES.has(c) ? t(c) : c))
      : kind === 'snapshots'
        ? [
            t('ts'),
            'market_id',
            'outcome_index',
            'outcome',
            'token_id',
            t('exchange_ts'),
            t('recv_ts'),
            'bid_prices',
            'bid_sizes',
            'ask_prices',
            'ask_sizes',
          ]
        : [
            t('ts'),
            'market_id',
            'outcome_index',
            format === 'csv' ? `"${METRIC_COLUMNS[metric!]}" AS value` : `"${METRIC_COLUMNS[metric!]}"`,
          ];
  const cast = format === 'csv' ? columns.map((c) => (/_prices$|_sizes$/.test(c) ? `${c}::VARCHAR AS ${c}` : c)) : columns;
  // DuckDB keeps scan order without ORDER BY: an ascending export of every record of files
  // that scan in order (scansInOrder) streams without a sort. Others sort (spilling past memory_limit).
  const sql =
    inOrder && q.order === 'asc' && q.intervalMs === null
      ? `WITH rows AS (${filtered(source, q, extra)}) SELECT ${cast.join(', ')} FROM rows`
      : `WITH rows AS (${filtered(source, q, extra)}), times AS (${times})
    SELECT ${cast.join(', ')} FROM rows JOIN times USING (ts) ORDER BY ts ${q.order.toUpperCase()}, outcome_index`;
  const { limit: _l, after: _a, ...rest } = q;
  return { sql, params: binds({ ...rest, limit: 0, after: null }) };
}

/** A page of one coin's reference prices from one source, within [from, to). */
export interface ReferenceQuery {
  source: string;
  from: number;
  to: number;
  order: 'asc' | 'desc';
  /** The cursor's time: the page starts after it (before it, descending). */
  after: number | null;
}

/** Observations as the reference route selects them, in this order. */
export const REFERENCE_COLUMNS = ['ts', 'symbol', 'price', 'sent_ts', 'recv_ts'] as const;

export function referenceSql(relation: string, q: ReferenceQuery, rows: number): { sql: string; params: Record<string, string | number> } {
  const cmp = q.order === 'asc' ? '>' : '<';
  const after = q.after === null ? '' : ` AND ts ${cmp} epoch_ms($after::BIGINT)`;
  const select = REFERENCE_COLUMNS.map((c) => (c.endsWith('ts') ? `epoch_ms(${c})::DOUBLE AS ${c}` : c)).join(', ');
  const sql = `SELECT ${select} FROM (${relation})
    WHERE source = $source AND ts >= epoch_ms($from::BIGINT) AND ts < epoch_ms($to::BIGINT)${after}
    ORDER BY ts ${q.order.toUpperCase()}, recv_ts LIMIT $rows::BIGINT`;
  const params: Record<string, string | number> = { source: q.source, from: q.from, to: q.to, rows };
  if (q.after !== null) params.after = q.after;
  return { sql, params };
}

/** A coin's reference prices in [from, to) as one file: CSV with ISO times, Parquet with the lake's types. */
export function referenceExportSql(relation: string, q: Omit<ReferenceQuery, 'after'>, format: 'csv' | 'parquet') {
  const time = (c: string) => (format === 'csv' ? `strftime(${c}, ${ISO}) AS ${c}` : c);
  const sql = `SELECT ${time('ts')}, source, symbol, price, ${time('sent_ts')}, ${time('recv_ts')} FROM (${relation})
    WHERE source = $source AND ts >= epoch_ms($from::BIGINT) AND ts < epoch_ms($to::BIGINT)
    ORDER BY ts ${q.order.toUpperCase()}, recv_ts`;
  return { sql, params: { source: q.source, from: q.from, to: q.to } as Record<string, string | number> };
}

/**
 * A coin's Chainlink reference as a market's timeseries signal (`metric=reference`): every
 * observation in the page's range, or the last of each interval; `rows` null for a whole export.
 */
export function referenceSamplesSql(relation: string, q: PageQuery, rows: number | null, csv = false) {
  const cmp = q.order === 'asc' ? '>' : '<';
  const after = q.after === null ? '' : ` AND ts ${cmp} epoch_ms($after::BIGINT)`;
  const inRange = `source = 'chainlink' AND ts >= epoch_ms($from::BIGINT) AND ts < epoch_ms($to::BIGINT)`;
  const samples =
    q.intervalMs === null
      ? `SELECT ts, price AS value FROM (${relation}) WHERE ${inRange}${after}`
      : `SELECT * FROM (SELECT max(ts) AS ts, arg_max(price, ts) AS value FROM (${relation}) WHERE ${inRange}
        GROUP BY floor(epoch_ms(ts) / $interval::BIGINT)) WHERE true${after}`;
  const ts = csv ? `strftime(ts, ${ISO}) AS timestamp` : rows === null ? 'ts' : 'epoch_ms(ts)::DOUBLE AS ts';
  const sql = `SELECT ${ts}, value FROM (${samples}) ORDER BY ts ${q.order.toUpperCase()}${rows === null ? '' : ' LIMIT $rows::BIGINT'}`;
  const params: Record<string, string | number> = { from: q.from, to: q.to };
  if (q.after !== null) params.after = q.after;
  if (q.intervalMs !== null) params.interval = q.intervalMs;
  if (rows !== null) params.rows = rows;
  return { sql, params };
}
