// What Node's HTTP parser rejects before Koa sees it (oversized headers, garbage) still gets the
// envelope and a request id, written to the socket by hand, and is counted like other refusals.
import type { Duplex } from 'node:stream';
import { newRequestId } from '../../edge/requestid.js';
import type { RequestLog } from '../requestlog.js';

export function answerClientError(requestLog: RequestLog, err: NodeJS.ErrnoException, socket: Duplex): void {
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
