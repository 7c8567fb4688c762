// The one HTTP client every adapter uses: a deadline per attempt (covering a body that stops
// arriving), retries with exponential backoff and full jitter, Retry-After on 429, a request
// budget below the upstream's documented limit, and bounded concurrency.
import type { UpstreamConfig } from '../config.js';
import { backoffMs } from '../time.js';

export type UpstreamErrorKind = 'timeout' | 'network' | 'http_5xx' | 'http_4xx' | 'rate_limited' | 'malformed';

export class UpstreamError extends Error {
  override name = 'UpstreamError';
  constructor(
    readonly kind: UpstreamErrorKind,
    message: string,
    readonly status?: number,
    readonly retryAfterMs?: number,
    readonly body?: unknown,
  ) {
    super(message);
  }

  get retryable(): boolean {
    return this.kind !== 'http_4xx';
  }
}

export interface RequestSpec {
  method?: 'GET' | 'POST';
  /** Called per attempt, so signed requests carry a fresh timestamp each time. */
  url: () => string;
  headers?: Record<string, string>;
  body?: string;
}

export interface ClientStats {
  requests: number;
  retries: number;
  failures: number;
}

const MAX_RETRY_AFTER_MS = 60_000;

export class HttpClient {
  readonly stats: ClientStats = { requests: 0, retries: 0, failures: 0 };
  private active = 0;
  private readonly waiting: (() => void)[] = [];
  private nextSlot = 0;

  constructor(
    readonly name: string,
    private readonly config: UpstreamConfig,
    private readonly backoffBaseMs = 100,
  ) {}

  async json<T>(spec: RequestSpec): Promise<T> {
    await this.acquire();
    try {
      for (let attempt = 0; ; attempt++) {
        try {
          await this.budget();
          return (await this.once(spec)) as T;
        } catch (err) {
          const e = toUpstreamError(err);
          if (!e.retryable || attempt >= this.config.maxRetries) {
            this.stats.failures++;
            throw e;
          }
          this.stats.retries++;
          const backoff = Math.random() * backoffMs(attempt, this.backoffBaseMs, 10_000);
          await sleep(e.retryAfterMs !== undefined ? Math.min(e.retryAfterMs, MAX_RETRY_AFTER_MS) : backoff);
        }
      }
    } finally {
      this.release();
    }
  }

  private async once(spec: RequestSpec): Promise<unknown> {
    this.stats.requests++;
    let res: Response;
    let text: string;
    try {
      res = await fetch(spec.url(), {
        method: spec.method ?? 'GET',
        headers: { accept: 'application/json', ...(spec.body ? { 'content-type': 'application/json' } : {}), ...spec.headers },
        body: spec.body,
        signal: AbortSignal.timeout(this.config.timeoutMs),
      });
      text = await res.text();
    } catch (err) {
      const name = (err as Error).name;
      if (name === 'TimeoutError' || name === 'AbortError')
        throw new UpstreamError('timeout', `${this.name}: no complete answer within ${this.config.timeoutMs} ms`);
      throw new UpstreamError('network', `${this.name}: ${(err as Error).message}`);
    }
    let body: unknown = null;
    let parsed = true;
    try {
      body = text === '' ? null : JSON.parse(text);
    } catch {
      parsed = false;
    }
    if (res.status === 429 || res.status === 418) {
      const retryAfter = Number(res.headers.get('retry-after'));
      const wait = res.headers.has('retry-after') && Number.isFinite(retryAfter) && retryAfter >= 0 ? retryAfter * 1000 : undefined;
      throw new UpstreamError('rate_limited', `${this.name}: rate limited`, res.status, wait, body);
    }
    if (res.status >= 500) throw new UpstreamError('http_5xx', `${this.name}: HTTP ${res.status}`, res.status, undefined, body);
    if (!parsed)
      throw new UpstreamError(
        'malformed',
        `${this.name}: HTTP ${res.status} with a body that is not JSON (${text.length} bytes)`,
        res.status,
      );
    if (res.status >= 400)
      throw new UpstreamError(
        'http_4xx',
        `${this.name}: HTTP ${res.status} ${JSON.stringify(body).slice(0, 200)}`,
        res.status,
        undefined,
        body,
      );
    return body;
  }

  /** Spaces requests at the configured rate (a token bucket with a burst of one second). */
  private async budget(): Promise<void> {
    const interval = 1000 / this.config.requestsPerSecond;
    const now = Date.now();
    const earliest = now - 1000;
    this.nextSlot = Math.max(this.nextSlot, earliest) + interval;
    const wait = this.nextSlot - interval - now;
    if (wait > 0) await sleep(wait);
  }

  private async acquire(): Promise<void> {
    if (this.active < this.config.concurrency) {
      this.active++;
      return;
    }
    await new Promise<void>((resolve) => this.waiting.push(resolve));
  }

  private release(): void {
    const next = this.waiting.shift();
    if (next) next();
    else this.active--;
  }
}

function toUpstreamError(err: unknown): UpstreamError {
  return err instanceof UpstreamError ? err : new UpstreamError('network', String(err));
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
