// Serving copies: every sealed books file's markets rendered once, when the file is written, into a
// file beside the lake (DATA_DIR/serving/books/<sha256 of the Parquet file>.v<N>.pages). A page
// of a market never read before is then a read and an inflate of the few chunks it shows, where
// the Parquet path costs a DuckDB statement that decodes the market's four ladder lists
// (BENCHMARKS.md, "Where a cold page goes"). The Parquet files stay the lake: analysts, exports and
// every other route read them; a copy is derived data, named by its file's content, so it is never
// stale, two writers of one copy write the same bytes, and a missing one only means the SQL path.
// This file is the format; copywriter.ts writes copies, copyreader.ts serves pages from them.
//
// Layout: market blocks, then the index (JSON: market -> [offset, length, rows, table]), then a
// 20-byte trailer (index length, the index's CRC-32, format version, magic). A block is its table, deflated with
// zlib's wrapper (`table` bytes; its Adler-32 checked when inflated), then its chunks. The text is stored once, as chunks of the common page shape with
// ladders, deflated: a gzip page of that shape is mostly chunks sent as they are, and every other
// page inflates the chunks it shows and takes its rows' text out of them. The other view (best
// levels and depth) is cut from the ladders' text, its depths summed from the sizes there.
// Kept as plain text (v2), the copies were 7x the Parquet's bytes on the bench lake and 49x on a
// recorded one; both views deflated in chunks of 20 times (v3) 0.8x and 2.4x; this, 0.6x and 0.9x
// (BENCHMARKS.md, "Disk").
import path from 'node:path';
import { promisify } from 'node:util';
import zlib from 'node:zlib';
import { HEAD, type MarketBooks, type PageSpec, renderPage } from './render.js';

/** Bumped whenever rendering or the layout changes: copies of an older one are then simply not found. */
export const SERVING_VERSION = 6;
export const MAGIC = Buffer.from('PMBOOKPG');
export const TRAILER = 20;

export function servingCopyPath(servingDir: string, sha256: string): string {
  return path.join(servingDir, 'books', sha256.slice(0, 2), `${sha256}.v${SERVING_VERSION}.pages`);
}

export interface CopyIndex {
  version: number;
  rows: number;
  /** Capture times a chunk holds (CHUNK_TIMES when written). */
  chunkTimes: number;
  /** market_id -> [offset, length, rows, deflated table's length]: the chunks follow the table. */
  markets: Record<string, CopyEntry>;
}

export type CopyEntry = [offset: number, length: number, rows: number, table: number];

/**
 * Capture times a chunk holds: the default limit (pages walked from a market's open at 100, 500
 * or 1000 start and end on a chunk's edge). Chunks of 100 times deflate to 14 B a book row on a
 * recorded lake, of 20 times to 24 (the first book of each outcome in a chunk costs whole); a
 * page inside a chunk inflates the whole chunk (about 0.3 ms for 100 times of ladders).
 */
export const CHUNK_TIMES = 100;
/** Deflated once, at seal, on the threadpool: level 6 costs nothing a request waits on. */
const DEFLATE_LEVEL = 6;
const deflateRaw = promisify(zlib.deflateRaw);
/** zlib's wrapper: its Adler-32 is checked when the table is inflated (raw deflate checks nothing). */
const deflate = promisify(zlib.deflate);

/** Whether pages of this shape are pre-deflated: with ladders, what a client walking a market from its open asks for. */
export const predeflated = (q: PageSpec, ladders: boolean): boolean =>
  ladders && q.order === 'asc' && q.intervalMs === null && q.outcomeIndex === null;

export const DEFLATED_SHAPE: PageSpec = { from: -Infinity, to: Infinity, order: 'asc', after: null, intervalMs: null, outcomeIndex: null };

/** The chunks: chunk c is data bytes [at[c], at[c + 1]) inflating to `length[c]` bytes of text whose CRC-32 is `crc[c]`. */
export interface ChunkTable {
  at: Uint32Array;
  crc: Uint32Array;
  length: Uint32Array;
  /** CRC-32 of the deflated bytes: checked before a chunk is sent as it is, never inflated. */
  zcrc: Uint32Array;
}

/**
 * A block's table, inflated: each row's time, outcome and ladder text length, and the chunk
 * table. Each capture time's first row (`firstRow`) is derived from `ts`, not stored.
 */
export interface BlockTable {
  n: number;
  ts: Float64Array;
  outcome: Int32Array;
  /** Text length of each row's book with ladders. */
  lengths: Uint32Array;
  times: number;
  /** Capture time g is rows [firstRow[g], firstRow[g + 1]). */
  firstRow: Uint32Array;
  k: number;
  chunks: number;
  table: ChunkTable;
}

const ROW_BYTES = 16;
const tableBytes = (n: number, chunks: number) => ROW_BYTES * n + (4 * chunks + 1) * 4;

function timeStarts(ts: Float64Array): Uint32Array {
  let times = 0;
  for (let i = 0; i < ts.length; i++) if (i === 0 || ts[i] !== ts[i - 1]) times++;
  const firstRow = new Uint32Array(times + 1);
  let g = 0;
  for (let i = 0; i < ts.length; i++) if (i === 0 || ts[i] !== ts[i - 1]) firstRow[g++] = i;
  firstRow[times] = ts.length;
  return firstRow;
}

/** The text chunk c inflates to, from the rows' lengths: times joined by commas, each `HEAD` + books joined by commas + `]}`. */
function chunkLength(t: Pick<BlockTable, 'times' | 'firstRow' | 'k' | 'lengths'>, c: number): number {
  const [g0, g1] = [c * t.k, Math.min(t.times, (c + 1) * t.k)];
  let size = g1 - g0 - 1;
  for (let g = g0; g < g1; g++) {
    const [a, b] = [t.firstRow[g], t.firstRow[g + 1]];
    size += HEAD + 2 + (b - a - 1);
    for (let i = a; i < b; i++) size += t.lengths[i];
  }
  return size;
}

/** The table's arrays over its words, which start at `offset` (8-aligned) of `words`. */
function views(words: ArrayBufferLike, n: number, chunks: number, offset = 0) {
  const w = offset + ROW_BYTES * n;
  return {
    ts: new Float64Array(words, offset, n),
    outcome: new Int32Array(words, offset + 8 * n, n),
    lengths: new Uint32Array(words, offset + 12 * n, n),
    table: {
      at: new Uint32Array(words, w, chunks + 1),
      crc: new Uint32Array(words, w + 4 * (chunks + 1), chunks),
      length: new Uint32Array(words, w + 4 * (2 * chunks + 1), chunks),
      zcrc: new Uint32Array(words, w + 4 * (3 * chunks + 1), chunks),
    },
  };
}

/** A decoded table as bytes to keep (its words, then its times' first rows) and the counts to view them again. */
export function tablePiece(t: BlockTable): { parts: Uint8Array[]; meta: number[] } {
  return {
    parts: [
      new Uint8Array(t.ts.buffer, t.ts.byteOffset, tableBytes(t.n, t.chunks)),
      new Uint8Array(t.firstRow.buffer, t.firstRow.byteOffset, t.firstRow.byteLength),
    ],
    meta: [t.n, t.k, t.chunks, t.times],
  };
}

/** The table `tablePiece` kept, over `bytes` (8-aligned; the caller's to keep as long as it reads the table). */
export function tableOfPiece(bytes: Buffer, [n, k, chunks, times]: readonly number[]): BlockTable {
  const firstRow = new Uint32Array(bytes.buffer, bytes.byteOffset + tableBytes(n, chunks), times + 1);
  return { n, k, chunks, times, firstRow, ...views(bytes.buffer, n, chunks, bytes.byteOffset) };
}

/** A block whose summaries cannot be cut from its ladders exactly (never seen): its file gets no copy. */
export class NotDerivable extends Error {}

/** One market's block: its table deflated, then its chunks. Deflated on the threadpool. */
export async function encodeBlock(b: MarketBooks, k = CHUNK_TIMES): Promise<{ block: Buffer; table: number }> {
  const n = b.ts.length;
  const firstRow = timeStarts(b.ts);
  const times = firstRow.length - 1;
  const chunks = Math.ceil(times / k);
  const words = new ArrayBuffer(tableBytes(n, chunks));
  const v = views(words, n, chunks);
  v.ts.set(b.ts);
  v.outcome.set(b.outcome);
  for (let i = 0; i < n; i++) {
    v.lengths[i] = b.ladderAt[i + 1] - b.ladderAt[i];
    const ladder = b.ladder.subarray(b.ladderAt[i], b.ladderAt[i + 1]);
    const cut = Buffer.allocUnsafe(ladder.length + SUMMARY_ROOM);
    if (!cut.subarray(0, writeSummary(ladder, cut, 0)).equals(b.summary.subarray(b.summaryAt[i], b.summaryAt[i + 1])))
      throw new NotDerivable();
  }
  const data: Buffer[] = [];
  let size = 0;
  const { at, crc, length, zcrc } = v.table;
  for (let c = 0; c < chunks; c++) {
    const shown: [number, number][] = [];
    for (let g = c * k; g < Math.min(times, (c + 1) * k); g++) shown.push([firstRow[g], firstRow[g + 1]]);
    const page = renderPage(b, { shown, times: shown.length }, DEFLATED_SHAPE, true).json as Buffer;
    const text = page.subarray(1, page.length - 1);
    const deflated = await deflateRaw(text, { level: DEFLATE_LEVEL, finishFlush: zlib.constants.Z_SYNC_FLUSH });
    at[c] = size;
    crc[c] = zlib.crc32(text);
    length[c] = text.length;
    zcrc[c] = zlib.crc32(deflated);
    data.push(deflated);
    size += deflated.length;
  }
  at[chunks] = size;
  const table = await deflate(new Uint8Array(words), { level: DEFLATE_LEVEL });
  return { block: Buffer.concat([table, ...data]), table: table.length };
}

const BID_PRICES = Buffer.from(',"bid_prices":[');

/** At most how much longer a book's summary is than its text with ladders (two depths' text and two nulls). */
export const SUMMARY_ROOM = 64;
const [BEST_BID, BEST_ASK, BID_DEPTH, ASK_DEPTH, NULL] = [',"best_bid":', ',"best_ask":', ',"bid_depth":', ',"ask_depth":', 'null'].map(
  (x) => Buffer.from(x),
);

/**
 * A book's summary (best levels and depth, as `bookFragment` writes it) written into `out` at `w`
 * from its text with ladders; returns the bytes written (at most the ladders' + SUMMARY_ROOM). The
 * head and the best prices are the same text in both, the depths are summed from the sizes read
 * back (a number's shortest text reads back as the same double). The lists hold numbers only, so
 * the last `,"bid_prices":[` is the key's, whatever the outcome's label holds.
 */
export function writeSummary(ladder: Buffer, out: Buffer, w: number): number {
  const start = w;
  // The lists' openings, from the end: the text's last four '[' (numbers hold none).
  let [bids, asks, seen] = [0, 0, 0];
  for (let i = ladder.length - 1; seen < 4; i--) {
    if (i < 0) throw damaged('a book without its four lists');
    if (ladder[i] !== 0x5b) continue;
    seen++;
    if (seen === 2) asks = i + 1;
    else if (seen === 4) bids = i + 1;
  }
  w += ladder.copy(out, w, 0, bids - BID_PRICES.length);
  w = put(out, w, BEST_BID);
  w = best(ladder, bids, out, w);
  w = put(out, w, BEST_ASK);
  w = best(ladder, asks, out, w);
  // Each sizes list follows its prices list: `],"bid_sizes":[` after the prices' last number.
  w = put(out, w, BID_DEPTH);
  w = putText(out, w, String(depth(ladder, ladder.indexOf(0x5b, bids) + 1)));
  w = put(out, w, ASK_DEPTH);
  w = putText(out, w, String(depth(ladder, ladder.indexOf(0x5b, asks) + 1)));
  out[w++] = 0x7d; // }
  return w - start;
}

function put(out: Buffer, w: number, bytes: Buffer): number {
  for (let i = 0; i < bytes.length; i++) out[w++] = bytes[i];
  return w;
}

function putText(out: Buffer, w: number, text: string): number {
  for (let i = 0; i < text.length; i++) out[w++] = text.charCodeAt(i);
  return w;
}

/** A list's first number as it is written, or null for an empty list. */
function best(ladder: Buffer, from: number, out: Buffer, w: number): number {
  if (ladder[from] === 0x5d) return put(out, w, NULL);
  for (let i = from; ladder[i] !== 0x2c && ladder[i] !== 0x5d; i++) {
    if (i >= ladder.length) throw damaged('a list without its end');
    out[w++] = ladder[i];
  }
  return w;
}

/** The sum of a list's numbers from its text at `from`, rounded as `bookFragment` rounds depth. */
function depth(text: Buffer, from: number): number {
  let sum = 0;
  for (let start = from, i = from; ; i++) {
    if (i >= text.length) throw damaged('a list without its end');
    const c = text[i];
    if (c !== 0x2c && c !== 0x5d) continue;
    if (i > start) sum += parseNumber(text, start, i);
    if (c === 0x5d) break;
    start = i + 1;
  }
  return Math.round(sum * 1e8) / 1e8;
}

const POW10 = Array.from({ length: 23 }, (_, k) => 10 ** k);

/**
 * A number's text as Number() reads it. Sizes are decimals of a few places: their digits as an
 * integer below 2^53 over an exact power of ten is one correctly rounded division, the same
 * double (Clinger's fast path), several times faster than the general conversion the rest takes.
 */
function parseNumber(text: Buffer, from: number, to: number): number {
  let digits = 0;
  let places = -1;
  for (let i = from; i < to; i++) {
    const c = text[i];
    if (c >= 0x30 && c <= 0x39) {
      digits = digits * 10 + (c - 0x30);
      if (places >= 0) places++;
    } else if (c === 0x2e && places < 0) places = 0;
    else return Number(text.toString('latin1', from, to));
  }
  if (digits > Number.MAX_SAFE_INTEGER || places > 22) return Number(text.toString('latin1', from, to));
  return places > 0 ? digits / POW10[places] : digits;
}

const damaged = (what: string) => new Error(`serving copy: ${what}`);

/**
 * A block's table from its deflated bytes, checked whole against the block (`rows`, `k`, the
 * chunks' `dataLength`): a damaged one throws (the copy is then removed), so no read goes outside
 * the block and no row's text is cut from the wrong bytes.
 */
export function decodeTable(deflated: Buffer, n: number, k: number, dataLength: number): BlockTable {
  let inflated: Buffer;
  try {
    // One output buffer of the most the table can be: zlib's default (16 KiB pieces, then joined)
    // allocated three buffers a page, and buffers churned at that rate set off full collections.
    const most = tableBytes(n, Math.ceil(n / Math.max(k, 1)));
    inflated = zlib.inflateSync(deflated, { maxOutputLength: tableBytes(n, n), chunkSize: Math.max(64, most + 1) });
  } catch {
    throw damaged('a table does not inflate, or fails its Adler-32');
  }
  // Its own 8-aligned memory: the typed arrays are views of it.
  const words = new ArrayBuffer(inflated.length);
  new Uint8Array(words).set(inflated);
  if (k < 1 || n === 0 || inflated.length < ROW_BYTES * n) throw damaged('a table is shorter than its rows');
  const ts = new Float64Array(words, 0, n);
  for (let i = 1; i < n; i++) if (!(ts[i] >= ts[i - 1])) throw damaged('a table whose times are out of order');
  const firstRow = timeStarts(ts);
  const times = firstRow.length - 1;
  const chunks = Math.ceil(times / k);
  if (inflated.length !== tableBytes(n, chunks)) throw damaged('a table does not hold its rows and chunks');
  const t: BlockTable = { n, times, firstRow, k, chunks, ...views(words, n, chunks) };
  // Offsets one run from 0 to the data's end; every chunk's text as long as its rows make it.
  const { at, length } = t.table;
  if (at[0] !== 0 || at[chunks] !== dataLength) throw damaged('chunks that do not fill the block');
  for (let c = 0; c < chunks; c++) {
    if (at[c + 1] < at[c]) throw damaged('chunks out of order');
    if (length[c] !== chunkLength(t, c)) throw damaged('a chunk not as long as its rows');
  }
  return t;
}

/**
 * The text of chunks [c0, c1) from their deflated bytes (`data`, starting at chunk c0), checked
 * against the lengths and CRCs the table holds.
 */
export function inflateChunks(t: BlockTable, c0: number, c1: number, data: Buffer): Buffer {
  const { crc, length } = t.table;
  let size = 0;
  for (let c = c0; c < c1; c++) size += length[c];
  let text: Buffer;
  try {
    // One output buffer of the known length (and a byte, so a full one is not followed by another).
    text = zlib.inflateRawSync(data, {
      finishFlush: zlib.constants.Z_SYNC_FLUSH,
      maxOutputLength: Math.max(size, 1),
      chunkSize: Math.max(64, size + 1),
    });
  } catch {
    throw damaged('chunks that do not inflate');
  }
  if (text.length !== size) throw damaged('chunks that inflate to another length');
  for (let c = c0, at = 0; c < c1; at += length[c++])
    if (zlib.crc32(text.subarray(at, at + length[c])) !== crc[c]) throw damaged('a chunk whose text fails its CRC');
  return text;
}

/**
 * Where rows [first, end) lie in the text of the chunks they are in (from chunk
 * floor(time(first) / k), as `inflateChunks` gives it): each row's book, and its time's head.
 */
export function rowsInText(t: BlockTable, first: number, end: number): { head: Uint32Array; book: Uint32Array } {
  const head = new Uint32Array(end - first);
  const book = new Uint32Array(end - first);
  const g0 = timeOf(t, first);
  let pos = 0;
  for (let g = Math.floor(g0 / t.k) * t.k; g < t.times && t.firstRow[g] < end; g++) {
    if (g % t.k !== 0) pos++; // the comma between times of one chunk
    const at = pos;
    pos += HEAD;
    for (let i = t.firstRow[g]; i < t.firstRow[g + 1]; i++) {
      if (i > t.firstRow[g]) pos++;
      if (i >= first && i < end) [head[i - first], book[i - first]] = [at, pos];
      pos += t.lengths[i];
    }
    pos += 2;
  }
  return { head, book };
}

/** The capture time row i is at. */
export function timeOf(t: BlockTable, i: number): number {
  let [lo, hi] = [0, t.times - 1];
  while (lo < hi) {
    const mid = (lo + hi + 1) >>> 1;
    if (t.firstRow[mid] <= i) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}
