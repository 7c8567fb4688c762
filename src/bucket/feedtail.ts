// A bucket-served API's newest books: from capture's feed over the network (capture/feed.ts)
// while it answers, otherwise from the sealed hours; with several recorders, from each one's feed,
// the newest book of a market winning. The feed's market versions go to the catalogue (the newest
// version wins there too), which knows from them the markets whose hour the bucket has not sealed.
// What it last heard of capture's health is kept, so the API's health can show capture on another machine.
import type { CaptureHealth, FeedAnswer } from '../health.js';
import type { Logger } from '../log.js';
import type { LatestBook } from '../records.js';
import type { StoredMarket } from '../lake/catalogue.js';

/** Where a feed's market versions go: the catalogue keeps the newest of each market. */
export type MarketSink = (market: StoredMarket) => void;

export interface FeedHealth {
  url: string;
  reachable: boolean;
  last_ok: string | null;
  error: string | null;
}

/** A feed silent this long is unreachable: its books may still be the newest known, but capture is not vouching for them. */
const STALE_MS = 5_000;

export class FeedTail {
  private seq = 0;
  private feed = '';
  private lastOk: number | null = null;
  private error: string | null = null;
  private captureHealth: CaptureHealth | null = null;

  constructor(
    private readonly url: string,
    private readonly secret: string,
    readonly latest: Map<string, LatestBook>,
    private readonly markets: MarketSink,
    private readonly log: Logger,
    private readonly timeoutMs = 2_000,
  ) {}

  /** Applies what changed since the last poll; a failure is kept for health, logged once per streak. */
  async poll(): Promise<number> {
    try {
      const res = await fetch(`${this.url}/latest?feed=${this.feed}&after=${this.seq}`, {
        headers: { authorization: `Bearer ${this.secret}` },
        signal: AbortSignal.timeout(this.timeoutMs),
      });
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      const answer = (await res.json()) as FeedAnswer;
      for (const market of answer.markets) this.markets(market);
      let applied = 0;
      for (const [key, book] of answer.books) {
        if ((this.latest.get(key)?.ts ?? -Infinity) > book.ts) continue;
        this.latest.set(key, book);
        applied++;
      }
      this.seq = answer.seq;
      this.feed = answer.feed;
      this.captureHealth = answer.health;
      if (this.error) this.log.info({ url: this.url }, 'capture feed reachable again');
      this.error = null;
      this.lastOk = Date.now();
      return applied;
    } catch (err) {
      const message =
        (err as Error).name === 'TimeoutError' ? `no answer in ${this.timeoutMs} ms` : String((err as Error).message).slice(0, 160);
      if (this.error === null) this.log.warn({ url: this.url, error: message }, 'capture feed unreachable; latest books from sealed hours');
      this.error = message;
      return 0;
    }
  }

  /** Answered lately, and at the last poll. */
  get reachable(): boolean {
    return this.error === null && this.lastOk !== null && Date.now() - this.lastOk < STALE_MS;
  }

  /** Capture's health as it last said it, while the feed is reachable. */
  capture(): CaptureHealth | null {
    return this.reachable ? this.captureHealth : null;
  }

  health(): FeedHealth {
    return {
      url: this.url,
      reachable: this.reachable,
      last_ok: this.lastOk === null ? null : new Date(this.lastOk).toISOString(),
      error: this.error,
    };
  }
}

/** Several recorders' feeds (a record merged from their lakes) into one map: each market's newest book wins. */
export class FeedTails {
  private readonly tails: FeedTail[];

  constructor(urls: readonly string[], secret: string, latest: Map<string, LatestBook>, markets: MarketSink, log: Logger) {
    this.tails = urls.map((url) => new FeedTail(url, secret, latest, markets, log));
  }

  async poll(): Promise<number> {
    return (await Promise.all(this.tails.map((t) => t.poll()))).reduce((a, b) => a + b, 0);
  }

  get reachable(): boolean {
    return this.tails.some((t) => t.reachable);
  }

  /** The health of the first recorder whose feed answers. */
  capture(): CaptureHealth | null {
    for (const t of this.tails) {
      const health = t.capture();
      if (health) return health;
    }
    return null;
  }

  /** The first feed that answers (else the first): the one `capture()` speaks for. */
  health(): FeedHealth {
    return (this.tails.find((t) => t.reachable) ?? this.tails[0]).health();
  }

  all(): FeedHealth[] {
    return this.tails.map((t) => t.health());
  }
}
