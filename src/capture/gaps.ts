// Capture's open gaps, one per market, dataset and channel: a failure opens one (or widens it back
// to an earlier start), a success ends it, and an ended gap is a row in the spool's `gaps` dataset.
// Nothing else writes gap rows, so no two of a kind overlap and a restart resumes the open ones.
import type { Venue } from '../config.js';
import { type PartitionWindow, partitionOf } from '../lake/layout.js';
import type { Spool } from '../lake/spool.js';
import type { Logger } from '../log.js';
import { type GapRow, type Market, marketKey } from '../records.js';
import type { Span } from '../time.js';

export interface OpenGap {
  venue: Venue;
  coin: string;
  /** `all` for the reference prices' gaps, which belong to no one window. */
  window: PartitionWindow;
  market_id: string | null;
  dataset: GapRow['dataset'];
  from_ts: number;
  /** When the market's window ends: an open gap never outlasts what should have been recorded. */
  until: number | null;
  reason: string;
  detail: string;
  failures: number;
  /**
   * Set on the gaps of a WebSocket feed, which open and close apart from REST's, and on rows the
   * spool could not keep ('storage'), which end only at the market's next kept row.
   */
  channel?: 'stream' | 'storage';
}

/** What a gap is opened for: everything but what the failure itself says. */
export type GapScope = Omit<OpenGap, 'from_ts' | 'reason' | 'detail' | 'failures'>;

export class GapLedger {
  private readonly open = new Map<string, OpenGap>();
  /** Each key's last recorded gap: a later loss that began inside it starts where it ended. */
  private readonly closedTo = new Map<string, { from: number; to: number; until: number | null }>();
  /** By `venue:market_id`: the spans of its gaps written (any dataset or channel), and when it ends. */
  private readonly written = new Map<string, { spans: Span[]; until: number | null }>();
  /** Keys of the open `storage` gaps: whether any rows are being dropped, asked on every kept row. */
  private readonly storage = new Set<string>();
  /**
   * `storage` gaps closed at their market's end, by market id: a row of such a market may still come
   * late (a thread's batch in flight), and one stamped inside the gap is not kept, since the gap
   * already said that span is missing and a row inside would contradict it.
   */
  private readonly endedStorage = new Map<string, { venue: Venue; dataset: GapRow['dataset']; from: number; to: number }[]>();

  constructor(
    private readonly spool: Spool,
    private readonly log: Logger,
    private readonly stats: { gaps: number },
  ) {}

  get(key: string): OpenGap | undefined {
    return this.open.get(key);
  }

  all(): OpenGap[] {
    return [...this.open.values()];
  }

  /** Whether rows of some market are being dropped (a storage gap is open). */
  get dropping(): boolean {
    return this.storage.size > 0;
  }

  /** Whether a row of `m`'s `dataset` stamped `ts` lies inside a storage gap closed at the market's end (asked on every row). */
  insideEnded(m: Market, dataset: GapRow['dataset'], ts: number): boolean {
    const spans = this.endedStorage.size > 0 ? this.endedStorage.get(m.market_id) : undefined;
    return !!spans?.some((s) => s.venue === m.venue && s.dataset === dataset && ts >= s.from && ts < s.to);
  }

  /** A gap a previous process left open, taken over as it was. */
  resume(g: OpenGap): void {
    this.open.set(gapKey(g), g);
    if (g.channel === 'storage') this.storage.add(gapKey(g));
  }

  /** Nothing of `scope` can be vouched for from `from` on, because of `err`. */
  fail(scope: GapScope, from: number, err: { kind: string; message: string }): void {
    const key = gapKey(scope);
    // A loss reported late that began inside the last gap of its kind (rows of a thread's batch
    // dropped after the market's end closed its storage gap) starts where that gap ended: the two
    // never overlap. One that began before it (a token's resync from an older proof) keeps its start.
    const last = this.closedTo.get(key);
    const start = last && from >= last.from && from < last.to ? last.to : from;
    const open = this.open.get(key);
    if (open) {
      open.failures++;
      // It may have begun before the open gap: one token of a market resyncs from its last proof
      // while the other's resync opened the gap later.
      open.from_ts = Math.min(open.from_ts, start);
      return;
    }
    this.open.set(key, { ...scope, from_ts: start, reason: err.kind, detail: err.message.slice(0, 300), failures: 1 });
    if (scope.channel === 'storage') this.storage.add(key);
  }

  /** The market's `dataset` was recorded at `at`: its gap (not a stream's or storage's) ends there. */
  succeed(m: Pick<Market, 'venue' | 'coin' | 'window' | 'market_id'>, dataset: 'books' | 'metrics', at: number): void {
    const open = this.open.get(gapKey({ ...m, dataset }));
    if (open) this.close(open, at);
  }

  /** Ends `g` at `to`, written as a row unless it is empty. */
  close(g: OpenGap, to: number): void {
    const key = gapKey(g);
    this.open.delete(key);
    this.storage.delete(key);
    if (to <= g.from_ts) return;
    this.closedTo.set(key, { from: g.from_ts, to, until: g.until });
    if (g.market_id !== null) {
      const market = marketKey(g.venue, g.market_id);
      const spans = this.written.get(market)?.spans ?? [];
      this.written.set(market, { spans: [...spans, [g.from_ts, to]], until: g.until });
    }
    const row: GapRow = {
      market_id: g.market_id,
      dataset: g.dataset,
      from_ts: g.from_ts,
      to_ts: to,
      reason: g.reason,
      detail: g.detail,
      failures: g.failures,
    };
    this.spool.append(partitionOf('gaps', g.venue, g.coin, g.window, g.from_ts), [row]);
    this.stats.gaps++;
    // Downtime gaps were announced, counted, by the resume line, and the trades of markets open at
    // a start are always missed: one line per market would bury what needs attention.
    const level = g.reason === 'process_down' || g.reason === 'not_subscribed' ? 'debug' : 'warn';
    this.log[level](
      {
        venue: g.venue,
        market_id: g.market_id,
        dataset: g.dataset,
        from: new Date(g.from_ts).toISOString(),
        to: new Date(to).toISOString(),
        reason: g.reason,
      },
      'capture gap',
    );
  }

  /**
   * The venue's gaps whose markets have ended by `now` end with them. A storage gap ends only
   * `lateMs` after its market (the stream's stall bound): until then a late row of the market may
   * still be kept, and it ends the gap where it is (a gap closed first would hold the row inside it).
   */
  endMarkets(venue: Venue, now: number, lateMs = 0): void {
    for (const g of this.all()) {
      if (g.venue !== venue || g.until === null) continue;
      const storage = g.channel === 'storage';
      if (g.until + (storage ? lateMs : 0) > now) continue;
      this.close(g, g.until);
      if (storage && g.market_id !== null) {
        const span = { venue: g.venue, dataset: g.dataset, from: g.from_ts, to: g.until };
        this.endedStorage.set(g.market_id, [...(this.endedStorage.get(g.market_id) ?? []), span]);
      }
    }
  }

  /** The spans of the market's gaps this process has written (any dataset). */
  writtenOf(venue: Venue, marketId: string): Span[] {
    return this.written.get(marketKey(venue, marketId))?.spans ?? [];
  }

  /** Memory stays flat over weeks: what ended long before `before` is forgotten. */
  forgetBefore(before: number): void {
    for (const [key, { until }] of this.closedTo) if (until !== null && until < before) this.closedTo.delete(key);
    for (const [key, { until }] of this.written) if (until !== null && until < before) this.written.delete(key);
    for (const [market, spans] of this.endedStorage) if (spans.every((s) => s.to < before)) this.endedStorage.delete(market);
  }
}

/** What a market's gaps are keyed by, less the dataset. */
export function scopeOf(m: Market): Pick<Market, 'venue' | 'coin' | 'window' | 'market_id'> & { until: number } {
  return { venue: m.venue, coin: m.coin, window: m.window, market_id: m.market_id, until: m.end_time };
}

export function gapKey(g: {
  venue: Venue;
  coin: string;
  window: string;
  market_id: string | null;
  dataset: string;
  channel?: OpenGap['channel'];
}): string {
  return `${g.venue}:${g.coin}:${g.window}:${g.market_id ?? '*'}:${g.dataset}${g.channel ? `:${g.channel}` : ''}`;
}
