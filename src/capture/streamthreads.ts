// A venue's stream across threads: one thread cannot take 50,000 changes a second with the
// parse, apply, hash check and row encoding each needs, so the markets are shared among stream
// threads (a market's tokens always in one, since its rows hold both outcomes), each running the
// venue's recorder. Capture's thread keeps the spool, gaps and market versions, and takes each
// thread's rows as encoded runs.
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import pino from 'pino';
import type { Clock, ClockParams } from '../clock.js';
import type { Config, Venue } from '../config.js';
import type { EncodedRun } from '../lake/spool.js';
import type { Logger } from '../log.js';
import type { Book, Market } from '../records.js';
import type { MarketPoll, Quote, VenueBookSummary } from '../venues/adapter.js';
import { UpstreamError } from '../venues/http.js';
import { type BookStream, type StreamGapReason, type StreamSink } from '../venues/stream.js';
import { backoffMs } from '../time.js';

export type StreamEvent =
  | { kind: 'lost'; market_id: string; reason: StreamGapReason; from: number; detail: string }
  | { kind: 'recovered'; market_id: string; at: number }
  | { kind: 'tick'; market_id: string; tickSize: number; recvTs: number }
  | { kind: 'resolved'; market_id: string; winner: number; ts: number; recvTs: number };

/** A recorder's counts (VenueRecorder.counts). */
export type ThreadStats = Record<string, number>;

export type ToThread =
  | { type: 'track'; markets: Market[]; now: number }
  | { type: 'resume'; newest: [string, number][] }
  | { type: 'rest'; market_id: string; summaries: VenueBookSummary[]; recvTs: number }
  | { type: 'polled'; market_id: string; quotes: Quote[]; recvTs: number }
  | { type: 'fetched'; id: number; summaries?: VenueBookSummary[]; recvTs?: number; error?: string }
  | { type: 'close' };

/** What a stream thread starts from (its workerData). */
export interface ThreadInit {
  venue: Venue;
  config: Config;
  clock: ClockParams;
  logLevel: string;
  /** Whether capture can fetch full books over REST for a resync (see StreamSink.fetchBooks). */
  fetch: boolean;
}

export type FromThread =
  | {
      type: 'batch';
      /** The thread's clock when it sent this: everything before is in it or an earlier batch. */
      reached: number;
      runs: EncodedRun[];
      latest: { market_id: string; ts: number; books: Book[] }[];
      events: StreamEvent[];
      /** Markets whose every token is synced on a healthy connection, as of this batch. */
      live: string[];
      /** Markets with rows the thread holds back (waiting for a check), as of this batch. */
      holding: string[];
      stats: ThreadStats;
    }
  | { type: 'fetch'; id: number; tokenIds: string[] }
  /** A pino line of the thread's recorder. */
  | { type: 'log'; line: string }
  | { type: 'closed' };

/** What capture's thread does with the stream threads' output. */
export interface ThreadSink extends Omit<StreamSink, 'books' | 'metrics'> {
  /** Book or metric rows of one market, encoded as spool lines. */
  run(market: Market, run: EncodedRun): void;
  /** The market's newest recorded books. */
  latest(market: Market, ts: number, books: Book[]): void;
}

interface Thread {
  worker: Worker;
  /** Markets given to this thread and not yet ended. */
  tracked: Map<string, Market>;
  live: Set<string>;
  /** Markets with rows the thread still holds back: the heartbeat keeps them. */
  holding: string[];
  stats: ThreadStats;
  /** The newest row time received of each market: where a lost thread's gap starts. */
  newest: Map<string, number>;
  /** The clock time of its latest batch. */
  reached: number;
  /** Resolves after the thread's last batch (it comes before its `closed`) or its exit. */
  done: Promise<void>;
  /** Wall time it started, and how many threads in a row died young before it: the respawn backoff. */
  started: number;
  failures: number;
}

/** A thread that dies within this of its start counts toward the respawn backoff. */
const YOUNG_MS = 60_000;
const RESPAWN_MAX_MS = 30_000;

/** The worker's own source: `.ts` when run through tsx, `.js` when compiled. */
const WORKER = new URL(`./streamworker${path.extname(fileURLToPath(import.meta.url))}`, import.meta.url);

/**
 * A thread running the worker. TypeScript source needs tsx registered in the thread (Node 20's
 * threads do not take the process's `--import` hooks), and nothing else of the process's flags.
 */
function startWorker(init: ThreadInit): Worker {
  if (!WORKER.pathname.endsWith('.ts')) return new Worker(WORKER, { workerData: init });
  const boot = `import('tsx/esm/api').then((tsx) => { tsx.register(); return import(${JSON.stringify(WORKER.href)}); });`;
  return new Worker(boot, { eval: true, workerData: init, execArgv: [] });
}

function addCounts(into: ThreadStats, counts: ThreadStats): void {
  for (const [k, n] of Object.entries(counts)) into[k] = (into[k] ?? 0) + n;
}

/** FNV-1a: the same market always goes to the same thread. */
function threadOf(marketId: string, count: number): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < marketId.length; i++) h = Math.imul(h ^ marketId.charCodeAt(i), 0x01000193);
  return (h >>> 0) % count;
}

export class ThreadedStream implements BookStream {
  private readonly threads: Thread[] = [];
  /** Markets by id, kept an hour past their end, for rows and events still on their way. */
  private readonly markets = new Map<string, Market>();
  private closing = false;
  /** Each market's newest book row a previous process spooled. */
  private resumed: [string, number][] = [];
  private readonly respawns = new Set<NodeJS.Timeout>();
  /** Stats of threads that exited, so the sums never go back. */
  private readonly past: ThreadStats = {};

  constructor(
    private readonly venue: Venue,
    private readonly config: Config,
    private readonly clock: Clock,
    private readonly log: Logger,
    private readonly sink: ThreadSink,
    count: number,
  ) {
    if (!clock.params) throw new Error('stream threads need a clock they can rebuild (createClock)');
    for (let i = 0; i < count; i++) this.threads.push(this.spawn(i));
  }

  private spawn(index: number, failures = 0): Thread {
    const init: ThreadInit = {
      venue: this.venue,
      config: this.config,
      clock: this.clock.params!,
      logLevel: this.log.level,
      fetch: !!this.sink.fetchBooks,
    };
    const worker = startWorker(init);
    let done = () => undefined as void;
    const thread: Thread = {
      worker,
      tracked: this.threads[index]?.tracked ?? new Map(),
      live: new Set(),
      holding: [],
      stats: {},
      newest: this.threads[index]?.newest ?? new Map(),
      reached: this.clock.now(),
      done: new Promise<void>((resolve) => (done = resolve)),
      started: Date.now(),
      failures,
    };
    worker.on('message', (msg: FromThread) => {
      if (msg.type === 'closed') done();
      else if (msg.type === 'log') this.relay(msg.line, index);
      else this.receive(thread, msg);
    });
    worker.on('error', (err) => this.log.error({ err, thread: index }, 'stream thread failed'));
    worker.once('exit', (code) => {
      done();
      if (!this.closing) this.replace(index, code);
    });
    return thread;
  }

  /**
   * A thread that died took its connections and unsent rows with it: its markets are not vouched
   * for from their newest received row until a new thread has their snapshots again.
   */
  private replace(index: number, code: number): void {
    const old = this.threads[index];
    // A thread that keeps dying at start (a broken install, say) is retried with backoff, not in a loop.
    const failures = Date.now() - old.started < YOUNG_MS ? old.failures + 1 : 1;
    const delay = failures <= 1 ? 0 : backoffMs(failures - 2, 250, RESPAWN_MAX_MS);
    this.log.error(
      { thread: index, code, markets: old.tracked.size, respawn_in_ms: delay },
      'stream thread exited; its markets are resubscribed by a new one',
    );
    addCounts(this.past, old.stats);
    old.stats = {};
    old.live.clear();
    const now = this.clock.now();
    for (const m of old.tracked.values()) {
      this.sink.lost(m, 'disconnected', old.newest.get(m.market_id) ?? now, `stream thread exited with code ${code}`);
    }
    const respawn = () => {
      if (this.closing) return;
      const thread = this.spawn(index, failures);
      this.threads[index] = thread;
      // Its markets' newest rows are spooled: the new thread's snapshots of unchanged books are not rows again.
      this.post(thread, { type: 'resume', newest: [...this.resumed, ...thread.newest] });
      this.post(thread, { type: 'track', markets: [...thread.tracked.values()], now: this.clock.now() });
    };
    if (delay === 0) respawn();
    else {
      const timer = setTimeout(() => {
        this.respawns.delete(timer);
        respawn();
      }, delay);
      this.respawns.add(timer);
    }
  }

  private relay(line: string, thread: number): void {
    const { level, msg, time: _time, pid: _pid, hostname: _hostname, ...fields } = JSON.parse(line) as Record<string, unknown>;
    const label = pino.levels.labels[level as number] as pino.Level | undefined;
    if (label) this.log[label]({ ...fields, thread }, msg as string);
  }

  private post(thread: Thread, msg: ToThread): void {
    thread.worker.postMessage(msg);
  }

  private receive(thread: Thread, msg: FromThread): void {
    if (msg.type === 'fetch') {
      this.sink.fetchBooks!(msg.tokenIds).then(
        ({ summaries, recvTs }) => this.post(thread, { type: 'fetched', id: msg.id, summaries, recvTs }),
        (err: Error) => this.post(thread, { type: 'fetched', id: msg.id, error: err.message }),
      );
      return;
    }
    if (msg.type !== 'batch') return;
    for (const run of msg.runs) {
      const m = this.markets.get(run.market);
      if (!m) continue;
      if (run.partition.dataset === 'books')
        thread.newest.set(m.market_id, Math.max(thread.newest.get(m.market_id) ?? -Infinity, run.last.ts));
      this.sink.run(m, run);
    }
    for (const l of msg.latest) {
      const m = this.markets.get(l.market_id);
      if (m) this.sink.latest(m, l.ts, l.books);
    }
    for (const e of msg.events) {
      const m = this.markets.get(e.market_id);
      if (!m) continue;
      if (e.kind === 'lost') this.sink.lost(m, e.reason, e.from, e.detail);
      else if (e.kind === 'recovered') this.sink.recovered(m, e.at);
      else if (e.kind === 'resolved') this.sink.resolved?.(m, e.winner, e.ts, e.recvTs);
      else this.sink.tickSize(m, e.tickSize, e.recvTs);
    }
    thread.live = new Set(msg.live);
    thread.holding = msg.holding;
    thread.stats = msg.stats;
    thread.reached = msg.reached;
  }

  private threadFor(m: Market): Thread {
    return this.threads[threadOf(m.market_id, this.threads.length)];
  }

  track(markets: Market[], now: number): void {
    const shares = this.threads.map(() => [] as Market[]);
    for (const m of markets) {
      shares[threadOf(m.market_id, this.threads.length)].push(m);
      this.markets.set(m.market_id, m);
    }
    this.threads.forEach((thread, i) => {
      for (const m of shares[i]) thread.tracked.set(m.market_id, m);
      for (const [id, m] of thread.tracked) {
        if (m.end_time > now) continue;
        thread.tracked.delete(id);
        thread.newest.delete(id);
      }
      this.post(thread, { type: 'track', markets: shares[i], now });
    });
    for (const [id, m] of this.markets) if (m.end_time < now - 3_600_000) this.markets.delete(id);
  }

  resumeAfter(newest: ReadonlyMap<string, number>): void {
    this.resumed = [...newest];
    for (const thread of this.threads) this.post(thread, { type: 'resume', newest: this.resumed });
  }

  holding(): string[] {
    return this.threads.flatMap((t) => t.holding);
  }

  /** The clock time every thread has reached: how far the stream is sure to have handed over. */
  reached(): number {
    return Math.min(...this.threads.map((t) => t.reached));
  }

  tracks(m: Market): boolean {
    return this.threadFor(m).tracked.has(m.market_id);
  }

  live(m: Market): boolean {
    return this.threadFor(m).live.has(m.market_id);
  }

  rest(m: Market, poll: MarketPoll): void {
    if (poll.books instanceof UpstreamError) return;
    this.post(this.threadFor(m), { type: 'rest', market_id: m.market_id, summaries: poll.summaries ?? [], recvTs: poll.recvTs });
  }

  polled(m: Market, quotes: Quote[], recvTs: number): void {
    this.post(this.threadFor(m), { type: 'polled', market_id: m.market_id, quotes, recvTs });
  }

  /** The recorders' counts summed over the threads, those that exited included. */
  get stats(): ThreadStats {
    const sum = { ...this.past };
    for (const t of this.threads) addCounts(sum, t.stats);
    return sum;
  }

  /** Resolves once every thread has sent its last rows. */
  async close(): Promise<void> {
    this.closing = true;
    for (const timer of this.respawns) clearTimeout(timer);
    for (const t of this.threads) this.post(t, { type: 'close' });
    await Promise.all(this.threads.map((t) => t.done));
  }
}
