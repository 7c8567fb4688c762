// One manifest per partition, beside the lake: which sealed files the partition holds, with
// their row counts and sha256. Swapped atomically, so a reader planning from it sees the
// partition before or after a seal or compaction, never between.
import fs from 'node:fs/promises';
import path from 'node:path';
import { readJson, writeFileAtomic } from './fsutil.js';
import { type Partition, partitionDir } from './layout.js';
import type { HashCheck, VerifiedBy } from '../records.js';

export interface ManifestFile {
  name: string;
  rows: number;
  bytes: number;
  sha256: string;
  /** Spool parts (or `backfill`) whose rows the file holds. */
  sources: string[];
  min_ts: number | null;
  max_ts: number | null;
  written_at: number;
  /**
   * Books and trades files: each market's rows and first and last `ts` in the file, so what a
   * market window holds (its coverage on discovery) is known without reading a file. Absent in
   * files sealed before 2026-11-25 and in other datasets.
   */
  markets?: Record<string, MarketRows>;
  /**
   * Books files: the file's books by what vouched for them when recorded (`verified_by`), `unknown`
   * for books recorded before that was kept. Present exactly when the file has the column.
   */
  verified_by?: Verifications;
  /**
   * Books files: the file's books by what the venue's hash said of them (`hash_check`), `none`
   * for books with no hash checked. Present exactly when the file has the column.
   */
  hash_check?: HashChecks;
  /**
   * Books and trades files: the venue's text columns (books' `price_decimals`, `size_decimals`,
   * `level_texts`, `hash_fields`, `venue_hash`; trades' decimals), added 2026-11-28: how many of
   * the file's books kept their texts whole (`level_texts`) and the venue's hash (`venue_hash`).
   * Present exactly when the file has the columns.
   */
  venue_text?: VenueTextCounts;
  /**
   * Merged gaps files (lake/merge.ts): what each recorder vouched for of each market's books, so
   * the certificate shows every recorder's coverage beside the record's. Written for every group
   * a recorder kept books or gaps of (the file has no rows when none was left a gap).
   */
  recorders?: Record<string, RecorderClaim>;
}

/** What one recorder vouched for of the markets of a merged group, as the merge read it. */
export interface RecorderClaim {
  /** Everything it recorded before this was sealed and published when merged; it vouches for nothing after. */
  horizon: number;
  /** Per market: its first book (the hours either side of the group's included), or null, and its books gaps. */
  markets: Record<string, { first: number | null; gaps: [from: number, to: number, reason: string][] }>;
}

export interface VenueTextCounts {
  level_texts: number;
  venue_hash: number;
}

/** The columns each dataset gained on 2026-11-28 (`venue_text`). */
export const VENUE_TEXT_COLUMNS: Readonly<Partial<Record<Partition['dataset'], readonly string[]>>> = {
  books: ['price_decimals', 'size_decimals', 'level_texts', 'hash_fields', 'venue_hash'],
  trades: ['price_decimals', 'size_decimals'],
};

export type Verifications = Record<VerifiedBy | 'unknown', number>;
export type HashChecks = Record<HashCheck | 'none', number>;

/**
 * The columns added to its dataset since a sealed file was written, as its manifest entry says:
 * books' `verified_by` (2026-11-26) and `hash_check` (2026-11-27), the venue's text columns of books
 * and trades (2026-11-28, `venue_text`). Readers take them as NULL.
 */
export function lackedColumns(f: ManifestFile & { partition: Partition }): string[] {
  const text = f.venue_text ? [] : [...(VENUE_TEXT_COLUMNS[f.partition.dataset] ?? [])];
  if (f.partition.dataset !== 'books') return text;
  if (!f.verified_by) return ['verified_by', 'hash_check', ...text];
  return f.hash_check ? text : ['hash_check', ...text];
}

/**
 * One market's rows in one file: how many, the first and last `ts` (epoch ms), and for books
 * files with `verified_by`, how many a venue check vouched for (every label but `none`) and how
 * many nothing checked (`none`); the rest were recorded before labels were kept. Books files
 * sealed since 2026-12-03 also give each outcome's first `ts` (by `outcome_index`, null for an
 * outcome without a book in the file): a market's first row may hold one outcome's book alone.
 */
export type MarketRows = [
  rows: number,
  first: number,
  last: number,
  verified?: number,
  unverified?: number,
  outcomeFirsts?: (number | null)[],
];

/** The outcomes of every market the venues list (up or down): `outcome_index` 0 and 1. */
export const OUTCOME_INDEXES = [0, 1] as const;

/** Datasets whose manifest entries carry `markets`. */
export const SPANNED_DATASETS: ReadonlySet<string> = new Set(['books', 'trades']);

export interface PartitionManifest {
  partition: string;
  files: ManifestFile[];
  /** A record merged from several recorders' (bucket/merger.ts): what it was merged from. */
  merged?: MergedFrom;
}

export interface MergedFrom {
  /** Names the inputs (every recorder's files and horizons the merge read): the same inputs, the same fingerprint and files. */
  fingerprint: string;
  /** Per recorder, the newest `written_at` of its files the merge read and its horizon then: a merge that read less is older. */
  recorders: Record<string, { written_at: number; horizon: number }>;
}

export function manifestFile(manifestDir: string, p: Partition): string {
  return path.join(manifestDir, `${partitionDir(p)}.json`);
}

export async function readManifest(manifestDir: string, p: Partition): Promise<PartitionManifest> {
  return (await readJson<PartitionManifest>(manifestFile(manifestDir, p))) ?? { partition: partitionDir(p), files: [] };
}

/**
 * Every manifest swap is announced by a line appended here after it, so a reader re-reads
 * exactly the partitions that changed instead of polling thousands of manifests. A line lost
 * to a crash right after a swap is caught by the reader's occasional full walk.
 */
export const COMMIT_LOG = '_commits.ndjson';

export async function writeManifest(manifestDir: string, p: Partition, m: PartitionManifest): Promise<void> {
  await writeFileAtomic(manifestFile(manifestDir, p), JSON.stringify(m, null, 1));
  await fs.appendFile(path.join(manifestDir, COMMIT_LOG), `${JSON.stringify({ partition: partitionDir(p), at: Date.now() })}\n`);
}

/**
 * A manifest brought from elsewhere (a bucket), written and announced only when the file does not
 * hold it already: replica workers sharing a directory each bring the same manifests, and an
 * announcement of an unchanged one would have every reader following the log read its files again.
 * Returns whether it wrote.
 */
export async function adoptManifest(manifestDir: string, p: Partition, m: PartitionManifest): Promise<boolean> {
  const held = await fs.readFile(manifestFile(manifestDir, p), 'utf8').catch(() => null);
  if (held === JSON.stringify(m, null, 1)) return false;
  await writeManifest(manifestDir, p, m);
  return true;
}
