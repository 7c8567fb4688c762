// The Koa app: request id and one log line per request, one error path rendering the
// envelope, then the route table (auth, plan, rate limit, validation, handler).
import { createReadStream } from 'node:fs';
import fs from 'node:fs/promises';
import { brotliCompressSync, constants as zlibConstants, gzipSync } from 'node:zlib';
import { freshPiece, gzipMember } from '../pages/gzip.js';
import type { Duplex } from 'node:stream';
import Router from '@koa/router';
import Koa from 'koa';
import { DuckError } from '../lake/duckdb.js';
import { ObjectUnavailable } from '../bucket/replica.js';
import type { Logger } from '../log.js';
import type { Admission } from './admission.js';
import { ApiError, echo, fail } from '../edge/errors.js';
import { authenticate } from '../edge/auth.js';
import { newRequestId } from '../edge/requestid.js';
import type { KeyStore } from '../edge/keys.js';
import { parse, validator } from './params.js';
import { type Limiter, RateLimiter } from '../edge/ratelimit.js';
import { RequestLog } from './requestlog.js';
import { SlowReader } from './exports.js';
import { pages } from './pages.js';
import { DeflatedJson, type FileBody, PAGE_FRAME, type PathParams, type Query, RawJson, type RequestContext, type Route } from './route.js';

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

const DATA_OPEN = PAGE_FRAME.before;
const DATA_OPEN_PIECE = freshPiece(DATA_OPEN);
/** Whether the client asks for encoding `e` (over identity). */
const takes = (ctx: Koa.Context, e: string) => !!ctx.get('accept-encoding') && ctx.acceptsEncodings(e, 'identity') === e;
const COMPRESS_MIN_BYTES = 1024;
const BROTLI = { params: { [zlibConstants.BROTLI_PARAM_QUALITY]: 1 } };
const GZIP = { level: 1 };
const REQUEST_ID_RE = /^[A-Za-z0-9._:-]{1,128}$/;
/** What a browser script may read of a response: ids, rate limits, retry hints, file validators. */
const EXPOSED =
  'X-Request-Id, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset, Retry-After, ETag, Content-Disposition, Content-Range';

/** Statuses of unpaid traffic that are counted rather than logged one by one (with keyed refusals: see `refused`). */
const COUNTED = new Set([401, 404, 405, 413, 429, 431]);

/** A client that hung up mid-response: not a server fault. */
function clientLeft(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  return (
    code === 'ERR_STREAM_PREMATURE_CLOSE' ||
    code === 'ECONNRESET' ||
    code === 'EPIPE' ||
    code === 'ABORT_ERR' ||
    (err as Error | undefined)?.name === 'AbortError'
  );
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

  const meta = (ctx: Koa.Context) => ({ request_id: ctx.state.requestId as string, timestamp: new Date().toISOString() });

  // Errors Koa meets after the response started (a stream failing mid-transfer): once, through pino.
  app.on('error', (err: unknown, ctx?: Koa.Context) => {
    if (clientLeft(err)) return;
    if (err instanceof SlowReader) {
      log.warn({ req_id: ctx?.state.requestId ?? null, reason: err.message }, 'export cut off: its reader was too slow');
      return;
    }
    log.error({ req_id: ctx?.state.requestId ?? null, err }, 'response failed after it started');
  });

  // Request id, cancellation, and the one log line per request, written when the response is
  // done (streamed bodies included) so its timing and row count are the real ones. Never the
  // query string: keys pasted into it must not reach the log.
  app.use(async (ctx, next) => {
    const given = ctx.get('x-request-id');
    ctx.state.requestId = REQUEST_ID_RE.test(given) ? given : newRequestId();
    ctx.state.stats = { partitions: 0, rows: 0 };
    ctx.set('X-Request-Id', ctx.state.requestId);
    const started = performance.now();
    const controller = new AbortController();
    ctx.state.signal = controller.signal;
    const release = options.hold?.();
    const finished = () => {
      release?.();
      const aborted = !ctx.res.writableFinished;
      // Refusals are counted, not logged one by one; a keyed client that left gets its own line, whatever ended it.
      if ((!ctx.state.keyId && COUNTED.has(ctx.status)) || (ctx.state.refused && !aborted)) {
        requestLog.counted(ctx.status, ctx.ip, ctx.path);
        return;
      }
      requestLog.finished({
        req_id: ctx.state.requestId,
        method: ctx.method,
        route: ctx.state.routeId ?? null,
        status: ctx.status,
        ms: Math.round((performance.now() - started) * 100) / 100,
        ...ctx.state.stats,
        key_id: ctx.state.keyId ?? null,
        ...(aborted ? { aborted } : {}),
      });
    };
    // The line is written once the response has closed and the handlers have returned, whichever
    // is last: a client that leaves while its key is being checked is still logged under its key.
    // A client gone before this ran (its socket closed as the request was parsed) gets no 'close'
    // event: its work is stopped at once.
    let closed = ctx.res.closed || ctx.req.socket.destroyed;
    let handled = false;
    if (closed) controller.abort();
    else
      ctx.res.once('close', () => {
        closed = true;
        if (!ctx.res.writableFinished) controller.abort();
        if (handled) finished();
      });
    try {
      await next();
    } finally {
      handled = true;
      if (closed) finished();
    }
  });

  // Compression when the client asks: pages shrink about eightfold. Brotli at quality 1 and
  // gzip at level 1 (about 0.15 and 0.3 ms for a 110 KiB page) compress within a few percent of
  // their slow settings; done in place, since a trip to the threadpool costs more than that.
  // Streams (file downloads, exports) go as they are: Parquet is compressed already.
  app.use(async (ctx, next) => {
    await next();
    const body = ctx.body;
    if (body === null || body === undefined || ctx.method === 'HEAD' || (typeof body === 'object' && 'pipe' in body)) return;
    if (ctx.response.get('Content-Encoding')) return;
    const raw = Buffer.isBuffer(body) ? body : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
    ctx.vary('Accept-Encoding');
    // Brotli whenever the client takes it (clients list gzip first out of habit, not preference).
    const encoding = raw.length < COMPRESS_MIN_BYTES ? 'identity' : takes(ctx, 'br') ? 'br' : takes(ctx, 'gzip') ? 'gzip' : 'identity';
    if (encoding === 'br') ctx.body = brotliCompressSync(raw, BROTLI);
    else if (encoding === 'gzip') ctx.body = gzipSync(raw, GZIP);
    else {
      if (!Buffer.isBuffer(body) && typeof body !== 'string') ctx.type = 'application/json';
      ctx.body = raw;
      return;
    }
    ctx.set('Content-Encoding', encoding);
    if (!ctx.response.type || ctx.response.type === 'application/octet-stream') ctx.type = 'application/json';
  });

  // The one error path.
  app.use(async (ctx, next) => {
    try {
      await next();
      if (ctx.status === 404 && ctx.body === undefined) {
        limitAnonymous(ctx);
        fail('NOT_FOUND', `No route ${echo(ctx.path)}. See /v3/openapi.json`);
      }
    } catch (err) {
      const e = toApiError(err);
      // Over a key's rate, or shed under load: a flood of these is counted, not logged line by line.
      ctx.state.refused = e.code === 'RATE_LIMITED' || (e.code === 'UNAVAILABLE' && 'Retry-After' in e.headers);
      // A query interrupted because its client left is not a fault, and a shed request is counted (a
      // client ignoring Retry-After must not write a stack per request onto the lake's disk).
      if (e.status >= 500 && !ctx.state.refused && !(ctx.state.signal as AbortSignal).aborted)
        log.error({ req_id: ctx.state.requestId, err }, 'request failed');
      ctx.status = e.status;
      ctx.remove('ETag');
      ctx.remove('Content-Disposition');
      ctx.set(e.headers);
      ctx.type = 'application/json';
      ctx.body = { error: { code: e.code, message: e.message, details: e.details }, meta: meta(ctx) };
    }
  });

  // CORS for the configured origins only (never `*`: these requests carry keys). A preflight
  // is answered here; from any other origin it gets no Access-Control headers.
  const corsOrigins = new Set(options.corsOrigins ?? []);
  app.use(async (ctx, next) => {
    const origin = ctx.get('origin');
    if (!origin) return next();
    ctx.vary('Origin');
    const allowed = corsOrigins.has(origin);
    if (ctx.method === 'OPTIONS' && ctx.get('access-control-request-method')) {
      limitAnonymous(ctx);
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
  });

  app.use(async (ctx, next) => {
    if (ctx.method !== 'GET' && ctx.method !== 'HEAD') {
      fail('METHOD_NOT_ALLOWED', `Method ${ctx.method} is not allowed; every route answers GET and HEAD`, [], { Allow: 'GET, HEAD' });
    }
    // Nothing here reads a body, and one could be any size: refused before anything else.
    if ((ctx.request.length ?? 0) > 0 || ctx.get('transfer-encoding')) {
      fail('PAYLOAD_TOO_LARGE', 'GET and HEAD requests carry no body here; send parameters in the query string', [], {
        Connection: 'close',
      });
    }
    await next();
  });

  app.use(pages());

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
      // Each key waits in its own line, weighted by its plan's rate (api/admission.ts).
      const release = route.heavy
        ? await admission.enter(ctx.state.signal, { id: key?.key_id ?? `address:${ctx.ip}`, weight: options.rate(key?.plan ?? 'free') })
        : null;
      let result;
      try {
        result = await route.handle(rc);
      } finally {
        release?.();
      }
      if (result.status) ctx.status = result.status;
      if (result.headers) ctx.set(result.headers);
      if (result.file) {
        await sendFile(ctx, result.file);
        return;
      }
      if (result.raw) {
        ctx.body = result.data;
        return;
      }
      const rest = {
        ...(result.pagination ? { pagination: result.pagination } : {}),
        meta: { ...meta(ctx), ...stripUndefined(result.meta) },
      };
      if (result.data instanceof DeflatedJson) {
        // Pre-deflated pieces go out gzipped whatever else the client takes: they cost no compression.
        const tail = Buffer.from(`,${JSON.stringify(rest).slice(1)}`);
        ctx.type = 'application/json';
        ctx.vary('Accept-Encoding');
        ctx.set('Content-Encoding', 'gzip');
        ctx.body = gzipMember([DATA_OPEN_PIECE, ...result.data.pieces, freshPiece(tail)]);
      } else if (result.data instanceof RawJson) {
        const { text } = result.data;
        const tail = `,${JSON.stringify(rest).slice(1)}`;
        ctx.type = 'application/json';
        const framed = result.data.framed;
        const end = framed && Buffer.isBuffer(text) ? PAGE_FRAME.before.length + text.length : 0;
        if (framed && Buffer.byteLength(tail) <= framed.length - end) ctx.body = framed.subarray(0, end + framed.write(tail, end));
        else ctx.body = typeof text === 'string' ? `{"data":${text}${tail}` : Buffer.concat([DATA_OPEN, text, Buffer.from(tail)]);
      } else {
        ctx.body = { data: result.data, ...rest };
      }
    });
  }
  app.use(router.routes());

  /** Failed attempts without a valid key are limited per client address. */
  function limitAnonymous(ctx: Koa.Context): void {
    const decision = addresses.take(ctx.ip, options.anonRate);
    if (!decision.allowed) {
      fail('RATE_LIMITED', `Too many requests without a valid API key from this address; retry after ${decision.reset} s`, [], {
        'Retry-After': String(Math.max(1, decision.reset)),
      });
    }
  }

  async function authorize(ctx: Koa.Context, route: Route) {
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
  }

  function clientError(err: NodeJS.ErrnoException, socket: Duplex): void {
    const tooLarge = err.code === 'HPE_HEADER_OVERFLOW';
    const status = tooLarge ? 431 : 400;
    requestLog.counted(status, (socket as unknown as { remoteAddress?: string }).remoteAddress ?? 'unknown', '(unparsed)');
    if (!socket.writable || err.code === 'ECONNRESET') {
      socket.destroy();
      return;
    }
    const requestId = newRequestId();
    const body = JSON.stringify({
      error: tooLarge
        ? {
            code: 'HEADERS_TOO_LARGE',
            message: 'The request line and headers exceed 16 KiB; a cursor or parameter is far longer than any this service issues',
            details: [],
          }
        : { code: 'INVALID_PARAMETER', message: 'The request is not valid HTTP/1.1', details: [] },
      meta: { request_id: requestId, timestamp: new Date().toISOString() },
    });
    socket.end(
      `HTTP/1.1 ${status} ${tooLarge ? 'Request Header Fields Too Large' : 'Bad Request'}\r\n` +
        `Content-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\n` +
        `X-Request-Id: ${requestId}\r\nConnection: close\r\n\r\n${body}`,
    );
  }

  return { koa: app, requestLog, clientError };
}

function stripUndefined(obj: Record<string, unknown> | undefined): Record<string, unknown> {
  return Object.fromEntries(Object.entries(obj ?? {}).filter(([, v]) => v !== undefined));
}

function toApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  if (err instanceof URIError) return new ApiError(400, 'INVALID_PARAMETER', 'A path segment is not valid percent-encoding');
  const e = err as { status?: number; message?: string; expose?: boolean };
  if (typeof e.status === 'number' && e.status >= 400 && e.status < 500) {
    return new ApiError(
      e.status === 404 ? 404 : 400,
      e.status === 404 ? 'NOT_FOUND' : 'INVALID_PARAMETER',
      e.expose && e.message ? e.message : 'Bad request',
    );
  }
  // The bucket a replica serves from is down, or lacks a file, or gave other bytes than its
  // manifest names: nothing was kept, so a retry fetches again (the replica logged the cause).
  if (err instanceof ObjectUnavailable) {
    return new ApiError(503, 'UNAVAILABLE', 'Part of the archive cannot be fetched from storage right now; retry shortly', [], {
      'Retry-After': '5',
    });
  }
  // A lake file missing, unreadable or corrupt, or the disk failing under an export: the lake,
  // not the request, is at fault.
  const code = (err as NodeJS.ErrnoException).code;
  if ((err instanceof DuckError && err.unreadable) || code === 'ENOSPC' || code === 'EIO' || code === 'EMFILE' || code === 'ENFILE') {
    return new ApiError(503, 'UNAVAILABLE', 'The lake cannot be read right now; retry shortly');
  }
  return new ApiError(500, 'INTERNAL_ERROR', 'Internal error; the request id identifies it in our logs');
}

/** Streams a sealed file: strong ETag (its sha256), If-None-Match -> 304, one Range -> 206 or 416; or an export as it is written. */
async function sendFile(ctx: Koa.Context, body: FileBody): Promise<void> {
  ctx.type = body.contentType;
  ctx.set('Content-Disposition', `attachment; filename="${body.filename}"`);
  if ('stream' in body) {
    ctx.body = body.stream;
    return;
  }
  const { absolute, sha256 } = body;
  const size = (await fs.stat(absolute)).size;
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
      fail(
        'RANGE_NOT_SATISFIABLE',
        `Range ${echo(range)} lies outside the file of ${size} bytes`,
        [{ param: 'Range', message: 'unsatisfiable' }],
        { 'Content-Range': `bytes */${size}` },
      );
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
