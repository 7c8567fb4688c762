// A deterministic model of both venues: every market, book, trade and resolution is a pure
// function of (seed, time), so a fast-clock fill of the past and a live run agree, and a
// test can recompute what the stand-in served.
import type { Venue, Window } from '../config.js';
import { MINUTE, SECOND, WINDOW_MS } from '../time.js';
import { type BookState, BookModel, type Change, TICKS, type TokenPath, ladders } from './orderbook.js';

export const GENESIS = Date.parse('2026-05-01T00:00:00Z');
export const WALLET_LIST_LEAD = 60 * MINUTE;
export const POLY_CREATE_LEAD = 24 * 60 * MINUTE;
export const TICK = 0.01;
/** The venue's tick once a market's price passes FINE_TICK_BEYOND of either end (Polymarket: above 0.96 or below 0.04). */
export const FINE_TICK = 0.001;
const FINE_TICK_BEYOND = 0.04;
const BLOCK = 15 * MINUTE;
const TOKEN_SALT = '7108255942817004617739286502';

const BASE_PRICE: Record<string, number> = { btc: 67890, eth: 3520, bnb: 610, sol: 152, xrp: 0.61 };

export interface SimMarket {
  venue: Venue;
  coin: string;
  window: Window;
  start: number;
  end: number;
  code: number;
  tokenIds: [string, string];
  resolvedAt: number;
}

export function hash32(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  h ^= h >>> 15;
  h = Math.imul(h, 0x2c1b3c6d);
  h ^= h >>> 12;
  return h >>> 0;
}

export class Sim {
  private readonly books: BookModel;
  private readonly phases = new Map<string, number[]>();
  private readonly fineTickAt = new Map<string, number | null>();

  constructor(
    readonly seed: number,
    readonly coins: Record<Venue, readonly string[]>,
  ) {
    this.books = new BookModel(seed);
  }

  rand(...keys: (string | number)[]): number {
    return hash32(`${this.seed}|${keys.join('|')}`) / 2 ** 32;
  }

  /** Reference price of a coin at second resolution: smooth cycles plus per-second noise. */
  reference(coin: string, t: number): number {
    const sec = Math.floor(t / SECOND);
    const periods = [86400, 14400, 3600, 900, 300, 60];
    const amps = [0.02, 0.01, 0.004, 0.002, 0.0012, 0.0005];
    let phases = this.phases.get(coin);
    if (!phases) {
      phases = periods.map((_, i) => 2 * Math.PI * this.rand(coin, 'phase', i));
      this.phases.set(coin, phases);
    }
    let x = 0;
    for (let i = 0; i < periods.length; i++) {
      x += amps[i] * Math.sin((2 * Math.PI * sec) / periods[i] + phases[i]);
    }
    x += 0.0003 * (this.rand(coin, 'noise', sec) - 0.5);
    const base = BASE_PRICE[coin] ?? 100;
    return Math.round(base * (1 + x) * 100) / 100;
  }

  /** Fair probability that the Up outcome wins, given the reference path so far. */
  fairUp(m: SimMarket, t: number): number {
    if (t <= m.start) return 0.5;
    const s = this.reference(m.coin, m.start);
    if (t >= m.end) return this.reference(m.coin, m.end) >= s ? 1 : 0;
    const drift = Math.log(this.reference(m.coin, t) / s);
    const remaining = (m.end - t) / SECOND;
    const p = normalCdf(drift / (0.00012 * Math.sqrt(remaining)));
    return Math.min(0.98, Math.max(0.02, p));
  }

  /**
   * The second a market's tick becomes FINE_TICK, or null if it never does: the first one whose
   * fair price is past 0.96 or 0.04 while it trades. The venue does not go back to the coarse tick.
   */
  tickChangeAt(m: SimMarket): number | null {
    const key = `${m.venue}:${m.code}`;
    let at = this.fineTickAt.get(key);
    if (at === undefined) {
      at = null;
      for (let t = m.start + SECOND; t < m.end; t += SECOND) {
        const up = this.fairUp(m, t);
        if (up > 1 - FINE_TICK_BEYOND || up < FINE_TICK_BEYOND) {
          at = t;
          break;
        }
      }
      if (this.fineTickAt.size >= 4096) this.fineTickAt.clear();
      this.fineTickAt.set(key, at);
    }
    return at;
  }

  tickSize(m: SimMarket, t: number): number {
    const at = this.tickChangeAt(m);
    return at !== null && t >= at ? FINE_TICK : TICK;
  }

  /** The outcome the reference path gives (Up when the end's price is at least the start's). */
  referenceWinner(m: Pick<SimMarket, 'coin' | 'start' | 'end'>): 0 | 1 {
    return this.reference(m.coin, m.end) >= this.reference(m.coin, m.start) ? 0 : 1;
  }

  /** The outcome the venue resolves: the reference's, but for the share `misresolveRate` it gets wrong (a knob). */
  winner(m: SimMarket): 0 | 1 {
    const right = this.referenceWinner(m);
    return this.misresolveRate > 0 && this.rand(m.venue, m.code, 'misresolve') < this.misresolveRate ? ((1 - right) as 0 | 1) : right;
  }

  /** Share of markets the venue resolves against its own reference price (0: none). */
  misresolveRate = 0;

  market(venue: Venue, coin: string, window: Window, start: number): SimMarket {
    const coinIndex = this.coins[venue].indexOf(coin);
    const code = (((start - GENESIS) / (5 * MINUTE)) * 8 + coinIndex) * 2 + (window === '15m' ? 1 : 0);
    const end = start + WINDOW_MS[window];
    const token = (i: number) => `${TOKEN_SALT}${String(code * 2 + i).padStart(12, '0')}${venue === 'polymarket' ? '1' : '2'}`;
    return {
      venue,
      coin,
      window,
      start,
      end,
      code,
      tokenIds: [token(0), token(1)],
      resolvedAt: end + 5 * SECOND + Math.floor(this.rand(venue, code, 'resolve') * 15 * SECOND),
    };
  }

  exists(venue: Venue, coin: string, window: Window, start: number): boolean {
    return this.coins[venue].includes(coin) && start >= GENESIS && start % WINDOW_MS[window] === 0;
  }

  byCode(venue: Venue, code: number): SimMarket | null {
    const window: Window = code % 2 === 1 ? '15m' : '5m';
    const rest = Math.floor(code / 2);
    const coin = this.coins[venue][rest % 8];
    const start = GENESIS + Math.floor(rest / 8) * 5 * MINUTE;
    if (!coin || !this.exists(venue, coin, window, start)) return null;
    return this.market(venue, coin, window, start);
  }

  byToken(venue: Venue, tokenId: string): { market: SimMarket; index: 0 | 1 } | null {
    const suffix = venue === 'polymarket' ? '1' : '2';
    if (!tokenId.startsWith(TOKEN_SALT) || !tokenId.endsWith(suffix) || tokenId.length !== TOKEN_SALT.length + 13) return null;
    const n = Number(tokenId.slice(TOKEN_SALT.length, -1));
    if (!Number.isSafeInteger(n)) return null;
    const market = this.byCode(venue, Math.floor(n / 2));
    return market ? { market, index: (n % 2) as 0 | 1 } : null;
  }

  /** Wallet topics in listing order: by start, then coin, then 5m before 15m. */
  walletTopicCount(now: number): number {
    const c = this.coins['wallet-prediction'].length;
    const horizon = now + WALLET_LIST_LEAD;
    if (horizon < GENESIS) return 0;
    const blocks = Math.floor((horizon - GENESIS) / BLOCK);
    const into = horizon - GENESIS - blocks * BLOCK;
    return blocks * 4 * c + 2 * c + (into >= 5 * MINUTE ? c : 0) + (into >= 10 * MINUTE ? c : 0);
  }

  walletTopicAt(ordinal: number): SimMarket {
    const coins = this.coins['wallet-prediction'];
    const c = coins.length;
    const block = Math.floor(ordinal / (4 * c));
    const r = ordinal % (4 * c);
    const blockStart = GENESIS + block * BLOCK;
    if (r < 2 * c) return this.market('wallet-prediction', coins[Math.floor(r / 2)], r % 2 ? '15m' : '5m', blockStart);
    const offset = 1 + Math.floor((r - 2 * c) / c);
    return this.market('wallet-prediction', coins[(r - 2 * c) % c], '5m', blockStart + offset * 5 * MINUTE);
  }

  walletTopicId(m: SimMarket): number {
    return 4_000_000 + m.code;
  }

  walletMarketId(m: SimMarket): number {
    return 50_000_000 + m.code;
  }

  polymarketId(m: SimMarket): string {
    return String(1_000_000 + m.code);
  }

  slug(m: SimMarket): string {
    return `${m.coin}-updown-${m.window}-${m.start / SECOND}`;
  }

  /** A Polymarket market's question, as Gamma and the channel's `new_market` word it. */
  polymarketQuestion(m: SimMarket): string {
    return `${m.coin.toUpperCase()} Up or Down - ${new Date(m.start).toISOString().slice(0, 16).replace('T', ' ')} UTC (${m.window})`;
  }

  /** The token as the book model sees it: its seed key, its trading window and its fair value. */
  tokenPath(m: SimMarket, index: 0 | 1): TokenPath {
    return {
      key: `${m.venue}:${m.code}:${index}`,
      open: m.start,
      close: m.end,
      fair: (second) => {
        const up = this.fairUp(m, second * SECOND);
        return index === 0 ? up : 1 - up;
      },
    };
  }

  /**
   * The book of one outcome token as the venue holds it at `t`: every change up to `t` applied.
   * The wallet venue keeps one book per market, priced in Yes (UPSTREAMS.md C2): its No book is
   * the Yes book seen from the other side, sides swapped and prices complemented.
   */
  bookState(m: SimMarket, index: 0 | 1, t: number): BookState {
    if (index === 1 && m.venue === 'wallet-prediction') return mirrorState(this.books.at(this.tokenPath(m, 0), t));
    return this.books.at(this.tokenPath(m, index), t);
  }

  /** The changes to one token's book in (from, to], in time order. */
  bookChanges(m: SimMarket, index: 0 | 1, from: number, to: number): Change[] {
    if (index === 1 && m.venue === 'wallet-prediction') return this.books.changes(this.tokenPath(m, 0), from, to).map(mirrorChange);
    return this.books.changes(this.tokenPath(m, index), from, to);
  }

  /** Full ladders of one outcome token, best first, as the venue holds them at `t`. */
  book(m: SimMarket, index: 0 | 1, t: number): { bids: [number, number][]; asks: [number, number][]; timestamp: number } {
    const state = this.bookState(m, index, t);
    return { ...ladders(state), timestamp: Math.min(state.ts, t) };
  }

  /** Price of the newest trade at or before `t` in the market's window, or null before any. */
  lastTrade(m: SimMarket, index: 0 | 1, t: number): number | null {
    const until = Math.min(t, m.end);
    for (let s = Math.floor(until / SECOND); s * SECOND >= m.start && s > Math.floor(until / SECOND) - 120; s--) {
      // A second whose trade found its side empty had no trade: the last one is earlier.
      const price = this.rand(m.venue, m.code, 'trade', s) < 0.25 ? this.tradeAt(m, index, s) : null;
      if (price !== null) return price;
    }
    return null;
  }

  /** The price of the trade at second `s`, or null when none happened then: a trade takes the touch on one side. */
  tradeAt(m: SimMarket, index: 0 | 1, s: number): number | null {
    if (s * SECOND < m.start || s * SECOND > m.end || this.rand(m.venue, m.code, 'trade', s) >= 0.25) return null;
    const b = this.book(m, index, s * SECOND);
    const side = this.rand(m.venue, m.code, 'side', s) < 0.5 ? b.bids : b.asks;
    return side.length ? side[0][0] : null;
  }

  /** The interface's displayed probability: the fair value, rounded as the venue shows it. */
  chance(m: SimMarket, index: 0 | 1, t: number): number {
    const up = this.fairUp(m, Math.min(t, m.end));
    return Math.round((index === 0 ? up : 1 - up) * 1000) / 1000;
  }

  volume(m: SimMarket, t: number): number {
    const elapsed = Math.min(1, Math.max(0, (t - m.start) / (m.end - m.start)));
    return Math.round(elapsed * (20_000 + this.rand(m.venue, m.code, 'vol') * 180_000) * 100) / 100;
  }

  liquidity(m: SimMarket): number {
    return Math.round((5_000 + this.rand(m.venue, m.code, 'liq') * 45_000) * 100) / 100;
  }

  participants(m: SimMarket, t: number): number {
    const elapsed = Math.min(1, Math.max(0, (t - m.start) / (m.end - m.start)));
    return Math.floor(elapsed * (100 + this.rand(m.venue, m.code, 'people') * 4000));
  }
}

export function roundTick(x: number): number {
  return Math.round(x / TICK) * TICK > 0 ? Number((Math.round(x / TICK) * TICK).toFixed(2)) : 0;
}

/** Abramowitz-Stegun approximation; plenty for a simulator. */
export function normalCdf(z: number): number {
  const t = 1 / (1 + 0.2316419 * Math.abs(z));
  const d = 0.3989423 * Math.exp((-z * z) / 2);
  const p = d * t * (0.3193815 + t * (-0.3565638 + t * (1.781478 + t * (-1.821256 + t * 1.330274))));
  return z > 0 ? 1 - p : p;
}

/** A Yes bid at tick k is a No ask at TICKS - k, and the other way round. */
function mirrorState(yes: BookState): BookState {
  const sizes = new Float64Array(2 * TICKS);
  for (let k = 1; k < TICKS; k++) {
    sizes[TICKS - k] = yes.sizes[TICKS + k];
    sizes[TICKS + (TICKS - k)] = yes.sizes[k];
  }
  return { ts: yes.ts, seq: yes.seq, sizes };
}

function mirrorChange(c: Change): Change {
  return { ...c, side: c.side === 'BUY' ? 'SELL' : 'BUY', tick: TICKS - c.tick };
}
