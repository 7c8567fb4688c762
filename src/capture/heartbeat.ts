// Capture's heartbeat, written after every flush: what a reader of the lake knows of the markets
// capture holds now. The record proves a market only up to the last heartbeat (every row received
// before it is on disk) or its newest row; past that, a reader must not count the window as
// covered, and once capture is stopped or silent, the rest of each window it held is a gap until a
// restart writes the real one.
import type { Venue, Window } from '../config.js';
import { readJson } from '../lake/fsutil.js';
import type { GapRecord } from '../lake/gaplog.js';
import type { LakePaths } from '../lake/layout.js';
import type { OpenGap } from './gaps.js';
import { marketKey } from '../records.js';
import { type Span, subtract } from '../time.js';

export interface HeartbeatMarket {
  venue: Venue;
  coin: string;
  window: Window;
  market_id: string;
  end_time: number;
  /** The clock time of its newest book on disk at that flush (null: none yet). */
  newest?: number | null;
  /**
   * The clock time from which this process has held the market (its first book of it), and the
   * spans of the gaps on it the process has written to its lake (any dataset): another recorder's
   * presumed downtime is covered by this one only over what it held, less these and its gaps still
   * open. Absent (no book yet, or an older capture): it vouches for none of another's.
   */
  since?: number;
  written?: Span[];
}

export interface Heartbeat {
  /** Clock time the flush began: every row this process received before it is on disk. */
  ts: number;
  /** Wall time of the flush this heartbeat follows: how a separate API process judges capture's health. */
  flushed_at: number;
  /** Written by a clean stop: an old heartbeat then means "stopped", not "stalled". */
  stopped?: boolean;
  /** Rows this process has acknowledged (fsynced) so far: what a kill -9 after this heartbeat cannot lose. */
  acknowledged: number;
  /** Capture's own figures at that flush, for a separate API process's health. */
  health: {
    buffered_rows: number;
    dropped_rows: number;
    seal_backlog: number;
    seal_error: string | null;
    publish?: unknown;
  };
  segment: string;
  /**
   * Clock time before which every row this capture recorded, its gaps included, is sealed (its
   * last seal pass's due hours), or absent before one finished: how far a merge of several
   * recorders may take this one's record as whole (lake/merge.ts).
   */
  sealed_through?: number;
  /** Markets capture held at that flush: every known market whose window had not ended (pre-open ones included). */
  open: HeartbeatMarket[];
  gaps: OpenGap[];
}

export function readHeartbeat(paths: LakePaths): Promise<Heartbeat | null> {
  return readJson<Heartbeat>(paths.heartbeat).catch(() => null);
}

/** A heartbeat as text (from the bucket), or null when it is not one. */
export function parseHeartbeat(text: string | null): Heartbeat | null {
  if (text === null) return null;
  try {
    const beat = JSON.parse(text) as Heartbeat;
    return typeof beat.ts === 'number' && typeof beat.flushed_at === 'number' && Array.isArray(beat.open) && Array.isArray(beat.gaps)
      ? beat
      : null;
  } catch {
    return null;
  }
}

/** What the record can vouch for beyond its rows and written gaps, from capture's newest heartbeat. */
export interface CaptureProof {
  /** By `venue:market_id`: the clock time up to which capture has shown it held the market (capture running): its heartbeat. */
  heldUntil: Map<string, number>;
  /** By `venue:market_id`, for a running capture: the spans over which it has held the market, less its gaps written (its open ones are in `gaps`). */
  held: Map<string, Span[]>;
  /**
   * Gaps not written yet: those open at the heartbeat and, once capture is stopped or has been
   * silent for `downAfterMs`, the rest of the window of every market it held (`process_down`).
   */
  gaps: GapRecord[];
  /** Whether capture is taken as down. */
  down: boolean;
}

export const NO_PROOF: CaptureProof = Object.freeze({
  heldUntil: new Map<string, number>(),
  held: new Map<string, Span[]>(),
  gaps: [],
  down: false,
});

/**
 * Pure: the same for every reader of one heartbeat (an API beside capture, a replica, `make
 * replay`). A presumed downtime starts where a restart will start the real one: at the market's
 * newest book (a change stamped before the heartbeat may have arrived after it), else the heartbeat.
 */
export function proofOf(beat: Heartbeat | null, wallNow: number, downAfterMs: number): CaptureProof {
  if (!beat) return NO_PROOF;
  const down = Boolean(beat.stopped) || wallNow - beat.flushed_at > downAfterMs;
  // A gap open at the heartbeat is known missing up to it; past it, while capture runs, nothing
  // is counted anyway (`heldUntil`), and once it is down the gap runs to its market's end.
  const gaps: GapRecord[] = beat.gaps.map((g) => ({
    venue: g.venue,
    coin: g.coin,
    window: g.window,
    market_id: g.market_id,
    dataset: g.dataset,
    from_ts: g.from_ts,
    to_ts: down && g.until !== null ? Math.max(g.until, g.from_ts + 1) : Math.max(beat.ts, g.from_ts + 1),
    reason: g.reason,
    provisional: true,
  }));
  const heldUntil = new Map<string, number>();
  const held = new Map<string, Span[]>();
  for (const m of beat.open) {
    if (!down) {
      heldUntil.set(marketKey(m.venue, m.market_id), beat.ts);
      // A heartbeat read from a bucket is another process's word: what is not a time vouches for nothing.
      if (Number.isFinite(m.since) && (m.written ?? []).every((w) => Array.isArray(w) && w.every(Number.isFinite)))
        held.set(marketKey(m.venue, m.market_id), subtract([[m.since!, Infinity]], m.written ?? []));
      continue;
    }
    const from = m.newest ?? beat.ts;
    if (from >= m.end_time) continue;
    for (const dataset of ['books', 'metrics'] as const)
      gaps.push({
        venue: m.venue,
        coin: m.coin,
        window: m.window,
        market_id: m.market_id,
        dataset,
        from_ts: from,
        to_ts: m.end_time,
        reason: 'process_down',
        provisional: true,
      });
  }
  return { heldUntil, held, gaps, down };
}

/**
 * Several recorders' proofs (a record merged from their lakes, bucket/merger.ts) as one: a market
 * is held up to the latest any recorder has shown; of a gap not written yet, what stays is what no
 * other running recorder held (`held`, less its own gaps on the market still open); down only when
 * every one is.
 */
export function combineProofs(proofs: readonly CaptureProof[]): CaptureProof {
  if (proofs.length <= 1) return proofs[0] ?? NO_PROOF;
  const heldUntil = new Map<string, number>();
  for (const p of proofs) for (const [key, at] of p.heldUntil) heldUntil.set(key, Math.max(heldUntil.get(key) ?? -Infinity, at));
  const gaps: GapRecord[] = [];
  for (const p of proofs)
    for (const g of p.gaps) {
      const key = marketKey(g.venue, g.market_id ?? '');
      let left: Span[] = [[g.from_ts, g.to_ts]];
      for (const o of proofs) {
        const spans = o === p || o.down ? undefined : o.held.get(key);
        if (!spans) continue;
        const holes = o.gaps.filter((h) => h.market_id === g.market_id && h.venue === g.venue).map((h): Span => [h.from_ts, h.to_ts]);
        left = subtract(left, subtract(spans, holes));
      }
      for (const [from_ts, to_ts] of left) gaps.push({ ...g, from_ts, to_ts });
    }
  // Spans held: none. A combined proof is not combined again.
  return { heldUntil, held: new Map(), gaps, down: proofs.every((p) => p.down) };
}
