// The newest book of each market, in memory. Capture (or the spool tail) writes every book it
// records; left alone the map would hold every market ever seen, a few KiB each, growing by
// thousands a day. Books captured long ago leave it unless a client read them recently; a later
// request for one reads its newest hour once and keeps it again.
import path from 'node:path';
import { partitionDir } from '../lake/layout.js';
import type { IndexedFile, LakeReader } from '../lake/reader.js';
import { HOUR } from '../time.js';
import { type LatestBook, marketKey } from '../records.js';
import { newestBooksSql } from './plan.js';
import { rowBook } from './shape.js';
import { BOOK_COLUMNS, relation } from '../lake/sql.js';

/** A book this old is kept only while clients read it. */
export const KEEP_RECENT_MS = 6 * 3_600_000;
export const KEEP_READ_MS = 3_600_000;

export class LatestReads {
  private readonly readAt = new Map<string, number>();

  read(key: string, now: number): void {
    this.readAt.set(key, now);
  }

  /** Drops books captured before `now - KEEP_RECENT_MS` that nobody read within KEEP_READ_MS. */
  prune(latest: Map<string, LatestBook>, now: number): number {
    let dropped = 0;
    for (const [key, book] of latest) {
      if (book.ts >= now - KEEP_RECENT_MS || (this.readAt.get(key) ?? -Infinity) >= now - KEEP_READ_MS) continue;
      latest.delete(key);
      dropped++;
    }
    for (const [key, at] of this.readAt) if (at < now - KEEP_READ_MS) this.readAt.delete(key);
    return dropped;
  }
}

/** Markets whose books were sealed this recently are loaded at start. */
export const PRELOAD_MS = 2 * HOUR;

/**
 * At start, the newest book of every market in the sealed book hours of the last PRELOAD_MS
 * (the spool tail or capture bring the open hours), so the latest book of a market that just
 * closed is memory from the first request after a restart. Never replaces a newer book.
 */
export async function preloadLatest(
  lake: LakeReader,
  latest: Map<string, LatestBook>,
  now: number,
  fromFiles: WeakSet<LatestBook>,
): Promise<number> {
  let loaded = 0;
  const hours = new Map<string, { venue: string; files: IndexedFile[] }>();
  for (const f of lake.sealedFiles()) {
    if (f.partition.dataset !== 'books' || f.partition.hour < now - PRELOAD_MS - HOUR || f.partition.hour > now) continue;
    const dir = partitionDir(f.partition);
    if (!hours.has(dir)) hours.set(dir, { venue: f.partition.venue, files: [] });
    hours.get(dir)!.files.push(f);
  }
  for (const { venue, files } of hours.values()) {
    await lake.ensure(files);
    const sealed = files.map((f) => path.join(lake.paths.lake, f.path));
    const newest = new Map<string, LatestBook>();
    for (const r of await lake.duck.rows(newestBooksSql(relation('books', { sealed, spool: [] }, BOOK_COLUMNS)!))) {
      const id = marketKey(venue, String(r.market_id));
      const entry = newest.get(id) ?? { ts: Number(r.ts), books: [] };
      entry.books.push({ market_id: String(r.market_id), ...rowBook(r) });
      newest.set(id, entry);
    }
    for (const [id, book] of newest) {
      if ((latest.get(id)?.ts ?? -Infinity) >= book.ts) continue;
      latest.set(id, book);
      fromFiles.add(book);
      loaded++;
    }
  }
  return loaded;
}
