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
