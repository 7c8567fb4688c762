// CORS for the configured origins only (never `*`: these requests carry keys). A preflight is
// answered here; from any other origin it gets no Access-Control headers.
import type Koa from 'koa';

/** What a browser script may read of a response: ids, rate limits, retry hints, file validators. */
const EXPOSED =
  'X-Request-Id, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset, Retry-After, ETag, Content-Disposition, Content-Range';

/** `anonymous`: a preflight carries no key, so it is limited per address like any keyless request. */
export function cors(origins: readonly string[], anonymous: (ctx: Koa.Context) => void): Koa.Middleware {
  const allowedOrigins = new Set(origins);
  return async (ctx, next) => {
    const origin = ctx.get('origin');
    if (!origin) return next();
    ctx.vary('Origin');
    const allowed = allowedOrigins.has(origin);
    if (ctx.method === 'OPTIONS' && ctx.get('access-control-request-method')) {
      anonymous(ctx);
      if (allowed) {
        ctx.set({
          'Access-Control-Allow-Origin': origin,
          'Access-Control-Allow-Methods': 'GET, HEAD',
          'Access-Control-Allow-Headers': 'Authorization, If-None-Match, Range, X-Request-Id, Accept',
          'Access-Control-Max-Age': '600',
        });
      }
      ctx.status = 204;
      return;
    }
    if (allowed) ctx.set({ 'Access-Control-Allow-Origin': origin, 'Access-Control-Expose-Headers': EXPOSED });
    await next();
  };
}
