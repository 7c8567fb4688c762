// The market catalogue in memory: the newest captured version of every market, read once from
// the lake (or a checkpoint of it), then only from partitions that changed.
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Venue, Window } from '../config.js';
import { type Market, type MarketStatus, marketKey } from '../records.js';
import type { Duck, JsonRow } from './duckdb.js';
import type { FileIndex, IndexedFile } from './fileindex.js';
import { writeFileAtomic } from './fsutil.js';
import { type LakePaths, type Partition, SCHEMAS, isTime, parsePartitionDir, partitionDir } from './layout.js';
import { type Files, parquetSource, relation, sqlIdent } from './sql.js';
import { readManifest } from './manifest.js';
import { listSpool, listSpoolOf } from './spool.js';

export interface StoredMarket extends Market {
  /** When this newest version was captured. */
  ts: number;
}

/** Below DATA_DIR/state. */
export const CATALOGUE_CHECKPOINT = 'catalogue.ndjson';

const FINAL: MarketStatus[] = ['resolved', 'cancelled'];
const MARKET_SELECT = SCHEMAS.markets
  .map((c) => (isTime(c) ? `epoch_ms(${sqlIdent(c.name)})::DOUBLE AS ${sqlIdent(c.name)}` : sqlIdent(c.name)))
  .join(', ');

export class Catalogue {
  private readonly markets = new Map<string, StoredMarket>();
  private sorted: StoredMarket[] | null = null;
  /** Per partition, the files (and spool sizes) last read: equal means nothing new. */
  private readonly ingested = new Map<string, string>();
  /** Per partition, its sealed files (`path@sha256`) whose versions the catalogue holds, from its checkpoint or read. */
  private readonly held = new Map<string, string>();

  constructor(
    private readonly paths: LakePaths,
    private readonly duck: Duck,
    private readonly index: FileIndex,
    private readonly files: (partitions: Partition[]) => Promise<Files>,
    private readonly ensure: (files: readonly IndexedFile[]) => Promise<void>,
  ) {}

  private get checkpointFile(): string {
    return path.join(this.paths.state, CATALOGUE_CHECKPOINT);
  }

  /**
   * Reads every market version in the lake once; later, `ingest` reads changed partitions only.
   * A checkpoint of the catalogue (the newest version of each market and the files it covers)
   * makes a restart read only the market files sealed since: opening a Parquet file costs
   * milliseconds, and a long lake has thousands.
   */
  async load(): Promise<void> {
    const covered = await this.readCheckpoint();
    const markets = this.index.all().filter((f) => f.partition.dataset === 'markets');
    const sealed = markets.filter((f) => !covered.has(fileKey(f)));
    // One scan per 500 files (measured fastest), not one query per partition.
    for (let i = 0; i < sealed.length; i += 500) {
      await this.ensure(sealed.slice(i, i + 500));
      const files = sealed.slice(i, i + 500).map((f) => path.join(this.paths.lake, f.path));
      for (const row of await this.duck.rows(`SELECT ${MARKET_SELECT}, filename FROM ${parquetSource(files, 'filename = true')}`)) {
        const p = parsePartitionDir(path.relative(this.paths.lake, path.dirname(String(row.filename))));
        if (p) this.upsert(toMarket(row, p));
      }
    }
    for (const p of new Map(markets.map((f) => [partitionDir(f.partition), f.partition])).values())
      this.held.set(partitionDir(p), filesKey(this.index.of(p)));
    await this.ingest((await listSpool(this.paths.spool)).map((s) => s.partition).filter((p) => p.dataset === 'markets'));
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

  /** Covers the sealed market files it names; it also holds versions read from the spool (capture's open hour), which a start reads again. */
  async writeCheckpoint(): Promise<string> {
    const files = this.index
      .all()
      .filter((f) => f.partition.dataset === 'markets')
      .map((f) => `${f.path}@${f.sha256}`);
    const lines = [JSON.stringify({ files }), ...[...this.markets.values()].map((m) => JSON.stringify(m))];
    const text = `${lines.join('\n')}\n`;
    await writeFileAtomic(this.checkpointFile, text);
    return text;
  }

  /**
   * Reads the market versions of `partitions` whose files changed since they were last read. A
   * partition announced again with the files already read (a sibling worker sharing the directory
   * adopting the same manifest from a bucket) reads nothing: on a bucket-served process, reading
   * would fetch them.
   */
  async ingest(partitions: Partition[]): Promise<void> {
    const unique = new Map(partitions.map((p) => [partitionDir(p), p]));
    for (const p of unique.values()) {
      const indexed = this.index.of(p);
      if (this.held.get(partitionDir(p)) === filesKey(indexed) && !(await listSpoolOf(this.paths.spool, [p]))[0].length) continue;
      const files = await this.files([p]);
      const signature = await filesSignature(files);
      if (this.ingested.get(partitionDir(p)) === signature) continue;
      this.ingested.set(partitionDir(p), signature);
      const source = relation('markets', files);
      if (!source) continue;
      for (const row of await this.duck.rows(`SELECT ${MARKET_SELECT} FROM (${source})`)) this.upsert(toMarket(row, p));
      this.held.set(partitionDir(p), filesKey(indexed));
    }
  }

  upsert(m: StoredMarket): void {
    const key = marketKey(m.venue, m.market_id);
    const current = this.markets.get(key);
    // A resolution time a stream recorded stays with the market, whichever version is newer (a
    // catalogue version written after a restart does not know it); versions come in any order.
    if (current && current.ts >= m.ts) {
      if (current.resolved_time === null && m.resolved_time !== null) {
        this.markets.set(key, { ...current, resolved_time: m.resolved_time });
        this.sorted = null;
      }
      return;
    }
    this.markets.set(key, current?.resolved_time != null && m.resolved_time === null ? { ...m, resolved_time: current.resolved_time } : m);
    this.sorted = null;
  }

  market(venue: Venue, id: string, now: number): StoredMarket | null {
    const m = this.markets.get(marketKey(venue, id));
    return m ? withStatus(m, now) : null;
  }

  /** Markets newest window first (`desc`, ties by id descending) or the reverse, status as of `now`, lazily. */
  *walk(order: 'asc' | 'desc', now: number): Generator<StoredMarket> {
    this.sorted ??= [...this.markets.values()].sort(
      (a, b) => b.start_time - a.start_time || (a.market_id < b.market_id ? 1 : a.market_id > b.market_id ? -1 : 0),
    );
    const sorted = this.sorted;
    if (order === 'desc') for (let i = 0; i < sorted.length; i++) yield withStatus(sorted[i], now);
    else for (let i = sorted.length - 1; i >= 0; i--) yield withStatus(sorted[i], now);
  }

  get size(): number {
    return this.markets.size;
  }
}

/**
 * The newest version of each market of `ids` that the markets `partitions` of this machine's lake
 * hold (sealed files and the spool parts not sealed yet), before any catalogue is loaded: what a
 * restarting capture knows of a market discovery may never list again (one that ended meanwhile).
 */
export async function localMarkets(
  duck: Duck,
  paths: LakePaths,
  partitions: Partition[],
  ids: ReadonlySet<string>,
): Promise<Map<string, StoredMarket>> {
  const found = new Map<string, StoredMarket>();
  const spooled = await listSpoolOf(paths.spool, partitions);
  for (const [i, p] of partitions.entries()) {
    const { files } = await readManifest(paths.manifest, p);
    const sealedFrom = new Set(files.flatMap((f) => f.sources));
    const source = relation('markets', {
      sealed: files.map((f) => path.join(paths.lake, partitionDir(p), f.name)),
      spool: spooled[i].filter((part) => !sealedFrom.has(part.source)).map((part) => part.file),
    });
    if (!source) continue;
    // An hour of one coin and window holds a few dozen versions: filtered here.
    for (const row of await duck.rows(`SELECT ${MARKET_SELECT} FROM (${source})`)) {
      const m = toMarket(row, p);
      if (ids.has(m.market_id) && m.ts > (found.get(m.market_id)?.ts ?? -Infinity)) found.set(m.market_id, m);
    }
  }
  return found;
}

const fileKey = (f: IndexedFile) => `${f.path}@${f.sha256}`;
const filesKey = (files: readonly IndexedFile[]) => files.map(fileKey).sort().join('|');

/** Names the files of a read and the sizes of spool parts (which grow): equal means nothing new. */
export async function filesSignature(files: Files): Promise<string> {
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
    // Markets are kept under their own window, never `all`.
    window: p.window as Window,
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
