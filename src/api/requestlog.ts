// One line per request, except for floods: requests without a valid key that fail (401, 404,
// 429 by address, malformed HTTP), requests over a key's rate and requests shed under load are
// counted and summarised every SUMMARY_MS, so a flood of them costs counters, not log volume.
import type { Logger } from '../log.js';

export const SUMMARY_MS = 10_000;

export interface RequestLine {
  req_id: string;
  method: string;
  route: string | null;
  status: number;
  ms: number;
  partitions: number;
  rows: number;
  key_id: string | null;
  aborted?: boolean;
}

export class RequestLog {
  private counts = new Map<number, number>();
  private addresses = new Set<string>();
  private sample: { path: string; status: number } | null = null;
  private readonly timer: NodeJS.Timeout;

  constructor(private readonly log: Logger) {
    this.timer = setInterval(() => this.summarise(), SUMMARY_MS);
    this.timer.unref();
  }

  finished(line: RequestLine): void {
    this.log.info(line, 'request finished');
  }

  /** Counted, not logged: summarised with the others of the same window. */
  counted(status: number, address: string, path: string): void {
    this.counts.set(status, (this.counts.get(status) ?? 0) + 1);
    // The distinct-address count is only a hint; past this many it stops growing.
    if (this.addresses.size < 10_000) this.addresses.add(address);
    this.sample ??= { path: path.slice(0, 200), status };
  }

  summarise(): void {
    if (this.counts.size === 0) return;
    let requests = 0;
    for (const n of this.counts.values()) requests += n;
    this.log.warn(
      {
        requests,
        by_status: Object.fromEntries(this.counts),
        addresses: this.addresses.size,
        sample: this.sample,
        window_s: SUMMARY_MS / 1000,
      },
      'refused requests (summarised)',
    );
    this.counts = new Map();
    this.addresses = new Set();
    this.sample = null;
  }

  stop(): void {
    clearInterval(this.timer);
    this.summarise();
  }
}
