// The last step of a request: a route's Result shaped into the envelope (data, pagination, meta),
// with pre-rendered page text spliced in as it is, or a file streamed with its validators.
import { createReadStream } from 'node:fs';
import fs from 'node:fs/promises';
import type Koa from 'koa';
import { echo, fail } from '../edge/errors.js';
import { freshPiece, gzipMember } from '../pages/gzip.js';
import { responseMeta } from './middleware/requestline.js';
import { DeflatedJson, type FileBody, PAGE_FRAME, RawJson, type Result } from './route.js';

const DATA_OPEN = PAGE_FRAME.before;
const DATA_OPEN_PIECE = freshPiece(DATA_OPEN);

export async function respond(ctx: Koa.Context, result: Result): Promise<void> {
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
    meta: { ...responseMeta(ctx), ...stripUndefined(result.meta) },
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
}

function stripUndefined(obj: Record<string, unknown> | undefined): Record<string, unknown> {
  return Object.fromEntries(Object.entries(obj ?? {}).filter(([, v]) => v !== undefined));
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
