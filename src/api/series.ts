// Price series: chance, price or last trade of one outcome, every sample or the last of each bucket.
import type { DuckDBDataChunk } from '@duckdb/node-api';
import type { Venue } from '../config.js';
import { relation } from '../lake/sql.js';
import { exportFile } from './bulk.js';
import { planPartitions, timeseriesSql } from './plan.js';
import { type RequestContext, type Result, type RouteKit, coverageMeta, firstTimes, pagination, resolveOutcome, sql } from './route.js';
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
      if (ctx.query.format && ctx.query.format !== 'json') return exportFile(kit, ctx, m, 'timeseries', pq, 'metrics', metric);
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
