// A market's recorded history as a replay reads it: every book row, the venue's trades, its tick
// versions and its gaps, loaded once per market (three bound statements) and shared by every
// replay that subscribes to it while its files stay the same.
import type { Venue } from '../config.js';
import type { DuckDBDataChunk, DuckDBListVector } from '@duckdb/node-api';
import type { JsonRow, Params } from '../lake/duckdb.js';
import { readDoubles } from '../pages/render.js';
import { type Partition, partitionOf } from '../lake/layout.js';
import type { LakeReader, StoredMarket } from '../lake/reader.js';
import { relation } from '../lake/sql.js';
import { planPartitions } from '../lake/layout.js';
import { marketKey } from '../records.js';
import { numberText } from '../numbertext.js';

/** One outcome's book as recorded, ladders best level first (the lake's order). */
export interface TapeBook {
  ts: number;
  outcome: number;
  bidPrices: ArrayLike<number>;
  bidSizes: ArrayLike<number>;
  askPrices: ArrayLike<number>;
  askSizes: ArrayLike<number>;
}

/** The first of `n` rows in time order whose time (`tsOf`) is at or after `t`, or after it when `after`. */
export function firstAt(n: number, tsOf: (i: number) => number, t: number, after = false): number {
  let lo = 0;
  let hi = n;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (tsOf(mid) < t || (after && tsOf(mid) === t)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Texts of numbers kept per text code: a bound on what a market of ever-new sizes holds. */
const NUMBER_TEXTS = 16_384;

/**
 * A market's book rows in a few typed arrays (row i's ladders at `at[i]` in `levels`: bid prices,
 * bid sizes, ask prices, ask sizes): an hour of every market is hundreds of thousands of rows, and
 * as objects with number arrays the garbage collector's marking of them cost more than replaying.
 */
export class TapeBooks {
  readonly ts: Float64Array;
  readonly outcome: Int32Array;
  /** Row i's ladders: bid prices at `at[i]`, bid sizes after `bids[i]` of them, then ask prices and sizes (`asks[i]` each). */
  readonly at: Int32Array;
  readonly bids: Int32Array;
  readonly asks: Int32Array;
  levels: Float64Array;
  /**
   * Rows whose ladders are held, when not all are: a tape read from a replay copy holds its
   * messages rendered, and inflates ladders a block at a time, for the rows a walk starts from.
   */
  private known: Uint8Array | null = null;
  private loadLadders: ((i: number) => void) | null = null;
  /** The venue's time of each row's book (NaN: not known), which its hash covers. */
  exchange: Float64Array;
  /** How the venue wrote each row's prices and sizes (numbertext.ts), -1 for the shortest form. */
  priceDecimals: Int8Array;
  sizeDecimals: Int8Array;
  /** Whether the venue sent a hash with each row's book (`hash_check` not null). */
  hashed: Uint8Array;
  /** Each row's hashed fields (an index into `fieldTexts`, -1 for none). */
  fields: Int32Array;
  readonly fieldTexts: string[] = [];
  /** The few rows whose texts fit no code (`level_texts`) or whose hash the formula does not give (`venue_hash`). */
  readonly levelTexts = new Map<number, string>();
  readonly venueHashes = new Map<number, string>();
  private readonly fieldIndex = new Map<string, number>();
  private readonly parsedTexts = new Map<number, string[]>();
  /** Numbers' texts by their code (-1, the shortest form, first), as written so far. */
  private readonly numberTexts: Map<number, string>[] = [];

  /**
   * A tape's rows as a replay copy keeps them: every column but the ladders, which `load(i)` gives
   * for row i and the rows stored beside it (rows [from, to), their values laid out as `at` would):
   * appended to `levels` when a walk first asks for one of them.
   */
  static copied(
    columns: Pick<TapeBooks, 'ts' | 'outcome' | 'bids' | 'asks' | 'exchange' | 'priceDecimals' | 'sizeDecimals' | 'hashed' | 'fields'>,
    fieldTexts: string[],
    levelTexts: [number, string][],
    venueHashes: [number, string][],
    load: (i: number) => { from: number; to: number; values: Float64Array },
  ): TapeBooks {
    const books = new TapeBooks([]);
    const n = columns.ts.length;
    const known = new Uint8Array(n);
    Object.assign(books, { ...columns, at: new Int32Array(n), known });
    for (const t of fieldTexts) books.fieldId(t);
    for (const [i, t] of levelTexts) books.levelTexts.set(i, t);
    for (const [i, h] of venueHashes) books.venueHashes.set(i, h);
    books.loadLadders = (i) => {
      const { from, to, values } = load(i);
      const base = books.levels.length;
      const levels = new Float64Array(base + values.length);
      levels.set(books.levels);
      levels.set(values, base);
      let at = base;
      for (let r = from; r < to; r++) {
        books.at[r] = at;
        at += 2 * (books.bids[r] + books.asks[r]);
        known[r] = 1;
      }
      if (at !== levels.length) throw new Error(`ladders of ${values.length} values for rows ${from} to ${to}, not ${at - base}`);
      books.levels = levels;
    };
    return books;
  }

  /** Makes row i's ladders readable (a copied tape inflates their block); throws where they cannot be. */
  ensure(i: number): void {
    if (this.known === null || this.known[i] === 1) return;
    this.loadLadders!(i);
    if (this.known[i] !== 1) throw new Error(`the ladders of row ${i} were not read`);
  }

  /**
   * From chunks of `TAPE_BOOK_SELECT`: ts, outcome, the four ladders as one list, how many bids and
   * asks, then the venue's time, text codes, texts, hashed fields, hash and whether one was sent.
   */
  constructor(chunks: DuckDBDataChunk[]) {
    const n = chunks.reduce((sum, c) => sum + c.rowCount, 0);
    this.ts = new Float64Array(n);
    this.outcome = new Int32Array(n);
    this.at = new Int32Array(n);
    this.bids = new Int32Array(n);
    this.asks = new Int32Array(n);
    this.exchange = new Float64Array(n);
    this.priceDecimals = new Int8Array(n);
    this.sizeDecimals = new Int8Array(n);
    this.hashed = new Uint8Array(n);
    this.fields = new Int32Array(n);
    const size = chunks.reduce((sum, c) => sum + (c.getColumnVector(2) as DuckDBListVector).childVector.itemCount, 0);
    this.levels = new Float64Array(size);
    let i = 0;
    let offset = 0;
    for (const c of chunks) {
      const ts = c.getColumnVector(0);
      const outcome = c.getColumnVector(1);
      const ladders = c.getColumnVector(2) as DuckDBListVector;
      const bids = c.getColumnVector(3);
      const asks = c.getColumnVector(4);
      const [exchange, pd, sd, texts, fields, hash, hashed] = [5, 6, 7, 8, 9, 10, 11].map((k) => c.getColumnVector(k));
      for (let r = 0; r < c.rowCount; r++, i++) {
        this.ts[i] = ts.getItem(r) as number;
        this.outcome[i] = outcome.getItem(r) as number;
        this.bids[i] = bids.getItem(r) as number;
        this.asks[i] = asks.getItem(r) as number;
        this.exchange[i] = (exchange.getItem(r) as number | null) ?? NaN;
        this.priceDecimals[i] = (pd.getItem(r) as number | null) ?? -1;
        this.sizeDecimals[i] = (sd.getItem(r) as number | null) ?? -1;
        this.hashed[i] = hashed.getItem(r) ? 1 : 0;
        const f = fields.getItem(r) as string | null;
        this.fields[i] = f === null ? -1 : this.fieldId(f);
        const text = texts.getItem(r) as string | null;
        if (text !== null) this.levelTexts.set(i, text);
        const h = hash.getItem(r) as string | null;
        if (h !== null) this.venueHashes.set(i, h);
        this.at[i] = offset;
        const values = readDoubles(ladders, r);
        this.levels.set(values, offset);
        offset += values.length;
      }
    }
  }

  get length(): number {
    return this.ts.length;
  }

  get bytes(): number {
    return this.levels.byteLength + this.ts.length * 43 + (this.levelTexts.size + this.venueHashes.size) * 120;
  }

  private fieldId(text: string): number {
    let id = this.fieldIndex.get(text);
    if (id === undefined) {
      id = this.fieldTexts.push(text) - 1;
      this.fieldIndex.set(text, id);
    }
    return id;
  }

  /** Row i's hashed fields as kept (`hash_fields`), or null. */
  fieldsOf(i: number): string | null {
    const f = this.fields[i];
    return f < 0 ? null : this.fieldTexts[f];
  }

  /** A removed level's size ("0") as row i writes sizes ("0.00" where they have two decimals). */
  zeroSize(i: number): string {
    const d = this.levelTexts.size && this.levelTexts.has(i) ? -1 : this.sizeDecimals[i];
    return d < 0 ? '0' : numberText(0, d);
  }

  /**
   * The k-th number of row i's ladders (bid prices, bid sizes, ask prices, ask sizes, as `at[i]`
   * lays them out) as the venue wrote it.
   */
  text(i: number, k: number): string {
    const whole = this.levelTexts.size ? this.levelTexts.get(i) : undefined;
    if (whole !== undefined) {
      let flat = this.parsedTexts.get(i);
      if (!flat) this.parsedTexts.set(i, (flat = (JSON.parse(whole) as string[][]).flat()));
      return flat[k];
    }
    const b = this.bids[i];
    const price = k < b || (k >= 2 * b && k < 2 * b + this.asks[i]);
    const decimals = price ? this.priceDecimals[i] : this.sizeDecimals[i];
    const value = this.levels[this.at[i] + k];
    // A market writes few distinct numbers (prices are ticks, sizes repeat), each many times.
    const memo = (this.numberTexts[decimals + 1] ??= new Map());
    let written = memo.get(value);
    if (written === undefined) {
      written = numberText(value, decimals < 0 ? null : decimals);
      if (memo.size < NUMBER_TEXTS) memo.set(value, written);
    }
    return written;
  }

  /** Row i as a book: views of its ladders, no copy. */
  row(i: number): TapeBook {
    const at = this.at[i];
    const b = this.bids[i];
    const a = this.asks[i];
    const l = this.levels;
    return {
      ts: this.ts[i],
      outcome: this.outcome[i],
      bidPrices: l.subarray(at, at + b),
      bidSizes: l.subarray(at + b, at + 2 * b),
      askPrices: l.subarray(at + 2 * b, at + 2 * b + a),
      askSizes: l.subarray(at + 2 * b + a, at + 2 * (a + b)),
    };
  }

  /** The first row whose `ts` is at or after `t`. */
  lowerBound(t: number): number {
    return firstAt(this.ts.length, (i) => this.ts[i], t);
  }

  /** The book each outcome held at `t` (its newest row before it), at most `outcomes` rows, oldest first. */
  heldAt(t: number, outcomes: number): number[] {
    const held = new Map<number, number>();
    for (let i = this.lowerBound(t) - 1; i >= 0 && held.size < outcomes; i--) if (!held.has(this.outcome[i])) held.set(this.outcome[i], i);
    return [...held.values()].sort((a, b) => a - b);
  }
}

/** A tape's rendered messages by key (see PolymarketWalk): a map while rendering, a replay copy once written. */
export interface RenderedMessages {
  get(key: number): string | undefined;
  set(key: number, text: string): void;
  readonly size: number;
}

export interface TapeTrade {
  ts: number;
  outcome: number;
  price: number;
  size: number | null;
  side: string | null;
  feeRateBps: number | null;
  transactionHash: string | null;
  /** How the venue wrote the price and size (numbertext.ts), null for the shortest form. */
  priceDecimals: number | null;
  sizeDecimals: number | null;
}

export interface TapeGap {
  dataset: 'books' | 'trades';
  from: number;
  /** Infinity while the gap is open. */
  to: number;
  reason: string;
}

/** Where finished markets' tapes are read from already rendered (replay/copy.ts), null when not there yet. */
export interface ReplayCopyStore {
  tape(venue: Venue, m: StoredMarket, now: number): Promise<MarketTape | null>;
}

export interface MarketTape {
  market: StoredMarket;
  books: TapeBooks;
  /** Trades the venue's stream sent (never a REST last-trade price). */
  trades: TapeTrade[];
  /** The tick size from each market version on: a change is the venue's `tick_size_change`. */
  ticks: { ts: number; tick: number }[];
  gaps: TapeGap[];
  /** What the cache charges for this tape (rendered messages add to it as they are made). */
  bytes: number;
  /** Messages rendered from this tape, kept for the next replay of it (by the protocol's renderer). */
  rendered: RenderedMessages;
  /**
   * Read from a replay copy: every message is rendered, and ladders are inflated only for the rows
   * a walk starts from (`TapeBooks.ensure`).
   */
  copied?: boolean;
}

const numberOrNull = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));

/**
 * Capture subscribes to a market a minute before its window opens (STREAM_LEAD_MS), and the venue
 * streams its book then: a replay carries those books too (the REST routes start at the window), so
 * it reads from five minutes before the open. An hour before (what it read first) opened the
 * previous hour's files for most markets, for nothing.
 */
export const PRE_OPEN_MS = 5 * 60_000;

/** The hours a market's tape is read from. */
export function tapeSpan(dataset: 'books' | 'trades', m: StoredMarket) {
  return planPartitions(dataset, { ...m, start_time: m.start_time - PRE_OPEN_MS }, null, null);
}

/**
 * A tape's book rows with the four ladders as one list (bid prices, bid sizes, ask prices, ask
 * sizes) and the two lengths: one list to copy per row instead of four (each list's entry costs
 * two BigInt reads in the binding), which halved a tape's build.
 */
export const TAPE_BOOK_SELECT =
  'epoch_ms(ts)::DOUBLE AS ts, outcome_index, list_concat(bid_prices, bid_sizes, ask_prices, ask_sizes) AS ladders, ' +
  'len(bid_prices)::INTEGER AS bids, len(ask_prices)::INTEGER AS asks, epoch_ms(exchange_ts)::DOUBLE AS exchange_ts, ' +
  'price_decimals::INTEGER AS price_decimals, size_decimals::INTEGER AS size_decimals, level_texts, hash_fields, venue_hash, ' +
  'hash_check IS NOT NULL AS hashed';
export const BOOK_TAPE_COLUMNS = [
  'ts',
  'market_id',
  'outcome_index',
  'bid_prices',
  'bid_sizes',
  'ask_prices',
  'ask_sizes',
  'exchange_ts',
  'price_decimals',
  'size_decimals',
  'level_texts',
  'hash_fields',
  'venue_hash',
  'hash_check',
];
/** Only what a tape uses is read (the lake's files hold more columns). */
const TAPE_COLUMNS = {
  trades: 'ts market_id outcome_index price size side fee_rate_bps transaction_hash source price_decimals size_decimals'.split(' '),
  markets: ['ts', 'market_id', 'tick_size'],
  books: BOOK_TAPE_COLUMNS,
};

/**
 * What a finished market's tape is read from (its books' and trades' rows as sealed), or null while
 * it may still change: not over, capture still holding it, or rows of it in the spool. Capture seals
 * a market's rows when it is over (Spool.finish), so this is known a few seconds after its end, not
 * its hour's; it stays the same through a compaction or a migration of its files.
 */
export function settledRows(lake: LakeReader, venue: Venue, m: StoredMarket, now: number): string | null {
  if (m.end_time > now || lake.heldUntil(venue, m.market_id) !== null) return null;
  const books = tapeSpan('books', m).partitions;
  const trades = tapeSpan('trades', m).partitions;
  if (lake.spooled([...books, ...trades], m.market_id)) return null;
  const rows = lake.marketSignature(books, m.market_id);
  return rows === '' ? null : `${rows}${lake.marketSignature(trades, m.market_id)}`;
}

/** The market's books and trades gaps from its tape's start on. */
export function tapeGaps(lake: LakeReader, venue: Venue, m: StoredMarket): TapeGap[] {
  return lake
    .gaps({ venue, market_id: m.market_id }, tapeSpan('books', m).from, Infinity)
    .filter((g) => g.market_id !== null && (g.dataset === 'books' || g.dataset === 'trades'))
    .map((g) => ({ dataset: g.dataset as 'books' | 'trades', from: g.from_ts, to: g.to_ts, reason: g.reason }));
}

/** Reads a market's tape from the lake: sealed files and spool parts of the hours it spans. */
export async function loadTape(lake: LakeReader, venue: Venue, m: StoredMarket): Promise<MarketTape> {
  const span = tapeSpan('books', m);
  const params = { market_id: m.market_id, from: span.from, to: span.to };
  const range = `market_id = $market_id AND ts >= epoch_ms($from::BIGINT) AND ts < epoch_ms($to::BIGINT)`;
  const read = async (
    partitions: Partition[],
    dataset: 'books' | 'trades' | 'markets',
    select: string,
    where: string,
    bound: Params = params,
  ) => {
    const rel = relation(dataset, await lake.files(partitions, dataset === 'markets' ? undefined : m.market_id), TAPE_COLUMNS[dataset]);
    const order = dataset === 'markets' ? 'ts' : 'ts, outcome_index';
    return rel ? lake.duck.rows(`SELECT ${select} FROM (${rel}) WHERE ${where} ORDER BY ${order}`, bound) : [];
  };
  const tradeSpan = tapeSpan('trades', m).partitions;
  const booksOf = async () => {
    const rel = relation('books', await lake.files(span.partitions, m.market_id), BOOK_TAPE_COLUMNS);
    const select = TAPE_BOOK_SELECT;
    return new TapeBooks(
      rel ? await lake.duck.chunks(`SELECT ${select} FROM (${rel}) WHERE ${range} ORDER BY ts, outcome_index`, params) : [],
    );
  };
  const [books, tradeRows, versions] = await Promise.all([
    booksOf(),
    read(
      tradeSpan,
      'trades',
      'epoch_ms(ts)::DOUBLE AS ts, outcome_index, price, size, side, fee_rate_bps, transaction_hash, price_decimals, size_decimals',
      `${range} AND source = 'stream'`,
    ),
    read(
      [partitionOf('markets', venue, m.coin, m.window, m.start_time)],
      'markets',
      'epoch_ms(ts)::DOUBLE AS ts, tick_size',
      'market_id = $market_id',
      { market_id: m.market_id },
    ),
  ]);
  const trades = tradeRows.map((r: JsonRow) => ({
    ts: Number(r.ts),
    outcome: Number(r.outcome_index),
    price: Number(r.price),
    size: numberOrNull(r.size),
    side: typeof r.side === 'string' ? r.side : null,
    feeRateBps: numberOrNull(r.fee_rate_bps),
    transactionHash: typeof r.transaction_hash === 'string' ? r.transaction_hash : null,
    priceDecimals: numberOrNull(r.price_decimals),
    sizeDecimals: numberOrNull(r.size_decimals),
  }));
  const ticks: { ts: number; tick: number }[] = [];
  for (const r of versions) {
    const tick = numberOrNull(r.tick_size);
    if (tick !== null && tick > 0 && ticks.at(-1)?.tick !== tick) ticks.push({ ts: Number(r.ts), tick });
  }
  const streamed = streamedTicks(books);
  // The books' hashed fields say when the stream moved the tick; a market version says it only when a poll saw it.
  if (streamed.length) ticks.splice(1, ticks.length - 1, ...streamed.filter((v) => !ticks.length || v.ts > ticks[0].ts));
  const gaps = tapeGaps(lake, venue, m);
  return {
    market: m,
    books,
    trades,
    ticks,
    gaps,
    bytes: 200 + books.bytes + trades.length * 150,
    rendered: new Map(),
  };
}

/**
 * The tick each book row was hashed with (its `hash_fields`), where it moved: the first row with a
 * new tick, at its instant. Rows before the lake kept the fields say nothing (none found: []).
 */
function streamedTicks(books: TapeBooks): { ts: number; tick: number }[] {
  const tickOf = new Map<number, number | null>();
  const out: { ts: number; tick: number }[] = [];
  let last: number | null = null;
  for (let i = 0; i < books.length; i++) {
    const f = books.fields[i];
    if (f < 0) continue;
    let tick = tickOf.get(f);
    if (tick === undefined) {
      const text = (JSON.parse(books.fieldTexts[f]) as { tick_size?: unknown }).tick_size;
      tick = typeof text === 'string' && Number(text) > 0 ? Number(text) : null;
      tickOf.set(f, tick);
    }
    if (tick === null || tick === last) continue;
    if (last !== null) out.push({ ts: books.ts[i], tick });
    last = tick;
  }
  return out;
}

/**
 * Tapes of markets that are over and wholly sealed, kept while their files stay the same (a
 * compaction or backfill makes a new one), least recently used out first past `maxBytes`; replays
 * asking for one being loaded share the load. A market still recording is read for each replay.
 */
export class TapeCache {
  private readonly entries = new Map<string, { signature: string; tape: MarketTape }>();
  private readonly loading = new Map<string, Promise<MarketTape>>();
  private used = 0;
  hits = 0;
  misses = 0;

  /** `copies`: where a finished market's rendered messages are read from, and written to when missing. */
  constructor(
    readonly maxBytes: number,
    private readonly copies: ReplayCopyStore | null = null,
  ) {}

  async get(lake: LakeReader, venue: Venue, m: StoredMarket, now: number): Promise<MarketTape> {
    const settled = settledRows(lake, venue, m, now);
    // Kept only when nothing more can come: the market is over and its rows are all in sealed files.
    const keep = this.maxBytes > 0 && settled !== null;
    // Gaps and the market's version are part of a tape: a tape kept is of those it was read with.
    const signature = keep ? `${settled}${m.ts}|${JSON.stringify(tapeGaps(lake, venue, m))}` : '';
    const key = marketKey(venue, m.market_id);
    const hit = keep ? this.entries.get(key) : undefined;
    if (hit && hit.signature === signature) {
      this.hits++;
      this.entries.delete(key);
      this.entries.set(key, hit);
      return hit.tape;
    }
    // Replays asking at once share one read, kept or not.
    const flight = `${key}:${signature}:${keep}`;
    let load = this.loading.get(flight);
    if (load) {
      this.hits++;
      return load;
    }
    this.misses++;
    load = this.read(lake, venue, m, now).finally(() => this.loading.delete(flight));
    this.loading.set(flight, load);
    if (keep)
      void load.then(
        (tape) => this.keep(key, signature, tape),
        () => undefined,
      );
    return load;
  }

  /** A finished market's copy when it has one (else written for the next replay), or its tape from the lake. */
  private async read(lake: LakeReader, venue: Venue, m: StoredMarket, now: number): Promise<MarketTape> {
    const copied = this.copies ? await this.copies.tape(venue, m, now) : null;
    return copied ?? loadTape(lake, venue, m);
  }

  /** A tape's rendered messages grew by `bytes`: charged to the budget. */
  charge(tape: MarketTape, bytes: number): void {
    tape.bytes += bytes;
    const key = marketKey(tape.market.venue, tape.market.market_id);
    if (this.entries.get(key)?.tape === tape) {
      this.used += bytes;
      this.evict();
    }
  }

  get usedBytes(): number {
    return this.used;
  }

  private keep(key: string, signature: string, tape: MarketTape): void {
    const old = this.entries.get(key);
    if (old) this.used -= old.tape.bytes;
    this.entries.delete(key);
    if (tape.bytes > this.maxBytes) return;
    this.entries.set(key, { signature, tape });
    this.used += tape.bytes;
    this.evict();
  }

  private evict(): void {
    for (const [key, e] of this.entries) {
      if (this.used <= this.maxBytes) return;
      this.entries.delete(key);
      this.used -= e.tape.bytes;
    }
  }
}
