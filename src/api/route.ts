// What every route module shares: the route and request types, paging helpers, and the kit of
// lookups a handler needs (find a market, its gaps, its coverage, a page query from a request).
import type { Readable } from 'node:stream';
import type { LiveBooks } from './livebooks.js';
import type { DuckDBDataChunk } from '@duckdb/node-api';
import type { Venue, Window } from '../config.js';
import { coverageStart } from '../coverage.js';
import type { WindowState } from '../lake/certificate.js';
import type { ResolutionCheck } from '../lake/referenceprice.js';
import type { LakeReader, StoredMarket } from '../lake/reader.js';
import type { Dataset, LatestBook, MarketStatus, ReferenceSource } from '../records.js';
import type { BookCache } from './bookcache.js';
import type { ServingCopies } from '../pages/copyreader.js';
import type { DeflatedPiece } from '../pages/gzip.js';
import type { Cursors } from './cursor.js';
import { echo, fail } from '../edge/errors.js';
import type { ExportPool } from './exports.js';
import type { KeyRecord } from '../edge/keys.js';
import type { LatestReads } from './latest.js';
import { INTERVALS, type ParamSpec, type Parsed, timeRange } from './params.js';
import { CAPTURE_LAG_MS, type PageQuery } from './plan.js';
import { iso } from './shape.js';

export type Access = 'public' | 'key' | 'paid';

/**
 * The query as validated: ajv checked it against the route's ParamSpecs (params.ts), so each
 * field has the type its schema allows. Times stay text until `timeRange` parses them.
 */
export type Query = {
  coin?: string[];
  window?: Window[];
  type?: Window[];
  status?: MarketStatus[];
  state?: WindowState[];
  min_coverage?: number;
  start_time?: string;
  end_time?: string;
  limit?: number;
  cursor?: string;
  order?: 'asc' | 'desc';
  interval?: string;
  outcome?: string;
  metric?: 'chance' | 'price' | 'last_trade' | 'reference';
  include_orderbook?: 'true' | 'false';
  format?: 'json' | 'csv' | 'parquet';
  dataset?: Dataset;
  timestamp?: string;
  source?: ReferenceSource;
  resolution_check?: ResolutionCheck[];
};

/** Whether the request asks for the range as a file (format=csv|parquet) rather than a page. */
export function exporting(query: Query): boolean {
  return query.format !== undefined && query.format !== 'json';
}

/** Every field of `Query`; a test checks these are exactly the query parameters params.ts declares. */
export const QUERY_FIELDS = [
  'coin',
  'window',
  'type',
  'status',
  'state',
  'min_coverage',
  'start_time',
  'end_time',
  'limit',
  'cursor',
  'order',
  'interval',
  'outcome',
  'metric',
  'include_orderbook',
  'format',
  'dataset',
  'timestamp',
  'source',
  'resolution_check',
] as const satisfies readonly (keyof Query)[];

export type PathParams = { market_id?: string; coin?: string; path?: string };

export interface RequestContext {
  query: Query;
  path: PathParams;
  key: KeyRecord | null;
  now: number;
  /** For the request log line: partitions planned and rows read. */
  stats: { partitions: number; rows: number };
  /** Fires when the client leaves: its statements stop. */
  signal: AbortSignal;
  /** The client takes gzip: data may come as DeflatedJson. */
  gzip: boolean;
}

/** Data already serialized (by DuckDB), spliced into the envelope as it is. */
export class RawJson {
  /** `framed`: the allocation `text` sits in, after PAGE_FRAME.before and with PAGE_FRAME.room after it. */
  constructor(
    readonly text: string | Buffer,
    readonly framed: Buffer | null = null,
  ) {}
}

/** Data as raw-deflate pieces (a page read mostly as its serving copy deflated it): sent gzipped, inside a gzipped envelope. */
export class DeflatedJson {
  constructor(readonly pieces: DeflatedPiece[]) {}
}

/** How pages are rendered for the envelope: sent from their own buffer, the rest of the envelope written after them. */
export const PAGE_FRAME = { before: Buffer.from('{"data":'), room: 4096 } as const;

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
  /** Headers beside the body (a pending certificate's Retry-After). */
  headers?: Record<string, string>;
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
  /** Books of markets still in the spool, followed as capture appends. */
  live: LiveBooks;
  /** Books files' serving copies: pages of markets that are over, never read before (null: off). */
  serving: ServingCopies | null;
  cursors: Cursors;
  /** Newest books per `<venue>:<market_id>`, kept current by capture. */
  latest: Map<string, LatestBook>;
  latestReads: LatestReads;
  /**
   * The latest route's `meta` for a book: `source` says where it came from (`capture`: capture's
   * memory, spool or feed; `sealed`: the sealed files), and a bucket-served process says whether
   * capture's feed is reachable (`capture_reachable`).
   */
  latestMeta: (book: LatestBook | undefined) => Record<string, unknown>;
  /** Books read from sealed files, as opposed to those capture handed over. */
  sealedLatest: WeakSet<LatestBook>;
  rate: (plan: KeyRecord['plan']) => number;
  health: () => Promise<{ status: number; data: unknown }>;
  openapi: () => unknown;
  maxRangeMs: number;
}

export const PARQUET = 'application/vnd.apache.parquet';
export const DEFAULT_LIMIT = 100;

/**
 * A list request's paging, worked out once: the limit with its default, the order, the
 * requested range (null where not given), and the filters a cursor is bound to.
 */
export interface ListRequest {
  limit: number;
  order: 'asc' | 'desc';
  from: number | null;
  to: number | null;
  cursor: string | null;
  filters: Parsed;
}

export function listRequest(q: Query, defaultOrder: 'asc' | 'desc'): ListRequest {
  const { from, to } = timeRange(q);
  return {
    limit: q.limit ?? DEFAULT_LIMIT,
    order: q.order ?? defaultOrder,
    from,
    to,
    cursor: q.cursor ?? null,
    filters: filtersOf(q),
  };
}

/** The envelope's pagination: the cursor of the next page (`next`, called only then) when there is more. */
export function pagination(limit: number, more: boolean, next: () => string): NonNullable<Result['pagination']> {
  return { limit, has_more: more, next_cursor: more ? next() : null };
}

/** The first `limit` items of an ordered list that `keep` accepts, and whether any further one does. */
export function takePage<T>(items: Iterable<T>, limit: number, keep: (item: T) => boolean): { shown: T[]; more: boolean } {
  const shown: T[] = [];
  for (const item of items) {
    if (!keep(item)) continue;
    if (shown.length === limit) return { shown, more: true };
    shown.push(item);
  }
  return { shown, more: false };
}

export function filtersOf(q: Query): Parsed {
  const { limit: _l, cursor: _c, ...rest } = q;
  return rest;
}

/** `window`, or its alias `type`; both at once must agree. */
export function windowsOf(q: Query): Window[] | undefined {
  const { window: windows, type } = q;
  if (windows && type && windows.join(',') !== type.join(',')) {
    fail('INVALID_PARAMETER', 'Parameters "window" and "type" (its alias) disagree; give one of them', [
      { param: 'type', message: 'disagrees with window' },
    ]);
  }
  return windows ?? type;
}

export function coverageMeta(dataset: string, venue: Venue, coins: readonly string[], from: number | null) {
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

/**
 * How many distinct times `rows` (ordered by time, so equal times are adjacent) hold, and where
 * the first `limit` of them end: a page never splits the rows of one time.
 */
export function firstTimes(rows: readonly { ts: number }[], limit: number): { times: number; end: number } {
  let times = 0;
  let end = rows.length;
  for (let i = 0; i < rows.length; i++) {
    if (i > 0 && rows[i].ts === rows[i - 1].ts) continue;
    if (++times === limit + 1) end = i;
  }
  return { times, end };
}

export function resolveOutcome(m: StoredMarket, raw: unknown, fallback: number | null): number | null {
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

/** Rows of a statement that selected `columns`, in order, as objects named by them. */
export function rowsOf<T>(columns: readonly string[], chunks: DuckDBDataChunk[]): T[] {
  const out: T[] = [];
  for (const chunk of chunks) {
    const vectors = columns.map((_, i) => chunk.getColumnVector(i));
    for (let row = 0; row < chunk.rowCount; row++) out.push(Object.fromEntries(columns.map((c, i) => [c, vectors[i].getItem(row)])) as T);
  }
  return out;
}

export function sql(s: { sql: string; params: Record<string, string | number> }): [string, Record<string, string | number>] {
  return [s.sql, s.params];
}

/** The lookups handlers share, over one set of dependencies. */
export function routeKit(deps: RouteDeps) {
  const { lake, cursors } = deps;

  const gapsMeta = (venue: Venue, m: StoredMarket, dataset: string, from: number, to: number) =>
    lake
      .gaps({ venue, coin: m.coin, window: m.window, market_id: m.market_id, dataset }, from, to)
      .map((g) => ({ from: iso(g.from_ts), to: iso(g.to_ts), reason: g.reason, ...(g.provisional ? { provisional: true } : {}) }));

  const findMarket = (venue: Venue, ctx: RequestContext, coin?: string): StoredMarket => {
    const id = ctx.path.market_id!;
    const m = lake.market(venue, id, ctx.now);
    if (!m || (coin && m.coin !== coin))
      fail('MARKET_NOT_FOUND', `No recorded market ${echo(id)} in this namespace`, [{ param: 'market_id', message: 'not found' }]);
    return m;
  };

  /**
   * A market page's query: the requested range within the market's recorded span (its window
   * plus the capture lag), so every later step reads one range. `req` keeps what was asked.
   */
  const pageQuery = (
    ctx: RequestContext,
    m: StoredMarket,
    scope: string,
    outcomeIndex: number | null,
  ): { pq: PageQuery; req: ListRequest } => {
    const req = listRequest(ctx.query, 'asc');
    const after = req.cursor ? cursors.read(req.cursor, scope, req.filters) : null;
    return {
      req,
      pq: {
        marketId: m.market_id,
        from: Math.max(req.from ?? -Infinity, m.start_time),
        to: Math.min(req.to ?? Infinity, m.end_time + CAPTURE_LAG_MS),
        order: req.order,
        after: after ? Number(after[0]) : null,
        limit: req.limit,
        intervalMs: ctx.query.interval ? INTERVALS[ctx.query.interval] : null,
        outcomeIndex,
      },
    };
  };

  return { deps, lake, cursors, gapsMeta, findMarket, pageQuery };
}

export type RouteKit = ReturnType<typeof routeKit>;
