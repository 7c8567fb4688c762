// The CLOB's book shapes shared by its REST and WebSocket answers, and the book hash a recorder
// recomputes to prove its copy of a book equals the venue's.
import { hash as digest } from 'node:crypto';
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
  return digest('sha1', canonical, 'hex');
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

export interface ClobTickSizeMessage {
  event_type: 'tick_size_change';
  asset_id: string;
  market: string;
  old_tick_size: string;
  new_tick_size: string;
  timestamp: string;
}

export type ClobMarketMessage =
  ClobBookMessage | ClobPriceChangeMessage | ClobLastTradeMessage | ClobTickSizeMessage | { event_type: string };

/**
 * A recorder's copy of one token's book, kept as the venue's level strings in the venue's order
 * (bids ascending, asks descending), so its hash is recomputed exactly without sorting. Levels
 * are matched by numeric price: "0.5" and "0.50" are one level.
 */
export class LocalBook {
  private bids = new Side('bids');
  private asks = new Side('asks');
  /** The venue's time of the newest snapshot or change applied. */
  ts = 0;
  private cached: { bids: number; asks: number; ladders: Ladders } | null = null;
  /** The hash text's opening, which changes only with the market. */
  private identity: { market: string; text: string } | null = null;

  constructor(
    public market: string,
    readonly assetId: string,
  ) {}

  reset(levels: { market?: string; bids: ClobLevel[]; asks: ClobLevel[] }, ts: number): void {
    if (levels.market) this.market = levels.market;
    this.bids.set(levels.bids.map(level).sort((a, b) => a.p - b.p));
    this.asks.set(levels.asks.map(level).sort((a, b) => b.p - a.p));
    this.ts = ts;
  }

  /** Applies a level's new aggregate size; false when the book already held it (a repeated message). */
  apply(c: Pick<ClobPriceChange, 'price' | 'size' | 'side'>, ts: number): boolean {
    const buy = c.side === 'BUY';
    const book = buy ? this.bids : this.asks;
    const side = book.levels;
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
      book.remove(lo);
    } else if (found) {
      if (side[lo].s === size) return false;
      book.replace(lo, level({ price: c.price, size: c.size }));
    } else book.insert(lo, level({ price: c.price, size: c.size }));
    this.ts = ts;
    return true;
  }

  /** The venue's summary of this book at `timestamp` (bids ascending, asks descending). */
  summary(timestamp: string): ClobBookSummary {
    const plain = (l: Level) => ({ price: l.price, size: l.size });
    return { market: this.market, asset_id: this.assetId, timestamp, bids: this.bids.levels.map(plain), asks: this.asks.levels.map(plain) };
  }

  /** `clobBookHash(this.summary(timestamp))`, from each side's canonical JSON kept until it changes. */
  hash(timestamp: string): string {
    if (this.identity?.market !== this.market)
      this.identity = {
        market: this.market,
        text: `{"market":${JSON.stringify(this.market)},"asset_id":${JSON.stringify(this.assetId)},"timestamp":`,
      };
    const text = `${this.identity.text}${JSON.stringify(timestamp)},${this.bids.hashJson()},${this.asks.hashJson()}}`;
    return digest('sha1', text, 'hex');
  }

  /** Ladders best first, as the lake stores them; the same arrays until the book changes. */
  ladders(): Ladders {
    const c = this.cached;
    if (c?.bids === this.bids.version && c.asks === this.asks.version) return c.ladders;
    // A change moves one side: the other side's arrays and text are reused.
    const bids = this.bids.ladder();
    const asks = this.asks.ladder();
    const ladders = { bid_prices: bids.prices, bid_sizes: bids.sizes, ask_prices: asks.prices, ask_sizes: asks.sizes };
    primeLadderJson(
      ladders,
      `"bid_prices":${bids.pricesJson},"bid_sizes":${bids.sizesJson},"ask_prices":${asks.pricesJson},"ask_sizes":${asks.sizesJson}`,
    );
    this.cached = { bids: this.bids.version, asks: this.asks.version, ladders };
    return ladders;
  }
}

/** One side's levels in the venue's order, with its texts and best-first ladder made once per version. */
class Side {
  levels: Level[] = [];
  /** Each level's canonical JSON, in step with `levels`: joined for the hash without a map. */
  private texts: string[] = [];
  version = 0;
  private json: { version: number; text: string } | null = null;
  private best: { version: number; ladder: SideLadder } | null = null;

  constructor(private readonly name: 'bids' | 'asks') {}

  set(levels: Level[]): void {
    this.levels = levels;
    this.texts = levels.map((l) => l.json);
    this.version++;
  }

  remove(i: number): void {
    this.levels.splice(i, 1);
    this.texts.splice(i, 1);
    this.version++;
  }

  replace(i: number, l: Level): void {
    this.levels[i] = l;
    this.texts[i] = l.json;
    this.version++;
  }

  insert(i: number, l: Level): void {
    this.levels.splice(i, 0, l);
    this.texts.splice(i, 0, l.json);
    this.version++;
  }

  /** `"bids":[...]` as the hash's canonical JSON writes it. */
  hashJson(): string {
    if (this.json?.version !== this.version)
      this.json = { version: this.version, text: `"${this.name}":[${this.levels.map((l) => l.json).join(',')}]` };
    return this.json.text;
  }

  /** Best first (the venue's order reversed), with each array's JSON from the number text made when a level was set. */
  ladder(): SideLadder {
    if (this.best?.version === this.version) return this.best.ladder;
    const n = this.levels.length;
    const prices = new Array<number>(n);
    const sizes = new Array<number>(n);
    const pj = new Array<string>(n);
    const sj = new Array<string>(n);
    for (let i = 0; i < n; i++) {
      const l = this.levels[n - 1 - i];
      prices[i] = l.p;
      sizes[i] = l.s;
      pj[i] = l.pj;
      sj[i] = l.sj;
    }
    const ladder = { prices, sizes, pricesJson: `[${pj.join(',')}]`, sizesJson: `[${sj.join(',')}]` };
    this.best = { version: this.version, ladder };
    return ladder;
  }
}

interface SideLadder {
  prices: number[];
  sizes: number[];
  pricesJson: string;
  sizesJson: string;
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
    json: `{"price":${JSON.stringify(l.price)},"size":${JSON.stringify(l.size)}}`,
    pj: JSON.stringify(p),
    sj: JSON.stringify(s),
  };
}
