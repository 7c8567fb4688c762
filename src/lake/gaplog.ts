// Recorded capture gaps in memory: every gaps file (and the spool's open-hour gaps), re-read
// only when those files changed.
import path from 'node:path';
import type { Venue, Window } from '../config.js';
import { filesSignature } from './catalogue.js';
import type { Duck, JsonRow } from './duckdb.js';
import type { FileIndex, IndexedFile } from './fileindex.js';
import { type LakePaths, type Partition, parsePartitionDir, partitionDir } from './layout.js';
import type { SpoolPart } from './spool.js';
import { type Files, parquetSource, spoolSource } from './sql.js';

export interface GapRecord {
  venue: Venue;
  coin: string;
  window: Window;
  market_id: string | null;
  dataset: string;
  from_ts: number;
  to_ts: number;
  reason: string;
}

export class GapLog {
  private rows: GapRecord[] = [];
  /** The rows by market (null: a whole series'), built when asked: discovery looks markets up one by one. */
  private byMarket: Map<string | null, GapRecord[]> | null = null;
  private signature = '';

  constructor(
    private readonly paths: LakePaths,
    private readonly duck: Duck,
    private readonly index: FileIndex,
    private readonly files: (partitions: Partition[]) => Promise<Files>,
    private readonly ensure: (files: readonly IndexedFile[]) => Promise<void>,
  ) {}

  /** Re-reads the gaps when their files (sealed, or spool parts in `spool`) changed. */
  async load(spool: SpoolPart[]): Promise<void> {
    const files = this.index.all().filter((f) => f.partition.dataset === 'gaps');
    const spoolParts = spool.filter((s) => s.partition.dataset === 'gaps');
    const signature = files.map((f) => f.sha256).join(',') + (await filesSignature({ sealed: [], spool: spoolParts.map((s) => s.file) }));
    if (signature === this.signature) return;
    const rows: GapRecord[] = [];
    for (let i = 0; i < files.length; i += 4000) {
      await this.ensure(files.slice(i, i + 4000));
      const list = files.slice(i, i + 4000).map((f) => path.join(this.paths.lake, f.path));
      const found = await this.duck.rows(
        `SELECT market_id, dataset, epoch_ms(from_ts)::DOUBLE AS f, epoch_ms(to_ts)::DOUBLE AS t, reason, filename FROM ${parquetSource(list, 'filename = true')}`,
      );
      for (const r of found) {
        const p = parsePartitionDir(path.relative(this.paths.lake, path.dirname(String(r.filename))));
        if (p) rows.push(gapRecord(p, r));
      }
    }
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
  }

  /** Recorded gaps (sealed) that overlap [from, to) for a series or one of its markets. */
  find(
    filter: { venue: Venue; coin?: string; window?: Window; market_id?: string; dataset?: string },
    from = -Infinity,
    to = Infinity,
  ): GapRecord[] {
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
    return rows.filter(
      (g) =>
        g.venue === filter.venue &&
        (!filter.coin || g.coin === filter.coin) &&
        (!filter.window || g.window === filter.window) &&
        (!filter.market_id || g.market_id === filter.market_id || g.market_id === null) &&
        (!filter.dataset || g.dataset === filter.dataset) &&
        g.from_ts < to &&
        g.to_ts > from,
    );
  }
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
