// Lake upgrades that rewrite sealed files. Each is idempotent (a file already in the current
// form is left alone) and commits per partition through the manifest swap, as compaction
// does: a reader sees a partition before or after, never between, and replaced files are
// moved aside, not deleted, so open readers finish.
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Duck } from './duckdb.js';
import { listFiles } from './fsutil.js';
import { type LakePaths, type Partition, SCHEMAS, isTime, parsePartitionDir, partitionDir } from './layout.js';
import { readManifest } from './manifest.js';
import { commitFiles, writeParquet } from './writer.js';
import { parquetSource, sqlPath } from './sql.js';

export interface MigrationReport {
  partitions: number;
  rewritten: number;
  rows: number;
  /** Files already UTC-adjusted, left as they were. */
  current: number;
}

/** Whether every time column of a file says isAdjustedToUTC=true. */
export async function utcAdjusted(duck: Duck, file: string, p: Partition): Promise<boolean> {
  const times = new Set(SCHEMAS[p.dataset].filter(isTime).map((c) => c.name));
  const schema = await duck.rows(`SELECT name, logical_type FROM parquet_schema(${sqlPath(file)})`);
  const found = schema.filter((r) => times.has(String(r.name)));
  return found.length === times.size && found.every((r) => String(r.logical_type ?? '').includes('isAdjustedToUTC=1'));
}

/** Whether a file has every column of its dataset (books files sealed before 2026-11-26 lack `verified_by`, before 2026-11-27 `hash_check`). */
export async function hasEveryColumn(duck: Duck, file: string, p: Partition): Promise<boolean> {
  const names = new Set((await duck.rows(`SELECT name FROM parquet_schema(${sqlPath(file)})`)).map((r) => String(r.name)));
  return SCHEMAS[p.dataset].every((c) => names.has(c.name));
}

/**
 * Rewrites files in an older form: naive times (TIMESTAMP_MS, written before 2026-11-23) become
 * UTC-adjusted, and a column added since is written as NULL (books' `verified_by` and `hash_check`: not known).
 * Same rows, same order, same sources, a new name.
 */
export async function migrateTimestamps(duck: Duck, paths: LakePaths, trashDir = path.join(paths.root, 'trash')): Promise<MigrationReport> {
  const report: MigrationReport = { partitions: 0, rewritten: 0, rows: 0, current: 0 };
  for (const rel of await listFiles(paths.manifest, '.json')) {
    const partition = parsePartitionDir(rel.replace(/\.json$/, ''));
    if (!partition) continue;
    report.partitions++;
    const dir = path.join(paths.lake, partitionDir(partition));
    const manifest = await readManifest(paths.manifest, partition);
    const added = [];
    const replaced = [];
    for (const f of manifest.files) {
      const file = path.join(dir, f.name);
      const utc = await utcAdjusted(duck, file, partition);
      if (utc && (await hasEveryColumn(duck, file, partition))) {
        report.current++;
        continue;
      }
      const name = f.name.replace(/\.parquet$/, utc ? '-cols.parquet' : '-utc.parquet');
      const entry = await writeParquet(duck, paths.lake, partition, name, parquetSource([file]), f.sources, {
        manifestDir: paths.manifest,
      });
      if (entry.rows !== f.rows) throw new Error(`${partitionDir(partition)}/${f.name}: rewrote ${entry.rows} rows of ${f.rows}`);
      // The same rows: the record did not change, so neither does when it was written (a window's last_modified).
      added.push({ ...entry, written_at: f.written_at });
      replaced.push(f.name);
      report.rows += entry.rows;
    }
    if (!added.length) continue;
    await commitFiles(paths.lake, paths.manifest, trashDir, partition, added, replaced);
    report.rewritten += added.length;
  }
  await ensureGapsDataset(duck, paths);
  return report;
}

/**
 * `read_parquet('gaps/**')` fails when no file matches, and a lake that never recorded a gap
 * has none. Such a lake gets one empty gaps file, in the partition of its first sealed file
 * (a real partition, so hive readers see consistent keys). Returns whether it wrote one.
 */
export async function ensureGapsDataset(duck: Duck, paths: LakePaths): Promise<boolean> {
  if (await fs.stat(path.join(paths.manifest, 'gaps')).catch(() => null)) return false;
  const manifests = await listFiles(paths.manifest, '.json');
  const first = manifests.map((rel) => parsePartitionDir(rel.replace(/\.json$/, ''))).find((p) => p !== null);
  if (!first) return false;
  const p: Partition = { ...first, dataset: 'gaps' };
  const empty = `(SELECT ${SCHEMAS.gaps.map((c) => `NULL::${c.type} AS "${c.name}"`).join(', ')} WHERE false)`;
  const entry = await writeParquet(duck, paths.lake, p, 'empty.parquet', empty, [], { manifestDir: paths.manifest });
  await commitFiles(paths.lake, paths.manifest, path.join(paths.root, 'trash'), p, [entry], []);
  return true;
}
