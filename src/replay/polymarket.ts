// A market's tape as Polymarket's market channel would have sent it (UPSTREAMS.md C1): a `book`
// per token where a client has no copy (its first book, or the first after a gap), `price_change`
// entries for the levels each recorded change moved (new aggregate size, "0" removes), with the
// venue's best bid and ask and book hash after it, `last_trade_price` for every streamed trade,
// `tick_size_change` where the market's tick moved, `market_resolved` at its resolution, and a
// `replay_gap` control message where the record has a gap. Times are the archive's (`ts`).
import { venueHashOf } from '../venues/polymarket/book.js';
import { numberText } from '../numbertext.js';
import { type MarketTape, type TapeBooks, firstAt } from './tape.js';
import type { ReplayWalk } from './session.js';

const text = (n: number) => String(n);

/**
 * One side of row i as the venue writes it (`"bids":[{"price":"0.48","size":"30.00"},...]`, best
 * level last; the lake keeps it best first), in the venue's text: `p` is the offset of the side's
 * `n` prices in the row's ladders, `q` of their sizes. Built as text: numbers need no escaping, and
 * level objects per row made the garbage collector a third of rendering.
 */
function sideJson(name: 'bids' | 'asks', books: TapeBooks, i: number, p: number, q: number, n: number): string {
  let json = `"${name}":[`;
  for (let k = n - 1; k >= 0; k--) json += `{"price":"${books.text(i, p + k)}","size":"${books.text(i, q + k)}"}${k ? ',' : ''}`;
  return `${json}]`;
}

type Entry = (price: string, size: string, side: 'BUY' | 'SELL') => void;

/**
 * The levels of one side that differ between two rows of a token (new aggregate size, "0" for a
 * level gone), in the venue's text of the row that holds each: one merge walk over both ladders,
 * best first (bids descending, asks ascending). Offsets are into each row's ladders.
 */
function sideChanges(
  books: TapeBooks,
  prev: number,
  p0: number,
  q0: number,
  n0: number,
  next: number,
  p1: number,
  q1: number,
  n1: number,
  side: 'BUY' | 'SELL',
  entry: Entry,
) {
  const l = books.levels;
  const [a0, a1] = [books.at[prev], books.at[next]];
  // Walking best first, a bid's "later" price is lower and an ask's higher.
  const sign = side === 'BUY' ? -1 : 1;
  let i = 0;
  let j = 0;
  while (i < n0 || j < n1) {
    const was = i < n0 ? l[a0 + p0 + i] : NaN;
    const now = j < n1 ? l[a1 + p1 + j] : NaN;
    if (j >= n1 || (i < n0 && sign * (now - was) > 0)) {
      entry(books.text(prev, p0 + i), books.zeroSize(next), side);
      i++;
    } else if (i >= n0 || sign * (was - now) > 0) {
      entry(books.text(next, p1 + j), books.text(next, q1 + j), side);
      j++;
    } else {
      if (l[a0 + q0 + i] !== l[a1 + q1 + j]) entry(books.text(next, p1 + j), books.text(next, q1 + j), side);
      i++;
      j++;
    }
  }
}

/** Every level two rows of one token differ in, bids then asks, each as the venue's change states it. */
function bookChanges(books: TapeBooks, prev: number, next: number, entry: Entry): void {
  const [b0, s0] = [books.bids[prev], books.asks[prev]];
  const [b1, s1] = [books.bids[next], books.asks[next]];
  sideChanges(books, prev, 0, b0, b0, next, 0, b1, b1, 'BUY', entry);
  sideChanges(books, prev, 2 * b0, 2 * b0 + s0, s0, next, 2 * b1, 2 * b1 + s1, s1, 'SELL', entry);
}

/**
 * Whether one side of rows `prev` and `next` is written alike: the same levels, in the same text
 * codes. Most changes move one side only, so the other's text is the previous row's (`SidesMemo`).
 */
function sameSide(books: TapeBooks, prev: number, next: number, asks: boolean): boolean {
  const [b0, b1] = [books.bids[prev], books.bids[next]];
  const n = asks ? books.asks[prev] : b0;
  if (n !== (asks ? books.asks[next] : b1)) return false;
  if (books.priceDecimals[prev] !== books.priceDecimals[next] || books.sizeDecimals[prev] !== books.sizeDecimals[next]) return false;
  if (books.levelTexts.size && (books.levelTexts.has(prev) || books.levelTexts.has(next))) return false;
  const l = books.levels;
  // A side's prices then its sizes: n of each (bids at the row's start; asks after both bid lists).
  const [a0, a1] = [books.at[prev] + (asks ? 2 * b0 : 0), books.at[next] + (asks ? 2 * b1 : 0)];
  for (let k = 0; k < 2 * n; k++) if (l[a0 + k] !== l[a1 + k]) return false;
  return true;
}

/** The newest row whose sides a walk wrote, per outcome. */
type SidesMemo = ({ row: number; bids: string; asks: string } | undefined)[];

/**
 * Row i's two sides as the venue writes them; a side equal to its outcome's previous row's
 * (`prev`, when that was the last one written) is that row's text, not written again.
 */
function sidesJson(books: TapeBooks, i: number, prev: number, memo: SidesMemo): [string, string] {
  const [b, s] = [books.bids[i], books.asks[i]];
  const last = memo[books.outcome[i]];
  const known = last !== undefined && prev >= 0 && last.row === prev;
  const bids = known && sameSide(books, prev, i, false) ? last.bids : sideJson('bids', books, i, 0, b, b);
  const asks = known && sameSide(books, prev, i, true) ? last.asks : sideJson('asks', books, i, 2 * b, 2 * b + s, s);
  memo[books.outcome[i]] = { row: i, bids, asks };
  return [bids, asks];
}

/**
 * Not the venue's: beside a hash the archive computed with the venue's formula because the venue's
 * own is not in the record (it sent none, or the row predates the lake keeping it). Clients ignore it.
 */
const FORMULA = ',"hash_source":"formula"';

/** Kinds in the order messages of one instant go: a gap's notice, the tick, trades, then books. */
const GAP = 0;
const TICK = 1;
const TRADE = 2;
const BOOK = 3;
const RESOLVED = 4;

/**
 * What a tape says about itself, computed once and shared by every walk of it: each row's
 * previous row of its outcome, and whether a client holding that previous book can take this row
 * as changes (false after a gap of the books, whose changes are unknown).
 */
interface TapeIndex {
  prev: Int32Array;
  fresh: Uint8Array;
}

const indexes = new WeakMap<MarketTape, TapeIndex>();

function indexOf(tape: MarketTape): TapeIndex {
  let index = indexes.get(tape);
  if (index) return index;
  const n = tape.books.length;
  const prev = new Int32Array(n).fill(-1);
  const fresh = new Uint8Array(n);
  const last = new Map<number, number>();
  const gaps = tape.gaps.filter((g) => g.dataset === 'books');
  for (let i = 0; i < n; i++) {
    const outcome = tape.books.outcome[i];
    const p = last.get(outcome);
    last.set(outcome, i);
    if (p === undefined) {
      fresh[i] = 1;
      continue;
    }
    prev[i] = p;
    const since = tape.books.ts[p];
    const ts = tape.books.ts[i];
    fresh[i] = gaps.some((g) => g.from <= ts && g.to > since) ? 1 : 0;
  }
  index = { prev, fresh };
  indexes.set(tape, index);
  return index;
}

/** A walk over one market's tape from `from` (a book per outcome first, as the venue's `initial_dump`) to `to`. */
export class PolymarketWalk implements ReplayWalk {
  private indexed: TapeIndex | null = null;
  private readonly condition: string;
  private readonly assets: string[];
  private readonly negRisk: boolean | undefined;
  private readonly initial: string[] = [];
  private book: number;
  private trade: number;
  private tick: number;
  private gap: number;
  private resolvedSent: boolean;
  private readonly gaps: MarketTape['gaps'];
  private readonly sides: SidesMemo = [];

  constructor(
    private readonly tape: MarketTape,
    from: number,
    private readonly to: number,
    /** Whether the client asked for the custom feature events (`market_resolved`). */
    custom: boolean,
    /** Called with the bytes of every message rendered for the first time (what a shared tape now holds). */
    private readonly rendered: (bytes: number) => void = () => undefined,
  ) {
    const m = tape.market;
    this.condition = m.condition_id ?? m.market_id;
    this.assets = [...m.outcomes].sort((a, b) => a.index - b.index).map((o) => o.token_id);
    this.negRisk = m.exchange_kind === 'neg_risk_ctf' ? true : m.exchange_kind === 'ctf' ? false : undefined;
    this.gaps = [...tape.gaps].sort((a, b) => a.from - b.from);
    this.book = tape.books.lowerBound(from);
    this.trade = firstAt(tape.trades.length, (i) => tape.trades[i].ts, from);
    this.tick = firstAt(tape.ticks.length, (i) => tape.ticks[i].ts, from);
    this.gap = this.gaps.findIndex((g) => g.from >= from);
    if (this.gap < 0) this.gap = this.gaps.length;
    this.resolvedSent = !custom || m.resolved_time === null || m.resolved_time < from;
    for (const g of this.gaps) if (g.from < from && g.to > from) this.initial.push(this.gapMessage(g, from));
    // The book each outcome held at `from`: its newest row before it.
    for (const i of tape.books.heldAt(from, this.assets.length)) this.initial.push(this.bookMessage(i));
  }

  /** Only a tape's first render needs it (a replay copy has every message rendered). */
  private get index(): TapeIndex {
    return (this.indexed ??= indexOf(this.tape));
  }

  /** The time of the next message, or Infinity when none is left before `to`. */
  next(): number {
    if (this.initial.length) return -Infinity;
    const t = Math.min(
      this.book < this.tape.books.length ? this.tape.books.ts[this.book] : Infinity,
      this.trade < this.tape.trades.length ? this.tape.trades[this.trade].ts : Infinity,
      this.tick < this.tape.ticks.length ? this.tape.ticks[this.tick].ts : Infinity,
      this.gap < this.gaps.length ? this.gaps[this.gap].from : Infinity,
      this.resolvedSent ? Infinity : this.tape.market.resolved_time!,
    );
    return t < this.to ? t : Infinity;
  }

  /** Appends the messages of the next instant's next step to `out`. */
  take(out: string[]): void {
    if (this.initial.length) {
      out.push(...this.initial.splice(0));
      return;
    }
    const t = this.next();
    if (t === Infinity) return;
    const kind =
      this.gap < this.gaps.length && this.gaps[this.gap].from === t
        ? GAP
        : this.tick < this.tape.ticks.length && this.tape.ticks[this.tick].ts === t
          ? TICK
          : this.trade < this.tape.trades.length && this.tape.trades[this.trade].ts === t
            ? TRADE
            : this.book < this.tape.books.length && this.tape.books.ts[this.book] === t
              ? BOOK
              : RESOLVED;
    if (kind === GAP) out.push(this.gapMessage(this.gaps[this.gap++], t));
    else if (kind === TICK) this.memo(this.tick++ * 8 + TICK, out, (i) => this.tickMessages(i >> 3));
    else if (kind === TRADE) this.memo(this.trade++ * 8 + TRADE, out, (i) => [this.tradeMessage(i >> 3)]);
    else if (kind === BOOK) {
      const first = this.book;
      while (this.book < this.tape.books.length && this.tape.books.ts[this.book] === t) this.book++;
      this.memo(first * 8 + BOOK, out, (i) => this.groupMessages(i >> 3, this.book));
    } else {
      this.resolvedSent = true;
      out.push(this.resolvedMessage());
    }
  }

  private memo(key: number, out: string[], render: (key: number) => string[]): void {
    const hit = this.tape.rendered.get(key);
    if (hit !== undefined) {
      if (hit !== '') out.push(...hit.split('\n'));
      return;
    }
    // A copy holds every message a walk can ask for; one missing is a damaged copy, never guessed at.
    if (this.tape.copied) throw new Error(`replay copy of market ${this.tape.market.market_id} lacks message ${key}`);
    const messages = render(key);
    const joined = messages.join('\n');
    // Kept for every later replay: flattened now (V8 does on a character read), or its concatenation's
    // pieces stay behind it for the garbage collector to walk on every pass.
    joined.charCodeAt(0);
    this.tape.rendered.set(key, joined);
    this.rendered(joined.length + 48);
    out.push(...messages);
  }

  private tickOf(t: number): number | null {
    let tick = this.tape.market.tick_size;
    for (const v of this.tape.ticks) {
      if (v.ts > t) break;
      tick = v.tick;
    }
    return tick;
  }

  private lastTradeOf(outcome: number, t: number): number | null {
    const trades = this.tape.trades;
    for (let i = firstAt(trades.length, (k) => trades[k].ts, t, true) - 1; i >= 0; i--)
      if (trades[i].outcome === outcome) return trades[i].price;
    return null;
  }

  /**
   * The hashed fields of a row recorded before the lake kept the venue's (2026-11-28): the tick,
   * neg-risk and the last trade the archive holds (never `min_order_size`, which it did not keep).
   */
  private olderFields(i: number): string {
    const ts = this.tape.books.ts[i];
    const tick = this.tickOf(ts);
    const trade = this.lastTradeOf(this.tape.books.outcome[i], ts);
    const fields = [
      ...(tick === null ? [] : [`"tick_size":"${tick}"`]),
      ...(this.negRisk === undefined ? [] : [`"neg_risk":${this.negRisk}`]),
      ...(trade === null ? [] : [`"last_trade_price":"${text(trade)}"`]),
    ];
    return `{${fields.join(',')}}`;
  }

  /**
   * Row i's hash: the one the venue sent with its book, which the lake keeps (as `venue_hash` where
   * the venue's formula over the row does not give it back); else the formula's, and the message
   * says so with `hash_source` (the venue sent none, or the row was recorded before the lake kept
   * what the formula needs).
   */
  private hashOf(i: number, bids: string, asks: string): { hash: string; formula: boolean } {
    const books = this.tape.books;
    const kept = books.venueHashes.get(i);
    if (kept !== undefined) return { hash: kept, formula: false };
    const fields = books.fieldsOf(i);
    const hash = venueHashOf(this.condition, this.assets[books.outcome[i]], this.venueTime(i), bids, asks, fields ?? this.olderFields(i));
    return { hash, formula: !books.hashed[i] || fields === null };
  }

  /** The last trade price a row's book carries, as the venue wrote it: from its hashed fields, else the archive's trades. */
  private bookTrade(i: number): string | null {
    const fields = this.tape.books.fieldsOf(i);
    if (fields !== null) {
      const trade = (JSON.parse(fields) as { last_trade_price?: unknown }).last_trade_price;
      return typeof trade === 'string' ? trade : null;
    }
    const price = this.lastTradeOf(this.tape.books.outcome[i], this.tape.books.ts[i]);
    return price === null ? null : text(price);
  }

  /**
   * The venue's time of row i's book, which its messages carry and its hash covers: the row's own
   * time but where the 1 ms rule moved it (two instants of one market in one millisecond) or the
   * token's book did not change at the row's instant (it keeps its last change's time).
   */
  private venueTime(i: number): number {
    const exchange = this.tape.books.exchange[i];
    return Number.isNaN(exchange) ? this.tape.books.ts[i] : exchange;
  }

  private bookMessage(i: number): string {
    const books = this.tape.books;
    books.ensure(i);
    const timestamp = text(this.venueTime(i));
    const asset = this.assets[books.outcome[i]];
    const [bids, asks] = sidesJson(books, i, this.tape.copied ? -1 : this.index.prev[i], this.sides);
    const { hash, formula } = this.hashOf(i, bids, asks);
    const price = this.bookTrade(i);
    const trade = price === null ? '' : `,"last_trade_price":"${price}"`;
    return `{"event_type":"book","asset_id":${JSON.stringify(asset)},"market":${JSON.stringify(this.condition)},"timestamp":"${timestamp}","hash":"${hash}"${formula ? FORMULA : ''},${bids},${asks}${trade}}`;
  }

  /** One recorded instant of the market: fresh books where a client has no copy, then one `price_change` with every token's changes. */
  private groupMessages(first: number, end: number): string[] {
    const books = this.tape.books;
    const out: string[] = [];
    // The instant's time: the venue's, but where the 1 ms rule moved it (ARCHITECTURE.md, docs/REPLAY.md).
    const timestamp = text(books.ts[first]);
    let entries = '';
    for (let i = first; i < end; i++) {
      if (this.index.fresh[i]) {
        out.push(this.bookMessage(i));
        continue;
      }
      const assetId = this.assets[books.outcome[i]];
      const asset = JSON.stringify(assetId);
      const changes: string[] = [];
      bookChanges(books, this.index.prev[i], i, (price, size, side) =>
        changes.push(`{"asset_id":${asset},"price":"${price}","size":"${size}","side":"${side}"`),
      );
      if (!changes.length) continue;
      const [bids, asks] = sidesJson(books, i, this.index.prev[i], this.sides);
      const { hash, formula } = this.hashOf(i, bids, asks);
      const bestBid = books.bids[i] ? books.text(i, 0) : '0';
      const bestAsk = books.asks[i] ? books.text(i, 2 * books.bids[i]) : '1';
      const best = `,"hash":"${hash}","best_bid":"${bestBid}","best_ask":"${bestAsk}"${formula ? FORMULA : ''}}`;
      for (const c of changes) entries += `${entries ? ',' : ''}${c}${best}`;
    }
    if (entries)
      out.push(
        `{"event_type":"price_change","market":${JSON.stringify(this.condition)},"timestamp":"${timestamp}","price_changes":[${entries}]}`,
      );
    // A recorded instant that moved no level: the venue's book sent again after a trade.
    if (!out.length) out.push(this.bookMessage(first));
    return out;
  }

  private tradeMessage(i: number): string {
    const tr = this.tape.trades[i];
    return JSON.stringify({
      event_type: 'last_trade_price',
      asset_id: this.assets[tr.outcome],
      market: this.condition,
      price: numberText(tr.price, tr.priceDecimals),
      ...(tr.size === null ? {} : { size: numberText(tr.size, tr.sizeDecimals) }),
      ...(tr.side === null ? {} : { side: tr.side.toUpperCase() }),
      ...(tr.feeRateBps === null ? {} : { fee_rate_bps: text(tr.feeRateBps) }),
      timestamp: text(tr.ts),
      ...(tr.transactionHash === null ? {} : { transaction_hash: tr.transactionHash }),
    });
  }

  private tickMessages(i: number): string[] {
    const v = this.tape.ticks[i];
    const old = i > 0 ? this.tape.ticks[i - 1].tick : null;
    // The first version is the market as discovered, not a change.
    if (old === null) return [];
    return this.assets.map((asset_id) =>
      JSON.stringify({
        event_type: 'tick_size_change',
        asset_id,
        market: this.condition,
        old_tick_size: text(old),
        new_tick_size: text(v.tick),
        timestamp: text(v.ts),
      }),
    );
  }

  private resolvedMessage(): string {
    const m = this.tape.market;
    const winner = m.outcomes.find((o) => o.index === m.winning_outcome_index);
    return JSON.stringify({
      event_type: 'market_resolved',
      id: m.market_id,
      market: this.condition,
      assets_ids: this.assets,
      ...(winner ? { winning_asset_id: winner.token_id, winning_outcome: winner.label } : {}),
      timestamp: text(m.resolved_time!),
    });
  }

  /** Not the venue's: where the archive has a gap, what it is, so a client never takes silence for a quiet book. */
  private gapMessage(g: MarketTape['gaps'][number], at: number): string {
    return JSON.stringify({
      event_type: 'replay_gap',
      market: this.condition,
      asset_ids: this.assets,
      dataset: g.dataset,
      reason: g.reason,
      from: text(g.from),
      to: Number.isFinite(g.to) ? text(g.to) : null,
      timestamp: text(Math.max(g.from, at)),
    });
  }
}
