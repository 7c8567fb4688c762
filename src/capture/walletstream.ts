// The wallet venue's books from its orderbook topics. Each message is a whole book of one token
// with its `updateTimestampMs`, delivered at most once, possibly out of order, and nothing is
// replayed after a reconnect. So a message is a row on its own (no hash to check, nothing to
// rebuild), a late one is a known miss (a gap over the instant it would have filled), and after
// a loss each token counts again from its next book (from the stream, or REST if that is sooner).
// A REST book newer than the stream's, still unmatched a stall bound later, means the stream
// dropped it: a gap, and the REST book is recorded.
import type { Clock } from '../clock.js';
import type { Config } from '../config.js';
import type { Logger } from '../log.js';
import type { Book, Market } from '../records.js';
import { type MarketPoll, type Quote, ladders } from '../venues/adapter.js';
import { UpstreamError } from '../venues/http.js';
import { type LostReason, MarketChannelClient, WALLET_TOPICS } from '../venues/marketchannel.js';
import { type BookStream, type StreamSink, advance } from './stream.js';

const TOPIC_PREFIX = 'web3_prediction_orderbook_';

interface Token {
  market: Market;
  index: number;
  book: Book | null;
  /** `updateTimestampMs` of the book held. */
  ts: number;
  /** Whether the book held is vouched for since the last loss. */
  synced: boolean;
  lostAt: number;
  restAhead: { ts: number; at: number } | null;
}

export interface WalletStreamStats {
  books: number;
  rows: number;
  duplicates: number;
  late: number;
  restRows: number;
  nudged: number;
}

export class WalletStreamRecorder implements BookStream {
  readonly stats: WalletStreamStats = { books: 0, rows: 0, duplicates: 0, late: 0, restRows: 0, nudged: 0 };
  readonly channel: MarketChannelClient;
  private readonly tokens = new Map<string, Token>();
  private readonly lastTs = new Map<string, number>();
  private readonly written = new Map<string, string>();
  private readonly stallMs: number;
  private closed = false;

  constructor(
    config: Config,
    clock: Clock,
    log: Logger,
    private readonly sink: StreamSink,
  ) {
    const s = config.capture.stream;
    this.stallMs = s.stallMs;
    this.channel = new MarketChannelClient({ url: config.wallet.wsUrl, protocol: WALLET_TOPICS, ...s }, clock, log, {
      message: (msg, recvTs) => this.message(msg as { stream: string; data: Record<string, unknown> }, recvTs),
      lost: (topics, reason, since, detail) => this.lose(topics, reason, since, detail),
    });
  }

  track(markets: Market[], now: number): void {
    const topics: string[] = [];
    for (const m of markets) {
      for (const o of m.outcomes) {
        if (!this.tokens.has(o.token_id))
          this.tokens.set(o.token_id, {
            market: m,
            index: o.index,
            book: null,
            ts: -Infinity,
            synced: false,
            lostAt: -Infinity,
            restAhead: null,
          });
      }
      topics.push(TOPIC_PREFIX + m.market_id);
    }
    this.channel.track(topics);
    const ended = [...new Set([...this.tokens.values()].filter((t) => t.market.end_time <= now).map((t) => t.market))];
    for (const m of ended) {
      for (const o of m.outcomes) this.tokens.delete(o.token_id);
      this.lastTs.delete(m.market_id);
      this.written.delete(m.market_id);
    }
    if (ended.length) this.channel.untrack(ended.map((m) => TOPIC_PREFIX + m.market_id));
  }

  tracks(m: Market): boolean {
    return m.outcomes.some((o) => this.tokens.has(o.token_id));
  }

  live(m: Market): boolean {
    return this.channel.healthy(TOPIC_PREFIX + m.market_id) && m.outcomes.every((o) => this.tokens.get(o.token_id)?.synced);
  }

  /** REST books: the fallback (and first) rows while the stream is not live, else a check that it missed nothing. */
  rest(m: Market, poll: MarketPoll): void {
    if (this.closed || poll.books instanceof UpstreamError) return;
    const healthy = this.channel.healthy(TOPIC_PREFIX + m.market_id);
    for (const b of poll.books) {
      const t = this.tokens.get(b.token_id);
      if (!t || b.exchange_ts === null) continue;
      if (!healthy) {
        // The stream is down: REST is the fallback row (its gap stays open until the stream is back).
        if (b.exchange_ts > t.ts) this.take(t, b, b.exchange_ts, poll.recvTs, true);
        continue;
      }
      // The stream is the source. A REST book newer than the stream's is normal for a moment (the
      // book is on its way); still undelivered a stall bound later, the stream dropped it.
      if (t.restAhead && t.ts >= t.restAhead.ts) t.restAhead = null;
      if (b.exchange_ts > t.ts && !t.restAhead) t.restAhead = { ts: b.exchange_ts, at: poll.recvTs };
      if (t.restAhead && poll.recvTs - t.restAhead.at > this.stallMs) {
        // A token never heard on the stream (quiet since it was subscribed) starts from REST without a gap.
        if (t.ts > -Infinity)
          this.sink.lost(t.market, 'stream_resync', t.ts, `the stream never delivered the book REST showed at ${t.restAhead.ts}`);
        t.restAhead = null;
        this.take(t, b, b.exchange_ts, poll.recvTs, true);
      } else if (!t.synced && b.exchange_ts === t.ts && poll.recvTs > t.lostAt) t.synced = true;
    }
    if (this.live(m)) this.sink.recovered(m, poll.recvTs);
  }

  /** The venue's displayed chance and price come with the poll; a row when any changed. */
  polled(m: Market, quotes: Quote[], recvTs: number): void {
    const text = JSON.stringify(quotes);
    if (this.written.get(m.market_id) === text) return;
    this.written.set(m.market_id, text);
    this.sink.metrics(m, recvTs, recvTs, quotes);
  }

  close(): void {
    this.closed = true;
    this.channel.close();
  }

  private message(msg: { stream: string; data: Record<string, unknown> }, recvTs: number): void {
    const d = msg.data;
    const t = this.tokens.get(String(d.tokenId));
    const ts = Number(d.updateTimestampMs);
    if (!t || !Number.isFinite(ts)) return;
    this.stats.books++;
    if (ts === t.ts) {
      this.stats.duplicates++;
      return;
    }
    if (ts < t.ts) {
      // Sent before the book already recorded: the instant it held is missed, and known to be.
      this.stats.late++;
      this.sink.lost(t.market, 'stream_late', ts - 1, `a book of ${ts} arrived after one of ${t.ts}`);
      if (this.live(t.market)) this.sink.recovered(t.market, t.ts);
      return;
    }
    let book: Book;
    try {
      book = {
        market_id: t.market.market_id,
        token_id: String(d.tokenId),
        outcome_index: t.index,
        outcome: t.market.outcomes.find((o) => o.index === t.index)?.label ?? String(d.outcome),
        exchange_ts: ts,
        ...ladders(d.bids, d.asks, `topic ${msg.stream}`),
      };
    } catch {
      return;
    }
    this.take(t, book, ts, recvTs, false);
    if (this.live(t.market)) this.sink.recovered(t.market, recvTs);
  }

  private take(t: Token, book: Book, ts: number, recvTs: number, fromRest: boolean): void {
    t.book = book;
    t.ts = ts;
    t.synced = true;
    if (fromRest) this.stats.restRows++;
    const m = t.market;
    const books = m.outcomes.map((o) => this.tokens.get(o.token_id)?.book).filter((b): b is Book => !!b);
    this.stats.rows += books.length;
    this.sink.books(m, advance(this.lastTs, m.market_id, ts, this.stats), recvTs, books);
  }

  private lose(topics: string[], reason: LostReason, since: number, detail: string): void {
    const lost = new Set(topics);
    const markets = new Set<Market>();
    for (const t of this.tokens.values()) {
      if (!lost.has(TOPIC_PREFIX + t.market.market_id) || !t.synced) continue;
      t.synced = false;
      t.lostAt = since;
      markets.add(t.market);
    }
    for (const m of markets) {
      const from = Math.min(since, ...m.outcomes.map((o) => this.tokens.get(o.token_id)?.ts ?? since));
      this.sink.lost(m, reason, from, detail);
    }
  }
}
