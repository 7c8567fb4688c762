// Request id, cancellation, and the one log line per request, written when the response is done
// (streamed bodies included) so its timing and row count are the real ones. Never the query
// string: keys pasted into it must not reach the log.
import type Koa from 'koa';
import { newRequestId } from '../../edge/requestid.js';
import type { RequestLog } from '../requestlog.js';

const REQUEST_ID_RE = /^[A-Za-z0-9._:-]{1,128}$/;

/** Statuses of unpaid traffic that are counted rather than logged one by one (with keyed refusals: see `refused`). */
const COUNTED = new Set([401, 404, 405, 413, 429, 431]);

/** `hold`: keeps the sealed files a request reads on this disk until it ends (a bucket-served lake's cache); returns the release. */
export function requestLine(requestLog: RequestLog, hold?: () => () => void): Koa.Middleware {
  return async (ctx, next) => {
    const given = ctx.get('x-request-id');
    ctx.state.requestId = REQUEST_ID_RE.test(given) ? given : newRequestId();
    ctx.state.stats = { partitions: 0, rows: 0 };
    ctx.set('X-Request-Id', ctx.state.requestId);
    const started = performance.now();
    const controller = new AbortController();
    ctx.state.signal = controller.signal;
    const release = hold?.();
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
  };
}

/** The envelope's `meta` every response carries. */
export const responseMeta = (ctx: Koa.Context) => ({ request_id: ctx.state.requestId as string, timestamp: new Date().toISOString() });
