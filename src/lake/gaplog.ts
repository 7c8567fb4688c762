// Recorded capture gaps in memory: every gaps file (and the spool's open-hour gaps). Each sealed
// file is read once (its rows kept by path and sha256, and in a checkpoint for the next start);
// when the files change only the new ones are read.
import path from 'node:path';
import type { Venue } from '../config.js';
import { filesSignature } from './catalogue.js';
import type { Duck, JsonRow } from './duckdb.js';
import type { FileIndex, IndexedFile } from './fileindex.js';
import { fileCheckpointText, readFileCheckpoint, writeFileAtomic } from './fsutil.js';
import { type LakePaths, type Partition, type PartitionWindow, partitionDir } from './layout.js';
import type { SpoolPart } from './spool.js';
import { type Files, parquetSource, spoolSource } from './sql.js';

/** Below DATA_DIR/state. */
export const GAPS_CHECKPOINT = 'gaps.ndjson';

export interface GapRecord {
  venue: Venue;
  coin: string;
  window: PartitionWindow;
  market_id: string | null;
  dataset: string;
  from_ts: number;
  to_ts: number;
  reason: string;
  /** Not in the lake yet: open at capture's last heartbeat, or presumed from a capture that stopped (capture/heartbeat.ts). */
  provisional?: true;
}

export class GapLog {
  private rows: GapRecord[] = [];
  /** The rows by market (null: a whole series'), built when asked: discovery looks markets up one by one. */
  private byMarket: Map<string | null, GapRecord[]> | null = null;
  private signature = '';
  /** Each sealed gaps file's rows, by `path@sha256`. */
  private readonly sealed = new Map<string, GapRecord[]>();
  private checkpointRead = false;

  constructor(
    private readonly paths: LakePaths,
    private readonly duck: Duck,
    private readonly index: FileIndex,
    private readonly files: (partitions: Partition[]) => Promise<Files>,
    private readonly ensure: (files: readonly IndexedFile[]) => Promise<void>,
  ) {}

  private get checkpointFile(): string {
    return path.join(this.paths.state, GAPS_CHECKPOINT);
  }

  /** Re-reads the gaps when their files (sealed, or spool parts in `spool`) changed; returns how many sealed files were read. */
  async load(spool: SpoolPart[]): Promise<number> {
    const files = this.index.all().filter((f) => f.partition.dataset === 'gaps');
    const spoolParts = spool.filter((s) => s.partition.dataset === 'gaps');
    const signature = files.map((f) => f.sha256).join(',') + (await filesSignature({ sealed: [], spool: spoolParts.map((s) => s.file) }));
    if (signature === this.signature) return 0;
    if (!this.checkpointRead) await this.readCheckpoint();
    const current = new Set(files.map(fileKey));
    for (const key of this.sealed.keys()) if (!current.has(key)) this.sealed.delete(key);
    const unread = files.filter((f) => !this.sealed.has(fileKey(f)));
    for (let i = 0; i < unread.length; i += 4000) {
      const chunk = unread.slice(i, i + 4000);
      await this.ensure(chunk);
      const byPath = new Map(chunk.map((f) => [f.path, { key: fileKey(f), partition: f.partition, rows: [] as GapRecord[] }]));
      const found = await this.duck.rows(
        `SELECT market_id, dataset, epoch_ms(from_ts)::DOUBLE AS f, epoch_ms(to_ts)::DOUBLE AS t, reason, filename FROM ${parquetSource(
          chunk.map((f) => path.join(this.paths.lake, f.path)),
          'filename = true',
        )}`,
      );
      for (const r of found) {
        const file = byPath.get(path.relative(this.paths.lake, String(r.filename)).split(path.sep).join('/'));
        file?.rows.push(gapRecord(file.partition, r));
      }
      for (const { key, rows } of byPath.values()) this.sealed.set(key, rows);
    }
    const rows: GapRecord[] = [...this.sealed.values()].flat();
    // Gaps closed in the open hour are still in the spool: they count too.
    const spooled = new Map(spoolParts.map((s) => [partitionDir(s.partition), s.partition]));
    for (const p of spooled.values()) {
      const { spool } = await this.files([p]);
      if (!spool.length) continue;
      for (const r of await this.duck.rows(
        `SELECT market_id, dataset, epoch_ms(from_ts)::DOUBLE AS f, epoch_ms(to_ts)::DOUBLE AS t, reason FROM ${spoolSource('gaps', spool, true)}`,
      ))
        rows.push(gapRecord(p, r));
    }
    this.rows = rows.sort((a, b) => a.from_ts - b.from_ts);
    this.byMarket = null;
    // Only once read: a load that failed half way is tried again by the next.
    this.signature = signature;
    return unread.length;
  }

  private async readCheckpoint(): Promise<void> {
    this.checkpointRead = true;
    await readFileCheckpoint(this.checkpointFile, 'rows', this.sealed);
  }

  /** Every sealed file's rows, so a restart (or a new replica, from the bucket's snapshot) reads only files sealed since. */
  async writeCheckpoint(): Promise<string> {
    const text = fileCheckpointText(this.sealed, 'rows');
    await writeFileAtomic(this.checkpointFile, text);
    return text;
  }

  /** Recorded gaps (sealed) that overlap [from, to) for a series or one of its markets. */
  find(filter: GapFilter, from = -Infinity, to = Infinity): GapRecord[] {
    let rows = this.rows;
    if (filter.market_id) {
      if (!this.byMarket) {
        this.byMarket = new Map();
        for (const g of this.rows) {
          const list = this.byMarket.get(g.market_id);
          if (list) list.push(g);
          else this.byMarket.set(g.market_id, [g]);
        }
      }
      rows = [...(this.byMarket.get(filter.market_id) ?? []), ...(this.byMarket.get(null) ?? [])].sort((a, b) => a.from_ts - b.from_ts);
    }
    return rows.filter((g) => gapMatches(g, filter, from, to));
  }
}

export interface GapFilter {
  venue: Venue;
  coin?: string;
  window?: PartitionWindow;
  market_id?: string;
  dataset?: string;
}

/** Whether `g` is of the series or market `filter` names and overlaps [from, to). */
export function gapMatches(g: GapRecord, filter: GapFilter, from: number, to: number): boolean {
  return (
    g.venue === filter.venue &&
    (!filter.coin || g.coin === filter.coin) &&
    (!filter.window || g.window === filter.window) &&
    (!filter.market_id || g.market_id === filter.market_id || g.market_id === null) &&
    (!filter.dataset || g.dataset === filter.dataset) &&
    g.from_ts < to &&
    g.to_ts > from
  );
}

function fileKey(f: IndexedFile): string {
  return `${f.path}@${f.sha256}`;
}

function gapRecord(p: Partition, r: JsonRow): GapRecord {
  return {
    venue: p.venue,
    coin: p.coin,
    window: p.window,
    market_id: (r.market_id as string) ?? null,
    dataset: String(r.dataset),
    from_ts: Number(r.f),
    to_ts: Number(r.t),
    reason: String(r.reason),
  };
}
