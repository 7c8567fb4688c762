// The one error path: whatever a route or a middleware below throws is rendered here as the
// envelope. A 4xx says exactly what was wrong; a 5xx says nothing internal and is logged once,
// with the request id.
import type Koa from 'koa';
import { ObjectUnavailable } from '../../bucket/replica.js';
import { ApiError, echo, fail } from '../../edge/errors.js';
import { DuckError } from '../../lake/duckdb.js';
import type { Logger } from '../../log.js';
import { SlowReader } from '../exports.js';
import { responseMeta } from './requestline.js';

/** `anonymous`: a request for no route is limited per address like any keyless request. */
export function errorPath(log: Logger, anonymous: (ctx: Koa.Context) => void): Koa.Middleware {
  return async (ctx, next) => {
    try {
      await next();
      if (ctx.status === 404 && ctx.body === undefined) {
        anonymous(ctx);
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
      ctx.body = { error: { code: e.code, message: e.message, details: e.details }, meta: responseMeta(ctx) };
    }
  };
}

/** Errors Koa meets after the response started (a stream failing mid-transfer): once, through pino. */
export function afterStartFailed(log: Logger) {
  return (err: unknown, ctx?: Koa.Context) => {
    if (clientLeft(err)) return;
    if (err instanceof SlowReader) {
      log.warn({ req_id: ctx?.state.requestId ?? null, reason: err.message }, 'export cut off: its reader was too slow');
      return;
    }
    log.error({ req_id: ctx?.state.requestId ?? null, err }, 'response failed after it started');
  };
}

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
