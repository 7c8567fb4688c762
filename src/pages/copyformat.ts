// Serving copies: every sealed books file's markets rendered once, when the file is written, into a
// file beside the lake (DATA_DIR/serving/books/<sha256 of the Parquet file>.v<N>.pages). A page
// of a market never read before is then one read of its block and a slice, where the Parquet
// path costs a DuckDB statement that decodes the market's four ladder lists (BENCHMARKS.md,
// "Where a cold page goes"). The Parquet files stay the lake: analysts, exports and every other
// route read them; a copy is derived data, named by its file's content, so it is never stale,
// two writers of one copy write the same bytes, and a missing one only means the SQL path.
// This file is the format; copywriter.ts writes copies, copyreader.ts serves pages from them.
//
// Layout: market blocks, then the index (JSON: market -> [offset, length, rows, zHeader, zData]),
// then a 16-byte trailer (index length, format version, magic). A block is one market's
// `MarketBooks` as stored: u32 rows, u32 0, f64 ts[n], i32 outcome[n], u32 ladderAt[n+1],
// u32 summaryAt[n+1], heads, ladder text, summary text; read into a fresh buffer it is used in
// place. After each block, its pages pre-deflated (`deflatedSection`): a gzip page of the common
// shapes is then mostly bytes deflated at seal, sent as they are.
import path from 'node:path';
import { promisify } from 'node:util';
import zlib from 'node:zlib';
import { HEAD, type MarketBooks, type PageSpec, renderPage, withBytes } from './render.js';

/** Bumped whenever rendering changes: copies of an older rendering are then simply not found. */
export const SERVING_VERSION = 2;
export const MAGIC = Buffer.from('PMBOOKPG');
export const TRAILER = 16;

export function servingCopyPath(servingDir: string, sha256: string): string {
  return path.join(servingDir, 'books', sha256.slice(0, 2), `${sha256}.v${SERVING_VERSION}.pages`);
}

export interface CopyIndex {
  version: number;
  rows: number;
  /** market_id -> [offset, length, rows, pre-deflated header length, pre-deflated data length]: the section follows the block. */
  markets: Record<string, CopyEntry>;
}

export type CopyEntry = [offset: number, length: number, rows: number, zHeader: number, zData: number];

export function encode(b: MarketBooks): Buffer {
  const n = b.ts.length;
  const fixed = fixedBytes(n);
  const out = Buffer.allocUnsafe(fixed + b.heads.length + b.ladder.length + b.summary.length);
  out.writeUInt32LE(n, 0);
  out.writeUInt32LE(0, 4);
  let w = 8;
  for (const array of [b.ts, b.outcome, b.ladderAt, b.summaryAt]) {
    w += Buffer.from(array.buffer, array.byteOffset, array.byteLength).copy(out, w);
  }
  w += b.heads.copy(out, w);
  w += b.ladder.copy(out, w);
  b.summary.copy(out, w);
  return out;
}

/** The fixed part of a block (its first `fixedBytes(n)` bytes) as typed arrays over `block`, whose byteOffset is 8-aligned. */
export function fixedPart(block: Buffer, n: number) {
  const { buffer, byteOffset: base } = block;
  return {
    ts: new Float64Array(buffer, base + 8, n),
    outcome: new Int32Array(buffer, base + 8 + 8 * n, n),
    ladderAt: new Uint32Array(buffer, base + 8 + 12 * n, n + 1),
    summaryAt: new Uint32Array(buffer, base + 8 + 12 * n + 4 * (n + 1), n + 1),
  };
}

export const fixedBytes = (n: number) => 8 + 8 * n + 4 * n + 8 * (n + 1);

/** Whether a block of `length` bytes holds exactly the rows its fixed part says (a copy damaged on disk does not). */
export function checkBlock(block: Buffer, n: number, ladderAt: Uint32Array, summaryAt: Uint32Array, length: number): void {
  if (block.readUInt32LE(0) !== n || fixedBytes(n) + n * HEAD + ladderAt[n] + summaryAt[n] !== length)
    throw new Error(`serving copy: a block of ${length} bytes does not hold its ${n} rows`);
}

/** A block read into a buffer of its own (byteOffset 0, so every typed array is aligned). */
export function decode(block: Buffer, n: number): MarketBooks {
  const { ts, outcome, ladderAt, summaryAt } = fixedPart(block, n);
  checkBlock(block, n, ladderAt, summaryAt, block.length);
  const headsAt = fixedBytes(n);
  const ladderStart = headsAt + n * HEAD;
  const heads = block.subarray(headsAt, ladderStart);
  const ladder = block.subarray(ladderStart, ladderStart + ladderAt[n]);
  const summary = block.subarray(ladderStart + ladderAt[n], block.length);
  return withBytes({ ts, outcome, ladder, ladderAt, summary, summaryAt, heads });
}

/**
 * Capture times a pre-deflated chunk holds. A divisor of the usual limits (20, 100, 500, 1000), so
 * pages walked from a market's open start and end on a chunk's edge; chunks of 20 times (about
 * 22 KiB of text with ladders) deflate 3% larger than a page deflated whole (measured on the
 * bench lake), of 10 times 11%.
 */
export const CHUNK_TIMES = 20;
/** Deflated once, at seal, on the threadpool: level 6 costs nothing a request waits on. */
const DEFLATE_LEVEL = 6;
const deflateRaw = promisify(zlib.deflateRaw);

/** Whether pages of this shape are pre-deflated: what a client walking a market from its open asks for. */
export const predeflated = (q: PageSpec): boolean => q.order === 'asc' && q.intervalMs === null && q.outcomeIndex === null;

export const DEFLATED_SHAPE: PageSpec = { from: -Infinity, to: Infinity, order: 'asc', after: null, intervalMs: null, outcomeIndex: null };

/**
 * A market's pages of the common shape (ascending, no interval, every outcome), with ladders and
 * without, as text deflated once: chunk c inflates to capture times [cK, cK + K) rendered as a page
 * renders them, joined by commas, without the page's brackets. Each chunk is a deflate stream of
 * its own ended by a sync flush, so any run of chunks concatenates into one stream.
 * Header: u32 times G, u32 K, u32 firstRow[G + 1]; per view (ladders, summary) u32 at[C + 1] (into
 * the data), u32 crc[C], u32 length[C]. Then the data.
 */
export async function deflatedSection(b: MarketBooks): Promise<[header: Buffer, data: Buffer]> {
  const n = b.ts.length;
  const firstRows: number[] = [];
  for (let i = 0; i < n; i++) if (i === 0 || b.ts[i] !== b.ts[i - 1]) firstRows.push(i);
  const times = firstRows.length;
  firstRows.push(n);
  const chunks = Math.ceil(times / CHUNK_TIMES);
  const words = new Uint32Array(2 + times + 1 + 2 * (3 * chunks + 1));
  words.set([times, CHUNK_TIMES, ...firstRows]);
  const data: Buffer[] = [];
  let size = 0;
  let w = 3 + times;
  for (const ladders of [true, false]) {
    const [at, crc, length] = [w, w + chunks + 1, w + 2 * chunks + 1];
    for (let c = 0; c < chunks; c++) {
      const shown: [number, number][] = [];
      for (let g = c * CHUNK_TIMES; g < Math.min(times, (c + 1) * CHUNK_TIMES); g++) shown.push([firstRows[g], firstRows[g + 1]]);
      const page = renderPage(b, { shown, times: shown.length }, DEFLATED_SHAPE, ladders).json as Buffer;
      const text = page.subarray(1, page.length - 1);
      const deflated = await deflateRaw(text, { level: DEFLATE_LEVEL, finishFlush: zlib.constants.Z_SYNC_FLUSH });
      words[at + c] = size;
      words[crc + c] = zlib.crc32(text);
      words[length + c] = text.length;
      data.push(deflated);
      size += deflated.length;
    }
    words[at + chunks] = size;
    w += 3 * chunks + 1;
  }
  return [Buffer.from(words.buffer, words.byteOffset, words.byteLength), Buffer.concat(data)];
}

/**
 * A pre-deflated section's header, read into `header` (4-aligned), checked whole against the block
 * (`rows`) and the data's length: a damaged one throws (the copy is then removed), so no read goes
 * outside the section and no page is spliced from the wrong bytes.
 */
export function chunkTables(header: Buffer, ladders: boolean, rows: number, dataLength: number) {
  const words = new Uint32Array(header.buffer, header.byteOffset, header.length / 4);
  const [times, k] = [words[0], words[1]];
  const chunks = k > 0 ? Math.ceil(times / k) : -1;
  const damaged = () => new Error('serving copy: a pre-deflated section does not match its block');
  if (times === 0 || chunks < 0 || words.length !== 2 + times + 1 + 2 * (3 * chunks + 1)) throw damaged();
  const firstRow = words.subarray(2, 3 + times);
  if (firstRow[0] !== 0 || firstRow[times] !== rows) throw damaged();
  for (let g = 1; g <= times; g++) if (firstRow[g] <= firstRow[g - 1]) throw damaged();
  // Both views' offsets, one run from 0 to the data's length.
  const at = (view: number) => words.subarray(3 + times + view * (3 * chunks + 1), 3 + times + view * (3 * chunks + 1) + chunks + 1);
  const [ladder, summary] = [at(0), at(1)];
  if (ladder[0] !== 0 || summary[0] !== ladder[chunks] || summary[chunks] !== dataLength) throw damaged();
  for (const offsets of [ladder, summary]) for (let c = 1; c <= chunks; c++) if (offsets[c] < offsets[c - 1]) throw damaged();
  const view = 3 + times + (ladders ? 0 : 3 * chunks + 1);
  return {
    times,
    k,
    firstRow,
    at: ladders ? ladder : summary,
    crc: words.subarray(view + chunks + 1, view + 2 * chunks + 1),
    length: words.subarray(view + 2 * chunks + 1, view + 3 * chunks + 1),
  };
}
