// Trades of one market: every trade event the venue streamed, or (venues that send none) each
// last-trade price REST showed changing, labelled by `source`. Paged like the timeseries: a page
// never splits the trades of one time, and the cursor is that time.
import type { Venue } from '../config.js';
import { relation } from '../lake/sql.js';
import type { TradeRow } from '../records.js';
import { exportFile } from './bulk.js';
import { TRADE_COLUMNS, planPartitions, tradesSql } from './plan.js';
import {
  type RequestContext,
  type Result,
  type RouteKit,
  coverageMeta,
  firstTimes,
  pagination,
  resolveOutcome,
  rowsOf,
  sql,
  exporting,
} from './route.js';
import { iso } from './shape.js';

type StoredTrade = Omit<TradeRow, 'market_id'>;

export function tradeHandlers(kit: RouteKit) {
  const { lake, cursors, findMarket, gapsMeta, pageQuery } = kit;

  const trades =
    (id: string, venue: Venue) =>
    async (ctx: RequestContext): Promise<Result> => {
      const m = findMarket(venue, ctx);
      const scope = `${id}:${m.market_id}`;
      const outcome = resolveOutcome(m, ctx.query.outcome, null);
      const { pq, req } = pageQuery(ctx, m, scope, outcome);
      if (exporting(ctx.query)) return exportFile(kit, ctx, m, 'trades', pq, 'trades');
      const plan = planPartitions('trades', m, pq.from, pq.to);
      ctx.stats.partitions = plan.partitions.length;
      const source = relation('trades', await lake.files(plan.partitions, m.market_id), TRADE_COLUMNS);
      const limit = pq.limit;
      let rows: StoredTrade[] = [];
      let cut = { times: 0, end: 0 };
      // One trade more than shown at first; more only when some time holds several.
      for (let wanted = limit + 1; source; wanted *= 2) {
        rows = await lake.duck
          .for(ctx.signal)
          .chunks(...sql(tradesSql(source, pq, wanted)))
          .then((chunks) => rowsOf<StoredTrade>(TRADE_COLUMNS, chunks));
        cut = firstTimes(rows, limit);
        if (rows.length < wanted || cut.times > limit) break;
      }
      const shown = rows.slice(0, cut.end);
      ctx.stats.rows = shown.length;
      return {
        data: shown.map(tradeJson),
        pagination: pagination(limit, cut.times > limit, () => cursors.issue(scope, req.filters, [shown[shown.length - 1].ts])),
        meta: {
          coverage: coverageMeta('trades', venue, [m.coin], req.from),
          // Trades come over the channel that carries the books: a span the books miss, they miss too; and
          // some only they miss (a resubscription's book is proved from before it, its trades are not replayed).
          gaps: [...gapsMeta(venue, m, 'books', pq.from, pq.to), ...gapsMeta(venue, m, 'trades', pq.from, pq.to)].sort((a, b) =>
            a.from! < b.from! ? -1 : 1,
          ),
        },
      };
    };

  return { trades };
}

function tradeJson(t: StoredTrade) {
  return {
    timestamp: iso(t.ts),
    exchange_time: iso(t.exchange_ts),
    recv_time: iso(t.recv_ts),
    outcome_index: t.outcome_index,
    outcome: t.outcome,
    token_id: t.token_id,
    price: t.price,
    size: t.size,
    side: t.side,
    fee_rate_bps: t.fee_rate_bps,
    transaction_hash: t.transaction_hash,
    source: t.source,
  };
}
