// Bulk access: the sealed files (listed from the manifests, downloaded with ETag and Range), the
// coverage table, and whole ranges exported as one CSV or Parquet file.
import { randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Venue } from '../config.js';
import { COVERAGE } from '../coverage.js';
import type { Params } from '../lake/duckdb.js';
import type { Partition } from '../lake/layout.js';
import type { StoredMarket } from '../lake/reader.js';
import { EXPORT_BOOK_COLUMNS, emptyRelation, relation, sqlPath } from '../lake/sql.js';
import { coverageByWindow } from './certificate.js';
import { echo, fail } from '../edge/errors.js';
import { timeRange } from './params.js';
import { type PageQuery, TRADE_COLUMNS, exportSql, planPartitions, scansInOrder } from './plan.js';
import { PARQUET, type RequestContext, type Result, type RouteKit, listRequest, pagination, takePage } from './route.js';
import { iso } from './shape.js';

/** format=csv|parquet: the whole range, unpaginated, written by DuckDB and streamed. */
export async function exportFile(
  kit: RouteKit,
  ctx: RequestContext,
  m: StoredMarket,
  kind: 'snapshots' | 'timeseries' | 'trades',
  pq: PageQuery,
  dataset: 'books' | 'metrics' | 'trades',
  metric?: 'chance' | 'price' | 'last_trade',
): Promise<Result> {
  const { deps, lake } = kit;
  const format = exportFormat(ctx);
  timeRange(ctx.query, deps.maxRangeMs);
  const plan = planPartitions(dataset, m, pq.from, pq.to);
  ctx.stats.partitions = plan.partitions.length;
  const columns =
    dataset === 'books' ? EXPORT_BOOK_COLUMNS : dataset === 'trades' ? TRADE_COLUMNS : ['ts', 'market_id', 'outcome_index', metric!];
  const span = `${iso(plan.from)}_${iso(plan.to)}`.replace(/[:.]/g, '');
  return writeExport(kit, ctx, format, `${m.market_id}-${kind}${metric ? `-${metric}` : ''}-${span}`, async () => {
    const files = await lake.files(plan.partitions, m.market_id);
    const source = relation(dataset, files, columns) ?? emptyRelation(dataset, columns);
    return exportSql(source, pq, kind, format, scansInOrder(files), metric);
  });
}

/** Refuses paging parameters with a file format: the whole range comes as one file. */
export function exportFormat(ctx: RequestContext): 'csv' | 'parquet' {
  const format = ctx.query.format === 'parquet' ? 'parquet' : 'csv';
  for (const name of ['cursor', 'limit'] as const) {
    if (ctx.query[name] !== undefined) {
      fail('INVALID_PARAMETER', `Parameter "${name}" is not accepted with format=${format}: the whole range comes as one file`, [
        { param: name, message: 'not accepted with a file format' },
      ]);
    }
  }
  return format;
}

/**
 * Holds an export slot first (refused at once when every one is held), then plans the export
 * (`plan`: its SQL, every value bound) and streams what DuckDB writes.
 */
export async function writeExport(
  kit: RouteKit,
  ctx: RequestContext,
  format: 'csv' | 'parquet',
  name: string,
  plan: () => Promise<{ sql: string; params: Params }>,
): Promise<Result> {
  const { deps } = kit;
  const slot = deps.exports.reserve();
  let query: { sql: string; params: Params };
  try {
    query = await plan();
    await fs.mkdir(deps.exportDir, { recursive: true });
  } catch (err) {
    slot.release();
    throw err;
  }
  const file = path.join(deps.exportDir, `${randomUUID()}.${format}`);
  // The Parquet writer holds a whole row group in memory: small ones.
  const options = format === 'csv' ? 'FORMAT csv, HEADER' : 'FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 8192';
  const { stream, rows } = await deps.exports.start(
    slot,
    file,
    `COPY (${query.sql}) TO ${sqlPath(file)} (${options}, USE_TMP_FILE false)`,
    query.params,
    ctx.signal,
  );
  void rows.then(
    (n) => {
      ctx.stats.rows = n;
    },
    () => undefined,
  );
  return {
    data: null,
    file: {
      stream,
      rows,
      filename: `${name}.${format}`,
      contentType: format === 'csv' ? 'text/csv; charset=utf-8' : PARQUET,
    },
  };
}

/**
 * Whether a sealed file belongs to a namespace's listing: its venue's files, and the reference prices
 * of its coins, which both venues' markets are checked against (kept once, under the relaying venue).
 */
function inNamespace(p: Partition, venue: Venue): boolean {
  return p.venue === venue || p.dataset === 'reference';
}

export function fileHandlers({ lake, cursors }: RouteKit) {
  const list =
    (id: string, venue: Venue, base: (ctx: RequestContext) => string, coins: readonly string[]) =>
    async (ctx: RequestContext): Promise<Result> => {
      const q = ctx.query;
      const { from, to, limit, cursor, filters } = listRequest(q, 'asc');
      const coin = ctx.path.coin ? [ctx.path.coin] : (q.coin ?? coins);
      const windows = q.window;
      const scope = `${id}:${coin.join(',')}`;
      const after = cursor ? cursors.read(cursor, scope, filters) : null;
      const { shown, more } = takePage(lake.sealedFiles(), limit, (f) => {
        const p = f.partition;
        if (!inNamespace(p, venue) || !coin.includes(p.coin) || (windows && !(windows as readonly string[]).includes(p.window)))
          return false;
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
        pagination: pagination(limit, more, () => cursors.issue(scope, filters, [last.partition.hour, last.path])),
      };
    };

  const download =
    (venue: Venue) =>
    async (ctx: RequestContext): Promise<Result> => {
      const rel = String(ctx.path.path);
      const file = lake.sealedFile(rel);
      // Only what the manifest lists: nothing else below (or outside) the lake can be named.
      if (!file || !inNamespace(file.partition, venue) || (ctx.path.coin && file.partition.coin !== ctx.path.coin)) {
        fail('NOT_FOUND', `No sealed file ${echo(rel)} in this namespace; list them with /files`, [
          { param: 'path', message: 'not in the files listing' },
        ]);
      }
      await lake.ensure([file]);
      const absolute = path.join(lake.paths.lake, file.path);
      const real = await fs.realpath(absolute).catch(() => null);
      const root = await fs.realpath(lake.paths.lake);
      if (!real || !real.startsWith(root + path.sep))
        fail('NOT_FOUND', `No sealed file ${echo(rel)} in this namespace`, [{ param: 'path', message: 'not in the lake' }]);
      return { data: null, file: { absolute: real, filename: file.path.replaceAll('/', '_'), contentType: PARQUET, sha256: file.sha256 } };
    };

  const coverage =
    (venue: Venue) =>
    async (ctx: RequestContext): Promise<Result> => {
      const recorded = new Map<
        string,
        { dataset: string; coin: string; window: string; first: number; last: number; rows: number; files: number }
      >();
      for (const f of lake.sealedFiles()) {
        const p = f.partition;
        if (!inNamespace(p, venue) || f.min_ts === null || f.max_ts === null) continue;
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
          // Each sealed window's certificate, summed by coin and market window.
          windows: await coverageByWindow(lake, venue, ctx.now),
          gaps: lake.gaps({ venue }).map((g) => ({
            coin: g.coin,
            window: g.window,
            market_id: g.market_id,
            dataset: g.dataset,
            from: iso(g.from_ts),
            to: iso(g.to_ts),
            reason: g.reason,
            ...(g.provisional ? { provisional: true } : {}),
          })),
        },
        meta: { note: 'Recorded spans and gaps are read from sealed files; the open hour is sealed within about an hour.' },
      };
    };

  return { list, download, coverage };
}
