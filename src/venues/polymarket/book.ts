// The CLOB's book shapes shared by its REST and WebSocket answers, and the book hash a recorder
// recomputes to prove its copy of a book equals the venue's.
import { hash as digest } from 'node:crypto';
import { type Market, type TradeRow, primeLadderJson } from '../../records.js';
import type { VenueBookSummary } from '../adapter.js';
import { type BookTextForm, bookTextForm, textForm } from '../../numbertext.js';

export interface ClobLevel {
  price: string;
  size: string;
}

/**
 * The fields the venue hashes beside the levels, as it sent them: REST `/book` carries all four,
 * the first `book` after connecting `last_trade_price`, `tick_size_change` the tick, and
 * `last_trade_price` messages the trade; `price_change` none of them.
 */
export interface ClobBookExtras {
  min_order_size?: string;
  tick_size?: string;
  neg_risk?: boolean;
  last_trade_price?: string;
}

export interface ClobBookSummary extends ClobBookExtras {
  market: string;
  asset_id: string;
  timestamp: string;
  bids: ClobLevel[];
  asks: ClobLevel[];
}

/**
 * The summaries capture hands back to this venue's recorder: its own adapter's (rest.ts), carried
 * opaque through capture and the stream threads, so they are this venue's shape.
 */
export const clobSummaries = (summaries: readonly VenueBookSummary[]) => summaries as readonly (ClobBookSummary & { hash?: string })[];

/**
 * Where the hashed JSON puts `"hash":""`. UPSTREAMS.md C1 gives REST's field order (`hash` fourth,
 * as a client hashing the parsed REST answer sees it); the venue's client libraries' own test
 * vectors put it last (their type's declaration order). Both are tried, the last one that matched first.
 */
export type HashLayout = 'hash-fourth' | 'hash-last';
export const HASH_LAYOUTS: readonly HashLayout[] = ['hash-fourth', 'hash-last'];
const EARLIER_EXTRAS = 3;

/** The extras' JSON tail as the hash writes it (absent fields are left out, as `JSON.stringify` leaves out undefined). */
export function extrasJson(e: ClobBookExtras): string {
  let text = '';
  if (e.min_order_size !== undefined) text += `,"min_order_size":${JSON.stringify(e.min_order_size)}`;
  if (e.tick_size !== undefined) text += `,"tick_size":${JSON.stringify(e.tick_size)}`;
  if (e.neg_risk !== undefined) text += `,"neg_risk":${JSON.stringify(e.neg_risk)}`;
  if (e.last_trade_price !== undefined) text += `,"last_trade_price":${JSON.stringify(e.last_trade_price)}`;
  return text;
}

/** The hashed text from its parts: identity opening (`{"market":..,"asset_id":..,"timestamp":`), sides' JSON, extras' JSON. */
function hashText(opening: string, timestamp: string, bids: string, asks: string, extras: string, layout: HashLayout): string {
  return layout === 'hash-fourth'
    ? `${opening}${JSON.stringify(timestamp)},"hash":"",${bids},${asks}${extras}}`
    : `${opening}${JSON.stringify(timestamp)},${bids},${asks}${extras},"hash":""}`;
}

function opening(market: string, assetId: string): string {
  return `{"market":${JSON.stringify(market)},"asset_id":${JSON.stringify(assetId)},"timestamp":`;
}

const sideJson = (name: 'bids' | 'asks', levels: ClobLevel[]) =>
  `"${name}":[${levels.map((l) => `{"price":${JSON.stringify(l.price)},"size":${JSON.stringify(l.size)}}`).join(',')}]`;

/**
 * The venue's book hash from its parts as JSON text (each side as `"bids":[...]`, levels in the
 * venue's order): what a writer of many books uses instead of building level objects.
 */
export function clobHashOfParts(
  market: string,
  assetId: string,
  timestamp: string,
  bidsJson: string,
  asksJson: string,
  /** The extras' JSON tail as `extrasJson` writes it. */
  extras: string,
  layout: HashLayout = 'hash-fourth',
): string {
  return digest('sha1', hashText(opening(market, assetId), timestamp, bidsJson, asksJson, extras, layout), 'hex');
}

/**
 * The venue's book hash (UPSTREAMS.md C1): SHA-1 (hex) of the compact JSON of the summary with
 * `hash` set to "", values as the venue sent them, levels in the venue's order (bids ascending,
 * asks descending).
 */
export function clobBookHash(b: ClobBookSummary, layout: HashLayout = 'hash-fourth'): string {
  return digest(
    'sha1',
    hashText(opening(b.market, b.asset_id), b.timestamp, sideJson('bids', b.bids), sideJson('asks', b.asks), extrasJson(b), layout),
    'hex',
  );
}

export interface ClobBookMessage extends ClobBookSummary {
  event_type: 'book';
  hash: string;
}

/** One entry of a `price_change`; the venue's own Rust client treats all but the identity as optional. */
export interface ClobPriceChange {
  asset_id: string;
  price: string;
  size?: string;
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
  size?: string;
  side?: string;
  fee_rate_bps?: string;
  transaction_hash?: string;
  timestamp: string;
}

/**
 * A `last_trade_price` as a trade row of `market`, or null when it names no token of the market or
 * carries no usable price. Fields the venue left out (its clients treat all but price as optional)
 * stay null rather than guessed; its time is the venue's, or the receive time when it sent none.
 */
export function tradeOf(market: Market, msg: ClobLastTradeMessage, recvTs: number): TradeRow | null {
  // The venue writes numbers as strings; some clients' fixtures write them bare: either is taken.
  const number = (v: unknown) => {
    const n = (typeof v === 'string' && v.trim() !== '') || typeof v === 'number' ? Number(v) : NaN;
    return Number.isFinite(n) ? n : null;
  };
  const outcome = market.outcomes.find((o) => o.token_id === msg.asset_id);
  const price = number(msg.price);
  if (!outcome || price === null) return null;
  const exchangeTs = number(msg.timestamp);
  const side = typeof msg.side === 'string' ? msg.side.toLowerCase() : null;
  return {
    ts: exchangeTs ?? recvTs,
    market_id: market.market_id,
    token_id: outcome.token_id,
    outcome_index: outcome.index,
    outcome: outcome.label,
    price,
    size: number(msg.size),
    side: side === 'buy' || side === 'sell' ? side : null,
    fee_rate_bps: number(msg.fee_rate_bps),
    transaction_hash: typeof msg.transaction_hash === 'string' && msg.transaction_hash !== '' ? msg.transaction_hash : null,
    source: 'stream',
    exchange_ts: exchangeTs,
    recv_ts: recvTs,
    price_decimals: venueForm(msg.price),
    size_decimals: venueForm(msg.size),
  };
}

/** How the venue wrote one number (numbertext.ts), so a replay sends its text; a form no code says is taken as the shortest. */
const venueForm = (v: unknown): number | null => (typeof v === 'string' && v.trim() !== '' ? (textForm([v.trim()]) ?? null) : null);

export interface ClobTickSizeMessage {
  event_type: 'tick_size_change';
  asset_id: string;
  market: string;
  old_tick_size: string;
  new_tick_size: string;
  timestamp: string;
}

/** A custom feature event (`custom_feature_enabled`): the market's resolution, at the venue's time. */
export interface ClobMarketResolvedMessage {
  event_type: 'market_resolved';
  id?: string;
  market: string;
  assets_ids?: string[];
  winning_asset_id?: string;
  winning_outcome?: string;
  timestamp: string;
  tags?: string[];
}

export type ClobMarketMessage =
  | ClobBookMessage
  | ClobPriceChangeMessage
  | ClobLastTradeMessage
  | ClobTickSizeMessage
  | ClobMarketResolvedMessage
  | { event_type: string };

/** Whether a change entry carries what applying it needs: a price and side, and a size that is a number. */
export function wholeChange(c: ClobPriceChange): c is ClobPriceChange & { size: string } {
  return (
    typeof c.price === 'string' &&
    Number.isFinite(Number(c.price)) &&
    c.price.trim() !== '' &&
    (c.side === 'BUY' || c.side === 'SELL') &&
    typeof c.size === 'string' &&
    c.size.trim() !== '' &&
    Number.isFinite(Number(c.size)) &&
    Number(c.size) >= 0
  );
}

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
  private extras: ClobBookExtras = {};
  private extrasText = '';
  /**
   * The fields' texts before their latest change, newest first: a source ahead of the stream
   * (REST answering later than the stream has reached) may have moved them before the venue's
   * hashes of earlier instants did.
   */
  private earlier: string[] = [];

  constructor(
    public market: string,
    readonly assetId: string,
  ) {}

  /** The hash the venue sent with the current book (its snapshot's, or its newest change's); null when it sent none. */
  sentHash: string | null = null;
  /** The hashed fields as known when that hash came: what a row repeating this book keeps beside it. */
  private sentExtras = '';
  private rowCache: { key: string; row: BookTextRow } | null = null;

  /** The venue's hash of the book just applied (null: it sent none), kept with the fields known now. */
  sent(hash: string | null): void {
    this.sentHash = hash;
    this.sentExtras = this.extrasText;
  }

  reset(levels: { market?: string; bids: ClobLevel[]; asks: ClobLevel[]; hash?: unknown }, ts: number): void {
    if (levels.market) this.market = levels.market;
    this.sent(typeof levels.hash === 'string' && levels.hash ? levels.hash : null);
    this.bids.set(levels.bids.map(level).sort((a, b) => a.p - b.p));
    this.asks.set(levels.asks.map(level).sort((a, b) => b.p - a.p));
    this.ts = ts;
  }

  /**
   * Takes the hashed fields the source carries (only those not known yet, unless `replace`); the
   * others keep what an earlier source said. True when any changed.
   */
  note(e: ClobBookExtras, replace = true): boolean {
    const pick = <T>(given: T | undefined, known: T | undefined) => (replace ? (given ?? known) : (known ?? given));
    const next = {
      min_order_size: pick(e.min_order_size, this.extras.min_order_size),
      tick_size: pick(e.tick_size, this.extras.tick_size),
      neg_risk: pick(e.neg_risk, this.extras.neg_risk),
      last_trade_price: pick(e.last_trade_price, this.extras.last_trade_price),
    };
    const text = extrasJson(next);
    if (text === this.extrasText) return false;
    if (this.extrasText) {
      this.earlier.unshift(this.extrasText);
      this.earlier.length = Math.min(this.earlier.length, EARLIER_EXTRAS);
    }
    this.extras = next;
    this.extrasText = text;
    return true;
  }

  /** Whether every hashed field beside the levels is known. */
  knowsAllFields(): boolean {
    const e = this.extras;
    return e.min_order_size !== undefined && e.neg_risk !== undefined && e.tick_size !== undefined && e.last_trade_price !== undefined;
  }

  /** Applies a level's new aggregate size; false when the book already held it (a repeated message). */
  apply(c: Pick<ClobPriceChange, 'price' | 'side'> & { size: string }, ts: number): boolean {
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

  /** The best bid and ask as numbers (null for an empty side): the venue's `best_bid`/`best_ask` check. */
  best(): { bid: number | null; ask: number | null } {
    const b = this.bids.levels;
    const a = this.asks.levels;
    return { bid: b.length ? b[b.length - 1].p : null, ask: a.length ? a[a.length - 1].p : null };
  }

  /** The venue's summary of this book at `timestamp` (bids ascending, asks descending). */
  summary(timestamp: string): ClobBookSummary {
    const plain = (l: Level) => ({ price: l.price, size: l.size });
    return {
      market: this.market,
      asset_id: this.assetId,
      timestamp,
      bids: this.bids.levels.map(plain),
      asks: this.asks.levels.map(plain),
      ...this.extras,
    };
  }

  /** The book's state as the hash sees it, kept for a later check (the texts are the sides' own, not copies). */
  state(): BookState {
    return { ts: this.ts, bids: this.bids.hashJson(), asks: this.asks.hashJson() };
  }

  /**
   * `clobBookHash(this.summary(timestamp), layout)`, from each side's canonical JSON kept until it
   * changes; `earlier` hashes with the fields as they were that many changes ago instead.
   */
  hash(timestamp: string, layout: HashLayout = 'hash-fourth', state?: BookState, earlier = 0): string {
    if (this.identity?.market !== this.market) this.identity = { market: this.market, text: opening(this.market, this.assetId) };
    const bids = state ? state.bids : this.bids.hashJson();
    const asks = state ? state.asks : this.asks.hashJson();
    const extras = earlier ? (this.earlier[earlier - 1] ?? this.extrasText) : this.extrasText;
    return digest('sha1', hashText(this.identity.text, timestamp, bids, asks, extras, layout), 'hex');
  }

  /** The hashed fields as known now (a copy, kept beside a book in doubt). */
  fields(): ClobBookExtras {
    return { ...this.extras };
  }

  /** The hash of a kept state with the given fields, where those the state was checked with were incomplete. */
  hashWith(timestamp: string, layout: HashLayout, state: BookState, fields: ClobBookExtras): string {
    return digest(
      'sha1',
      hashText(opening(this.market, this.assetId), timestamp, state.bids, state.asks, extrasJson(fields), layout),
      'hex',
    );
  }

  /** How many earlier texts of the hashed fields are kept to try. */
  get earlierFields(): number {
    return this.earlier.length;
  }

  /**
   * What a lake row keeps of this book beyond its numbers: the venue's text (as codes, or whole),
   * the hashed fields as known, and the venue's hash where the formula over the row, as a reader
   * computes it for `market` (`venueHashOf`), does not give it back.
   */
  textRow(market: string): BookTextRow {
    // Beside a venue hash, the fields as they were when it came (a later trade does not move a book's hash until it changes).
    const extras = this.sentHash !== null ? this.sentExtras : this.extrasText;
    const key = `${this.bids.version}:${this.asks.version}:${this.ts}:${market}:${this.sentHash}:${extras}`;
    if (this.rowCache?.key === key) return this.rowCache.row;
    const texts = (levels: Level[], k: 'price' | 'size') => levels.map((l) => l[k]).reverse();
    const form = bookTextForm({
      bidPrices: texts(this.bids.levels, 'price'),
      bidSizes: texts(this.bids.levels, 'size'),
      askPrices: texts(this.asks.levels, 'price'),
      askSizes: texts(this.asks.levels, 'size'),
    });
    // '{}' rather than null beside a venue hash: none of the fields was known, which the formula needs to know too.
    const fields = extras ? `{${extras.slice(1)}}` : this.sentHash !== null ? '{}' : null;
    let venueHash: string | null = null;
    if (this.sentHash !== null) {
      const formula = digest(
        'sha1',
        hashText(opening(market, this.assetId), String(this.ts), this.bids.hashJson(), this.asks.hashJson(), extras, 'hash-fourth'),
        'hex',
      );
      if (formula !== this.sentHash) venueHash = this.sentHash;
    }
    const row = { ...form, hash_fields: fields, venue_hash: venueHash };
    this.rowCache = { key, row };
    return row;
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

/** What a lake row keeps of a book beyond its numbers (the books columns of the same names). */
export type BookTextRow = BookTextForm & { hash_fields: string | null; venue_hash: string | null };

/**
 * The venue's hash of a recorded book as its formula gives it (UPSTREAMS.md C1, REST's field order)
 * over the row: the market's condition id, the token, the row's venue time, its levels in the
 * venue's text and order, and the hashed fields it kept (`hash_fields`). A row whose venue hash this
 * does not give keeps it (`venue_hash`).
 */
export function venueHashOf(
  market: string,
  assetId: string,
  exchangeTs: number,
  bidsJson: string,
  asksJson: string,
  hashFields: string | null,
): string {
  const extras = hashFields && hashFields.length > 2 ? `,${hashFields.slice(1, -1)}` : '';
  return clobHashOfParts(market, assetId, String(exchangeTs), bidsJson, asksJson, extras);
}

/** A copy's book at one instant, as a later check needs it. */
export interface BookState {
  ts: number;
  bids: string;
  asks: string;
}

/**
 * A kept book's ladders, parsed from its hash texts: needed only when a late check compares it,
 * so a kept book holds no arrays of its own (128 books a token would keep every row's alive).
 */
export function stateLadders(state: BookState): Ladders {
  const { bids, asks } = JSON.parse(`{${state.bids},${state.asks}}`) as { bids: ClobLevel[]; asks: ClobLevel[] };
  const bestFirst = (levels: ClobLevel[], key: 'price' | 'size') => levels.map((l) => Number(l[key])).reverse();
  return {
    bid_prices: bestFirst(bids, 'price'),
    bid_sizes: bestFirst(bids, 'size'),
    ask_prices: bestFirst(asks, 'price'),
    ask_sizes: bestFirst(asks, 'size'),
  };
}

/** Whether a venue summary holds the same levels as ladders (best first), by numeric price and size. */
export function sameLevels(s: Pick<ClobBookSummary, 'bids' | 'asks'>, l: Ladders): boolean {
  const side = (levels: ClobLevel[], prices: number[], sizes: number[]) => {
    if (levels.length !== prices.length) return false;
    // The venue's order is best last; ladders are best first.
    for (let i = 0, n = levels.length; i < n; i++) {
      const x = levels[n - 1 - i];
      if (Number(x.price) !== prices[i] || Number(x.size) !== sizes[i]) return false;
    }
    return true;
  };
  const bids = [...s.bids].sort((a, b) => Number(a.price) - Number(b.price));
  const asks = [...s.asks].sort((a, b) => Number(b.price) - Number(a.price));
  return side(bids, l.bid_prices, l.bid_sizes) && side(asks, l.ask_prices, l.ask_sizes);
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
    if (this.json?.version !== this.version) this.json = { version: this.version, text: `"${this.name}":[${this.texts.join(',')}]` };
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

export interface Ladders {
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

/**
 * A number's text as REST and `price_change` write it. The channel's `book` may drop the leading
 * zero (".48", the venue's documented example); the venue formats its book one way when it hashes
 * it, and REST's hash is over "0.48", so the copy hashes that. Were it the other way, a snapshot's
 * hash would not reproduce: its book is then in doubt until REST or a later hash proves it.
 */
const canonical = (text: string) => (typeof text === 'string' && text.charCodeAt(0) === 46 ? `0${text}` : text);

function level(l: ClobLevel): Level {
  const price = canonical(l.price);
  const size = canonical(l.size);
  const p = Number(price);
  const s = Number(size);
  return {
    p,
    s,
    price,
    size,
    json: `{"price":${JSON.stringify(price)},"size":${JSON.stringify(size)}}`,
    pj: JSON.stringify(p),
    sj: JSON.stringify(s),
  };
}
