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
// 16-byte trailer (index length, format version, magic). A block is its table, deflated (`table`
// bytes), then its chunks. The text is stored once, as chunks of the common page shape deflated
// (both views: ladders, and best levels with depth): a gzip page of that shape is mostly chunks
// sent as they are, and every other page inflates the chunks it shows and takes its rows' text
// out of them. Kept as plain text (v2), the copies were 7x the Parquet's bytes; deflated, ~0.9x.
import path from 'node:path';
import { promisify } from 'node:util';
import zlib from 'node:zlib';
import { HEAD, type MarketBooks, type PageSpec, renderPage } from './render.js';

/** Bumped whenever rendering or the layout changes: copies of an older one are then simply not found. */
export const SERVING_VERSION = 3;
export const MAGIC = Buffer.from('PMBOOKPG');
export const TRAILER = 16;

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
 * Capture times a chunk holds. A divisor of the usual limits (20, 100, 500, 1000), so pages walked
 * from a market's open start and end on a chunk's edge; chunks of 20 times (about 22 KiB of text
 * with ladders) deflate 3% larger than a page deflated whole (measured on the bench lake), of 10
 * times 11%. A page inside a chunk inflates the whole chunk: larger chunks cost cold pages more.
 */
export const CHUNK_TIMES = 20;
/** Deflated once, at seal, on the threadpool: level 6 costs nothing a request waits on. */
const DEFLATE_LEVEL = 6;
const deflateRaw = promisify(zlib.deflateRaw);

/** Whether pages of this shape are pre-deflated: what a client walking a market from its open asks for. */
export const predeflated = (q: PageSpec): boolean => q.order === 'asc' && q.intervalMs === null && q.outcomeIndex === null;

export const DEFLATED_SHAPE: PageSpec = { from: -Infinity, to: Infinity, order: 'asc', after: null, intervalMs: null, outcomeIndex: null };

/** The views a copy holds, in their order in the data: with ladders, and best levels with depth. */
export const VIEWS = [true, false] as const;

/** One view's chunks: chunk c is data bytes [at[c], at[c + 1]) inflating to `length[c]` bytes of text whose CRC-32 is `crc[c]`. */
export interface ChunkTable {
  at: Uint32Array;
  crc: Uint32Array;
  length: Uint32Array;
  /** CRC-32 of the deflated bytes: checked before a chunk is sent as it is, never inflated. */
  zcrc: Uint32Array;
}

/**
 * A block's table, inflated: each row's time, outcome and text length in both views, each capture
 * time's first row, and both views' chunk tables. `firstRow` is derived from `ts`, not stored.
 */
export interface BlockTable {
  n: number;
  ts: Float64Array;
  outcome: Int32Array;
  /** Text length of each row's book in each view (VIEWS' order). */
  lengths: [Uint32Array, Uint32Array];
  times: number;
  /** Capture time g is rows [firstRow[g], firstRow[g + 1]). */
  firstRow: Uint32Array;
  k: number;
  chunks: number;
  views: [ChunkTable, ChunkTable];
}

const tableBytes = (n: number, chunks: number) => 24 * n + VIEWS.length * (4 * chunks + 1) * 4;

function timeStarts(ts: Float64Array): Uint32Array {
  let times = 0;
  for (let i = 0; i < ts.length; i++) if (i === 0 || ts[i] !== ts[i - 1]) times++;
  const firstRow = new Uint32Array(times + 1);
  let g = 0;
  for (let i = 0; i < ts.length; i++) if (i === 0 || ts[i] !== ts[i - 1]) firstRow[g++] = i;
  firstRow[times] = ts.length;
  return firstRow;
}

/** The text chunk c of a view inflates to, from the rows' lengths: times joined by commas, each `HEAD` + books joined by commas + `]}`. */
function chunkLength(t: Pick<BlockTable, 'times' | 'firstRow' | 'k'>, lengths: Uint32Array, c: number): number {
  const [g0, g1] = [c * t.k, Math.min(t.times, (c + 1) * t.k)];
  let size = g1 - g0 - 1;
  for (let g = g0; g < g1; g++) {
    const [a, b] = [t.firstRow[g], t.firstRow[g + 1]];
    size += HEAD + 2 + (b - a - 1);
    for (let i = a; i < b; i++) size += lengths[i];
  }
  return size;
}

/** One market's block: its table deflated, then its chunks. Deflated on the threadpool. */
export async function encodeBlock(b: MarketBooks, k = CHUNK_TIMES): Promise<{ block: Buffer; table: number }> {
  const n = b.ts.length;
  const firstRow = timeStarts(b.ts);
  const times = firstRow.length - 1;
  const chunks = Math.ceil(times / k);
  const words = new ArrayBuffer(tableBytes(n, chunks));
  new Float64Array(words, 0, n).set(b.ts);
  new Int32Array(words, 8 * n, n).set(b.outcome);
  const lengthsOf = (at: Uint32Array, w: number) => {
    const lengths = new Uint32Array(words, w, n);
    for (let i = 0; i < n; i++) lengths[i] = at[i + 1] - at[i];
  };
  lengthsOf(b.ladderAt, 12 * n);
  lengthsOf(b.summaryAt, 16 * n);
  const data: Buffer[] = [];
  let size = 0;
  for (const [v, ladders] of VIEWS.entries()) {
    const { at, crc, length, zcrc } = chunkTableOf(words, n, chunks, v);
    for (let c = 0; c < chunks; c++) {
      const shown: [number, number][] = [];
      for (let g = c * k; g < Math.min(times, (c + 1) * k); g++) shown.push([firstRow[g], firstRow[g + 1]]);
      const page = renderPage(b, { shown, times: shown.length }, DEFLATED_SHAPE, ladders).json as Buffer;
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
  }
  const table = await deflateRaw(new Uint8Array(words), { level: DEFLATE_LEVEL });
  return { block: Buffer.concat([table, ...data]), table: table.length };
}

function chunkTableOf(words: ArrayBuffer, n: number, chunks: number, view: number): ChunkTable {
  const w = 24 * n + view * (4 * chunks + 1) * 4;
  return {
    at: new Uint32Array(words, w, chunks + 1),
    crc: new Uint32Array(words, w + 4 * (chunks + 1), chunks),
    length: new Uint32Array(words, w + 4 * (2 * chunks + 1), chunks),
    zcrc: new Uint32Array(words, w + 4 * (3 * chunks + 1), chunks),
  };
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
    inflated = zlib.inflateRawSync(deflated, { maxOutputLength: tableBytes(n, n) });
  } catch {
    throw damaged('a table does not inflate');
  }
  // Its own 8-aligned memory: the typed arrays are views of it.
  const words = new ArrayBuffer(inflated.length);
  new Uint8Array(words).set(inflated);
  if (k < 1 || inflated.length < 24 * n) throw damaged('a table is shorter than its rows');
  const ts = new Float64Array(words, 0, n);
  for (let i = 1; i < n; i++) if (!(ts[i] >= ts[i - 1])) throw damaged('a table whose times are out of order');
  const firstRow = timeStarts(ts);
  const times = firstRow.length - 1;
  const chunks = Math.ceil(times / k);
  if (n === 0 || inflated.length !== tableBytes(n, chunks)) throw damaged('a table does not hold its rows and chunks');
  const lengths: [Uint32Array, Uint32Array] = [new Uint32Array(words, 12 * n, n), new Uint32Array(words, 16 * n, n)];
  const views = VIEWS.map((_, v) => chunkTableOf(words, n, chunks, v)) as [ChunkTable, ChunkTable];
  const t: BlockTable = { n, ts, outcome: new Int32Array(words, 8 * n, n), lengths, times, firstRow, k, chunks, views };
  // Both views' offsets one run from 0 to the data's end; every chunk's text as long as its rows make it.
  if (views[0].at[0] !== 0 || views[1].at[0] !== views[0].at[chunks] || views[1].at[chunks] !== dataLength)
    throw damaged('chunks that do not fill the block');
  for (const [v, { at, length }] of views.entries()) {
    for (let c = 0; c < chunks; c++) {
      if (at[c + 1] < at[c]) throw damaged('chunks out of order');
      if (length[c] !== chunkLength(t, lengths[v], c)) throw damaged('a chunk not as long as its rows');
    }
  }
  return t;
}

/**
 * The text of chunks [c0, c1) of a view from their deflated bytes (`data`, starting at chunk c0),
 * checked against the lengths and CRCs the table holds.
 */
export function inflateChunks(t: BlockTable, view: number, c0: number, c1: number, data: Buffer): Buffer {
  const { crc, length } = t.views[view];
  let size = 0;
  for (let c = c0; c < c1; c++) size += length[c];
  let text: Buffer;
  try {
    text = zlib.inflateRawSync(data, { finishFlush: zlib.constants.Z_SYNC_FLUSH, maxOutputLength: Math.max(size, 1) });
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
export function rowsInText(t: BlockTable, view: number, first: number, end: number): { head: Uint32Array; book: Uint32Array } {
  const lengths = t.lengths[view];
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
      pos += lengths[i];
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
