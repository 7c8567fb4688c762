// What capture asks of a venue's book stream and gives it (the venue's recorder in
// venues/<venue>/recorder.ts speaks the protocol), and what every recorder shares: when a
// market's last instants are in, and one strictly increasing row time per market.
import type { Book, Market, TradeRow } from '../records.js';
import type { Quote, MarketPoll, VenueBookSummary } from './adapter.js';
import type { LostReason, ReadState } from './channel.js';

/**
 * How far a stream has delivered, so that a market is let go only once its last instants are in:
 * a message stamped at its end or later has come, or a stall bound has passed since the end. The
 * clock alone would let go a market whose last changes still wait behind a busy thread; the
 * silence of a connection left with markets not open or ended only is not a stall (`MarketChannelClient.owesNothing`).
 */
export class StreamProgress {
  private newest = -Infinity;

  saw(exchangeTs: number): void {
    if (exchangeTs > this.newest) this.newest = exchangeTs;
  }

  /** The newest venue time the stream's own events have reached. */
  latest(): number {
    return this.newest;
  }
}

/** How long a recorder keeps the markets it let go: an event of their window arriving later is a gap, not silence. */
export const RELEASED_KEPT_MS = 3_600_000;

/** Whether what ends at `end` has nothing more to come by `now`: a message stamped `newest` reached it, or the bound passed. */
export function endPassed(end: number, newest: number, now: number, boundMs: number): boolean {
  return end <= now && (newest >= end || now >= end + boundMs);
}

/**
 * Whether the stream has delivered all of a market's window: `endPassed` by its own events, or by
 * silence for `boundMs` past the end on a connection known read that far (`readPast`: a process
 * frozen across the end resumes with the window's last changes unread in its socket). `unproved`:
 * the connection never showed it, and the span after the market's newest event is a gap.
 */
export function windowDelivered(
  end: number,
  newest: number,
  now: number,
  boundMs: number,
  readPast: (at: number) => ReadState,
): 'no' | 'yes' | 'unproved' {
  if (!endPassed(end, newest, now, boundMs)) return 'no';
  if (newest >= end) return 'yes';
  const read = readPast(end + boundMs);
  return read === 'waiting' ? 'no' : read === 'unanswered' ? 'unproved' : 'yes';
}

/**
 * A market's next row time: `ts` (the venue's), or 1 ms past the market's previous row (and past
 * `after`) when it would not advance it (counted in `nudged`), so a market's rows stay strictly ordered.
 */
export function advance(last: Map<string, number>, marketId: string, ts: number, stats?: { nudged: number }, after = -Infinity): number {
  const at = nextRowTs(last, marketId, ts, after);
  if (at !== ts && stats) stats.nudged++;
  last.set(marketId, at);
  return at;
}

/** The time `advance` would give the market's next row of venue time `ts`, taking none. */
export function nextRowTs(last: ReadonlyMap<string, number>, marketId: string, ts: number, after = -Infinity): number {
  const previous = Math.max(last.get(marketId) ?? -Infinity, after);
  return ts > previous ? ts : previous + 1;
}

export type StreamGapReason = LostReason | 'stream_resync' | 'stream_late' | 'stream_paused';

/** What capture asks of a venue's book stream. */
export interface BookStream {
  /** Streams these markets (open or about to open) and forgets ended ones. */
  track(markets: Market[], now: number): void;
  /**
   * Book rows of these markets up to these times are already spooled (a previous process's): a
   * book at or before them (the unchanged book a restart's snapshot brings again) is not recorded twice.
   */
  resumeAfter(newest: ReadonlyMap<string, number>): void;
  tracks(m: Market): boolean;
  /** The clock time the stream has handed everything over to (see Capture.progress); absent: capture's own thread. */
  reached?(): number;
  /** Whether every outcome is vouched for on a healthy connection: REST books are then checks, not rows. */
  live(m: Market): boolean;
  /**
   * Markets (ids) whose rows may not all be with the sink: received and waiting for a check, or past
   * their end by the clock and not let go yet (more may come). A heartbeat keeps holding them.
   */
  holding?(): Iterable<string>;
  /** A REST answer for a streamed market: resync, fallback rows, or a check. */
  rest(m: Market, poll: MarketPoll): void;
  /** The poll's quotes of a streamed market. */
  polled(m: Market, quotes: Quote[], recvTs: number): void;
  /** Stops streaming; resolves once everything received was handed to the sink. */
  close(): void | Promise<void>;
}

/** A venue's recorder: the stream, with what it has counted (received, proved, lost), summed across threads. */
export interface VenueRecorder extends BookStream {
  counts(): Record<string, number>;
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
  /** A trade the venue reported (its `last_trade_price`): one row, never merged with another. */
  trade?(market: Market, row: TradeRow): void;
  /** The venue resolved the market at `ts` (its time), the outcome at `winner` winning. */
  resolved?(market: Market, winner: number, ts: number, recvTs: number): void;
  /** The venue changed the market's tick size (`tick_size_change`, sent for each of its tokens). */
  tickSize(market: Market, tickSize: number, recvTs: number): void;
  /** Full books over REST, to resync without waiting for the next poll. */
  fetchBooks?(tokenIds: string[]): Promise<{ summaries: VenueBookSummary[]; recvTs: number }>;
}
