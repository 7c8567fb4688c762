// Writes serving copies (the format: copyformat.ts): one sealed books file's, streamed from
// DuckDB a market at a time, and `make serving-copies`, which brings every copy in line with the lake.
import fs from 'node:fs/promises';
import path from 'node:path';
import zlib from 'node:zlib';
import type { Duck } from '../lake/duckdb.js';
import { FileIndex } from '../lake/fileindex.js';
import type { LakePaths } from '../lake/layout.js';
import { bookSelect, parquetSource } from '../lake/sql.js';
import { CHUNK_TIMES, type CopyIndex, MAGIC, NotDerivable, SERVING_VERSION, TRAILER, encodeBlock, servingCopyPath } from './copyformat.js';
import { ServingCopies } from './copyreader.js';
import { MarketBooksBuilder, columnsOf } from './render.js';

export interface WrittenCopy {
  file: string;
  markets: number;
  rows: number;
  bytes: number;
}

/** A file whose rows are not in (market, time, outcome) order: its copy cannot be streamed. */
class NotInOrder extends Error {}

/**
 * Writes the serving copy of one sealed books file (`parquet`, whose content hashes to
 * `sha256`). Streams the file a chunk at a time, one market rendered at once, so memory is
 * bounded by the largest market, not the file. Returns null when the file is not in the order
 * the writer gives, or a book's summary is not its ladders' (then pages of its markets take the SQL path).
 */
export async function writeServingCopy(duck: Duck, parquet: string, sha256: string, servingDir: string): Promise<WrittenCopy | null> {
  const file = servingCopyPath(servingDir, sha256);
  await fs.mkdir(path.dirname(file), { recursive: true });
  const tmp = `${file}.tmp-${process.pid}-${Math.random().toString(36).slice(2)}`;
  const handle = await fs.open(tmp, 'w');
  const index: CopyIndex = { version: SERVING_VERSION, rows: 0, chunkTimes: CHUNK_TIMES, markets: {} };
  let offset = 0;
  let market: string | null = null;
  let builder = new MarketBooksBuilder();
  let lastTs = -Infinity;
  let lastOutcome = -Infinity;
  const flush = async () => {
    if (market === null || builder.rows === 0) return;
    const { block, table } = await encodeBlock(builder.finish());
    await handle.write(block, 0, block.length, offset);
    index.markets[market] = [offset, block.length, builder.rows, table];
    index.rows += builder.rows;
    offset += block.length;
    builder = new MarketBooksBuilder();
  };
  try {
    // market_id last, so the renderers find the book columns where bookSelect puts them.
    await duck.stream(`SELECT ${bookSelect()}, market_id FROM ${parquetSource([parquet])}`, async (chunk) => {
      const columns = columnsOf(chunk);
      const ids = chunk.getColumnVector(chunk.columnCount - 1);
      for (let row = 0; row < chunk.rowCount; row++) {
        const id = ids.getItem(row) as string;
        const ts = columns.ts.getItem(row) as number;
        const outcome = columns.outcome_index.getItem(row) as number;
        if (id !== market) {
          await flush();
          if (index.markets[id]) throw new NotInOrder();
          market = id;
        } else if (ts < lastTs || (ts === lastTs && outcome < lastOutcome)) {
          throw new NotInOrder();
        }
        lastTs = ts;
        lastOutcome = outcome;
        builder.add(columns, row);
      }
    });
    await flush();
    const json = Buffer.from(JSON.stringify(index));
    const trailer = Buffer.alloc(TRAILER);
    trailer.writeUInt32LE(json.length, 0);
    trailer.writeUInt32LE(zlib.crc32(json), 4);
    trailer.writeUInt32LE(SERVING_VERSION, 8);
    MAGIC.copy(trailer, 12);
    await handle.write(Buffer.concat([json, trailer]), 0, json.length + TRAILER, offset);
    await handle.sync();
    await handle.close();
    await fs.rename(tmp, file);
    return { file, markets: Object.keys(index.markets).length, rows: index.rows, bytes: offset + json.length + TRAILER };
  } catch (err) {
    await handle.close().catch(() => undefined);
    await fs.rm(tmp, { force: true });
    if (err instanceof NotInOrder || err instanceof NotDerivable) return null;
    throw err;
  }
}

/** A copy no manifest names for this long is left from a replaced file (a compaction, a migration). */
const ORPHAN_AGE_MS = 3_600_000;

/**
 * Brings the copies in line with the lake (`make serving-copies`): writes those missing (a lake
 * sealed before copies existed, a copy lost or of an older rendering) and removes those no
 * manifest names any more. A fresh copy is never removed: a seal writes it before its commit.
 */
export async function refreshServingCopies(
  duck: Duck,
  lakeDir: string,
  servingDir: string,
  files: readonly { sha256: string; path: string; rows: number; dataset: string }[],
  now = Date.now(),
): Promise<{ written: number; present: number; unwritable: number; removed: number }> {
  const books = files.filter((f) => f.dataset === 'books' && f.rows > 0);
  const copies = new ServingCopies(servingDir);
  const missing = await copies.missing(books);
  await copies.close();
  let [written, unwritable] = [0, 0];
  for (const f of missing) {
    if (await writeServingCopy(duck, path.join(lakeDir, f.path), f.sha256, servingDir)) written++;
    else unwritable++;
  }
  const named = new Set(books.map((f) => path.basename(servingCopyPath(servingDir, f.sha256))));
  let removed = 0;
  const root = path.join(servingDir, 'books');
  for (const entry of await fs.readdir(root, { recursive: true, withFileTypes: true }).catch(() => [])) {
    if (!entry.isFile() || named.has(entry.name)) continue;
    const file = path.join(entry.parentPath, entry.name);
    const { mtimeMs } = await fs.stat(file);
    if (now - mtimeMs < ORPHAN_AGE_MS) continue;
    await fs.rm(file, { force: true });
    removed++;
  }
  return { written, present: books.length - missing.length, unwritable, removed };
}

/** `refreshServingCopies` over every file of the lake at `paths`, as a walk of its manifests finds them. */
export async function refreshLakeServingCopies(duck: Duck, paths: LakePaths): ReturnType<typeof refreshServingCopies> {
  const index = new FileIndex(paths);
  await index.walk();
  const files = index.all().map((f) => ({ ...f, dataset: f.partition.dataset }));
  return refreshServingCopies(duck, paths.lake, paths.serving, files);
}
