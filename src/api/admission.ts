// Load shedding, shared fairly. The lake's work runs on two DuckDB lanes, so admitting more page
// requests than a few per lane only makes every one of them slower. Beyond `limit` running,
// requests wait in a short queue; when a request has waited `waitMs`, or the queue is full, one is
// refused at once with 503 and Retry-After, so latency stays bounded and the client knows to come
// back. Which one is the fairness: each key (a tenant) waits in its own line, a freed slot goes to
// the tenant running the least for its weight (its plan's), then asking the least lately, and a
// full queue refuses the newest request of the tenant holding the most requests, then refused the
// most lately (it asks beyond what it is given), then asking the most lately (arrivals and
// refusals decayed over about a second), not a newcomer who holds, is refused or asks less. So a key within its limits keeps being
// answered however many other keys push, and pushing harder only sheds more of one's own.
import { fail } from '../edge/errors.js';

/** Whether `a` orders before `b`, field by field. */
function comesFirst(a: number[], b: number[]): boolean {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return a[i] < b[i];
  return false;
}

interface Waiter {
  /** Arrival order: among tenants running alike, the one waiting longest goes first. */
  seq: number;
  admit: () => void;
  refuse: (err: unknown) => void;
}

export interface AdmissionOptions {
  limit: number;
  queue: number;
  waitMs: number;
}

/** Who a request is for: its key, and its share of the capacity against other keys' (the plan's weight). */
export interface Tenant {
  id: string;
  weight: number;
}

interface Line {
  id: string;
  weight: number;
  running: number;
  waiting: Waiter[];
}

/** Half-life of a tenant's demand (its arrivals, decayed). */
const DEMAND_HALF_LIFE_MS = 1000;

export class Admission {
  private running = 0;
  private queuedCount = 0;
  private arrivals = 0;
  private readonly lines = new Map<string, Line>();
  /** Each tenant's recent arrivals, decayed: kept beyond its line, since a pusher's line empties between its refusals. */
  private readonly demands = new Map<string, { value: number; at: number }>();
  /** Each tenant's recent refusals, decayed: a key that keeps coming back refused is the one pushing. */
  private readonly refusals = new Map<string, { value: number; at: number }>();
  /** Requests refused since start. */
  shed = 0;

  constructor(readonly options: AdmissionOptions) {}

  get inFlight(): number {
    return this.running;
  }

  get queued(): number {
    return this.queuedCount;
  }

  /** Resolves with the release function once admitted; throws UNAVAILABLE when shed or aborted. */
  async enter(signal: AbortSignal | undefined, tenant: Tenant): Promise<() => void> {
    // A client already gone (it left before its request got here) takes no place in the queue: its
    // abort event has fired and would never wake the waiter.
    signal?.throwIfAborted();
    this.arrived(tenant.id);
    const line = this.lineOf(tenant);
    if (this.running < this.options.limit && this.queuedCount === 0) {
      this.running++;
      line.running++;
      return this.releaser(line);
    }
    if (this.queuedCount >= this.options.queue && !this.evictFor(line)) this.refuse(tenant.id);
    await new Promise<void>((resolve, reject) => {
      const waiter: Waiter = {
        seq: this.arrivals++,
        admit: () => {
          cleanup();
          resolve();
        },
        refuse: (err) => {
          cleanup();
          reject(err);
        },
      };
      const timer = setTimeout(() => {
        this.drop(line, waiter);
        try {
          this.refuse(line.id);
        } catch (err) {
          waiter.refuse(err);
        }
      }, this.options.waitMs);
      const onAbort = () => {
        this.drop(line, waiter);
        waiter.refuse(signal!.reason);
      };
      const cleanup = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      line.waiting.push(waiter);
      this.queuedCount++;
      // Nothing runs to free a slot when the queue took the last one's place (a refusal just evicted).
      if (this.running < this.options.limit) this.next();
    });
    return this.releaser(line);
  }

  /** The tenant's arrivals lately, decayed to now. */
  private demand(id: string, now = performance.now()): number {
    return decayed(this.demands, id, now);
  }

  /** The tenant's refusals lately, decayed to now. */
  private refused(id: string, now = performance.now()): number {
    return decayed(this.refusals, id, now);
  }

  private arrived(id: string): void {
    const now = performance.now();
    this.demands.set(id, { value: this.demand(id, now) + 1, at: now });
    // Memory follows the tenants active lately: the faded are pruned now and then.
    if (this.demands.size > 256 && this.arrivals % 256 === 0) {
      for (const [key] of this.demands) if (this.demand(key, now) < 0.01 && !this.lines.has(key)) this.demands.delete(key);
      for (const [key] of this.refusals) if (this.refused(key, now) < 0.01) this.refusals.delete(key);
    }
  }

  private lineOf(tenant: Tenant): Line {
    let line = this.lines.get(tenant.id);
    if (!line) {
      line = { id: tenant.id, weight: Math.max(tenant.weight, 1e-9), running: 0, waiting: [] };
      this.lines.set(tenant.id, line);
    }
    return line;
  }

  /**
   * A full queue: the newest waiter of the heaviest waiting tenant (for its weight: the most
   * requests running and waiting, then refused the most lately, then asking the most lately) gives way to `line`'s request, if
   * that tenant is heavier than `line` before it; otherwise `line`'s is refused. Requests held come
   * first: arrival rates say how hard a client pushes only while its machine keeps up (a starved
   * client of many keys asks each slower than one serial client), while a key with nothing in the
   * system is by any measure not the one pushing.
   */
  private evictFor(line: Line): boolean {
    const now = performance.now();
    const weightOf = (l: Line) => [
      (l.running + l.waiting.length) / l.weight,
      this.refused(l.id, now) / l.weight,
      this.demand(l.id, now) / l.weight,
    ];
    let heaviest: { line: Line; order: number[] } | null = null;
    for (const l of this.lines.values()) {
      if (l.waiting.length === 0) continue;
      const order = weightOf(l);
      if (!heaviest || comesFirst(heaviest.order, order)) heaviest = { line: l, order };
    }
    if (!heaviest || heaviest.line === line || !comesFirst(weightOf(line), heaviest.order)) return false;
    const victim = heaviest.line;
    const evicted = victim.waiting.pop()!;
    this.queuedCount--;
    this.forgetIfIdle(victim);
    try {
      this.refuse(victim.id);
    } catch (err) {
      evicted.refuse(err);
    }
    return true;
  }

  /**
   * A slot is free: it goes to the waiting tenant running the least for its weight; on a tie, the
   * one refused the least lately, then asking the least lately; then the one waiting longest.
   */
  private next(): void {
    const now = performance.now();
    let chosen: { line: Line; order: number[] } | null = null;
    for (const l of this.lines.values()) {
      if (l.waiting.length === 0) continue;
      const order = [l.running / l.weight, this.refused(l.id, now) / l.weight, this.demand(l.id, now) / l.weight, l.waiting[0].seq];
      if (!chosen || comesFirst(order, chosen.order)) chosen = { line: l, order };
    }
    if (!chosen) return;
    const waiter = chosen.line.waiting.shift()!;
    this.queuedCount--;
    this.running++;
    chosen.line.running++;
    waiter.admit();
  }

  private releaser(line: Line): () => void {
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.running--;
      line.running--;
      this.forgetIfIdle(line);
      this.next();
    };
  }

  private drop(line: Line, waiter: Waiter): void {
    const at = line.waiting.indexOf(waiter);
    if (at < 0) return;
    line.waiting.splice(at, 1);
    this.queuedCount--;
    this.forgetIfIdle(line);
  }

  /** A tenant with nothing running or waiting has no line: memory follows the keys active now. */
  private forgetIfIdle(line: Line): void {
    if (line.running === 0 && line.waiting.length === 0 && this.lines.get(line.id) === line) this.lines.delete(line.id);
  }

  private refuse(tenant: string): never {
    this.shed++;
    const now = performance.now();
    this.refusals.set(tenant, { value: this.refused(tenant, now) + 1, at: now });
    fail('UNAVAILABLE', 'The service is at capacity; retry in a second', [], { 'Retry-After': '1' });
  }
}

/** A tenant's count in `values`, decayed to `now` by DEMAND_HALF_LIFE_MS. */
function decayed(values: Map<string, { value: number; at: number }>, id: string, now: number): number {
  const d = values.get(id);
  return d ? d.value * 2 ** (-(now - d.at) / DEMAND_HALF_LIFE_MS) : 0;
}
