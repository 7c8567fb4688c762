// Merges the files of a sealed partition into one sorted file. A partition gets more than
// one file when capture restarted within an hour, when a late market version arrived after
// its hour was sealed, or when backfill wrote beside capture. Idempotent: the merged name
// is derived from the sources it holds. Safe while readers read: the manifest swap is the
// commit, and replaced files are moved aside, not deleted, so open readers finish.
import fs from 'node:fs/promises';
import path from 'node:path';
import { HOUR } from '../time.js';
import type { Duck } from './duckdb.js';
import { listFiles, shortHash } from './fsutil.js';
import { type LakePaths, parsePartitionDir, partitionDir } from './layout.js';
import { readManifest } from './manifest.js';
import { commitFiles, writeParquet } from './writer.js';
import { parquetSource } from './sql.js';

export interface CompactReport {
  partitions: number;
  merged: number;
  rows: number;
  /** Partitions left as they are: too many rows to sort in memory (a busy hour sealed in stretches). */
  kept: number;
  trashed: number;
}

/**
 * Merging sorts in memory (about 1.5 KiB a book row). A partition past this many rows is an
 * hour the seal already split into sorted files of bounded size on purpose; merging them would
 * undo that, so it is kept.
 */
export const COMPACT_MAX_ROWS = 1_000_000;

export async function compact(
  duck: Duck,
  paths: LakePaths,
  now: number,
  trashAfterMs = 10 * 60_000,
  maxRows = COMPACT_MAX_ROWS,
): Promise<CompactReport> {
  const report: CompactReport = { partitions: 0, merged: 0, rows: 0, kept: 0, trashed: 0 };
  for (const rel of await listFiles(paths.manifest, '.json')) {
    const partition = parsePartitionDir(rel.replace(/\.json$/, ''));
    if (!partition) continue;
    report.partitions++;
    // The open hour still receives rows; only sealed hours are merged.
    if (partition.hour + HOUR > now) continue;
    const manifest = await readManifest(paths.manifest, partition);
    if (manifest.files.length < 2) continue;
    if (manifest.files.reduce((n, f) => n + f.rows, 0) > maxRows) {
      report.kept++;
      continue;
    }
    const sources = [...new Set(manifest.files.flatMap((f) => f.sources))].sort();
    const name = `compact-${shortHash(sources.join(','))}.parquet`;
    const dir = path.join(paths.lake, partitionDir(partition));
    const entry = await writeParquet(
      duck,
      paths.lake,
      partition,
      name,
      // Files sealed before a column was added lack it: read by name, it is NULL in them.
      parquetSource(
        manifest.files.map((f) => path.join(dir, f.name)),
        'union_by_name=true',
      ),
      sources,
      { manifestDir: paths.manifest },
    );
    // The same rows in fewer files: written when the newest of them was (a window's last_modified).
    entry.written_at = Math.max(...manifest.files.map((f) => f.written_at));
    await commitFiles(
      paths.lake,
      paths.manifest,
      path.join(paths.root, 'trash'),
      partition,
      [entry],
      manifest.files.map((f) => f.name),
    );
    report.merged += manifest.files.length;
    report.rows += entry.rows;
  }
  const trash = path.join(paths.root, 'trash');
  for (const name of await listFiles(trash, '.parquet')) {
    const file = path.join(trash, name);
    if ((await fs.stat(file)).mtimeMs < Date.now() - trashAfterMs) {
      await fs.rm(file, { force: true });
      report.trashed++;
    }
  }
  return report;
}
