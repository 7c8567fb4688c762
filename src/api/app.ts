// The Koa app: request id and one log line per request, one error path rendering the
// envelope, then the route table (auth, plan, rate limit, validation, handler).
import { randomBytes } from 'node:crypto';
import Router from '@koa/router';
import Koa from 'koa';
import type { Logger } from '../log.js';
import { ApiError, echo, fail } from './errors.js';
import { KEY_RE, type KeyStore } from './keys.js';
import { parse, validator } from './params.js';
import { RateLimiter } from './ratelimit.js';
import { type FileBody, RawJson, type RequestContext, type Route } from './routes.js';
import { createReadStream } from 'node:fs';
import fs from 'node:fs/promises';

export interface AppOptions {
  routes: Route[];
  keys: KeyStore;
  rate: (plan: 'free' | 'paid') => number;
  log: Logger;
  now?: () => number;
}

const REQUEST_ID_RE = /^[A-Za-z0-9._:-]{1,128}$/;

function newRequestId(): string {
  return `req_${Date.now().toString(36)}${randomBytes(6).toString('hex')}`;
}

export function createApp(options: AppOptions): Koa {
  const { routes, keys, log } = options;
  const now = options.now ?? Date.now;
  const limiter = new RateLimiter();
  const app = new Koa();
  app.proxy = false;

  const meta = (ctx: Koa.Context) => ({ request_id: ctx.state.requestId as string, timestamp: new Date().toISOString() });

  // Request id, timing and the one log line per request (never the query string: keys
  // pasted into it must not reach the log).
  app.use(async (ctx, next) => {
    const given = ctx.get('x-request-id');
    ctx.state.requestId = REQUEST_ID_RE.test(given) ? given : newRequestId();
    ctx.state.stats = { partitions: 0, rows: 0 };
    ctx.set('X-Request-Id', ctx.state.requestId);
    const started = performance.now();
    log.debug({ req_id: ctx.state.requestId, method: ctx.method, path: ctx.path }, 'request started');
    try {
      await next();
    } finally {
      log.info({
        req_id: ctx.state.requestId, method: ctx.method, route: ctx.state.routeId ?? null, status: ctx.status,
        ms: Math.round((performance.now() - started) * 100) / 100, ...ctx.state.stats, key_id: ctx.state.keyId ?? null,
      }, 'request finished');
    }
  });

  // The one error path.
  app.use(async (ctx, next) => {
    try {
      await next();
      if (ctx.status === 404 && ctx.body === undefined) fail('NOT_FOUND', `No route ${echo(ctx.path)}. See /v3/openapi.json`);
    } catch (err) {
      const e = toApiError(err);
      if (e.status >= 500) log.error({ req_id: ctx.state.requestId, err }, 'request failed');
      ctx.status = e.status;
      ctx.remove('ETag');
      ctx.remove('Content-Disposition');
      ctx.set(e.headers);
      ctx.type = 'application/json';
      ctx.body = { error: { code: e.code, message: e.message, details: e.details }, meta: meta(ctx) };
    }
  });

  app.use(async (ctx, next) => {
    if (ctx.method !== 'GET' && ctx.method !== 'HEAD') {
      fail('METHOD_NOT_ALLOWED', `Method ${ctx.method} is not allowed; every route answers GET and HEAD`, [], { Allow: 'GET, HEAD' });
    }
    await next();
  });

  const router = new Router();
  for (const route of routes) {
    const pathCheck = validator(route.params.filter((p) => p.in === 'path'));
    const queryCheck = validator(route.params.filter((p) => p.in === 'query'));
    router.get(route.path, async (ctx) => {
      ctx.state.routeId = route.id;
      const key = await authorize(ctx, route);
      const path = parse(pathCheck, ctx.params as Record<string, string>, 'path');
      const query = parse(queryCheck, ctx.query as Record<string, string | string[]>, 'query');
      const rc: RequestContext = { query, path, key, now: now(), stats: ctx.state.stats };
      const result = await route.handle(rc);
      if (result.file) {
        await sendFile(ctx, result.file);
        return;
      }
      if (result.raw) {
        ctx.body = result.data;
        return;
      }
      const rest = { ...(result.pagination ? { pagination: result.pagination } : {}), meta: { ...meta(ctx), ...stripUndefined(result.meta) } };
      if (result.data instanceof RawJson) {
        ctx.type = 'application/json';
        ctx.body = `{"data":${result.data.text},${JSON.stringify(rest).slice(1)}`;
      } else {
        ctx.body = { data: result.data, ...rest };
      }
    });
  }
  app.use(router.routes());

  async function authorize(ctx: Koa.Context, route: Route) {
    if (route.access === 'public') return null;
    const header = ctx.get('authorization');
    const m = /^Bearer\s+(\S+)$/i.exec(header);
    if (!m) fail('AUTH_MISSING', 'Send your API key as "Authorization: Bearer <key>"; keys in the query string are not accepted');
    const key = KEY_RE.test(m[1]) ? await keys.find(m[1]) : null;
    if (!key) fail('AUTH_INVALID', 'The API key is unknown, revoked or malformed');
    ctx.state.keyId = key.key_id;
    const decision = limiter.take(key.key_id, options.rate(key.plan));
    ctx.set({ 'X-RateLimit-Limit': String(decision.limit), 'X-RateLimit-Remaining': String(decision.remaining), 'X-RateLimit-Reset': String(decision.reset) });
    if (!decision.allowed) {
      fail('RATE_LIMITED', `Over the ${key.plan} plan's rate of ${decision.limit} requests per second; retry after ${decision.reset} s`, [], { 'Retry-After': String(Math.max(1, decision.reset)) });
    }
    if (route.access === 'paid' && key.plan !== 'paid') fail('PLAN_REQUIRED', 'This route is available on paid plans; this key is on the free plan');
    return key;
  }

  return app;
}

function stripUndefined(obj: Record<string, unknown> | undefined): Record<string, unknown> {
  return Object.fromEntries(Object.entries(obj ?? {}).filter(([, v]) => v !== undefined));
}

function toApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  if (err instanceof URIError) return new ApiError(400, 'INVALID_PARAMETER', 'A path segment is not valid percent-encoding');
  const e = err as { status?: number; message?: string; expose?: boolean };
  if (typeof e.status === 'number' && e.status >= 400 && e.status < 500) {
    return new ApiError(e.status === 404 ? 404 : 400, e.status === 404 ? 'NOT_FOUND' : 'INVALID_PARAMETER', e.expose && e.message ? e.message : 'Bad request');
  }
  // A lake file missing, unreadable or corrupt: the lake, not the request, is at fault.
  if (/^IO Error|No files found|Cannot open file|Parquet file|magic bytes/i.test(e.message ?? '')) {
    return new ApiError(503, 'UNAVAILABLE', 'The lake cannot be read right now; retry shortly');
  }
  return new ApiError(500, 'INTERNAL_ERROR', 'Internal error; the request id identifies it in our logs');
}

/**
 * Streams an export from the named pipe DuckDB writes into. Headers wait for the first bytes:
 * a COPY that fails before writing anything is still a proper error response. A failure after
 * that aborts the transfer, so the client sees it truncated rather than complete.
 */
async function sendExport(ctx: Koa.Context, body: FileBody, producing: Promise<void>): Promise<void> {
  const stream = createReadStream(body.absolute);
  const removePipe = () => void fs.rm(body.absolute, { force: true });
  stream.once('close', removePipe);
  const failure = producing.then(() => null, (err: unknown) => err);
  const first = new Promise<'data'>((resolve, reject) => {
    stream.once('readable', () => resolve('data'));
    stream.once('error', reject);
  });
  const outcome = await Promise.race([first, failure.then((err) => err ?? 'data')]);
  if (outcome !== 'data') {
    // DuckDB never opened the pipe: open and close its write end so the pending read ends.
    await fs.open(body.absolute, 'w').then((h) => h.close()).catch(() => undefined);
    stream.destroy();
    removePipe();
    throw outcome;
  }
  void failure.then((err) => {
    if (err) stream.destroy(err as Error);
  });
  ctx.type = body.contentType;
  ctx.set('Content-Disposition', `attachment; filename="${body.filename}"`);
  ctx.body = stream;
}

/** Streams a sealed file: strong ETag (its sha256), If-None-Match -> 304, one Range -> 206 or 416. */
async function sendFile(ctx: Koa.Context, body: FileBody): Promise<void> {
  const { absolute, sha256 } = body;
  if (body.producing) {
    await sendExport(ctx, body, body.producing);
    return;
  }
  const size = (await fs.stat(absolute)).size;
  ctx.type = body.contentType;
  ctx.set('Content-Disposition', `attachment; filename="${body.filename}"`);
  const etag = `"${sha256}"`;
  ctx.set({ ETag: etag, 'Accept-Ranges': 'bytes', 'Cache-Control': 'private, max-age=86400, immutable' });
  const match = ctx.get('if-none-match');
  if (match && match.split(',').some((t) => t.trim() === etag || t.trim() === '*')) {
    ctx.status = 304;
    return;
  }
  const range = ctx.get('range');
  const single = /^bytes=(\d*)-(\d*)$/.exec(range.trim());
  if (range && single && (single[1] !== '' || single[2] !== '')) {
    let start = single[1] === '' ? size - Number(single[2]) : Number(single[1]);
    let end = single[1] === '' || single[2] === '' ? size - 1 : Math.min(Number(single[2]), size - 1);
    if (single[1] === '' && Number(single[2]) > size) start = 0;
    if (start >= size || start < 0 || end < start) {
      fail('RANGE_NOT_SATISFIABLE', `Range ${echo(range)} lies outside the file of ${size} bytes`, [{ param: 'Range', message: 'unsatisfiable' }], { 'Content-Range': `bytes */${size}` });
    }
    end = Math.max(start, end);
    ctx.status = 206;
    ctx.set('Content-Range', `bytes ${start}-${end}/${size}`);
    ctx.length = end - start + 1;
    ctx.body = createReadStream(absolute, { start, end });
    return;
  }
  // Several ranges, or a malformed header: the whole file, as RFC 9110 allows.
  ctx.length = size;
  ctx.body = createReadStream(absolute);
}
