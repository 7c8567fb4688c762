// The stand-in's order books as a stream of small changes: each token's book starts from a
// seeded ladder at the market's open and then moves one level at a time, a few changes a second
// with bursts of tens, drifting after the fair value. The book at any instant is the replay of
// every change before it, so the REST answer, the WebSocket's snapshots and its deltas are one
// history, and a test can recompute any of them from (seed, time).
import { SECOND } from '../time.js';

/** Price ticks of 0.01: a side is sizes indexed by tick, 0 where no level rests. */
export const TICKS = 100;
const CHECKPOINT_MS = 10 * SECOND;
const MAX_TOKENS = 256;
/**
 * A token's seconds of changes kept once decided (at most ~60 KB a token): the REST face, each
 * stream's pump and a test's audit ask for the same recent seconds, and deciding one costs a seeded
 * draw and a ladder scan per change (most of the stand-in's CPU in a stream test, when not kept).
 */
const KEPT_SECONDS = 120;
const MIN_LEVELS = 8;
const MAX_LEVELS = 20;
/** How far the best levels may sit from the fair value (in ticks) before changes pull them back. */
const BAND = 3;

export type Side = 'BUY' | 'SELL';

export interface BookState {
  /** Time of the newest change applied (the venue's book timestamp). */
  ts: number;
  /** Changes applied since the market opened. */
  seq: number;
  /** Bid sizes by tick in [0, TICKS), ask sizes by tick in [TICKS, 2 * TICKS). */
  sizes: Float64Array;
}

export interface Change {
  t: number;
  seq: number;
  side: Side;
  tick: number;
  /** The level's new aggregate size; 0 removes it. */
  size: number;
}

/** What the model needs of a token: its identity for seeding and its fair value per second. */
export interface TokenPath {
  key: string;
  open: number;
  close: number;
  fair(second: number): number;
}

export class BookModel {
  /** Per token: the state at every CHECKPOINT_MS after the open that replay has reached, and the newest second replayed. */
  private readonly tokens = new Map<
    string,
    { checkpoints: BookState[]; cursor: { s: number; state: BookState }; seconds: Map<number, Change[]> }
  >();

  constructor(private readonly seed: number) {}

  /** The book as the venue holds it at `t`: every change at or before `t` applied. */
  at(token: TokenPath, t: number): BookState {
    const until = Math.min(t, token.close - 1);
    const s = Math.floor(until / SECOND);
    const state = this.boundary(token, s);
    if (s < this.openSecond(token)) return state;
    for (const c of this.second(token, state, s)) if (c.t <= until) apply(state, c);
    return state;
  }

  /** Changes in (from, to], in time order. */
  changes(token: TokenPath, from: number, to: number): Change[] {
    const out: Change[] = [];
    const until = Math.min(to, token.close - 1);
    if (until <= from) return out;
    let s = Math.max(Math.floor(from / SECOND), this.openSecond(token));
    const state = this.boundary(token, s);
    for (; s <= Math.floor(until / SECOND); s++) {
      for (const c of this.second(token, state, s)) {
        apply(state, c);
        if (c.t > from && c.t <= until) out.push(c);
      }
      this.remember(token, s + 1, state);
    }
    return out;
  }

  private openSecond(token: TokenPath): number {
    return Math.floor(token.open / SECOND);
  }

  /** The state before second `s`: every change of earlier seconds applied. */
  private boundary(token: TokenPath, s: number): BookState {
    const open = this.openSecond(token);
    let entry = this.tokens.get(token.key);
    if (entry) {
      // Most recently used last, so the oldest token is evicted first.
      this.tokens.delete(token.key);
    } else {
      const initial = this.initial(token);
      entry = { checkpoints: [initial], cursor: { s: open, state: initial }, seconds: new Map() };
      if (this.tokens.size >= MAX_TOKENS) this.tokens.delete(this.tokens.keys().next().value!);
    }
    this.tokens.set(token.key, entry);
    if (s <= open) return copy(entry.checkpoints[0]);
    const perCheckpoint = CHECKPOINT_MS / SECOND;
    const k = Math.floor((s - open) / perCheckpoint);
    while (entry.checkpoints.length <= k) {
      const i = entry.checkpoints.length;
      const next = copy(entry.checkpoints[i - 1]);
      for (let sec = open + (i - 1) * perCheckpoint; sec < open + i * perCheckpoint; sec++) {
        for (const c of this.second(token, next, sec)) apply(next, c);
      }
      entry.checkpoints.push(next);
    }
    const fromCursor = entry.cursor.s <= s && entry.cursor.s >= open + k * perCheckpoint;
    let sec = fromCursor ? entry.cursor.s : open + k * perCheckpoint;
    const state = copy(fromCursor ? entry.cursor.state : entry.checkpoints[k]);
    for (; sec < s; sec++) for (const c of this.second(token, state, sec)) apply(state, c);
    this.remember(token, s, state);
    return state;
  }

  private remember(token: TokenPath, s: number, state: BookState): void {
    const entry = this.tokens.get(token.key);
    if (entry && s > entry.cursor.s) entry.cursor = { s, state: copy(state) };
  }

  private initial(token: TokenPath): BookState {
    const sizes = new Float64Array(2 * TICKS);
    const rnd = prng(this.seed, token.key, 'open');
    const fair = Math.round(token.fair(this.openSecond(token)) * 100);
    const bestBid = clampTick(fair - 1 - Math.floor(rnd() * 2));
    const bestAsk = Math.max(bestBid + 1, clampTick(fair + 1 + Math.floor(rnd() * 2)));
    const levels = 10 + Math.floor(rnd() * 8);
    for (let i = 0; i < levels; i++) {
      if (bestBid - i >= 1) sizes[bestBid - i] = newSize(rnd);
      if (bestAsk + i <= TICKS - 1) sizes[TICKS + bestAsk + i] = newSize(rnd);
    }
    return { ts: token.open - 60 * SECOND, seq: 0, sizes };
  }

  /**
   * The changes of second `s`, decided from `state`, the book at the second's start (left
   * unchanged). The history is one, so a second's changes, once decided, are kept and shared.
   */
  private second(token: TokenPath, state: BookState, s: number): Change[] {
    if (s * SECOND >= token.close) return [];
    const kept = this.tokens.get(token.key)?.seconds;
    const known = kept?.get(s);
    if (known) return known;
    const decided = this.decide(token, state, s);
    if (kept) {
      kept.set(s, decided);
      if (kept.size > KEPT_SECONDS) kept.delete(kept.keys().next().value!);
    }
    return decided;
  }

  private decide(token: TokenPath, state: BookState, s: number): Change[] {
    const rnd = prng(this.seed, token.key, s);
    const sizes = state.sizes.slice();
    const fair = Math.max(2, Math.min(98, Math.round(token.fair(s) * 100)));
    let n = rnd() < 0.08 ? 20 + Math.floor(rnd() * 40) : Math.floor(rnd() * 5);
    if (outOfBand(sizes, fair)) n += 4;
    const offsets: number[] = [];
    for (let i = 0; i < n; i++) offsets.push(Math.floor(rnd() * 1000));
    offsets.sort((a, b) => a - b);
    const out: Change[] = [];
    let seq = state.seq;
    for (const offset of offsets) {
      const c = step(sizes, fair, rnd);
      if (!c) continue;
      sizes[(c.side === 'BUY' ? 0 : TICKS) + c.tick] = c.size;
      out.push({ t: s * SECOND + offset, seq: ++seq, ...c });
    }
    return out;
  }
}

function apply(state: BookState, c: Change): void {
  state.sizes[(c.side === 'BUY' ? 0 : TICKS) + c.tick] = c.size;
  state.ts = c.t;
  state.seq = c.seq;
}

/** One change that keeps the book near the fair value, or null when nothing sensible applies. */
function step(sizes: Float64Array, fair: number, rnd: () => number): Omit<Change, 't' | 'seq'> | null {
  const bid = bestBid(sizes);
  const ask = bestAsk(sizes);
  const needBid = bid === null || bid >= fair;
  const needAsk = ask === null || ask <= fair;
  if (needBid && bid !== null && levels(sizes, 0) > 1) return { side: 'BUY', tick: bid, size: 0 };
  if (needAsk && ask !== null && levels(sizes, TICKS) > 1) return { side: 'SELL', tick: ask, size: 0 };
  if (needBid) {
    const tick = Math.min(fair - 1, (ask ?? TICKS) - 1);
    if (tick >= 1 && tick !== bid) return { side: 'BUY', tick, size: newSize(rnd) };
  }
  if (needAsk) {
    const tick = Math.max(fair + 1, (bid ?? 0) + 1);
    if (tick <= TICKS - 1 && tick !== ask) return { side: 'SELL', tick, size: newSize(rnd) };
  }
  if (bid === null || ask === null || needBid || needAsk) return null;
  if (bid < fair - BAND && bid + 1 < ask) return { side: 'BUY', tick: bid + 1, size: newSize(rnd) };
  if (ask > fair + BAND && ask - 1 > bid) return { side: 'SELL', tick: ask - 1, size: newSize(rnd) };
  const side: Side = rnd() < 0.5 ? 'BUY' : 'SELL';
  const base = side === 'BUY' ? 0 : TICKS;
  const count = levels(sizes, base);
  const r = rnd();
  if (r < 0.12 && count < MAX_LEVELS) {
    const deepest = side === 'BUY' ? lowest(sizes, 0) : highest(sizes, TICKS);
    const tick = side === 'BUY' ? deepest - 1 : deepest + 1;
    if (tick >= 1 && tick <= TICKS - 1) return { side, tick, size: newSize(rnd) };
  }
  if (r < 0.22 && count > MIN_LEVELS) {
    return { side, tick: side === 'BUY' ? lowest(sizes, 0) : highest(sizes, TICKS), size: 0 };
  }
  // Most changes resize a level near the top: orders placed and cancelled at the touch.
  const depth = Math.min(count - 1, Math.floor(-Math.log(1 - rnd()) * 2.5));
  const tick = nthLevel(sizes, side, depth);
  const old = sizes[base + tick];
  // Mostly a nudge of the resting size, sometimes a fresh one, so sizes neither drift to zero nor explode.
  const size = rnd() < 0.3 ? newSize(rnd) : Math.max(1, Math.round(old * (0.7 + rnd() * 0.6) * 100) / 100);
  return size === old ? null : { side, tick, size };
}

function outOfBand(sizes: Float64Array, fair: number): boolean {
  const bid = bestBid(sizes);
  const ask = bestAsk(sizes);
  return bid === null || ask === null || bid >= fair || ask <= fair || bid < fair - BAND || ask > fair + BAND;
}

export function bestBid(sizes: Float64Array): number | null {
  for (let t = TICKS - 1; t >= 1; t--) if (sizes[t] > 0) return t;
  return null;
}

export function bestAsk(sizes: Float64Array): number | null {
  for (let t = 1; t < TICKS; t++) if (sizes[TICKS + t] > 0) return t;
  return null;
}

function lowest(sizes: Float64Array, base: number): number {
  for (let t = 1; t < TICKS; t++) if (sizes[base + t] > 0) return t;
  return -1;
}

function highest(sizes: Float64Array, base: number): number {
  for (let t = TICKS - 1; t >= 1; t--) if (sizes[base + t] > 0) return t;
  return -1;
}

function levels(sizes: Float64Array, base: number): number {
  let n = 0;
  for (let t = 1; t < TICKS; t++) if (sizes[base + t] > 0) n++;
  return n;
}

function nthLevel(sizes: Float64Array, side: Side, depth: number): number {
  let seen = 0;
  if (side === 'BUY') {
    for (let t = TICKS - 1; t >= 1; t--) if (sizes[t] > 0 && seen++ === depth) return t;
  } else {
    for (let t = 1; t < TICKS; t++) if (sizes[TICKS + t] > 0 && seen++ === depth) return t;
  }
  return -1;
}

/** Ladders best first, as [price, size] pairs. */
export function ladders(state: BookState): { bids: [number, number][]; asks: [number, number][] } {
  const bids: [number, number][] = [];
  const asks: [number, number][] = [];
  for (let t = TICKS - 1; t >= 1; t--) if (state.sizes[t] > 0) bids.push([t / 100, state.sizes[t]]);
  for (let t = 1; t < TICKS; t++) if (state.sizes[TICKS + t] > 0) asks.push([t / 100, state.sizes[TICKS + t]]);
  return { bids, asks };
}

function newSize(rnd: () => number): number {
  return Math.round((5 + rnd() * 4995) * 100) / 100;
}

function clampTick(t: number): number {
  return Math.max(1, Math.min(TICKS - 1, t));
}

function copy(s: BookState): BookState {
  return { ts: s.ts, seq: s.seq, sizes: s.sizes.slice() };
}

/** A small fast generator seeded from a string: one hash per token-second instead of one per value. */
function prng(seed: number, key: string, salt: string | number): () => number {
  let h = 0x811c9dc5 ^ seed;
  const text = `${key}|${salt}`;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  return mulberry32(h);
}

export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
