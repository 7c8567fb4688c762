// A token bucket per key: `perSecond` requests a second, bursting to one second's worth.
export interface RateDecision {
  allowed: boolean;
  limit: number;
  remaining: number;
  /** Seconds until the next request is allowed; 0 when one is. */
  reset: number;
}

export class RateLimiter {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();

  take(id: string, perSecond: number, now = Date.now()): RateDecision {
    const b = this.buckets.get(id) ?? { tokens: perSecond, at: now };
    b.tokens = Math.min(perSecond, b.tokens + ((now - b.at) / 1000) * perSecond);
    b.at = now;
    this.buckets.set(id, b);
    const allowed = b.tokens >= 1;
    if (allowed) b.tokens -= 1;
    const reset = b.tokens >= 1 ? 0 : Math.ceil((1 - b.tokens) / perSecond);
    return { allowed, limit: perSecond, remaining: Math.floor(b.tokens), reset };
  }
}
