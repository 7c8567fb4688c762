// The CLOB's book shapes shared by its REST and WebSocket answers, and the book hash a recorder
// recomputes to prove its copy of a book equals the venue's.
import { createHash } from 'node:crypto';

export interface ClobLevel {
  price: string;
  size: string;
}

export interface ClobBookSummary {
  market: string;
  asset_id: string;
  timestamp: string;
  bids: ClobLevel[];
  asks: ClobLevel[];
}

/**
 * SHA-1 over the summary's identity, time and levels in the venue's order (bids ascending, asks
 * descending), as the levels' strings were sent. The stand-in signs its books this way; a venue
 * whose hashes a recorder cannot reproduce is checked by REST comparisons alone (see capture/stream).
 */
export function clobBookHash(b: ClobBookSummary): string {
  const canonical = JSON.stringify({ market: b.market, asset_id: b.asset_id, timestamp: b.timestamp, bids: b.bids, asks: b.asks });
  return createHash('sha1').update(canonical).digest('hex');
}

export interface ClobBookMessage extends ClobBookSummary {
  event_type: 'book';
  hash: string;
}

export interface ClobPriceChange {
  asset_id: string;
  price: string;
  size: string;
  side: 'BUY' | 'SELL';
  hash?: string;
  best_bid?: string;
  best_ask?: string;
}

export interface ClobPriceChangeMessage {
  event_type: 'price_change';
  market: string;
  timestamp: string;
  price_changes: ClobPriceChange[];
}

export interface ClobLastTradeMessage {
  event_type: 'last_trade_price';
  asset_id: string;
  market: string;
  price: string;
  timestamp: string;
}

export type ClobMarketMessage =
  ClobBookMessage | ClobPriceChangeMessage | ClobLastTradeMessage | { event_type: 'tick_size_change' | string };

/**
 * A recorder's copy of one token's book, kept as the venue's level strings so its hash can be
 * recomputed exactly. Levels are keyed by numeric price: "0.5" and "0.50" are one level.
 */
export class LocalBook {
  private bids = new Map<number, ClobLevel>();
  private asks = new Map<number, ClobLevel>();
  /** The venue's time of the newest snapshot or change applied. */
  ts = 0;

  constructor(
    public market: string,
    readonly assetId: string,
  ) {}

  reset(levels: { market?: string; bids: ClobLevel[]; asks: ClobLevel[] }, ts: number): void {
    if (levels.market) this.market = levels.market;
    this.bids = new Map(levels.bids.map((l) => [Number(l.price), { price: l.price, size: l.size }]));
    this.asks = new Map(levels.asks.map((l) => [Number(l.price), { price: l.price, size: l.size }]));
    this.ts = ts;
  }

  /** Applies a level's new aggregate size; false when the book already held it (a repeated message). */
  apply(c: Pick<ClobPriceChange, 'price' | 'size' | 'side'>, ts: number): boolean {
    const side = c.side === 'BUY' ? this.bids : this.asks;
    const price = Number(c.price);
    const size = Number(c.size);
    const old = side.get(price);
    if (size === 0 ? !old : old !== undefined && Number(old.size) === size) return false;
    if (size === 0) side.delete(price);
    else side.set(price, { price: c.price, size: c.size });
    this.ts = ts;
    return true;
  }

  /** The venue's summary of this book at `timestamp` (bids ascending, asks descending). */
  summary(timestamp: string): ClobBookSummary {
    const sorted = (m: Map<number, ClobLevel>, dir: 1 | -1) => [...m].sort((a, b) => dir * (a[0] - b[0])).map(([, l]) => l);
    return { market: this.market, asset_id: this.assetId, timestamp, bids: sorted(this.bids, 1), asks: sorted(this.asks, -1) };
  }

  hash(timestamp: string): string {
    return clobBookHash(this.summary(timestamp));
  }

  /** Ladders best first, as the lake stores them. */
  ladders(): { bid_prices: number[]; bid_sizes: number[]; ask_prices: number[]; ask_sizes: number[] } {
    const bids = [...this.bids].sort((a, b) => b[0] - a[0]);
    const asks = [...this.asks].sort((a, b) => a[0] - b[0]);
    return {
      bid_prices: bids.map(([p]) => p),
      bid_sizes: bids.map(([, l]) => Number(l.size)),
      ask_prices: asks.map(([p]) => p),
      ask_sizes: asks.map(([, l]) => Number(l.size)),
    };
  }
}
