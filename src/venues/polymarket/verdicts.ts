// What the venue's book hash said of each recorded book (`hash_check`), and the rows that wait for
// it. The venue hashes its last trade into a book before it sends the trade (~100 ms later), so a
// hash that does not reproduce is decided only once a second of the venue's time has passed (or
// two of the clock on a silent stream) or a field that arrived explains it. A market's rows wait
// behind an undecided one, in order: a label written to the append-only spool cannot be taken back.
import type { Clock } from '../../clock.js';
import type { Book, HashCheck, Market } from '../../records.js';
import type { StreamProgress } from '../stream.js';

/**
 * How long after a book (venue time) a hashed field may still explain its hash: the venue's hash
 * covers the last trade, whose `last_trade_price` comes ~100 ms after the book that hashed it.
 */
export const EXPLAIN_MS = 1_000;
/** The same wait on the clock, for a stream that sends nothing (no venue time passes): twice the bound, for delivery. */
const QUIET_EXPLAIN_MS = 2 * EXPLAIN_MS;
const TICK_MS = 200;
/** Books awaiting an explanation kept per token; past it the oldest is decided at once. */
const MAX_AWAITING = 128;

/** What the venue's hash said of one book; the rows of it carry it as `hash_check`. */
export interface Verdict {
  /** Undefined while undecided; null when there was no hash to check. */
  check?: HashCheck | null;
  /** What it becomes when nothing explains it in time. */
  unexplained: HashCheck;
}

export const decided = (check: HashCheck | null): Verdict => ({ check, unexplained: check ?? 'unverifiable' });
export const NO_HASH: Verdict = decided(null);

/** A book whose hash did not reproduce, waiting for a field that explains it. */
export interface Awaiting {
  /** The book's venue time. */
  ts: number;
  verdict: Verdict;
  /** Clock time of the check. */
  at: number;
}

/** A token as far as verdicts go: its market and its books awaiting an explanation. */
export interface VerdictHolder<A extends Awaiting> {
  market: Market;
  awaiting: A[];
}

/** A market's row whose books wait for their verdicts. */
interface HeldRow {
  ts: number;
  recvTs: number;
  books: Book[];
  verdicts: Verdict[];
}

export class Verdicts<A extends Awaiting, T extends VerdictHolder<A>> {
  private readonly held = new Map<string, { market: Market; rows: HeldRow[] }>();
  private readonly waiting = new Set<T>();
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly clock: Clock,
    private readonly progress: StreamProgress,
    private readonly write: (m: Market, ts: number, recvTs: number, books: Book[]) => void,
  ) {}

  /** A book of `t` whose hash did not reproduce: its verdict waits up to EXPLAIN_MS for a field that explains it. */
  await(t: T, u: A): void {
    if (t.awaiting.push(u) > MAX_AWAITING) t.awaiting.shift()!.verdict.check ??= u.verdict.unexplained;
    this.waiting.add(t);
    this.timer ??= setInterval(() => this.expire(this.clock.now()), TICK_MS).unref();
  }

  /** A hashed field of `t` changed: books whose hash now reproduces are decided (`explained`, or `match` when only REST's fields were missing). */
  explain(t: T, reproduces: (u: A) => boolean): void {
    if (!t.awaiting.length) return;
    t.awaiting = t.awaiting.filter((u) => {
      if (!reproduces(u)) return true;
      u.verdict.check ??= u.verdict.unexplained === 'unverifiable' ? 'match' : 'explained';
      return false;
    });
    this.settled(t);
  }

  /** Verdicts whose time is up: the stream has passed EXPLAIN_MS after the book, or been silent for QUIET_EXPLAIN_MS. */
  expire(now: number): void {
    if (!this.waiting.size) return;
    const venueNow = this.progress.latest();
    for (const t of this.waiting) {
      t.awaiting = t.awaiting.filter((u) => {
        if (u.ts + EXPLAIN_MS >= venueNow && now - u.at <= QUIET_EXPLAIN_MS) return true;
        u.verdict.check ??= u.verdict.unexplained;
        return false;
      });
      this.settled(t);
    }
  }

  /** The token's copy is lost or its market over: nothing can explain its books any more. */
  abandon(t: T): void {
    if (!t.awaiting.length) return;
    for (const u of t.awaiting) u.verdict.check ??= u.verdict.unexplained;
    t.awaiting = [];
    this.settled(t);
  }

  /** A market's row: written now, or behind the rows and books still waiting for a verdict. */
  row(m: Market, ts: number, recvTs: number, books: Book[], verdicts: Verdict[]): void {
    const row = { ts, recvTs, books, verdicts };
    const held = this.held.get(m.market_id);
    if (held) {
      held.rows.push(row);
      this.release(m.market_id);
    } else if (verdicts.some((v) => v.check === undefined)) this.held.set(m.market_id, { market: m, rows: [row] });
    else this.hand(m, row);
  }

  /** Writes the market's held rows whose verdicts are decided, in order (all of them, decided as they stand, when `force`). */
  release(marketId: string, force = false): void {
    const h = this.held.get(marketId);
    if (!h) return;
    while (h.rows.length) {
      if (!force && h.rows[0].verdicts.some((v) => v.check === undefined)) return;
      this.hand(h.market, h.rows.shift()!);
    }
    this.held.delete(marketId);
  }

  /** Every verdict decided as it stands and every row written: capture stops. */
  close(tokens: Iterable<T>): void {
    for (const t of tokens) this.abandon(t);
    for (const id of [...this.held.keys()]) this.release(id, true);
  }

  /** Markets with rows not yet written: a heartbeat must keep holding them. */
  holding(): string[] {
    return [...this.held.keys()];
  }

  private settled(t: T): void {
    if (!t.awaiting.length) this.waiting.delete(t);
    this.release(t.market.market_id);
    if (this.waiting.size || !this.timer) return;
    clearInterval(this.timer);
    this.timer = null;
  }

  private hand(m: Market, row: HeldRow): void {
    for (let i = 0; i < row.books.length; i++) {
      const v = row.verdicts[i];
      row.books[i].hash_check = v.check === undefined ? v.unexplained : v.check;
    }
    this.write(m, row.ts, row.recvTs, row.books);
  }
}
