// A token bucket per key (or per client address): `perSecond` requests a second, bursting to
// one second's worth.
export interface RateDecision {
  allowed: boolean;
  limit: number;
  remaining: number;
  /** Seconds until the next request is allowed; 0 when one is. */
  reset: number;
}

/** Buckets are swept this often, so a spray of addresses cannot grow the map without bound. */
const SWEEP_MS = 10_000;

export class RateLimiter {
  private readonly buckets = new Map<string, { tokens: number; at: number; perSecond: number }>();
  private swept = 0;

  take(id: string, perSecond: number, now = Date.now()): RateDecision {
    if (now - this.swept > SWEEP_MS) this.sweep(now);
    const b = this.buckets.get(id) ?? { tokens: perSecond, at: now, perSecond };
    b.tokens = Math.min(perSecond, b.tokens + ((now - b.at) / 1000) * perSecond);
    b.at = now;
    b.perSecond = perSecond;
    this.buckets.set(id, b);
    const allowed = b.tokens >= 1;
    if (allowed) b.tokens -= 1;
    const reset = b.tokens >= 1 ? 0 : Math.ceil((1 - b.tokens) / perSecond);
    return { allowed, limit: perSecond, remaining: Math.floor(b.tokens), reset };
  }

  get size(): number {
    return this.buckets.size;
  }

  /** A bucket that has refilled is the same as no bucket. */
  private sweep(now: number): void {
    this.swept = now;
    for (const [id, b] of this.buckets) {
      if (b.tokens + ((now - b.at) / 1000) * b.perSecond >= b.perSecond) this.buckets.delete(id);
    }
  }
}
