// Seals finished hours: every spool part of a partition whose hour (plus a grace for late
// rows) is over becomes one sorted Parquet file. Re-running after a crash at any step is
// safe: parts already named in the manifest are not written again, only removed.
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Dataset } from '../records.js';
import { HOUR } from '../time.js';
import type { Duck } from './duckdb.js';
import { pruneEmptyDirs, shortHash } from './fsutil.js';
import { type LakePaths, type Partition, partitionDir } from './layout.js';
import { readManifest } from './manifest.js';
import { ensureGapsDataset } from './migrate.js';
import { type Spool, type SpoolPart, listSpool } from './spool.js';
import { commitFiles, writeParquet } from './writer.js';
import { spoolSource } from './sql.js';

export interface SealReport {
  partitions: number;
  files: number;
  rows: number;
}

export type Grace = (dataset: Dataset) => number;

export function isDue(p: Partition, now: number, grace: Grace): boolean {
  return p.hour + HOUR + grace(p.dataset) <= now;
}

export async function sealDue(duck: Duck, paths: LakePaths, now: number, grace: Grace, spool?: Spool): Promise<SealReport> {
  const due = (p: Partition) => isDue(p, now, grace);
  if (spool) await spool.release(due);
  const parts = (spool ? await spool.sealable() : await listSpool(paths.spool)).filter((p) => due(p.partition));
  const groups = new Map<string, SpoolPart[]>();
  for (const part of parts) {
    const key = partitionDir(part.partition);
    groups.set(key, [...(groups.get(key) ?? []), part]);
  }
  const report: SealReport = { partitions: 0, files: 0, rows: 0 };
  for (const group of groups.values()) {
    const rows = await sealPartition(duck, paths, group);
    report.partitions += 1;
    report.files += rows === null ? 0 : 1;
    report.rows += rows ?? 0;
  }
  if (report.files > 0) await ensureGapsDataset(duck, paths);
  return report;
}

async function sealPartition(duck: Duck, paths: LakePaths, group: SpoolPart[]): Promise<number | null> {
  const partition = group[0].partition;
  const manifest = await readManifest(paths.manifest, partition);
  const done = new Set(manifest.files.flatMap((f) => f.sources));
  const fresh: SpoolPart[] = [];
  for (const part of group) {
    if (done.has(part.source)) continue;
    if ((await fs.stat(part.file)).size > 0) fresh.push(part);
  }
  let rows: number | null = null;
  if (fresh.length > 0) {
    const sources = fresh.map((p) => p.source).sort();
    const name = `part-${shortHash(sources.join(','))}.parquet`;
    const source = spoolSource(
      partition.dataset,
      fresh.map((p) => p.file),
      false,
    );
    const entry = await writeParquet(duck, paths.lake, partition, name, source, sources);
    await commitFiles(paths.lake, paths.manifest, path.join(paths.root, 'trash'), partition, [entry], []);
    rows = entry.rows;
  }
  for (const part of group) {
    await fs.rm(part.file, { force: true });
    await pruneEmptyDirs(path.dirname(part.file), paths.spool);
  }
  return rows;
}
