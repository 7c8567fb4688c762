// Seals finished hours: every spool part of a partition whose hour (plus a grace for late
// rows) is over becomes sorted Parquet, and so do the closed parts of a busy hour still being
// written (Spool.roll). Re-running after a crash at any step is safe: parts already named in the
// manifest are not written again, only removed.
// Books and metrics are spooled as sorted runs of one market each, so their file is the runs
// concatenated in order and streamed through DuckDB with memory bounded by its memory_limit;
// sorting an hour instead holds all of it in memory (2M book rows: 3 GB, and DuckDB's sort
// does not stay within a memory_limit of a few hundred MB). Runs of one market that overlap
// are merged line by line first. Other parts (small datasets, spools of older versions) are
// sorted by DuckDB.
import { createReadStream, createWriteStream } from 'node:fs';
import fs from 'node:fs/promises';
import { once } from 'node:events';
import readline from 'node:readline';
import path from 'node:path';
import type { Config } from '../config.js';
import type { Dataset } from '../records.js';
import { HOUR } from '../time.js';
import type { Duck } from './duckdb.js';
import { pruneEmptyDirs, shortHash } from './fsutil.js';
import { type LakePaths, type Partition, partitionDir } from './layout.js';
import { readManifest } from './manifest.js';
import { ensureGapsDataset } from './migrate.js';
import { FINISHED_DATASETS, RUN_DATASETS, type Spool, type SpoolPart, listSpool } from './spool.js';
import { commitFiles, writeParquet } from './writer.js';
import { spoolSource } from './sql.js';

/**
 * DuckDB settings of a process that seals: its memory bounded, spilling (if ever) beside the
 * lake. One thread: with two, DuckDB reads two runs at once and holds the later one in memory
 * until the earlier is written, so memory grows with the largest run (3M rows in 10 runs:
 * out of memory at 256MB with two threads, 191 MiB peak with one).
 */
export function sealingDuck(config: Pick<Config, 'dataDir' | 'capture'>): Record<string, string> {
  return {
    memory_limit: config.capture.sealMemoryLimit,
    temp_directory: path.join(config.dataDir, 'state', 'duckdb-tmp'),
    threads: '1',
  };
}

export interface SealReport {
  partitions: number;
  files: number;
  rows: number;
}

export type Grace = (dataset: Dataset) => number;

export function isDue(p: Partition, now: number, grace: Grace): boolean {
  return p.hour + HOUR + grace(p.dataset) <= now;
}

/**
 * Spool bytes per sealed file, at most (one run may go past it): DuckDB's Parquet writer keeps
 * every row group's metadata until the footer (about 13 KiB a 2,048-row group), so a file per
 * few million rows keeps a seal's memory and a reader's footer bounded however busy the hour.
 */
export const FILE_SPOOL_BYTES = 2 * 2 ** 30;

/**
 * An hour still being written is sealed a stretch at a time once its spool reaches this share of
 * a file: the rest of the file's room takes what is flushed meanwhile and the late runs swept in.
 */
const ROLL_SHARE = 0.75;

/** Whether capture has finished recording a market (every row of it on disk): its runs are sealed before its hour is. */
export type Finished = (p: Partition, market: string) => boolean;

export async function sealDue(
  duck: Duck,
  paths: LakePaths,
  now: number,
  grace: Grace,
  spool?: Spool,
  { fileSpoolBytes = FILE_SPOOL_BYTES, finished }: { fileSpoolBytes?: number; finished?: Finished } = {},
): Promise<SealReport> {
  const due = (p: Partition) => isDue(p, now, grace);
  if (spool) await spool.release(due);
  if (spool && finished) await spool.finish(finished);
  // Busy hours not over yet: what their closed parts hold is sealed now (see Spool.roll).
  const rolled = new Set((spool ? await spool.roll(fileSpoolBytes * ROLL_SHARE) : []).map(partitionDir));
  const groups = new Map<string, SpoolPart[]>();
  for (const part of spool ? await spool.sealable() : await listSpool(paths.spool)) {
    const key = partitionDir(part.partition);
    groups.set(key, [...(groups.get(key) ?? []), part]);
  }
  const report: SealReport = { partitions: 0, files: 0, rows: 0 };
  await fs.rm(stagingDir(paths), { recursive: true, force: true });
  // DuckDB creates its temp_directory (sealingDuck) when it first spills, but not its parent.
  await fs.mkdir(paths.state, { recursive: true });
  for (const [dir, group] of groups) {
    const partition = group[0].partition;
    const whole = due(partition) || rolled.has(dir);
    // Otherwise only the closed runs of markets capture finished (one file of them, committed apart from the rest of the hour).
    const seal = whole
      ? () => true
      : (part: SpoolPart) =>
          finished !== undefined &&
          FINISHED_DATASETS.has(partition.dataset) &&
          part.market !== undefined &&
          finished(partition, part.market);
    // Capture seals every few seconds: a part it sealed stays until the next pass, so a reader
    // that listed it just before the commit still finds it (and then leaves it out, as sealed).
    const { files, rows } = await sealPartition(duck, paths, group, { seal, linger: spool !== undefined, fileSpoolBytes });
    if (!whole && files === 0) continue;
    report.partitions += 1;
    report.files += files;
    report.rows += rows;
  }
  if (report.files > 0) await ensureGapsDataset(duck, paths);
  return report;
}

/**
 * Seals the closed parts of one partition that `seal` selects, and removes parts sealed before: all of
 * them, or all but those sealed now (with `linger`).
 */
async function sealPartition(
  duck: Duck,
  paths: LakePaths,
  group: SpoolPart[],
  { seal, linger, fileSpoolBytes }: { seal: (part: SpoolPart) => boolean; linger: boolean; fileSpoolBytes: number },
): Promise<{ files: number; rows: number }> {
  const partition = group[0].partition;
  const manifest = await readManifest(paths.manifest, partition);
  const done = new Set(manifest.files.flatMap((f) => f.sources));
  const fresh: SpoolPart[] = [];
  const spent: SpoolPart[] = [];
  for (const part of group) {
    if (done.has(part.source)) spent.push(part);
    else if (!seal(part)) continue;
    else if ((await fs.stat(part.file)).size > 0) fresh.push(part);
    else spent.push(part);
  }
  const sealed = { files: 0, rows: 0 };
  if (fresh.length > 0) {
    const staging = path.join(
      stagingDir(paths),
      shortHash(
        fresh
          .map((p) => p.source)
          .sort()
          .join(','),
      ),
    );
    const runs = await runsInOrder(fresh, staging);
    // Each file is a stretch of the ordered runs, committed on its own: a crash in between
    // leaves the rest in the spool, and the re-run seals only those. Parts not in runs are sorted.
    const stretches = runs
      ? fileStretches(runs, fileSpoolBytes).map((stretch) => ({
          files: stretch.map((r) => r.file),
          sources: stretch.flatMap((r) => r.sources),
          span: {
            min_ts: stretch.reduce((t, r) => Math.min(t, r.minTs), Infinity),
            max_ts: stretch.reduce((t, r) => Math.max(t, r.maxTs), -Infinity),
          },
        }))
      : [{ files: fresh.map((p) => p.file), sources: fresh.map((p) => p.source), span: undefined }];
    for (const stretch of stretches) {
      const sources = [...stretch.sources].sort();
      const name = `part-${shortHash(sources.join(','))}.parquet`;
      const source = spoolSource(partition.dataset, stretch.files, false);
      const entry = await writeParquet(duck, paths.lake, partition, name, source, sources, {
        sorted: stretch.span !== undefined,
        span: stretch.span,
        manifestDir: paths.manifest,
      });
      await commitFiles(paths.lake, paths.manifest, path.join(paths.root, 'trash'), partition, [entry], []);
      sealed.files++;
      sealed.rows += entry.rows;
    }
    await fs.rm(staging, { recursive: true, force: true });
  }
  for (const part of linger ? spent : [...spent, ...fresh]) {
    await fs.rm(part.file, { force: true });
    await pruneEmptyDirs(path.dirname(part.file), paths.spool);
  }
  return sealed;
}

interface OrderedRun {
  file: string;
  /** The spool parts whose rows the file holds (several when overlapping runs were merged). */
  sources: string[];
  bytes: number;
  /** The rows' first and last `ts` (runs are in time order). */
  minTs: number;
  maxTs: number;
}

/** Consecutive runs grouped into files of at most `limit` spool bytes (or one run, if larger). */
export function fileStretches(runs: OrderedRun[], limit: number): OrderedRun[][] {
  const stretches: OrderedRun[][] = [];
  let bytes = Infinity;
  for (const run of runs) {
    if (bytes + run.bytes > limit) {
      stretches.push([]);
      bytes = 0;
    }
    stretches[stretches.length - 1].push(run);
    bytes += run.bytes;
  }
  return stretches;
}

function stagingDir(paths: LakePaths): string {
  return path.join(paths.state, 'seal');
}

/** A row's place inside its market's run: the sort keys after market_id. */
type RunKey = readonly [ts: number, outcome: number];

function keyOf(line: string): RunKey {
  const row = JSON.parse(line) as { ts: number; outcome_index: number };
  return [row.ts, row.outcome_index];
}

function before(a: RunKey, b: RunKey): boolean {
  return a[0] < b[0] || (a[0] === b[0] && a[1] < b[1]);
}

/**
 * The files whose concatenation is the partition in sealed order, or null when the parts are
 * not all one-market runs. Overlapping runs of a market are merged into a file under `staging`.
 */
export async function runsInOrder(parts: SpoolPart[], staging: string): Promise<OrderedRun[] | null> {
  if (!RUN_DATASETS.has(parts[0].partition.dataset) || parts.some((p) => p.market === undefined)) return null;
  const byMarket = new Map<string, (Omit<OrderedRun, 'minTs' | 'maxTs'> & { first: RunKey; last: RunKey })[]>();
  for (const part of parts) {
    const { first, last, bytes } = await edgeLines(part.file);
    const runs = byMarket.get(part.market!) ?? [];
    runs.push({ file: part.file, sources: [part.source], bytes, first: keyOf(first), last: keyOf(last) });
    byMarket.set(part.market!, runs);
  }
  // DuckDB orders VARCHAR by bytes: so must the markets here.
  const markets = [...byMarket.keys()].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  const ordered: OrderedRun[] = [];
  for (const [i, market] of markets.entries()) {
    const runs = byMarket.get(market)!.sort((a, b) => (before(a.first, b.first) ? -1 : before(b.first, a.first) ? 1 : 0));
    if (runs.every((r, j) => j === 0 || !before(r.first, runs[j - 1].last))) {
      ordered.push(...runs.map(({ file, sources, bytes, first, last }) => ({ file, sources, bytes, minTs: first[0], maxTs: last[0] })));
      continue;
    }
    const file = path.join(staging, `${i}.ndjson`);
    await mergeRuns(
      runs.map((r) => r.file),
      file,
    );
    ordered.push({
      file,
      sources: runs.flatMap((r) => r.sources),
      bytes: (await fs.stat(file)).size,
      minTs: runs.reduce((t, r) => Math.min(t, r.first[0]), Infinity),
      maxTs: runs.reduce((t, r) => Math.max(t, r.last[0]), -Infinity),
    });
  }
  return ordered;
}

/** The first and last line of a non-empty file of whole lines, and its size. */
async function edgeLines(file: string): Promise<{ first: string; last: string; bytes: number }> {
  const text = async (from: number, length: number, handle: fs.FileHandle) => {
    const { buffer, bytesRead } = await handle.read(Buffer.alloc(length), 0, length, from);
    return buffer.subarray(0, bytesRead).toString('utf8');
  };
  const handle = await fs.open(file, 'r');
  try {
    const size = (await handle.stat()).size;
    for (let window = 64 * 1024; ; window *= 4) {
      const head = await text(0, Math.min(window, size), handle);
      const tail = await text(Math.max(0, size - window), Math.min(window, size), handle);
      const firstEnd = head.indexOf('\n');
      const lastStart = tail.lastIndexOf('\n', tail.length - 2);
      if (firstEnd < 0 && window >= size) throw new Error(`spool part without a whole line: ${file}`);
      if (firstEnd >= 0 && (lastStart >= 0 || window >= size))
        return { first: head.slice(0, firstEnd), last: tail.slice(lastStart + 1, -1), bytes: size };
    }
  } finally {
    await handle.close();
  }
}

/** Merges sorted runs line by line into `to`: memory is a line per run, whatever their size. */
async function mergeRuns(files: string[], to: string): Promise<void> {
  await fs.mkdir(path.dirname(to), { recursive: true });
  const readers = files.map((f) => readline.createInterface({ input: createReadStream(f), crlfDelay: Infinity })[Symbol.asyncIterator]());
  const heads: ({ line: string; key: RunKey } | null)[] = [];
  const advance = async (i: number) => {
    const next = await readers[i].next();
    heads[i] = next.done ? null : { line: next.value, key: keyOf(next.value) };
  };
  for (let i = 0; i < readers.length; i++) await advance(i);
  const out = createWriteStream(to);
  for (;;) {
    let min = -1;
    for (let i = 0; i < heads.length; i++) if (heads[i] && (min < 0 || before(heads[i]!.key, heads[min]!.key))) min = i;
    if (min < 0) break;
    if (!out.write(`${heads[min]!.line}\n`)) await once(out, 'drain');
    await advance(min);
  }
  out.end();
  await once(out, 'finish');
}
