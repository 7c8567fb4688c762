// Books of markets still in the spool (recording, or over and not sealed yet: the markets users
// look at most), kept rendered and followed as capture appends: a page is then what a sealed
// market's is (a binary search and buffer copies), not a statement over the spool's JSON. Each
// part is read once, from where the last read stopped; its lines are rendered by the same code
// as sealed rows (`spooledFragment`), so a page answers the bytes sealing will serve.
import { statSync } from 'node:fs';
import { followLines } from '../lake/fsutil.js';
import { HEAD, type MarketBooks, type SpooledBook, spooledFragment, withBytes } from '../pages/render.js';
import { singleFlight } from './singleflight.js';

/** A market's books in (time, outcome) order, in buffers that grow by doubling: appending is amortized O(1). */
export class GrowingBooks {
  private n = 0;
  private ts = new Float64Array(256);
  private outcome = new Int32Array(256);
  private heads: Buffer = Buffer.allocUnsafe(256 * HEAD);
  private ladder: Buffer = Buffer.allocUnsafe(256 * 1024);
  private ladderAt = new Uint32Array(257);
  private summary: Buffer = Buffer.allocUnsafe(256 * 256);
  private summaryAt = new Uint32Array(257);
  /** A row came before the last one (parts of one market interleave after a restart or a late row): sorted at the next view. */
  private unsorted = false;

  add(b: SpooledBook): void {
    if (this.n === this.ts.length) this.growRows();
    const i = this.n;
    if (i > 0 && (b.ts < this.ts[i - 1] || (b.ts === this.ts[i - 1] && b.outcome_index < this.outcome[i - 1]))) this.unsorted = true;
    this.ts[i] = b.ts;
    this.outcome[i] = b.outcome_index;
    this.heads.write(`{"timestamp":"${new Date(b.ts).toISOString()}","books":[`, i * HEAD, 'latin1');
    this.ladder = append(this.ladder, this.ladderAt, i, spooledFragment(b, true));
    this.summary = append(this.summary, this.summaryAt, i, spooledFragment(b, false));
    this.n++;
  }

  /** The books so far, as views of the buffers (valid until the next `add`). */
  view(): MarketBooks {
    if (this.unsorted) this.sort();
    const n = this.n;
    return withBytes({
      ts: this.ts.subarray(0, n),
      outcome: this.outcome.subarray(0, n),
      ladder: this.ladder.subarray(0, this.ladderAt[n]),
      ladderAt: this.ladderAt.subarray(0, n + 1),
      summary: this.summary.subarray(0, this.summaryAt[n]),
      summaryAt: this.summaryAt.subarray(0, n + 1),
      heads: this.heads.subarray(0, n * HEAD),
    });
  }

  /** Memory held, capacity included. */
  get bytes(): number {
    return this.ts.byteLength * 2 + this.outcome.byteLength * 2 + this.heads.length + this.ladder.length + this.summary.length;
  }

  private growRows(): void {
    const cap = this.ts.length * 2;
    const grow = <T extends Float64Array | Int32Array | Uint32Array>(a: T, size: number): T => {
      const b = new (a.constructor as new (n: number) => T)(size);
      b.set(a);
      return b;
    };
    this.ts = grow(this.ts, cap);
    this.outcome = grow(this.outcome, cap);
    this.ladderAt = grow(this.ladderAt, cap + 1);
    this.summaryAt = grow(this.summaryAt, cap + 1);
    const heads = Buffer.allocUnsafe(cap * HEAD);
    this.heads.copy(heads, 0, 0, this.n * HEAD);
    this.heads = heads;
  }

  /** Stable, so rows at one (time, outcome) keep the order they came in. */
  private sort(): void {
    const n = this.n;
    const order = Array.from({ length: n }, (_, i) => i).sort(
      (a, b) => this.ts[a] - this.ts[b] || this.outcome[a] - this.outcome[b] || a - b,
    );
    const ts = new Float64Array(this.ts.length);
    const outcome = new Int32Array(this.outcome.length);
    const heads = Buffer.allocUnsafe(this.heads.length);
    const ladder = Buffer.allocUnsafe(this.ladder.length);
    const ladderAt = new Uint32Array(this.ladderAt.length);
    const summary = Buffer.allocUnsafe(this.summary.length);
    const summaryAt = new Uint32Array(this.summaryAt.length);
    order.forEach((from, to) => {
      ts[to] = this.ts[from];
      outcome[to] = this.outcome[from];
      this.heads.copy(heads, to * HEAD, from * HEAD, (from + 1) * HEAD);
      ladderAt[to + 1] = ladderAt[to] + this.ladder.copy(ladder, ladderAt[to], this.ladderAt[from], this.ladderAt[from + 1]);
      summaryAt[to + 1] = summaryAt[to] + this.summary.copy(summary, summaryAt[to], this.summaryAt[from], this.summaryAt[from + 1]);
    });
    Object.assign(this, { ts, outcome, heads, ladder, ladderAt, summary, summaryAt, unsorted: false });
  }
}

/** Writes fragment `i` after fragment i-1 (offsets in `at`), growing the buffer when it is full; returns the buffer now holding it. */
function append(buffer: Buffer, at: Uint32Array, i: number, text: string): Buffer {
  const start = at[i];
  const size = Buffer.byteLength(text);
  let out = buffer;
  if (start + size > buffer.length) {
    out = Buffer.allocUnsafe(Math.max(buffer.length * 2, start + size));
    buffer.copy(out, 0, 0, start);
  }
  out.write(text, start);
  at[i + 1] = start + size;
  return out;
}

interface Entry {
  books: GrowingBooks;
  /** Bytes of each spool part already added, always just past a newline. */
  read: Map<string, number>;
  /** What `held` counts for it. */
  charged: number;
}

/**
 * The followed markets, bounded by bytes, least recently used out first. A market's entry holds
 * the parts it was built from: a part gone (sealed and removed) starts the entry over, since only
 * its own parts say which rows it holds.
 */
export class LiveBooks {
  private readonly entries = new Map<string, Entry>();
  private readonly following = new Map<string, Promise<MarketBooks>>();
  private held = 0;
  hits = 0;
  loads = 0;
  /** Pages answered from followed markets. */
  pages = 0;

  constructor(readonly maxBytes: number) {}

  get bytes(): number {
    return this.held;
  }

  get markets(): number {
    return this.entries.size;
  }

  /** Whether `key` is followed already (then a page costs only what was appended since). */
  has(key: string): boolean {
    return this.entries.has(key);
  }

  /**
   * The market's books from its spool `parts` (each holding its rows alone), as of now: what was
   * appended since the last call is read and added. One read per market at a time, however many ask.
   */
  books(key: string, parts: readonly string[]): Promise<MarketBooks> {
    return singleFlight(this.following, key, async () => {
      let entry = this.entries.get(key);
      const listed = new Set(parts);
      if (entry && [...entry.read.keys()].some((file) => !listed.has(file))) entry = undefined;
      if (entry) this.hits++;
      else this.loads++;
      entry ??= { books: new GrowingBooks(), read: new Map(), charged: 0 };
      const { books } = entry;
      for (const file of parts) {
        // Most pages come between two flushes: a stat (synchronous: microseconds on a cached inode,
        // no turn in libuv's pool behind other requests' reads) says nothing was appended.
        const size = statSync(file, { throwIfNoEntry: false })?.size;
        if (size === undefined || size === entry.read.get(file)) continue;
        const at = await followLines(file, entry.read.get(file) ?? 0, (line) => {
          let b: SpooledBook;
          try {
            b = JSON.parse(line) as SpooledBook;
          } catch {
            return; // as the SQL path's lenient read does; capture writes whole lines
          }
          books.add(b);
        });
        // A part removed as it was read: its rows are sealed, and the next call finds it gone.
        if (at !== null) entry.read.set(file, at);
      }
      this.put(key, entry);
      return entry.books.view();
    });
  }

  private put(key: string, entry: Entry): void {
    const old = this.entries.get(key);
    if (old) this.held -= old.charged;
    this.entries.delete(key);
    entry.charged = entry.books.bytes;
    if (entry.charged > this.maxBytes) return;
    this.entries.set(key, entry);
    this.held += entry.charged;
    for (const [k, e] of this.entries) {
      if (this.held <= this.maxBytes) break;
      this.entries.delete(k);
      this.held -= e.charged;
    }
  }
}
