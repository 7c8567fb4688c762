// The Koa app, composed: request id and one log line per request, compression, one error path
// rendering the envelope, CORS, reads only, the page bodies' frames, then the route table
// (auth, rate limit, validation, admission, handler, envelope).
import type { Duplex } from 'node:stream';
import Router from '@koa/router';
import Koa from 'koa';
import type { Logger } from '../log.js';
import type { Admission } from './admission.js';
import { fail } from '../edge/errors.js';
import { authenticate } from '../edge/auth.js';
import type { KeyStore } from '../edge/keys.js';
import { parse, validator } from './params.js';
import { type Limiter, RateLimiter } from '../edge/ratelimit.js';
import { RequestLog } from './requestlog.js';
import { pages } from './pages.js';
import { answerClientError } from './middleware/clienterror.js';
import { compression, takes } from './middleware/compress.js';
import { cors } from './middleware/cors.js';
import { afterStartFailed, errorPath } from './middleware/errorpath.js';
import { readsOnly } from './middleware/readsonly.js';
import { requestLine } from './middleware/requestline.js';
import { respond } from './respond.js';
import { type PathParams, type Query, type RequestContext, type Route, exporting } from './route.js';

export interface AppOptions {
  routes: Route[];
  keys: KeyStore;
  rate: (plan: 'free' | 'paid') => number;
  /** Requests per second a client address may make without a valid key. */
  anonRate: number;
  /** Browser origins allowed to call the API; others get no CORS headers, so browsers refuse them. */
  corsOrigins?: readonly string[];
  admission: Admission;
  log: Logger;
  now?: () => number;
  /** Keys' limits: this process's own buckets by default, leased from the primary in a cluster. */
  limiter?: Limiter;
  /** Keeps the sealed files a request reads on this disk until it ends (a bucket-served lake's cache); returns the release. */
  hold?: () => () => void;
}

export interface App {
  koa: Koa;
  requestLog: RequestLog;
  /** Answers what Node's HTTP parser rejects before Koa sees it (oversized headers, garbage). */
  clientError(err: NodeJS.ErrnoException & { code?: string }, socket: Duplex): void;
}

export function createApp(options: AppOptions): App {
  const { routes, keys, log, admission } = options;
  const now = options.now ?? Date.now;
  const limiter = options.limiter ?? new RateLimiter();
  // Without a valid key there is nothing to bill: a flood guard per process is enough.
  const addresses = new RateLimiter();
  const requestLog = new RequestLog(log);
  const app = new Koa();
  app.proxy = false;

  /** Failed attempts without a valid key are limited per client address. */
  const limitAnonymous = (ctx: Koa.Context): void => {
    const decision = addresses.take(ctx.ip, options.anonRate);
    if (!decision.allowed) {
      fail('RATE_LIMITED', `Too many requests without a valid API key from this address; retry after ${decision.reset} s`, [], {
        'Retry-After': String(Math.max(1, decision.reset)),
      });
    }
  };

  app.on('error', afterStartFailed(log));
  app.use(requestLine(requestLog, options.hold));
  app.use(compression());
  app.use(errorPath(log, limitAnonymous));
  app.use(cors(options.corsOrigins ?? [], limitAnonymous));
  app.use(readsOnly());
  app.use(pages());

  const authorize = async (ctx: Koa.Context, route: Route) => {
    if (route.access === 'public') return null;
    // Keys only in the header here: a query string ends up in logs and browser histories.
    const presented = /^Bearer\s+(\S+)$/i.exec(ctx.get('authorization'))?.[1];
    const key = await authenticate({ keys, limiter, rate: options.rate }, presented, {
      need: route.access === 'paid' ? 'paid' : 'key',
      howToSend: 'Send your API key as "Authorization: Bearer <key>"; keys in the query string are not accepted',
      paidOnly: 'This route is available on paid plans; this key is on the free plan',
      anonymous: () => limitAnonymous(ctx),
      decided: (decision) =>
        ctx.set({
          'X-RateLimit-Limit': String(decision.limit),
          'X-RateLimit-Remaining': String(decision.remaining),
          'X-RateLimit-Reset': String(decision.reset),
        }),
    });
    ctx.state.keyId = key.key_id;
    return key;
  };

  const router = new Router();
  for (const route of routes) {
    const pathCheck = validator(route.params.filter((p) => p.in === 'path'));
    const queryCheck = validator(route.params.filter((p) => p.in === 'query'));
    router.get(route.path, async (ctx) => {
      ctx.state.routeId = route.id;
      const key = await authorize(ctx, route);
      const path = parse(pathCheck, ctx.params as Record<string, string>, 'path');
      const query = parse(queryCheck, ctx.query as Record<string, string | string[]>, 'query');
      // Typed once, here: ajv has just checked both against the route's ParamSpecs.
      const rc: RequestContext = {
        query: query as Query,
        path: path as PathParams,
        key,
        now: now(),
        stats: ctx.state.stats,
        signal: ctx.state.signal,
        gzip: takes(ctx, 'gzip'),
      };
      // Each key waits in its own line, weighted by its plan's rate (api/admission.ts). An export
      // (format=csv|parquet) is admitted by an export slot instead (api/exports.ts).
      const release =
        route.heavy && !exporting(rc.query)
          ? await admission.enter(ctx.state.signal, { id: key?.key_id ?? `address:${ctx.ip}`, weight: options.rate(key?.plan ?? 'free') })
          : null;
      let result;
      try {
        result = await route.handle(rc);
      } finally {
        release?.();
      }
      await respond(ctx, result);
    });
  }
  app.use(router.routes());

  return { koa: app, requestLog, clientError: (err, socket) => answerClientError(requestLog, err, socket) };
}
