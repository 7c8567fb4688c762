// A market's recorded history as a replay reads it: every book row, the venue's trades, its tick
// versions and its gaps, loaded once per market (three bound statements) and shared by every
// replay that subscribes to it while its files stay the same.
import type { Venue } from '../config.js';
import type { JsonRow, Params } from '../lake/duckdb.js';
import { type Partition, partitionOf } from '../lake/layout.js';
import type { LakeReader, StoredMarket } from '../lake/reader.js';
import { relation } from '../lake/sql.js';
import { planPartitions } from '../api/plan.js';

/** One outcome's book as recorded, ladders best level first (the lake's order). */
export interface TapeBook {
  ts: number;
  outcome: number;
  bidPrices: number[];
  bidSizes: number[];
  askPrices: number[];
  askSizes: number[];
}

export interface TapeTrade {
  ts: number;
  outcome: number;
  price: number;
  size: number | null;
  side: string | null;
  feeRateBps: number | null;
  transactionHash: string | null;
}

export interface TapeGap {
  dataset: 'books' | 'trades';
  from: number;
  /** Infinity while the gap is open. */
  to: number;
  reason: string;
}

export interface MarketTape {
  market: StoredMarket;
  books: TapeBook[];
  /** Trades the venue's stream sent (never a REST last-trade price). */
  trades: TapeTrade[];
  /** The tick size from each market version on: a change is the venue's `tick_size_change`. */
  ticks: { ts: number; tick: number }[];
  gaps: TapeGap[];
  /** What the cache charges for this tape (rendered messages add to it as they are made). */
  bytes: number;
  /** Messages rendered from this tape, kept for the next replay of it (by the protocol's renderer). */
  rendered: Map<number, string>;
}

const numbers = (v: unknown): number[] => (Array.isArray(v) ? v.map(Number) : []);
const numberOrNull = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));

/**
 * Capture subscribes to a market a minute before its window opens, and the venue streams its book
 * then: a replay carries those books too (the REST routes start at the window), so it reads from
 * an hour before the open.
 */
const PRE_OPEN_MS = 3_600_000;

/** The hours a market's tape is read from. */
function tapeSpan(dataset: 'books' | 'trades', m: StoredMarket) {
  return planPartitions(dataset, { ...m, start_time: m.start_time - PRE_OPEN_MS }, null, null);
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
    const rel = relation(dataset, await lake.files(partitions));
    const order = dataset === 'markets' ? 'ts' : 'ts, outcome_index';
    return rel ? lake.duck.rows(`SELECT ${select} FROM (${rel}) WHERE ${where} ORDER BY ${order}`, bound) : [];
  };
  const tradeSpan = tapeSpan('trades', m).partitions;
  const [bookRows, tradeRows, versions] = await Promise.all([
    read(span.partitions, 'books', 'epoch_ms(ts)::DOUBLE AS ts, outcome_index, bid_prices, bid_sizes, ask_prices, ask_sizes', range),
    read(
      tradeSpan,
      'trades',
      'epoch_ms(ts)::DOUBLE AS ts, outcome_index, price, size, side, fee_rate_bps, transaction_hash',
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
  const books = bookRows.map((r: JsonRow) => ({
    ts: Number(r.ts),
    outcome: Number(r.outcome_index),
    bidPrices: numbers(r.bid_prices),
    bidSizes: numbers(r.bid_sizes),
    askPrices: numbers(r.ask_prices),
    askSizes: numbers(r.ask_sizes),
  }));
  const trades = tradeRows.map((r: JsonRow) => ({
    ts: Number(r.ts),
    outcome: Number(r.outcome_index),
    price: Number(r.price),
    size: numberOrNull(r.size),
    side: typeof r.side === 'string' ? r.side : null,
    feeRateBps: numberOrNull(r.fee_rate_bps),
    transactionHash: typeof r.transaction_hash === 'string' ? r.transaction_hash : null,
  }));
  const ticks: { ts: number; tick: number }[] = [];
  for (const r of versions) {
    const tick = numberOrNull(r.tick_size);
    if (tick !== null && tick > 0 && ticks.at(-1)?.tick !== tick) ticks.push({ ts: Number(r.ts), tick });
  }
  const gaps = lake
    .gaps({ venue, market_id: m.market_id }, span.from, Infinity)
    .filter((g) => g.market_id !== null && (g.dataset === 'books' || g.dataset === 'trades'))
    .map((g) => ({ dataset: g.dataset as 'books' | 'trades', from: g.from_ts, to: g.to_ts, reason: g.reason }));
  const levels = books.reduce((n, b) => n + b.bidPrices.length + b.askPrices.length, 0);
  return {
    market: m,
    books,
    trades,
    ticks,
    gaps,
    bytes: 200 + books.length * 120 + levels * 16 + trades.length * 150,
    rendered: new Map(),
  };
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

  constructor(readonly maxBytes: number) {}

  async get(lake: LakeReader, venue: Venue, m: StoredMarket, now: number): Promise<MarketTape> {
    const partitions = tapeSpan('books', m).partitions;
    const signature = lake.signature(partitions);
    const sealed = m.end_time + 60_000 < now && signature !== '' && !lake.spooled(partitions);
    if (!sealed || this.maxBytes === 0) {
      this.misses++;
      return loadTape(lake, venue, m);
    }
    const key = `${venue}:${m.market_id}`;
    const hit = this.entries.get(key);
    if (hit && hit.signature === signature) {
      this.hits++;
      this.entries.delete(key);
      this.entries.set(key, hit);
      return hit.tape;
    }
    const flight = `${key}:${signature}`;
    let load = this.loading.get(flight);
    if (!load) {
      this.misses++;
      load = loadTape(lake, venue, m).finally(() => this.loading.delete(flight));
      this.loading.set(flight, load);
      void load.then(
        (tape) => this.keep(key, signature, tape),
        () => undefined,
      );
    } else this.hits++;
    return load;
  }

  /** A tape's rendered messages grew by `bytes`: charged to the budget. */
  charge(tape: MarketTape, bytes: number): void {
    tape.bytes += bytes;
    const key = `${tape.market.venue}:${tape.market.market_id}`;
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
