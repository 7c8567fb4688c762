// Trades of one market: every trade event the venue streamed, or (venues that send none) each
// last-trade price REST showed changing, labelled by `source`. Paged like the timeseries: a page
// never splits the trades of one time, and the cursor is that time.
import type { DuckDBDataChunk } from '@duckdb/node-api';
import type { Venue } from '../config.js';
import { relation } from '../lake/sql.js';
import type { TradeRow } from '../records.js';
import { exportFile } from './bulk.js';
import { TRADE_COLUMNS, planPartitions, tradesSql } from './plan.js';
import { type RequestContext, type Result, type RouteKit, coverageMeta, firstTimes, page, resolveOutcome, sql } from './route.js';
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
      if (ctx.query.format && ctx.query.format !== 'json') return exportFile(kit, ctx, m, 'trades', pq, 'trades');
      const plan = planPartitions('trades', m, pq.from, pq.to);
      ctx.stats.partitions = plan.partitions.length;
      const source = relation('trades', await lake.files(plan.partitions), TRADE_COLUMNS);
      const limit = pq.limit;
      let rows: StoredTrade[] = [];
      let cut = { times: 0, end: 0 };
      // One trade more than shown at first; more only when some time holds several.
      for (let wanted = limit + 1; source; wanted *= 2) {
        rows = await lake.duck
          .for(ctx.signal)
          .chunks(...sql(tradesSql(source, pq, wanted)))
          .then(readTrades);
        cut = firstTimes(rows, limit);
        if (rows.length < wanted || cut.times > limit) break;
      }
      const shown = rows.slice(0, cut.end);
      ctx.stats.rows = shown.length;
      return {
        data: shown.map(tradeJson),
        pagination: page(
          limit,
          cut.times,
          () => [shown[shown.length - 1].ts],
          (k) => cursors.issue(scope, req.filters, k),
        ),
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

function readTrades(chunks: DuckDBDataChunk[]): StoredTrade[] {
  const out: StoredTrade[] = [];
  const at = (name: (typeof TRADE_COLUMNS)[number]) => TRADE_COLUMNS.indexOf(name);
  for (const chunk of chunks) {
    const column = (name: (typeof TRADE_COLUMNS)[number]) => chunk.getColumnVector(at(name));
    const [ts, outcomeIndex, outcome, token, price, size, side, fee, hash, source, exchangeTs, recvTs] = [
      column('ts'),
      column('outcome_index'),
      column('outcome'),
      column('token_id'),
      column('price'),
      column('size'),
      column('side'),
      column('fee_rate_bps'),
      column('transaction_hash'),
      column('source'),
      column('exchange_ts'),
      column('recv_ts'),
    ];
    for (let row = 0; row < chunk.rowCount; row++)
      out.push({
        ts: ts.getItem(row) as number,
        outcome_index: outcomeIndex.getItem(row) as number,
        outcome: outcome.getItem(row) as string,
        token_id: token.getItem(row) as string,
        price: price.getItem(row) as number,
        size: size.getItem(row) as number | null,
        side: side.getItem(row) as TradeRow['side'],
        fee_rate_bps: fee.getItem(row) as number | null,
        transaction_hash: hash.getItem(row) as string | null,
        source: source.getItem(row) as TradeRow['source'],
        exchange_ts: exchangeTs.getItem(row) as number | null,
        recv_ts: recvTs.getItem(row) as number,
      });
  }
  return out;
}
