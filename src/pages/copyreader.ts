// Pages from serving copies (the format: copyformat.ts): a copy's index read once and kept, then
// only the chunks a page shows read and inflated from each file's block, or the market whole when
// its files interleave.
import fs from 'node:fs/promises';
import zlib from 'node:zlib';
import { Arena } from './arena.js';
import { CopyCache } from './copycache.js';
import { composeBooks } from './compose.js';
import {
  type BlockTable,
  type CopyEntry,
  type CopyIndex,
  DEFLATED_SHAPE,
  MAGIC,
  SERVING_VERSION,
  TRAILER,
  decodeTable,
  inflateChunks,
  tableOfPiece,
  tablePiece,
  predeflated,
  rowsInText,
  servingCopyPath,
  SUMMARY_ROOM,
  timeOf,
  writeSummary,
} from './copyformat.js';
import { type DeflatedPiece, freshPiece } from './gzip.js';
import { FileHandles, type FileLease } from './handles.js';
import {
  HEAD,
  type MarketBooks,
  type PageFrame,
  type PageSelection,
  type PageSpec,
  type RenderedSnapshots,
  pageFromBooks,
  renderPage,
  search,
  selectPage,
  selectedRows,
  withBytes,
} from './render.js';

/** What a page asks of the copies: the market's span, the page's shape and size, and how it is sent. */
export interface CopyPageRequest {
  span: { from: number; to: number };
  q: PageSpec;
  ladders: boolean;
  maxTimes: number;
  /** The response's frame to render into (see PAGE_FRAME); none: a buffer of its own. */
  frame?: PageFrame | null;
  /** The client takes gzip: a page of the pre-deflated shape may come as pieces deflated at seal. */
  gzip?: boolean;
}

/** A sealed books file, as far as its serving copy is concerned: its content's sha256 names the copy. */
export interface CopiedFile {
  sha256: string;
}

/** Indexes of copies read lately; a few hundred bytes each. */
const INDEXES_KEPT = 8192;
/** Copies kept open: an hour's files of every venue, coin and window, well inside the descriptors kept for files (FD_HEADROOM). */
const HANDLES_KEPT = 64;

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
  /** The background writes, while they run: `close` waits for the one under way. */
  private writing: Promise<void> | null = null;
  private closed = false;
  /** Files that cannot have a copy (not in the writer's order): never queued again. */
  private readonly unwritable = new Set<string>();
  readonly handles = new FileHandles(HANDLES_KEPT);
  reads = 0;
  /** Pages sent mostly as the seal deflated them. */
  deflatedPages = 0;
  written = 0;

  constructor(
    readonly dir: string,
    private readonly writer: CopyWriter | null = null,
    /** Tables and chunks' text pages read lately; none with 0 bytes. */
    readonly cache = new CopyCache(0),
  ) {}

  /**
   * Queues the copies of `files` to be written in the background, one after another (a lake
   * sealed before copies existed, or a copy lost): the page that found them missing took the
   * SQL path, the next one will not.
   */
  schedule(files: readonly CopySource[]): void {
    if (!this.writer || this.closed) return;
    for (const f of files) if (!this.unwritable.has(f.sha256)) this.queue.set(f.sha256, f);
    if (this.writing) return;
    this.writing = (async () => {
      for (let next = this.queue.entries().next(); !next.done && !this.closed; next = this.queue.entries().next()) {
        const [sha256, source] = next.value;
        if (!(await this.index(sha256))) {
          // A failure (a full disk, a file compacted away) is tried again when a page next finds the copy missing.
          const written = await this.writer!(source).catch(() => null);
          if (written === false) this.unwritable.add(sha256);
          else if (written) this.written++;
        }
        this.queue.delete(sha256);
      }
      this.writing = null;
    })();
  }

  get queued(): number {
    return this.queue.size;
  }

  /**
   * Lets go of the copies kept open (the process stops serving), once the write under way has
   * ended: its statement runs on a DuckDB connection the caller closes next, and closing one under
   * a running statement crashed the process (SIGSEGV in the test suite).
   */
  async close(): Promise<void> {
    this.closed = true;
    await this.writing;
    this.handles.close();
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
      if (i) return;
      this.indexes.delete(sha256);
      // A damaged copy is written again under its name: the next read opens that one.
      this.handles.forget(servingCopyPath(this.dir, sha256));
    });
    if (this.indexes.size > INDEXES_KEPT) this.indexes.delete(this.indexes.keys().next().value!);
    return found;
  }

  private async readIndex(sha256: string): Promise<CopyIndex | null> {
    const lease = await this.handles.lease(servingCopyPath(this.dir, sha256)).catch(() => null);
    if (!lease) return null;
    const { handle } = lease;
    try {
      const { size } = await handle.stat();
      if (size < TRAILER) return null;
      const trailer = Buffer.alloc(TRAILER);
      await handle.read(trailer, 0, TRAILER, size - TRAILER);
      const length = trailer.readUInt32LE(0);
      if (!trailer.subarray(12).equals(MAGIC) || trailer.readUInt32LE(8) !== SERVING_VERSION || length > size - TRAILER) return null;
      const json = Buffer.alloc(length);
      await handle.read(json, 0, length, size - TRAILER - length);
      // A changed digit in the index points every page of its market at other bytes: the copy is then as good as missing.
      if (zlib.crc32(json) !== trailer.readUInt32LE(4)) return null;
      return JSON.parse(json.toString('utf8')) as CopyIndex;
    } catch {
      return null;
    } finally {
      lease.release();
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
      const [offset, length, n, table] = entry;
      const block = Buffer.allocUnsafeSlow(length);
      const lease = await this.handles.lease(servingCopyPath(this.dir, f.sha256)).catch(() => null);
      if (!lease) {
        // Removed since its index was read: missing again, to be written again.
        this.indexes.delete(f.sha256);
        return null;
      }
      try {
        await readInto(lease.handle, block, 0, offset, length);
      } finally {
        lease.release();
      }
      parts.push(wholeBlock(decodeTable(block.subarray(0, table), n, index.chunkTimes, length - table), block.subarray(table)));
    }
    this.reads++;
    return composeBooks(parts, from, to);
  }
  /**
   * One page of a market from its files' copies, reading only what the page shows: each block's
   * table, then the chunks that hold the shown rows, inflated (tens of KiB of a block that may
   * hold megabytes). The same bytes as `pageFromBooks` over the whole market. Null when a
   * file has no copy. With `gzip` (the client takes it), a page of the pre-deflated shape comes as
   * deflated pieces, mostly read as the seal deflated them.
   */
  async page(
    files: readonly CopiedFile[],
    marketId: string,
    request: CopyPageRequest,
  ): Promise<RenderedSnapshots | DeflatedSnapshots | null> {
    return this.guarded(files, () => this.readPage(files, marketId, request));
  }

  /**
   * A copy that cannot be read as its index says (damaged on disk: writes are atomic, so not by
   * a crash) is removed, to be written again; the page takes the SQL path meanwhile.
   */
  private async guarded<T>(files: readonly CopiedFile[], read: () => Promise<T | null>): Promise<T | null> {
    try {
      return await read();
    } catch (err) {
      if (err instanceof CopyGone) {
        // Removed since its index was read: missing again, to be written again.
        this.indexes.delete(err.sha256);
        return null;
      }
      for (const f of files) {
        this.indexes.delete(f.sha256);
        this.handles.forget(servingCopyPath(this.dir, f.sha256));
        await fs.rm(servingCopyPath(this.dir, f.sha256), { force: true });
      }
      return null;
    }
  }

  private async readPage(
    files: readonly CopiedFile[],
    marketId: string,
    { span, q, ladders, maxTimes, frame = null, gzip = false }: CopyPageRequest,
  ): Promise<RenderedSnapshots | DeflatedSnapshots | null> {
    const parts: Skeleton[] = [];
    const arena = Arena.take();
    try {
      for (const f of files) {
        const index = await this.index(f.sha256);
        if (!index) return null;
        const entry = index.markets[marketId];
        if (!entry) continue;
        const file = new CopyFile(this.handles, servingCopyPath(this.dir, f.sha256), f.sha256);
        // Closed here if its block cannot be read (a damaged copy), else with the others below.
        parts.push(
          await skeleton(file, `${f.sha256}/${marketId}`, entry, index.chunkTimes, span, arena, this.cache).catch(async (err: unknown) => {
            await file.close();
            throw err;
          }),
        );
      }
      const ranged = parts.filter((p) => p.hi > p.lo);
      // Files whose rows of this market interleave in time (a busy hour sealed in stretches): the whole market, merged.
      for (let k = 1; k < ranged.length; k++) {
        if (ranged[k - 1].table.ts[ranged[k - 1].hi - 1] >= ranged[k].table.ts[ranged[k].lo]) {
          const whole = await this.readMarket(files, marketId, span.from, span.to);
          return whole && pageFromBooks(whole, q, ladders, maxTimes, frame);
        }
      }
      const [ts, outcome] =
        ranged.length === 1
          ? [ranged[0].table.ts.subarray(ranged[0].lo, ranged[0].hi), ranged[0].table.outcome.subarray(ranged[0].lo, ranged[0].hi)]
          : joined(ranged, arena);
      const selection = selectPage(ts, outcome, q, maxTimes);
      if (gzip && predeflated(q, ladders)) {
        const deflated = await deflatedPage(ranged, ts, selection, ladders, arena, this.cache);
        if (deflated) {
          this.reads++;
          this.deflatedPages++;
          return deflated;
        }
      }
      const [lo, hi] = selectedRows(selection);
      // The shown rows [lo, hi) of the joined times: each part's share inflated from the chunks it is in.
      const shares: MarketBooks[] = [];
      let start = 0;
      for (const p of ranged) {
        const [a, b] = [Math.max(lo, start), Math.min(hi, start + p.hi - p.lo)];
        if (a < b) shares.push(await rowsOf(p, p.lo + a - start, p.lo + b - start, ladders, arena, this.cache));
        start += p.hi - p.lo;
      }
      const shown = shares.length === 1 ? shares[0] : concatenated(shares, arena);
      this.reads++;
      // Rendered into a buffer of its own: the arena goes back to be reused once this returns.
      return renderPage(shown, selection, q, ladders, lo, frame);
    } finally {
      Arena.give(arena);
      await Promise.all(parts.map((p) => p.file.close()));
    }
  }
}

/** The parts' rows in the span, one after another (the parts do not interleave in time). */
function joined(parts: Skeleton[], arena: Arena): [Float64Array, Int32Array] {
  const n = parts.reduce((sum, p) => sum + p.hi - p.lo, 0);
  const [ts, outcome] = [arena.doubles(n), arena.ints(n)];
  let k = 0;
  for (const p of parts) {
    ts.set(p.table.ts.subarray(p.lo, p.hi), k);
    outcome.set(p.table.outcome.subarray(p.lo, p.hi), k);
    k += p.hi - p.lo;
  }
  return [ts, outcome];
}

/** A copy that was there when its index was read and is not now. */
class CopyGone extends Error {
  constructor(readonly sha256: string) {
    super('serving copy removed');
  }
}

/** A copy's file, leased at its first read: a page whose pieces are all in the cache takes none. */
class CopyFile {
  private lease: Promise<FileLease> | null = null;

  constructor(
    private readonly handles: FileHandles,
    private readonly path: string,
    private readonly sha256: string,
  ) {}

  async read(into: Buffer, at: number, position: number, length: number): Promise<void> {
    this.lease ??= this.handles.lease(this.path).catch(() => {
      throw new CopyGone(this.sha256);
    });
    await readInto((await this.lease).handle, into, at, position, length);
  }

  async close(): Promise<void> {
    (await this.lease?.catch(() => null))?.release();
  }
}

/** A block's table and where its rows in a span lie. */
interface Skeleton {
  file: CopyFile;
  /** The block's name in the cache (its copy and market); null when its pieces are not kept. */
  key: string | null;
  table: BlockTable;
  /** Where the block's chunks start in the file. */
  dataAt: number;
  /** Rows [lo, hi) of the block are in the span. */
  lo: number;
  hi: number;
}

async function readInto(handle: fs.FileHandle, into: Buffer, at: number, position: number, length: number): Promise<void> {
  const { bytesRead } = length ? await handle.read(into, at, length, position) : { bytesRead: 0 };
  if (bytesRead !== length) throw new Error(`serving copy: ${bytesRead} of ${length} bytes at ${position}`);
}

async function skeleton(
  file: CopyFile,
  key: string,
  [offset, length, n, tableLength]: CopyEntry,
  k: number,
  span: { from: number; to: number },
  arena: Arena,
  cache: CopyCache,
): Promise<Skeleton> {
  const { table, keep } = await blockTable(file, key, offset, length, n, tableLength, k, arena, cache);
  return {
    file,
    key: keep ? key : null,
    table,
    dataAt: offset + tableLength,
    lo: search(table.ts, span.from, false),
    hi: search(table.ts, span.to, false),
  };
}

/** A block's table: from the cache (into the page's arena: the ring may be written over while the page reads), else read and decoded, and kept. */
async function blockTable(
  file: CopyFile,
  key: string,
  offset: number,
  length: number,
  n: number,
  tableLength: number,
  k: number,
  arena: Arena,
  cache: CopyCache,
): Promise<{ table: BlockTable; keep: boolean }> {
  const again = cache.admit(key);
  const kept = cache.get(key);
  if (kept) {
    const bytes = arena.bytes(kept.bytes.length);
    kept.bytes.copy(bytes);
    return { table: tableOfPiece(bytes, kept.meta), keep: true };
  }
  const deflated = arena.bytes(tableLength);
  await file.read(deflated, 0, offset, tableLength);
  const table = decodeTable(deflated, n, k, length - tableLength);
  if (again) {
    const { parts, meta } = tablePiece(table);
    cache.keep(key, parts, meta, true);
  }
  return { table, keep: again };
}

/** Rows [first, end) of a block (whole capture times or not), their heads and one view's text, from the chunks they are in. */
async function rowsOf(p: Skeleton, first: number, end: number, ladders: boolean, arena: Arena, cache: CopyCache): Promise<MarketBooks> {
  const t = p.table;
  const [c0, c1] = [Math.floor(timeOf(t, first) / t.k), Math.floor(timeOf(t, end - 1) / t.k) + 1];
  const key = p.key && `${p.key}/${c0}-${c1}`;
  // Used before any await: the ring may be written over after.
  const kept = key && cache.get(key);
  if (kept) return rowsFromText(t, first, end, kept.bytes, ladders, arena);
  const { at } = t.table;
  const data = arena.bytes(at[c1] - at[c0]);
  await p.file.read(data, 0, p.dataAt + at[c0], data.length);
  const text = inflateChunks(t, c0, c1, data);
  if (key) cache.keep(key, [text]);
  return rowsFromText(t, first, end, text, ladders, arena);
}

/**
 * Rows [first, end) cut out of their chunks' text: each time's head, and the books packed one after
 * another, with ladders as stored or as summaries cut from them.
 */
function rowsFromText(t: BlockTable, first: number, end: number, text: Buffer, ladders: boolean, arena: Arena | null): MarketBooks {
  const { head, book } = rowsInText(t, first, end);
  const n = end - first;
  let room = 0;
  for (let r = 0; r < n; r++) room += t.lengths[first + r] + (ladders ? 0 : SUMMARY_ROOM);
  const heads = arena ? arena.bytes(n * HEAD) : Buffer.allocUnsafe(n * HEAD);
  const fragments = arena ? arena.bytes(room) : Buffer.allocUnsafe(room);
  const offsets = arena ? arena.uints(n + 1) : new Uint32Array(n + 1);
  offsets[0] = 0;
  for (let r = 0; r < n; r++) {
    text.copy(heads, r * HEAD, head[r], head[r] + HEAD);
    const [from, to] = [book[r], book[r] + t.lengths[first + r]];
    offsets[r + 1] =
      offsets[r] + (ladders ? text.copy(fragments, offsets[r], from, to) : writeSummary(text.subarray(from, to), fragments, offsets[r]));
  }
  return withBytes({
    ts: t.ts.subarray(first, end),
    outcome: t.outcome.subarray(first, end),
    heads,
    ladder: fragments,
    ladderAt: offsets,
    summary: fragments,
    summaryAt: offsets,
  });
}

/** A whole block's books, both views, in memory of their own (what the book cache keeps). */
function wholeBlock(t: BlockTable, data: Buffer): MarketBooks {
  const text = inflateChunks(t, 0, t.chunks, data);
  const ladders = rowsFromText(t, 0, t.n, text, true, null);
  const summaries = rowsFromText(t, 0, t.n, text, false, null);
  return withBytes({ ...ladders, summary: summaries.ladder, summaryAt: summaries.ladderAt });
}

/** Parts' rows one after another, in the arena: the parts do not interleave in time. */
function concatenated(parts: MarketBooks[], arena: Arena): MarketBooks {
  const n = parts.reduce((sum, b) => sum + b.ts.length, 0);
  const size = parts.reduce((sum, b) => sum + b.ladderAt[b.ts.length], 0);
  const [ts, outcome, heads, ladder, ladderAt] = [
    arena.doubles(n),
    arena.ints(n),
    arena.bytes(n * HEAD),
    arena.bytes(size),
    arena.uints(n + 1),
  ];
  ladderAt[0] = 0;
  let k = 0;
  for (const b of parts) {
    ts.set(b.ts, k);
    outcome.set(b.outcome, k);
    b.heads.copy(heads, k * HEAD);
    b.ladder.copy(ladder, ladderAt[k], 0, b.ladderAt[b.ts.length]);
    for (let i = 0; i < b.ts.length; i++) ladderAt[k + i + 1] = ladderAt[k] + b.ladderAt[i + 1];
    k += b.ts.length;
  }
  return withBytes({ ts, outcome, heads, ladder, ladderAt, summary: ladder, summaryAt: ladderAt });
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
  cache: CopyCache,
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
      const own = await partItems(p, p.lo + a - start, p.lo + b - start, ladders, arena, cache);
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
async function partItems(
  p: Skeleton,
  r0: number,
  r1: number,
  ladders: boolean,
  arena: Arena,
  cache: CopyCache,
): Promise<(Buffer | DeflatedPiece)[] | null> {
  const t = p.table;
  const [g0, g1] = [search(t.firstRow, r0, false), search(t.firstRow, r1, false)];
  if (t.firstRow[g0] !== r0 || t.firstRow[g1] !== r1) return null;
  const text = async (from: number, to: number): Promise<Buffer> => {
    const rows = await rowsOf(p, t.firstRow[from], t.firstRow[to], ladders, arena, cache);
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
  const { at, crc, length, zcrc } = t.table;
  // A buffer of its own: the response is assembled after the arena has gone back.
  const data = Buffer.allocUnsafe(at[c1] - at[c0]);
  await p.file.read(data, 0, p.dataAt + at[c0], data.length);
  const items: (Buffer | DeflatedPiece)[] = [];
  if (a > g0) items.push(await text(g0, a), COMMA_TEXT);
  for (let c = c0; c < c1; c++) {
    if (c > c0) items.push(COMMA_TEXT);
    const deflated = data.subarray(at[c] - at[c0], at[c + 1] - at[c0]);
    // Sent as it is, never inflated: its stored CRC is what keeps a damaged chunk from a client.
    if (zlib.crc32(deflated) !== zcrc[c]) throw new Error('serving copy: a deflated chunk fails its CRC');
    items.push({ deflated, crc: crc[c], length: length[c] });
  }
  if (b < g1) items.push(COMMA_TEXT, await text(b, g1));
  return items;
}

const [OPEN, CLOSE, COMMA_TEXT] = ['[', ']', ','].map((x) => Buffer.from(x));
