// The normalized records of CONTRACT.md. Adapters produce them; nothing past an adapter
// sees an upstream shape. Times are epoch milliseconds (UTC).
import type { Venue, Window } from './config.js';

export type MarketStatus = 'upcoming' | 'open' | 'closed' | 'resolved' | 'cancelled';
export type Resolution = 'pending' | 'resolved' | 'invalid';

export interface Outcome {
  index: number;
  label: string;
  token_id: string;
}

export interface Market {
  market_id: string;
  topic_id: string | null;
  venue: Venue;
  slug: string | null;
  title: string | null;
  coin: string;
  window: Window;
  start_time: number;
  end_time: number;
  created_time: number | null;
  resolved_time: number | null;
  status: MarketStatus;
  resolution: Resolution;
  winning_outcome_index: number | null;
  condition_id: string | null;
  question_id: string | null;
  oracle: string | null;
  outcomes: Outcome[];
  volume: number | null;
  liquidity: number | null;
  participant_count: number | null;
  chain_id: number | null;
  chain_name: string | null;
  exchange_address: string | null;
  exchange_kind: string | null;
  collateral: string | null;
  fee_rate_bps: number | null;
  tick_size: number | null;
  reference_price_start: number | null;
  reference_price_end: number | null;
}

/** One outcome token's ladders, best level first on both sides. */
export interface Book {
  market_id: string;
  token_id: string;
  outcome_index: number;
  outcome: string;
  exchange_ts: number | null;
  bid_prices: number[];
  bid_sizes: number[];
  ask_prices: number[];
  ask_sizes: number[];
  /**
   * What vouched for the book when it was recorded (strongest first): `snapshot`, the venue's own
   * whole book (a stream snapshot, a push, a REST answer); `hash`, rebuilt from changes and the
   * venue's hash of it reproduced; `rest`, rebuilt and equal to a REST book of the same instant;
   * `best_bid_ask`, rebuilt and only its best levels were the venue's; `none`, nothing checked it.
   * Absent (null in the lake) for books recorded before checks were kept.
   */
  verified_by?: VerifiedBy | null;
  /**
   * What the venue's book hash said of this book (Polymarket's channel sends one per change and
   * book): `match`, reproduced from the copy; `explained`, reproduced only with a hashed field other
   * than the copy's at that instant (the last trade price, as a rule, sent ~100 ms after the book
   * that hashed it); `mismatch`, every hashed field known and not reproduced; `unverifiable`, a hash
   * was sent but a field it covers was not known yet (REST's minimum size and neg-risk). Null: no
   * hash to check (the wallet venue sends none; a REST fallback; books recorded before 2026-11-27).
   */
  hash_check?: HashCheck | null;
  /**
   * How the venue wrote the levels' numbers (numbertext.ts): the decimals of every price and of
   * every size, null for the shortest form; `level_texts` the texts themselves where neither code
   * says them. Absent (null) for books recorded before 2026-11-28: their text is the shortest form.
   */
  price_decimals?: number | null;
  size_decimals?: number | null;
  level_texts?: string | null;
  /**
   * The fields the venue's book hash covers beside the levels, as the venue wrote them and as the
   * copy knew them for this book (Polymarket: a JSON object of `min_order_size`, `tick_size`,
   * `neg_risk`, `last_trade_price`, the known ones in that order). Null: none known, or no hash.
   */
  hash_fields?: string | null;
  /**
   * The hash the venue sent with this book, kept only where the venue's formula over the row
   * (`venueHashOf` in venues/polymarket/book.ts: its time, texts and `hash_fields`) does not give
   * it back; null where it does, or where the venue sent none (`hash_check` null).
   */
  venue_hash?: string | null;
}

/** A market's key wherever markets of both venues share a map (catalogue, latest books, caches, heartbeats, the feed): `<venue>:<market_id>`. */
export function marketKey(venue: string, marketId: string): string {
  return `${venue}:${marketId}`;
}

export const VERIFICATIONS = ['snapshot', 'hash', 'rest', 'best_bid_ask', 'none'] as const;
export type VerifiedBy = (typeof VERIFICATIONS)[number];

export const HASH_CHECKS = ['match', 'explained', 'mismatch', 'unverifiable'] as const;
export type HashCheck = (typeof HASH_CHECKS)[number];

/** The newest book of a market: every outcome captured at `ts`. */
export interface LatestBook {
  ts: number;
  books: Book[];
}

export interface BookRow extends Book {
  ts: number;
  recv_ts: number;
}

/** Books as lake rows captured at `ts`; fields named, not spread, since streamed capture makes two per change. */
export function bookRows(ts: number, recvTs: number, books: readonly Book[]): BookRow[] {
  return books.map((b) => ({
    ts,
    recv_ts: recvTs,
    market_id: b.market_id,
    token_id: b.token_id,
    outcome_index: b.outcome_index,
    outcome: b.outcome,
    exchange_ts: b.exchange_ts,
    bid_prices: b.bid_prices,
    bid_sizes: b.bid_sizes,
    ask_prices: b.ask_prices,
    ask_sizes: b.ask_sizes,
    verified_by: b.verified_by ?? null,
    hash_check: b.hash_check ?? null,
    price_decimals: b.price_decimals ?? null,
    size_decimals: b.size_decimals ?? null,
    level_texts: b.level_texts ?? null,
    hash_fields: b.hash_fields ?? null,
    venue_hash: b.venue_hash ?? null,
  }));
}

export interface MetricRow {
  ts: number;
  market_id: string;
  token_id: string;
  outcome_index: number;
  outcome: string;
  chance: number | null;
  price: number | null;
  last_trade: number | null;
  recv_ts: number | null;
}

/** A market's quotes as lake rows at `ts`: one per outcome the market has. */
export function metricRows(
  m: Market,
  ts: number,
  recvTs: number,
  quotes: readonly { outcome_index: number; chance: number | null; price: number | null; last_trade: number | null }[],
): MetricRow[] {
  const rows: MetricRow[] = [];
  for (const q of quotes) {
    const outcome = m.outcomes.find((o) => o.index === q.outcome_index);
    if (!outcome) continue;
    rows.push({
      ts,
      market_id: m.market_id,
      token_id: outcome.token_id,
      outcome_index: q.outcome_index,
      outcome: outcome.label,
      chance: q.chance,
      price: q.price,
      last_trade: q.last_trade,
      recv_ts: recvTs,
    });
  }
  return rows;
}

/** What the venue sent of a trade: a trade event, or only a last-trade price that changed over REST. */
export type TradeSource = 'stream' | 'rest_last_trade';

/**
 * A trade of one outcome token. `ts` is the venue's time of the trade where it sent one, else
 * the time it was received; a REST last-trade price has no size, side or hash, and is no fill.
 */
export interface TradeRow {
  ts: number;
  market_id: string;
  token_id: string;
  outcome_index: number;
  outcome: string;
  price: number;
  size: number | null;
  side: 'buy' | 'sell' | null;
  fee_rate_bps: number | null;
  transaction_hash: string | null;
  source: TradeSource;
  exchange_ts: number | null;
  recv_ts: number;
  /** How the venue wrote the price and size (numbertext.ts `textForm`); absent before 2026-11-28 (the shortest form). */
  price_decimals?: number | null;
  size_decimals?: number | null;
}

export interface MarketRow extends Market {
  /** When this version of the record was captured. */
  ts: number;
}

/** A span in which capture should have recorded and did not. `market_id` null: the whole series. */
export interface GapRow {
  market_id: string | null;
  /** A `reference` gap's `market_id` is its feed, `<source>:<symbol>` (`chainlink:btc/usd`). */
  dataset: 'books' | 'metrics' | 'markets' | 'trades' | 'reference';
  from_ts: number;
  to_ts: number;
  reason: string;
  detail: string | null;
  failures: number;
}

/** Every dataset of the lake, in the order listings name them. */
export const DATASETS = ['markets', 'books', 'metrics', 'gaps', 'trades', 'reference'] as const;
export type Dataset = (typeof DATASETS)[number];

export interface DatasetRows {
  markets: MarketRow;
  books: BookRow;
  metrics: MetricRow;
  gaps: GapRow;
  trades: TradeRow;
  reference: ReferenceRow;
}

/** Where a reference price comes from: the oracle the markets resolve on, or the exchange beside it. */
export const REFERENCE_SOURCES = ['chainlink', 'binance'] as const;
export type ReferenceSource = (typeof REFERENCE_SOURCES)[number];

/**
 * One observation of a coin's price as the venue's price socket relayed it. `ts` is the
 * observation's own time (what a window's open and close are compared on), `sent_ts` when the
 * socket sent it, `recv_ts` when capture received it.
 */
export interface ReferenceRow {
  ts: number;
  source: ReferenceSource;
  symbol: string;
  price: number;
  sent_ts: number;
  recv_ts: number;
}

/** A coin's symbol on a source, as the venue's price socket writes it (UPSTREAMS.md E): `btc/usd`, `btcusdt`. */
export function referenceSymbol(source: ReferenceSource, coin: string): string {
  return source === 'chainlink' ? `${coin}/usd` : `${coin}usdt`;
}

/** The venue whose price socket relays the reference prices; the lake keeps them under it, for every window. */
export const REFERENCE_VENUE = 'polymarket' satisfies Venue;

/** A reference feed, as gaps name it: `<source>:<symbol>`. */
export const referenceFeed = (source: ReferenceSource, symbol: string): string => `${source}:${symbol}`;

/** The market as resolved by its venue at `ts` (the venue's own time), the outcome at `winner` winning. */
export function resolvedAt(m: Market, winner: number, ts: number): Market {
  return { ...m, resolved_time: ts, status: 'resolved', resolution: 'resolved', winning_outcome_index: winner };
}

/**
 * A catalogue version, keeping the resolution a stream announced (`known`) until the catalogue
 * carries a time of its own: its winner stands where it says the market resolved, the stream's where not yet.
 */
export function withStreamFacts(fresh: Market, known: Market | undefined): Market {
  if (!known || known.resolved_time === null || fresh.resolved_time !== null) return fresh;
  if (fresh.resolution === 'resolved') return { ...fresh, resolved_time: known.resolved_time };
  const { resolved_time, status, resolution, winning_outcome_index } = known;
  return { ...fresh, resolved_time, status, resolution, winning_outcome_index };
}

/** A market record from what is known of it; every other field null (synthetic lakes, benchmarks). */
export function bareMarket(
  known: Pick<Market, 'market_id' | 'venue' | 'coin' | 'window' | 'start_time' | 'end_time' | 'status' | 'outcomes'> & Partial<Market>,
): Market {
  return {
    topic_id: null,
    slug: null,
    title: null,
    created_time: null,
    resolved_time: null,
    resolution: 'pending',
    winning_outcome_index: null,
    condition_id: null,
    question_id: null,
    oracle: null,
    volume: null,
    liquidity: null,
    participant_count: null,
    chain_id: null,
    chain_name: null,
    exchange_address: null,
    exchange_kind: null,
    collateral: null,
    fee_rate_bps: null,
    tick_size: null,
    reference_price_start: null,
    reference_price_end: null,
    ...known,
  };
}

export function marketLakeRow(market: Market, ts: number): Record<string, unknown> {
  const { outcomes, venue: _venue, coin: _coin, window: _window, ...rest } = market;
  return { ts, ...rest, outcome_labels: outcomes.map((o) => o.label), outcome_token_ids: outcomes.map((o) => o.token_id) };
}

type Ladders = Pick<Book, 'bid_prices' | 'bid_sizes' | 'ask_prices' | 'ask_sizes'>;

/**
 * The JSON of a book's four ladder arrays, kept per array set. Streamed capture writes a row per
 * outcome on every change and the unchanged outcomes carry the very same arrays as their previous
 * row, and a streamed book already holds each level's text: neither is formatted twice.
 */
const ladderTexts = new WeakMap<number[], { of: number[][]; json: string; bytes?: Buffer }>();

function ladderEntry(b: Ladders): { of: number[][]; json: string; bytes?: Buffer } {
  const cached = ladderTexts.get(b.bid_prices);
  if (cached && cached.of[0] === b.bid_sizes && cached.of[1] === b.ask_prices && cached.of[2] === b.ask_sizes) return cached;
  const json = `"bid_prices":${JSON.stringify(b.bid_prices)},"bid_sizes":${JSON.stringify(b.bid_sizes)},"ask_prices":${JSON.stringify(b.ask_prices)},"ask_sizes":${JSON.stringify(b.ask_sizes)}`;
  const entry = { of: [b.bid_sizes, b.ask_prices, b.ask_sizes], json };
  ladderTexts.set(b.bid_prices, entry);
  return entry;
}

/** The ladders' JSON as UTF-8, encoded once per array set: copying bytes is what a spooled row costs then. */
export function ladderBytes(b: Ladders): Buffer {
  const entry = ladderEntry(b);
  // Numbers and key names only: ASCII, for which Latin-1 (a byte per character, no transcoding) is UTF-8.
  return (entry.bytes ??= Buffer.from(entry.json, 'latin1'));
}

/** Records the ladder JSON of arrays whose producer has their text already (it must equal what `ladderEntry` formats). */
export function primeLadderJson(b: Ladders, json: string): void {
  ladderTexts.set(b.bid_prices, { of: [b.bid_sizes, b.ask_prices, b.ask_sizes], json });
}
