// Every route answers GET and HEAD, and nothing reads a body, which could be any size: anything
// else is refused before it costs more.
import type Koa from 'koa';
import { fail } from '../../edge/errors.js';

export function readsOnly(): Koa.Middleware {
  return async (ctx, next) => {
    if (ctx.method !== 'GET' && ctx.method !== 'HEAD') {
      fail('METHOD_NOT_ALLOWED', `Method ${ctx.method} is not allowed; every route answers GET and HEAD`, [], { Allow: 'GET, HEAD' });
    }
    if ((ctx.request.length ?? 0) > 0 || ctx.get('transfer-encoding')) {
      fail('PAYLOAD_TOO_LARGE', 'GET and HEAD requests carry no body here; send parameters in the query string', [], {
        Connection: 'close',
      });
    }
    await next();
  };
}
