// Records the reference prices of Polymarket's price socket (rtds.ts): every observation of the
// configured coins' symbols once, and a gap wherever one may have been missed. The socket sends
// no sequence, so nothing says an observation was lost; what can be said is when a symbol was
// not being heard: the socket down or silent (the channel client reports it), or one symbol silent
// while the others flow, judged on the observations' own times (the venue's clock), so neither a
// starved process nor a fast simulated clock can fake one. Such a gap runs from the symbol's last
// observation before it to its first after (capture ends it at that row), so every instant between
// two recorded observations is either vouched for (heard without a break) or inside a gap.
import type { Clock } from '../../clock.js';
import type { Config, Venue } from '../../config.js';
import type { Logger } from '../../log.js';
import {
  REFERENCE_SOURCES,
  REFERENCE_VENUE,
  type ReferenceRow,
  type ReferenceSource,
  referenceFeed,
  referenceSymbol,
} from '../../records.js';
import { type LostReason, MarketChannelClient } from '../channel.js';
import { RTDS_TOPICS, observationsOf, referenceRow, rtdsProtocol } from './rtds.js';

/** One symbol of one source, the unit gaps are kept by. */
export interface ReferenceFeed {
  /** `<source>:<symbol>`, as the gaps' `market_id` names it. */
  id: string;
  /** The venue whose socket relays it, under which the lake keeps it (for every window). */
  venue: Venue;
  source: ReferenceSource;
  symbol: string;
  coin: string;
}

/** Where the recorder's rows and gaps go (capture's spool and gap ledger). */
export interface ReferenceSink {
  /** New observations of `feed`, each once. */
  rows(feed: ReferenceFeed, rows: ReferenceRow[]): void;
  /** Nothing of `feed` after its observation at `from` can be vouched for. */
  lost(feed: ReferenceFeed, from: number, reason: LostReason, detail: string): void;
}

export interface ReferenceCounts {
  observations: number;
  duplicates: number;
  /** Observations of symbols not recorded (other coins). */
  ignored: number;
  stalls: number;
}

/** The feeds of `coins` on both topics. */
export function referenceFeeds(coins: readonly string[]): ReferenceFeed[] {
  return REFERENCE_SOURCES.flatMap((source) =>
    coins.map((coin) => {
      const symbol = referenceSymbol(source, coin);
      return { id: referenceFeed(source, symbol), venue: REFERENCE_VENUE, source, symbol, coin };
    }),
  );
}

/** How many recent observation times of a feed are remembered to drop a repeat. */
const SEEN_KEPT = 256;

interface FeedState {
  feed: ReferenceFeed;
  /** The newest observation time recorded (-Infinity: none yet in this process). */
  newest: number;
  /** Where the open gap began, or null while the feed is heard. */
  downFrom: number | null;
  seen: Set<number>;
}

export class ReferenceRecorder {
  readonly counts: ReferenceCounts = { observations: 0, duplicates: 0, ignored: 0, stalls: 0 };
  private readonly client: MarketChannelClient;
  private readonly feeds = new Map<string, FeedState>();
  private startedAt = Infinity;
  /** The newest observation time of any feed: how far the venue's clock has been heard. */
  private heardTo = -Infinity;
  /** The clock time this recorder's thread last ran at (see `reached`). */
  private tickAt = Infinity;
  private ticker: NodeJS.Timeout | null = null;

  constructor(
    private readonly config: Config,
    private readonly clock: Clock,
    private readonly log: Logger,
    private readonly sink: ReferenceSink,
  ) {
    for (const feed of referenceFeeds(config.capture.reference.coins))
      this.feeds.set(feed.id, { feed, newest: -Infinity, downFrom: null, seen: new Set() });
    const stream = config.capture.stream;
    this.client = new MarketChannelClient(
      {
        url: config.polymarket.rtdsUrl,
        protocol: rtdsProtocol,
        maxAssetsPerConnection: REFERENCE_SOURCES.length,
        // The socket drops a client that does not PING every 5 s.
        pingMs: Math.min(stream.pingMs, 5_000),
        stallMs: config.capture.reference.stallMs,
        backoffMinMs: stream.backoffMinMs,
        backoffMaxMs: stream.backoffMaxMs,
      },
      clock,
      log,
      {
        message: (msg, recvTs) => this.message(msg, recvTs),
        lost: (topics, reason, _since, detail) => this.topicsLost(topics, reason, detail),
      },
    );
  }

  /** Connects and subscribes: nothing before now is this process's to vouch for. */
  start(): void {
    this.startedAt = this.tickAt = this.clock.now();
    this.ticker = setInterval(() => (this.tickAt = this.clock.now()), 50);
    this.client.track(REFERENCE_SOURCES.map((s) => RTDS_TOPICS[s]));
  }

  /**
   * The clock time the thread receiving the socket has run at: a paced clock (a fill, a test) holds
   * the venue's time to it, so a starved process does not see the socket's observations pile up.
   */
  reached(): number {
    return this.tickAt;
  }

  /** The feeds recorded, for a restart's downtime gaps. */
  feedList(): ReferenceFeed[] {
    return [...this.feeds.values()].map((s) => s.feed);
  }

  close(): void {
    if (this.ticker) clearInterval(this.ticker);
    this.client.close();
  }

  private message(msg: object, recvTs: number): void {
    for (const o of observationsOf(msg)) {
      // Any symbol's observation moves the venue's clock on, ours or not: a socket sending only
      // other coins (doge, hype) is not silent, but our symbols in it are.
      if (o.ts > this.heardTo) this.heardTo = o.ts;
      const state = this.feeds.get(referenceFeed(o.source, o.symbol));
      if (!state) {
        this.counts.ignored++;
        continue;
      }
      if (state.seen.has(o.ts)) {
        this.counts.duplicates++;
        continue;
      }
      state.seen.add(o.ts);
      if (state.seen.size > SEEN_KEPT) state.seen.delete(state.seen.values().next().value!);
      this.sink.rows(state.feed, [referenceRow(o, recvTs)]);
      this.counts.observations++;
      // An older observation arriving late ends nothing: the gap is after the newest one held.
      if (state.downFrom !== null && o.ts > state.downFrom) state.downFrom = null;
      if (o.ts > state.newest) state.newest = o.ts;
    }
    this.watchSilence();
  }

  private topicsLost(topics: string[], reason: LostReason, detail: string): void {
    for (const state of this.feeds.values()) if (topics.includes(RTDS_TOPICS[state.feed.source])) this.lose(state, reason, detail);
  }

  /** A symbol left behind by the others' observations: the socket's own silence is the channel client's to see. */
  private watchSilence(): void {
    const bound = this.config.capture.reference.stallMs;
    for (const state of this.feeds.values()) {
      const since = state.newest > -Infinity ? state.newest : this.startedAt;
      if (state.downFrom !== null || this.heardTo - since <= bound) continue;
      this.counts.stalls++;
      this.lose(state, 'stream_stalled', `no ${state.feed.symbol} observation for ${this.heardTo - since} ms while others came`);
    }
  }

  private lose(state: FeedState, reason: LostReason, detail: string): void {
    if (state.downFrom !== null) return;
    // Before the first observation of this process, from the subscription: what came before it
    // is a previous process's (its downtime gap) or was never claimed.
    state.downFrom = state.newest > -Infinity ? state.newest : this.startedAt;
    this.log.warn({ feed: state.feed.id, reason }, 'reference feed lost');
    this.sink.lost(state.feed, state.downFrom, reason, detail);
  }
}
