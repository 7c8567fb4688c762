// The wallet venue's books from its signed order-book stream (UPSTREAMS.md C2). Each push is one
// whole book per market, priced in Yes, with its `updateTimestampMs`: the Up outcome's book as
// sent, the Down outcome's the same book seen from the other side (sides swapped, prices
// complemented at the market's precision), a mapping checked against REST's own No book before it
// is trusted. Pushes come at most once, possibly out of order, and nothing is replayed after a
// reconnect; the stream pauses, sending nothing, while the venue's upstream is down. So a push is a
// row on its own (no hash to check, nothing to rebuild), a late one is a known miss (a gap over the
// instant it would have filled), a market counts as live only once the stream delivered it since
// the last loss, and a REST book newer than the stream's, still unmatched a stall bound later,
// means the stream dropped it or paused while the market traded: a gap, and the REST book is recorded.
import type { Clock } from '../../clock.js';
import type { Config } from '../../config.js';
import type { Logger } from '../../log.js';
import type { Book, Market, VerifiedBy } from '../../records.js';
import { type MarketPoll, type Quote, ladders } from '../adapter.js';
import { UpstreamError } from '../http.js';
import { type LostReason, MarketChannelClient } from '../channel.js';
import { walletTopics } from './channel.js';
import { RELEASED_KEPT_MS, type StreamGapReason, type StreamSink, type VenueRecorder, advance, windowDelivered } from '../stream.js';

const TOPIC_PREFIX = 'web3_prediction_orderbook_';

/** The Yes book's ladders seen from the No side: a Yes bid at p is a No ask at 1 - p (at `decimals`). */
export function mirrorLadders(
  yes: Pick<Book, 'bid_prices' | 'bid_sizes' | 'ask_prices' | 'ask_sizes' | 'size_decimals' | 'level_texts'>,
  decimals: number,
) {
  const scale = 10 ** decimals;
  // Integers, so 1 - 0.51 is 0.49 and not 0.48999999999999999.
  const complement = (p: number) => (scale - Math.round(p * scale)) / scale;
  return {
    bid_prices: yes.ask_prices.map(complement),
    bid_sizes: yes.ask_sizes,
    ask_prices: yes.bid_prices.map(complement),
    ask_sizes: yes.bid_sizes,
    // Written as the venue writes its books: prices at the market's precision, the sizes the other book's.
    price_decimals: decimals,
    size_decimals: yes.level_texts ? null : (yes.size_decimals ?? null),
    level_texts: null,
  };
}

interface Held {
  market: Market;
  books: Book[] | null;
  /** `updateTimestampMs` of the books held. */
  ts: number;
  /** Whether the stream delivered the market since the last loss: only then is it live. */
  synced: boolean;
  /**
   * A loss is reported and the stream has not delivered since: a later loss adds nothing. Not the
   * same as `!synced`: a market whose first book came from REST has had no loss, and its first one is reported.
   */
  lossOpen: boolean;
  /** Clock time capture asked for the market. */
  trackedAt: number;
  /** A REST book newer than the stream's, when it was seen, and its Yes levels: the stream must hold them at that instant. */
  restAhead: { ts: number; at: number; yes: Levels } | null;
  /**
   * The Yes books held lately (stream or REST), oldest first: what the copy held at an instant REST
   * showed, and until when REST showed it unchanged (`proved`, clock time a poll was sent).
   */
  history: Kept[];
  /** Whether REST's No book was seen to be the Yes book mirrored ('broken': the stream's No books are not trusted). */
  mirror: 'unchecked' | 'holds' | 'broken';
}

type Levels = Pick<Book, 'bid_prices' | 'bid_sizes' | 'ask_prices' | 'ask_sizes'>;

/**
 * A book the copy held from `ts`. Pushes come only on changes, so a quiet stream cannot tell an
 * unchanged book from a paused feed; a poll sent at `proved` whose answer was this book says it
 * was still the venue's then, so a loss found later starts there, not at the push.
 */
interface Kept {
  ts: number;
  yes: Levels;
  proved: number;
}

/** Yes books kept per market for REST's late word (a poll's round trip at most; pushes come on changes only). */
const HISTORY = 64;

function sameLevels(a: Levels, b: Levels): boolean {
  const same = (x: number[], y: number[]) => x.length === y.length && x.every((v, i) => v === y[i]);
  return (
    same(a.bid_prices, b.bid_prices) && same(a.bid_sizes, b.bid_sizes) && same(a.ask_prices, b.ask_prices) && same(a.ask_sizes, b.ask_sizes)
  );
}

export interface WalletStreamStats {
  books: number;
  rows: number;
  duplicates: number;
  late: number;
  restRows: number;
  nudged: number;
  malformed: number;
  mirrorChecks: number;
  /** REST books the stream passed without ever holding them: pushes lost, each a gap. */
  missed: number;
  /** Silences of the whole stream longer than the stall bound (venue time): each a gap for every market held. */
  pauses: number;
}

export class WalletStreamRecorder implements VenueRecorder {
  readonly stats: WalletStreamStats = {
    books: 0,
    rows: 0,
    duplicates: 0,
    late: 0,
    restRows: 0,
    nudged: 0,
    malformed: 0,
    mirrorChecks: 0,
    missed: 0,
    pauses: 0,
  };
  readonly channel: MarketChannelClient;
  private readonly markets = new Map<string, Held>();
  /** Markets let go lately (an hour past their end): a push of theirs that comes after is a known loss. */
  private readonly released = new Map<string, Market>();
  private readonly lastTs = new Map<string, number>();
  private readonly written = new Map<string, string>();
  /** Each market's newest book row a previous process spooled. */
  private spooled: ReadonlyMap<string, number> = new Map();
  private readonly stallMs: number;
  private readonly pauseMs: number;
  /**
   * The newest `updateTimestampMs` pushed, of any market: the stream's silences are measured on the
   * venue's clock, which a starved process does not stretch (pushes queued while it waits keep theirs).
   */
  private lastPushTs = -Infinity;
  private closed = false;

  constructor(
    config: Config,
    private readonly clock: Clock,
    private readonly log: Logger,
    private readonly sink: StreamSink,
  ) {
    const s = config.capture.stream;
    this.stallMs = s.stallMs;
    this.pauseMs = s.pauseMs;
    this.channel = new MarketChannelClient(
      // One aggregate topic carries every market: one connection, whatever the per-connection bound.
      {
        ...s,
        url: config.wallet.wsUrl,
        protocol: walletTopics(config.wallet.apiKey, config.wallet.apiSecret),
        maxAssetsPerConnection: Number.MAX_SAFE_INTEGER,
      },
      clock,
      log,
      {
        message: (msg, recvTs) => this.message(msg as Record<string, unknown>, recvTs),
        lost: (topics, reason, since, detail) => this.lose(topics, reason, since, detail),
      },
    );
  }

  track(markets: Market[], now: number): void {
    for (const m of markets) {
      if (!this.markets.has(m.market_id))
        this.markets.set(m.market_id, {
          market: m,
          books: null,
          ts: -Infinity,
          synced: false,
          lossOpen: false,
          trackedAt: now,
          restAhead: null,
          history: [],
          mirror: 'unchecked',
        });
    }
    this.channel.track(markets.map((m) => TOPIC_PREFIX + m.market_id));
    // Not at the clock's end: pushes of its last instants may still be on their way. Judged by the
    // market's own pushes, not the topic's newest: a starved sender can send one market's last pushes
    // behind another's later ones (seen beside stress-ng --cpu 8), and the topic's time would let it go early.
    const ended = [...this.markets.values()].filter((h) => this.streamOver(h, now)).map((h) => h.market);
    for (const m of ended) {
      this.markets.delete(m.market_id);
      this.lastTs.delete(m.market_id);
      this.written.delete(m.market_id);
      this.released.set(m.market_id, m);
    }
    for (const [id, m] of this.released) if (now >= m.end_time + RELEASED_KEPT_MS) this.released.delete(id);
    if (ended.length) this.channel.untrack(ended.map((m) => TOPIC_PREFIX + m.market_id));
  }

  /** Whether the stream has delivered all of the market's window (`windowDelivered`); unproved, the rest is a gap. */
  private streamOver(h: Held, now: number): boolean {
    const topic = TOPIC_PREFIX + h.market.market_id;
    const over = windowDelivered(h.market.end_time, h.ts, now, this.stallMs, (at) => this.channel.readPast(topic, at));
    if (over === 'unproved')
      this.sink.lost(h.market, 'stream_late', Math.max(h.ts, h.trackedAt), "the connection never showed it was read past the market's end");
    return over !== 'no';
  }

  /**
   * Markets the clock has passed the end of, still waiting for the stream to show it delivered their
   * window (let go only at a `track`): a heartbeat keeps holding them.
   */
  holding(): string[] {
    const now = this.clock.now();
    return [...this.markets.values()].filter((h) => h.market.end_time <= now).map((h) => h.market.market_id);
  }

  resumeAfter(newest: ReadonlyMap<string, number>): void {
    this.spooled = newest;
    for (const [id, ts] of newest) if (!this.lastTs.has(id)) this.lastTs.set(id, ts);
  }

  counts(): Record<string, number> {
    return { ...this.stats, connects: this.channel.stats.connects };
  }

  tracks(m: Market): boolean {
    return this.markets.has(m.market_id);
  }

  live(m: Market): boolean {
    const h = this.markets.get(m.market_id);
    return !!h && h.synced && h.mirror !== 'broken' && this.channel.healthy(TOPIC_PREFIX + m.market_id);
  }

  /** REST books: the fallback (and first) rows while the stream is not live, else a check that it missed nothing. */
  rest(m: Market, poll: MarketPoll): void {
    const h = this.markets.get(m.market_id);
    if (this.closed || !h || poll.books instanceof UpstreamError) return;
    const [asked, askedNo] = m.outcomes.map((o) => (poll.books as Book[]).find((b) => b.token_id === o.token_id));
    if (!asked || !askedNo || asked.exchange_ts === null) return;
    this.checkMirror(h, asked, askedNo);
    // The row: both books of one instant, or none this poll. The checks below: the Yes book as asked.
    const books = this.oneInstant(h, asked, askedNo);
    const ts = books ? books[0].exchange_ts! : asked.exchange_ts;
    const healthy = this.channel.healthy(TOPIC_PREFIX + m.market_id);
    if (!healthy && h.books === null) {
      // No book yet and the topic's connection not open: REST's book would leave unheard whatever
      // changes before the subscription is in force. It waits a stall bound for the connection;
      // after that it is the fallback, under a gap until the stream delivers.
      if (poll.recvTs - h.trackedAt <= this.stallMs || !books) return;
      this.take(h, books, ts, poll.recvTs, true);
      this.openLoss(h, 'disconnected', ts, 'the stream connection is not open: REST books stand in');
      return;
    }
    if (!healthy || h.mirror === 'broken') {
      // The stream is down, or its No books are not trusted: REST is the fallback row (a gap is open).
      if (!books || ts <= h.ts) return;
      // A connection seen down before its loss is reported (the close event still to come): the
      // loss starts at the copy's newest book, which REST's is about to replace, not at REST's.
      if (h.books !== null && !h.lossOpen && h.mirror !== 'broken') this.openLoss(h, 'disconnected', h.ts, 'the stream connection is down');
      this.take(h, books, ts, poll.recvTs, true);
      return;
    }
    if (h.books === null) {
      // Nothing held yet. A book unchanged since the topic's connection opened, asked for after it
      // opened, misses nothing (every change since is pushed): it is the first book, so a quiet
      // market (before its open, after a restart) is not left without one until it changes. A book
      // that changed since may race pushes still on their way: it waits for a stall bound of the
      // stream's silence. Live, either way, only once the stream delivers.
      const sent = this.channel.subscribedAt(TOPIC_PREFIX + m.market_id);
      const unchangedSince = sent !== undefined && (poll.sentTs ?? -Infinity) > sent && ts <= sent;
      if (books && sent !== undefined && (unchangedSince || poll.recvTs - sent > this.stallMs)) this.take(h, books, ts, poll.recvTs, true);
      return;
    }
    // The stream is the source. A REST book newer than the stream's is normal for a moment (the
    // push is on its way); still undelivered a stall bound later, the stream dropped it or paused
    // while the market traded. (Judged from the Yes book as asked, one instant whatever the No book's.)
    const yesAt = asked.exchange_ts;
    if (yesAt <= h.ts) this.prove(h, yesAt, asked, poll.sentTs);
    else if (!h.restAhead) h.restAhead = { ts: yesAt, at: poll.recvTs, yes: asked };
    if (h.restAhead && poll.recvTs - h.restAhead.at > this.stallMs) {
      // Live again at the stream's next push; REST's book stands meanwhile.
      const from = this.provedUntil(h, h.ts, h.restAhead.ts);
      this.openLoss(h, 'stream_resync', from, `the stream never delivered the book REST showed at ${h.restAhead.ts}`);
      if (books) this.take(h, books, ts, poll.recvTs, true);
    }
  }

  /**
   * REST's two books are two requests, and a change may fall between them: a row pairing them at
   * the older one's time would show the newer book before it existed (a backtest would see it
   * early). With the mapping known to hold, the newer book is the market's at its time and gives
   * the other; without it, books of two instants make no row (the next poll or push will).
   */
  private oneInstant(h: Held, yes: Book, no: Book): [Book, Book] | null {
    if (no.exchange_ts === yes.exchange_ts) return [yes, no];
    if (h.mirror !== 'holds') return null;
    const decimals = this.decimals(h.market);
    if (no.exchange_ts !== null && no.exchange_ts > yes.exchange_ts!)
      return [{ ...yes, ...mirrorLadders(no, decimals), exchange_ts: no.exchange_ts }, no];
    return [yes, { ...no, ...mirrorLadders(yes, decimals), exchange_ts: yes.exchange_ts }];
  }

  /**
   * REST's Yes and No books of one instant must be mirrors for the stream's derived No books to be
   * the venue's. Checked whenever REST shows both at one time; a market whose are not is recorded
   * from REST alone (with a gap over the stream's books), and said once.
   */
  private checkMirror(h: Held, yes: Book, no: Book): void {
    if (h.mirror === 'broken' || yes.exchange_ts !== no.exchange_ts) return;
    this.stats.mirrorChecks++;
    if (sameLevels(mirrorLadders(yes, this.decimals(h.market)), no)) {
      h.mirror = 'holds';
      return;
    }
    h.mirror = 'broken';
    h.lossOpen = true;
    this.log.warn(
      { market_id: h.market.market_id },
      "REST's No book is not the Yes book mirrored: the market's stream books are not trusted",
    );
    // From the copy's newest book, or this instant when there is none yet.
    this.sink.lost(
      h.market,
      'stream_resync',
      h.books === null ? (yes.exchange_ts ?? h.ts) : h.ts,
      `REST's No book at ${no.exchange_ts} is not the Yes book mirrored`,
    );
  }

  /** Prices' decimal places: the market's `decimalPrecision` (as its tick), two where unknown. */
  private decimals(m: Market): number {
    return m.tick_size ? Math.max(0, Math.round(-Math.log10(m.tick_size))) : 2;
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

  private message(d: Record<string, unknown>, recvTs: number): void {
    const h = this.markets.get(String(d.marketId));
    const ts = Number(d.updateTimestampMs);
    if (!Number.isFinite(ts)) return;
    if (!h) {
      // A push of a market already let go, from before its end: an instant missed, and known to be.
      const gone = this.released.get(String(d.marketId));
      if (gone && ts < gone.end_time) {
        this.stats.late++;
        this.sink.lost(gone, 'stream_late', ts - 1, `a book of ${ts} arrived after the market was let go`);
      }
      return;
    }
    this.noticeSilence(ts);
    this.stats.books++;
    if (ts === h.ts) {
      this.stats.duplicates++;
      if (!h.synced) this.resume(h, recvTs);
      return;
    }
    if (ts < h.ts) {
      // Sent before the book already recorded: the instant it held is missed, and known to be.
      this.stats.late++;
      this.sink.lost(h.market, 'stream_late', ts - 1, `a book of ${ts} arrived after one of ${h.ts}`);
      if (this.live(h.market)) this.sink.recovered(h.market, h.ts);
      return;
    }
    let yes: ReturnType<typeof ladders>;
    try {
      // [price, size] pairs, as strings (the wallet) or numbers (predict.fun's own feed).
      const pairs = (side: unknown) => (Array.isArray(side) ? side.map((l) => ({ price: l?.[0], size: l?.[1] })) : side);
      yes = ladders(pairs(d.bids), pairs(d.asks), `orderbook push of market ${h.market.market_id}`);
    } catch (err) {
      this.stats.malformed++;
      this.log.debug({ err: (err as Error).message }, 'malformed orderbook push skipped');
      return;
    }
    const [up, down] = [...h.market.outcomes].sort((a, b) => a.index - b.index);
    const book = (o: typeof up, l: ReturnType<typeof ladders>, verified_by: VerifiedBy): Book => ({
      market_id: h.market.market_id,
      token_id: o.token_id,
      outcome_index: o.index,
      outcome: o.label,
      exchange_ts: ts,
      ...l,
      verified_by,
    });
    const books = [book(up, yes, 'snapshot')];
    // The No book derived from the Yes book is the venue's once REST showed the mapping holds.
    if (down && h.mirror !== 'broken')
      books.push(book(down, mirrorLadders(yes, this.decimals(h.market)), h.mirror === 'holds' ? 'snapshot' : 'none'));
    this.take(h, books, ts, recvTs, false);
    this.settleRestAhead(h);
    this.resume(h, recvTs);
  }

  /**
   * The stream pauses, sending nothing, while the venue's upstream is down, and a quiet stream
   * cannot be told from quiet books: a push after no push of any market for longer than the pause
   * bound (venue time, STREAM_PAUSE_MS) ends a silence in which any market may have changed unseen. Every market
   * held and vouched for is then no longer, from its last proof (the silence began after it), until
   * the stream delivers it again; the market of this push is delivered now. A REST book proving a
   * market unchanged does not shorten it: the poll answers for its own instant, not the span.
   */
  private noticeSilence(ts: number): void {
    const last = this.lastPushTs;
    if (ts <= last) return;
    this.lastPushTs = ts;
    if (last === -Infinity || ts - last <= this.pauseMs) return;
    this.stats.pauses++;
    for (const h of this.markets.values()) {
      if (h.books === null || h.lossOpen) continue;
      this.openLoss(h, 'stream_paused', this.provedUntil(h, h.ts, last + 1), `no push of any market between ${last} and ${ts}`);
    }
  }

  /**
   * The stream has passed the instant of a REST book it had not delivered: the copy must have held
   * REST's levels then. If not, the stream lost the push of that book (a pause while the market
   * traded, or a drop that the next push overwrote): a gap from the book the copy held then up to now.
   */
  private settleRestAhead(h: Held): void {
    const ahead = h.restAhead;
    if (!ahead || h.ts < ahead.ts) return;
    h.restAhead = null;
    const then = this.heldAt(h, ahead.ts);
    // Older than the books kept: nothing to compare with.
    if (!then || sameLevels(then.yes, ahead.yes)) return;
    this.stats.missed++;
    const from = Math.min(Math.max(then.ts, then.proved), ahead.ts - 1);
    this.sink.lost(h.market, 'stream_resync', from, `the stream never delivered the book REST showed at ${ahead.ts}`);
  }

  /** The book the copy held at venue time `ts`, if still kept. */
  private heldAt(h: Held, ts: number): Kept | undefined {
    for (let i = h.history.length - 1; i >= 0; i--) if (h.history[i].ts <= ts) return h.history[i];
    return undefined;
  }

  /** A poll sent at `sent` answered the book of `ts`: if the copy held it then, it was still the venue's at `sent`. */
  private prove(h: Held, ts: number, yes: Levels, sent: number | undefined): void {
    const kept = this.heldAt(h, ts);
    if (sent !== undefined && kept?.ts === ts && sameLevels(kept.yes, yes)) kept.proved = Math.max(kept.proved, sent);
  }

  /**
   * Where a loss of the copy's book of `ts` starts: the last instant a poll proved it, never after
   * `before` (a change the venue stamped, which the two clocks must not reorder).
   */
  private provedUntil(h: Held, ts: number, before: number): number {
    const kept = h.history.at(-1);
    const proved = kept && kept.ts === ts ? kept.proved : ts;
    return Math.min(Math.max(ts, proved), before - 1);
  }

  /** The stream delivered the market since its last loss: live again, and its gap closes. */
  private resume(h: Held, recvTs: number): void {
    h.synced = true;
    h.lossOpen = false;
    if (this.live(h.market)) this.sink.recovered(h.market, recvTs);
  }

  private take(h: Held, books: Book[], ts: number, recvTs: number, fromRest: boolean): void {
    // A market whose No books are not trusted keeps REST's No book beside the stream's Yes book.
    if (!fromRest && books.length < h.market.outcomes.length && h.books) {
      for (const b of h.books) if (!books.some((x) => x.token_id === b.token_id)) books.push(b);
    }
    h.books = books;
    h.ts = ts;
    const yes = books.find((b) => b.outcome_index === 0);
    if (yes && h.history.push({ ts, yes, proved: ts }) > 2 * HISTORY) h.history.splice(0, HISTORY);
    // The book a previous process recorded at this instant or later: already in the spool.
    if (ts <= (this.spooled.get(h.market.market_id) ?? -Infinity)) return;
    if (fromRest) this.stats.restRows++;
    this.stats.rows += books.length;
    this.sink.books(h.market, advance(this.lastTs, h.market.market_id, ts, this.stats), recvTs, books);
  }

  private lose(topics: string[], reason: LostReason, since: number, detail: string): void {
    const lost = new Set(topics);
    for (const h of this.markets.values()) {
      if (!lost.has(TOPIC_PREFIX + h.market.market_id) || h.books === null || h.lossOpen) continue;
      // Nothing after `since` was heard; the copy's book is vouched for up to its last proof.
      this.openLoss(h, reason, this.provedUntil(h, h.ts, since + 1), detail);
    }
  }

  /** The market is no longer vouched for from `from` until the stream delivers it again. */
  private openLoss(h: Held, reason: StreamGapReason, from: number, detail: string): void {
    h.synced = false;
    h.lossOpen = true;
    h.restAhead = null;
    this.sink.lost(h.market, reason, from, detail);
  }
}
