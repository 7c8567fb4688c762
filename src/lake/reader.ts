// The read side of the lake for the API: files of planned partitions (sealed ones from their
// manifests, open hours from the spool; never a glob), and the market catalogue in memory.
import { readdirSync } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Venue, Window } from '../config.js';
import { type Market, type MarketStatus } from '../records.js';
import type { Duck, JsonRow } from './duckdb.js';
import { followLines, listFiles, writeFileAtomic } from './fsutil.js';
import { type LakePaths, type Partition, SCHEMAS, isTime, parsePartitionDir, partitionDir } from './layout.js';
import { COMMIT_LOG, type ManifestFile, readManifest } from './manifest.js';
import { type SpoolPart, listSpool } from './spool.js';
import { parquetSource, relation, spoolSource } from './sql.js';

export interface PartitionFiles {
  sealed: string[];
  spool: string[];
}

/** A sealed file as the listing and downloads see it (from its partition's manifest). */
export interface IndexedFile extends ManifestFile {
  partition: Partition;
  /** Path below the lake root, `books/venue=.../hour=HH/<name>`. */
  path: string;
}

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

export interface StoredMarket extends Market {
  /** When this newest version was captured. */
  ts: number;
}

const FINAL: MarketStatus[] = ['resolved', 'cancelled'];
const MARKET_SELECT = SCHEMAS.markets.map((c) => (isTime(c) ? `epoch_ms("${c.name}")::DOUBLE AS "${c.name}"` : `"${c.name}"`)).join(', ');

export class LakeReader {
  private readonly markets = new Map<string, StoredMarket>();
  private sorted: StoredMarket[] | null = null;
  /** Sealed files by partition directory; swapped whole on each index rebuild. */
  private index = new Map<string, IndexedFile[]>();
  private indexSorted: IndexedFile[] | null = null;
  private gapRows: GapRecord[] = [];
  private gapSignature = '';
  private readonly ingested = new Map<string, string>();
  /** Bytes of the commit log already applied. */
  private commitOffset = 0;

  constructor(
    readonly duck: Duck,
    readonly paths: LakePaths,
    private readonly series: { venue: Venue; coin: string; window: Window }[],
  ) {}

  /** Sealed files and spool parts of `partitions`; a part already sealed into a file is left out. */
  async files(partitions: Partition[]): Promise<PartitionFiles> {
    const sealed: string[] = [];
    const spool: string[] = [];
    const segments = await fs.readdir(this.paths.spool).catch(() => [] as string[]);
    for (const p of partitions) {
      const dir = partitionDir(p);
      const manifest = await readManifest(this.paths.manifest, p);
      const done = new Set(manifest.files.flatMap((f) => f.sources));
      for (const f of manifest.files) sealed.push(path.join(this.paths.lake, dir, f.name));
      for (const segment of segments) {
        const names = await fs.readdir(path.join(this.paths.spool, segment, dir)).catch(() => [] as string[]);
        for (const name of names) {
          if (name.endsWith('.ndjson') && !done.has(`${segment}:${name.replace('.ndjson', '')}`))
            spool.push(path.join(this.paths.spool, segment, dir, name));
        }
      }
    }
    return { sealed, spool };
  }

  // --- the sealed-file index and recorded gaps -----------------------------------------

  /**
   * The index at start: its checkpoint plus the commit log since, so a restart of a long lake
   * reads one file instead of every manifest (38,880 of them at 90 days: 10-13 s). Without a
   * usable checkpoint, every manifest is walked and a checkpoint written.
   */
  async openIndex(): Promise<'checkpoint' | 'walk'> {
    if (await this.readIndexCheckpoint()) {
      await this.followCommits();
      await this.loadGaps();
      return 'checkpoint';
    }
    await this.indexAll();
    await this.writeIndexCheckpoint();
    return 'walk';
  }

  private get indexCheckpointFile(): string {
    return path.join(this.paths.state, 'index.ndjson');
  }

  private async readIndexCheckpoint(): Promise<boolean> {
    try {
      const lines = (await fs.readFile(this.indexCheckpointFile, 'utf8')).split('\n');
      const { commit_offset: offset } = JSON.parse(lines[0]) as { commit_offset: number };
      // A commit log shorter than the checkpoint's offset is not the log it was taken against.
      if (
        (await fs.stat(this.commitLog).then(
          (st) => st.size,
          () => 0,
        )) < offset
      )
        return false;
      const index = new Map<string, IndexedFile[]>();
      for (let i = 1; i < lines.length; i++) {
        if (!lines[i]) continue;
        const [dir, files] = JSON.parse(lines[i]) as [string, ManifestFile[]];
        const p = parsePartitionDir(dir);
        if (p) index.set(dir, indexedFiles(p, files));
      }
      this.index = index;
      this.indexSorted = null;
      this.commitOffset = offset;
      return true;
    } catch {
      return false; // none yet, or damaged: a walk rebuilds it
    }
  }

  private async writeIndexCheckpoint(): Promise<void> {
    const lines = [JSON.stringify({ commit_offset: this.commitOffset })];
    for (const [dir, files] of this.index) lines.push(JSON.stringify([dir, files.map(({ partition: _p, path: _path, ...f }) => f)]));
    await writeFileAtomic(this.indexCheckpointFile, `${lines.join('\n')}\n`);
  }

  /** Walks every manifest: without a checkpoint, and hourly as a safety net behind the commit log. */
  async indexAll(): Promise<void> {
    // Lines appended from here on are followed later; re-reading a partition twice is harmless.
    this.commitOffset = await fs.stat(this.commitLog).then(
      (s) => s.size,
      () => 0,
    );
    const index = new Map<string, IndexedFile[]>();
    const partitions = (await listFiles(this.paths.manifest, '.json'))
      .map((rel) => parsePartitionDir(rel.replace(/\.json$/, '')))
      .filter((p): p is Partition => p !== null);
    // Thousands of small reads: 32 at a time rather than one after another.
    let next = 0;
    await Promise.all(
      Array.from({ length: 32 }, async () => {
        while (next < partitions.length) {
          const p = partitions[next++];
          index.set(partitionDir(p), await this.indexed(p));
        }
      }),
    );
    this.index = index;
    this.indexSorted = null;
    await this.loadGaps();
  }

  private get commitLog(): string {
    return path.join(this.paths.manifest, COMMIT_LOG);
  }

  /**
   * Brings the index and catalogue up to date: the partitions the commit log names since the
   * last call are re-read (seal, compaction and backfill all commit through it), market versions
   * still in the spool are read when their parts grew, and gaps when theirs changed.
   */
  async update(): Promise<Partition[]> {
    const changed = await this.followCommits();
    const spool = await listSpool(this.paths.spool);
    const spooled = spool.filter((s) => s.partition.dataset === 'markets').map((s) => s.partition);
    await this.ingest([...changed.filter((p) => p.dataset === 'markets'), ...spooled]);
    await this.loadGaps(spool);
    return changed;
  }

  /** Re-reads the manifests the commit log names since the last call. */
  private async followCommits(): Promise<Partition[]> {
    const changed = new Map<string, Partition>();
    const at = await followLines(this.commitLog, this.commitOffset, (line) => {
      const p = parsePartitionDir(commitPartition(line));
      if (p) changed.set(partitionDir(p), p);
    });
    if (at !== null) this.commitOffset = at;
    for (const [dir, p] of changed) this.index.set(dir, await this.indexed(p));
    if (changed.size) this.indexSorted = null;
    return [...changed.values()];
  }

  private async indexed(p: Partition): Promise<IndexedFile[]> {
    return indexedFiles(p, (await readManifest(this.paths.manifest, p)).files);
  }

  /** Every sealed file, by hour, then path. */
  sealedFiles(): IndexedFile[] {
    if (!this.indexSorted) {
      this.indexSorted = [...this.index.values()]
        .flat()
        .sort((a, b) => a.partition.hour - b.partition.hour || (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
    }
    return this.indexSorted;
  }

  /**
   * Whether any spool part holds rows of `partitions` now. Synchronous on purpose: a couple of
   * reads of small, cached directories cost microseconds, less than a trip to the threadpool.
   */
  spooled(partitions: Partition[]): boolean {
    let segments: string[];
    try {
      segments = readdirSync(this.paths.spool);
    } catch {
      return false;
    }
    for (const segment of segments) {
      for (const p of partitions) {
        try {
          if (readdirSync(path.join(this.paths.spool, segment, partitionDir(p))).some((n) => n.endsWith('.ndjson'))) return true;
        } catch {
          // no part of this partition in this segment
        }
      }
    }
    return false;
  }

  /** The sealed files of `partitions` as the in-memory index has them: which content a cache was built from. */
  signature(partitions: Partition[]): string {
    let out = '';
    for (const p of partitions) for (const f of this.index.get(partitionDir(p)) ?? []) out += `${f.path}@${f.sha256}\n`;
    return out;
  }

  sealedFile(relPath: string): IndexedFile | null {
    return this.index.get(path.posix.dirname(relPath))?.find((f) => f.path === relPath) ?? null;
  }

  private async loadGaps(spool?: SpoolPart[]): Promise<void> {
    const files = [...this.index.values()].flat().filter((f) => f.partition.dataset === 'gaps');
    const spoolParts = (spool ?? (await listSpool(this.paths.spool))).filter((s) => s.partition.dataset === 'gaps');
    const signature = files.map((f) => f.sha256).join(',') + (await filesSignature({ sealed: [], spool: spoolParts.map((s) => s.file) }));
    if (signature === this.gapSignature) return;
    this.gapSignature = signature;
    const rows: GapRecord[] = [];
    for (let i = 0; i < files.length; i += 4000) {
      const list = files.slice(i, i + 4000).map((f) => path.join(this.paths.lake, f.path));
      const found = await this.duck.rows(
        `SELECT market_id, dataset, epoch_ms(from_ts)::DOUBLE AS f, epoch_ms(to_ts)::DOUBLE AS t, reason, filename FROM ${parquetSource(list, 'filename = true')}`,
      );
      for (const r of found) {
        const p = parsePartitionDir(path.relative(this.paths.lake, path.dirname(String(r.filename))));
        if (!p) continue;
        rows.push({
          venue: p.venue,
          coin: p.coin,
          window: p.window,
          market_id: (r.market_id as string) ?? null,
          dataset: String(r.dataset),
          from_ts: Number(r.f),
          to_ts: Number(r.t),
          reason: String(r.reason),
        });
      }
    }
    // Gaps closed in the open hour are still in the spool: they count too.
    const spooled = new Map(spoolParts.map((s) => [partitionDir(s.partition), s.partition]));
    for (const p of spooled.values()) {
      const { spool } = await this.files([p]);
      if (!spool.length) continue;
      for (const r of await this.duck.rows(
        `SELECT market_id, dataset, epoch_ms(from_ts)::DOUBLE AS f, epoch_ms(to_ts)::DOUBLE AS t, reason FROM ${spoolSource('gaps', spool, true)}`,
      )) {
        rows.push({
          venue: p.venue,
          coin: p.coin,
          window: p.window,
          market_id: (r.market_id as string) ?? null,
          dataset: String(r.dataset),
          from_ts: Number(r.f),
          to_ts: Number(r.t),
          reason: String(r.reason),
        });
      }
    }
    this.gapRows = rows.sort((a, b) => a.from_ts - b.from_ts);
  }

  /** Recorded gaps (sealed) that overlap [from, to) for a series or one of its markets. */
  gaps(
    filter: { venue: Venue; coin?: string; window?: Window; market_id?: string; dataset?: string },
    from = -Infinity,
    to = Infinity,
  ): GapRecord[] {
    return this.gapRows.filter(
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

  // --- the market catalogue -----------------------------------------------------------

  private get checkpointFile(): string {
    return path.join(this.paths.state, 'catalogue.ndjson');
  }

  /**
   * Reads every market version in the lake once (after `indexAll`); then `refresh` reads recent
   * hours only. A checkpoint of the catalogue (the newest version of each market and the files it
   * covers) makes a restart read only the market files sealed since: opening a Parquet file costs
   * milliseconds, and a long lake has thousands.
   */
  async loadAll(): Promise<void> {
    const covered = await this.readCheckpoint();
    const sealed = this.sealedFiles()
      .filter((f) => f.partition.dataset === 'markets' && !covered.has(`${f.path}@${f.sha256}`))
      .map((f) => path.join(this.paths.lake, f.path));
    // One scan per 500 files (measured fastest), not one query per partition.
    for (let i = 0; i < sealed.length; i += 500) {
      const files = sealed.slice(i, i + 500);
      for (const row of await this.duck.rows(`SELECT ${MARKET_SELECT}, filename FROM ${parquetSource(files, 'filename = true')}`)) {
        const p = parsePartitionDir(path.relative(this.paths.lake, path.dirname(String(row.filename))));
        if (p) this.upsert(toMarket(row, p));
      }
    }
    const spoolParts = (await listFiles(this.paths.spool, '.ndjson'))
      .map((f) => parsePartitionDir(path.dirname(f).split(path.sep).slice(1).join('/')))
      .filter((p): p is Partition => p !== null && p.dataset === 'markets');
    await this.ingest(spoolParts);
    if (sealed.length > 0) await this.writeCheckpoint();
  }

  private async readCheckpoint(): Promise<Set<string>> {
    let text: string;
    try {
      text = await fs.readFile(this.checkpointFile, 'utf8');
    } catch {
      return new Set();
    }
    const lines = text.split('\n');
    try {
      const covered = new Set<string>(JSON.parse(lines[0]).files);
      for (let i = 1; i < lines.length; i++) if (lines[i]) this.upsert(JSON.parse(lines[i]));
      return covered;
    } catch {
      return new Set(); // a damaged checkpoint only costs a full read
    }
  }

  /**
   * Checkpoints of the index and the catalogue. The catalogue's is as of the sealed market files;
   * the spool's versions are read again at start.
   */
  async writeCheckpoint(): Promise<void> {
    await this.writeIndexCheckpoint();
    const files = this.sealedFiles()
      .filter((f) => f.partition.dataset === 'markets')
      .map((f) => `${f.path}@${f.sha256}`);
    const lines = [JSON.stringify({ files }), ...[...this.markets.values()].map((m) => JSON.stringify(m))];
    await writeFileAtomic(this.checkpointFile, `${lines.join('\n')}\n`);
  }

  private async ingest(partitions: Partition[]): Promise<void> {
    const unique = new Map(partitions.map((p) => [partitionDir(p), p]));
    const select = MARKET_SELECT;
    for (const p of unique.values()) {
      const files = await this.files([p]);
      // Only partitions whose files changed since the last read are queried again.
      const signature = await filesSignature(files);
      if (this.ingested.get(partitionDir(p)) === signature) continue;
      this.ingested.set(partitionDir(p), signature);
      const source = relation('markets', files);
      if (!source) continue;
      for (const row of await this.duck.rows(`SELECT ${select} FROM (${source})`)) this.upsert(toMarket(row, p));
    }
  }

  upsert(m: StoredMarket): void {
    const key = `${m.venue}:${m.market_id}`;
    const current = this.markets.get(key);
    if (current && current.ts >= m.ts) return;
    this.markets.set(key, m);
    this.sorted = null;
  }

  market(venue: Venue, id: string, now: number): StoredMarket | null {
    const m = this.markets.get(`${venue}:${id}`);
    return m ? withStatus(m, now) : null;
  }

  /** Markets newest window first (`desc`, ties by id descending) or the reverse, status as of `now`, lazily. */
  *walk(order: 'asc' | 'desc', now: number): Generator<StoredMarket> {
    if (!this.sorted) {
      this.sorted = [...this.markets.values()].sort(
        (a, b) => b.start_time - a.start_time || (a.market_id < b.market_id ? 1 : a.market_id > b.market_id ? -1 : 0),
      );
    }
    const sorted = this.sorted;
    if (order === 'desc') for (let i = 0; i < sorted.length; i++) yield withStatus(sorted[i], now);
    else for (let i = sorted.length - 1; i >= 0; i--) yield withStatus(sorted[i], now);
  }

  all(now: number): StoredMarket[] {
    return [...this.walk('desc', now)];
  }

  get size(): number {
    return this.markets.size;
  }
}

function indexedFiles(p: Partition, files: ManifestFile[]): IndexedFile[] {
  const dir = partitionDir(p);
  return files.map((f) => ({ ...f, partition: p, path: `${dir}/${f.name}` }));
}

/** The partition a commit line names; a damaged line names none (the hourly walk covers it). */
function commitPartition(line: string): string {
  try {
    return String((JSON.parse(line) as { partition?: unknown }).partition);
  } catch {
    return '';
  }
}

/** Names the files of a read and the sizes of spool parts (which grow): equal means nothing new. */
async function filesSignature(files: PartitionFiles): Promise<string> {
  const sizes = await Promise.all(
    files.spool.map((f) =>
      fs.stat(f).then(
        (s) => `${f}:${s.size}`,
        () => `${f}:gone`,
      ),
    ),
  );
  return `${files.sealed.join('|')}#${sizes.join('|')}`;
}

/** Status as of `now`: a record captured while open is closed once its window is over. */
function withStatus(m: StoredMarket, now: number): StoredMarket {
  if (FINAL.includes(m.status)) return m;
  const status: MarketStatus = now < m.start_time ? 'upcoming' : now < m.end_time ? 'open' : 'closed';
  return status === m.status ? m : { ...m, status };
}

function toMarket(r: JsonRow, p: Partition): StoredMarket {
  const labels = (r.outcome_labels as string[] | null) ?? [];
  const tokens = (r.outcome_token_ids as string[] | null) ?? [];
  const num = (v: unknown) => (v === null || v === undefined ? null : Number(v));
  return {
    ts: Number(r.ts),
    market_id: String(r.market_id),
    topic_id: (r.topic_id as string) ?? null,
    venue: p.venue,
    slug: (r.slug as string) ?? null,
    title: (r.title as string) ?? null,
    coin: p.coin,
    window: p.window,
    start_time: Number(r.start_time),
    end_time: Number(r.end_time),
    created_time: num(r.created_time),
    resolved_time: num(r.resolved_time),
    status: r.status as MarketStatus,
    resolution: r.resolution as Market['resolution'],
    winning_outcome_index: num(r.winning_outcome_index),
    condition_id: (r.condition_id as string) ?? null,
    question_id: (r.question_id as string) ?? null,
    oracle: (r.oracle as string) ?? null,
    outcomes: labels.map((label, index) => ({ index, label, token_id: tokens[index] })),
    volume: num(r.volume),
    liquidity: num(r.liquidity),
    participant_count: num(r.participant_count),
    chain_id: num(r.chain_id),
    chain_name: (r.chain_name as string) ?? null,
    exchange_address: (r.exchange_address as string) ?? null,
    exchange_kind: (r.exchange_kind as string) ?? null,
    collateral: (r.collateral as string) ?? null,
    fee_rate_bps: num(r.fee_rate_bps),
    tick_size: num(r.tick_size),
    reference_price_start: num(r.reference_price_start),
    reference_price_end: num(r.reference_price_end),
  };
}
