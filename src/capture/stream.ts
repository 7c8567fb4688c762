// Event-driven books: each streamed token's book is kept from the venue's snapshot plus its
// changes, every resulting book is recorded, and each is checked against the venue's hash.
// A token whose copy cannot be vouched for (a hash that disagrees, a silent or closed
// connection, a REST answer newer than the stream) is resynced from a full REST book, and the
// span in between becomes a gap with the reason; nothing is recorded for it from guesses.
import type { Clock } from '../clock.js';
import type { Config } from '../config.js';
import type { Logger } from '../log.js';
import type { Book, Market } from '../records.js';
import type { MarketPoll, Quote } from '../venues/adapter.js';
import { UpstreamError } from '../venues/http.js';
import { displayedPrice } from '../venues/polymarket.js';
import {
  type ClobBookMessage,
  type ClobBookSummary,
  type ClobLastTradeMessage,
  type ClobMarketMessage,
  type ClobPriceChange,
  type ClobPriceChangeMessage,
  type ClobTickSizeMessage,
  LocalBook,
  clobBookHash,
} from '../venues/clob.js';
import { type LostReason, MARKET_CHANNEL, MarketChannelClient } from '../venues/marketchannel.js';

const MAX_PENDING = 10_000;

/**
 * A market's next row time: `ts` (the venue's), or 1 ms past the market's previous row (and past
 * `after`) when it would not advance it (counted in `nudged`), so a market's rows stay strictly ordered.
 */
export function advance(last: Map<string, number>, marketId: string, ts: number, stats?: { nudged: number }, after = -Infinity): number {
  const previous = Math.max(last.get(marketId) ?? -Infinity, after);
  const at = ts > previous ? ts : previous + 1;
  if (at !== ts && stats) stats.nudged++;
  last.set(marketId, at);
  return at;
}

export type StreamGapReason = LostReason | 'stream_resync' | 'stream_late';

/** What capture asks of a venue's book stream. */
export interface BookStream {
  /** Streams these markets (open or about to open) and forgets ended ones. */
  track(markets: Market[], now: number): void;
  tracks(m: Market): boolean;
  /** Whether every outcome is vouched for on a healthy connection: REST books are then checks, not rows. */
  live(m: Market): boolean;
  /** A REST answer for a streamed market: resync, fallback rows, or a check. */
  rest(m: Market, poll: MarketPoll): void;
  /** The poll's quotes of a streamed market. */
  polled(m: Market, quotes: Quote[], recvTs: number): void;
  /** Stops streaming; resolves once everything received was handed to the sink. */
  close(): void | Promise<void>;
}

/** What the recorder needs from capture: where rows and gaps go. */
export interface StreamSink {
  /** Books of one market at one instant; `ts` is strictly increasing per market. */
  books(market: Market, ts: number, recvTs: number, books: Book[]): void;
  /** Opens (or extends) the market's stream gap from `from`. */
  lost(market: Market, reason: StreamGapReason, from: number, detail: string): void;
  /** Every token of the market is vouched for again from `at`. */
  recovered(market: Market, at: number): void;
  /** Quotes of the market's outcomes at `ts`, written when any of chance, price or last trade changed. */
  metrics(market: Market, ts: number, recvTs: number, quotes: Quote[]): void;
  /** The venue changed the market's tick size (`tick_size_change`, sent for each of its tokens). */
  tickSize(market: Market, tickSize: number, recvTs: number): void;
  /** Full books over REST, to resync without waiting for the next poll. */
  fetchBooks?(tokenIds: string[]): Promise<{ summaries: (ClobBookSummary & { hash?: string })[]; recvTs: number }>;
}

interface Token {
  market: Market;
  index: number;
  label: string;
  book: LocalBook;
  synced: boolean;
  /** Venue time of the newest book known to equal the venue's (by hash or as a snapshot). */
  verifiedTs: number;
  /** Whether the stream ever sent this token's book. */
  streamed: boolean;
  /** A REST book newer than the copy, and when it was seen: the stream must catch up within the stall bound. */
  restAhead: { ts: number; at: number } | null;
  /** The token's newest recorded exchange time: an older snapshot (a stale resubscribe) adds no row. */
  recordedTs: number;
  /** The newest trade price (`last_trade_price`), the polled chance, and the quote last written. */
  lastTrade: number | null;
  chance: number | null;
  price: number | null;
  written: Quote | null;
  /** Changes that arrived while waiting for a snapshot, per message, applied after it when newer. */
  pending: { ts: number; timestamp: string; changes: ClobPriceChange[]; hash?: string }[];
}

export interface StreamStats {
  snapshots: number;
  changes: number;
  rows: number;
  verified: number;
  mismatches: number;
  resyncs: number;
  /** REST fetches made at once for desynced tokens. */
  refetches: number;
  /** Rows whose exchange time did not advance past the market's previous row. */
  nudged: number;
  /** `tick_size_change` messages taken (one per token). */
  tickChanges: number;
}

/** Whether the venue's hashes can be recomputed here; decided on the first snapshot. */
type HashCheck = 'unknown' | 'reproducible' | 'opaque';

export const NO_STREAM_STATS: Readonly<StreamStats> = {
  snapshots: 0,
  changes: 0,
  rows: 0,
  verified: 0,
  mismatches: 0,
  resyncs: 0,
  refetches: 0,
  nudged: 0,
  tickChanges: 0,
};

export class StreamRecorder implements BookStream {
  readonly stats: StreamStats = { ...NO_STREAM_STATS };
  readonly channel: MarketChannelClient;
  private readonly tokens = new Map<string, Token>();
  private readonly lastTs = new Map<string, number>();
  private readonly lastMetricTs = new Map<string, number>();
  private closed = false;
  private hashes: HashCheck = 'unknown';
  /** Tokens waiting for a REST book, fetched together on the next tick. */
  private readonly refetch = new Set<string>();
  private refetching = false;
  private readonly stallMs: number;

  constructor(
    config: Config,
    clock: Clock,
    private readonly log: Logger,
    private readonly sink: StreamSink,
  ) {
    const s = config.capture.stream;
    this.stallMs = s.stallMs;
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
        message: (msg, recvTs) => this.message(msg as ClobMarketMessage, recvTs),
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
            recordedTs: -Infinity,
            restAhead: null,
            streamed: false,
            lastTrade: null,
            chance: null,
            price: null,
            written: null,
            pending: [],
          });
        }
        wanted.push(o.token_id);
      }
    }
    this.channel.track(wanted);
    const ended = [...this.tokens].filter(([, t]) => t.market.end_time <= now).map(([id]) => id);
    for (const id of ended) {
      this.lastTs.delete(this.tokens.get(id)!.market.market_id);
      this.lastMetricTs.delete(this.tokens.get(id)!.market.market_id);
      this.tokens.delete(id);
    }
    if (ended.length) this.channel.untrack(ended);
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
   * from. For a synced one it is a check: the same instant must hold the same book, and a REST
   * book newer than the stream's by more than the stall bound means the stream missed changes.
   */
  rest(m: Market, poll: MarketPoll): void {
    if (this.closed || poll.books instanceof UpstreamError) return;
    const recvTs = poll.recvTs;
    for (const s of poll.summaries ?? []) {
      const t = this.tokens.get(s.asset_id);
      if (!t || t.market.market_id !== m.market_id) continue;
      const ts = Number(s.timestamp);
      // Before the stream's first snapshot, REST would only race it (and leave the span between unverified).
      if (!t.streamed && this.channel.coming(s.asset_id)) continue;
      // Not synced, or its connection is down: the REST book is the fallback row (its gap stays open until the stream is back).
      if (!t.synced || !this.channel.healthy(s.asset_id)) {
        if (!t.synced || ts > t.book.ts) this.snapshot(t, s, ts, recvTs, 'rest');
        continue;
      }
      const agrees = ts !== t.book.ts || clobBookHash(s) === t.book.hash(s.timestamp);
      // A REST book newer than the copy is normal for a moment (the change is on its way); still
      // missing a stall bound later, the stream lost it.
      if (t.restAhead && t.book.ts >= t.restAhead.ts) t.restAhead = null;
      if (ts > t.book.ts && !t.restAhead) t.restAhead = { ts, at: recvTs };
      const missed = t.restAhead !== null && recvTs - t.restAhead.at > this.stallMs;
      if (!agrees || missed) {
        const why = agrees
          ? `the stream never delivered the change REST showed at ${t.restAhead!.ts}`
          : `REST book at ${s.timestamp} differs`;
        this.desync(t, 'stream_resync', `${why}; streamed copy at ${t.book.ts}`);
        this.snapshot(t, s, ts, recvTs, 'rest');
      }
    }
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

  private message(msg: ClobMarketMessage, recvTs: number): void {
    if (msg.event_type === 'book') {
      const b = msg as ClobBookMessage;
      const t = this.tokens.get(b.asset_id);
      if (t) {
        t.streamed = true;
        this.snapshot(t, b, Number(b.timestamp), recvTs, 'stream');
      }
    } else if (msg.event_type === 'price_change') {
      this.changes(msg as ClobPriceChangeMessage, recvTs);
    } else if (msg.event_type === 'last_trade_price') {
      const trade = msg as ClobLastTradeMessage;
      const t = this.tokens.get(trade.asset_id);
      const price = Number(trade.price);
      if (!t || !Number.isFinite(price)) return;
      t.lastTrade = price;
      this.quote(t.market, Number(trade.timestamp), recvTs);
    } else if (msg.event_type === 'tick_size_change') {
      const change = msg as ClobTickSizeMessage;
      const t = this.tokens.get(change.asset_id);
      const tick = Number(change.new_tick_size);
      if (!t || !Number.isFinite(tick) || tick <= 0) return;
      this.stats.tickChanges++;
      this.sink.tickSize(t.market, tick, recvTs);
    }
  }

  private snapshot(t: Token, s: ClobBookSummary & { hash?: string }, ts: number, recvTs: number, source: 'stream' | 'rest'): void {
    if (s.hash !== undefined && this.hashes === 'unknown') {
      this.hashes = clobBookHash(s) === s.hash ? 'reproducible' : 'opaque';
      if (this.hashes === 'opaque')
        this.log.warn("the venue's book hashes cannot be recomputed here; streamed books are checked against REST books instead");
    }
    // A snapshot older than the copy it would replace (a stale resubscribe) is not taken while in sync.
    if (!t.synced || ts >= t.book.ts) {
      // A newer full book that differs from the copy means changes in between never arrived here
      // (the first REST book before the stream's, say): that span is not change-complete.
      if (t.synced && ts > t.book.ts && clobBookHash({ ...s, timestamp: String(ts) }) !== t.book.hash(String(ts))) {
        this.sink.lost(t.market, 'stream_resync', t.verifiedTs, `a full book at ${ts} differs from the copy at ${t.book.ts}`);
      }
      t.book.reset(s, ts);
      t.verifiedTs = ts;
      this.stats.snapshots++;
      const pending = t.pending.filter((p) => p.ts > ts);
      t.pending = [];
      t.synced = true;
      if (source === 'rest') this.stats.resyncs++;
      if (ts > t.recordedTs) this.record(t.market, ts, recvTs);
      // Changes that came while waiting are replayed under the same checks as live ones.
      for (const p of pending) {
        const outcome = this.applyChecked(t, p.changes, p.timestamp, p.ts, p.hash);
        if (outcome === 'desynced') break;
        if (outcome === 'vouched') this.record(t.market, p.ts, recvTs);
      }
    }
    if (this.live(t.market)) this.sink.recovered(t.market, recvTs);
  }

  private changes(msg: ClobPriceChangeMessage, recvTs: number): void {
    const ts = Number(msg.timestamp);
    // Grouped by token in message order; most messages carry one token's changes, so no map.
    const groups: ClobPriceChange[][] = [];
    for (const c of msg.price_changes ?? []) {
      if (!this.tokens.has(c.asset_id)) continue;
      this.stats.changes++;
      const group = groups.find((g) => g[0].asset_id === c.asset_id);
      if (group) group.push(c);
      else groups.push([c]);
    }
    const recorded: Market[] = [];
    for (const changes of groups) {
      const t = this.tokens.get(changes[0].asset_id)!;
      // The venue signs the token's book after the message's last change for it.
      let hash: string | undefined;
      for (let i = changes.length - 1; i >= 0 && hash === undefined; i--) hash = changes[i].hash || undefined;
      if (!t.synced) {
        // Bounded: past it the oldest go, and the hashes after the snapshot tell whether that mattered.
        if (t.pending.push({ ts, timestamp: msg.timestamp, changes, hash }) > MAX_PENDING) t.pending.shift();
        continue;
      }
      // Older than the copy: history the copy already holds (a late repeat).
      if (ts < t.book.ts) continue;
      if (this.applyChecked(t, changes, msg.timestamp, ts, hash) !== 'vouched') continue;
      // One row per market per message, however many of its tokens changed.
      if (!recorded.some((m) => m.market_id === t.market.market_id)) recorded.push(t.market);
    }
    for (const m of recorded) this.record(m, ts, recvTs);
  }

  /**
   * Applies one message's changes to a synced token and checks the venue's hash. A repeated
   * message changes nothing and records nothing.
   */
  private applyChecked(
    t: Token,
    changes: ClobPriceChange[],
    timestamp: string,
    ts: number,
    hash: string | undefined,
  ): 'vouched' | 'unchanged' | 'desynced' {
    let changed = false;
    for (const c of changes) changed = t.book.apply(c, ts) || changed;
    if (!changed) {
      if (ts <= t.book.ts) return 'unchanged';
      return this.missedBefore(t, timestamp, ts, hash);
    }
    if (hash !== undefined && this.hashes === 'reproducible') {
      if (t.book.hash(timestamp) !== hash) {
        this.stats.mismatches++;
        this.desync(t, 'stream_resync', `book hash at ${timestamp} differs from the venue's`);
        return 'desynced';
      }
      this.stats.verified++;
      t.verifiedTs = ts;
    }
    return 'vouched';
  }

  /**
   * A newer message that changes nothing in the copy (it removes a level the copy lacks, or sets a
   * size the copy already holds): the change that made it necessary never arrived. When the venue's
   * hash still vouches for the copy, the span since the last verified book is a gap and this
   * instant a row; without a hash to say so, the copy is resynced.
   */
  private missedBefore(t: Token, timestamp: string, ts: number, hash: string | undefined): 'vouched' | 'desynced' {
    const detail = `a change at ${timestamp} left the streamed copy as it was: a change before it never arrived`;
    t.book.ts = ts;
    if (hash === undefined || this.hashes !== 'reproducible' || t.book.hash(timestamp) !== hash) {
      this.desync(t, 'stream_resync', detail);
      return 'desynced';
    }
    this.stats.verified++;
    this.sink.lost(t.market, 'stream_resync', t.verifiedTs, detail);
    t.verifiedTs = ts;
    if (this.live(t.market)) this.sink.recovered(t.market, ts);
    return 'vouched';
  }

  /** The token's copy is no longer the venue's: stop recording it until a full book arrives. */
  private desync(t: Token, reason: StreamGapReason, detail: string): void {
    if (!t.synced) return;
    t.synced = false;
    t.restAhead = null;
    t.pending = [];
    this.sink.lost(t.market, reason, t.verifiedTs, detail);
    this.requestBook(t.book.assetId);
  }

  /** Resyncs from REST at once; a failure leaves it to the poll cycle, which offers every REST answer here. */
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
            if (t && !t.synced && !this.closed) this.snapshot(t, s, Number(s.timestamp), recvTs, 'rest');
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
      // From the copy's own time, not the last arrival: changes sent before the loss may never have come.
      this.sink.lost(t.market, reason, Math.min(since, t.verifiedTs), detail);
    }
  }

  /** One row per synced outcome of the market at the venue's time, kept strictly increasing per market. */
  private record(m: Market, exchangeTs: number, recvTs: number): void {
    const books: Book[] = [];
    for (const o of m.outcomes) {
      const t = this.tokens.get(o.token_id);
      if (!t?.synced) continue;
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
      });
    }
    if (!books.length) return;
    const ts = advance(this.lastTs, m.market_id, exchangeTs, this.stats, this.lastMetricTs.get(m.market_id));
    this.stats.rows += books.length;
    this.sink.books(m, ts, recvTs, books);
    // A book change may move the displayed price (the midpoint, or the last trade when the spread is wide).
    this.quote(m, ts, recvTs);
  }
}
