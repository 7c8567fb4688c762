// What a market window's record is worth, from what the lake holds of it: how much of the window
// is covered, and where not, why. Pure: the recorded span and the gaps come in, the figures go
// out, so the same function serves a sealed window and an open one kept current.

/** Why a span was not recorded: the venue sent nothing usable, or capture did not keep it. */
export type GapCause = 'venue' | 'capture' | 'unproved';

/**
 * Gap reasons by cause. `venue`: the venue answered errors, timed out, dropped or froze its feed.
 * `capture`: this service was down or its disk refused the rows. `unproved`: the venue sent
 * changes the copy could not prove (a lost message found later, a snapshot that came late).
 */
const CAUSES: Record<string, GapCause> = {
  timeout: 'venue',
  network: 'venue',
  http_5xx: 'venue',
  http_4xx: 'venue',
  rate_limited: 'venue',
  malformed: 'venue',
  disconnected: 'venue',
  stream_stalled: 'venue',
  stream_paused: 'venue',
  process_down: 'capture',
  not_subscribed: 'capture',
  storage: 'capture',
  stream_resync: 'unproved',
  stream_late: 'unproved',
  // Two recorders kept different books at one venue instant: the record holds neither (lake/merge.ts).
  recorders_disagree: 'unproved',
  // A recorder of a merged record had not sealed and published this span when merged (api/certificate.ts).
  unpublished: 'capture',
};

export function causeOf(reason: string): GapCause {
  return CAUSES[reason] ?? 'capture';
}

/**
 * How far a market window's record can be trusted, as users filter on it: `pending` while the
 * window is open, capture still holds it, or its books are not sealed (the figures may still
 * change); once settled, `not_captured` (nothing of it recorded), `complete` (at least
 * COMPLETE_SHARE covered) or `partial`.
 */
export const WINDOW_STATES = ['complete', 'partial', 'pending', 'not_captured'] as const;
export type WindowState = (typeof WINDOW_STATES)[number];
export const COMPLETE_SHARE = 0.99;

/** The state of a settled window (over, not held by capture, sealed) from its coverage. */
export function settledState(c: Coverage): Exclude<WindowState, 'pending'> {
  return c.covered_seconds === 0 ? 'not_captured' : c.share >= COMPLETE_SHARE ? 'complete' : 'partial';
}

/** A window's state for the record, its coverage once settled, and when its sealed record last changed. */
export interface WindowStatus {
  /** Null for windows sealed before manifests carried per-market spans (their figures are the certificate route's). */
  state: WindowState | null;
  coverage: Coverage | null;
  /** The newest sealing of a books file holding the market (epoch ms), or null before any. */
  last_modified: number | null;
  /** For a record merged from several recorders, each one's own coverage once settled (windowstatus.ts `recorderRecords`); else null. */
  recorders: Record<string, Coverage> | null;
}

export interface WindowRecord {
  start: number;
  end: number;
  /** The first recorded book of the market (pre-open books count: they hold at the open), or null. */
  first: number | null;
  gaps: readonly { from_ts: number; to_ts: number; reason: string }[];
  /** Capture's clock at the time of asking: an open window counts only up to it. */
  now: number;
}

export interface Coverage {
  /** Share of the window (up to now, while open) with a record or a known quiet: 0 to 1. */
  share: number;
  window_seconds: number;
  covered_seconds: number;
  /** Seconds by cause, gaps merged so an instant counts once (the first cause listed wins an overlap). */
  by_cause: Record<GapCause | 'unrecorded', number>;
  /** Seconds by recorded reason, each gap on its own (overlapping gaps both count). */
  by_reason: Record<string, number>;
}

/**
 * Coverage of [start, min(end, now)). From the first recorded book on, a book holds until the
 * next (a quiet book is a recorded one), so only gaps are missing; before it, time no gap explains
 * is `unrecorded` (capture did not hold the market yet: not known, or not yet subscribed), never
 * taken as covered.
 */
export function coverageOf(w: WindowRecord): Coverage {
  const to = Math.min(w.end, Math.max(w.start, w.now));
  const windowMs = to - w.start;
  const clip = (a: number, b: number) => [Math.max(a, w.start), Math.min(b, to)] as const;
  const spans: { from: number; to: number; cause: GapCause | 'unrecorded' }[] = [];
  const byReason: Record<string, number> = {};
  for (const g of w.gaps) {
    const [a, b] = clip(g.from_ts, g.to_ts);
    if (b <= a) continue;
    byReason[g.reason] = (byReason[g.reason] ?? 0) + (b - a) / 1000;
    spans.push({ from: a, to: b, cause: causeOf(g.reason) });
  }
  spans.push({ from: w.start, to: w.first === null ? to : Math.min(w.first, to), cause: 'unrecorded' });
  const order: (GapCause | 'unrecorded')[] = ['capture', 'venue', 'unproved', 'unrecorded'];
  const byCause = { venue: 0, capture: 0, unproved: 0, unrecorded: 0 };
  // Sweep the instants where spans begin or end: each stretch is charged once, to the first cause covering it.
  const edges = [...new Set(spans.flatMap((s) => [s.from, s.to]))].sort((a, b) => a - b);
  let missing = 0;
  for (let i = 0; i + 1 < edges.length; i++) {
    const [a, b] = [edges[i], edges[i + 1]];
    const covering = spans.filter((s) => s.from <= a && s.to >= b);
    if (!covering.length) continue;
    const cause = order.find((c) => covering.some((s) => s.cause === c))!;
    byCause[cause] += (b - a) / 1000;
    missing += b - a;
  }
  const windowSeconds = windowMs / 1000;
  return {
    share: windowMs > 0 ? round((windowMs - missing) / windowMs, 6) : 0,
    window_seconds: windowSeconds,
    covered_seconds: round((windowMs - missing) / 1000, 3),
    by_cause: {
      venue: round(byCause.venue, 3),
      capture: round(byCause.capture, 3),
      unproved: round(byCause.unproved, 3),
      unrecorded: round(byCause.unrecorded, 3),
    },
    by_reason: Object.fromEntries(Object.entries(byReason).map(([k, v]) => [k, round(v, 3)])),
  };
}

function round(x: number, digits: number): number {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}
