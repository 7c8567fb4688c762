// The route table: every route once, with its parameters, its access and its handler. The
// server, the validators and the OpenAPI document are all built from this list.
import type { Venue } from '../config.js';
import { coverageStart } from '../coverage.js';
import { randomUUID } from 'node:crypto';
import type { Readable } from 'node:stream';
import type { DuckDBDataChunk } from '@duckdb/node-api';
import fs from 'node:fs/promises';
import path from 'node:path';
import { COVERAGE } from '../coverage.js';
import type { LakeReader, StoredMarket } from '../lake/reader.js';
import type { LatestBook } from '../records.js';
import type { BookCache } from './bookcache.js';
import type { ExportPool } from './exports.js';
import type { LatestReads } from './latest.js';
import type { Cursors, Keyset } from './cursor.js';
import { echo, fail } from './errors.js';
import type { KeyRecord } from './keys.js';
import { singleFlight } from './singleflight.js';
import { INTERVALS, P, type ParamSpec, type Parsed, timeRange } from './params.js';
import { parseTime } from '../time.js';
import {
  CAPTURE_LAG_MS,
  marketBooksSql,
  type PageQuery,
  exportSql,
  latestSql,
  planPartitions,
  snapshotBooksSql,
  snapshotPageSql,
  snapshotTimesSql,
  timeseriesSql,
} from './plan.js';
import { type MarketBooks, bookJson, iso, marketBooks, marketJson, pageFromBooks, rowBook, snapshotsJson } from './shape.js';
import { BOOK_COLUMNS, EXPORT_BOOK_COLUMNS, TIME_COLUMNS, emptyRelation, relation, sqlPath } from '../lake/sql.js';

export type Access = 'public' | 'key' | 'paid';

export interface RequestContext {
  query: Parsed;
  path: Parsed;
  key: KeyRecord | null;
  now: number;
  /** For the request log line: partitions planned and rows read. */
  stats: { partitions: number; rows: number };
  /** Fires when the client leaves: its statements stop. */
  signal: AbortSignal;
}

/** Data already serialized (by DuckDB), spliced into the envelope as it is. */
export class RawJson {
  constructor(readonly text: string | Buffer) {}
}

/** A file to send: a sealed lake file (ETag, If-None-Match, Range) or an export being written. */
export type FileBody = { filename: string; contentType: string } & (
  { absolute: string; sha256: string } | { stream: Readable; rows: Promise<number> }
);

export interface Result {
  data: unknown;
  pagination?: { limit: number; has_more: boolean; next_cursor: string | null };
  meta?: Record<string, unknown>;
  /** A body without the envelope (the OpenAPI document). */
  raw?: boolean;
  file?: FileBody;
  /** A status other than 200 for a body that is not an error (health when a component fails). */
  status?: number;
}

export interface Route {
  id: string;
  path: string;
  access: Access;
  summary: string;
  params: ParamSpec[];
  /** Name of the response schema in the OpenAPI document. */
  response: string;
  list: boolean;
  /** Reads the lake: admitted under the global in-flight limit (load shedding). */
  heavy?: boolean;
  handle(ctx: RequestContext): Promise<Result>;
}

export interface RouteDeps {
  lake: LakeReader;
  /** Where exports are written while they are streamed. */
  exportDir: string;
  exports: ExportPool;
  /** Decoded books of recently read markets that are over. */
  books: BookCache;
  cursors: Cursors;
  /** Newest books per `<venue>:<market_id>`, kept current by capture. */
  latest: Map<string, LatestBook>;
  latestReads: LatestReads;
  rate: (plan: KeyRecord['plan']) => number;
  health: () => Promise<{ status: number; data: unknown }>;
  openapi: () => unknown;
  maxRangeMs: number;
}

const NAMESPACES = ['wallet-prediction', 'provider-alias'] as const;
const PARQUET = 'application/vnd.apache.parquet';
const TRADES_NOTICE =
  'No historical fills are stored yet: fills on the settlement chain are being reconstructed. This route will then return them.';

function page(limit: number, rows: number, key: () => Keyset, issue: (k: Keyset) => string): Result['pagination'] {
  const hasMore = rows > limit;
  return { limit, has_more: hasMore, next_cursor: hasMore ? issue(key()) : null };
}

/** The first `limit` items of an ordered list that `keep` accepts, and whether any further one does. */
function takePage<T>(items: Iterable<T>, limit: number, keep: (item: T) => boolean): { shown: T[]; more: boolean } {
  const shown: T[] = [];
  for (const item of items) {
    if (!keep(item)) continue;
    if (shown.length === limit) return { shown, more: true };
    shown.push(item);
  }
  return { shown, more: false };
}

function filtersOf(q: Parsed): Parsed {
  const { limit: _l, cursor: _c, ...rest } = q;
  return rest;
}

/** `window`, or its alias `type`; both at once must agree. */
function windowsOf(q: Parsed): string[] | undefined {
  const windows = q.window as string[] | undefined;
  const type = q.type as string[] | undefined;
  if (windows && type && windows.join(',') !== type.join(',')) {
    fail('INVALID_PARAMETER', 'Parameters "window" and "type" (its alias) disagree; give one of them', [
      { param: 'type', message: 'disagrees with window' },
    ]);
  }
  return windows ?? type;
}

function coverageMeta(dataset: string, venue: Venue, coins: readonly string[], from: number | null) {
  const starts = coins.map((c) => coverageStart(dataset, venue, c)).filter((s): s is number => s !== null);
  if (!starts.length) return undefined;
  const start = Math.min(...starts);
  return {
    dataset,
    starts: iso(start),
    truncated: from !== null && from < start,
    note: 'No history exists before this; nothing earlier is returned.',
  };
}

function resolveOutcome(m: StoredMarket, raw: unknown, fallback: number | null): number | null {
  if (raw === undefined) return fallback;
  const text = String(raw).toLowerCase();
  const found = m.outcomes.find((o) => String(o.index) === text || o.label.toLowerCase() === text);
  if (!found) {
    fail(
      'INVALID_PARAMETER',
      `Invalid "outcome": ${echo(raw)}. Expected one of: ${m.outcomes.map((o) => `${o.index} (${o.label})`).join(', ')}`,
      [{ param: 'outcome', message: 'no such outcome in this market' }],
    );
  }
  return found.index;
}

export function buildRoutes(deps: RouteDeps): Route[] {
  const { lake, cursors } = deps;

  const gapsMeta = (venue: Venue, m: StoredMarket, dataset: string, from: number, to: number) =>
    lake
      .gaps({ venue, coin: m.coin, window: m.window, market_id: m.market_id, dataset }, from, to)
      .map((g) => ({ from: iso(g.from_ts), to: iso(g.to_ts), reason: g.reason }));

  const findMarket = (venue: Venue, ctx: RequestContext, coin?: string): StoredMarket => {
    const id = String(ctx.path.market_id);
    const m = lake.market(venue, id, ctx.now);
    if (!m || (coin && m.coin !== coin))
      fail('MARKET_NOT_FOUND', `No recorded market ${echo(id)} in this namespace`, [{ param: 'market_id', message: 'not found' }]);
    return m;
  };

  const markets =
    (id: string, venue: Venue, coins: readonly string[]) =>
    async (ctx: RequestContext): Promise<Result> => {
      const q = ctx.query;
      const { from, to } = timeRange(q);
      const limit = Number(q.limit ?? 100);
      const order = (q.order as string) ?? 'desc';
      const coin = ctx.path.coin ? [String(ctx.path.coin)] : ((q.coin as string[] | undefined) ?? coins);
      const scope = `${id}:${coin.join(',')}`;
      const after = q.cursor ? cursors.read(String(q.cursor), scope, filtersOf(q)) : null;
      const windows = windowsOf(q);
      const statuses = q.status as string[] | undefined;
      const { shown, more } = takePage(lake.walk(order as 'asc' | 'desc', ctx.now), limit, (m) => {
        if (m.venue !== venue || !coin.includes(m.coin)) return false;
        if ((windows && !windows.includes(m.window)) || (statuses && !statuses.includes(m.status))) return false;
        if ((from !== null && m.end_time <= from) || (to !== null && m.start_time >= to)) return false;
        if (!after) return true;
        const [s, mid] = after as [number, string];
        return order === 'desc'
          ? m.start_time < s || (m.start_time === s && m.market_id < mid)
          : m.start_time > s || (m.start_time === s && m.market_id > mid);
      });
      ctx.stats.rows = shown.length;
      const last = shown[shown.length - 1];
      return {
        data: shown.map(marketJson),
        pagination: {
          limit,
          has_more: more,
          next_cursor: more ? cursors.issue(scope, filtersOf(q), [last.start_time, last.market_id]) : null,
        },
        meta: { coverage: coverageMeta('markets', venue, coin, from) },
      };
    };

  /**
   * The book in force at an instant: the newest recorded at or before it, with how old it was
   * then (`age_ms`) and the capture gaps between the two, which say when it may be stale.
   */
  const snapshotAt = (id: string, venue: Venue, ladderDefault: boolean) => {
    const pageOf = snapshotRoute(id, venue, ladderDefault);
    return async (ctx: RequestContext): Promise<Result> => {
      const at = parseTime(String(ctx.query.timestamp))!;
      const m = findMarket(venue, ctx, ctx.path.coin as string | undefined);
      const { timestamp: _, ...rest } = ctx.query;
      const result = await pageOf({ ...ctx, query: { ...rest, end_time: String(at + 1), order: 'desc', limit: 1 } });
      const { text } = result.data as RawJson;
      const [snapshot] = JSON.parse(typeof text === 'string' ? text : text.toString('utf8')) as { timestamp: string }[];
      const since = snapshot ? Date.parse(snapshot.timestamp) : m.start_time;
      return {
        data: snapshot ?? null,
        meta: {
          at: iso(at),
          age_ms: snapshot ? at - since : null,
          coverage: result.meta?.coverage,
          gaps: gapsMeta(venue, m, 'books', since, at + 1),
        },
      };
    };
  };

  const pageQuery = (
    ctx: RequestContext,
    m: StoredMarket,
    scope: string,
    outcomeIndex: number | null,
  ): { pq: PageQuery; from: number | null } => {
    const q = ctx.query;
    const { from, to } = timeRange(q);
    const after = q.cursor ? cursors.read(String(q.cursor), scope, filtersOf(q)) : null;
    return {
      from,
      pq: {
        marketId: m.market_id,
        from: from ?? m.start_time,
        to: to ?? m.end_time + 60_000,
        order: (q.order as 'asc' | 'desc') ?? 'asc',
        after: after ? Number(after[0]) : null,
        limit: Number(q.limit ?? 100) + 1,
        intervalMs: q.interval ? INTERVALS[String(q.interval)] : null,
        outcomeIndex,
      },
    };
  };

  /** format=csv|parquet: the whole range, unpaginated, written by DuckDB and streamed. */
  const exportFile = async (
    ctx: RequestContext,
    m: StoredMarket,
    kind: 'snapshots' | 'timeseries',
    pq: PageQuery,
    dataset: 'books' | 'metrics',
    metric?: 'chance' | 'price' | 'last_trade',
  ): Promise<Result> => {
    const format = ctx.query.format as 'csv' | 'parquet';
    for (const name of ['limit', 'cursor']) {
      if (ctx.query[name] !== undefined)
        fail('INVALID_PARAMETER', `Parameter "${name}" is not accepted with format=${format}: the whole range comes as one file`, [
          { param: name, message: 'not with csv or parquet' },
        ]);
    }
    timeRange(ctx.query, deps.maxRangeMs);
    const plan = planPartitions(dataset, m, pq.from, pq.to);
    ctx.stats.partitions = plan.partitions.length;
    const columns = dataset === 'books' ? EXPORT_BOOK_COLUMNS : ['ts', 'market_id', 'outcome_index', metric!];
    const source = relation(dataset, await lake.files(plan.partitions), columns) ?? emptyRelation(dataset, columns);
    const { sql: query, params } = exportSql(source, { ...pq, from: plan.from, to: plan.to }, kind, format, metric);
    await fs.mkdir(deps.exportDir, { recursive: true });
    const file = path.join(deps.exportDir, `${randomUUID()}.${format}`);
    // The Parquet writer holds a whole row group in memory: small ones.
    const options = format === 'csv' ? 'FORMAT csv, HEADER' : 'FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 8192';
    const { stream, rows } = await deps.exports.start(
      file,
      `COPY (${query}) TO ${sqlPath(file)} (${options}, USE_TMP_FILE false)`,
      params,
      ctx.signal,
    );
    void rows.then(
      (n) => {
        ctx.stats.rows = n;
      },
      () => undefined,
    );
    const span = `${iso(plan.from)}_${iso(plan.to)}`.replace(/[:.]/g, '');
    return {
      data: null,
      file: {
        stream,
        rows,
        filename: `${m.market_id}-${kind}${metric ? `-${metric}` : ''}-${span}.${format}`,
        contentType: format === 'csv' ? 'text/csv; charset=utf-8' : PARQUET,
      },
    };
  };

  /**
   * Decoded books of a market that is over and wholly sealed, from the cache (loaded once,
   * then kept while its files are the same); null for a market still recording, or one whose
   * rows are (partly) in the spool: those take the SQL path.
   */
  const marketBooksOf = async (venue: Venue, m: StoredMarket, now: number): Promise<MarketBooks | null> => {
    if (deps.books.maxBytes === 0 || m.end_time + CAPTURE_LAG_MS >= now) return null;
    const span = planPartitions('books', m, null, null);
    const signature = lake.signature(span.partitions);
    // Rows still in the spool (an hour not sealed yet, or written late) are read by SQL.
    if (!signature || lake.spooled(span.partitions)) return null;
    const key = `${venue}:${m.market_id}`;
    return (
      deps.books.peek(key, signature) ??
      deps.books.load(key, signature, async () => {
        const files = await lake.files(span.partitions);
        if (files.spool.length) return null;
        const wide = relation('books', files, BOOK_COLUMNS);
        return wide ? marketBooks(await lake.duck.chunks(...sql(marketBooksSql(wide, m.market_id, span.from, span.to)))) : null;
      })
    );
  };

  const snapshotRoute =
    (id: string, venue: Venue, ladderDefault: boolean) =>
    async (ctx: RequestContext): Promise<Result> => {
      const m = findMarket(venue, ctx, ctx.path.coin as string | undefined);
      const scope = `${id}:${m.market_id}`;
      const { pq, from } = pageQuery(ctx, m, scope, resolveOutcome(m, ctx.query.outcome, null));
      if (ctx.query.format && ctx.query.format !== 'json') return exportFile(ctx, m, 'snapshots', pq, 'books');
      const ladders = ctx.query.include_orderbook === undefined ? ladderDefault : ctx.query.include_orderbook === 'true';
      const plan = planPartitions('books', m, pq.from, pq.to);
      ctx.stats.partitions = plan.partitions.length;
      const limit = pq.limit - 1;
      const meta = { coverage: coverageMeta('books', venue, [m.coin], from), gaps: gapsMeta(venue, m, 'books', pq.from, pq.to) };
      const cached = await marketBooksOf(venue, m, ctx.now);
      if (cached) {
        const rendered = pageFromBooks(cached, { ...pq, from: plan.from, to: plan.to }, ladders, limit);
        ctx.stats.rows = rendered.books;
        return {
          data: new RawJson(rendered.json),
          pagination: page(
            limit,
            rendered.times,
            () => [rendered.last!],
            (k) => cursors.issue(scope, filtersOf(ctx.query), k),
          ),
          meta,
        };
      }
      const files = await lake.files(plan.partitions);
      const wide = relation('books', files, BOOK_COLUMNS);
      const bounded = { ...pq, from: plan.from, to: plan.to };
      const db = lake.duck.for(ctx.signal);
      let rendered = snapshotsJson([], ladders, pq.order, limit);
      if (wide && pq.intervalMs === null) {
        // (limit + 1) times x outcomes rows; more only when some time holds more rows than outcomes.
        for (let rows = pq.limit * (pq.outcomeIndex === null ? Math.max(m.outcomes.length, 1) : 1); ; rows *= 2) {
          const chunks = await db.chunks(...sql(snapshotPageSql(wide, bounded, rows)));
          rendered = snapshotsJson(chunks, ladders, pq.order, limit);
          if (chunks.reduce((n, c) => n + c.rowCount, 0) < rows || rendered.times > limit) break;
        }
      } else if (wide) {
        const times = (await db.rows(...sql(snapshotTimesSql(relation('books', files, TIME_COLUMNS)!, bounded)))).map((r) => Number(r.ts));
        const shown = times.slice(0, limit);
        const chunks = shown.length ? await db.chunks(...sql(snapshotBooksSql(wide, bounded, shown))) : [];
        rendered = { ...snapshotsJson(chunks, ladders, pq.order, limit), times: times.length };
      }
      ctx.stats.rows = rendered.books;
      return {
        data: new RawJson(rendered.json),
        pagination: page(
          limit,
          rendered.times,
          () => [rendered.last!],
          (k) => cursors.issue(scope, filtersOf(ctx.query), k),
        ),
        meta,
      };
    };

  const timeseriesRoute =
    (id: string, venue: Venue) =>
    async (ctx: RequestContext): Promise<Result> => {
      const m = findMarket(venue, ctx);
      const scope = `${id}:${m.market_id}`;
      const outcome = resolveOutcome(m, ctx.query.outcome, 0)!;
      const { pq, from } = pageQuery(ctx, m, scope, outcome);
      const metric = ctx.query.metric as 'chance' | 'price' | 'last_trade';
      if (ctx.query.format && ctx.query.format !== 'json') return exportFile(ctx, m, 'timeseries', pq, 'metrics', metric);
      const plan = planPartitions('metrics', m, pq.from, pq.to);
      ctx.stats.partitions = plan.partitions.length;
      const source = relation('metrics', await lake.files(plan.partitions), ['ts', 'market_id', 'outcome_index', metric]);
      const limit = pq.limit - 1;
      let samples: { ts: number; value: number }[] = [];
      let cut = { times: 0, end: 0 };
      for (let rows = pq.limit; source; rows *= 2) {
        samples = await lake.duck
          .for(ctx.signal)
          .chunks(...sql(timeseriesSql(source, { ...pq, from: plan.from, to: plan.to }, metric, rows)))
          .then(readSamples);
        cut = firstTimes(samples, limit);
        if (samples.length < rows || cut.times > limit) break;
      }
      const shown = samples.slice(0, cut.end).map((s) => ({ timestamp: iso(s.ts)!, value: s.value }));
      ctx.stats.rows = shown.length;
      const label = m.outcomes.find((o) => o.index === outcome)?.label ?? null;
      return {
        data: shown,
        pagination: page(
          limit,
          cut.times,
          () => [Date.parse(shown[shown.length - 1].timestamp)],
          (k) => cursors.issue(scope, filtersOf(ctx.query), k),
        ),
        meta: {
          metric,
          outcome: { index: outcome, label },
          coverage: coverageMeta('metrics', venue, [m.coin], from),
          gaps: gapsMeta(venue, m, 'metrics', pq.from, pq.to),
        },
      };
    };

  const latestReading = new Map<string, Promise<LatestBook | undefined>>();
  const latestRendered = new WeakMap<LatestBook, Buffer>();

  /**
   * A market not seen by capture or the spool tail since this process started (it ended
   * before): its newest hour is read once and kept. Newer rows, if any ever come, arrive
   * through capture or the tail and replace it; an older result never replaces a newer one.
   */
  const readLatest = async (m: StoredMarket, key: string): Promise<LatestBook | undefined> => {
    const plan = planPartitions('books', m, null, null);
    for (const p of [...plan.partitions].reverse()) {
      const source = relation('books', await lake.files([p]), BOOK_COLUMNS);
      const rows = source ? await lake.duck.rows(latestSql(source), { market_id: m.market_id }) : [];
      if (!rows.length) continue;
      const read: LatestBook = { ts: Number(rows[0].ts), books: rows.map((r) => ({ market_id: m.market_id, ...rowBook(r) })) };
      const meanwhile = deps.latest.get(key);
      if (meanwhile && meanwhile.ts >= read.ts) return meanwhile;
      deps.latest.set(key, read);
      return read;
    }
    return undefined;
  };

  const latestRoute =
    (venue: Venue) =>
    async (ctx: RequestContext): Promise<Result> => {
      const m = findMarket(venue, ctx);
      const outcome = resolveOutcome(m, ctx.query.outcome, null);
      const key = `${venue}:${m.market_id}`;
      let latest = deps.latest.get(key);
      if (!latest) {
        // One read per market however many requests ask at once: a burst of requests for markets
        // not in memory would otherwise queue one query each and starve every lane.
        // Shared (not tied to this request), so no one client's leaving may cancel it.
        latest = await singleFlight(latestReading, key, () => readLatest(m, key));
        ctx.stats.partitions = planPartitions('books', m, null, null).partitions.length;
      }
      if (latest) deps.latestReads.read(key, ctx.now);
      const books = latest?.books.filter((b) => outcome === null || b.outcome_index === outcome) ?? [];
      ctx.stats.rows = books.length;
      if (!latest) return { data: null };
      if (outcome !== null) return { data: { market_id: m.market_id, timestamp: iso(latest.ts), books: books.map((b) => bookJson(b)) } };
      // A book is rendered once, however often it is asked for until capture records the next.
      let rendered = latestRendered.get(latest);
      if (!rendered) {
        rendered = Buffer.from(JSON.stringify({ market_id: m.market_id, timestamp: iso(latest.ts), books: books.map((b) => bookJson(b)) }));
        latestRendered.set(latest, rendered);
      }
      return { data: new RawJson(rendered) };
    };

  const fileList =
    (id: string, venue: Venue, base: (ctx: RequestContext) => string, coins: readonly string[]) =>
    async (ctx: RequestContext): Promise<Result> => {
      const q = ctx.query;
      const { from, to } = timeRange(q);
      const limit = Number(q.limit ?? 100);
      const coin = ctx.path.coin ? [String(ctx.path.coin)] : ((q.coin as string[] | undefined) ?? coins);
      const windows = q.window as string[] | undefined;
      const scope = `${id}:${coin.join(',')}`;
      const after = q.cursor ? cursors.read(String(q.cursor), scope, filtersOf(q)) : null;
      const { shown, more } = takePage(lake.sealedFiles(), limit, (f) => {
        const p = f.partition;
        if (p.venue !== venue || !coin.includes(p.coin) || (windows && !windows.includes(p.window))) return false;
        if (q.dataset && p.dataset !== q.dataset) return false;
        if ((from !== null && p.hour + 3_600_000 <= from) || (to !== null && p.hour >= to)) return false;
        return !after || p.hour > Number(after[0]) || (p.hour === Number(after[0]) && f.path > String(after[1]));
      });
      ctx.stats.rows = shown.length;
      const last = shown[shown.length - 1];
      return {
        data: shown.map((f) => ({
          dataset: f.partition.dataset,
          coin: f.partition.coin,
          window: f.partition.window,
          date: iso(f.partition.hour)!.slice(0, 10),
          hour: new Date(f.partition.hour).getUTCHours(),
          rows: f.rows,
          bytes: f.bytes,
          sha256: f.sha256,
          url: `${base(ctx)}/files/${f.path}`,
        })),
        pagination: {
          limit,
          has_more: more,
          next_cursor: more ? cursors.issue(scope, filtersOf(q), [last.partition.hour, last.path]) : null,
        },
      };
    };

  const fileDownload =
    (venue: Venue) =>
    async (ctx: RequestContext): Promise<Result> => {
      const rel = String(ctx.path.path);
      const file = lake.sealedFile(rel);
      // Only what the manifest lists: nothing else below (or outside) the lake can be named.
      if (!file || file.partition.venue !== venue || (ctx.path.coin && file.partition.coin !== ctx.path.coin)) {
        fail('NOT_FOUND', `No sealed file ${echo(rel)} in this namespace; list them with /files`, [
          { param: 'path', message: 'not in the files listing' },
        ]);
      }
      const absolute = path.join(lake.paths.lake, file.path);
      const real = await fs.realpath(absolute).catch(() => null);
      const root = await fs.realpath(lake.paths.lake);
      if (!real || !real.startsWith(root + path.sep))
        fail('NOT_FOUND', `No sealed file ${echo(rel)} in this namespace`, [{ param: 'path', message: 'not in the lake' }]);
      return { data: null, file: { absolute: real, filename: file.path.replaceAll('/', '_'), contentType: PARQUET, sha256: file.sha256 } };
    };

  const coverage = (venue: Venue) => async (): Promise<Result> => {
    const recorded = new Map<
      string,
      { dataset: string; coin: string; window: string; first: number; last: number; rows: number; files: number }
    >();
    for (const f of lake.sealedFiles()) {
      const p = f.partition;
      if (p.venue !== venue || f.min_ts === null || f.max_ts === null) continue;
      const key = `${p.dataset}|${p.coin}|${p.window}`;
      const r = recorded.get(key) ?? {
        dataset: p.dataset,
        coin: p.coin,
        window: p.window,
        first: Infinity,
        last: -Infinity,
        rows: 0,
        files: 0,
      };
      r.first = Math.min(r.first, f.min_ts);
      r.last = Math.max(r.last, f.max_ts);
      r.rows += f.rows;
      r.files++;
      recorded.set(key, r);
    }
    return {
      data: {
        published: COVERAGE.filter((c) => c.venue === venue).map((c) => ({
          dataset: c.dataset,
          coins: c.coins,
          starts: c.starts,
          what: c.what,
        })),
        recorded: [...recorded.values()]
          .sort((a, b) => (a.dataset + a.coin + a.window).localeCompare(b.dataset + b.coin + b.window))
          .map((r) => ({
            dataset: r.dataset,
            coin: r.coin,
            window: r.window,
            first: iso(r.first),
            last: iso(r.last),
            rows: r.rows,
            files: r.files,
          })),
        gaps: lake.gaps({ venue }).map((g) => ({
          coin: g.coin,
          window: g.window,
          market_id: g.market_id,
          dataset: g.dataset,
          from: iso(g.from_ts),
          to: iso(g.to_ts),
          reason: g.reason,
        })),
      },
      meta: { note: 'Recorded spans and gaps are read from sealed files; the open hour is sealed within about an hour.' },
    };
  };

  /**
   * `<path>.csv` and `<path>.parquet`: the `format=` exports as operations of their own, each
   * with one response type and no paging parameters, which is what generated clients handle.
   */
  const exportRoutes = (route: Route): Route[] =>
    (['csv', 'parquet'] as const).map((format) => ({
      ...route,
      id: `${route.id}.${format}`,
      path: `${route.path}.${format}`,
      summary: `${route.summary.replace(/, cursor-paginated\.$|\.$/, '')}: the whole range as one ${format === 'csv' ? 'CSV' : 'Parquet'} file.`,
      response: format === 'csv' ? 'Csv' : 'ParquetExport',
      list: false,
      params: route.params.filter((p) => !['limit', 'cursor', 'format'].includes(p.name)),
      handle: (ctx) => route.handle({ ...ctx, query: { ...ctx.query, format } }),
    }));

  const routes: Route[] = [
    {
      id: 'health',
      path: '/v3/health',
      access: 'public',
      summary: 'Service and lake health.',
      params: [],
      response: 'Health',
      list: false,
      handle: async () => deps.health(),
    },
    {
      id: 'openapi',
      path: '/v3/openapi.json',
      access: 'public',
      summary: 'This document.',
      params: [],
      response: 'OpenApi',
      list: false,
      handle: async () => ({ data: deps.openapi(), raw: true }),
    },
    {
      id: 'whoami',
      path: '/v3/whoami',
      access: 'key',
      summary: 'The calling key, its plan and its rate.',
      params: [],
      response: 'WhoAmI',
      list: false,
      handle: async (ctx) => ({
        data: { key_id: ctx.key!.key_id, plan: ctx.key!.plan, rate_limit: { per_second: deps.rate(ctx.key!.plan) } },
      }),
    },
  ];

  for (const ns of NAMESPACES) {
    const base = `/v3/${ns}`;
    const venue: Venue = 'wallet-prediction';
    const snapshots: Route = {
      id: `${ns}.snapshots`,
      path: `${base}/:market_id/snapshots`,
      access: 'paid',
      summary: 'Recorded full-L2 snapshots, cursor-paginated.',
      response: 'SnapshotList',
      list: true,
      heavy: true,
      params: [P.marketId, P.start_time, P.end_time, P.limit, P.cursor, P.order, P.outcome, P.interval, P.format],
      handle: snapshotRoute('wp.snapshots', venue, true),
    };
    const timeseries: Route = {
      id: `${ns}.timeseries`,
      path: `${base}/:market_id/timeseries`,
      access: 'paid',
      summary: 'Samples of chance, price or last_trade.',
      response: 'SampleList',
      list: true,
      heavy: true,
      params: [P.marketId, P.metric, P.outcome, P.start_time, P.end_time, P.interval, P.limit, P.cursor, P.order, P.format],
      handle: timeseriesRoute('wp.timeseries', venue),
    };
    routes.push(
      {
        id: `${ns}.markets`,
        path: `${base}/markets`,
        access: 'paid',
        summary: 'Discover and filter markets.',
        response: 'MarketList',
        list: true,
        params: [P.walletCoin, P.window, P.status, P.start_time, P.end_time, P.limit, P.cursor, P.order],
        handle: markets('wp.markets', venue, ['btc', 'eth', 'bnb']),
      },
      {
        id: `${ns}.orderbook`,
        path: `${base}/:market_id/orderbook/latest`,
        access: 'paid',
        summary: 'The newest recorded full-L2 book of a market.',
        response: 'LatestBook',
        list: false,
        params: [P.marketId, P.outcome],
        handle: latestRoute(venue),
      },
      snapshots,
      ...exportRoutes(snapshots),
      {
        id: `${ns}.snapshotAt`,
        path: `${base}/:market_id/snapshots/at`,
        access: 'paid',
        summary: 'The book in force at an instant: the newest recorded at or before it.',
        response: 'SnapshotAt',
        list: false,
        heavy: true,
        params: [P.marketId, P.timestamp, P.outcome],
        handle: snapshotAt('wp.snapshots', venue, true),
      },
      timeseries,
      ...exportRoutes(timeseries),
      {
        id: `${ns}.trades`,
        path: `${base}/:market_id/trades`,
        access: 'paid',
        summary: 'Reserved: historical fills (empty for now).',
        response: 'TradeList',
        list: true,
        params: [P.marketId, P.limit, P.cursor],
        handle: async (ctx) => {
          const m = findMarket(venue, ctx);
          if (ctx.query.cursor) cursors.read(String(ctx.query.cursor), `wp.trades:${m.market_id}`, filtersOf(ctx.query));
          return {
            data: [],
            pagination: { limit: Number(ctx.query.limit ?? 100), has_more: false, next_cursor: null },
            meta: { notice: TRADES_NOTICE },
          };
        },
      },
      {
        id: `${ns}.coverage`,
        path: `${base}/coverage`,
        access: 'paid',
        summary: 'What history exists: published coverage, recorded spans and every recorded gap.',
        response: 'Coverage',
        list: false,
        params: [],
        handle: coverage(venue),
      },
      {
        id: `${ns}.files`,
        path: `${base}/files`,
        access: 'paid',
        summary: 'Sealed Parquet files of the lake, with rows and sha256.',
        response: 'FileList',
        list: true,
        params: [P.dataset, P.walletCoin, P.window, P.start_time, P.end_time, P.limit, P.cursor],
        handle: fileList('wp.files', venue, () => base, ['btc', 'eth', 'bnb']),
      },
      {
        id: `${ns}.file`,
        path: `${base}/files/*path`,
        access: 'paid',
        summary: 'One sealed Parquet file (ETag, If-None-Match, single Range).',
        response: 'Parquet',
        list: false,
        params: [P.filePath],
        handle: fileDownload(venue),
      },
      {
        id: `${ns}.market`,
        path: `${base}/:market_id`,
        access: 'paid',
        summary: 'One market record.',
        response: 'MarketOne',
        list: false,
        params: [P.marketId],
        handle: async (ctx) => ({ data: marketJson(findMarket(venue, ctx)) }),
      },
    );
  }

  const coinSnapshots: Route = {
    id: 'coin.snapshots',
    path: '/v3/:coin/markets/:market_id/snapshots',
    access: 'key',
    summary: 'Recorded snapshots of another venue’s market.',
    response: 'SnapshotList',
    list: true,
    heavy: true,
    params: [P.coin, P.marketId, P.includeOrderbook, P.interval, P.start_time, P.end_time, P.limit, P.cursor, P.order, P.outcome, P.format],
    handle: snapshotRoute('coin.snapshots', 'polymarket', false),
  };
  routes.push(
    {
      id: 'coin.files',
      path: '/v3/:coin/files',
      access: 'key',
      summary: 'Sealed Parquet files of another venue for one coin.',
      response: 'FileList',
      list: true,
      params: [P.coin, P.dataset, P.window, P.start_time, P.end_time, P.limit, P.cursor],
      handle: fileList('coin.files', 'polymarket', (ctx) => `/v3/${ctx.path.coin}`, ['btc', 'eth', 'sol', 'xrp']),
    },
    {
      id: 'coin.file',
      path: '/v3/:coin/files/*path',
      access: 'key',
      summary: 'One sealed Parquet file of another venue.',
      response: 'Parquet',
      list: false,
      params: [P.coin, P.filePath],
      handle: fileDownload('polymarket'),
    },
    {
      id: 'coin.markets',
      path: '/v3/:coin/markets',
      access: 'key',
      summary: 'Markets of other venues for one coin.',
      response: 'MarketList',
      list: true,
      params: [P.coin, P.window, P.type, P.status, P.start_time, P.end_time, P.limit, P.cursor, P.order],
      handle: markets('coin.markets', 'polymarket', ['btc', 'eth', 'sol', 'xrp']),
    },
    coinSnapshots,
    ...exportRoutes(coinSnapshots),
    {
      id: 'coin.snapshotAt',
      path: '/v3/:coin/markets/:market_id/snapshots/at',
      access: 'key',
      summary: 'The book in force at an instant: the newest recorded at or before it.',
      response: 'SnapshotAt',
      list: false,
      heavy: true,
      params: [P.coin, P.marketId, P.timestamp, P.outcome, P.includeOrderbook],
      handle: snapshotAt('coin.snapshots', 'polymarket', false),
    },
    {
      id: 'coin.market',
      path: '/v3/:coin/markets/:market_id',
      access: 'key',
      summary: 'One market record of another venue.',
      response: 'MarketOne',
      list: false,
      params: [P.coin, P.marketId],
      handle: async (ctx) => ({ data: marketJson(findMarket('polymarket', ctx, String(ctx.path.coin))) }),
    },
  );
  return routes;
}

function readSamples(chunks: DuckDBDataChunk[]): { ts: number; value: number }[] {
  const out: { ts: number; value: number }[] = [];
  for (const chunk of chunks) {
    const [ts, value] = [chunk.getColumnVector(0), chunk.getColumnVector(1)];
    for (let row = 0; row < chunk.rowCount; row++) out.push({ ts: ts.getItem(row) as number, value: value.getItem(row) as number });
  }
  return out;
}

/**
 * How many distinct times `samples` (ordered by time, so equal times are adjacent) hold, and
 * where the first `limit` of them end: a page never splits the samples of one time.
 */
function firstTimes(samples: { ts: number }[], limit: number): { times: number; end: number } {
  let times = 0;
  let end = samples.length;
  for (let i = 0; i < samples.length; i++) {
    if (i > 0 && samples[i].ts === samples[i - 1].ts) continue;
    if (++times === limit + 1) end = i;
  }
  return { times, end };
}

function sql(s: { sql: string; params: Record<string, string | number> }): [string, Record<string, string | number>] {
  return [s.sql, s.params];
}
