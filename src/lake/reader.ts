// The read side of the lake for the API, as one object with one refresh: the sealed-file index
// (fileindex.ts), the market catalogue (catalogue.ts) and the recorded gaps (gaplog.ts), plus
// the files a query reads (sealed ones from the index, open hours from the spool; never a glob).
import { readdirSync } from 'node:fs';
import path from 'node:path';
import type { Venue } from '../config.js';
import { Catalogue, type StoredMarket } from './catalogue.js';
import type { Duck } from './duckdb.js';
import { FileIndex, type IndexedFile } from './fileindex.js';
import { type GapFilter, type GapRecord, GapLog, gapMatches } from './gaplog.js';
import { MARK_BUCKET_MS, ReferenceMarks } from './referencemarks.js';
import { type MarketReference, type Observed, firstAtOrAfter, marketReference } from './referenceprice.js';
import { ALL_WINDOWS, type LakePaths, type Partition, partitionDir } from './layout.js';
import { lackedColumns } from './manifest.js';
import { listSpool, listSpoolOf, marketSources, partMayHold } from './spool.js';
import type { Files } from './sql.js';
import { REFERENCE_VENUE, type ReferenceSource, marketKey, referenceFeed, referenceSymbol } from '../records.js';

export type { GapRecord, IndexedFile, StoredMarket };

/** Capture's heartbeat as the record's reader uses it (capture/heartbeat.ts makes it). */
export interface CaptureProofView {
  heldUntil: ReadonlyMap<string, number>;
  gaps: readonly GapRecord[];
}

/** Where sealed files come from when the lake is not on this disk (bucket/replica.ts); locally they are always there. */
export interface SealedFetcher {
  ensure(files: readonly IndexedFile[]): Promise<void>;
}

export class LakeReader {
  private readonly index: FileIndex;
  private readonly catalogue: Catalogue;
  private readonly gapLog: GapLog;
  private readonly marks: ReferenceMarks;
  private updating: Promise<unknown> = Promise.resolve();
  private proof: CaptureProofView = { heldUntil: new Map(), gaps: [] };

  constructor(
    readonly duck: Duck,
    readonly paths: LakePaths,
    private readonly fetcher: SealedFetcher | null = null,
  ) {
    this.index = new FileIndex(paths);
    const files = (partitions: Partition[]) => this.files(partitions);
    const ensure = (list: readonly IndexedFile[]) => this.ensure(list);
    this.catalogue = new Catalogue(paths, duck, this.index, files, ensure);
    this.gapLog = new GapLog(paths, duck, this.index, files, ensure);
    this.marks = new ReferenceMarks(paths, duck, this.index, ensure);
  }

  /** Makes sure sealed files are on this disk before DuckDB opens them (a no-op for a local lake). */
  async ensure(files: readonly IndexedFile[]): Promise<void> {
    if (this.fetcher && files.length) await this.fetcher.ensure(files);
  }

  /** Loads everything at start: the index (checkpoint or walk), the catalogue, the gaps; says how long each took and how many gaps files were read. */
  async open(): Promise<{ index: 'checkpoint' | 'walk'; index_ms: number; catalogue_ms: number; gap_files_read: number }> {
    const began = performance.now();
    const index = await this.index.open();
    this.index.takeChanged();
    const gapFilesRead = await this.gapLog.load(await listSpool(this.paths.spool));
    if (gapFilesRead > 0) await this.gapLog.writeCheckpoint();
    if ((await this.marks.load()) > 0) await this.marks.writeCheckpoint();
    const indexed = performance.now();
    await this.catalogue.load();
    return {
      index,
      index_ms: Math.round(indexed - began),
      catalogue_ms: Math.round(performance.now() - indexed),
      gap_files_read: gapFilesRead,
    };
  }

  /**
   * Brings everything up to date: partitions the commit log names since the last call are
   * re-read (seal, compaction and backfill all commit through it), market versions still in the
   * spool are read when their parts grew, and gaps when theirs changed. `walk` also re-reads
   * every manifest (the hourly safety net behind the commit log) and checkpoints the result.
   */
  update(walk = false): Promise<Partition[]> {
    // One at a time, each listing the spool when its turn comes: two at once let the one that
    // listed earlier finish later and put back the gaps of the older listing (seen beside
    // stress-ng: a gap just spooled missing from /coverage after an update that listed it).
    const run = this.updating.then(() => this.updateOnce(walk));
    this.updating = run.catch(() => undefined);
    return run;
  }

  private async updateOnce(walk: boolean): Promise<Partition[]> {
    if (walk) await this.index.walk();
    await this.index.follow();
    const changed = this.index.takeChanged();
    const spool = await listSpool(this.paths.spool);
    const spooled = spool.filter((s) => s.partition.dataset === 'markets').map((s) => s.partition);
    await this.catalogue.ingest([...changed.filter((p) => p.dataset === 'markets'), ...spooled]);
    await this.gapLog.load(spool);
    await this.marks.load();
    if (walk) await this.writeCheckpoints();
    return changed;
  }

  /**
   * The index's, the catalogue's and the gaps' checkpoints (hourly): a start reads only what was
   * sealed since. Returns the catalogue's and the gaps' texts, which the bucket's snapshot carries.
   */
  async writeCheckpoints(): Promise<{ catalogue: string; gaps: string }> {
    await this.index.writeCheckpoint();
    await this.marks.writeCheckpoint();
    return { catalogue: await this.catalogue.writeCheckpoint(), gaps: await this.gapLog.writeCheckpoint() };
  }

  /**
   * Sealed files (from the index, after following the commit log, so a file sealed a moment
   * ago is read at once) and spool parts of `partitions`; a part already sealed is left out.
   * The spool is listed first: a part sealed in between is then in the index followed after,
   * and left out, where the other order would miss its rows (listed neither as a part nor a file).
   */
  async files(partitions: Partition[], market?: string): Promise<Files> {
    const spooled = await listSpoolOf(this.paths.spool, partitions);
    const listed = partitions.map((p, i) => ({ p, parts: spooled[i] }));
    await this.index.follow();
    const sealed: IndexedFile[] = [];
    const spool: string[] = [];
    for (const { p, parts } of listed) {
      const indexed = this.index.of(p);
      const done = new Set(indexed.flatMap((f) => f.sources));
      // With `market`, files and parts that hold none of its rows are left out (a market sealed at its end has a file of its own).
      sealed.push(...(market === undefined ? indexed : indexed.filter((f) => mayHold(f, market))));
      for (const part of parts)
        if (!done.has(part.source) && (market === undefined || part.market === undefined || part.market === market)) spool.push(part.file);
    }
    await this.ensure(sealed);
    const lacking = new Map<string, readonly string[]>();
    for (const f of sealed) {
      const missing = lackedColumns(f);
      if (missing.length) lacking.set(path.join(this.paths.lake, f.path), missing);
    }
    return { sealed: sealed.map((f) => path.join(this.paths.lake, f.path)), spool, ...(lacking.size ? { lacking } : {}) };
  }

  /**
   * The spool parts holding the rows of `market` in `partitions`, when they are all its own runs
   * and no sealed file holds any: the whole market, from the parts alone. Null otherwise.
   */
  async spoolOnly(partitions: Partition[], market: string): Promise<string[] | null> {
    const sealedRows = () => partitions.some((p) => this.index.of(p).some((f) => mayHold(f, market)));
    // A market with sealed rows as the index has them (the common miss: a page whose copy is not
    // written yet) lists no directory.
    if (sealedRows()) return null;
    const spooled = await listSpoolOf(this.paths.spool, partitions);
    // Followed after the listing: a part sealed since is seen sealed here, not read after its removal.
    await this.index.follow();
    if (sealedRows()) return null;
    const runs: string[] = [];
    for (const [i, p] of partitions.entries()) {
      const done = new Set(this.index.of(p).flatMap((f) => f.sources));
      for (const part of spooled[i]) {
        if (done.has(part.source) || (part.market !== undefined && part.market !== market)) continue;
        if (part.market === undefined) return null;
        runs.push(part.file);
      }
    }
    return runs;
  }

  /** The sealed files of one partition (that may hold rows of `market`, when given), as the index has them (no commit log followed). */
  sealedOf(p: Partition, market?: string): IndexedFile[] {
    const files = this.index.of(p);
    return market === undefined ? files : files.filter((f) => mayHold(f, market));
  }

  /** Every sealed file, by hour, then path. */
  sealedFiles(): IndexedFile[] {
    return this.index.all();
  }

  sealedFile(relPath: string): IndexedFile | null {
    return this.index.find(relPath);
  }

  /** The sealed files of `partitions` as the index has them: which content a cache was built from. */
  signature(partitions: Partition[]): string {
    return this.index.signature(partitions);
  }

  /**
   * What the sealed files of `partitions` hold of one market: the spool parts its rows were sealed
   * from (which a compaction or a migration keeps, so a copy made from them stays valid) and their
   * rows, or a file's hash where its sources may hold any market. '' when no file holds its rows.
   */
  marketSignature(partitions: Partition[], market: string): string {
    let out = '';
    for (const p of partitions) {
      const sources: string[] = [];
      let rows = 0;
      for (const f of this.index.of(p)) {
        if (!mayHold(f, market)) continue;
        const own = f.markets ? marketSources(f.sources, market) : null;
        if (own) {
          sources.push(...own);
          rows += f.markets![market][0];
        } else out += `${f.path}@${f.sha256}\n`;
      }
      if (sources.length) out += `${partitionDir(p)}:${rows}:${sources.sort().join(',')}\n`;
    }
    return out;
  }

  /**
   * Whether any spool part holds rows of `partitions` now (of `market`, when given). Synchronous on
   * purpose: a couple of reads of small, cached directories cost microseconds, less than a trip to the threadpool.
   */
  spooled(partitions: Partition[], market?: string): boolean {
    let segments: string[];
    try {
      segments = readdirSync(this.paths.spool);
    } catch {
      return false;
    }
    // A part the index already names sealed (it stays a pass after its seal) holds nothing unsealed.
    const sealed = new Map<Partition, Set<string>>();
    const sealedIn = (p: Partition) => sealed.get(p) ?? sealed.set(p, new Set(this.index.of(p).flatMap((f) => f.sources))).get(p)!;
    for (const segment of segments) {
      for (const p of partitions) {
        let names: string[];
        try {
          names = readdirSync(path.join(this.paths.spool, segment, partitionDir(p)));
        } catch {
          continue; // no part of this partition in this segment
        }
        for (const n of names)
          if (n.endsWith('.ndjson') && (market === undefined || partMayHold(n, market)) && !sealedIn(p).has(`${segment}:${n.slice(0, -7)}`))
            return true;
      }
    }
    return false;
  }

  /**
   * What capture's heartbeat adds to the record (kept current by the API): gaps not written yet,
   * and how far capture has shown it held each market it is recording.
   */
  setProof(proof: CaptureProofView): void {
    this.proof = proof;
  }

  /** The clock time up to which a market capture is recording now is proven held, or null (not recording it, or no capture known). */
  heldUntil(venue: Venue, marketId: string): number | null {
    return this.proof.heldUntil.get(marketKey(venue, marketId)) ?? null;
  }

  /**
   * Gaps that overlap [from, to) for a series or one of its markets: those recorded, then those not
   * written yet (`provisional`), less any the lake already holds (a gap closed since the heartbeat).
   */
  gaps(filter: GapFilter, from = -Infinity, to = Infinity): GapRecord[] {
    const recorded = this.gapLog.find(filter, from, to);
    const pending = this.proof.gaps.filter(
      (g) =>
        gapMatches(g, filter, from, to) &&
        !recorded.some((r) => r.from_ts === g.from_ts && r.market_id === g.market_id && r.dataset === g.dataset && r.reason === g.reason),
    );
    return pending.length ? [...recorded, ...pending].sort((a, b) => a.from_ts - b.from_ts) : recorded;
  }

  /** The gaps of a coin's reference feed on `source` that overlap [from, to): its observations there may be missing. */
  referenceGaps(coin: string, source: ReferenceSource, from: number, to: number): GapRecord[] {
    const feed = referenceFeed(source, referenceSymbol(source, coin));
    return this.gaps({ venue: REFERENCE_VENUE, coin, window: ALL_WINDOWS, market_id: feed, dataset: 'reference' }, from, to);
  }

  /**
   * A coin's Chainlink price at `t` (a 5-minute boundary) as the sealed record vouches for it: the
   * first observation at or after it, when the one before it was recorded with no gap between.
   */
  referenceAt(coin: string, t: number): Observed | null {
    const feed = referenceFeed('chainlink', referenceSymbol('chainlink', coin));
    const { first, before } = this.marks.around(feed, t);
    if (!first) return null;
    const gaps = this.referenceGaps(coin, 'chainlink', before ?? t, first.ts + 1);
    return firstAtOrAfter(before === null ? [first] : [{ ts: before, price: NaN }, first], gaps, t);
  }

  /** A market's window as its coin's reference saw it (see referenceprice.ts). */
  marketReference(m: StoredMarket): MarketReference {
    return marketReference(m, referenceSymbol('chainlink', m.coin), (t) => this.referenceAt(m.coin, t));
  }

  /**
   * The share of [from, to) the coin's Chainlink feed is vouched for: the spans its sealed
   * observations run through (a bucket beside one without any counts only from its first or to its
   * last: capture was not holding the feed before it started or after it stopped), less its gaps.
   */
  referenceCoverage(coin: string, from: number, to: number): number {
    if (to <= from) return 0;
    const feed = referenceFeed('chainlink', referenceSymbol('chainlink', coin));
    const spans: [number, number][] = [];
    for (let b = Math.floor(from / MARK_BUCKET_MS) * MARK_BUCKET_MS; b < to; b += MARK_BUCKET_MS) {
      const mark = this.marks.mark(feed, b);
      if (!mark) continue;
      const start = this.marks.mark(feed, b - MARK_BUCKET_MS) ? b : mark.first_t;
      const end = this.marks.mark(feed, b + MARK_BUCKET_MS) ? b + MARK_BUCKET_MS : mark.last_t;
      if (Math.min(end, to) > Math.max(start, from)) spans.push([Math.max(start, from), Math.min(end, to)]);
    }
    // The feed's gaps merged (a restart's downtime gap may begin inside the gap the stop closed).
    const merged: [number, number][] = [];
    for (const g of this.referenceGaps(coin, 'chainlink', from, to)) {
      const last = merged[merged.length - 1];
      if (last && g.from_ts <= last[1]) last[1] = Math.max(last[1], g.to_ts);
      else merged.push([g.from_ts, g.to_ts]);
    }
    let covered = 0;
    for (const [a, z] of spans) {
      let missing = 0;
      for (const [gf, gt] of merged) missing += Math.max(0, Math.min(z, gt) - Math.max(a, gf));
      covered += z - a - missing;
    }
    return covered / (to - from);
  }

  upsert(m: StoredMarket): void {
    this.catalogue.upsert(m);
  }

  market(venue: Venue, id: string, now: number): StoredMarket | null {
    return this.catalogue.market(venue, id, now);
  }

  walk(order: 'asc' | 'desc', now: number): Generator<StoredMarket> {
    return this.catalogue.walk(order, now);
  }

  all(now: number): StoredMarket[] {
    return [...this.catalogue.walk('desc', now)];
  }

  get size(): number {
    return this.catalogue.size;
  }
}

/** Whether a sealed file may hold rows of `market`: files sealed since 2026-11-25 (books, trades) say which markets they hold. */
function mayHold(f: IndexedFile, market: string): boolean {
  return !f.markets || Object.hasOwn(f.markets, market);
}
