// Market discovery and records: the catalogue in memory, walked newest first, filtered lazily.
import type { Venue } from '../config.js';
import type { StoredMarket } from '../lake/reader.js';
import type { WindowStatus } from '../lake/certificate.js';
import { spooledNow, windowStatus } from '../lake/windowstatus.js';
import { marketJson } from './shape.js';
import { type MarketReference, resolutionCheck } from '../lake/referenceprice.js';
import { type RequestContext, type Result, type RouteKit, coverageMeta, listRequest, pagination, takePage, windowsOf } from './route.js';

export function marketHandlers({ lake, cursors, findMarket }: RouteKit) {
  const list =
    (id: string, venue: Venue, coins: readonly string[]) =>
    async (ctx: RequestContext): Promise<Result> => {
      const q = ctx.query;
      const req = listRequest(q, 'desc');
      const coin = ctx.path.coin ? [ctx.path.coin] : (q.coin ?? coins);
      const scope = `${id}:${coin.join(',')}`;
      const after = req.cursor ? cursors.read(req.cursor, scope, req.filters) : null;
      const windows = windowsOf(q);
      const statuses = q.status;
      const minCoverage = q.min_coverage;
      const states = q.state;
      const checks = q.resolution_check;
      const windowStatuses = new Map<string, WindowStatus>();
      const spooled = await spooledNow(lake);
      const statusOf = (m: StoredMarket) => {
        if (!windowStatuses.has(m.market_id)) windowStatuses.set(m.market_id, windowStatus(lake, m, ctx.now, spooled));
        return windowStatuses.get(m.market_id)!;
      };
      // Read once per market: the filter and the record both want it.
      const references = new Map<string, MarketReference>();
      const referenceOf = (m: StoredMarket) => {
        if (!references.has(m.market_id)) references.set(m.market_id, lake.marketReference(m));
        return references.get(m.market_id)!;
      };
      const { shown, more } = takePage(lake.walk(req.order, ctx.now), req.limit, (m) => {
        if (m.venue !== venue || !coin.includes(m.coin)) return false;
        if ((windows && !windows.includes(m.window)) || (statuses && !statuses.includes(m.status))) return false;
        if ((req.from !== null && m.end_time <= req.from) || (req.to !== null && m.start_time >= req.to)) return false;
        if (after) {
          const [s, mid] = after as [number, string];
          const later =
            req.order === 'desc'
              ? m.start_time < s || (m.start_time === s && m.market_id < mid)
              : m.start_time > s || (m.start_time === s && m.market_id > mid);
          if (!later) return false;
        }
        // Last: the filters that look past the catalogue (manifests and gaps).
        if (states && !states.includes(statusOf(m).state!)) return false;
        if (checks && !checks.includes(resolutionCheck(referenceOf(m)))) return false;
        return minCoverage === undefined || (statusOf(m).coverage?.share ?? -1) >= minCoverage;
      });
      ctx.stats.rows = shown.length;
      const last = shown[shown.length - 1];
      return {
        data: shown.map((m) => marketJson(m, statusOf(m), referenceOf(m))),
        pagination: pagination(req.limit, more, () => cursors.issue(scope, req.filters, [last.start_time, last.market_id])),
        meta: { coverage: coverageMeta('markets', venue, coin, req.from) },
      };
    };

  const one =
    (venue: Venue) =>
    async (ctx: RequestContext): Promise<Result> => ({
      data: ((m) => marketJson(m, windowStatus(lake, m, ctx.now), lake.marketReference(m)))(findMarket(venue, ctx, ctx.path.coin)),
    });

  return { list, one };
}
