// The route table: every route once, one line each, with its access, its response schema, its
// parameters and its handler. The server, the validators and the OpenAPI document are all built
// from this list; the handlers live in one module per resource.
import type { Venue } from '../config.js';
import { bookHandlers } from './books.js';
import { fileHandlers } from './bulk.js';
import { marketHandlers } from './markets.js';
import { P, POLY_COINS, type ParamSpec, WALLET_COINS } from './params.js';
import { type Access, type RequestContext, type Result, type Route, type RouteDeps, routeKit } from './route.js';
import { seriesHandlers } from './series.js';
import { tradeHandlers } from './trades.js';
import { certificateHandlers } from './certificate.js';
import { referenceHandlers } from './reference.js';

const NAMESPACES = ['wallet-prediction', 'provider-alias'] as const;

type Handler = (ctx: RequestContext) => Promise<Result>;

function route(
  id: string,
  path: string,
  access: Access,
  response: string,
  params: ParamSpec[],
  handle: Handler,
  summary: string,
  options: { list?: boolean; heavy?: boolean } = {},
): Route {
  return { id, path, access, response, params, handle, summary, list: options.list ?? false, heavy: options.heavy };
}

/**
 * `<path>.csv` and `<path>.parquet`: the `format=` exports as operations of their own, each
 * with one response type and no paging parameters, which is what generated clients handle.
 */
function withExports(r: Route): Route[] {
  return [
    r,
    ...(['csv', 'parquet'] as const).map((format) => ({
      ...r,
      id: `${r.id}.${format}`,
      path: `${r.path}.${format}`,
      summary: `${r.summary.replace(/, cursor-paginated\.$|\.$/, '')}: the whole range as one ${format === 'csv' ? 'CSV' : 'Parquet'} file.`,
      response: format === 'csv' ? 'Csv' : 'ParquetExport',
      list: false,
      params: r.params.filter((p) => !['limit', 'cursor', 'format'].includes(p.name)),
      handle: (ctx: RequestContext) => r.handle({ ...ctx, query: { ...ctx.query, format } }),
    })),
  ];
}

export function buildRoutes(deps: RouteDeps): Route[] {
  const kit = routeKit(deps);
  const markets = marketHandlers(kit);
  const books = bookHandlers(kit);
  const series = seriesHandlers(kit);
  const trades = tradeHandlers(kit);
  const certificates = certificateHandlers(kit);
  const files = fileHandlers(kit);
  const reference = referenceHandlers(kit);
  const list = { list: true };
  const heavy = { heavy: true };
  const pages = { list: true, heavy: true };
  const wallet: Venue = 'wallet-prediction';
  const poly: Venue = 'polymarket';
  const range = [P.start_time, P.end_time];
  const paging = [P.limit, P.cursor, P.order];

  // prettier-ignore
  const routes: Route[] = [
    route('health', '/v3/health', 'public', 'Health', [], async () => deps.health(), 'Service and lake health.'),
    route('openapi', '/v3/openapi.json', 'public', 'OpenApi', [], async () => ({ data: deps.openapi(), raw: true }), 'This document.'),
    route('whoami', '/v3/whoami', 'key', 'WhoAmI', [], async (ctx) => ({ data: { key_id: ctx.key!.key_id, plan: ctx.key!.plan, rate_limit: { per_second: deps.rate(ctx.key!.plan) } } }), 'The calling key, its plan and its rate.'),
    // The file routes first: `/v3/reference/:coin` would take `btc.csv` for a coin.
    ...withExports(route('reference', '/v3/reference/:coin', 'key', 'ReferenceList', [P.referenceCoin, P.source, ...range, P.limit, P.cursor, P.order, P.format], reference.reference, "A coin's reference prices as Polymarket's price socket relayed them (Chainlink, the markets' resolution source, or Binance), with the feed's gaps; without a range, the hour before end_time (default now), cursor-paginated.", pages)).reverse(),
  ];

  for (const ns of NAMESPACES) {
    const b = `/v3/${ns}`;
    // prettier-ignore
    routes.push(
      route(`${ns}.markets`, `${b}/markets`, 'paid', 'MarketList', [P.walletCoin, P.window, P.status, P.state, P.minCoverage, P.resolutionCheck, ...range, ...paging], markets.list('wp.markets', wallet, WALLET_COINS), 'Discover and filter markets.', list),
      route(`${ns}.orderbook`, `${b}/:market_id/orderbook/latest`, 'paid', 'LatestBook', [P.marketId, P.outcome], books.latest(wallet), 'The newest recorded full-L2 book of a market.'),
      ...withExports(route(`${ns}.snapshots`, `${b}/:market_id/snapshots`, 'paid', 'SnapshotList', [P.marketId, ...range, ...paging, P.outcome, P.interval, P.format], books.snapshots('wp.snapshots', wallet, true), 'Recorded full-L2 snapshots, cursor-paginated.', pages)),
      route(`${ns}.snapshotAt`, `${b}/:market_id/snapshots/at`, 'paid', 'SnapshotAt', [P.marketId, P.timestamp, P.outcome], books.snapshotAt('wp.snapshots', wallet, true), 'The book in force at an instant: the newest recorded at or before it.', heavy),
      route(`${ns}.changes`, `${b}/:market_id/orderbook/changes`, 'paid', 'ChangeList', [P.marketId, ...range, P.limit, P.cursor, P.outcome], books.changes('wp.changes', wallet), 'Recorded book changes: a snapshot per outcome, then the levels each recorded book changed; applied in order they rebuild every recorded book.', pages),
      ...withExports(route(`${ns}.timeseries`, `${b}/:market_id/timeseries`, 'paid', 'SampleList', [P.marketId, P.metric, P.outcome, ...range, P.interval, ...paging, P.format], series.timeseries('wp.timeseries', wallet), 'Samples of chance, price or last_trade.', pages)),
      ...withExports(route(`${ns}.trades`, `${b}/:market_id/trades`, 'paid', 'TradeList', [P.marketId, ...range, ...paging, P.outcome, P.format], trades.trades('wp.trades', wallet), 'Recorded trades: every trade event the venue sent, or where it sends none the last-trade price each time REST showed it change (`source` says which).', pages)),
      route(`${ns}.certificate`, `${b}/:market_id/certificate`, 'paid', 'Certificate', [P.marketId], certificates.certificate(wallet), 'How complete the record of the market window is: coverage, gaps by cause and reason, books and trades recorded, clock offset.', heavy),
      route(`${ns}.coverage`, `${b}/coverage`, 'paid', 'Coverage', [], files.coverage(wallet), 'What history exists: published coverage, recorded spans and every recorded gap.'),
      route(`${ns}.files`, `${b}/files`, 'paid', 'FileList', [P.dataset, P.walletCoin, P.window, ...range, P.limit, P.cursor], files.list('wp.files', wallet, () => b, WALLET_COINS), 'Sealed Parquet files of the lake, with rows and sha256.', list),
      route(`${ns}.file`, `${b}/files/*path`, 'paid', 'Parquet', [P.filePath], files.download(wallet), 'One sealed Parquet file (ETag, If-None-Match, single Range).'),
      route(`${ns}.market`, `${b}/:market_id`, 'paid', 'MarketOne', [P.marketId], markets.one(wallet), 'One market record.'),
    );
  }

  // prettier-ignore
  routes.push(
    route('coin.files', '/v3/:coin/files', 'key', 'FileList', [P.coin, P.dataset, P.window, ...range, P.limit, P.cursor], files.list('coin.files', poly, (ctx) => `/v3/${ctx.path.coin}`, POLY_COINS), 'Sealed Parquet files of another venue for one coin.', list),
    route('coin.file', '/v3/:coin/files/*path', 'key', 'Parquet', [P.coin, P.filePath], files.download(poly), 'One sealed Parquet file of another venue.'),
    route('coin.markets', '/v3/:coin/markets', 'key', 'MarketList', [P.coin, P.window, P.type, P.status, P.state, P.minCoverage, P.resolutionCheck, ...range, P.limit, P.cursor, P.order], markets.list('coin.markets', poly, POLY_COINS), 'Markets of other venues for one coin.', list),
    ...withExports(route('coin.snapshots', '/v3/:coin/markets/:market_id/snapshots', 'key', 'SnapshotList', [P.coin, P.marketId, P.includeOrderbook, P.interval, ...range, ...paging, P.outcome, P.format], books.snapshots('coin.snapshots', poly, false), 'Recorded snapshots of another venue’s market.', pages)),
    route('coin.snapshotAt', '/v3/:coin/markets/:market_id/snapshots/at', 'key', 'SnapshotAt', [P.coin, P.marketId, P.timestamp, P.outcome, P.includeOrderbook], books.snapshotAt('coin.snapshots', poly, false), 'The book in force at an instant: the newest recorded at or before it.', heavy),
    route('coin.changes', '/v3/:coin/markets/:market_id/orderbook/changes', 'key', 'ChangeList', [P.coin, P.marketId, ...range, P.limit, P.cursor, P.outcome], books.changes('coin.changes', poly), 'Recorded book changes of another venue’s market: a snapshot per outcome, then the levels each recorded book changed.', pages),
    ...withExports(route('coin.trades', '/v3/:coin/markets/:market_id/trades', 'key', 'TradeList', [P.coin, P.marketId, ...range, ...paging, P.outcome, P.format], trades.trades('coin.trades', poly), 'Every trade event another venue’s market channel sent (`last_trade_price`), cursor-paginated.', pages)),
    route('coin.certificate', '/v3/:coin/markets/:market_id/certificate', 'key', 'Certificate', [P.coin, P.marketId], certificates.certificate(poly), 'How complete the record of another venue’s market window is.', heavy),
    route('coin.market', '/v3/:coin/markets/:market_id', 'key', 'MarketOne', [P.coin, P.marketId], markets.one(poly), 'One market record of another venue.'),
  );
  return routes;
}
