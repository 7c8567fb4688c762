// A coin's reference prices, as Polymarket's price socket relayed them: one source's observations
// in time order, each once, with the feed's gaps beside them (a span in which observations may be
// missing is said, never filled). Without a range, the hour before `end_time` (default: now).
import { ALL_WINDOWS, SCHEMAS, seriesPartitions } from '../lake/layout.js';
import { exportFormat, writeExport } from './bulk.js';
import { type Files, emptyRelation, relation } from '../lake/sql.js';
import { REFERENCE_VENUE, type ReferenceSource } from '../records.js';
import type { LakeReader } from '../lake/reader.js';
import { HOUR } from '../time.js';
import { fail } from '../edge/errors.js';
import { REFERENCE_COLUMNS, referenceExportSql, referenceSql } from './plan.js';
import { type RequestContext, type Result, type RouteKit, exporting, listRequest, pagination, rowsOf, sql } from './route.js';
import { iso } from './shape.js';

interface Observation {
  ts: number;
  symbol: string;
  price: number;
  sent_ts: number;
  recv_ts: number;
}

export function referenceHandlers(kit: RouteKit) {
  const { lake, cursors, deps } = kit;

  const reference = async (ctx: RequestContext): Promise<Result> => {
    const coin = ctx.path.coin!;
    const source = ctx.query.source ?? 'chainlink';
    const req = listRequest(ctx.query, 'asc');
    const to = req.to ?? ctx.now;
    const from = req.from ?? to - HOUR;
    if (from >= to)
      fail('INVALID_RANGE', 'start_time is not before end_time (default: now)', [{ param: 'start_time', message: 'not before end_time' }]);
    if (to - from > deps.maxRangeMs)
      fail('INVALID_RANGE', `The range is longer than ${deps.maxRangeMs / 86_400_000} days`, [
        { param: 'end_time', message: 'range too long' },
      ]);
    if (exporting(ctx.query)) {
      const format = exportFormat(ctx);
      const span = `${iso(from)}_${iso(to)}`.replace(/[:.]/g, '');
      return writeExport(kit, ctx, format, `reference-${coin}-${source}-${span}`, async () => {
        const rel = referenceRelation(await referenceFiles(lake, ctx, coin, from, to));
        return referenceExportSql(rel, { source, from, to, order: req.order }, format);
      });
    }
    const files = await referenceFiles(lake, ctx, coin, from, to);
    const scope = `reference:${coin}`;
    const after = req.cursor ? Number(cursors.read(req.cursor, scope, req.filters)[0]) : null;
    const source_ = relation('reference', files);
    const rows = source_
      ? await lake.duck
          .for(ctx.signal)
          .chunks(...sql(referenceSql(source_, { source, from, to, order: req.order, after }, req.limit + 1)))
          .then((chunks) => rowsOf<Observation>(REFERENCE_COLUMNS, chunks))
      : [];
    const shown = rows.slice(0, req.limit);
    ctx.stats.rows = shown.length;
    return {
      data: shown.map((o) => ({
        ts: iso(o.ts),
        recv_ts: iso(o.recv_ts),
        sent_ts: iso(o.sent_ts),
        price: o.price,
        source,
        symbol: o.symbol,
      })),
      pagination: pagination(req.limit, rows.length > req.limit, () => cursors.issue(scope, req.filters, [shown[shown.length - 1].ts])),
      meta: {
        range: { from: iso(from), to: iso(to) },
        rule: 'The price at an instant is the first observation at or after it (a window opens at its start, closes at its end); Up when the close is at least the open.',
        gaps: referenceGaps(lake, coin, source, from, to),
      },
    };
  };

  return { reference };
}

/** A coin's reference feed's gaps over [from, to), as `meta.gaps`: observations in them may be missing. */
export function referenceGaps(lake: LakeReader, coin: string, source: ReferenceSource, from: number, to: number) {
  return lake
    .referenceGaps(coin, source, from, to)
    .map((g) => ({ from: iso(g.from_ts), to: iso(g.to_ts), reason: g.reason, ...(g.provisional ? { provisional: true } : {}) }));
}

const REFERENCE_SCHEMA = SCHEMAS.reference.map((c) => c.name);

/** The sealed files and spool parts of a coin's reference over [from, to), counted in the request's log line. */
export async function referenceFiles(lake: LakeReader, ctx: RequestContext, coin: string, from: number, to: number) {
  const partitions = seriesPartitions('reference', REFERENCE_VENUE, coin, ALL_WINDOWS, from, to);
  ctx.stats.partitions = partitions.length;
  return lake.files(partitions);
}

/** The reference relation of `files`, with no rows where there are none (an export of an empty range is a header). */
export function referenceRelation(files: Files): string {
  return relation('reference', files) ?? emptyRelation('reference', REFERENCE_SCHEMA);
}
