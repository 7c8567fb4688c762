// Serving copies: every sealed books file's markets rendered once, when the file is written, into a
// file beside the lake (DATA_DIR/serving/books/<sha256 of the Parquet file>.v<N>.pages). A page
// of a market never read before is then one read of its block and a slice, where the Parquet
// path costs a DuckDB statement that decodes the market's four ladder lists (BENCHMARKS.md,
// "Where a cold page goes"). The Parquet files stay the lake: analysts, exports and every other
// route read them; a copy is derived data, named by its file's content, so it is never stale,
// two writers of one copy write the same bytes, and a missing one only means the SQL path.
//
// Layout: market blocks, then the index (JSON: market -> [offset, length, rows, zHeader, zData]),
// then a 16-byte trailer (index length, format version, magic). A block is one market's
// `MarketBooks` as stored: u32 rows, u32 0, f64 ts[n], i32 outcome[n], u32 ladderAt[n+1],
// u32 summaryAt[n+1], heads, ladder text, summary text; read into a fresh buffer it is used in
// place. After each block, its pages pre-deflated (`deflatedSection`): a gzip page of the common
// shapes is then mostly bytes deflated at seal, sent as they are.
import fs from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import zlib from 'node:zlib';
import type { Duck } from '../lake/duckdb.js';
import { bookSelect, parquetSource } from '../lake/sql.js';
import { type DeflatedPiece, freshPiece } from './gzip.js';
import {
  HEAD,
  type MarketBooks,
  MarketBooksBuilder,
  type PageFrame,
  type PageSelection,
  type PageSpec,
  type RenderedSnapshots,
  columnsOf,
  pageFromBooks,
  renderPage,
  search,
  selectPage,
  selectedRows,
  withBytes,
} from './render.js';

/** Bumped whenever rendering changes: copies of an older rendering are then simply not found. */
export const SERVING_VERSION = 2;
const MAGIC = Buffer.from('PMBOOKPG');
const TRAILER = 16;

export function servingCopyPath(servingDir: string, sha256: string): string {
  return path.join(servingDir, 'books', sha256.slice(0, 2), `${sha256}.v${SERVING_VERSION}.pages`);
}

interface CopyIndex {
  version: number;
  rows: number;
  /** market_id -> [offset, length, rows, pre-deflated header length, pre-deflated data length]: the section follows the block. */
  markets: Record<string, CopyEntry>;
}

type CopyEntry = [offset: number, length: number, rows: number, zHeader: number, zData: number];

export interface WrittenCopy {
  file: string;
  markets: number;
  rows: number;
  bytes: number;
}

/** A file whose rows are not in (market, time, outcome) order: its copy cannot be streamed. */
class NotInOrder extends Error {}

function encode(b: MarketBooks): Buffer {
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
function fixedPart(block: Buffer, n: number) {
  const { buffer, byteOffset: base } = block;
  return {
    ts: new Float64Array(buffer, base + 8, n),
    outcome: new Int32Array(buffer, base + 8 + 8 * n, n),
    ladderAt: new Uint32Array(buffer, base + 8 + 12 * n, n + 1),
    summaryAt: new Uint32Array(buffer, base + 8 + 12 * n + 4 * (n + 1), n + 1),
  };
}

const fixedBytes = (n: number) => 8 + 8 * n + 4 * n + 8 * (n + 1);

/** Whether a block of `length` bytes holds exactly the rows its fixed part says (a copy damaged on disk does not). */
function checkBlock(block: Buffer, n: number, ladderAt: Uint32Array, summaryAt: Uint32Array, length: number): void {
  if (block.readUInt32LE(0) !== n || fixedBytes(n) + n * HEAD + ladderAt[n] + summaryAt[n] !== length)
    throw new Error(`serving copy: a block of ${length} bytes does not hold its ${n} rows`);
}

/** A block read into a buffer of its own (byteOffset 0, so every typed array is aligned). */
function decode(block: Buffer, n: number): MarketBooks {
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

const DEFLATED_SHAPE: PageSpec = { from: -Infinity, to: Infinity, order: 'asc', after: null, intervalMs: null, outcomeIndex: null };

/**
 * A market's pages of the common shape (ascending, no interval, every outcome), with ladders and
 * without, as text deflated once: chunk c inflates to capture times [cK, cK + K) rendered as a page
 * renders them, joined by commas, without the page's brackets. Each chunk is a deflate stream of
 * its own ended by a sync flush, so any run of chunks concatenates into one stream.
 * Header: u32 times G, u32 K, u32 firstRow[G + 1]; per view (ladders, summary) u32 at[C + 1] (into
 * the data), u32 crc[C], u32 length[C]. Then the data.
 */
async function deflatedSection(b: MarketBooks): Promise<[header: Buffer, data: Buffer]> {
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
function chunkTables(header: Buffer, ladders: boolean, rows: number, dataLength: number) {
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

/**
 * Writes the serving copy of one sealed books file (`parquet`, whose content hashes to
 * `sha256`). Streams the file a chunk at a time, one market rendered at once, so memory is
 * bounded by the largest market, not the file. Returns null when the file is not in the order
 * the writer gives (then pages of its markets take the SQL path).
 */
export async function writeServingCopy(duck: Duck, parquet: string, sha256: string, servingDir: string): Promise<WrittenCopy | null> {
  const file = servingCopyPath(servingDir, sha256);
  await fs.mkdir(path.dirname(file), { recursive: true });
  const tmp = `${file}.tmp-${process.pid}-${Math.random().toString(36).slice(2)}`;
  const handle = await fs.open(tmp, 'w');
  const index: CopyIndex = { version: SERVING_VERSION, rows: 0, markets: {} };
  let offset = 0;
  let market: string | null = null;
  let builder = new MarketBooksBuilder();
  let lastTs = -Infinity;
  let lastOutcome = -Infinity;
  const flush = async () => {
    if (market === null || builder.rows === 0) return;
    const books = builder.finish();
    const block = encode(books);
    const [zHeader, zData] = await deflatedSection(books);
    const all = Buffer.concat([block, zHeader, zData]);
    await handle.write(all, 0, all.length, offset);
    index.markets[market] = [offset, block.length, builder.rows, zHeader.length, zData.length];
    index.rows += builder.rows;
    offset += all.length;
    builder = new MarketBooksBuilder();
  };
  try {
    // market_id last, so the renderers find the book columns where bookSelect puts them.
    await duck.stream(`SELECT ${bookSelect()}, market_id FROM ${parquetSource([parquet])}`, async (chunk) => {
      const columns = columnsOf(chunk);
      const ids = chunk.getColumnVector(chunk.columnCount - 1);
      for (let row = 0; row < chunk.rowCount; row++) {
        const id = ids.getItem(row) as string;
        const ts = columns.ts.getItem(row) as number;
        const outcome = columns.outcome_index.getItem(row) as number;
        if (id !== market) {
          await flush();
          if (index.markets[id]) throw new NotInOrder();
          market = id;
        } else if (ts < lastTs || (ts === lastTs && outcome < lastOutcome)) {
          throw new NotInOrder();
        }
        lastTs = ts;
        lastOutcome = outcome;
        builder.add(columns, row);
      }
    });
    await flush();
    const json = Buffer.from(JSON.stringify(index));
    const trailer = Buffer.alloc(TRAILER);
    trailer.writeUInt32LE(json.length, 0);
    trailer.writeUInt32LE(SERVING_VERSION, 4);
    MAGIC.copy(trailer, 8);
    await handle.write(Buffer.concat([json, trailer]), 0, json.length + TRAILER, offset);
    await handle.sync();
    await handle.close();
    await fs.rename(tmp, file);
    return { file, markets: Object.keys(index.markets).length, rows: index.rows, bytes: offset + json.length + TRAILER };
  } catch (err) {
    await handle.close().catch(() => undefined);
    await fs.rm(tmp, { force: true });
    if (err instanceof NotInOrder) return null;
    throw err;
  }
}

/** A sealed books file, as far as its serving copy is concerned: its content's sha256 names the copy. */
export interface CopiedFile {
  sha256: string;
}

/** Indexes of copies read lately; a few hundred bytes each. */
const INDEXES_KEPT = 8192;

/** A sealed books file whose copy is to be written: its content's sha256 and its path below the lake. */
export interface CopySource {
  sha256: string;
  path: string;
}

/** Writes one missing copy (the API's: its own DuckDB lane, a log line); false when the file cannot have one. */
export type CopyWriter = (file: CopySource) => Promise<boolean>;

export class ServingCopies {
  private readonly indexes = new Map<string, Promise<CopyIndex | null>>();
  /** Copies to write, by sha256, one at a time. */
  private readonly queue = new Map<string, CopySource>();
  private writing = false;
  /** Files that cannot have a copy (not in the writer's order): never queued again. */
  private readonly unwritable = new Set<string>();
  reads = 0;
  /** Pages sent mostly as the seal deflated them. */
  deflatedPages = 0;
  written = 0;

  constructor(
    readonly dir: string,
    private readonly writer: CopyWriter | null = null,
  ) {}

  /**
   * Queues the copies of `files` to be written in the background, one after another (a lake
   * sealed before copies existed, or a copy lost): the page that found them missing took the
   * SQL path, the next one will not.
   */
  schedule(files: readonly CopySource[]): void {
    if (!this.writer) return;
    for (const f of files) if (!this.unwritable.has(f.sha256)) this.queue.set(f.sha256, f);
    if (this.writing) return;
    this.writing = true;
    void (async () => {
      for (let next = this.queue.entries().next(); !next.done; next = this.queue.entries().next()) {
        const [sha256, source] = next.value;
        if (!(await this.index(sha256))) {
          // A failure (a full disk, a file compacted away) is tried again when a page next finds the copy missing.
          const written = await this.writer!(source).catch(() => null);
          if (written === false) this.unwritable.add(sha256);
          else if (written) this.written++;
        }
        this.queue.delete(sha256);
      }
      this.writing = false;
    })();
  }

  get queued(): number {
    return this.queue.size;
  }

  /** The copy's index; null when the copy is missing or damaged (not remembered: it may be built later). */
  private index(sha256: string): Promise<CopyIndex | null> {
    let found = this.indexes.get(sha256);
    if (found) {
      this.indexes.delete(sha256);
      this.indexes.set(sha256, found);
      return found;
    }
    found = this.readIndex(sha256);
    this.indexes.set(sha256, found);
    void found.then((i) => {
      if (!i) this.indexes.delete(sha256);
    });
    if (this.indexes.size > INDEXES_KEPT) this.indexes.delete(this.indexes.keys().next().value!);
    return found;
  }

  private async readIndex(sha256: string): Promise<CopyIndex | null> {
    const handle = await fs.open(servingCopyPath(this.dir, sha256), 'r').catch(() => null);
    if (!handle) return null;
    try {
      const { size } = await handle.stat();
      if (size < TRAILER) return null;
      const trailer = Buffer.alloc(TRAILER);
      await handle.read(trailer, 0, TRAILER, size - TRAILER);
      const length = trailer.readUInt32LE(0);
      if (!trailer.subarray(8).equals(MAGIC) || trailer.readUInt32LE(4) !== SERVING_VERSION || length > size - TRAILER) return null;
      const json = Buffer.alloc(length);
      await handle.read(json, 0, length, size - TRAILER - length);
      return JSON.parse(json.toString('utf8')) as CopyIndex;
    } catch {
      return null;
    } finally {
      await handle.close();
    }
  }

  /** Those of `files` whose copy is not there (yet). */
  async missing<F extends CopiedFile>(files: readonly F[]): Promise<F[]> {
    const out: F[] = [];
    for (const f of files) if (!(await this.index(f.sha256))) out.push(f);
    return out;
  }

  /**
   * One market's books in [from, to) across `files` (a market's partitions, in time order), or
   * null when any file has no copy. Rows come out in (time, outcome) order, as `marketBooksSql`
   * orders them, whatever the files' order.
   */
  async market(files: readonly CopiedFile[], marketId: string, from: number, to: number): Promise<MarketBooks | null> {
    return this.guarded(files, () => this.readMarket(files, marketId, from, to));
  }

  private async readMarket(files: readonly CopiedFile[], marketId: string, from: number, to: number): Promise<MarketBooks | null> {
    const parts: MarketBooks[] = [];
    for (const f of files) {
      const index = await this.index(f.sha256);
      if (!index) return null;
      const entry = index.markets[marketId];
      if (!entry) continue;
      const [offset, length, n] = entry;
      const block = Buffer.allocUnsafeSlow(length);
      const handle = await fs.open(servingCopyPath(this.dir, f.sha256), 'r').catch(() => null);
      if (!handle) {
        // Removed since its index was read: missing again, to be written again.
        this.indexes.delete(f.sha256);
        return null;
      }
      try {
        const { bytesRead } = await handle.read(block, 0, length, offset);
        if (bytesRead !== length) throw new Error(`serving copy ${f.sha256}: ${bytesRead} of ${length} bytes`);
      } finally {
        await handle.close();
      }
      parts.push(decode(block, n));
    }
    this.reads++;
    return composeBooks(parts, from, to);
  }
  /**
   * One page of a market from its files' copies, reading only what the page shows: each block's
   * times, outcomes and offsets, then the shown rows' heads and text (a few KiB of a block that
   * may hold megabytes). The same bytes as `pageFromBooks` over the whole market. Null when a
   * file has no copy. With `gzip` (the client takes it), a page of the pre-deflated shape comes as
   * deflated pieces, mostly read as the seal deflated them.
   */
  async page(
    files: readonly CopiedFile[],
    marketId: string,
    span: { from: number; to: number },
    q: PageSpec,
    ladders: boolean,
    maxTimes: number,
    frame: PageFrame | null = null,
    gzip = false,
  ): Promise<RenderedSnapshots | DeflatedSnapshots | null> {
    return this.guarded(files, () => this.readPage(files, marketId, span, q, ladders, maxTimes, frame, gzip));
  }

  /**
   * A copy that cannot be read as its index says (damaged on disk: writes are atomic, so not by
   * a crash) is removed, to be written again; the page takes the SQL path meanwhile.
   */
  private async guarded<T>(files: readonly CopiedFile[], read: () => Promise<T | null>): Promise<T | null> {
    try {
      return await read();
    } catch {
      for (const f of files) {
        this.indexes.delete(f.sha256);
        await fs.rm(servingCopyPath(this.dir, f.sha256), { force: true });
      }
      return null;
    }
  }

  private async readPage(
    files: readonly CopiedFile[],
    marketId: string,
    span: { from: number; to: number },
    q: PageSpec,
    ladders: boolean,
    maxTimes: number,
    frame: PageFrame | null,
    gzip: boolean,
  ): Promise<RenderedSnapshots | DeflatedSnapshots | null> {
    const parts: Skeleton[] = [];
    const arena = Arena.take();
    try {
      for (const f of files) {
        const index = await this.index(f.sha256);
        if (!index) return null;
        const entry = index.markets[marketId];
        if (!entry) continue;
        const handle = await fs.open(servingCopyPath(this.dir, f.sha256), 'r').catch(() => null);
        if (!handle) {
          this.indexes.delete(f.sha256);
          return null;
        }
        // Closed here if its block cannot be read (a damaged copy), else with the others below.
        parts.push(
          await skeleton(handle, entry, span, arena).catch(async (err: unknown) => {
            await handle.close();
            throw err;
          }),
        );
      }
      const ranged = parts.filter((p) => p.hi > p.lo);
      // Files whose rows of this market interleave in time (a busy hour sealed in stretches): the whole market, merged.
      for (let k = 1; k < ranged.length; k++) {
        if (ranged[k - 1].ts[ranged[k - 1].hi - 1] >= ranged[k].ts[ranged[k].lo]) {
          const whole = await this.readMarket(files, marketId, span.from, span.to);
          return whole && pageFromBooks(whole, q, ladders, maxTimes, frame);
        }
      }
      const [ts, outcome] =
        ranged.length === 1
          ? [ranged[0].ts.subarray(ranged[0].lo, ranged[0].hi), ranged[0].outcome.subarray(ranged[0].lo, ranged[0].hi)]
          : joined(ranged, arena);
      const selection = selectPage(ts, outcome, q, maxTimes);
      if (gzip && predeflated(q)) {
        const deflated = await deflatedPage(ranged, ts, selection, ladders, arena);
        if (deflated) {
          this.reads++;
          this.deflatedPages++;
          return deflated;
        }
      }
      const [lo, hi] = selectedRows(selection);
      // The shown rows [lo, hi) of the joined times: where each part's share lies, then one read each for heads and text.
      const shares: { p: Skeleton; first: number; end: number; offsets: Uint32Array; region: number }[] = [];
      let start = 0;
      for (const p of ranged) {
        const [a, b] = [Math.max(lo, start), Math.min(hi, start + p.hi - p.lo)];
        if (a < b) {
          const offsets = ladders ? p.ladderAt : p.summaryAt;
          shares.push({
            p,
            first: p.lo + a - start,
            end: p.lo + b - start,
            offsets,
            region: ladders ? p.ladderStart : p.ladderStart + p.ladderAt[p.n],
          });
        }
        start += p.hi - p.lo;
      }
      const heads = arena.bytes((hi - lo) * HEAD);
      const text = arena.bytes(shares.reduce((sum, x) => sum + x.offsets[x.end] - x.offsets[x.first], 0));
      const at = arena.uints(hi - lo + 1);
      at[0] = 0;
      let row = 0;
      for (const { p, first, end, offsets, region } of shares) {
        await readInto(p.handle, heads, row * HEAD, p.headsStart + first * HEAD, (end - first) * HEAD);
        await readInto(p.handle, text, at[row], region + offsets[first], offsets[end] - offsets[first]);
        const base = at[row] - offsets[first];
        for (let i = first; i < end; i++) at[++row] = offsets[i + 1] + base;
      }
      const shown = withBytes({
        ts: ts.subarray(lo, hi),
        outcome: outcome.subarray(lo, hi),
        heads,
        ladder: text,
        ladderAt: at,
        summary: text,
        summaryAt: at,
      });
      this.reads++;
      // Rendered into a buffer of its own: the arena goes back to be reused once this returns.
      return renderPage(shown, selection, q, ladders, lo, frame);
    } finally {
      Arena.give(arena);
      await Promise.all(parts.map((p) => p.handle.close()));
    }
  }
}

/**
 * Memory a page reads into, reused from page to page: fresh buffers of a few hundred KiB a page
 * kept the garbage collector busy a third of a worker's time under load (a CPU profile of the
 * cache-off bench, p90 11 ms against a p50 of 1 ms). Bump-allocated, 8-aligned; a page larger
 * than an arena gets ordinary buffers.
 */
class Arena {
  private static readonly free: Arena[] = [];
  private static readonly BYTES = 4 << 20;
  private used = 0;
  private constructor(private readonly buffer: Buffer) {}

  static take(): Arena {
    const arena = Arena.free.pop() ?? new Arena(Buffer.allocUnsafeSlow(Arena.BYTES));
    arena.used = 0;
    return arena;
  }

  static give(arena: Arena): void {
    if (Arena.free.length < 16) Arena.free.push(arena);
  }

  bytes(length: number): Buffer {
    const at = (this.used + 7) & ~7;
    if (at + length > this.buffer.length) return Buffer.allocUnsafeSlow(length);
    this.used = at + length;
    return this.buffer.subarray(at, at + length);
  }

  doubles(n: number): Float64Array {
    const b = this.bytes(8 * n);
    return new Float64Array(b.buffer, b.byteOffset, n);
  }

  ints(n: number): Int32Array {
    const b = this.bytes(4 * n);
    return new Int32Array(b.buffer, b.byteOffset, n);
  }

  uints(n: number): Uint32Array {
    const b = this.bytes(4 * n);
    return new Uint32Array(b.buffer, b.byteOffset, n);
  }
}

/** The parts' rows in the span, one after another (the parts do not interleave in time). */
function joined(parts: Skeleton[], arena: Arena): [Float64Array, Int32Array] {
  const n = parts.reduce((sum, p) => sum + p.hi - p.lo, 0);
  const [ts, outcome] = [arena.doubles(n), arena.ints(n)];
  let k = 0;
  for (const p of parts) {
    ts.set(p.ts.subarray(p.lo, p.hi), k);
    outcome.set(p.outcome.subarray(p.lo, p.hi), k);
    k += p.hi - p.lo;
  }
  return [ts, outcome];
}

/** A block's fixed part (times, outcomes, offsets) and where its rows in a span lie. */
interface Skeleton {
  handle: fs.FileHandle;
  n: number;
  ts: Float64Array;
  outcome: Int32Array;
  ladderAt: Uint32Array;
  summaryAt: Uint32Array;
  headsStart: number;
  ladderStart: number;
  /** The pre-deflated section after the block. */
  deflated: { at: number; header: number; data: number };
  /** Rows [lo, hi) of the block are in the span. */
  lo: number;
  hi: number;
}

async function readInto(handle: fs.FileHandle, into: Buffer, at: number, position: number, length: number): Promise<void> {
  const { bytesRead } = length ? await handle.read(into, at, length, position) : { bytesRead: 0 };
  if (bytesRead !== length) throw new Error(`serving copy: ${bytesRead} of ${length} bytes at ${position}`);
}

async function skeleton(
  handle: fs.FileHandle,
  [offset, length, n, header, data]: CopyEntry,
  span: { from: number; to: number },
  arena: Arena,
): Promise<Skeleton> {
  const fixed = fixedBytes(n);
  const block = arena.bytes(fixed);
  await readInto(handle, block, 0, offset, fixed);
  const { ts, outcome, ladderAt, summaryAt } = fixedPart(block, n);
  checkBlock(block, n, ladderAt, summaryAt, length);
  const headsStart = offset + fixed;
  return {
    handle,
    n,
    ts,
    outcome,
    ladderAt,
    summaryAt,
    headsStart,
    ladderStart: headsStart + n * HEAD,
    deflated: { at: offset + length, header, data },
    lo: search(ts, span.from, false),
    hi: search(ts, span.to, false),
  };
}

/** Rows [first, end) of a block, their heads and one view's text read into the arena. */
async function rowsOf(p: Skeleton, first: number, end: number, ladders: boolean, arena: Arena): Promise<MarketBooks> {
  const offsets = ladders ? p.ladderAt : p.summaryAt;
  const region = ladders ? p.ladderStart : p.ladderStart + p.ladderAt[p.n];
  const heads = arena.bytes((end - first) * HEAD);
  const text = arena.bytes(offsets[end] - offsets[first]);
  await readInto(p.handle, heads, 0, p.headsStart + first * HEAD, heads.length);
  await readInto(p.handle, text, 0, region + offsets[first], text.length);
  const at = arena.uints(end - first + 1);
  for (let i = first; i <= end; i++) at[i - first] = offsets[i] - offsets[first];
  return withBytes({
    ts: p.ts.subarray(first, end),
    outcome: p.outcome.subarray(first, end),
    heads,
    ladder: text,
    ladderAt: at,
    summary: text,
    summaryAt: at,
  });
}

/** A page as deflated pieces: `json` and `framed` left out, its text inflates from `deflated`. */
export type DeflatedSnapshots = Omit<RenderedSnapshots, 'json' | 'framed'> & { deflated: DeflatedPiece[] };

/**
 * A page of the pre-deflated shape: in each file's block, the whole chunks it covers as the seal
 * deflated them, and the times before the first and after the last (a page not starting or ending
 * on a chunk's edge) rendered and deflated now. Null when it covers no whole chunk: then it is
 * compressed now, as any other page. `parts` do not interleave in time (the caller checked).
 */
async function deflatedPage(
  parts: Skeleton[],
  ts: Float64Array,
  selection: PageSelection,
  ladders: boolean,
  arena: Arena,
): Promise<DeflatedSnapshots | null> {
  const { shown } = selection;
  if (!shown.length) return null;
  const [first, end] = [shown[0][0], shown[shown.length - 1][1]];
  // Text to deflate now (Buffers) and pieces deflated at seal, in page order.
  const items: (Buffer | DeflatedPiece)[] = [OPEN];
  let start = 0;
  for (const p of parts) {
    const [a, b] = [Math.max(first, start), Math.min(end, start + p.hi - p.lo)];
    if (a < b) {
      if (items.length > 1) items.push(COMMA_TEXT);
      const own = await partItems(p, p.lo + a - start, p.lo + b - start, ladders, arena);
      if (!own) return null;
      items.push(...own);
    }
    start += p.hi - p.lo;
  }
  items.push(CLOSE);
  if (items.every((x) => Buffer.isBuffer(x))) return null;
  // Each run of text between stored chunks deflated (or stored) as one piece.
  const pieces: DeflatedPiece[] = [];
  let text: Buffer[] = [];
  for (const x of items) {
    if (Buffer.isBuffer(x)) {
      text.push(x);
      continue;
    }
    if (text.length) pieces.push(freshPiece(Buffer.concat(text)));
    pieces.push(x);
    text = [];
  }
  pieces.push(freshPiece(Buffer.concat(text)));
  return { deflated: pieces, books: end - first, times: selection.times, last: ts[shown[shown.length - 1][0]] };
}

/**
 * Rows [r0, r1) of one block (whole capture times) as page text: the whole chunks they cover,
 * joined by commas, between the times before and after them rendered now. Null when the rows do
 * not start and end on capture times of the block (never, for a page's rows).
 */
async function partItems(p: Skeleton, r0: number, r1: number, ladders: boolean, arena: Arena): Promise<(Buffer | DeflatedPiece)[] | null> {
  const header = arena.bytes(p.deflated.header);
  await readInto(p.handle, header, 0, p.deflated.at, header.length);
  const t = chunkTables(header, ladders, p.n, p.deflated.data);
  const [g0, g1] = [search(t.firstRow, r0, false), search(t.firstRow, r1, false)];
  if (t.firstRow[g0] !== r0 || t.firstRow[g1] !== r1) return null;
  const text = async (from: number, to: number): Promise<Buffer> => {
    const rows = await rowsOf(p, t.firstRow[from], t.firstRow[to], ladders, arena);
    const groups: [number, number][] = [];
    for (let g = from; g < to; g++) groups.push([t.firstRow[g], t.firstRow[g + 1]]);
    const page = renderPage(rows, { shown: groups, times: groups.length }, DEFLATED_SHAPE, ladders, t.firstRow[from]).json as Buffer;
    return page.subarray(1, page.length - 1);
  };
  // Whole chunks [c0, c1): times [a, b). The block's last chunk is whole however many times it holds.
  const a = Math.min(Math.ceil(g0 / t.k) * t.k, g1);
  const b = g1 === t.times ? g1 : Math.floor(g1 / t.k) * t.k;
  if (b <= a) return [await text(g0, g1)];
  const [c0, c1] = [a / t.k, Math.ceil(b / t.k)];
  // A buffer of its own: the response is assembled after the arena has gone back.
  const data = Buffer.allocUnsafe(t.at[c1] - t.at[c0]);
  await readInto(p.handle, data, 0, p.deflated.at + p.deflated.header + t.at[c0], data.length);
  const items: (Buffer | DeflatedPiece)[] = [];
  if (a > g0) items.push(await text(g0, a), COMMA_TEXT);
  for (let c = c0; c < c1; c++) {
    if (c > c0) items.push(COMMA_TEXT);
    items.push({ deflated: data.subarray(t.at[c] - t.at[c0], t.at[c + 1] - t.at[c0]), crc: t.crc[c], length: t.length[c] });
  }
  if (b < g1) items.push(COMMA_TEXT, await text(b, g1));
  return items;
}

const [OPEN, CLOSE, COMMA_TEXT] = ['[', ']', ','].map((x) => Buffer.from(x));

/** Rows [lo, hi) of one market's books, sharing its buffers. */
function slice(b: MarketBooks, lo: number, hi: number): MarketBooks {
  if (lo === 0 && hi === b.ts.length) return b;
  return withBytes({
    ts: b.ts.subarray(lo, hi),
    outcome: b.outcome.subarray(lo, hi),
    ladder: b.ladder,
    ladderAt: b.ladderAt.subarray(lo, hi + 1),
    summary: b.summary,
    summaryAt: b.summaryAt.subarray(lo, hi + 1),
    heads: b.heads.subarray(lo * HEAD, hi * HEAD),
  });
}

/**
 * One market's books from several files: the rows in [from, to), in (time, outcome) order. One
 * file (most markets) is a slice of its block; several are copied into one set of buffers.
 */
export function composeBooks(parts: MarketBooks[], from: number, to: number): MarketBooks {
  const ranged = parts.map((b) => slice(b, search(b.ts, from, false), search(b.ts, to, false))).filter((b) => b.ts.length > 0);
  if (ranged.length === 1) return ranged[0];
  const rows: [part: number, row: number][] = [];
  ranged.forEach((b, p) => {
    for (let i = 0; i < b.ts.length; i++) rows.push([p, i]);
  });
  // Files of one partition may interleave in time (a busy hour sealed in stretches): sort, stably.
  const key = ([p, i]: [number, number]) => ranged[p].ts[i];
  rows.sort((x, y) => key(x) - key(y) || ranged[x[0]].outcome[x[1]] - ranged[y[0]].outcome[y[1]]);
  const n = rows.length;
  const ts = new Float64Array(n);
  const outcome = new Int32Array(n);
  const ladderAt = new Uint32Array(n + 1);
  const summaryAt = new Uint32Array(n + 1);
  const heads = Buffer.allocUnsafe(n * HEAD);
  rows.forEach(([p, i], k) => {
    const b = ranged[p];
    ts[k] = b.ts[i];
    outcome[k] = b.outcome[i];
    ladderAt[k + 1] = ladderAt[k] + b.ladderAt[i + 1] - b.ladderAt[i];
    summaryAt[k + 1] = summaryAt[k] + b.summaryAt[i + 1] - b.summaryAt[i];
    b.heads.copy(heads, k * HEAD, i * HEAD, (i + 1) * HEAD);
  });
  const ladder = Buffer.allocUnsafe(ladderAt[n]);
  const summary = Buffer.allocUnsafe(summaryAt[n]);
  rows.forEach(([p, i], k) => {
    const b = ranged[p];
    b.ladder.copy(ladder, ladderAt[k], b.ladderAt[i], b.ladderAt[i + 1]);
    b.summary.copy(summary, summaryAt[k], b.summaryAt[i], b.summaryAt[i + 1]);
  });
  return withBytes({ ts, outcome, ladder, ladderAt, summary, summaryAt, heads });
}

/** A copy no manifest names for this long is left from a replaced file (a compaction, a migration). */
const ORPHAN_AGE_MS = 3_600_000;

/**
 * Brings the copies in line with the lake (`make serving-copies`): writes those missing (a lake
 * sealed before copies existed, a copy lost or of an older rendering) and removes those no
 * manifest names any more. A fresh copy is never removed: a seal writes it before its commit.
 */
export async function refreshServingCopies(
  duck: Duck,
  lakeDir: string,
  servingDir: string,
  files: readonly { sha256: string; path: string; rows: number; dataset: string }[],
  now = Date.now(),
): Promise<{ written: number; present: number; unwritable: number; removed: number }> {
  const books = files.filter((f) => f.dataset === 'books' && f.rows > 0);
  const copies = new ServingCopies(servingDir);
  const missing = await copies.missing(books);
  let [written, unwritable] = [0, 0];
  for (const f of missing) {
    if (await writeServingCopy(duck, path.join(lakeDir, f.path), f.sha256, servingDir)) written++;
    else unwritable++;
  }
  const named = new Set(books.map((f) => path.basename(servingCopyPath(servingDir, f.sha256))));
  let removed = 0;
  const root = path.join(servingDir, 'books');
  for (const entry of await fs.readdir(root, { recursive: true, withFileTypes: true }).catch(() => [])) {
    if (!entry.isFile() || named.has(entry.name)) continue;
    const file = path.join(entry.parentPath, entry.name);
    const { mtimeMs } = await fs.stat(file);
    if (now - mtimeMs < ORPHAN_AGE_MS) continue;
    await fs.rm(file, { force: true });
    removed++;
  }
  return { written, present: books.length - missing.length, unwritable, removed };
}
