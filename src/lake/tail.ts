// An API process without capture keeps the newest book of each market current by following
// the spool capture appends to, so orderbook/latest stays a memory lookup (never a Parquet
// read) whether capture runs in this process or beside it.
import type { BookRow, LatestBook } from '../records.js';
import { followLines } from './fsutil.js';
import { listSpool } from './spool.js';

export class SpoolTail {
  /** Bytes of each part already applied: always just past a newline. */
  private readonly offsets = new Map<string, number>();
  rows = 0;

  constructor(
    private readonly dir: string,
    readonly latest: Map<string, LatestBook>,
  ) {}

  /** Applies every complete book line appended since the last call. */
  async poll(): Promise<number> {
    const before = this.rows;
    const present = new Set<string>();
    for (const part of await listSpool(this.dir)) {
      if (part.partition.dataset !== 'books') continue;
      present.add(part.file);
      await this.follow(part.file, `${part.partition.venue}:`);
    }
    // Sealed parts are deleted; their offsets go with them.
    for (const file of this.offsets.keys()) if (!present.has(file)) this.offsets.delete(file);
    return this.rows - before;
  }

  private async follow(file: string, keyPrefix: string): Promise<void> {
    const at = await followLines(file, this.offsets.get(file) ?? 0, (line) => this.apply(keyPrefix, line));
    if (at !== null) this.offsets.set(file, at);
  }

  private apply(keyPrefix: string, line: string): void {
    let row: BookRow;
    try {
      row = JSON.parse(line) as BookRow;
    } catch {
      return; // Never acknowledged by capture (recovery truncates such lines); nothing to show.
    }
    const { ts, recv_ts: _recv, ...book } = row;
    const key = keyPrefix + book.market_id;
    const current = this.latest.get(key);
    this.rows++;
    if (!current || ts > current.ts) {
      this.latest.set(key, { ts, books: [book] });
    } else if (ts === current.ts) {
      // One poll writes every outcome of a market at the same ts: together they are the book.
      const books = current.books.filter((b) => b.outcome_index !== book.outcome_index);
      books.push(book);
      books.sort((a, b) => a.outcome_index - b.outcome_index);
      this.latest.set(key, { ts, books });
    }
  }
}
