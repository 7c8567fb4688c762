// Decoded books of recently read markets without serving copies (SERVING_COPIES=off, or a copy
// not written yet), bounded by bytes, least recently used out first. A page of a market that is
// over is then a binary search and a string join: no statement (a DuckDB statement costs about
// 2 ms before it reads anything), no list decoding, no rendering. Markets with copies are served
// from them (their pieces kept by copycache.ts), never loaded whole here.
// An entry is valid for one set of sealed files (its signature: paths and sha256 from the
// in-memory index); a compaction or a backfill changes the set, and the next read reloads.
import type { MarketBooks } from '../pages/render.js';
import { singleFlight } from './singleflight.js';

interface Entry {
  signature: string;
  books: MarketBooks;
}

/**
 * How many markets' recent requests are counted (hits and misses): past it the counts are halved
 * and the markets down to none forgotten, as they are every AGE_EVERY requests, so the count is
 * of lately, and a market hot yesterday does not keep out today's.
 */
const COUNTED = 16_384;
const AGE_EVERY = 32_768;

export class BookCache {
  private readonly entries = new Map<string, Entry>();
  private readonly asked = new Map<string, number>();
  /** Markets loaded once and found too large to keep: loading them again would only cost. */
  private readonly oversized = new Set<string>();
  private sinceAged = 0;
  private readonly loading = new Map<string, Promise<MarketBooks | null>>();
  private held = 0;
  hits = 0;
  loads = 0;
  /** Markets asked for often enough to load that were kept out: loading them would evict ones asked for as often. */
  refused = 0;

  constructor(readonly maxBytes: number) {}

  get bytes(): number {
    return this.held;
  }

  get markets(): number {
    return this.entries.size;
  }

  /** The entry for `key` if it was built from the same files. */
  peek(key: string, signature: string): MarketBooks | null {
    const entry = this.entries.get(key);
    if (!entry || entry.signature !== signature) return null;
    this.count(key);
    // Most recently used last: eviction takes from the front.
    this.entries.delete(key);
    this.entries.set(key, entry);
    this.hits++;
    return entry.books;
  }

  /**
   * Counts a miss of `key`: whether it was asked for more than `before` times lately, so a client
   * is walking it, worth decoding the whole market for. A first page alone (a sampler drawing
   * markets over the lake) is one statement, cheaper than decoding hundreds of books it will not
   * ask for, so the second miss loads.
   */
  askedBefore(key: string, before = 1): boolean {
    return this.count(key) > before;
  }

  /**
   * Whether to load `key` now: asked for more than `before` times lately, and its entry (sized as
   * the average one held) would fit, or would push out only markets asked for less often. A load
   * costs several pages' work, repaid only by hits; under uniform traffic over more markets than
   * fit, a least-recently-used cache loading every walked market evicted each before its next
   * request came (bench-compare: deep pages at 0.53x the req/s of no cache). Refused, the market is
   * served as with no cache, and the cache keeps what it holds.
   */
  worthLoading(key: string, before: number): boolean {
    const asked = this.count(key);
    if (asked <= before || this.oversized.has(key)) return false;
    if (this.admits(key, asked)) return true;
    this.refused++;
    return false;
  }

  private admits(key: string, asked: number): boolean {
    const size = this.entries.size ? this.held / this.entries.size : 0;
    let free = this.maxBytes - this.held + (this.entries.get(key)?.books.bytes ?? 0);
    for (const [k, e] of this.entries) {
      if (free >= size) return true;
      if (k === key) continue;
      if ((this.asked.get(k) ?? 0) >= asked) return false;
      free += e.books.bytes;
    }
    return free >= size;
  }

  private count(key: string): number {
    const asked = (this.asked.get(key) ?? 0) + 1;
    this.asked.set(key, asked);
    if (++this.sinceAged >= AGE_EVERY || this.asked.size > COUNTED) this.age();
    return asked;
  }

  private age(): void {
    this.sinceAged = 0;
    for (const [k, n] of this.asked) {
      if (n > 1) this.asked.set(k, n >> 1);
      else this.asked.delete(k);
    }
  }

  /** Loads once however many ask at once; `read` must not be tied to one request (no single client's leaving may cancel it). */
  load(key: string, signature: string, read: () => Promise<MarketBooks | null>): Promise<MarketBooks | null> {
    return singleFlight(this.loading, `${key}\n${signature}`, async () => {
      const books = await read();
      if (books) this.keep(key, signature, books);
      return books;
    });
  }

  private keep(key: string, signature: string, books: MarketBooks): void {
    this.loads++;
    if (this.maxBytes > 0 && books.bytes <= this.maxBytes / 4) return this.put(key, signature, books);
    this.oversized.add(key);
    if (this.oversized.size > COUNTED) this.oversized.delete(this.oversized.keys().next().value!);
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
