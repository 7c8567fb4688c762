// Polymarket's market channel, recorded: the socket's subscriptions (markets tracked, ended ones
// kept until the venue resolves them), each token's copy started from the venue's snapshot and
// moved by its changes, REST answers taken as checks or, for a token the stream lost, as the
// fallback, and every resulting book recorded as a row of its market (quotes beside them). Whether
// a copy is the venue's is proofs.ts's (best levels, hash, REST; a copy disproved, incomplete or
// unheard is resynced from REST and the span since its last proof is a gap); what the hash said of
// each book, and the rows that wait for it, verdicts.ts's. Nothing is recorded from guesses.
import type { Clock } from '../../clock.js';
import type { Config } from '../../config.js';
import type { Logger } from '../../log.js';
import type { Book, Market } from '../../records.js';
import type { MarketPoll, Quote } from '../adapter.js';
import { UpstreamError } from '../http.js';
import { displayedPrice } from './rest.js';
import {
  type ClobBookMessage,
  type ClobBookSummary,
  type ClobLastTradeMessage,
  type ClobMarketMessage,
  type ClobMarketResolvedMessage,
  type ClobPriceChange,
  type ClobPriceChangeMessage,
  tradeOf,
  type ClobTickSizeMessage,
  clobSummaries,
  sameLevels,
  stateLadders,
} from './book.js';
import { RELEASED_KEPT_MS, StreamProgress, type StreamSink, type VenueRecorder, advance, nextRowTs, windowDelivered } from '../stream.js';
import { type LostReason, MarketChannelClient } from '../channel.js';
import { MARKET_CHANNEL } from './channel.js';
import { type Verdict, Verdicts } from './verdicts.js';
import { CopyProofs, type Doubted, NO_STREAM_STATS, type ProofHost, type StreamStats, type Token, newToken } from './proofs.js';

export { NO_STREAM_STATS, type StreamStats };

const MAX_PENDING = 10_000;

/** A market's row a frame of books holds until its end: at its newest book that called for one (-Infinity: none did), and whether a book of it was taken. */
interface HeldRow {
  market: Market;
  ts: number;
  taken: boolean;
}
type HeldRows = Map<string, HeldRow>;
export class StreamRecorder implements VenueRecorder {
  readonly stats: StreamStats = { ...NO_STREAM_STATS };
  readonly channel: MarketChannelClient;
  private readonly tokens = new Map<string, Token>();
  private readonly lastTs = new Map<string, number>();
  private readonly lastMetricTs = new Map<string, number>();
  private closed = false;
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
  /** Tokens of markets let go, kept a while so that an event of their window arriving after is a gap, not silence. */
  private readonly released = new Map<string, Market>();
  /** Each market's newest book row a previous process spooled. */
  private spooled: ReadonlyMap<string, number> = new Map();
  /** Rows waiting for a book's hash verdict, per market (a market's rows stay in order behind them). */
  private readonly verdicts: Verdicts<Doubted, Token>;
  private readonly proofs: CopyProofs;

  constructor(
    config: Config,
    private readonly clock: Clock,
    private readonly log: Logger,
    private readonly sink: StreamSink,
  ) {
    const s = config.capture.stream;
    this.stallMs = s.stallMs;
    this.resolveWaitMs = s.resolveWaitMs;
    this.progress = new StreamProgress();
    this.verdicts = new Verdicts(clock, this.progress, (m, ts, recvTs, books) => this.sink.books(m, ts, recvTs, books));
    const host: ProofHost = {
      stats: this.stats,
      sink,
      verdicts: this.verdicts,
      requestBook: (assetId) => this.requestBook(assetId),
      live: (m) => this.live(m),
      rowTime: (m, ts) => nextRowTs(this.lastTs, m.market_id, ts, this.lastMetricTs.get(m.market_id)),
      snapshot: (t, summary, ts, recvTs, source) => this.snapshot(t, summary, ts, recvTs, source),
    };
    this.proofs = new CopyProofs(host, clock, s.stallMs);
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
        message: (msg, recvTs) => this.take(msg as ClobMarketMessage, recvTs, null),
        frame: (msgs, recvTs) => this.frame(msgs as ClobMarketMessage[], recvTs),
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
          this.tokens.set(o.token_id, newToken(m, o, now, this.spooled.get(m.market_id) ?? -Infinity));
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
    // Judged by each token's own events, not the stream's newest: another connection, or a starved sender,
    // can deliver later events of other markets before this one's last. A market goes when all its tokens may.
    // Books still in doubt wait for the check they asked for (a REST answer), up to a stall bound past the end.
    const staying = new Set(
      [...this.tokens.values()]
        .filter((t) => !this.streamOver(t, now) || (t.doubt && now < t.market.end_time + this.stallMs))
        .map((t) => t.market.market_id),
    );
    const ended = [...this.tokens].filter(([, t]) => !staying.has(t.market.market_id)).map(([id]) => id);
    this.verdicts.expire(now);
    for (const id of ended) {
      const t = this.tokens.get(id)!;
      this.verdicts.abandon(t);
      this.verdicts.release(t.market.market_id, true);
      this.proofs.settleDoubt(t, 'its market ended');
      this.proofs.loseUndelivered(t);
    }
    const release: string[] = [];
    for (const id of ended) {
      const { market: m, resolved } = this.tokens.get(id)!;
      this.lastTs.delete(m.market_id);
      this.lastMetricTs.delete(m.market_id);
      this.tokens.delete(id);
      this.released.set(id, m);
      const until = m.end_time + this.resolveWaitMs;
      if (m.resolved_time === null && !resolved && now < until) this.resolving.set(id, { market: m, until });
      else release.push(id);
    }
    for (const [id, m] of this.released) if (now >= m.end_time + RELEASED_KEPT_MS) this.released.delete(id);
    for (const [id, r] of this.resolving) {
      if (now < r.until) continue;
      this.resolving.delete(id);
      release.push(id);
    }
    if (release.length) this.channel.untrack(release);
  }

  /** Whether the stream has delivered all of `t`'s window (`windowDelivered`); unproved, the rest is a gap. */
  private streamOver(t: Token, now: number): boolean {
    const over = windowDelivered(t.market.end_time, t.heardTs, now, this.stallMs, (at) => this.channel.readPast(t.book.assetId, at));
    if (over === 'unproved')
      this.sink.lost(
        t.market,
        'stream_late',
        Math.max(t.heardTs, t.trackedAt),
        `the connection of ${t.label} never showed it was read past the market's end`,
      );
    return over !== 'no';
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
    for (const s of clobSummaries(poll.summaries ?? [])) {
      const t = this.tokens.get(s.asset_id);
      if (!t || t.market.market_id !== m.market_id) continue;
      const ts = Number(s.timestamp);
      // Once per REST answer (a book taken as the copy is noted again, in snapshot()).
      this.proofs.noteRestHash(s);
      this.noteRest(t, s);
      if (!t.streamed && !this.snapshotOverdue(t, recvTs)) continue;
      // Not synced, or its connection is down: the REST book is the fallback row (its gap stays open until the stream is back).
      if (!t.synced || !this.channel.healthy(s.asset_id)) {
        if (!t.synced || ts > t.book.ts) this.snapshot(t, s, ts, recvTs, 'rest');
        continue;
      }
      this.proofs.checkRest(t, s, ts, recvTs);
    }
  }

  /**
   * Whether a token's first snapshot is overdue: the stall bound has passed since its subscribe
   * frame first went out. REST is not taken before then (it would only race the snapshot); after,
   * it is, and the span since capture asked for the token is a gap. From the first frame, not the
   * current connection's: a token never synced loses nothing when its connection drops (it held
   * nothing), so a reconnect's frame must not start its wait again (found beside stress-ng --cpu 4:
   * a snapshot 70 s after the first frame, 5 s after a reconnect's, left the changes between unrecorded and ungapped).
   */
  private snapshotOverdue(t: Token, now: number, from: 'REST' | 'a later book' = 'REST'): boolean {
    const sent = this.channel.firstSubscribedAt(t.book.assetId);
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
    if (changed) this.proofs.recheck(t);
  }

  counts(): Record<string, number> {
    return { ...this.stats, connects: this.channel.stats.connects };
  }

  /**
   * Markets whose rows may not all be handed over: rows waiting for a verdict, and markets the clock
   * has passed the end of that are still tracked (their window's last changes may be on their way;
   * a market is let go by its own events, at a `track`, never by the clock).
   */
  holding(): string[] {
    const now = this.clock.now();
    const past = [...this.tokens.values()].filter((t) => t.market.end_time <= now).map((t) => t.market.market_id);
    return [...new Set([...this.verdicts.holding(), ...past])];
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
    // the exchange times of changes still on their way: their quotes would otherwise sort before it,
    // and books are stamped after the market's newest quote. Before the market's first book, the
    // chance waits for it (a quote at the poll's arrival stamped a restart's first books, of the
    // venue's instants before it, seconds late: 3.8 s beside stress-ng).
    const newest = this.lastTs.get(m.market_id);
    if (newest !== undefined) this.quote(m, newest, recvTs);
  }

  close(): void {
    this.verdicts.close(this.tokens.values());
    // A change REST showed and the stream had not delivered is after the copy's newest row, so inside
    // the downtime gap a restart writes from that row: no loss to report here (unlike at a market's end).
    for (const t of this.tokens.values()) this.proofs.settleDoubt(t, 'capture stopped');
    this.closed = true;
    this.channel.close();
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

  private take(msg: ClobMarketMessage, recvTs: number, held: HeldRows | null): void {
    // Snapshots answer subscriptions out of the stream's order (a new market's, stamped past an
    // ending one's changes still on their way): only the stream's own events say how far it has come.
    if (msg.event_type !== 'book') this.progress.saw(Number((msg as { timestamp?: unknown }).timestamp));
    this.heard(msg);
    this.message(msg, recvTs, held);
    this.verdicts.expire(recvTs);
  }

  /**
   * A frame of several messages. The venue's dump (a book per token subscribed) makes one row per
   * market, at its newest book's time (each book keeps its own as `exchange_ts`): taken one by one,
   * the first token's book was a row of its own and the second's a row 1 ms later, an instant the
   * venue never sent.
   */
  private frame(msgs: ClobMarketMessage[], recvTs: number): void {
    const held = msgs.every((m) => m.event_type === 'book') ? this.holdable(msgs as ClobBookMessage[]) : null;
    for (const msg of msgs) this.take(msg, recvTs, held);
    if (!held) return;
    for (const h of held.values()) {
      if (h.ts > -Infinity) this.record(h.market, h.ts, recvTs);
      if (h.taken && this.live(h.market)) this.recovered(h.market, recvTs);
    }
  }

  /**
   * Markets whose row a dump can hold until its end: two or more of its tokens' books, none with
   * changes waiting to be applied after its snapshot (their rows would come before the held one).
   */
  private holdable(books: ClobBookMessage[]): HeldRows {
    const by = new Map<string, { market: Market; tokens: number; quiet: boolean }>();
    for (const b of books) {
      const t = this.tokens.get(b.asset_id);
      if (!t) continue;
      const quiet = t.pending.length === 0 && Number.isFinite(Number(b.timestamp));
      const entry = by.get(t.market.market_id);
      if (!entry) by.set(t.market.market_id, { market: t.market, tokens: 1, quiet });
      else {
        entry.tokens++;
        entry.quiet &&= quiet;
      }
    }
    const held: HeldRows = new Map();
    for (const [id, e] of by) if (e.tokens > 1 && e.quiet) held.set(id, { market: e.market, ts: -Infinity, taken: false });
    return held;
  }

  /**
   * Moves each token's own progress by an event of it. A book-moving event of a market already let
   * go, from within its window, came too late to be recorded: the instant it moved is a gap.
   */
  private heard(msg: ClobMarketMessage): void {
    const type = msg.event_type;
    if (type !== 'book' && type !== 'price_change' && type !== 'last_trade_price' && type !== 'tick_size_change') return;
    const ts = Number((msg as { timestamp?: unknown }).timestamp);
    if (!Number.isFinite(ts)) return;
    const changes = (msg as ClobPriceChangeMessage).price_changes;
    const assets: unknown[] =
      type !== 'price_change' ? [(msg as { asset_id?: unknown }).asset_id] : Array.isArray(changes) ? changes.map((c) => c?.asset_id) : [];
    const late = new Map<string, Market>();
    for (const id of assets) {
      if (typeof id !== 'string') continue;
      const t = this.tokens.get(id);
      if (t) t.heardTs = Math.max(t.heardTs, ts);
      else if (type === 'book' || type === 'price_change') {
        const gone = this.released.get(id);
        if (gone && ts < gone.end_time) late.set(gone.market_id, gone);
      }
    }
    for (const m of late.values()) {
      this.stats.late++;
      this.sink.lost(m, 'stream_late', ts - 1, `a ${type} of ${ts} arrived after the market was let go`);
    }
  }

  private message(msg: ClobMarketMessage, recvTs: number, held: HeldRows | null): void {
    if (msg.event_type === 'book') {
      const b = msg as ClobBookMessage;
      const t = this.tokens.get(b.asset_id);
      if (t && Array.isArray(b.bids) && Array.isArray(b.asks)) {
        // A first book later than the bound (its subscription's snapshot withheld, this one sent after a trade):
        // the changes since the subscription never came, and the wait is a gap as if REST had been taken.
        if (!t.streamed) this.snapshotOverdue(t, recvTs, 'a later book');
        t.streamed = true;
        this.snapshot(t, b, Number(b.timestamp), recvTs, 'stream', held?.get(t.market.market_id));
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
      if (t.book.note({ last_trade_price: trade.price })) this.proofs.recheck(t);
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
      if (t.book.note({ tick_size: change.new_tick_size })) this.proofs.recheck(t);
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
  private snapshot(t: Token, s: ClobBookSummary, ts: number, recvTs: number, source: 'stream' | 'rest', held?: HeldRow): void {
    if (source === 'rest') this.noteRest(t, s);
    else t.book.note({ tick_size: s.tick_size, last_trade_price: s.last_trade_price });
    // The channel's books lack fields the venue hashes (minimum size, neg-risk, often the trade): REST has them, asked once.
    if (source === 'stream' && !t.book.knowsAllFields()) this.requestBook(t.book.assetId);
    if (t.synced && ts <= t.book.ts) {
      // Not newer than the copy (a book after a trade, a stale resubscribe): a check of that instant.
      const then = this.proofs.stateAt(t, ts);
      if (then && sameLevels(s, stateLadders(then))) {
        this.proofs.prove(t, ts);
        if (ts >= t.book.ts) this.proofs.vouch(t, 'snapshot');
      } else if (then) {
        this.stats.mismatches++;
        this.proofs.desync(t, 'stream_resync', `a full book at ${ts} differs from the streamed copy of that instant`);
        this.requestBook(t.book.assetId);
      }
    } else {
      if (t.synced && !sameLevels(s, t.book.ladders())) {
        this.sink.lost(t.market, 'stream_resync', this.proofs.lastProof(t), `a full book at ${ts} differs from the copy at ${t.book.ts}`);
      } else if (t.synced && t.doubt) this.proofs.proveByHash(t, ts);
      t.book.reset(s, ts);
      t.check = 'snapshot';
      t.history = [];
      this.proofs.remember(t);
      this.proofs.snapshotVerdict(t, s, ts);
      t.doubt = null;
      t.restAhead = null;
      t.verifiedTs = Math.max(t.verifiedTs, ts);
      this.stats.snapshots++;
      const pending = t.pending.filter((p) => p.ts > ts);
      t.pending = [];
      t.synced = true;
      if (source === 'rest') this.stats.resyncs++;
      if (held) held.ts = ts > t.recordedTs ? Math.max(held.ts, ts) : held.ts;
      else if (ts > t.recordedTs) this.record(t.market, ts, recvTs);
      // Changes that came while waiting are replayed under the same checks as live ones.
      for (const p of pending) {
        const outcome = this.proofs.applyChecked(t, p.changes, p.timestamp, p.ts);
        if (outcome === 'desynced') break;
        if (outcome === 'vouched') this.record(t.market, p.ts, recvTs);
      }
    }
    // A held row's market recovers once its row is recorded, at the frame's end.
    if (held) held.taken = true;
    else if (this.live(t.market)) this.recovered(t.market, recvTs);
  }

  /**
   * Every token of the market is vouched for again, from its arrival on, or from the market's
   * newest row where that was stamped later (a row is stamped past the one before it): the gap
   * must reach over every row recorded while it was open.
   */
  private recovered(m: Market, recvTs: number): void {
    this.sink.recovered(m, Math.max(recvTs, this.lastTs.get(m.market_id) ?? -Infinity));
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
      if (this.proofs.applyChecked(t, changes, msg.timestamp, ts) !== 'vouched') continue;
      // One row per market per message, however many of its tokens changed.
      if (!recorded.some((m) => m.market_id === t.market.market_id)) recorded.push(t.market);
    }
    for (const m of recorded) this.record(m, ts, recvTs);
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
          for (const s of clobSummaries(summaries)) {
            const t = this.tokens.get(s.asset_id);
            if (!t || this.closed) continue;
            this.proofs.noteRestHash(s);
            this.noteRest(t, s);
            if (!t.synced) this.snapshot(t, s, Number(s.timestamp), recvTs, 'rest');
            else if (this.channel.healthy(s.asset_id)) this.proofs.checkRest(t, s, Number(s.timestamp), recvTs);
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
      const from = Math.min(since, this.proofs.lastProof(t));
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
        ...t.book.textRow(m.condition_id ?? m.market_id),
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
