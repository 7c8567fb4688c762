// The archive's reference prices as Polymarket's price socket (RTDS) sent them: each observation an
// `update` of its topic at the time the socket sent it, with the observation's own time and price,
// so a client of the live socket reads history unchanged. The range is read an hour at a time, each
// hour a minute before the replay reaches it (a week's replay holds an hour of rows, not the week's).
import type { LakeReader } from '../lake/reader.js';
import { ALL_WINDOWS, seriesPartitions } from '../lake/layout.js';
import { relation } from '../lake/sql.js';
import { REFERENCE_VENUE, type ReferenceSource, referenceSymbol } from '../records.js';
import { HOUR, MINUTE } from '../time.js';
import type { ReplayWalk } from './session.js';

/**
 * The symbols a subscription's `filters` names of `coins` (null: every one), or undefined when the
 * socket would refuse it: the Chainlink topic's a JSON string with one `symbol`, the exchange
 * topic's comma-separated pairs (UPSTREAMS.md E); no filter, or an empty one, is every symbol.
 */
export function filteredSymbols(source: ReferenceSource, filters: unknown, coins: readonly string[]): Set<string> | null | undefined {
  if (filters === undefined || filters === '') return null;
  if (typeof filters !== 'string') return undefined;
  let named: string[];
  if (source === 'chainlink') {
    try {
      const f = JSON.parse(filters) as { symbol?: unknown };
      if (typeof f?.symbol !== 'string') return undefined;
      named = [f.symbol.toLowerCase()];
    } catch {
      return undefined;
    }
  } else named = filters.split(',').map((p) => p.trim().toLowerCase());
  const known = new Set(coins.map((c) => referenceSymbol(source, c)));
  return new Set(named.filter((s) => known.has(s)));
}

export interface SentObservation {
  /** When the socket sent it: the replay's time for it. */
  sent: number;
  ts: number;
  symbol: string;
  price: number;
}

/** A source's observations of `coins` sent in [from, to), in the order the socket sent them. */
export async function readObservations(
  lake: LakeReader,
  source: ReferenceSource,
  coins: readonly string[],
  from: number,
  to: number,
): Promise<SentObservation[]> {
  // Kept by their own time, which is before their sending: an hour's first may sit in the hour before.
  const partitions = coins.flatMap((coin) => seriesPartitions('reference', REFERENCE_VENUE, coin, ALL_WINDOWS, from - MINUTE, to));
  const rel = relation('reference', await lake.files(partitions));
  if (!rel) return [];
  const rows = await lake.duck.rows(
    `SELECT epoch_ms(sent_ts)::DOUBLE AS sent, epoch_ms(ts)::DOUBLE AS ts, symbol, price FROM (${rel})
     WHERE source = $source AND sent_ts >= epoch_ms($from::BIGINT) AND sent_ts < epoch_ms($to::BIGINT)
     ORDER BY sent_ts, ts, symbol`,
    { source, from, to },
  );
  return rows.map((r) => ({ sent: Number(r.sent), ts: Number(r.ts), symbol: String(r.symbol), price: Number(r.price) }));
}

/** A span of a feed in which observations may be missing (the lake's gaps). */
export interface FeedGap {
  symbol: string;
  from: number;
  to: number;
  reason: string;
}

/** The gaps of a source's feeds of `coins` overlapping [from, to). */
export function feedGaps(lake: LakeReader, source: ReferenceSource, coins: readonly string[], from: number, to: number): FeedGap[] {
  return coins.flatMap((coin) => {
    const symbol = referenceSymbol(source, coin);
    return lake.referenceGaps(coin, source, from, to).map((g) => ({ symbol, from: g.from_ts, to: g.to_ts, reason: g.reason }));
  });
}

/**
 * One hour's observations of a topic, those of the symbols the client asked for as each is sent
 * (it may add symbols), and a `replay_gap` on the `replay` topic where a feed's gap begins (or at
 * once, for a gap open where the replay starts): never a span passed over in silence.
 */
export class ObservationWalk implements ReplayWalk {
  private i = 0;
  private readonly events: { t: number; symbol: string; text: string }[];

  constructor(
    rows: SentObservation[],
    gaps: FeedGap[],
    topic: string,
    /** The symbols the client asked for of this topic (null: every one), as it stands when each is sent. */
    private readonly asked: { wanted: Set<string> | null },
    at: number,
  ) {
    const notices = gaps
      .filter((g) => g.to > at)
      .map((g) => {
        const t = Math.max(g.from, at);
        const payload = { topic, symbol: g.symbol, from: g.from, to: g.to, reason: g.reason };
        return { t, symbol: g.symbol, text: JSON.stringify({ topic: 'replay', type: 'replay_gap', timestamp: t, payload }) };
      });
    const updates = rows
      .filter((o) => o.sent >= at)
      .map((o) => ({
        t: o.sent,
        symbol: o.symbol,
        text: JSON.stringify({ topic, type: 'update', timestamp: o.sent, payload: { symbol: o.symbol, timestamp: o.ts, value: o.price } }),
      }));
    // Stable: a notice before an update of the same instant; the updates in the order the socket sent them.
    this.events = [...notices, ...updates].sort((a, b) => a.t - b.t);
  }

  next(): number {
    return this.events[this.i]?.t ?? Infinity;
  }

  take(out: string[]): void {
    const t = this.events[this.i].t;
    for (; this.i < this.events.length && this.events[this.i].t === t; this.i++) {
      const e = this.events[this.i];
      if (!this.asked.wanted || this.asked.wanted.has(e.symbol)) out.push(e.text);
    }
  }
}

/** Subscribes a topic's hours as the replay nears each (a walk that sends nothing itself). */
export class HourSchedule implements ReplayWalk {
  private chunk: number;

  constructor(
    /** Where the replay stood when the schedule started: its hour is subscribed at once (also while paused). */
    private readonly at: number,
    private readonly to: number,
    private readonly subscribe: (from: number, to: number, due?: number) => void,
  ) {
    this.chunk = at;
  }

  next(): number {
    if (this.chunk >= this.to) return Infinity;
    return this.chunk <= this.at ? -Infinity : this.chunk - MINUTE;
  }

  take(): void {
    const from = this.chunk;
    const to = Math.min(Math.floor(from / HOUR) * HOUR + HOUR, this.to);
    this.subscribe(from, to, from <= this.at ? this.at : undefined);
    this.chunk = to;
  }
}
