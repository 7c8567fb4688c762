// Decoded books of recently read markets, bounded by bytes, least recently used out first.
// A page of a market that is over is then a binary search and a string join: no statement (a
// DuckDB statement costs about 2 ms before it reads anything), no list decoding, no rendering.
// An entry is valid for one set of sealed files (its signature: paths and sha256 from the
// in-memory index); a compaction or a backfill changes the set, and the next read reloads.
import type { MarketBooks } from '../pages/render.js';
import { singleFlight } from './singleflight.js';

interface Entry {
  signature: string;
  books: MarketBooks;
}

/** Markets remembered as missed and not decoded: enough for the walks in progress at once. */
const ASKED_ONCE = 4096;

export class BookCache {
  private readonly entries = new Map<string, Entry>();
  /** Misses per market not loaded (yet), most recent last. */
  private readonly misses = new Map<string, number>();
  private readonly loading = new Map<string, Promise<MarketBooks | null>>();
  private held = 0;
  hits = 0;
  loads = 0;

  constructor(readonly maxBytes: number) {}

  get bytes(): number {
    return this.held;
  }

  /** The entry for `key` if it was built from the same files. */
  peek(key: string, signature: string): MarketBooks | null {
    const entry = this.entries.get(key);
    if (!entry || entry.signature !== signature) return null;
    // Most recently used last: eviction takes from the front.
    this.entries.delete(key);
    this.entries.set(key, entry);
    this.hits++;
    return entry.books;
  }

  /**
   * Whether a market missed `before` times already (lately): then a client is walking it, worth
   * decoding the whole market for. Without serving copies a first page alone (a sampler drawing
   * markets over the lake) is one statement, cheaper than decoding hundreds of books it will not
   * ask for, so the second miss loads. From a copy a page costs its table and a chunk inflated, a
   * whole market all its chunks and every summary cut: books.ts waits for more misses there.
   */
  askedBefore(key: string, before = 1): boolean {
    const misses = (this.misses.get(key) ?? 0) + 1;
    this.misses.delete(key);
    if (misses > before) return true;
    this.misses.set(key, misses);
    if (this.misses.size > ASKED_ONCE) this.misses.delete(this.misses.keys().next().value!);
    return false;
  }

  /** Loads once however many ask at once; `read` must not be tied to one request (no single client's leaving may cancel it). */
  load(key: string, signature: string, read: () => Promise<MarketBooks | null>): Promise<MarketBooks | null> {
    return singleFlight(this.loading, `${key}\n${signature}`, async () => {
      this.loads++;
      const books = await read();
      if (books) this.keep(key, signature, books);
      return books;
    });
  }

  /** Keeps books read elsewhere (a serving copy), within the same bound as those loaded here. */
  keep(key: string, signature: string, books: MarketBooks): void {
    if (this.maxBytes > 0 && books.bytes <= this.maxBytes / 4) this.put(key, signature, books);
  }

  private put(key: string, signature: string, books: MarketBooks): void {
    const old = this.entries.get(key);
    if (old) this.held -= old.books.bytes;
    this.entries.delete(key);
    this.entries.set(key, { signature, books });
    this.held += books.bytes;
    for (const [k, e] of this.entries) {
      if (this.held <= this.maxBytes) break;
      this.entries.delete(k);
      this.held -= e.books.bytes;
    }
  }
}
