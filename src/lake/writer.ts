// Turns rows into sealed Parquet: one COPY per output file, each with its own ORDER BY
// (PARTITION_BY does not keep order inside files, MEASURED.md), written to a temporary name,
// fsynced and renamed into place, then recorded in the partition's manifest. Between the rename
// and the manifest a file is marked pending (with its writer's pid, beside the manifests), so a
// file a killed writer left in place but never committed is found and removed.
import fs from 'node:fs/promises';
import path from 'node:path';
import { type Duck } from './duckdb.js';
import { fsyncDir, fsyncFile, sha256File, shortHash } from './fsutil.js';
import { alive } from './lock.js';
import { type Column, type Partition, SCHEMAS, SORT_KEYS, parsePartitionDir, partitionDir, servingDirOf } from './layout.js';
import {
  type HashChecks,
  type ManifestFile,
  type MarketRows,
  OUTCOME_INDEXES,
  SPANNED_DATASETS,
  type Verifications,
  type VenueTextCounts,
  readManifest,
  writeManifest,
} from './manifest.js';
import { HASH_CHECKS, VERIFICATIONS } from '../records.js';
import { sqlPath } from './sql.js';

export const ROW_GROUP_SIZE = 2048;

/**
 * What a books file gets before its commit besides the Parquet: the serving copy (pages/copywriter.ts),
 * which the lake does not know. Set by the process that seals (its job: `onBooksFile(writeServingCopy)`);
 * unset, there is no copy and the API writes it when a page first needs it.
 */
export type BooksFileHook = (duck: Duck, parquet: string, sha256: string, servingDir: string) => Promise<unknown>;
let booksFileHook: BooksFileHook | null = null;

export function onBooksFile(hook: BooksFileHook | null): void {
  booksFileHook = hook;
}

function timeColumn(p: Partition): string {
  return p.dataset === 'gaps' ? 'from_ts' : 'ts';
}

/** A market's books some venue check vouched for: every label but `none` (and null, not known). */
function verifiedRows(r: Record<string, unknown>): number {
  return VERIFICATIONS.filter((v) => v !== 'none').reduce((n, v) => n + Number(r[v]), 0);
}

/** A file's books by label; `unknown` for those recorded before labels were kept. */
function fileVerifications(spans: Record<string, unknown>[], rows: number): Verifications {
  const by = Object.fromEntries(VERIFICATIONS.map((v) => [v, spans.reduce((n, r) => n + Number(r[v]), 0)])) as Verifications;
  by.unknown = rows - VERIFICATIONS.reduce((n, v) => n + by[v], 0);
  return by;
}

/** A file's books by what the venue's hash said; `none` for those with no hash checked. */
function fileHashChecks(spans: Record<string, unknown>[], rows: number): HashChecks {
  const by = Object.fromEntries(HASH_CHECKS.map((v) => [v, spans.reduce((n, r) => n + Number(r[`hash_${v}`]), 0)])) as HashChecks;
  by.none = rows - HASH_CHECKS.reduce((n, v) => n + by[v], 0);
  return by;
}

/** Where a lake's files in place but not yet in their manifest are marked (one small file each, beside the manifests). */
function pendingDir(manifestDir: string): string {
  return path.join(manifestDir, '.pending');
}

function pendingMarker(manifestDir: string, p: Partition, name: string): string {
  return path.join(pendingDir(manifestDir), `${shortHash(`${partitionDir(p)}/${name}`)}.pending`);
}

interface Pending {
  pid: number;
  partition: string;
  name: string;
}

/**
 * Removes the files that a process now dead put in the lake and never committed (killed between
 * the rename and the manifest): of partition `only`, or of every partition. Their rows are still in
 * their sources (spool parts, the files a compaction would replace), which the next writer commits
 * under another name, and a glob over the lake (an analyst's) would read them twice. A file its
 * manifest names stays; so does one whose writer still runs (another job's commit in flight). The
 * number of files removed.
 */
export async function sweepUncommitted(lakeDir: string, manifestDir: string, only?: Partition): Promise<number> {
  const dir = pendingDir(manifestDir);
  const markers = (await fs.readdir(dir).catch(() => [] as string[])).filter((n) => n.endsWith('.pending'));
  let removed = 0;
  for (const marker of markers) {
    const file = path.join(dir, marker);
    const pending = await fs
      .readFile(file, 'utf8')
      .then((text) => JSON.parse(text) as Pending)
      .catch(() => null);
    // Half written: its writer died before its rename, so no file of it is in the lake.
    if (pending === null) {
      await fs.rm(file, { force: true });
      continue;
    }
    const partition = parsePartitionDir(pending.partition);
    if (!partition || (only && partitionDir(only) !== pending.partition)) continue;
    if (pending.pid === process.pid || alive(pending.pid)) continue;
    if (!(await readManifest(manifestDir, partition)).files.some((f) => f.name === pending.name)) {
      await fs.rm(path.join(lakeDir, pending.partition, pending.name), { force: true });
      removed++;
    }
    await fs.rm(file, { force: true });
  }
  return removed;
}

/**
 * Writes `source` (a SQL relation) sorted into `<lake>/<partition>/<name>`, and returns its
 * manifest entry. Does not touch the manifest: callers swap it once every file is in place
 * (`commitFiles`). With `manifestDir` (a lake's, whose commits go through `commitFiles`), the
 * partition's files left uncommitted by a dead writer are swept first, and this one is marked
 * pending until its commit.
 */
export async function writeParquet(
  duck: Duck,
  lakeDir: string,
  p: Partition,
  name: string,
  source: string,
  sources: string[],
  {
    sorted = false,
    span,
    extra = [],
    writtenAt = Date.now(),
    servingCopy = true,
    order = SORT_KEYS[p.dataset],
    manifestDir,
  }: {
    sorted?: boolean;
    span?: { min_ts: number; max_ts: number };
    /** Columns past the dataset's own, the source's as they are (a merged record's `recorders`). */
    extra?: readonly Column[];
    /** The entry's `written_at`: a merged file takes its inputs' newest, so every merger writes the same entry. */
    writtenAt?: number;
    /** Whether the books file hook runs (a file bound for a bucket is not served from here). */
    servingCopy?: boolean;
    /** The file's order, when the dataset's sort keys leave ties whose order must be fixed too. */
    order?: readonly string[];
    /** The lake's manifests: set, the file is marked pending until `commitFiles` (see `sweepUncommitted`). */
    manifestDir?: string;
  } = {},
): Promise<ManifestFile> {
  const dir = path.join(lakeDir, partitionDir(p));
  await fs.mkdir(dir, { recursive: true });
  if (manifestDir !== undefined) await sweepUncommitted(lakeDir, manifestDir, p);
  const file = path.join(dir, name);
  const tmp = path.join(dir, `.${name}.tmp`);
  const orderBy = order.map((k) => `"${k}"`).join(', ');
  // Every file gets exactly the dataset's columns and types, whatever the source produced; a
  // column the source lacks (files sealed before it was added) is written as NULL.
  const given = new Set((await duck.rows(`DESCRIBE SELECT * FROM ${source}`)).map((r) => String(r.column_name)));
  const columns = [...SCHEMAS[p.dataset], ...extra]
    .map((c) => (given.has(c.name) ? `CAST("${c.name}" AS ${c.type})` : `NULL::${c.type}`) + ` AS "${c.name}"`)
    .join(', ');
  // A source already in order is streamed: DuckDB keeps the order of the files listed and of
  // their rows (preserve_insertion_order, on by default), and holds a few row groups at a time.
  const query = sorted ? `SELECT ${columns} FROM ${source}` : `SELECT ${columns} FROM ${source} ORDER BY ${orderBy}`;
  let rows: number;
  try {
    rows = await duck.run(`COPY (${query}) TO ${sqlPath(tmp)} (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE ${ROW_GROUP_SIZE})`);
    await fsyncFile(tmp);
  } catch (err) {
    // A full disk leaves a partial file: it must not hold the space the retry needs.
    await fs.rm(tmp, { force: true });
    throw err;
  }
  // A caller that knows the span saves reading the file back (and caching its footer).
  let { min_ts, max_ts }: { min_ts: number | null; max_ts: number | null } = span ?? { min_ts: null, max_ts: null };
  if (!span && rows > 0) {
    const t = timeColumn(p);
    const [stats] = await duck.rows(
      `SELECT epoch_ms(min("${t}"))::BIGINT AS lo, epoch_ms(max("${t}"))::BIGINT AS hi FROM read_parquet(${sqlPath(tmp)})`,
    );
    min_ts = Number(stats.lo);
    max_ts = Number(stats.hi);
  }
  let markets: Record<string, MarketRows> | undefined;
  let verified: Verifications | undefined;
  let checks: HashChecks | undefined;
  let venueText: VenueTextCounts | undefined;
  if (SPANNED_DATASETS.has(p.dataset) && rows > 0) {
    const books = p.dataset === 'books';
    // A few columns of a file just written (its footer and pages are in the OS cache): a few ms an hour's file.
    const spans = await duck.rows(
      `SELECT market_id, count(*)::DOUBLE AS n, epoch_ms(min(ts))::DOUBLE AS lo, epoch_ms(max(ts))::DOUBLE AS hi
       ${books ? `, ${VERIFICATIONS.map((v) => `count(*) FILTER (WHERE verified_by = '${v}')::DOUBLE AS "${v}"`).join(', ')}` : ''}
       ${books ? `, ${HASH_CHECKS.map((v) => `count(*) FILTER (WHERE hash_check = '${v}')::DOUBLE AS "hash_${v}"`).join(', ')}` : ''}
       ${books ? ', count(level_texts)::DOUBLE AS level_texts, count(venue_hash)::DOUBLE AS venue_hash' : ''}
       ${books ? `, ${OUTCOME_INDEXES.map((o) => `epoch_ms(min(ts) FILTER (WHERE outcome_index = ${o}))::DOUBLE AS "first_${o}"`).join(', ')}` : ''}
       FROM read_parquet(${sqlPath(tmp)}) GROUP BY market_id ORDER BY market_id`,
    );
    markets = Object.fromEntries(
      spans.map((r) => [
        String(r.market_id),
        (books
          ? [
              Number(r.n),
              Number(r.lo),
              Number(r.hi),
              verifiedRows(r),
              Number(r.none),
              OUTCOME_INDEXES.map((o) => (r[`first_${o}`] === null ? null : Number(r[`first_${o}`]))),
            ]
          : [Number(r.n), Number(r.lo), Number(r.hi)]) as MarketRows,
      ]),
    );
    if (books) {
      verified = fileVerifications(spans, rows);
      checks = fileHashChecks(spans, rows);
    }
    const sum = (k: string) => spans.reduce((n, r) => n + Number(r[k] ?? 0), 0);
    venueText = { level_texts: books ? sum('level_texts') : 0, venue_hash: books ? sum('venue_hash') : 0 };
  }
  const bytes = (await fs.stat(tmp)).size;
  const sha256 = await sha256File(tmp);
  // Before the commit, so a reader planning from the new manifest finds the copy. A copy that
  // cannot be written (a full disk, say) never fails the seal: the API serves those pages by
  // SQL and writes the copy itself (api/books.ts).
  if (servingCopy && booksFileHook && p.dataset === 'books' && rows > 0)
    await booksFileHook(duck, tmp, sha256, servingDirOf(lakeDir)).catch(() => null);
  if (manifestDir !== undefined) {
    const marker = pendingMarker(manifestDir, p, name);
    await fs.mkdir(path.dirname(marker), { recursive: true });
    const pending: Pending = { pid: process.pid, partition: partitionDir(p), name };
    await fs.writeFile(marker, JSON.stringify(pending));
    await fsyncFile(marker);
  }
  await fs.rename(tmp, file);
  await fsyncDir(dir);
  return {
    name,
    rows,
    bytes,
    sha256,
    sources,
    min_ts,
    max_ts,
    written_at: writtenAt,
    ...(markets ? { markets } : {}),
    ...(verified ? { verified_by: verified } : {}),
    ...(checks ? { hash_check: checks } : {}),
    ...(venueText ? { venue_text: venueText } : {}),
  };
}

/**
 * Replaces the files named in `replaces` (and any file of the same name) with `added`, then
 * moves the replaced files out of the lake. The manifest swap is the commit point.
 */
export async function commitFiles(
  lakeDir: string,
  manifestDir: string,
  trashDir: string,
  p: Partition,
  added: ManifestFile[],
  replaces: string[],
): Promise<void> {
  const manifest = await readManifest(manifestDir, p);
  const drop = new Set([...replaces, ...added.map((f) => f.name)]);
  const before = new Set(manifest.files.map((f) => f.name));
  manifest.files = [...manifest.files.filter((f) => !drop.has(f.name)), ...added].sort((a, b) => a.name.localeCompare(b.name));
  try {
    await writeManifest(manifestDir, p, manifest);
  } catch (err) {
    // A file the manifest does not name is still read by a glob over the lake (an analyst's, a
    // bucket's): one left beside a failed commit (a full disk refusing the manifest) would hold
    // its rows twice once the retry commits them under another name. Unless the manifest named
    // it all along (the same rows, sealed before under the same name), it goes.
    const named = new Set((await readManifest(manifestDir, p).catch(() => ({ files: [] }))).files.map((f) => f.name));
    for (const f of added) {
      if (!before.has(f.name) && !named.has(f.name))
        await fs.rm(path.join(lakeDir, partitionDir(p), f.name), { force: true }).catch(() => undefined);
      await fs.rm(pendingMarker(manifestDir, p, f.name), { force: true }).catch(() => undefined);
    }
    throw err;
  }
  // Committed: a marker a crash leaves from here on is swept as named, the file kept.
  for (const f of added) await fs.rm(pendingMarker(manifestDir, p, f.name), { force: true });
  const keep = new Set(added.map((f) => f.name));
  for (const name of replaces) {
    if (keep.has(name)) continue;
    // Moved, not deleted: a reader that already opened the file keeps reading it.
    const from = path.join(lakeDir, partitionDir(p), name);
    const to = path.join(trashDir, `${Date.now()}-${partitionDir(p).replaceAll('/', '_')}-${name}`);
    await fs.mkdir(trashDir, { recursive: true });
    await fs.rename(from, to).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'ENOENT') throw err;
    });
  }
}
