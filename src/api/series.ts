// Price series: chance, price or last trade of one outcome, every sample or the last of each bucket;
// or the coin's reference price over the market's range (`metric=reference`), a signal of its own.
import type { DuckDBDataChunk } from '@duckdb/node-api';
import type { Venue } from '../config.js';
import { relation } from '../lake/sql.js';
import type { StoredMarket } from '../lake/reader.js';
import { referenceSymbol } from '../records.js';
import { referenceFiles, referenceGaps, referenceRelation } from './reference.js';
import { exportFile, exportFormat, writeExport } from './bulk.js';
import { type PageQuery, planPartitions, referenceSamplesSql, timeseriesSql } from './plan.js';
import {
  type ListRequest,
  type RequestContext,
  type Result,
  type RouteKit,
  coverageMeta,
  firstTimes,
  pagination,
  resolveOutcome,
  sql,
  exporting,
} from './route.js';
import { iso } from './shape.js';

export function seriesHandlers(kit: RouteKit) {
  const { lake, cursors, findMarket, gapsMeta, pageQuery } = kit;

  const timeseries =
    (id: string, venue: Venue) =>
    async (ctx: RequestContext): Promise<Result> => {
      const m = findMarket(venue, ctx);
      const scope = `${id}:${m.market_id}`;
      const outcome = resolveOutcome(m, ctx.query.outcome, 0)!;
      const { pq, req } = pageQuery(ctx, m, scope, outcome);
      // Required by the route's ParamSpecs: validation refused the request without it.
      const metric = ctx.query.metric!;
      if (metric === 'reference') return referenceSeries(ctx, m, pq, req, scope);
      if (exporting(ctx.query)) return exportFile(kit, ctx, m, 'timeseries', pq, 'metrics', metric);
      const plan = planPartitions('metrics', m, pq.from, pq.to);
      ctx.stats.partitions = plan.partitions.length;
      const source = relation('metrics', await lake.files(plan.partitions), ['ts', 'market_id', 'outcome_index', metric]);
      const limit = pq.limit;
      let samples: { ts: number; value: number }[] = [];
      let cut = { times: 0, end: 0 };
      // One sample more than shown at first; more only when some time holds several.
      for (let rows = limit + 1; source; rows *= 2) {
        samples = await lake.duck
          .for(ctx.signal)
          .chunks(...sql(timeseriesSql(source, pq, metric, rows)))
          .then(readSamples);
        cut = firstTimes(samples, limit);
        if (samples.length < rows || cut.times > limit) break;
      }
      const shown = samples.slice(0, cut.end).map((s) => ({ timestamp: iso(s.ts)!, value: s.value }));
      ctx.stats.rows = shown.length;
      const label = m.outcomes.find((o) => o.index === outcome)?.label ?? null;
      return {
        data: shown,
        pagination: pagination(limit, cut.times > limit, () =>
          cursors.issue(scope, req.filters, [Date.parse(shown[shown.length - 1].timestamp)]),
        ),
        meta: {
          metric,
          outcome: { index: outcome, label },
          coverage: coverageMeta('metrics', venue, [m.coin], req.from),
          gaps: gapsMeta(venue, m, 'metrics', pq.from, pq.to),
        },
      };
    };

  /** The coin's Chainlink price over the market's range, with the feed's gaps: the record's open and close are read from the same observations. */
  const referenceSeries = async (ctx: RequestContext, m: StoredMarket, pq: PageQuery, req: ListRequest, scope: string): Promise<Result> => {
    if (exporting(ctx.query)) {
      const format = exportFormat(ctx);
      return writeExport(kit, ctx, format, `${m.market_id}-timeseries-reference`, async () => {
        const rel = referenceRelation(await referenceFiles(lake, ctx, m.coin, pq.from, pq.to));
        return referenceSamplesSql(rel, { ...pq, after: null }, null, format === 'csv');
      });
    }
    const files = await referenceFiles(lake, ctx, m.coin, pq.from, pq.to);
    const symbol = referenceSymbol('chainlink', m.coin);
    const rel = relation('reference', files);
    const rows = rel
      ? await lake.duck
          .for(ctx.signal)
          .chunks(...sql(referenceSamplesSql(rel, pq, pq.limit + 1)))
          .then(readSamples)
      : [];
    const shown = rows.slice(0, pq.limit).map((s) => ({ timestamp: iso(s.ts)!, value: s.value }));
    ctx.stats.rows = shown.length;
    return {
      data: shown,
      pagination: pagination(pq.limit, rows.length > pq.limit, () =>
        cursors.issue(scope, req.filters, [Date.parse(shown[shown.length - 1].timestamp)]),
      ),
      meta: {
        metric: 'reference',
        outcome: null,
        reference: { source: 'chainlink', symbol },
        gaps: referenceGaps(lake, m.coin, 'chainlink', pq.from, pq.to),
      },
    };
  };

  return { timeseries };
}

function readSamples(chunks: DuckDBDataChunk[]): { ts: number; value: number }[] {
  const out: { ts: number; value: number }[] = [];
  for (const chunk of chunks) {
    const [ts, value] = [chunk.getColumnVector(0), chunk.getColumnVector(1)];
    for (let row = 0; row < chunk.rowCount; row++) out.push({ ts: ts.getItem(row) as number, value: value.getItem(row) as number });
  }
  return out;
}
