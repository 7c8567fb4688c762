// A token bucket per key (or per client address): `perSecond` requests a second, bursting to
// one second's worth. With several API processes a key's bucket lives in the primary process
// (RateBank) and each worker leases a few tokens at a time from it (LeasedLimiter), so a key's
// limit holds across workers however its connections are spread, at one message per lease.
export interface RateDecision {
  allowed: boolean;
  limit: number;
  remaining: number;
  /** Seconds until the next request is allowed; 0 when one is. */
  reset: number;
}

/** What the app asks of a key's limit: answered at once, or after a trip to the primary. */
export interface Limiter {
  take(id: string, perSecond: number): RateDecision | Promise<RateDecision>;
}

/** Buckets are swept this often, so a spray of addresses cannot grow the map without bound. */
const SWEEP_MS = 10_000;

export class RateLimiter implements Limiter {
  private readonly buckets = new Map<string, { tokens: number; at: number; perSecond: number }>();
  private swept = 0;

  take(id: string, perSecond: number, now = Date.now()): RateDecision {
    const { granted, remaining, reset } = this.lease(id, perSecond, 1, now);
    return { allowed: granted === 1, limit: perSecond, remaining, reset };
  }

  /** Up to `want` whole tokens at once (none when the bucket holds less than one). */
  lease(id: string, perSecond: number, want: number, now = Date.now()): { granted: number; remaining: number; reset: number } {
    const b = this.bucket(id, perSecond, now);
    const granted = Math.min(want, Math.floor(b.tokens));
    b.tokens -= granted;
    const reset = b.tokens >= 1 ? 0 : Math.ceil((1 - b.tokens) / perSecond);
    return { granted, remaining: Math.floor(b.tokens), reset };
  }

  /** Tokens leased and not spent, back into the bucket (never past its burst). */
  giveBack(id: string, perSecond: number, tokens: number, now = Date.now()): void {
    const b = this.bucket(id, perSecond, now);
    b.tokens = Math.min(perSecond, b.tokens + tokens);
  }

  get size(): number {
    return this.buckets.size;
  }

  private bucket(id: string, perSecond: number, now: number) {
    if (now - this.swept > SWEEP_MS) this.sweep(now);
    const b = this.buckets.get(id) ?? { tokens: perSecond, at: now, perSecond };
    b.tokens = Math.min(perSecond, b.tokens + ((now - b.at) / 1000) * perSecond);
    b.at = now;
    b.perSecond = perSecond;
    this.buckets.set(id, b);
    return b;
  }

  /** A bucket that has refilled is the same as no bucket. */
  private sweep(now: number): void {
    this.swept = now;
    for (const [id, b] of this.buckets) {
      if (b.tokens + ((now - b.at) / 1000) * b.perSecond >= b.perSecond) this.buckets.delete(id);
    }
  }
}

/** Messages between a worker and the primary about a key's tokens. */
export type RateMessage =
  | { type: 'rate-lease'; id: number; key: string; perSecond: number; want: number }
  | { type: 'rate-return'; key: string; perSecond: number; tokens: number }
  | { type: 'rate-grant'; id: number; granted: number; remaining: number; reset: number };

/** A worker's line to the primary (process.send and its 'message' events, from the entry point). */
export interface RateChannel {
  send(message: RateMessage): void;
  listen(handler: (message: unknown) => void): void;
}

function isRateMessage(m: unknown): m is RateMessage {
  return typeof m === 'object' && m !== null && typeof (m as { type?: unknown }).type === 'string';
}

/** The primary's side: every key's one bucket; answers leases and takes back what was not spent. */
export class RateBank {
  private readonly limiter = new RateLimiter();

  /** The answer to send back to the worker, if the message asks for one. */
  handle(message: unknown, now = Date.now()): RateMessage | null {
    if (!isRateMessage(message)) return null;
    if (message.type === 'rate-return') {
      this.limiter.giveBack(message.key, message.perSecond, message.tokens, now);
      return null;
    }
    if (message.type !== 'rate-lease') return null;
    const { granted, remaining, reset } = this.limiter.lease(message.key, message.perSecond, message.want, now);
    return { type: 'rate-grant', id: message.id, granted, remaining, reset };
  }
}

/**
 * Leases last this long: a worker holds at most a twentieth of a key's second for that long,
 * so what one worker holds and another could have used is small and soon given back.
 */
const LEASE_MS = 200;
const LEASE_SHARE = 1 / 20;

/** A worker's side: spends leased tokens locally, and asks the primary for more when out. */
export class LeasedLimiter implements Limiter {
  private readonly leases = new Map<string, { tokens: number; perSecond: number; expires: number; remaining: number }>();
  private readonly waiting = new Map<number, (grant: Extract<RateMessage, { type: 'rate-grant' }>) => void>();
  private nextId = 1;
  private readonly timer: NodeJS.Timeout;

  constructor(private readonly channel: RateChannel) {
    channel.listen((m) => {
      if (!isRateMessage(m) || m.type !== 'rate-grant') return;
      this.waiting.get(m.id)?.(m);
      this.waiting.delete(m.id);
    });
    this.timer = setInterval(() => this.returnExpired(Date.now()), LEASE_MS);
    this.timer.unref();
  }

  take(key: string, perSecond: number): RateDecision | Promise<RateDecision> {
    const now = Date.now();
    const lease = this.leases.get(key);
    if (lease && lease.tokens >= 1 && now < lease.expires && lease.perSecond === perSecond) {
      lease.tokens -= 1;
      return { allowed: true, limit: perSecond, remaining: lease.remaining + Math.floor(lease.tokens), reset: 0 };
    }
    if (lease) this.giveBack(key, lease);
    const want = Math.max(1, Math.floor(perSecond * LEASE_SHARE));
    const id = this.nextId++;
    return new Promise<RateDecision>((resolve) => {
      this.waiting.set(id, (grant) => {
        if (grant.granted > 1)
          this.leases.set(key, { tokens: grant.granted - 1, perSecond, expires: Date.now() + LEASE_MS, remaining: grant.remaining });
        resolve({
          allowed: grant.granted >= 1,
          limit: perSecond,
          remaining: grant.remaining + Math.max(0, grant.granted - 1),
          reset: grant.granted >= 1 ? 0 : grant.reset,
        });
      });
      this.channel.send({ type: 'rate-lease', id, key, perSecond, want });
    });
  }

  close(): void {
    clearInterval(this.timer);
    this.returnExpired(Infinity);
  }

  private returnExpired(now: number): void {
    for (const [key, lease] of this.leases) if (now >= lease.expires) this.giveBack(key, lease);
  }

  private giveBack(key: string, lease: { tokens: number; perSecond: number }): void {
    this.leases.delete(key);
    const tokens = Math.floor(lease.tokens);
    if (tokens > 0) this.channel.send({ type: 'rate-return', key, perSecond: lease.perSecond, tokens });
  }
}
