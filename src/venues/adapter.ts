// What capture and backfill need from a venue. Everything returned is already normalized.
import type { Venue, Window } from '../config.js';
import type { Book, Market } from '../records.js';
import { type ClientStats, UpstreamError } from './http.js';
import { type BookTextForm, bookTextForm } from '../numbertext.js';

export interface Quote {
  outcome_index: number;
  chance: number | null;
  price: number | null;
  last_trade: number | null;
}

/**
 * A venue's own full book of one outcome token as its REST sent it (levels as strings, with its hash
 * where the venue hashes): opaque above the venue, only its recorder reads the rest (Polymarket checks
 * its streamed copy against it). Venues that stream no hashed books send none.
 */
export interface VenueBookSummary {
  readonly asset_id: string;
  readonly hash?: string;
}

export interface MarketPoll {
  books: Book[] | UpstreamError;
  /** The venue's own book summaries (levels as sent, with hashes), where a streamed copy is checked against them. */
  summaries?: VenueBookSummary[];
  quotes: Quote[] | UpstreamError;
  recvTs: number;
  /** Clock time the poll's requests went out (capture's cycle), where known. */
  sentTs?: number;
}

export interface VenueAdapter {
  readonly venue: Venue;
  /** Why a backfill can store no price history: what the venue keeps. */
  readonly historyKept: string;
  /** Markets of these coins and windows that the venue lists around `now`. */
  discover(now: number): Promise<Market[]>;
  /** Both outcome books and the quotes of each open market; failures are per market. */
  poll(markets: Market[], now: number): Promise<Map<string, MarketPoll>>;
  /** Catalogue records of windows starting in [from, to), for backfill. */
  catalogue(coin: string, window: Window, from: number, to: number, now: number): AsyncIterable<Market>;
  /** Full books of these tokens as the venue sends them, for resyncing a streamed copy at once; venues that stream only. */
  bookSummaries?(tokenIds: string[]): Promise<{ summaries: VenueBookSummary[]; recvTs: number }>;
  /** Price history the venue keeps for a market; [] where it keeps none. */
  priceHistory(market: Market): Promise<{ ts: number; outcome_index: number; price: number }[]>;
  /** Its HTTP client's counts: an attempt retried was served by the venue, and its answer never arrived. */
  readonly http?: { readonly stats: Readonly<ClientStats> };
}

/** Parses a decimal string (or number) from an upstream body exactly as the nearest double. */
export function decimal(value: unknown, field: string): number {
  if (typeof value === 'number' && Number.isFinite(value)) return value;
  if (typeof value === 'string' && /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(value.trim())) return Number(value);
  throw new UpstreamError('malformed', `${field}: expected a decimal, got ${JSON.stringify(value)?.slice(0, 40)}`);
}

export function decimalOrNull(value: unknown, field: string): number | null {
  return value === null || value === undefined || value === '' ? null : decimal(value, field);
}

export interface Level {
  price: unknown;
  size: unknown;
}

/** Ladders best first (bids descending, asks ascending), whatever order the upstream used. */
export function ladders(
  bids: unknown,
  asks: unknown,
  where: string,
): Pick<Book, 'bid_prices' | 'bid_sizes' | 'ask_prices' | 'ask_sizes'> & BookTextForm {
  const text = (v: unknown) => (typeof v === 'string' ? v.trim() : String(v));
  const side = (levels: unknown, name: string, dir: 1 | -1) => {
    if (!Array.isArray(levels)) throw new UpstreamError('malformed', `${where}: ${name} is not an array`);
    const parsed = levels.map((l: Level, i) => ({
      price: decimal(l?.price, `${where}.${name}[${i}].price`),
      size: decimal(l?.size, `${where}.${name}[${i}].size`),
      priceText: text(l?.price),
      sizeText: text(l?.size),
    }));
    parsed.sort((a, b) => dir * (a.price - b.price));
    return {
      prices: parsed.map((l) => l.price),
      sizes: parsed.map((l) => l.size),
      priceTexts: parsed.map((l) => l.priceText),
      sizeTexts: parsed.map((l) => l.sizeText),
    };
  };
  const b = side(bids, 'bids', -1);
  const a = side(asks, 'asks', 1);
  // How the venue wrote them, so a replay sends its text (numbertext.ts).
  const form = bookTextForm({ bidPrices: b.priceTexts, bidSizes: b.sizeTexts, askPrices: a.priceTexts, askSizes: a.sizeTexts });
  return { bid_prices: b.prices, bid_sizes: b.sizes, ask_prices: a.prices, ask_sizes: a.sizes, ...form };
}

export function statusByTime(now: number, start: number, end: number): 'upcoming' | 'open' | 'closed' {
  return now < start ? 'upcoming' : now < end ? 'open' : 'closed';
}

export function windowOf(durationMs: number): Window | null {
  return durationMs === 5 * 60_000 ? '5m' : durationMs === 15 * 60_000 ? '15m' : null;
}

export function asError(err: unknown): UpstreamError {
  return err instanceof UpstreamError ? err : new UpstreamError('malformed', (err as Error).message ?? String(err));
}
