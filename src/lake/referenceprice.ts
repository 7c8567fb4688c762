// The reference price "at" an instant, as the archive vouches for it. Polymarket does not say which
// observation is the price at a window's start or end; public archives take the first observation
// at or after it (UPSTREAMS.md E), and so does this. The socket has no sequence, so the recorded
// first-after is the venue's first-after only if nothing was missed between it and the observation
// before the instant: a recorded observation before the instant and no gap of the feed between the
// two. Otherwise the answer is null, never a later observation passed off as the first.
// Pure: rows and gaps in, an observation or null out.

export interface Observed {
  ts: number;
  price: number;
}

export interface FeedGap {
  from_ts: number;
  to_ts: number;
}

/**
 * The first of `observations` (one feed's, ascending by `ts`) at or after `t`, when the record
 * vouches it is the venue's first: it is at `t` itself, or the observation before it is before `t`
 * and no gap lies between the two.
 */
export function firstAtOrAfter(observations: readonly Observed[], gaps: readonly FeedGap[], t: number): Observed | null {
  let lo = 0;
  let hi = observations.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (observations[mid].ts < t) lo = mid + 1;
    else hi = mid;
  }
  const first = observations[lo];
  if (!first) return null;
  if (first.ts === t) return first;
  const before = observations[lo - 1];
  if (!before) return null;
  return gaps.some((g) => g.from_ts < first.ts && g.to_ts > before.ts) ? null : first;
}

/** "Up" when the close is at least the open (the markets' rule, UPSTREAMS.md E); null without both. */
export function outcomeOf(open: Observed | null, close: Observed | null): 'Up' | 'Down' | null {
  if (!open || !close) return null;
  return close.price >= open.price ? 'Up' : 'Down';
}

/** A market as the check needs it. */
export interface ResolvedMarket {
  coin: string;
  start_time: number;
  end_time: number;
  resolution: 'pending' | 'resolved' | 'invalid';
  winning_outcome_index: number | null;
  outcomes: readonly { index: number; label: string }[];
}

export interface MarketReference {
  source: 'chainlink';
  symbol: string;
  open: Observed | null;
  close: Observed | null;
  outcome_by_reference: 'Up' | 'Down' | null;
  /** Whether the venue's recorded winner is the reference's outcome; null while either is unknown. */
  agrees_with_resolution: boolean | null;
}

/** Which way a market's winner went: its label where it says Up or Down, else the venues' order (outcome 0 is Up). */
export function winnerDirection(m: ResolvedMarket): 'Up' | 'Down' | null {
  if (m.resolution !== 'resolved' || m.winning_outcome_index === null) return null;
  const label = m.outcomes.find((o) => o.index === m.winning_outcome_index)?.label.toLowerCase();
  if (label === 'up' || label === 'down') return label === 'up' ? 'Up' : 'Down';
  return m.winning_outcome_index === 0 ? 'Up' : 'Down';
}

/**
 * A market's window as its reference saw it: open and close by the rule (`at`: the vouched price
 * at an instant, or null), the outcome they give, and whether the venue's winner agrees.
 */
export function marketReference(m: ResolvedMarket, symbol: string, at: (t: number) => Observed | null): MarketReference {
  const open = at(m.start_time);
  const close = at(m.end_time);
  const outcome = outcomeOf(open, close);
  const winner = winnerDirection(m);
  return {
    source: 'chainlink',
    symbol,
    open,
    close,
    outcome_by_reference: outcome,
    agrees_with_resolution: outcome === null || winner === null ? null : outcome === winner,
  };
}

/** What `markets?resolution_check=` filters on. */
export type ResolutionCheck = 'agrees' | 'disagrees' | 'unchecked';
export const RESOLUTION_CHECKS: readonly ResolutionCheck[] = ['agrees', 'disagrees', 'unchecked'];

export function resolutionCheck(r: MarketReference): ResolutionCheck {
  return r.agrees_with_resolution === null ? 'unchecked' : r.agrees_with_resolution ? 'agrees' : 'disagrees';
}
