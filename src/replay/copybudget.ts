// The disk replay copies may take. Serving copies (pages) and replay copies are both derived from
// the books Parquet, and an operator pays for every replica's disk: together they stay within
// COPIES_SHARE of that Parquet's bytes. Serving copies come first (every page of a sealed market
// reads one, and they are written at seal); replay copies take what is left, the most recently
// read or ended markets kept, so a replay of anything else renders from the lake (slower, never
// different). Copies are files any process may remove, so the accounting is a directory scan,
// redone at least every RESCAN_MS (a cluster's workers write beside each other) and kept up to
// date in between by what this process writes and removes.
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Config } from '../config.js';
import type { LakePaths } from '../lake/layout.js';
import type { LakeReader } from '../lake/reader.js';

/** How stale the scanned sizes may grow before a write or an eviction scans again. */
const RESCAN_MS = 60_000;
/** Stats in flight at once during a scan. */
const SCAN_BATCH = 64;

export interface KeptCopy {
  file: string;
  bytes: number;
  /** When the copy was last read, or, never read, when its market ended (its mtime). */
  rank: number;
}

/** The copies to remove, oldest rank first, so that what stays fits in `room` bytes. */
export function evictions(kept: readonly KeptCopy[], room: number): KeptCopy[] {
  let used = kept.reduce((sum, c) => sum + c.bytes, 0);
  const out: KeptCopy[] = [];
  for (const c of [...kept].sort((a, b) => a.rank - b.rank || (a.file < b.file ? -1 : 1))) {
    if (used <= room) break;
    out.push(c);
    used -= c.bytes;
  }
  return out;
}

/**
 * Whether a copy of `rank` is worth writing: a copy of the usual size (the mean of those kept) fits
 * beside them, or it outranks one that would make room. A wrong guess costs a write, never the budget.
 */
export function admits(kept: readonly KeptCopy[], room: number, rank: number): boolean {
  const used = kept.reduce((sum, c) => sum + c.bytes, 0);
  const usual = kept.length ? used / kept.length : 0;
  if (room > 0 && used + usual <= room) return true;
  return kept.some((c) => c.rank < rank);
}

async function filesUnder(dir: string, suffix: string): Promise<{ file: string; bytes: number; mtimeMs: number }[]> {
  const entries = await fs.readdir(dir, { recursive: true, withFileTypes: true }).catch(() => []);
  const files = entries.filter((e) => e.isFile() && e.name.endsWith(suffix)).map((e) => path.join(e.parentPath, e.name));
  const out: { file: string; bytes: number; mtimeMs: number }[] = [];
  for (let i = 0; i < files.length; i += SCAN_BATCH) {
    const stats = await Promise.all(files.slice(i, i + SCAN_BATCH).map((f) => fs.stat(f).catch(() => null)));
    stats.forEach((s, k) => s && out.push({ file: files[i + k], bytes: s.size, mtimeMs: s.mtimeMs }));
  }
  return out;
}

export interface CopyBudgetStats {
  /** What replay copies may take now: the share of the Parquet, less the serving copies. */
  budget_bytes: number;
  replay_bytes: number;
  serving_bytes: number;
  evicted: number;
  /** Copies not written: no room, and older than every copy kept. */
  skipped: number;
}

export class CopyBudget {
  private kept: KeptCopy[] = [];
  private servingBytes = 0;
  private scanned = -Infinity;
  readonly stats: CopyBudgetStats = { budget_bytes: 0, replay_bytes: 0, serving_bytes: 0, evicted: 0, skipped: 0 };

  constructor(
    private readonly replayDir: string,
    /** The serving copies' directory (serving/books), or null when pages keep none. */
    private readonly servingDir: string | null,
    private readonly parquetBytes: () => number,
    private readonly share: number,
  ) {}

  /** Whether copies are bounded at all (COPIES_SHARE=unbounded: ranked all the same, never evicted). */
  get bounded(): boolean {
    return Number.isFinite(this.share);
  }

  private room(): number {
    return Math.max(0, this.share * this.parquetBytes() - this.servingBytes);
  }

  private async refresh(force = false): Promise<void> {
    if (!force && performance.now() - this.scanned < RESCAN_MS) return;
    this.scanned = performance.now();
    const [replay, serving] = await Promise.all([
      filesUnder(this.replayDir, '.replay'),
      this.servingDir ? filesUnder(this.servingDir, '') : Promise.resolve([]),
    ]);
    this.kept = replay.map((f) => ({ file: f.file, bytes: f.bytes, rank: f.mtimeMs }));
    this.servingBytes = serving.reduce((sum, f) => sum + f.bytes, 0);
    this.update();
  }

  private update(): void {
    this.stats.budget_bytes = Math.round(this.room());
    this.stats.replay_bytes = this.kept.reduce((sum, c) => sum + c.bytes, 0);
    this.stats.serving_bytes = this.servingBytes;
  }

  /** Whether a copy ranked `rank` should be written now. */
  async admits(rank: number): Promise<boolean> {
    if (!this.bounded) return true;
    await this.refresh();
    const yes = admits(this.kept, this.room(), rank);
    if (!yes) this.stats.skipped++;
    return yes;
  }

  /** A copy just written (its mtime set to its rank), then the oldest removed until all fit: whether it stays. */
  async added(file: string, bytes: number, rank: number): Promise<boolean> {
    await fs.utimes(file, new Date(), new Date(rank));
    this.kept = this.kept.filter((c) => c.file !== file);
    this.kept.push({ file, bytes, rank });
    if (this.bounded) await this.evict();
    return this.kept.some((c) => c.file === file);
  }

  /** A copy gone by other means (replaced by a newer signature, found damaged). */
  removed(file: string): void {
    this.kept = this.kept.filter((c) => c.file !== file);
    this.update();
  }

  /** A copy read: it ranks as of `rank` now (its mtime, for every process's next scan). */
  async read(file: string, rank: number): Promise<void> {
    const c = this.kept.find((k) => k.file === file);
    if (c && c.rank >= rank) return;
    if (c) c.rank = rank;
    await fs.utimes(file, new Date(), new Date(rank)).catch(() => undefined);
  }

  /** Removes the oldest copies until what is kept fits (after a fresh scan when the last is stale). */
  async evict(): Promise<number> {
    await this.refresh();
    const out = evictions(this.kept, this.room());
    for (const c of out) await fs.rm(c.file, { force: true });
    const gone = new Set(out);
    this.kept = this.kept.filter((c) => !gone.has(c));
    this.stats.evicted += out.length;
    this.update();
    return out.length;
  }

  /** Scans now, then evicts (at start, and after each sweep: serving copies grow at every seal). */
  async settle(): Promise<number> {
    if (!this.bounded) return 0;
    await this.refresh(true);
    return this.evict();
  }
}

/** The budget of a lake's replay copies as configured (COPIES_SHARE). */
export function lakeCopyBudget(config: Config, paths: LakePaths, lake: LakeReader): CopyBudget {
  const share = config.api.replay.copiesShare;
  const booksBytes = () => lake.sealedFiles().reduce((sum, f) => (f.partition.dataset === 'books' ? sum + f.bytes : sum), 0);
  const serving = config.api.servingCopies ? path.join(paths.serving, 'books') : null;
  return new CopyBudget(path.join(paths.serving, 'replay'), serving, booksBytes, share);
}
