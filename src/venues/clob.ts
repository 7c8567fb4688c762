// The CLOB's book shapes shared by its REST and WebSocket answers, and the book hash a recorder
// recomputes to prove its copy of a book equals the venue's.
import { createHash } from 'node:crypto';
import { primeLadderJson } from '../records.js';

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
 * A recorder's copy of one token's book, kept as the venue's level strings in the venue's order
 * (bids ascending, asks descending), so its hash is recomputed exactly without sorting. Levels
 * are matched by numeric price: "0.5" and "0.50" are one level.
 */
export class LocalBook {
  private bids: Level[] = [];
  private asks: Level[] = [];
  /** The venue's time of the newest snapshot or change applied. */
  ts = 0;
  private version = 0;
  private cached: { version: number; ladders: Ladders } | null = null;

  constructor(
    public market: string,
    readonly assetId: string,
  ) {}

  reset(levels: { market?: string; bids: ClobLevel[]; asks: ClobLevel[] }, ts: number): void {
    if (levels.market) this.market = levels.market;
    this.bids = levels.bids.map(level).sort((a, b) => a.p - b.p);
    this.asks = levels.asks.map(level).sort((a, b) => b.p - a.p);
    this.ts = ts;
    this.version++;
  }

  /** Applies a level's new aggregate size; false when the book already held it (a repeated message). */
  apply(c: Pick<ClobPriceChange, 'price' | 'size' | 'side'>, ts: number): boolean {
    const buy = c.side === 'BUY';
    const side = buy ? this.bids : this.asks;
    const p = Number(c.price);
    const size = Number(c.size);
    // Binary search in the side's order: ascending for bids, descending for asks.
    let lo = 0;
    let hi = side.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (buy ? side[mid].p < p : side[mid].p > p) lo = mid + 1;
      else hi = mid;
    }
    const found = lo < side.length && side[lo].p === p;
    if (size === 0) {
      if (!found) return false;
      side.splice(lo, 1);
    } else if (found) {
      if (side[lo].s === size) return false;
      side[lo] = level({ price: c.price, size: c.size });
    } else side.splice(lo, 0, level({ price: c.price, size: c.size }));
    this.ts = ts;
    this.version++;
    return true;
  }

  /** The venue's summary of this book at `timestamp` (bids ascending, asks descending). */
  summary(timestamp: string): ClobBookSummary {
    const plain = (l: Level) => ({ price: l.price, size: l.size });
    return { market: this.market, asset_id: this.assetId, timestamp, bids: this.bids.map(plain), asks: this.asks.map(plain) };
  }

  /** `clobBookHash(this.summary(timestamp))`, built from each level's JSON kept since it was set. */
  hash(timestamp: string): string {
    const text = `{"market":${JSON.stringify(this.market)},"asset_id":${JSON.stringify(this.assetId)},"timestamp":${JSON.stringify(timestamp)},"bids":[${this.bids.map((l) => l.json).join(',')}],"asks":[${this.asks.map((l) => l.json).join(',')}]}`;
    return createHash('sha1').update(text).digest('hex');
  }

  /** Ladders best first, as the lake stores them; the same arrays until the book changes. */
  ladders(): Ladders {
    if (this.cached?.version === this.version) return this.cached.ladders;
    const bids = [...this.bids].reverse();
    const asks = [...this.asks].reverse();
    const ladders = {
      bid_prices: bids.map((l) => l.p),
      bid_sizes: bids.map((l) => l.s),
      ask_prices: asks.map((l) => l.p),
      ask_sizes: asks.map((l) => l.s),
    };
    // Each level's number text was made when the level was set: the row's JSON is only joined here.
    const list = (levels: Level[], key: 'pj' | 'sj') => levels.map((l) => l[key]).join(',');
    primeLadderJson(
      ladders,
      `"bid_prices":[${list(bids, 'pj')}],"bid_sizes":[${list(bids, 'sj')}],"ask_prices":[${list(asks, 'pj')}],"ask_sizes":[${list(asks, 'sj')}]`,
    );
    this.cached = { version: this.version, ladders };
    return ladders;
  }
}

interface Ladders {
  bid_prices: number[];
  bid_sizes: number[];
  ask_prices: number[];
  ask_sizes: number[];
}

interface Level {
  p: number;
  s: number;
  price: string;
  size: string;
  /** The level as the hash's canonical JSON writes it. */
  json: string;
  /** Price and size as JSON numbers, for the lake's rows. */
  pj: string;
  sj: string;
}

function level(l: ClobLevel): Level {
  const p = Number(l.price);
  const s = Number(l.size);
  return {
    p,
    s,
    price: l.price,
    size: l.size,
    json: JSON.stringify({ price: l.price, size: l.size }),
    pj: JSON.stringify(p),
    sj: JSON.stringify(s),
  };
}
