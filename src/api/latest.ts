// The newest book of each market, in memory. Capture (or the spool tail) writes every book it
// records; left alone the map would hold every market ever seen, a few KiB each, growing by
// thousands a day. Books captured long ago leave it unless a client read them recently; a later
// request for one reads its newest hour once and keeps it again.
import type { LatestBook } from '../records.js';

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
