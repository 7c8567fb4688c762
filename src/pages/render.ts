// A recorded book as the JSON text pages send, rendered straight from DuckDB's result vectors,
// and a market's books rendered once into buffers (`MarketBooks`): what the book cache holds and
// what the serving copies (copyformat.ts) store, deflated. Every path that answers a page renders through here,
// so the SQL path, the cache and the serving copy answer the same bytes.
import type { DuckDBDataChunk, DuckDBListVector, DuckDBVector } from '@duckdb/node-api';
import { type BookSelected, bookColumn } from '../lake/sql.js';

export type BookColumns = Record<'ts' | 'outcome_index' | 'outcome' | 'token_id' | 'exchange_ts', DuckDBVector> & {
  lists: DuckDBListVector[];
};

/** The vectors of a chunk selected by `bookSelect`, by name. */
export function columnsOf(chunk: DuckDBDataChunk): BookColumns {
  const at = (name: BookSelected) => chunk.getColumnVector(bookColumn(name));
  return {
    ts: at('ts'),
    outcome_index: at('outcome_index'),
    outcome: at('outcome'),
    token_id: at('token_id'),
    exchange_ts: at('exchange_ts'),
    lists: (['bid_prices', 'bid_sizes', 'ask_prices', 'ask_sizes'] as const).map((name) => at(name) as DuckDBListVector),
  };
}

/** One book of a snapshot as JSON text: with its ladders, or (include_orderbook=false) best levels and depth. */
export function bookFragment(columns: BookColumns, row: number, ladders: boolean): string {
  const { outcome_index: index, outcome, token_id: token, exchange_ts: exchange } = columns;
  return fragment(
    index.getItem(row) as number,
    outcome.getItem(row) as string,
    token.getItem(row) as string,
    exchange.getItem(row) as number | null,
    columns.lists.map((l) => readDoubles(l, row)),
    ladders,
  );
}

/** A book as a spool line holds it (epoch ms times), parsed. */
export interface SpooledBook {
  ts: number;
  outcome_index: number;
  outcome: string;
  token_id: string;
  exchange_ts: number | null;
  bid_prices: number[];
  bid_sizes: number[];
  ask_prices: number[];
  ask_sizes: number[];
}

/** The same text as `bookFragment` of the row sealing will make of this line. */
export function spooledFragment(b: SpooledBook, ladders: boolean): string {
  return fragment(b.outcome_index, b.outcome, b.token_id, b.exchange_ts, [b.bid_prices, b.bid_sizes, b.ask_prices, b.ask_sizes], ladders);
}

function fragment(
  index: number,
  outcome: string,
  token: string,
  exchange: number | null,
  levels: ArrayLike<number>[],
  ladders: boolean,
): string {
  const head = `{"outcome_index":${index},"outcome":${JSON.stringify(outcome)},"token_id":${JSON.stringify(token)},"exchange_time":${exchange === null ? 'null' : `"${new Date(exchange).toISOString()}"`}`;
  if (ladders)
    return `${head},"bid_prices":${numbers(levels[0])},"bid_sizes":${numbers(levels[1])},"ask_prices":${numbers(levels[2])},"ask_sizes":${numbers(levels[3])}}`;
  const depth = (xs: ArrayLike<number>) => {
    let sum = 0;
    for (let i = 0; i < xs.length; i++) sum += xs[i];
    return Math.round(sum * 1e8) / 1e8;
  };
  return `${head},"best_bid":${levels[0][0] ?? null},"best_ask":${levels[2][0] ?? null},"bid_depth":${depth(levels[1])},"ask_depth":${depth(levels[3])}}`;
}

/**
 * Every recorded book of one market, decoded once and rendered both ways into two buffers
 * (fragment i is bytes [at[i], at[i + 1])), with each row's `{"timestamp":...,"books":[` head.
 * Rows are in (time, outcome) order. A page is then a binary search and a few hundred copies
 * into one buffer: no statement, no list decoding, no rendering, no string to encode.
 */
export interface MarketBooks {
  ts: Float64Array;
  outcome: Int32Array;
  ladder: Buffer;
  ladderAt: Uint32Array;
  summary: Buffer;
  summaryAt: Uint32Array;
  heads: Buffer;
  /** Approximate memory held, for the cache's bound. */
  bytes: number;
}

/** `{"timestamp":"2026-07-26T12:00:00.000Z","books":[`: the same length for every time in years 0-9999. */
export const HEAD = Buffer.byteLength('{"timestamp":"2026-07-26T12:00:00.000Z","books":[');

/** Books added one at a time (rows in time, then outcome order), rendered both ways as they come. */
export class MarketBooksBuilder {
  private readonly ts: number[] = [];
  private readonly outcome: number[] = [];
  private readonly ladders: string[] = [];
  private readonly summaries: string[] = [];

  get rows(): number {
    return this.ts.length;
  }

  add(columns: BookColumns, row: number): void {
    this.ts.push(columns.ts.getItem(row) as number);
    this.outcome.push(columns.outcome_index.getItem(row) as number);
    this.ladders.push(bookFragment(columns, row, true));
    this.summaries.push(bookFragment(columns, row, false));
  }

  finish(): MarketBooks {
    const n = this.ts.length;
    const heads = Buffer.allocUnsafe(n * HEAD);
    for (let i = 0; i < n; i++) heads.write(`{"timestamp":"${new Date(this.ts[i]).toISOString()}","books":[`, i * HEAD, 'latin1');
    const packed = (fragments: string[]): [Buffer, Uint32Array] => {
      const at = new Uint32Array(n + 1);
      for (let k = 0; k < n; k++) at[k + 1] = at[k] + Buffer.byteLength(fragments[k]);
      return [Buffer.from(fragments.join('')), at];
    };
    const [ladder, ladderAt] = packed(this.ladders);
    const [summary, summaryAt] = packed(this.summaries);
    return withBytes({
      ts: Float64Array.from(this.ts),
      outcome: Int32Array.from(this.outcome),
      ladder,
      ladderAt,
      summary,
      summaryAt,
      heads,
    });
  }
}

/** Approximate memory a market's books hold, for the cache's bound. */
export function withBytes(b: Omit<MarketBooks, 'bytes'>): MarketBooks {
  return { ...b, bytes: b.ladder.length + b.summary.length + b.heads.length + b.ts.length * 20 + 256 };
}

/** Rows as `marketBooksSql` selects them (ordered by time, then outcome). */
export function marketBooks(chunks: DuckDBDataChunk[]): MarketBooks {
  const builder = new MarketBooksBuilder();
  for (const chunk of chunks) {
    const columns = columnsOf(chunk);
    for (let row = 0; row < chunk.rowCount; row++) builder.add(columns, row);
  }
  return builder.finish();
}

/**
 * A JSON array of doubles, exactly as JSON.stringify writes it. Prices and sizes are decimals
 * with a few places; those are written from their scaled integer, about twice as fast as the
 * general conversion, which the rest (and anything not exactly such a decimal) still takes.
 */
export function numbers(xs: ArrayLike<number>): string {
  let out = '[';
  for (let i = 0; i < xs.length; i++) {
    if (i) out += ',';
    out += decimal(xs[i]);
  }
  return out + ']';
}

const SCALE = 10_000;
/** ".0001" to ".9999" without trailing zeros, and "" for none: the fraction part of the short form. */
const FRACTIONS = Array.from({ length: SCALE }, (_, f) => (f === 0 ? '' : `.${String(f).padStart(4, '0').replace(/0+$/, '')}`));

function decimal(x: number): string {
  const scaled = Math.round(x * SCALE);
  // Only when x is exactly the double nearest scaled / 10^4 is the short form its shortest form.
  if (scaled / SCALE !== x || scaled < 0 || scaled > 1e15) return JSON.stringify(x);
  const whole = Math.floor(scaled / SCALE);
  return `${whole}${FRACTIONS[scaled - whole * SCALE]}`;
}

/**
 * A row's list of doubles. The double vector keeps its values in a Float64Array (`items`, not
 * public in the pinned @duckdb/node-api); reading it directly is ten times faster than getItem.
 * Lake ladders have no null elements, so validity is not consulted; other versions fall back.
 */
export function readDoubles(list: DuckDBListVector, row: number): number[] | Float64Array {
  const offset = list.getEntryOffset(row);
  const length = list.getEntryLength(row);
  const child = list.childVector;
  const items = (child as unknown as { items?: unknown }).items;
  if (items instanceof Float64Array) return items.subarray(offset, offset + length);
  const out = new Array<number>(length);
  for (let i = 0; i < length; i++) out[i] = child.getItem(offset + i) as number;
  return out;
}

export interface RenderedSnapshots {
  /** Text from the SQL path; a buffer ready to send from the book cache. */
  json: string | Buffer;
  /** When rendered in a frame: the whole allocation, `json` inside it after the frame's `before`. */
  framed?: Buffer;
  /** Books rendered. */
  books: number;
  /** Distinct capture times among all rows given, rendered or not. */
  times: number;
  /** The last rendered capture time: the next page's keyset. */
  last: number | null;
}

/** First index whose time is >= t (or > t when `strict`). */
export function search(ts: Float64Array | Uint32Array, t: number, strict: boolean): number {
  let lo = 0;
  let hi = ts.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (ts[mid] < t || (strict && ts[mid] === t)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

export interface PageSpec {
  from: number;
  to: number;
  order: 'asc' | 'desc';
  /** Keyset: the last time of the previous page. */
  after: number | null;
  intervalMs: number | null;
  outcomeIndex: number | null;
}

/** The capture times a page shows, each as its rows [first, end), and how many times were found (up to one more than shown). */
export interface PageSelection {
  shown: [first: number, end: number][];
  times: number;
}

/**
 * The same page as the SQL path (snapshotPageSql / snapshotTimesSql + snapshotsJson), chosen
 * from a market's times and outcomes alone: the times in [from, to) after the keyset (with
 * `interval`, the newest time of each UTC-aligned bucket among the rows the outcome filter
 * keeps), `maxTimes` of them shown and up to one more counted, so the caller knows whether there
 * is a next page. Pure: a serving copy inflates only the chunks holding the rows it picks.
 */
export function selectPage(ts: Float64Array, outcome: Int32Array, q: PageSpec, maxTimes: number): PageSelection {
  const keep = (i: number) => q.outcomeIndex === null || outcome[i] === q.outcomeIndex;
  const groups: [number, number][] = [];
  const interval = q.intervalMs;
  const bucket = (t: number) => (interval === null ? t : Math.floor(t / interval));
  if (q.order === 'asc') {
    // Every row after the keyset is in a later bucket than the keyset's: its bucket's newest row is the keyset.
    let i = Math.max(search(ts, q.from, false), q.after === null ? 0 : search(ts, q.after, true));
    while (i < ts.length && ts[i] < q.to && groups.length <= maxTimes) {
      const key = bucket(ts[i]);
      let newest = -1;
      for (; i < ts.length && ts[i] < q.to && bucket(ts[i]) === key; i++) if (keep(i)) newest = i;
      if (newest < 0) continue;
      let first = newest;
      while (first > 0 && ts[first - 1] === ts[newest]) first--;
      groups.push([first, newest + 1]);
    }
  } else {
    // Rows of the keyset's own bucket are left out whole: its newest row was the keyset.
    const bound = q.after === null ? q.to : Math.min(q.to, interval === null ? q.after : Math.floor(q.after / interval) * interval);
    let i = search(ts, bound, false) - 1;
    while (i >= 0 && ts[i] >= q.from && groups.length <= maxTimes) {
      const key = bucket(ts[i]);
      let newest = -1;
      for (; i >= 0 && ts[i] >= q.from && bucket(ts[i]) === key; i--) if (newest < 0 && keep(i)) newest = i;
      if (newest < 0) continue;
      let last = newest;
      while (last + 1 < ts.length && ts[last + 1] === ts[newest]) last++;
      let first = newest;
      while (first > 0 && ts[first - 1] === ts[newest]) first--;
      groups.push([first, last + 1]);
    }
  }
  return { shown: groups.slice(0, maxTimes), times: groups.length };
}

/** The rows [lo, hi) a selection's shown times cover: all a page renders. */
export function selectedRows(selection: PageSelection): [lo: number, hi: number] {
  let [lo, hi] = [Infinity, -Infinity];
  for (const [first, end] of selection.shown) [lo, hi] = [Math.min(lo, first), Math.max(hi, end)];
  return lo < hi ? [lo, hi] : [0, 0];
}

/**
 * A selected page as JSON, from books that hold at least its rows: `b`'s row 0 is the market's
 * row `base` (a serving copy reads only the rows shown), so the selection's rows are shifted by it.
 */
export function renderPage(
  b: MarketBooks,
  selection: PageSelection,
  q: PageSpec,
  ladders: boolean,
  base = 0,
  frame: PageFrame | null = null,
): RenderedSnapshots {
  const { outcome } = b;
  const keep = (i: number) => q.outcomeIndex === null || outcome[i] === q.outcomeIndex;
  const shown = selection.shown.map(([first, end]) => [first - base, end - base] as const);
  const [fragments, at] = ladders ? [b.ladder, b.ladderAt] : [b.summary, b.summaryAt];
  // Sized first, then copied once: a page is one buffer the response sends as it is.
  let size = 2 + Math.max(0, shown.length - 1);
  let books = 0;
  for (const [first, end] of shown) {
    size += HEAD + 2;
    let inGroup = 0;
    for (let i = first; i < end; i++) {
      if (!keep(i)) continue;
      size += at[i + 1] - at[i] + (inGroup++ ? 1 : 0);
    }
    books += inGroup;
  }
  const before = frame?.before.length ?? 0;
  const framed = Buffer.allocUnsafe(before + size + (frame?.room ?? 0));
  frame?.before.copy(framed, 0);
  const out = framed.subarray(before, before + size);
  let w = 0;
  out[w++] = 0x5b; // [
  shown.forEach(([first, end], g) => {
    if (g) out[w++] = 0x2c; // ,
    w += b.heads.copy(out, w, first * HEAD, (first + 1) * HEAD);
    let inGroup = 0;
    for (let i = first; i < end; i++) {
      if (!keep(i)) continue;
      if (inGroup++) out[w++] = 0x2c;
      w += fragments.copy(out, w, at[i], at[i + 1]);
    }
    out[w++] = 0x5d; // ]
    out[w++] = 0x7d; // }
  });
  out[w++] = 0x5d;
  return {
    json: out,
    ...(frame ? { framed } : {}),
    books,
    times: selection.times,
    last: shown.length ? b.ts[shown[shown.length - 1][0]] : null,
  };
}

/**
 * Room around a rendered page for the response it goes out in (`{"data":` before, the rest of the
 * envelope after): the page is then sent from the buffer it was rendered into, not copied into
 * another (a page's buffers are what keeps the garbage collector busy).
 */
export interface PageFrame {
  before: Buffer;
  room: number;
}

/** A page from a market's decoded books (the cache's, or a whole block of a serving copy). */
export function pageFromBooks(
  b: MarketBooks,
  q: PageSpec,
  ladders: boolean,
  maxTimes: number,
  frame: PageFrame | null = null,
): RenderedSnapshots {
  return renderPage(b, selectPage(b.ts, b.outcome, q, maxTimes), q, ladders, 0, frame);
}
