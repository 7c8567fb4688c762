// Event-driven books: each streamed token's book is kept from the venue's snapshot plus its
// changes, every resulting book is recorded, and each is checked against what the venue says of
// it: the best bid and ask on every change entry (a disagreement is proof of a wrong copy), the
// 10-field book hash (a match proves the copy; a mismatch only asks for REST's word, since the
// venue's hashed timestamp and fields drift), and REST books (equal levels at the same instant
// prove it, different ones disprove it). A token whose copy is disproved, incomplete or unheard
// (a silent or closed connection, no snapshot in time) is resynced from a full REST book, and the
// span since its last proof becomes a gap with the reason; nothing is recorded from guesses.
// What the hash said of each book is written with its rows (`hash_check`); a hash that did not
// reproduce waits up to a second of the venue's time for the trade it covered, and the market's
// rows wait with it.
import type { Clock } from '../../clock.js';
import type { Config } from '../../config.js';
import type { Logger } from '../../log.js';
import type { Book, Market, VerifiedBy } from '../../records.js';
import type { MarketPoll, Quote } from '../adapter.js';
import { UpstreamError } from '../http.js';
import { displayedPrice } from './rest.js';
import {
  type BookState,
  type ClobBookExtras,
  type ClobBookMessage,
  type ClobBookSummary,
  type ClobLastTradeMessage,
  type ClobMarketMessage,
  type ClobMarketResolvedMessage,
  type ClobPriceChange,
  type ClobPriceChangeMessage,
  tradeOf,
  type ClobTickSizeMessage,
  HASH_LAYOUTS,
  type HashLayout,
  LocalBook,
  sameLevels,
  stateLadders,
  wholeChange,
} from './book.js';
import { type BookStream, type StreamGapReason, StreamProgress, type StreamSink, advance } from '../../capture/stream.js';
import { type LostReason, MarketChannelClient } from '../channel.js';
import { MARKET_CHANNEL } from './channel.js';
import { type Awaiting, NO_HASH, type Verdict, Verdicts, decided } from './verdicts.js';

const MAX_PENDING = 10_000;
/** Checks by strength, strongest first: a later check replaces a weaker one only. */
const STRENGTH: Record<VerifiedBy, number> = { snapshot: 0, hash: 1, rest: 2, best_bid_ask: 3, none: 4 };
/** Books kept per token for checks that arrive late (a REST answer for an instant the stream has passed). */
const HISTORY = 128;
/** How far the venue's hashed timestamp may be from the message's (public recorders see a few ms). */
const HASH_SKEW_MS = 5;
/** After this many hashes in a row that no layout or skew reproduced, only one candidate is tried (and all, one time in PROBE_EVERY). */
const HASH_GIVE_WAY = 200;
const PROBE_EVERY = 50;
/** Whether the venue's best level (absent, or `empty` for an empty side) is the copy's `mine`. */
function venueBest(given: string | undefined, empty: number, mine: number | null): boolean {
  return given === undefined || given === '' || Number(given) === (mine ?? empty) || (mine === null && Number(given) === empty);
}

/** A book whose hash did not reproduce, with the hashed fields known when it was checked. */
interface Doubted extends Awaiting {
  ts: number;
  timestamp: string;
  hash: string;
  state: BookState;
  fields: ClobBookExtras;
}

interface Token {
  market: Market;
  index: number;
  label: string;
  book: LocalBook;
  synced: boolean;
  /** Venue time of the newest book proved equal to the venue's (snapshot, hash match, REST agreement). */
  verifiedTs: number;
  /** What vouches for the copy's current book: written with each row of it (`verified_by`). */
  check: VerifiedBy;
  /** What the venue's hash said of the copy's current book: written with each row of it (`hash_check`). */
  verdict: Verdict;
  /** Books whose hash did not reproduce, within EXPLAIN_MS: a hashed field arriving may still explain them. */
  awaiting: Doubted[];
  /** Whether the stream ever sent this token's book. */
  streamed: boolean;
  /** Clock time capture asked for the token: a gap for a snapshot that never came starts there. */
  trackedAt: number;
  /** A REST book newer than the copy, and when it was seen: the stream must catch up within the stall bound. */
  restAhead: { summary: ClobBookSummary; ts: number; at: number } | null;
  /** The copy's recent books, oldest first, for checks of instants the stream has passed. */
  history: BookState[];
  /**
   * Books whose hash no candidate reproduced since the last proof (`from`): each is proved later if
   * a trade or field it hashed arrives; any left when the next hash proves the copy were never
   * the venue's for certain, and the span becomes a gap.
   */
  doubt: { from: number; books: Doubted[] } | null;
  /** Venue time a REST check was last asked for after a hash mismatch (one per stall bound). */
  checkAskedTs: number;
  /** The token's newest recorded exchange time: an older snapshot (a stale resubscribe) adds no row. */
  recordedTs: number;
  /** The newest trade price (`last_trade_price`), the polled chance, and the quote last written. */
  lastTrade: number | null;
  chance: number | null;
  price: number | null;
  written: Quote | null;
  /** Changes that arrived while waiting for a snapshot, per message, applied after it when newer. */
  pending: { ts: number; timestamp: string; changes: ClobPriceChange[] }[];
  /** The venue announced the market's resolution while the token was tracked: not kept subscribed for it once ended. */
  resolved: boolean;
}

export interface StreamStats {
  snapshots: number;
  changes: number;
  rows: number;
  /** Changes whose book the venue's hash proved at once. */
  verified: number;
  /** Changes proved later: by a hash once a trade or field it covered arrived. */
  lateProofs: number;
  /** Books whose hash did not reproduce while no hash had for long (the formula taken as changed): not held in doubt. */
  undoubted: number;
  /** Changes of a token that did not know every hashed field yet (REST's minimum size and neg-risk): in doubt until they come. */
  fieldless: number;
  /** Changes whose hash did not reproduce but whose best bid and ask agreed with the venue's. */
  bestChecked: number;
  /** Changes with neither a reproduced hash nor the venue's best levels. */
  unverified: number;
  /** REST books that proved the copy. */
  restProofs: number;
  /** Copies disproved: best levels or a REST book at the same instant that differ. */
  mismatches: number;
  /** Change entries missing a field applying them needs. */
  incomplete: number;
  resyncs: number;
  /** REST fetches made at once for desynced tokens. */
  refetches: number;
  /** Tokens whose snapshot did not come within the stall bound of their subscription (taken from REST or a later book, with a gap). */
  snapshotTimeouts: number;
  /** Rows whose exchange time did not advance past the market's previous row. */
  nudged: number;
  /** `last_trade_price` messages taken as trade rows. */
  trades: number;
  /** `tick_size_change` messages taken (one per token). */
  tickChanges: number;
  /** Markets whose `market_resolved` was taken. */
  resolutions: number;
  /** `new_market` announcements seen: discovery finds the markets (with their windows, which these lack); counted only. */
  newMarkets: number;
}

export const NO_STREAM_STATS: Readonly<StreamStats> = {
  snapshots: 0,
  changes: 0,
  rows: 0,
  verified: 0,
  lateProofs: 0,
  undoubted: 0,
  fieldless: 0,
  bestChecked: 0,
  unverified: 0,
  restProofs: 0,
  mismatches: 0,
  incomplete: 0,
  resyncs: 0,
  refetches: 0,
  snapshotTimeouts: 0,
  nudged: 0,
  trades: 0,
  tickChanges: 0,
  resolutions: 0,
  newMarkets: 0,
};

export class StreamRecorder implements BookStream {
  readonly stats: StreamStats = { ...NO_STREAM_STATS };
  readonly channel: MarketChannelClient;
  private readonly tokens = new Map<string, Token>();
  private readonly lastTs = new Map<string, number>();
  private readonly lastMetricTs = new Map<string, number>();
  private closed = false;
  /** The hash layout that matched last, tried first. */
  private layout: HashLayout = HASH_LAYOUTS[0];
  /** Hashes in a row that no candidate reproduced. */
  private hashMisses = 0;
  /** Tokens waiting for a REST book, fetched together on the next tick. */
  private readonly refetch = new Set<string>();
  private refetching = false;
  private readonly stallMs: number;
  private readonly progress: StreamProgress;
  /**
   * Tokens of ended markets kept subscribed, books no longer taken, until the venue's
   * `market_resolved` says when the market resolved, or until `resolveWaitMs` past the end.
   */
  private readonly resolving = new Map<string, { market: Market; until: number }>();
  private readonly resolveWaitMs: number;
  /** Each market's newest book row a previous process spooled. */
  private spooled: ReadonlyMap<string, number> = new Map();
  /** Rows waiting for a book's hash verdict, per market (a market's rows stay in order behind them). */
  private readonly verdicts: Verdicts<Doubted, Token>;

  constructor(
    config: Config,
    private readonly clock: Clock,
    private readonly log: Logger,
    private readonly sink: StreamSink,
  ) {
    const s = config.capture.stream;
    this.stallMs = s.stallMs;
    this.resolveWaitMs = s.resolveWaitMs;
    this.progress = new StreamProgress(s.stallMs);
    this.verdicts = new Verdicts(clock, this.progress, (m, ts, recvTs, books) => this.sink.books(m, ts, recvTs, books));
    this.channel = new MarketChannelClient(
      {
        url: config.polymarket.wsUrl,
        protocol: MARKET_CHANNEL,
        maxAssetsPerConnection: s.maxAssetsPerConnection,
        pingMs: s.pingMs,
        stallMs: s.stallMs,
        backoffMinMs: s.backoffMinMs,
        backoffMaxMs: s.backoffMaxMs,
      },
      clock,
      log,
      {
        message: (msg, recvTs) => {
          // Snapshots answer subscriptions out of the stream's order (a new market's, stamped past an
          // ending one's changes still on their way): only the stream's own events say how far it has come.
          if ((msg as { event_type?: unknown }).event_type !== 'book')
            this.progress.saw(Number((msg as { timestamp?: unknown }).timestamp));
          this.message(msg as ClobMarketMessage, recvTs);
          this.verdicts.expire(recvTs);
        },
        lost: (assets, reason, since, detail) => this.lose(assets, reason, since, detail),
      },
    );
  }

  /** Streams these markets' tokens (open or about to open) and forgets ended ones. */
  track(markets: Market[], now: number): void {
    const wanted: string[] = [];
    for (const m of markets) {
      for (const o of m.outcomes) {
        if (!this.tokens.has(o.token_id)) {
          this.tokens.set(o.token_id, {
            market: m,
            index: o.index,
            label: o.label,
            book: new LocalBook(m.condition_id ?? '', o.token_id),
            synced: false,
            verifiedTs: -Infinity,
            check: 'none',
            verdict: NO_HASH,
            awaiting: [],
            recordedTs: this.spooled.get(m.market_id) ?? -Infinity,
            trackedAt: now,
            restAhead: null,
            history: [],
            doubt: null,
            checkAskedTs: -Infinity,
            streamed: false,
            lastTrade: null,
            chance: null,
            price: null,
            written: null,
            pending: [],
            resolved: false,
          });
        }
        wanted.push(o.token_id);
      }
    }
    this.channel.track(wanted);
    // A market before its window or past it may rightly be silent (a connection of a future market and an ended one, say).
    this.channel.owesNothing(
      new Set([
        ...[...this.tokens].filter(([, t]) => now < t.market.start_time || t.market.end_time <= now).map(([id]) => id),
        ...this.resolving.keys(),
      ]),
    );
    // Not at the clock's end: a poll can see the end before the stream has delivered what came before it.
    // Books still in doubt wait for the check they asked for (a REST answer), up to a stall bound past the end.
    const ended = [...this.tokens]
      .filter(([, t]) => this.progress.passed(t.market.end_time, now) && (!t.doubt || now >= t.market.end_time + this.stallMs))
      .map(([id]) => id);
    this.verdicts.expire(now);
    for (const id of ended) {
      const t = this.tokens.get(id)!;
      this.verdicts.abandon(t);
      this.verdicts.release(t.market.market_id, true);
      this.settleDoubt(t, 'its market ended');
    }
    const release: string[] = [];
    for (const id of ended) {
      const { market: m, resolved } = this.tokens.get(id)!;
      this.lastTs.delete(m.market_id);
      this.lastMetricTs.delete(m.market_id);
      this.tokens.delete(id);
      const until = m.end_time + this.resolveWaitMs;
      if (m.resolved_time === null && !resolved && now < until) this.resolving.set(id, { market: m, until });
      else release.push(id);
    }
    for (const [id, r] of this.resolving) {
      if (now < r.until) continue;
      this.resolving.delete(id);
      release.push(id);
    }
    if (release.length) this.channel.untrack(release);
  }

  resumeAfter(newest: ReadonlyMap<string, number>): void {
    this.spooled = newest;
    // Rows stay strictly after the previous process's, as within one process.
    for (const [id, ts] of newest) if (!this.lastTs.has(id)) this.lastTs.set(id, ts);
  }

  /** Whether every token of the market is synced on a healthy connection: REST books are then checks, not rows. */
  live(m: Market): boolean {
    return m.outcomes.every((o) => {
      const t = this.tokens.get(o.token_id);
      return !!t && t.synced && this.channel.healthy(o.token_id);
    });
  }

  tracks(m: Market): boolean {
    return m.outcomes.some((o) => this.tokens.has(o.token_id));
  }

  /**
   * A REST answer for a streamed market. For a token not synced it is the snapshot to resync
   * from. For a synced one it is a check: the same instant must hold the same levels, and a REST
   * book newer than the stream's must be matched by the stream within the stall bound.
   */
  rest(m: Market, poll: MarketPoll): void {
    if (this.closed || poll.books instanceof UpstreamError) return;
    const recvTs = poll.recvTs;
    for (const s of poll.summaries ?? []) {
      const t = this.tokens.get(s.asset_id);
      if (!t || t.market.market_id !== m.market_id) continue;
      const ts = Number(s.timestamp);
      this.noteRest(t, s);
      if (!t.streamed && !this.snapshotOverdue(t, recvTs)) continue;
      // Not synced, or its connection is down: the REST book is the fallback row (its gap stays open until the stream is back).
      if (!t.synced || !this.channel.healthy(s.asset_id)) {
        if (!t.synced || ts > t.book.ts) this.snapshot(t, s, ts, recvTs, 'rest');
        continue;
      }
      this.checkRest(t, s, ts, recvTs);
    }
  }

  /**
   * Whether a token's first snapshot is overdue: the stall bound has passed since its subscribe
   * frame went out. REST is not taken before then (it would only race the snapshot); after, it
   * is, and the span since capture asked for the token is a gap.
   */
  private snapshotOverdue(t: Token, now: number, from: 'REST' | 'a later book' = 'REST'): boolean {
    const sent = this.channel.subscribedAt(t.book.assetId);
    if (sent === undefined || now - sent <= this.stallMs) return false;
    if (!t.synced) {
      this.stats.snapshotTimeouts++;
      this.sink.lost(
        t.market,
        'stream_resync',
        t.trackedAt,
        `no snapshot of ${t.label} within ${this.stallMs} ms of its subscription; its book is taken from ${from}`,
      );
    }
    // From here on the token is served like one the stream has lost: REST is its fallback.
    t.streamed = true;
    return true;
  }

  /**
   * The hashed fields of a REST answer: the minimum size and neg-risk only REST carries; its tick
   * and last trade are of the moment it answered, which may be ahead of the stream, so they only
   * fill what the stream has not said yet (its `tick_size_change` and `last_trade_price` keep them).
   */
  private noteRest(t: Token, s: ClobBookSummary): void {
    let changed = t.book.note({ min_order_size: s.min_order_size, neg_risk: s.neg_risk });
    // Changes before the subscription are never announced: REST's tick and trade are taken once the stream is on.
    if (t.streamed) changed = t.book.note({ tick_size: s.tick_size, last_trade_price: s.last_trade_price }, false) || changed;
    if (changed) this.recheck(t);
  }

  /** A REST book of a synced token: proof, disproof, or a change the stream must still deliver. */
  private checkRest(t: Token, s: ClobBookSummary, ts: number, recvTs: number): void {
    if (ts <= t.book.ts) {
      const then = this.stateAt(t, ts);
      // Older than the books kept: nothing to compare with.
      if (!then) return;
      if (sameLevels(s, stateLadders(then))) return this.proveByRest(t, ts, ts);
      this.stats.mismatches++;
      this.desync(t, 'stream_resync', `REST book at ${ts} differs from the streamed copy of that instant`);
      this.snapshot(t, s, ts, recvTs, 'rest');
      return;
    }
    // Newer than the copy: equal levels prove the copy as of its own time (REST may stamp its
    // answer later than the book's last change); otherwise the change is on its way, or was lost.
    if (sameLevels(s, t.book.ladders())) return this.proveByRest(t, t.book.ts, ts);
    if (!t.restAhead || t.restAhead.ts < ts) t.restAhead = { summary: s, ts, at: t.restAhead?.at ?? recvTs };
    if (recvTs - t.restAhead.at > this.stallMs) {
      this.desync(t, 'stream_resync', `the stream never delivered the change REST showed at ${ts}; streamed copy at ${t.book.ts}`);
      this.snapshot(t, s, ts, recvTs, 'rest');
    }
  }

  /**
   * A REST book (of the venue's instant `restTs`) held the copy's levels at `at`: the copy is
   * proved there. Its rows say so only when REST's instant is the current book's own: a later
   * REST book equal to the copy proves the levels then, not that none changed and changed back since.
   */
  private proveByRest(t: Token, at: number, restTs: number): void {
    this.stats.restProofs++;
    t.restAhead = null;
    this.prove(t, at);
    if (restTs === t.book.ts) this.vouch(t, 'rest');
  }

  /**
   * The stream has passed a pending REST book's instant: the copy then must have held its levels.
   * What disproved it, if anything (the caller decides whether the copy is proved again since).
   */
  private settleRestAhead(t: Token): string | null {
    const ahead = t.restAhead;
    if (!ahead) return null;
    if (sameLevels(ahead.summary, t.book.ladders())) {
      this.proveByRest(t, t.book.ts, ahead.ts);
      return null;
    }
    if (t.book.ts <= ahead.ts) return null;
    const then = this.stateAt(t, ahead.ts);
    t.restAhead = null;
    // Passed so far that the book of that instant is no longer kept: nothing to compare with.
    if (!then) return null;
    if (sameLevels(ahead.summary, stateLadders(then))) {
      this.proveByRest(t, ahead.ts, ahead.ts);
      return null;
    }
    this.stats.mismatches++;
    return `the streamed copy never held the book REST showed at ${ahead.ts}`;
  }

  /** The copy's book in force at `ts`, or null when it is older than the books kept. */
  private stateAt(t: Token, ts: number): BookState | null {
    const h = t.history;
    for (let i = h.length - 1; i >= 0; i--) if (h[i].ts <= ts) return h[i];
    return null;
  }

  private remember(t: Token): void {
    // Trimmed in halves, not shifted per change: a shift moves every kept book, on the hottest path.
    if (t.history.push(t.book.state()) > 2 * HISTORY) t.history.splice(0, HISTORY);
  }

  private prove(t: Token, ts: number): void {
    if (ts > t.verifiedTs) t.verifiedTs = ts;
  }

  /**
   * A check vouched for the copy's current book: rows of it from now on carry the strongest check
   * it passed. Rows already written keep the check of their writing (a proof that comes later
   * never rewrites the spool), so the lake's labels are a lower bound.
   */
  private vouch(t: Token, by: VerifiedBy): void {
    if (STRENGTH[by] < STRENGTH[t.check]) t.check = by;
  }

  /** Where a gap of the token starts: its last proof, or before the first book in doubt since. */
  private lastProof(t: Token): number {
    return t.doubt ? Math.min(t.doubt.from, t.verifiedTs) : t.verifiedTs;
  }

  /** A hashed field changed (a trade, a tick, REST's fields): books in doubt may reproduce now. */
  private recheck(t: Token): void {
    this.verdicts.explain(t, (u) => this.reproduces(t, u));
    const d = t.doubt;
    if (!d || !t.synced) return;
    d.books = d.books.filter((u) => {
      const proved = (u.verdict.check !== undefined && u.verdict.check !== u.verdict.unexplained) || this.reproduces(t, u);
      if (!proved) return true;
      // The formula reproduces, if late.
      this.hashMisses = 0;
      this.stats.lateProofs++;
      this.prove(t, u.ts);
      if (u.ts >= t.book.ts) this.vouch(t, 'hash');
      return false;
    });
    if (!d.books.length) t.doubt = null;
  }

  /** Whether a book's hash reproduces with the hashed fields as they are now (the trade or tick that came since). */
  private reproduces(t: Token, u: Doubted): boolean {
    const now = t.book.fields();
    // The fields of its time, completed by those learnt since (REST's minimum size and neg-risk
    // may come after the first changes), or the fields as they are now.
    const then = {
      ...now,
      tick_size: u.fields.tick_size ?? now.tick_size,
      last_trade_price: u.fields.last_trade_price ?? now.last_trade_price,
    };
    return (
      HASH_LAYOUTS.some((layout) => t.book.hashWith(u.timestamp, layout, u.state, then) === u.hash) ||
      !!this.hashMatches(t, u.timestamp, u.ts, u.hash, u.state, true)
    );
  }

  /** A book whose hash did not reproduce: its verdict waits for a field that explains it. */
  private awaitVerdict(t: Token, ts: number, timestamp: string, hash: string): Doubted {
    const verdict: Verdict = { unexplained: t.book.knowsAllFields() ? 'mismatch' : 'unverifiable' };
    const u = { ts, timestamp, hash, state: t.history[t.history.length - 1], fields: t.book.fields(), verdict, at: this.clock.now() };
    t.verdict = verdict;
    this.verdicts.await(t, u);
    return u;
  }

  /** Markets with rows not yet handed over: a heartbeat must keep holding them. */
  holding(): string[] {
    return this.verdicts.holding();
  }

  /**
   * The venue's hash proved the copy at `ts`. Books in doubt before it that no later field
   * reproduced may have held a change lost and since overwritten: the span is a gap.
   */
  private proveByHash(t: Token, ts: number): void {
    const d = t.doubt;
    if (d) this.lostBefore(t, ts, `${d.books.length} book(s) whose hash did not reproduce before ${ts}`);
    else this.prove(t, ts);
  }

  /**
   * Whether the venue's hash reproduces: the last layout that matched at the message's time first,
   * then both layouts within the hashed timestamp's skew. While none has matched for long (the
   * venue changed its formula), only the first is tried, and all now and then.
   */
  private hashMatches(
    t: Token,
    timestamp: string,
    ts: number,
    hash: string,
    state?: BookState,
    probe = false,
  ): 'match' | 'explained' | null {
    if (t.book.hash(timestamp, this.layout, state) === hash) {
      this.hashMisses = 0;
      return 'match';
    }
    // Without every hashed field no search can reproduce the venue's hash, and its misses say nothing of the formula.
    if (!t.book.knowsAllFields()) return null;
    if (!probe && this.hashMisses >= HASH_GIVE_WAY && this.hashMisses++ % PROBE_EVERY !== 0) return null;
    for (const layout of this.layout === HASH_LAYOUTS[0] ? HASH_LAYOUTS : [...HASH_LAYOUTS].reverse()) {
      for (let d = 0; d <= HASH_SKEW_MS; d++) {
        for (const at of d === 0 ? [ts] : [ts - d, ts + d]) {
          if (d === 0 && layout === this.layout) continue;
          if (t.book.hash(String(at), layout, state) !== hash) continue;
          this.layout = layout;
          this.hashMisses = 0;
          return 'match';
        }
      }
    }
    // The fields as they were before their latest changes (a source ahead of the stream moved them).
    for (let e = 1; e <= t.book.earlierFields; e++) {
      if (t.book.hash(timestamp, this.layout, state, e) !== hash) continue;
      this.hashMisses = 0;
      return 'explained';
    }
    if (!probe) this.hashMisses++;
    return null;
  }

  /**
   * The poll's quotes of a streamed market give only its chance (the venue streams none); price
   * and last trade come from the streamed book and trades, so each quote is of a recorded book.
   */
  polled(m: Market, quotes: Quote[], recvTs: number): void {
    for (const q of quotes) {
      const t = this.tokenOf(m, q.outcome_index);
      if (t) t.chance = q.chance;
    }
    // Stamped in the stream's time (its newest book), not the poll's arrival, which runs ahead of
    // the exchange times of changes still on their way: their quotes would otherwise sort before it.
    this.quote(m, this.lastTs.get(m.market_id) ?? recvTs, recvTs);
  }

  close(): void {
    this.verdicts.close(this.tokens.values());
    for (const t of this.tokens.values()) this.settleDoubt(t, 'capture stopped');
    this.closed = true;
    this.channel.close();
  }

  /** Books still in doubt when no later proof can come: the span since the last proof is a gap. */
  private settleDoubt(t: Token, why: string): void {
    const d = t.doubt;
    if (!d || !t.synced) return;
    t.doubt = null;
    // Without every hashed field (REST never answered) a hash says nothing either way: the books
    // stand on their best levels, as any book the hash cannot check.
    if (!t.book.knowsAllFields()) return;
    this.sink.lost(t.market, 'stream_resync', d.from, `${d.books.length} book(s) whose hash did not reproduce, unproved when ${why}`);
  }

  private tokenOf(m: Market, index: number): Token | undefined {
    const o = m.outcomes.find((x) => x.index === index);
    return o ? this.tokens.get(o.token_id) : undefined;
  }

  /** Writes the market's quotes at `ts` if any outcome's changed since the last written. */
  private quote(m: Market, ts: number, recvTs: number): void {
    let changed = false;
    for (const o of m.outcomes) {
      const t = this.tokens.get(o.token_id);
      if (!t) continue;
      // Only a book that was recorded prices a quote (a copy reset to an older REST book is not).
      if (t.synced && t.book.ts >= t.recordedTs) t.price = displayedPrice(t.book.ladders(), t.lastTrade);
      const price = t.synced ? t.price : null;
      const w = t.written;
      // Called on every recorded change: a quote object is made only when one differs.
      if (!w || w.chance !== t.chance || w.price !== price || w.last_trade !== t.lastTrade) {
        changed = true;
        t.written = { outcome_index: o.index, chance: t.chance, price, last_trade: t.lastTrade };
      }
    }
    if (!changed) return;
    const quotes: Quote[] = [];
    for (const o of m.outcomes) {
      const written = this.tokens.get(o.token_id)?.written;
      if (written) quotes.push(written);
    }
    // A quote is of the newest recorded book: never stamped before it, and the next book comes after it.
    const at = advance(this.lastMetricTs, m.market_id, Math.max(ts, this.lastTs.get(m.market_id) ?? -Infinity));
    this.sink.metrics(m, at, recvTs, quotes);
  }

  private message(msg: ClobMarketMessage, recvTs: number): void {
    if (msg.event_type === 'book') {
      const b = msg as ClobBookMessage;
      const t = this.tokens.get(b.asset_id);
      if (t && Array.isArray(b.bids) && Array.isArray(b.asks)) {
        // A first book later than the bound (its subscription's snapshot withheld, this one sent after a trade):
        // the changes since the subscription never came, and the wait is a gap as if REST had been taken.
        if (!t.streamed) this.snapshotOverdue(t, recvTs, 'a later book');
        t.streamed = true;
        this.snapshot(t, b, Number(b.timestamp), recvTs, 'stream');
      }
    } else if (msg.event_type === 'price_change') {
      this.changes(msg as ClobPriceChangeMessage, recvTs);
    } else if (msg.event_type === 'last_trade_price') {
      const trade = msg as ClobLastTradeMessage;
      const t = this.tokens.get(trade.asset_id);
      const price = Number(trade.price);
      if (!t || typeof trade.price !== 'string' || !Number.isFinite(price)) return;
      t.lastTrade = price;
      const row = tradeOf(t.market, trade, recvTs);
      if (row) {
        this.stats.trades++;
        this.sink.trade?.(t.market, row);
      }
      if (t.book.note({ last_trade_price: trade.price })) this.recheck(t);
      this.quote(t.market, Number(trade.timestamp), recvTs);
    } else if (msg.event_type === 'market_resolved') {
      this.resolved(msg as ClobMarketResolvedMessage, recvTs);
    } else if (msg.event_type === 'new_market') {
      this.stats.newMarkets++;
    } else if (msg.event_type === 'tick_size_change') {
      const change = msg as ClobTickSizeMessage;
      const t = this.tokens.get(change.asset_id);
      const tick = Number(change.new_tick_size);
      if (!t || !Number.isFinite(tick) || tick <= 0) return;
      this.stats.tickChanges++;
      if (t.book.note({ tick_size: change.new_tick_size })) this.recheck(t);
      this.sink.tickSize(t.market, tick, recvTs);
    }
  }

  /**
   * The venue's resolution of a market it streams (or kept subscribed past its end for this): its
   * time and winning token. A winner that is not one of the market's tokens is not taken.
   */
  private resolved(msg: ClobMarketResolvedMessage, recvTs: number): void {
    const ts = Number(msg.timestamp);
    const winner = msg.winning_asset_id;
    if (typeof winner !== 'string' || !Number.isFinite(ts)) return;
    const market = [winner, ...(Array.isArray(msg.assets_ids) ? msg.assets_ids : [])]
      .map((id) => this.tokens.get(id)?.market ?? this.resolving.get(id)?.market)
      .find((m) => m !== undefined);
    const index = market?.outcomes.find((o) => o.token_id === winner)?.index;
    if (!market || index === undefined) return;
    this.stats.resolutions++;
    this.sink.resolved?.(market, index, ts, recvTs);
    for (const o of market.outcomes) {
      const t = this.tokens.get(o.token_id);
      if (t) t.resolved = true;
    }
    const release = market.outcomes.map((o) => o.token_id).filter((id) => this.resolving.delete(id));
    if (release.length) this.channel.untrack(release);
  }

  /**
   * A full book: the venue's snapshot on subscribe, its book after a trade, or a REST answer.
   * Equal to the copy at its instant, it proves the copy; newer and different, the changes in
   * between never arrived (a gap since the last proof) and the copy starts again from it.
   */
  private snapshot(t: Token, s: ClobBookSummary, ts: number, recvTs: number, source: 'stream' | 'rest'): void {
    if (source === 'rest') this.noteRest(t, s);
    else t.book.note({ tick_size: s.tick_size, last_trade_price: s.last_trade_price });
    // The channel's books lack fields the venue hashes (minimum size, neg-risk, often the trade): REST has them, asked once.
    if (source === 'stream' && !t.book.knowsAllFields()) this.requestBook(t.book.assetId);
    if (t.synced && ts <= t.book.ts) {
      // Not newer than the copy (a book after a trade, a stale resubscribe): a check of that instant.
      const then = this.stateAt(t, ts);
      if (then && sameLevels(s, stateLadders(then))) {
        this.prove(t, ts);
        if (ts >= t.book.ts) this.vouch(t, 'snapshot');
      } else if (then) {
        this.stats.mismatches++;
        this.desync(t, 'stream_resync', `a full book at ${ts} differs from the streamed copy of that instant`);
        this.requestBook(t.book.assetId);
      }
    } else {
      if (t.synced && !sameLevels(s, t.book.ladders())) {
        this.sink.lost(t.market, 'stream_resync', this.lastProof(t), `a full book at ${ts} differs from the copy at ${t.book.ts}`);
      } else if (t.synced && t.doubt) this.proveByHash(t, ts);
      t.book.reset(s, ts);
      t.check = 'snapshot';
      t.history = [];
      this.remember(t);
      this.snapshotVerdict(t, s, ts);
      t.doubt = null;
      t.restAhead = null;
      t.verifiedTs = Math.max(t.verifiedTs, ts);
      this.stats.snapshots++;
      const pending = t.pending.filter((p) => p.ts > ts);
      t.pending = [];
      t.synced = true;
      if (source === 'rest') this.stats.resyncs++;
      if (ts > t.recordedTs) this.record(t.market, ts, recvTs);
      // Changes that came while waiting are replayed under the same checks as live ones.
      for (const p of pending) {
        const outcome = this.applyChecked(t, p.changes, p.timestamp, p.ts);
        if (outcome === 'desynced') break;
        if (outcome === 'vouched') this.record(t.market, p.ts, recvTs);
      }
    }
    if (this.live(t.market)) this.sink.recovered(t.market, recvTs);
  }

  /** What the venue's hash says of a full book just taken (the channel's hashes a trade it sends after it, as changes do). */
  private snapshotVerdict(t: Token, s: ClobBookSummary & { hash?: string }, ts: number): void {
    const hash = typeof s.hash === 'string' && s.hash ? s.hash : undefined;
    if (hash === undefined) t.verdict = NO_HASH;
    else {
      const how = this.hashMatches(t, s.timestamp, ts, hash, undefined, true);
      if (how) t.verdict = decided(how);
      else this.awaitVerdict(t, ts, s.timestamp, hash);
    }
  }

  private changes(msg: ClobPriceChangeMessage, recvTs: number): void {
    const ts = Number(msg.timestamp);
    if (!Array.isArray(msg.price_changes) || !Number.isFinite(ts)) return;
    // Grouped by token in message order; most messages carry one token's changes, so no map.
    const groups: ClobPriceChange[][] = [];
    for (const c of msg.price_changes) {
      if (!c || !this.tokens.has(c.asset_id)) continue;
      this.stats.changes++;
      const group = groups.find((g) => g[0].asset_id === c.asset_id);
      if (group) group.push(c);
      else groups.push([c]);
    }
    const recorded: Market[] = [];
    for (const changes of groups) {
      const t = this.tokens.get(changes[0].asset_id)!;
      if (!t.synced) {
        // Bounded: past it the oldest go, and the checks after the snapshot tell whether that mattered.
        if (t.pending.push({ ts, timestamp: msg.timestamp, changes }) > MAX_PENDING) t.pending.shift();
        continue;
      }
      // Older than the copy: history the copy already holds (a late repeat).
      if (ts < t.book.ts) continue;
      if (this.applyChecked(t, changes, msg.timestamp, ts) !== 'vouched') continue;
      // One row per market per message, however many of its tokens changed.
      if (!recorded.some((m) => m.market_id === t.market.market_id)) recorded.push(t.market);
    }
    for (const m of recorded) this.record(m, ts, recvTs);
  }

  /**
   * Applies one message's changes to a synced token and checks them against what the venue said
   * of the book after them. A repeated message changes nothing and records nothing; an entry
   * missing a field, or best levels that differ, desync the token (no row from it).
   */
  private applyChecked(t: Token, changes: ClobPriceChange[], timestamp: string, ts: number): 'vouched' | 'unchanged' | 'desynced' {
    for (const c of changes) {
      if (wholeChange(c)) continue;
      this.stats.incomplete++;
      this.desync(t, 'stream_resync', `a price_change entry at ${timestamp} lacks a usable price, side or size`);
      return 'desynced';
    }
    let changed = false;
    // Best levels are the venue's after each entry, or after the message's last entry for the token: either is accepted.
    let laterBest: ClobPriceChange[] | null = null;
    let best = false;
    for (const c of changes as (ClobPriceChange & { size: string })[]) {
      changed = t.book.apply(c, ts) || changed;
      if (c.best_bid === undefined && c.best_ask === undefined) continue;
      best = true;
      if (!this.bestAgrees(t, c)) (laterBest ??= []).push(c);
    }
    if (laterBest?.some((c) => !this.bestAgrees(t, c))) {
      this.stats.mismatches++;
      const { bid, ask } = t.book.best();
      this.desync(t, 'stream_resync', `the venue's best bid/ask at ${timestamp} differ from the copy's (${bid}/${ask})`);
      return 'desynced';
    }
    // The venue signs the token's book after the message's last change for it.
    let hash: string | undefined;
    for (let i = changes.length - 1; i >= 0 && hash === undefined; i--) hash = changes[i].hash || undefined;
    if (!changed) {
      if (ts <= t.book.ts) return 'unchanged';
      return this.missedBefore(t, timestamp, ts, hash);
    }
    this.remember(t);
    // A new book: what vouched for the last one says nothing of it.
    t.check = 'none';
    // Settled before this instant's proof: an earlier instant REST disproved is a gap up to this one
    // when the hash proves it, and a resync when nothing does.
    const disproof = this.settleRestAhead(t);
    const how = hash !== undefined ? this.hashMatches(t, timestamp, ts, hash) : null;
    if (how) {
      this.stats.verified++;
      t.verdict = decided(how);
      this.vouch(t, 'hash');
      if (disproof) this.lostBefore(t, ts, disproof);
      else this.proveByHash(t, ts);
    } else if (disproof) {
      this.desync(t, 'stream_resync', disproof);
      return 'desynced';
    } else {
      if (hash !== undefined) {
        // While the venue's hashes reproduce at all, a book whose hash does not is in doubt until
        // proved; so is every book of a token still missing hashed fields (REST has not answered
        // yet), re-tried when they come.
        if (!t.book.knowsAllFields()) this.stats.fieldless++;
        if (!t.book.knowsAllFields() || this.hashMisses < HASH_GIVE_WAY) {
          const book = this.awaitVerdict(t, ts, timestamp, hash);
          if (!t.doubt) t.doubt = { from: t.verifiedTs, books: [book] };
          else if (t.doubt.books.push(book) > HISTORY) t.doubt.books.shift();
        } else {
          // The formula taken as changed: said so at once, never held in doubt or for an explanation.
          this.stats.undoubted++;
          t.verdict = decided('mismatch');
        }
        // A mismatch asks for REST's word at once (a copy gone wrong is then found within a round trip), not per message.
        if (ts - t.checkAskedTs > this.stallMs) {
          t.checkAskedTs = ts;
          this.requestBook(t.book.assetId);
        }
      }
      if (hash === undefined) t.verdict = NO_HASH;
      if (best) this.stats.bestChecked++;
      else this.stats.unverified++;
      if (best) this.vouch(t, 'best_bid_ask');
    }
    return 'vouched';
  }

  /** Whether an entry's best bid and ask (where given) are the copy's: "0" bid and "1" ask stand for an empty side. */
  private bestAgrees(t: Token, c: ClobPriceChange): boolean {
    const { bid, ask } = t.book.best();
    return venueBest(c.best_bid, 0, bid) && venueBest(c.best_ask, 1, ask);
  }

  /**
   * A newer message that changes nothing in the copy (it removes a level the copy lacks, or sets a
   * size the copy already holds): the change that made it necessary never arrived. When the venue's
   * hash still vouches for the copy, the span since the last proof is a gap and this instant a
   * row; without a hash to say so, the copy is resynced.
   */
  private missedBefore(t: Token, timestamp: string, ts: number, hash: string | undefined): 'vouched' | 'desynced' {
    const detail = `a change at ${timestamp} left the streamed copy as it was: a change before it never arrived`;
    t.book.ts = ts;
    const how = hash === undefined ? null : this.hashMatches(t, timestamp, ts, hash);
    if (!how) {
      this.desync(t, 'stream_resync', detail);
      return 'desynced';
    }
    t.verdict = decided(how);
    this.stats.verified++;
    this.vouch(t, 'hash');
    this.remember(t);
    this.lostBefore(t, ts, detail);
    return 'vouched';
  }

  /** The hash proves the copy at `ts` although something was lost before it: a gap since the last proof, up to this instant. */
  private lostBefore(t: Token, ts: number, detail: string): void {
    this.sink.lost(t.market, 'stream_resync', this.lastProof(t), detail);
    t.doubt = null;
    this.prove(t, ts);
    if (this.live(t.market)) this.sink.recovered(t.market, ts);
  }

  /** The token's copy is no longer the venue's: stop recording it until a full book arrives. */
  private desync(t: Token, reason: StreamGapReason, detail: string): void {
    if (!t.synced) return;
    t.synced = false;
    t.restAhead = null;
    t.pending = [];
    t.history = [];
    this.verdicts.abandon(t);
    const from = this.lastProof(t);
    t.doubt = null;
    this.sink.lost(t.market, reason, from, detail);
    this.requestBook(t.book.assetId);
  }

  /** Fetches REST books at once: a resync for a desynced token, a check for a synced one. A failure leaves it to the poll cycle. */
  private requestBook(assetId: string): void {
    if (!this.sink.fetchBooks) return;
    this.refetch.add(assetId);
    if (this.refetching) return;
    this.refetching = true;
    setImmediate(async () => {
      while (this.refetch.size) {
        const ids = [...this.refetch].slice(0, 500);
        for (const id of ids) this.refetch.delete(id);
        try {
          const { summaries, recvTs } = await this.sink.fetchBooks!(ids);
          this.stats.refetches++;
          for (const s of summaries) {
            const t = this.tokens.get(s.asset_id);
            if (!t || this.closed) continue;
            this.noteRest(t, s);
            if (!t.synced) this.snapshot(t, s, Number(s.timestamp), recvTs, 'rest');
            else if (this.channel.healthy(s.asset_id)) this.checkRest(t, s, Number(s.timestamp), recvTs);
          }
        } catch (err) {
          this.log.debug({ err: (err as Error).message, tokens: ids.length }, 'resync fetch failed; the next poll resyncs');
        }
      }
      this.refetching = false;
    });
  }

  private lose(assets: string[], reason: LostReason, since: number, detail: string): void {
    for (const id of assets) {
      const t = this.tokens.get(id);
      if (!t || !t.synced) continue;
      t.synced = false;
      t.pending = [];
      t.history = [];
      t.restAhead = null;
      this.verdicts.abandon(t);
      const from = Math.min(since, this.lastProof(t));
      t.doubt = null;
      // From the copy's last proof, not the last arrival: changes sent before the loss may never have come.
      this.sink.lost(t.market, reason, from, detail);
    }
  }

  /** One row per synced outcome of the market at the venue's time, kept strictly increasing per market. */
  private record(m: Market, exchangeTs: number, recvTs: number): void {
    const books: Book[] = [];
    const verdicts: Verdict[] = [];
    for (const o of m.outcomes) {
      const t = this.tokens.get(o.token_id);
      if (!t?.synced) continue;
      verdicts.push(t.verdict);
      t.recordedTs = Math.max(t.recordedTs, t.book.ts);
      const l = t.book.ladders();
      books.push({
        market_id: m.market_id,
        token_id: o.token_id,
        outcome_index: o.index,
        outcome: o.label,
        exchange_ts: t.book.ts,
        bid_prices: l.bid_prices,
        bid_sizes: l.bid_sizes,
        ask_prices: l.ask_prices,
        ask_sizes: l.ask_sizes,
        verified_by: t.check,
      });
    }
    if (!books.length) return;
    const ts = advance(this.lastTs, m.market_id, exchangeTs, this.stats, this.lastMetricTs.get(m.market_id));
    this.stats.rows += books.length;
    this.verdicts.row(m, ts, recvTs, books, verdicts);
    // A book change may move the displayed price (the midpoint, or the last trade when the spread is wide).
    this.quote(m, ts, recvTs);
  }
}
