// Load shedding. The lake's work runs on two DuckDB lanes, so admitting more page requests
// than a few per lane only makes every one of them slower. Beyond `limit` running, requests
// wait in a short queue; when it is full, or a request has waited `waitMs`, it is refused at
// once with 503 and Retry-After, so latency stays bounded and the client knows to come back.
import { fail } from './errors.js';

interface Waiter {
  admit: () => void;
  refuse: (err: unknown) => void;
}

export interface AdmissionOptions {
  limit: number;
  queue: number;
  waitMs: number;
}

export class Admission {
  private running = 0;
  private readonly waiting: Waiter[] = [];
  /** Requests refused since start. */
  shed = 0;

  constructor(readonly options: AdmissionOptions) {}

  get inFlight(): number {
    return this.running;
  }

  get queued(): number {
    return this.waiting.length;
  }

  /** Resolves with the release function once admitted; throws UNAVAILABLE when shed or aborted. */
  async enter(signal?: AbortSignal): Promise<() => void> {
    // A client already gone (it left before its request got here) takes no place in the queue: its
    // abort event has fired and would never wake the waiter.
    signal?.throwIfAborted();
    if (this.running < this.options.limit) {
      this.running++;
      return this.releaser();
    }
    if (this.waiting.length >= this.options.queue) this.refuse();
    await new Promise<void>((resolve, reject) => {
      const waiter: Waiter = {
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
        this.drop(waiter);
        try {
          this.refuse();
        } catch (err) {
          waiter.refuse(err);
        }
      }, this.options.waitMs);
      const onAbort = () => {
        this.drop(waiter);
        waiter.refuse(signal!.reason);
      };
      const cleanup = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.waiting.push(waiter);
    });
    return this.releaser();
  }

  private releaser(): () => void {
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const next = this.waiting.shift();
      if (next) next.admit();
      else this.running--;
    };
  }

  private drop(waiter: Waiter): void {
    const at = this.waiting.indexOf(waiter);
    if (at >= 0) this.waiting.splice(at, 1);
  }

  private refuse(): never {
    this.shed++;
    fail('UNAVAILABLE', 'The service is at capacity; retry in a second', [], { 'Retry-After': '1' });
  }
}
