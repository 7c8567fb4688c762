// The write-ahead spool. A record is acknowledged once a flush has fsynced it; a crash loses
// at most what arrived since the last flush (one flush interval). Each process writes its own
// segment directory, and within it a partition's rows go to numbered part files, so a part
// is sealed exactly once and never appended to afterwards.
// Books and metrics go to a part per market, and a part only ever holds rows in the sealed
// files' order (a row that would go back starts a new part): sealing then concatenates parts
// instead of sorting an hour in memory (see seal.ts). A busy hour's parts are closed (rolled)
// and sealed a stretch at a time while it is still being written.
import fs from 'node:fs/promises';
import type { FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { type BookRow, type Dataset, type DatasetRows, type MetricRow, type TradeRow, ladderBytes } from '../records.js';
import { listFiles } from './fsutil.js';
import { type Partition, parsePartitionDir, partitionDir } from './layout.js';

export interface SpoolPart {
  /** `<segment>:<part>`: identifies the part in the manifest so a re-seal never repeats it. */
  source: string;
  file: string;
  partition: Partition;
  /** The one market of a sorted run (see RUN_DATASETS); absent for parts that may hold any order. */
  market?: string;
}

/** Datasets spooled as sorted runs of one market each: the ones with a row per change. */
export const RUN_DATASETS: ReadonlySet<Dataset> = new Set(['books', 'metrics', 'trades']);
/** Datasets whose runs are sealed when their market is over (Spool.finish): what a market's replay and pages read. */
export const FINISHED_DATASETS: ReadonlySet<Dataset> = new Set(['books', 'trades']);

interface OpenPart {
  handle: FileHandle;
  /** Bytes acknowledged in the file: a failed write is cut back to this. */
  size: number;
  /** Relative to the spool directory. */
  rel: string;
  partition: Partition;
  /** The partition's directory (partitionDir), made once. */
  dir: string;
}

/** Where a run's rows go: one market of one partition, a new generation whenever order breaks. */
interface Run {
  id: string;
  generation: number;
  /** The buffer key of the current generation. */
  key: string;
  /** The run's last row, which the next must not go back from. */
  last: RowOrder;
}

/** Where a row sits in the sealed files' order within one market. */
interface RowOrder {
  ts: number;
  outcome_index: number;
}

/** Whether `row` comes before `last` in the sealed files' order: it cannot join last's run. */
function goesBack(last: RowOrder, row: RowOrder): boolean {
  return row.ts < last.ts || (row.ts === last.ts && row.outcome_index < last.outcome_index);
}

/**
 * Lines waiting for a flush, written as bytes into chunks of their own (few objects for the GC
 * to trace, none per line); the last chunk is filled up to `used`, the others exactly.
 */
interface Pending {
  partition: Partition;
  market: string | null;
  chunks: Buffer[];
  used: number;
}

const FIRST_CHUNK = 4096;
const MAX_CHUNK = 256 * 1024;

/** The entry's chunk with room for `bytes` more, a new one when the current is too full. */
function reserve(entry: Pending, bytes: number): Buffer {
  let chunk = entry.chunks[entry.chunks.length - 1];
  if (!chunk || chunk.length - entry.used < bytes) {
    if (chunk) entry.chunks[entry.chunks.length - 1] = chunk.subarray(0, entry.used);
    chunk = Buffer.allocUnsafeSlow(Math.max(bytes, Math.min(MAX_CHUNK, chunk ? chunk.length * 2 : FIRST_CHUNK)));
    entry.chunks.push(chunk);
    entry.used = 0;
  }
  return chunk;
}

function push(entry: Pending, line: string): number {
  // UTF-8 takes at most 3 bytes per UTF-16 unit.
  const chunk = reserve(entry, line.length * 3);
  const written = chunk.write(line, entry.used, 'utf8');
  entry.used += written;
  return written;
}

function filled(entry: Pending): Buffer[] {
  const last = entry.chunks.length - 1;
  return entry.chunks.map((c, i) => (i === last ? c.subarray(0, entry.used) : c));
}

/** Market ids as file name text: base64url keeps any id a single safe name token. */
function marketToken(market: string): string {
  return Buffer.from(market, 'utf8').toString('base64url');
}

const PART_NAME = /^(\d+)(?:\.([A-Za-z0-9_-]*))?\.ndjson$/;

/**
 * Whether a part file named `name` may hold rows of `market`: a part of that market's run, or a
 * part of no one market (a spool of an older version). Its sealed source (`<segment>:<name>`) says the same.
 */
export function partMayHold(name: string, market: string): boolean {
  const m = PART_NAME.exec(name.endsWith('.ndjson') ? name : `${name}.ndjson`);
  return m !== null && (m[2] === undefined || m[2] === marketToken(market));
}

/** The sealed sources of `market`'s own runs, or null when some source may hold any market's rows (see partMayHold). */
export function marketSources(sources: readonly string[], market: string): string[] | null {
  const token = marketToken(market);
  const own: string[] = [];
  for (const source of sources) {
    const m = PART_NAME.exec(`${source.slice(source.indexOf(':') + 1)}.ndjson`);
    if (!m || m[2] === undefined) return null;
    if (m[2] === token) own.push(source);
  }
  return own;
}

export function newSegmentId(): string {
  const stamp = new Date().toISOString().replace(/[-:.TZ]/g, '');
  return `${stamp}-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
}

const PRINTABLE = /^[ -~]*$/;

/** The fields of a book row before its ladders, remembered per token (they repeat on every change). */
const bookHeads = new Map<string, { market: string; outcome: string; index: number; text: string; ascii: boolean }>();

function bookHead(r: BookRow): { text: string; ascii: boolean } {
  let head = bookHeads.get(r.token_id);
  if (!head || head.market !== r.market_id || head.outcome !== r.outcome || head.index !== r.outcome_index) {
    const text = `"market_id":${JSON.stringify(r.market_id)},"token_id":${JSON.stringify(r.token_id)},"outcome_index":${r.outcome_index},"outcome":${JSON.stringify(r.outcome)}`;
    // JSON text has no control characters: printable ASCII is all of ASCII here.
    head = { market: r.market_id, outcome: r.outcome, index: r.outcome_index, text, ascii: PRINTABLE.test(text) };
    if (bookHeads.size >= 100_000) bookHeads.clear();
    bookHeads.set(r.token_id, head);
  }
  const ex = r.exchange_ts === null ? 'null' : r.exchange_ts;
  // One of a few known words: no escaping needed.
  const by = r.verified_by ? `"${r.verified_by}"` : 'null';
  const check = r.hash_check ? `"${r.hash_check}"` : 'null';
  // The venue's text columns only where set (a key left out reads as null): most rows have a code or two at most.
  let venue = '';
  if (r.price_decimals != null) venue += `"price_decimals":${r.price_decimals},`;
  if (r.size_decimals != null) venue += `"size_decimals":${r.size_decimals},`;
  const texts = r.level_texts ? JSON.stringify(r.level_texts) : '';
  if (texts) venue += `"level_texts":${texts},`;
  const fields = r.hash_fields ? JSON.stringify(r.hash_fields) : '';
  if (fields) venue += `"hash_fields":${fields},`;
  // A hash is hex: no escaping needed.
  if (r.venue_hash) venue += `"venue_hash":"${r.venue_hash}",`;
  return {
    text: `{"ts":${r.ts},"recv_ts":${r.recv_ts},${head.text},"exchange_ts":${ex},"verified_by":${by},"hash_check":${check},${venue}`,
    ascii: head.ascii && PRINTABLE.test(texts) && PRINTABLE.test(fields),
  };
}

/** A book row's NDJSON line: its head, then its ladders' bytes as encoded once per array set. */
function pushBook(entry: Pending, r: BookRow): number {
  const head = bookHead(r);
  const ladders = ladderBytes(r);
  const chunk = reserve(entry, head.text.length * 3 + ladders.length + 2);
  let at = entry.used;
  // Latin-1 is a byte per character, and UTF-8 itself for ASCII text (ids and numbers, as a rule).
  at += chunk.write(head.text, at, head.ascii ? 'latin1' : 'utf8');
  // TypedArray#set is a plain memcpy; Buffer#copy goes through slower checks for small copies.
  chunk.set(ladders, at);
  at += ladders.length;
  chunk[at++] = 0x7d; // }
  chunk[at++] = 0x0a; // \n
  const written = at - entry.used;
  entry.used = at;
  return written;
}

/** Rows of one market in one partition of sorted runs, in order, encoded as spool lines (by a stream thread). */
export interface EncodedRun {
  partition: Partition;
  market: string;
  rows: number;
  first: RowOrder;
  last: RowOrder;
  /** Each its own ArrayBuffer, so the run can be transferred to the spool's thread without a copy. */
  chunks: Uint8Array[];
}

interface OpenRun extends EncodedRun {
  entry: Pending;
}

/**
 * Encodes book and metric rows into per-market runs, as the spool would, in a thread that is not
 * the spool's: what the spool's thread does per row is then only bookkeeping per run.
 */
export class RunEncoder {
  /** By dataset, then market: the run rows of that market go to now. */
  private readonly current = new Map<Dataset, Map<string, OpenRun>>();
  private done: OpenRun[] = [];
  bytes = 0;
  rows = 0;

  book(partition: Partition, row: BookRow): void {
    const run = this.runFor(partition, row.market_id, row);
    this.bytes += pushBook(run.entry, row);
  }

  /** A metric or trade row: a JSON line. */
  line(partition: Partition, row: MetricRow | TradeRow): void {
    const run = this.runFor(partition, row.market_id, row);
    this.bytes += push(run.entry, `${JSON.stringify(row)}\n`);
  }

  private runFor(partition: Partition, market: string, row: RowOrder): OpenRun {
    let runs = this.current.get(partition.dataset);
    if (!runs) {
      runs = new Map();
      this.current.set(partition.dataset, runs);
    }
    let run = runs.get(market);
    const back = run && goesBack(run.last, row);
    if (run && (run.partition.hour !== partition.hour || back)) {
      this.done.push(run);
      run = undefined;
    }
    if (!run) {
      const entry: Pending = { partition, market, chunks: [], used: 0 };
      const first = { ts: row.ts, outcome_index: row.outcome_index };
      run = { partition, market, rows: 0, first, last: { ...first }, chunks: [], entry };
      runs.set(market, run);
    }
    run.rows++;
    this.rows++;
    run.last.ts = row.ts;
    run.last.outcome_index = row.outcome_index;
    return run;
  }

  /** Every run encoded since the last take, a market's in order, each as one exact chunk. */
  take(): EncodedRun[] {
    const runs = this.done;
    for (const byMarket of this.current.values()) runs.push(...byMarket.values());
    this.current.clear();
    this.done = [];
    this.bytes = 0;
    this.rows = 0;
    return runs.map(({ entry, ...run }) => {
      const parts = filled(entry);
      const length = parts.reduce((n, c) => n + c.length, 0);
      // One chunk sized to its lines: the growing chunks of a run would travel half empty.
      const chunk = Buffer.allocUnsafeSlow(length);
      let at = 0;
      for (const p of parts) {
        chunk.set(p, at);
        at += p.length;
      }
      return { ...run, chunks: [chunk] };
    });
  }
}

export class Spool {
  readonly segment = newSegmentId();
  /** Lines as bytes: a second of streamed rows held as strings would be promoted and scanned by every GC. */
  private readonly buffered = new Map<string, Pending>();
  private readonly open = new Map<string, OpenPart>();
  /** By partition directory, then market. */
  private readonly runs = new Map<string, { partition: Partition; markets: Map<string, Run> }>();
  /** Acknowledged bytes of each partition of sorted runs since it last rolled, by partition directory. */
  private readonly sinceRoll = new Map<string, number>();
  /** Open parts whose run has a newer generation: closed once nothing of theirs is pending. */
  private readonly retired = new Set<string>();
  /** Runs (`<partition dir>/<market>`) whose market capture finished recording: closed once, at its end (see finish). */
  private readonly finished = new Set<string>();
  private nextPart = 1;
  /** Flushes, rolls, releases and the close, one after another (see serial). */
  private chain: Promise<unknown> = Promise.resolve();
  private pendingRows = 0;
  private pendingBytes = 0;
  /** The batch a flush is writing: still unacknowledged, so still counted against the buffer's bound. */
  private flushingRows = 0;
  private flushingBytes = 0;
  acknowledged = 0;
  /**
   * The earliest partition hour a row was appended to since the last release began: rows of an
   * hour already sealed that came since (a late row, a gap closed) are not sealed yet.
   */
  appendedSinceRelease = Infinity;

  constructor(private readonly dir: string) {}

  append<D extends Dataset>(partition: Partition & { dataset: D }, rows: readonly DatasetRows[D][]): void {
    if (rows.length === 0) return;
    this.appendedSinceRelease = Math.min(this.appendedSinceRelease, partition.hour);
    const dir = partitionDir(partition);
    const byMarket = RUN_DATASETS.has(partition.dataset);
    for (const row of rows) {
      const market = byMarket ? (row as { market_id: string }).market_id : null;
      const key = byMarket ? this.runKey(dir, partition, market!, row as RowOrder) : dir;
      let entry = this.buffered.get(key);
      if (!entry) {
        entry = { partition, market, chunks: [], used: 0 };
        this.buffered.set(key, entry);
      }
      this.pendingBytes += partition.dataset === 'books' ? pushBook(entry, row as BookRow) : push(entry, `${JSON.stringify(row)}\n`);
    }
    this.pendingRows += rows.length;
  }

  /**
   * The buffer key of a market's current run, after moving to a new run if `row` would go back;
   * `last` is the run's last row when several come at once (an encoded run).
   */
  private runKey(dir: string, partition: Partition, market: string, row: RowOrder, last: RowOrder = row): string {
    let runs = this.runs.get(dir);
    if (!runs) {
      runs = { partition, markets: new Map() };
      this.runs.set(dir, runs);
    }
    let run = runs.markets.get(market);
    if (!run) {
      const id = `${dir}/${market}`;
      run = { id, generation: 0, key: `${id}#0`, last: { ts: -Infinity, outcome_index: -Infinity } };
      runs.markets.set(market, run);
    } else if (goesBack(run.last, row)) {
      this.retired.add(run.key);
      run.generation++;
      run.key = `${run.id}#${run.generation}`;
    }
    // Set in place: this runs for every spooled row.
    run.last.ts = last.ts;
    run.last.outcome_index = last.outcome_index;
    return run.key;
  }

  /**
   * Rows another thread encoded (see RunEncoder): they join the market's run as they are, so
   * this thread copies no line. The next line appended here starts a chunk of its own.
   */
  appendRun(run: EncodedRun): void {
    if (run.rows === 0) return;
    this.appendedSinceRelease = Math.min(this.appendedSinceRelease, run.partition.hour);
    const dir = partitionDir(run.partition);
    const key = this.runKey(dir, run.partition, run.market, run.first, run.last);
    const chunks = run.chunks.map((c) => Buffer.from(c.buffer, c.byteOffset, c.byteLength));
    const entry = this.buffered.get(key);
    const joined = entry ? filled(entry).concat(chunks) : chunks;
    this.buffered.set(key, { partition: run.partition, market: run.market, chunks: joined, used: joined[joined.length - 1].length });
    this.pendingBytes += chunks.reduce((n, c) => n + c.length, 0);
    this.pendingRows += run.rows;
  }

  /** Rows appended but not yet acknowledged (more than one flush's worth while the disk fails). */
  get bufferedRows(): number {
    return this.pendingRows + this.flushingRows;
  }

  get bufferedBytes(): number {
    return this.pendingBytes + this.flushingBytes;
  }

  /** Writes and fsyncs everything appended so far; resolves with the number of rows acknowledged. */
  flush(): Promise<number> {
    return this.serial(() => this.flushNow());
  }

  /**
   * Runs `task` after every operation asked for before it: a part is never closed (by a roll,
   * a release or the close) while a flush is writing to it. A failed operation does not poison
   * the chain: the next flush retries what it left buffered.
   */
  private serial<T>(task: () => Promise<T>): Promise<T> {
    const run = this.chain.catch(() => undefined).then(task);
    this.chain = run;
    return run;
  }

  /**
   * On any failure (disk full, EIO, out of descriptors) the batch stays buffered, ahead of what
   * was appended since, and every part it touched is cut back to its acknowledged size, so the
   * retry writes each line exactly once and nothing acknowledged is lost.
   */
  private async flushNow(): Promise<number> {
    if (this.buffered.size === 0) return 0;
    // Books last: a process killed mid-flush leaves some parts written and others not, and a restart
    // starts a market's downtime gap at its newest book on disk. Written after everything else
    // of the flush, that book vouches that the trades and quotes that came with or before it are
    // on disk too (the sort is stable: each dataset keeps its order).
    const batch = [...this.buffered.entries()].sort(
      ([, a], [, b]) => Number(a.partition.dataset === 'books') - Number(b.partition.dataset === 'books'),
    );
    const rows = this.pendingRows;
    const bytes = this.pendingBytes;
    this.buffered.clear();
    this.pendingRows = 0;
    this.pendingBytes = 0;
    this.flushingRows = rows;
    this.flushingBytes = bytes;
    const touched: { key: string; part: OpenPart; written: number }[] = [];
    try {
      for (const [key, pending] of batch) {
        const part = await this.partFor(key, pending);
        // The chunks as they are: a concatenated copy would double a flush's memory.
        const chunks = filled(pending);
        const length = chunks.reduce((n, c) => n + c.length, 0);
        const t = { key, part, written: 0 };
        touched.push(t);
        t.written = (await part.handle.writev(chunks)).bytesWritten;
        // A short write is how a filling disk first shows: writing the rest makes it say why (ENOSPC, EDQUOT...).
        while (t.written < length) {
          const rest = Buffer.concat(chunks).subarray(t.written);
          const n = (await part.handle.write(rest)).bytesWritten;
          if (n === 0) throw Object.assign(new Error('the spool accepted no bytes'), { code: 'EIO' });
          t.written += n;
        }
      }
      await Promise.all(touched.map((t) => t.part.handle.datasync()));
    } catch (err) {
      await this.rewind(touched);
      for (const [key, entry] of batch) {
        const newer = this.buffered.get(key);
        // The batch's bytes go back ahead of what came since; the next line starts a chunk of its own.
        const chunks = filled(entry);
        this.buffered.set(
          key,
          newer ? { ...newer, chunks: chunks.concat(newer.chunks) } : { ...entry, chunks, used: chunks[chunks.length - 1].length },
        );
      }
      this.pendingRows += rows;
      this.pendingBytes += bytes;
      this.flushingRows = 0;
      this.flushingBytes = 0;
      throw err;
    }
    this.flushingRows = 0;
    this.flushingBytes = 0;
    for (const t of touched) {
      t.part.size += t.written;
      if (RUN_DATASETS.has(t.part.partition.dataset)) this.sinceRoll.set(t.part.dir, (this.sinceRoll.get(t.part.dir) ?? 0) + t.written);
    }
    this.acknowledged += rows;
    await this.closeRetired();
    return rows;
  }

  private async closeRetired(): Promise<void> {
    for (const key of this.retired) {
      if (this.buffered.has(key)) continue;
      this.retired.delete(key);
      const part = this.open.get(key);
      if (!part) continue;
      this.open.delete(key);
      await part.handle.close();
    }
  }

  /** Cuts parts back to what was acknowledged; a part that cannot be cut is closed, and later rows go to a new part. */
  private async rewind(touched: { key: string; part: OpenPart }[]): Promise<void> {
    for (const { key, part } of touched) {
      try {
        await part.handle.truncate(part.size);
      } catch {
        this.open.delete(key);
        await part.handle.close().catch(() => undefined);
      }
    }
  }

  private async partFor(key: string, pending: Pending): Promise<OpenPart> {
    const existing = this.open.get(key);
    if (existing) return existing;
    const number = String(this.nextPart++).padStart(6, '0');
    const name = pending.market === null ? `${number}.ndjson` : `${number}.${marketToken(pending.market)}.ndjson`;
    const dir = partitionDir(pending.partition);
    const rel = path.join(this.segment, dir, name);
    const file = path.join(this.dir, rel);
    await fs.mkdir(path.dirname(file), { recursive: true });
    const opened = { handle: await fs.open(file, 'a'), size: 0, rel, partition: pending.partition, dir };
    this.open.set(key, opened);
    return opened;
  }

  /**
   * Closes every open part of a partition of sorted runs that holds `bytes` or more, so it can be
   * sealed before its hour is over; its markets' next rows start new parts. A busy hour is then
   * sealed a stretch at a time, and the spool on disk stays bounded however busy it is.
   */
  roll(bytes: number): Promise<Partition[]> {
    return this.serial(() => this.rollNow(bytes));
  }

  private async rollNow(bytes: number): Promise<Partition[]> {
    await this.flushNow();
    const rolled: Partition[] = [];
    const closing: FileHandle[] = [];
    for (const [dir, size] of this.sinceRoll) {
      if (size < bytes) continue;
      const runs = this.runs.get(dir);
      if (!runs) continue;
      // A new generation for every market: rows appended meanwhile go to new parts, in order.
      for (const run of runs.markets.values()) {
        run.generation++;
        run.key = `${run.id}#${run.generation}`;
      }
      for (const [key, part] of this.open) {
        if (part.dir !== dir) continue;
        this.open.delete(key);
        this.retired.delete(key);
        closing.push(part.handle);
      }
      this.sinceRoll.delete(dir);
      rolled.push(runs.partition);
    }
    for (const handle of closing) await handle.close();
    return rolled;
  }

  /**
   * Closes the parts of markets capture has finished recording (`done`: every row of theirs
   * flushed), in the datasets whose sealed files say which markets they hold (books, trades), so
   * they are sealed at the market's end rather than its hour's (sealDue): a market that ended a
   * minute ago is then read as sealed (its replay copy written, its pages served as any sealed
   * market's) while its hour's other markets still record. Once per market and partition: a row
   * of it that still comes starts a new part, sealed with its hour.
   */
  finish(done: (p: Partition, market: string) => boolean): Promise<void> {
    return this.serial(() => this.finishNow(done));
  }

  private async finishNow(done: (p: Partition, market: string) => boolean): Promise<void> {
    await this.flushNow();
    const closing: FileHandle[] = [];
    for (const { partition, markets } of this.runs.values()) {
      if (!FINISHED_DATASETS.has(partition.dataset)) continue;
      for (const [market, run] of markets) {
        if (this.finished.has(run.id) || !done(partition, market)) continue;
        this.finished.add(run.id);
        const key = run.key;
        run.generation++;
        run.key = `${run.id}#${run.generation}`;
        // A row appended while the flush wrote is pending under the old key: its part closes after the next flush.
        if (this.buffered.has(key)) {
          this.retired.add(key);
          continue;
        }
        const part = this.open.get(key);
        if (!part) continue;
        this.open.delete(key);
        this.retired.delete(key);
        closing.push(part.handle);
      }
    }
    for (const handle of closing) await handle.close();
  }

  /** Closes the part files of partitions that `due` selects, so they can be sealed. */
  release(due: (p: Partition) => boolean): Promise<void> {
    return this.serial(() => this.releaseNow(due));
  }

  private async releaseNow(due: (p: Partition) => boolean): Promise<void> {
    // Before the flush takes the buffer (synchronously): what it takes is written, and sealed if due.
    this.appendedSinceRelease = Infinity;
    await this.flushNow();
    for (const [key, part] of [...this.open.entries()]) {
      if (due(part.partition)) {
        this.open.delete(key);
        await part.handle.close();
      }
    }
    for (const [dir, runs] of [...this.runs.entries()]) {
      if (!due(runs.partition)) continue;
      this.runs.delete(dir);
      this.sinceRoll.delete(dir);
      for (const run of runs.markets.values()) this.finished.delete(run.id);
    }
  }

  close(): Promise<void> {
    return this.serial(() => this.closeNow());
  }

  private async closeNow(): Promise<void> {
    await this.flushNow();
    for (const part of this.open.values()) await part.handle.close();
    this.open.clear();
    this.runs.clear();
    this.retired.clear();
    this.sinceRoll.clear();
    this.finished.clear();
  }

  /** Parts that may be sealed: every part of other segments, and this one's released parts. */
  async sealable(): Promise<SpoolPart[]> {
    const openFiles = new Set([...this.open.values()].map((p) => p.rel));
    return (await listSpool(this.dir)).filter((p) => !openFiles.has(path.relative(this.dir, p.file)));
  }
}

/** Every part of the spool in `dir`, of every segment and partition. */
export async function listSpool(dir: string): Promise<SpoolPart[]> {
  const parts: SpoolPart[] = [];
  for (const rel of await listFiles(dir, '.ndjson')) {
    const segments = rel.split(path.sep);
    const partition = parsePartitionDir(segments.slice(1, -1).join('/'));
    const part = partition && spoolPart(path.join(dir, rel), segments[0], partition, segments[segments.length - 1]);
    if (part) parts.push(part);
  }
  return parts;
}

/**
 * The parts of each of `partitions`, in every segment: a reader of a few partitions lists their
 * directories only, never the whole spool. Listed in `partitions`' order.
 */
export async function listSpoolOf(dir: string, partitions: readonly Partition[]): Promise<SpoolPart[][]> {
  const segments = await fs.readdir(dir).catch(() => [] as string[]);
  const listed: SpoolPart[][] = [];
  for (const p of partitions) {
    const parts: SpoolPart[] = [];
    for (const segment of segments) {
      const names = await fs.readdir(path.join(dir, segment, partitionDir(p))).catch(() => [] as string[]);
      for (const name of names) {
        const part = spoolPart(path.join(dir, segment, partitionDir(p), name), segment, p, name);
        if (part) parts.push(part);
      }
    }
    listed.push(parts);
  }
  return listed;
}

/** The part at `file` (`<segment>/<partition>/<name>` below the spool); null for a file that is not one. */
function spoolPart(file: string, segment: string, partition: Partition, name: string): SpoolPart | null {
  const m = PART_NAME.exec(name);
  if (!m) return null;
  const part: SpoolPart = { source: `${segment}:${name.replace('.ndjson', '')}`, file, partition };
  if (m[2] !== undefined && RUN_DATASETS.has(partition.dataset)) part.market = Buffer.from(m[2], 'base64url').toString('utf8');
  return part;
}

/** Bytes read from the end of each part to find a market's newest spooled row. */
const TAIL_BYTES = 512 * 1024;

export interface Recovered {
  parts: number;
  truncatedBytes: number;
  /** Newest spooled `ts` per `<dataset>:<market_id>` (books and metrics) and `reference:<feed>`, from the parts' tails. */
  lastTs: Map<string, number>;
  /** The books partition of each market's newest spooled book: where to look for its catalogue record (venue, coin, window). */
  bookPartitions: Map<string, Partition>;
  /**
   * Per market whose newest books are in doubt (`doubtedSince`): where its downtime gap starts,
   * the token's newest proved row before them, earlier than its newest row.
   */
  unprovedFrom: Map<string, number>;
}

/** A book row's start as capture spools it, up to its check columns. */
const BOOK_HEAD =
  /^\{"ts":(\d+),"recv_ts":-?\d+,"market_id":"([^"]*)","token_id":"([^"]*)",.*?"verified_by":(?:null|"([a-z_]+)"),"hash_check":(?:null|"([a-z]+)")/;
const PROVED = new Set(['snapshot', 'hash', 'rest']);
const DOUBTED = new Set(['mismatch', 'unverifiable']);

/**
 * Where a token's record stops being vouched for, from its spooled rows (`ts` order): a row the
 * venue's hash did not reproduce and nothing proved held its copy in doubt, and the process kept
 * that doubt in memory (a proof or a gap was still to come). A process killed then leaves rows
 * nothing settled: its successor's downtime gap starts at the newest proved row before them
 * (before the first row read, when none was read), not after them. Undefined: not in doubt.
 */
export function doubtedSince(rows: readonly { ts: number; by: string | null; check: string | null }[]): number | undefined {
  let proved = -Infinity;
  let doubted = false;
  for (const r of rows) {
    if (r.by !== null && PROVED.has(r.by)) [proved, doubted] = [r.ts, false];
    else if (r.check !== null && DOUBTED.has(r.check)) doubted = true;
  }
  if (!doubted) return undefined;
  return proved > -Infinity ? proved : rows[0].ts - 1;
}

/**
 * After a crash the last line of a part may be half written; it was never acknowledged, so
 * it is cut off. Only parts of other (dead) segments are touched. The newest row of each
 * market is reported so that a restart's downtime gap starts after what was really kept.
 */
export async function recoverSpool(dir: string, ownSegment: string): Promise<Recovered> {
  let truncatedBytes = 0;
  const lastTs = new Map<string, number>();
  const bookPartitions = new Map<string, Partition>();
  const checks = new Map<string, { market: string; rows: { ts: number; by: string | null; check: string | null }[] }>();
  const parts = (await listSpool(dir)).filter((p) => !p.source.startsWith(`${ownSegment}:`));
  for (const part of parts) {
    const handle = await fs.open(part.file, 'r+');
    try {
      const size = (await handle.stat()).size;
      const start = Math.max(0, size - TAIL_BYTES);
      const { buffer, bytesRead } = await handle.read(Buffer.alloc(size - start), 0, size - start, start);
      const tail = buffer.subarray(0, bytesRead);
      const end = tail.lastIndexOf(0x0a) + 1;
      const keep = end > 0 || start === 0 ? start + end : await lastLineEnd(handle, start);
      if (keep < size) {
        await handle.truncate(keep);
        await handle.sync();
        truncatedBytes += size - keep;
      }
      if (part.partition.dataset === 'reference') {
        // A reference row starts `{"ts":…,"source":…,"symbol":…`: keyed by its feed, `<source>:<symbol>`.
        for (const m of tail
          .subarray(0, end)
          .toString('utf8')
          .matchAll(/^\{"ts":(\d+),"source":"([a-z]+)","symbol":"([^"]*)"/gm)) {
          const key = `reference:${m[2]}:${m[3]}`;
          if (Number(m[1]) > (lastTs.get(key) ?? -Infinity)) lastTs.set(key, Number(m[1]));
        }
        continue;
      }
      if (part.partition.dataset !== 'books' && part.partition.dataset !== 'metrics') continue;
      for (const line of tail.subarray(0, end).toString('utf8').split('\n')) {
        // Capture writes `ts` first in every book and metric row; a book row's checks are read in the same pass.
        const head = part.partition.dataset === 'books' ? BOOK_HEAD.exec(line) : null;
        const m = head ?? /^\{"ts":(\d+),.*?"market_id":"([^"]*)"/.exec(line);
        if (!m) continue;
        const ts = Number(m[1]);
        const key = `${part.partition.dataset}:${m[2]}`;
        if (head) {
          const token = checks.get(head[3]) ?? checks.set(head[3], { market: head[2], rows: [] }).get(head[3])!;
          token.rows.push({ ts, by: head[4] ?? null, check: head[5] ?? null });
        }
        if (ts <= (lastTs.get(key) ?? -Infinity)) continue;
        lastTs.set(key, ts);
        if (part.partition.dataset === 'books') bookPartitions.set(m[2], part.partition);
      }
    } finally {
      await handle.close();
    }
  }
  const unprovedFrom = new Map<string, number>();
  for (const { market, rows } of checks.values()) {
    // Parts of one market from several segments (and rolls) are read in no particular order.
    const from = doubtedSince(rows.sort((a, b) => a.ts - b.ts));
    if (from !== undefined && from < (unprovedFrom.get(market) ?? Infinity)) unprovedFrom.set(market, from);
  }
  return { parts: parts.length, truncatedBytes, lastTs, bookPartitions, unprovedFrom };
}

/** Byte offset just past the last newline before `before`, scanning back; 0 when there is none. */
async function lastLineEnd(handle: FileHandle, before: number): Promise<number> {
  const chunk = Buffer.alloc(TAIL_BYTES);
  for (let end = before; end > 0; end -= TAIL_BYTES) {
    const from = Math.max(0, end - TAIL_BYTES);
    const { bytesRead } = await handle.read(chunk, 0, end - from, from);
    const at = chunk.subarray(0, bytesRead).lastIndexOf(0x0a);
    if (at >= 0) return from + at + 1;
  }
  return 0;
}
