// The write-ahead spool. A record is acknowledged once a flush has fsynced it; a crash loses
// at most what arrived since the last flush (one flush interval). Each process writes its own
// segment directory, and within it a partition's rows go to numbered part files, so a part
// is sealed exactly once and never appended to afterwards.
import fs from 'node:fs/promises';
import type { FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { type BookRow, type Dataset, type DatasetRows, ladderJson } from '../records.js';
import { listFiles } from './fsutil.js';
import { type Partition, parsePartitionDir, partitionDir } from './layout.js';

export interface SpoolPart {
  /** `<segment>:<part>`: identifies the part in the manifest so a re-seal never repeats it. */
  source: string;
  file: string;
  partition: Partition;
}

interface OpenPart {
  handle: FileHandle;
  /** Bytes acknowledged in the file: a failed write is cut back to this. */
  size: number;
}

export function newSegmentId(): string {
  const stamp = new Date().toISOString().replace(/[-:.TZ]/g, '');
  return `${stamp}-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
}

/** A book row's NDJSON line, its ladders' JSON reused when the same arrays come again. */
function bookLine(r: BookRow): string {
  const ex = r.exchange_ts === null ? 'null' : r.exchange_ts;
  return `{"ts":${r.ts},"recv_ts":${r.recv_ts},"market_id":${JSON.stringify(r.market_id)},"token_id":${JSON.stringify(r.token_id)},"outcome_index":${r.outcome_index},"outcome":${JSON.stringify(r.outcome)},"exchange_ts":${ex},${ladderJson(r)}}`;
}

export class Spool {
  readonly segment = newSegmentId();
  /** Lines as bytes: a second of streamed rows held as strings would be promoted and scanned by every GC. */
  private readonly buffered = new Map<string, { partition: Partition; lines: Buffer[] }>();
  private readonly open = new Map<string, OpenPart & { part: number }>();
  private nextPart = 1;
  private flushing: Promise<number> = Promise.resolve(0);
  private pendingRows = 0;
  private pendingBytes = 0;
  acknowledged = 0;

  constructor(private readonly dir: string) {}

  append<D extends Dataset>(partition: Partition & { dataset: D }, rows: readonly DatasetRows[D][]): void {
    if (rows.length === 0) return;
    const key = partitionDir(partition);
    let entry = this.buffered.get(key);
    if (!entry) {
      entry = { partition, lines: [] };
      this.buffered.set(key, entry);
    }
    for (const row of rows) {
      const line = Buffer.from(`${partition.dataset === 'books' ? bookLine(row as BookRow) : JSON.stringify(row)}\n`);
      entry.lines.push(line);
      this.pendingBytes += line.length;
    }
    this.pendingRows += rows.length;
  }

  /** Rows appended but not yet acknowledged (more than one flush's worth while the disk fails). */
  get bufferedRows(): number {
    return this.pendingRows;
  }

  get bufferedBytes(): number {
    return this.pendingBytes;
  }

  /** Writes and fsyncs everything appended so far; resolves with the number of rows acknowledged. */
  flush(): Promise<number> {
    // A failed flush must not poison the chain: the next one retries what it left buffered.
    this.flushing = this.flushing.catch(() => 0).then(() => this.flushNow());
    return this.flushing;
  }

  /**
   * On any failure (disk full, EIO, out of descriptors) the batch stays buffered, ahead of what
   * was appended since, and every part it touched is cut back to its acknowledged size, so the
   * retry writes each line exactly once and nothing acknowledged is lost.
   */
  private async flushNow(): Promise<number> {
    if (this.buffered.size === 0) return 0;
    const batch = [...this.buffered.entries()];
    const rows = this.pendingRows;
    const bytes = this.pendingBytes;
    this.buffered.clear();
    this.pendingRows = 0;
    this.pendingBytes = 0;
    const touched: { key: string; part: OpenPart; written: number }[] = [];
    try {
      for (const [key, { lines }] of batch) {
        const part = await this.partFor(key);
        const bytes = Buffer.concat(lines);
        const t = { key, part, written: 0 };
        touched.push(t);
        t.written = (await part.handle.write(bytes)).bytesWritten;
        if (t.written !== bytes.length) throw Object.assign(new Error('short write to the spool'), { code: 'EIO' });
      }
      await Promise.all(touched.map((t) => t.part.handle.datasync()));
    } catch (err) {
      await this.rewind(touched);
      for (const [key, entry] of batch) {
        const newer = this.buffered.get(key);
        this.buffered.set(key, { partition: entry.partition, lines: newer ? entry.lines.concat(newer.lines) : entry.lines });
      }
      this.pendingRows += rows;
      this.pendingBytes += bytes;
      throw err;
    }
    for (const t of touched) t.part.size += t.written;
    this.acknowledged += rows;
    return rows;
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

  private async partFor(key: string): Promise<OpenPart & { part: number }> {
    const existing = this.open.get(key);
    if (existing) return existing;
    const part = this.nextPart++;
    const file = path.join(this.dir, this.segment, key, `${String(part).padStart(6, '0')}.ndjson`);
    await fs.mkdir(path.dirname(file), { recursive: true });
    const opened = { handle: await fs.open(file, 'a'), part, size: 0 };
    this.open.set(key, opened);
    return opened;
  }

  /** Closes the part files of partitions that `due` selects, so they can be sealed. */
  async release(due: (p: Partition) => boolean): Promise<void> {
    await this.flush();
    for (const [key, part] of [...this.open.entries()]) {
      const partition = parsePartitionDir(key);
      if (partition && due(partition)) {
        this.open.delete(key);
        await part.handle.close();
      }
    }
  }

  async close(): Promise<void> {
    await this.flush();
    for (const part of this.open.values()) await part.handle.close();
    this.open.clear();
  }

  /** Parts that may be sealed: every part of other segments, and this one's released parts. */
  async sealable(): Promise<SpoolPart[]> {
    const openFiles = new Set(
      [...this.open.entries()].map(([key, p]) => `${this.segment}/${key}/${String(p.part).padStart(6, '0')}.ndjson`),
    );
    return (await listSpool(this.dir)).filter((p) => !openFiles.has(path.relative(this.dir, p.file)));
  }
}

export async function listSpool(dir: string): Promise<SpoolPart[]> {
  const parts: SpoolPart[] = [];
  for (const rel of await listFiles(dir, '.ndjson')) {
    const segments = rel.split(path.sep);
    const segment = segments[0];
    const name = segments[segments.length - 1];
    const partition = parsePartitionDir(segments.slice(1, -1).join('/'));
    if (!partition) continue;
    parts.push({ source: `${segment}:${name.replace('.ndjson', '')}`, file: path.join(dir, rel), partition });
  }
  return parts;
}

/** Bytes read from the end of each part to find a market's newest spooled row. */
const TAIL_BYTES = 512 * 1024;

export interface Recovered {
  parts: number;
  truncatedBytes: number;
  /** Newest spooled `ts` per `<dataset>:<market_id>` (books and metrics), from the parts' tails. */
  lastTs: Map<string, number>;
}

/**
 * After a crash the last line of a part may be half written; it was never acknowledged, so
 * it is cut off. Only parts of other (dead) segments are touched. The newest row of each
 * market is reported so that a restart's downtime gap starts after what was really kept.
 */
export async function recoverSpool(dir: string, ownSegment: string): Promise<Recovered> {
  let truncatedBytes = 0;
  const lastTs = new Map<string, number>();
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
      if (part.partition.dataset !== 'books' && part.partition.dataset !== 'metrics') continue;
      for (const line of tail.subarray(0, end).toString('utf8').split('\n')) {
        // Capture writes `ts` first in every book and metric row.
        const m = /^\{"ts":(\d+),.*?"market_id":"([^"]*)"/.exec(line);
        if (!m) continue;
        const ts = Number(m[1]);
        const key = `${part.partition.dataset}:${m[2]}`;
        if (ts > (lastTs.get(key) ?? -Infinity)) lastTs.set(key, ts);
      }
    } finally {
      await handle.close();
    }
  }
  return { parts: parts.length, truncatedBytes, lastTs };
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
