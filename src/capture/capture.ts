// The capture engine: per venue, discover markets, poll every open market's books and quotes
// each interval, and spool four datasets. Failures become gap records with their spans;
// nothing is filled in. A heartbeat beside the spool lets a restart record the time the
// process was down as a gap too.
import type { Clock } from '../clock.js';
import type { Config, Venue, Window } from '../config.js';
import type { Duck } from '../lake/duckdb.js';
import { writeFileAtomic } from '../lake/fsutil.js';
import { localMarkets } from '../lake/catalogue.js';
import { ALL_WINDOWS, type LakePaths, type Partition, lakePaths, partitionDir, partitionOf } from '../lake/layout.js';
import { type Grace, type SealReport, isDue, sealDue } from '../lake/seal.js';
import { HOUR, WINDOW_MS, floorTo } from '../time.js';
import { Spool, listSpool, recoverSpool } from '../lake/spool.js';
import { sweepUncommitted } from '../lake/writer.js';
import { type Heartbeat, type HeartbeatMarket, readHeartbeat } from './heartbeat.js';
import { GapLedger, type GapScope, type OpenGap, gapKey, scopeOf } from './gaps.js';
import { SpoolKeeper } from './keeper.js';
import type { Logger } from '../log.js';
import {
  type Book,
  type LatestBook,
  type Market,
  type MarketRow,
  type MetricRow,
  type TradeRow,
  bookRows,
  metricRows,
  marketLakeRow,
  resolvedAt,
  withStreamFacts,
  marketKey,
} from '../records.js';
import type { VenueAdapter } from '../venues/adapter.js';
import { type ClientStats, UpstreamError } from '../venues/http.js';
import { type BookStream, type StreamSink } from '../venues/stream.js';
import { type ThreadSink, ThreadedStream } from './streamthreads.js';
import {
  type ReferenceFeed,
  type ReferenceRecorder,
  type ReferenceSink,
  createRecorder,
  createReferenceRecorder,
  streamTraits,
} from '../venues/index.js';
import type { Publisher } from '../bucket/publish.js';
import type { CaptureHealth } from '../health.js';

/** How long before a market's open its tokens are subscribed. */
const STREAM_LEAD_MS = 60_000;

export interface CaptureStats {
  cycles: number;
  books: number;
  metrics: number;
  versions: number;
  trades: number;
  reference: number;
  gaps: number;
  discoverFailures: number;
}

export class Capture {
  readonly spool: Spool;
  readonly paths: LakePaths;
  /** What the spool keeps, drops and gaps for storage. */
  private readonly keeper: SpoolKeeper;
  private readonly gaps: GapLedger;
  private readonly tradeEvents: ReadonlySet<Venue>;
  private readonly lastTrades = new LastTrades();
  /** Streamed markets whose feed this process has had (their end time, to forget them by). */
  private readonly fed = new Map<string, number>();
  /**
   * Markets the previous process spooled books of but its last heartbeat did not name (found after
   * it: on a starved machine the heartbeat can lag the spool by minutes), with its newest row: no
   * downtime gap could be opened for them at the start, so one opens when this process learns of them.
   */
  private readonly unheld = new Map<string, { since: number; segment: string; beat: number }>();
  readonly stats: CaptureStats = { cycles: 0, books: 0, metrics: 0, versions: 0, trades: 0, reference: 0, gaps: 0, discoverFailures: 0 };
  /**
   * Newest captured books of each market whose rows are on disk (acknowledged), for readers in this
   * process and the feed: a book served as the newest recorded is one a kill -9 cannot take back.
   */
  readonly latest = new Map<string, LatestBook>();
  /** Newest books whose rows the next flush writes: `latest` once it has. */
  private unacknowledged = new Map<string, LatestBook>();
  /** The time of each market's first row this process recorded with a book of every outcome: from it on, the heartbeat says the market held. */
  private readonly firstBook = new Map<string, number>();
  /** The newest version this process recorded of each market it knows, and when: a new entry per version (the feed's changes). */
  readonly known = new Map<string, { market: Market; version: string; ts: number }>();
  private readonly lastDiscover = new Map<Venue, number>();
  private running = false;
  private loops: Promise<void>[] = [];
  private timers: NodeJS.Timeout[] = [];
  private sealing: Promise<SealReport | void> = Promise.resolve();
  /** The lake read of the markets a previous process held unnamed (`unheldFromLake`), beside the start. */
  private unheldRead: Promise<void> = Promise.resolve();
  /** Seal passes asked for and not over yet. */
  private sealsPending = 0;
  private flushing: Promise<void> = Promise.resolve();
  private startedAt = Date.now();
  private readonly cycledTo = new Map<Venue, number>();
  private startedClockAt = -Infinity;
  /** The heartbeat this process last wrote (see `announce`). */
  private lastBeat: Heartbeat | null = null;
  /** See Heartbeat `sealed_through`. */
  private sealedThrough: number | null = null;
  private sealFailure: { error: string; backlog: number } | null = null;
  /** Book streams of the venues that stream (CAPTURE_STREAM); the others are polled. */
  readonly streams = new Map<Venue, BookStream>();
  /** The reference prices' recorder (CAPTURE_REFERENCE), started after a restart's downtime gaps are open. */
  readonly reference: ReferenceRecorder | null;

  constructor(
    private readonly config: Config,
    private readonly clock: Clock,
    private readonly duck: Duck,
    private readonly adapters: VenueAdapter[],
    private readonly log: Logger,
    /** Publishes committed partitions to the bucket, when one is configured (`publisherFor`). */
    readonly publisher: Publisher | null,
  ) {
    this.paths = lakePaths(config.dataDir);
    this.spool = new Spool(this.paths.spool);
    this.gaps = new GapLedger(this.spool, log, this.stats);
    this.keeper = new SpoolKeeper(this.spool, config.capture.spoolMaxBufferBytes, this.gaps, log);
    const streamed = adapters.filter((a) => config.capture.stream.venues.includes(a.venue));
    this.tradeEvents = new Set(streamed.map((a) => a.venue).filter((v) => streamTraits(v).tradesInStream));
    const threads = config.capture.stream.threads;
    for (const adapter of streamed) {
      const { venue } = adapter;
      const sink = this.streamSink(adapter);
      // Threads need a clock they can rebuild; a hand-driven test clock keeps the recorder here.
      if (streamTraits(venue).threaded && threads > 0 && clock.params)
        this.streams.set(venue, new ThreadedStream(venue, config, clock, log, this.threadSink(sink), threads));
      else this.streams.set(venue, createRecorder(venue, config, clock, log, sink));
    }
    this.reference = createReferenceRecorder(config, clock, log, this.referenceSink());
  }

  /** Where reference observations and their gaps go: one feed's rows end its open gap at the first after its start. */
  private referenceSink(): ReferenceSink {
    return {
      rows: (feed, rows) => {
        for (const row of rows) {
          this.spool.append(partitionOf('reference', feed.venue, feed.coin, ALL_WINDOWS, row.ts), [row]);
          const open = this.gaps.get(gapKey(referenceScope(feed)));
          if (open && row.ts > open.from_ts) this.gaps.close(open, row.ts);
        }
        this.stats.reference += rows.length;
      },
      lost: (feed, from, reason, detail) => this.gaps.fail(referenceScope(feed), from, { kind: reason, message: detail }),
    };
  }

  /** Where a venue's stream puts rows, gaps and market versions, with the venue's REST books for a resync. */
  private streamSink(adapter: VenueAdapter): StreamSink {
    return {
      books: (m, ts, recvTs, books) => {
        if (this.keeper.keeps(m, 'books', ts, books.length)) this.recordBooks(m, ts, recvTs, books, false);
      },
      metrics: (m, ts, recvTs, quotes) => {
        if (this.keeper.keeps(m, 'metrics', ts, quotes.length)) this.recordMetrics(m, ts, recvTs, quotes);
      },
      trade: (m, row) => this.recordTrades(m, [row]),
      lost: (m, reason, from, detail) =>
        this.gaps.fail(
          {
            venue: m.venue,
            coin: m.coin,
            window: m.window,
            market_id: m.market_id,
            until: m.end_time,
            dataset: 'books',
            channel: 'stream',
          },
          from,
          { kind: reason, message: detail },
        ),
      // A new version at once rather than at the next discovery; both tokens announce it, the second changes nothing.
      tickSize: (m, tickSize, recvTs) => {
        const known = this.known.get(marketKey(m.venue, m.market_id))?.market ?? m;
        if (known.tick_size !== tickSize) this.recordVersion({ ...known, tick_size: tickSize }, recvTs);
      },
      // The venue's own resolution time: a new version at once (discovery's catalogue has no such time).
      resolved: (m, winner, ts, recvTs) => {
        const known = this.known.get(marketKey(m.venue, m.market_id))?.market ?? m;
        if (known.resolved_time === null) this.recordVersion(resolvedAt(known, winner, ts), recvTs);
      },
      fetchBooks: adapter.bookSummaries?.bind(adapter),
      // Books are complete again from `at`: that ends the stream's gap and any other (REST failures, downtime).
      recovered: (m, at) => {
        this.openUnheldDowntime(m);
        const closing = [gapKey({ ...m, dataset: 'books', channel: 'stream' }), gapKey({ ...m, dataset: 'books' })]
          .map((key) => this.gaps.get(key))
          .filter((g) => g !== undefined);
        if (this.tradeEvents.has(m.venue)) this.tradesBeforeFeed(m, closing, this.clock.now());
        for (const g of closing) this.gaps.close(g, at);
      },
    };
  }

  /** Where stream threads' rows go: the same checks and counts as the sink's, with rows already encoded. */
  private threadSink(sink: StreamSink): ThreadSink {
    const { books: _books, metrics: _metrics, trade: _trade, ...events } = sink;
    return {
      ...events,
      run: (m, run) => {
        const dataset = run.partition.dataset as 'books' | 'metrics' | 'trades';
        if (!this.keeper.keeps(m, dataset, run.first.ts, run.rows)) return;
        this.spool.appendRun(run);
        if (dataset === 'books') this.stats.books += run.rows;
        else if (dataset === 'trades') this.stats.trades += run.rows;
        else {
          this.stats.metrics += run.rows;
          this.gaps.succeed(m, 'metrics', run.first.ts);
        }
      },
      // A thread sends each market's newest books of a batch: held whole from one holding every outcome (a bound
      // later than the first such row, if that came earlier in the batch, which vouches for less, never more).
      latest: (m, ts, books) => {
        this.unacknowledged.set(marketKey(m.venue, m.market_id), { ts, books });
        this.heldFrom(m, ts, books);
      },
    };
  }

  /** Recovers what a previous process left, then starts the loops. */
  async start(): Promise<void> {
    const { lastTs, bookPartitions, unprovedFrom, ...recovered } = await recoverSpool(this.paths.spool, this.spool.segment);
    // A seal the previous process was killed in may have left a file no manifest names, which a glob reads beside its re-seal.
    const uncommitted = await sweepUncommitted(this.paths.lake, this.paths.manifest);
    const beat = await this.resumeFromHeartbeat(lastTs, unprovedFrom);
    if (beat && this.reference) this.referenceDown(beat, lastTs, this.reference.feedList());
    const books = new Map([...lastTs].filter(([key]) => key.startsWith('books:')).map(([key, ts]) => [key.slice('books:'.length), ts]));
    if (beat) {
      const named = new Set(beat.open.map((m) => m.market_id));
      for (const [id, ts] of books)
        if (!named.has(id)) this.unheld.set(id, { since: unprovedFrom.get(id) ?? ts, segment: beat.segment, beat: beat.ts });
      // Not awaited: a starved machine's statements must not hold the restart back. A market this
      // process resyncs or rediscovers first takes its gap from there; this read then finds it handled.
      this.unheldRead = this.unheldFromLake(bookPartitions);
    }
    for (const s of this.streams.values()) s.resumeAfter(books);
    this.log.info({ segment: this.spool.segment, ...recovered, uncommitted }, 'capture starting');
    this.running = true;
    this.startedAt = Date.now();
    this.startedClockAt = this.clock.now();
    this.loops = this.adapters.map((a) => this.venueLoop(a));
    this.reference?.start();
    this.timers.push(setInterval(() => void this.flushDue(), this.config.capture.flushMs));
    // A pass still running (a busy machine, many markets ending at once) is not queued behind: passes would pile up.
    this.timers.push(setInterval(() => void (this.sealsPending === 0 && this.seal()), 2000));
    // Publishing runs beside sealing and never holds it: a bucket that is down only grows the backlog.
    const publisher = this.publisher;
    if (publisher) this.timers.push(setInterval(() => void publisher.pass().catch(() => undefined), this.config.publishMs));
  }

  async stop(): Promise<void> {
    this.running = false;
    for (const t of this.timers) clearInterval(t);
    await Promise.all(this.loops);
    for (const s of this.streams.values()) await s.close();
    this.reference?.close();
    // The stream ends here: its open gaps end with it, written now (a restart's downtime gap follows).
    for (const g of this.gaps.all()) if (g.channel === 'stream') this.gaps.close(g, Math.max(this.clock.now(), g.from_ts + 1));
    await this.unheldRead;
    await this.sealing;
    // What is due is sealed with the gaps just closed, so the last heartbeat says how far this recorder's record is whole.
    await this.seal();
    await this.flush(true);
    // Replicas learn from the bucket that capture stopped, not only by the heartbeat's age: a pass
    // publishes what was committed since the last, then the heartbeat that may vouch for it.
    await this.publisher?.pass().catch(() => undefined);
    // Rows the disk refused until the end are lost with the process; say how many.
    await this.spool
      .close()
      .catch((err) => this.log.error({ err, unsaved_rows: this.spool.bufferedRows }, 'capture stopped with rows it could not save'));
    this.log.info({ ...this.stats, acknowledged: this.spool.acknowledged }, 'capture stopped');
  }

  /**
   * The heartbeat lags the spool by up to one flush, so `lastTs` (the newest row each market
   * really has in the spool) decides: a gap open in the heartbeat whose market has rows after
   * its start was closed, and its row spooled with them; a downtime gap starts after the last row,
   * or where the rows before it stopped being vouched for (`unprovedFrom`: a doubt the process
   * held in memory died with it).
   */
  private async resumeFromHeartbeat(lastTs: Map<string, number>, unprovedFrom: ReadonlyMap<string, number>): Promise<Heartbeat | null> {
    const beat = await readHeartbeat(this.paths);
    if (!beat) return null;
    const last = (dataset: string, id: string | null) => (id === null ? -Infinity : (lastTs.get(`${dataset}:${id}`) ?? -Infinity));
    for (const g of beat.gaps) {
      // A stream gap ends with the process that had the stream (the downtime gap takes over from
      // the newest row); it is written, not resumed, since rows after its start (REST fallback) do not close it.
      if (g.channel === 'stream') {
        this.gaps.resume(g);
        this.gaps.close(g, Math.max(beat.ts, last(g.dataset, g.market_id), g.from_ts + 1));
        continue;
      }
      if (last(g.dataset, g.market_id) > g.from_ts) continue;
      this.gaps.resume({ ...g, detail: `${g.detail}; capture restarted` });
    }
    for (const m of beat.open) {
      for (const dataset of ['books', 'metrics'] as const) {
        // From the market's newest spooled row: a streamed change stamped before the heartbeat may
        // have arrived after it and been lost with the process. From its last proof where the rows
        // after it were in doubt. Without rows in the spool, the heartbeat.
        const newest = (dataset === 'books' ? unprovedFrom.get(m.market_id) : undefined) ?? last(dataset, m.market_id);
        const from = newest > -Infinity ? newest : beat.ts;
        const key = gapKey({ ...m, dataset });
        if (this.gaps.get(key) || m.end_time <= from) continue;
        this.gaps.resume({
          ...m,
          dataset,
          from_ts: from,
          until: m.end_time,
          reason: 'process_down',
          detail: `capture process ${beat.segment} stopped`,
          failures: 1,
        });
      }
    }
    // Nothing was recorded between the previous process's last flush and now (after `make fill`,
    // the handover to live capture): each open market gets a process_down gap saying so.
    this.log.warn(
      { since: new Date(beat.ts).toISOString(), down_ms: this.clock.now() - beat.ts, gaps: this.gaps.all().length },
      'resuming after a previous capture process; each open market gets a process_down gap for the time nothing ran',
    );
    return beat;
  }

  /**
   * Each reference feed missed what came while no process listened: from its newest spooled
   * observation (or the end of the feed's gap the previous process had open, if later), else a
   * stall bound before the heartbeat (an observation received after it may be stamped before it).
   */
  private referenceDown(beat: Heartbeat, lastTs: ReadonlyMap<string, number>, feeds: ReferenceFeed[]): void {
    for (const feed of feeds) {
      const scope = referenceScope(feed);
      const openBefore = beat.gaps.find((g) => gapKey(g) === gapKey(scope));
      const newest = lastTs.get(`reference:${feed.id}`) ?? beat.ts - this.config.capture.reference.stallMs;
      const from = openBefore ? Math.max(beat.ts, newest, openBefore.from_ts + 1) : newest;
      this.gaps.fail(scope, from, { kind: 'process_down', message: `capture process ${beat.segment} stopped` });
    }
  }

  /**
   * Discovery lists only markets around now, so a market the previous process held unnamed that
   * ended while no process ran would never be heard of again: the version of it this lake keeps
   * opens its downtime gap at once. One the lake has no version of waits for discovery.
   */
  private async unheldFromLake(bookPartitions: ReadonlyMap<string, Partition>): Promise<void> {
    const partitions = new Map<string, Partition>();
    for (const [id, { since }] of this.unheld) {
      const books = bookPartitions.get(id);
      if (!books) continue;
      // Markets are kept under their start's hour; books run from a minute before the start to the
      // end, a window later: the start is within a window and a minute of the newest book.
      for (const at of [since - (WINDOW_MS[books.window as Window] ?? HOUR) - STREAM_LEAD_MS, since + STREAM_LEAD_MS]) {
        const p = partitionOf('markets', books.venue, books.coin, books.window, at);
        partitions.set(partitionDir(p), p);
      }
    }
    if (partitions.size === 0) return;
    try {
      const found = await localMarkets(this.duck, this.paths, [...partitions.values()], new Set(this.unheld.keys()));
      for (const m of found.values()) this.openUnheldDowntime(m);
    } catch (err) {
      // Capture starts all the same; these markets' gaps wait for discovery, as before.
      this.log.warn({ err, markets: this.unheld.size }, 'could not read the markets a previous process held unnamed');
    }
  }

  /**
   * Opens the downtime gap of a market the previous process held unnamed (`unheld`): from its
   * newest spooled book to its end, unless this process resyncs it before (that closes the gap).
   */
  private openUnheldDowntime(m: Market): void {
    const down = this.unheld.get(m.market_id);
    if (!down) return;
    this.unheld.delete(m.market_id);
    const scope = { venue: m.venue, coin: m.coin, window: m.window, market_id: m.market_id, dataset: 'books' as const };
    // A market that ended before that heartbeat is not named in it because it was let go, delivered.
    if (m.end_time <= down.beat || m.end_time <= down.since || this.gaps.get(gapKey(scope))) return;
    this.gaps.resume({
      ...scope,
      from_ts: down.since,
      until: m.end_time,
      reason: 'process_down',
      detail: `capture process ${down.segment} stopped (it held the market after its last heartbeat)`,
      failures: 1,
    });
  }

  /** The flush timer: while storage fails, attempts back off instead of hammering the disk. */
  private async flushDue(): Promise<void> {
    if (this.keeper.due) await this.flush();
  }

  /**
   * Writes and fsyncs spooled rows, then the heartbeat naming what was open at that time. Never
   * throws: while the disk fails, the rows stay buffered (see `SpoolKeeper`) and no heartbeat is written.
   */
  flush(stopped = false): Promise<void> {
    // One at a time: a timer's flush still in flight at a stop must not write its heartbeat after the
    // stop's (seen once: a cleanly stopped capture's heartbeat without `stopped`).
    const run = this.flushing.then(() => this.flushOnce(stopped));
    this.flushing = run.catch(() => undefined);
    return run;
  }

  private async flushOnce(stopped: boolean): Promise<void> {
    const ts = this.clock.now();
    // Every row of these books was appended by now, so this flush writes it (rows appended later wait for the next).
    const flushing = this.unacknowledged;
    this.unacknowledged = new Map();
    const newest = (key: string) => flushing.get(key)?.ts ?? this.latest.get(key)?.ts ?? null;
    // Before the flush: every book handed over by now is in it. Pre-open markets already subscribed
    // too: a book recorded before the open would otherwise hold through a downtime after it. A market
    // is held until every loop and stream thread has passed its end, not the clock: a starved thread
    // may still hold its last changes (a kill then must leave a downtime gap up to the end).
    const reached = Math.min(ts, this.progress());
    // Rows a recorder still holds back (a book's hash verdict waits for a trade), or may still receive
    // (a market past its end it has not let go: a starved sender, or the venue's latency, sends a
    // window's last changes after the clock's end), are not in the spool yet. Unnamed, a kill then
    // lost them with no gap, the restart taking the market for one delivered (2026-11-29, beside stress-ng).
    const holding = new Set([...this.streams].flatMap(([venue, s]) => [...(s.holding?.() ?? [])].map((id) => marketKey(venue, id))));
    const open = [...this.known.values()]
      .filter(
        ({ market: m }) => m.start_time - STREAM_LEAD_MS <= ts && (reached < m.end_time || holding.has(marketKey(m.venue, m.market_id))),
      )
      .map(({ market: m }) => ({
        venue: m.venue,
        coin: m.coin,
        window: m.window,
        market_id: m.market_id,
        end_time: m.end_time,
        newest: newest(marketKey(m.venue, m.market_id)),
        ...this.heldSince(m),
      }));
    await this.announce(open);
    const flushedAt = await this.keeper.flush();
    if (flushedAt === null) {
      // Still unacknowledged: the next flush that succeeds acknowledges them, unless newer ones came meanwhile.
      for (const [key, book] of flushing) if (this.known.has(key) && !this.unacknowledged.has(key)) this.unacknowledged.set(key, book);
      return;
    }
    // Not of a market forgotten while the flush wrote (discovery lets go of markets long over).
    for (const [key, book] of flushing)
      if (this.known.has(key) && (this.latest.get(key)?.ts ?? -Infinity) <= book.ts) this.latest.set(key, book);
    const { buffered_rows, dropped_rows, seal_backlog, seal_error, publish } = this.health();
    const beat: Heartbeat = {
      ts,
      flushed_at: flushedAt,
      acknowledged: this.spool.acknowledged,
      ...(stopped ? { stopped } : {}),
      health: { buffered_rows, dropped_rows, seal_backlog, seal_error, ...(publish ? { publish } : {}) },
      segment: this.spool.segment,
      ...(this.sealedThrough === null ? {} : { sealed_through: Math.min(this.sealedThrough, this.spool.appendedSinceRelease) }),
      open,
      gaps: this.gaps.all(),
    };
    // The rows are safe; a heartbeat that cannot be written only makes a restart's gap start earlier.
    await writeFileAtomic(this.paths.heartbeat, JSON.stringify(beat)).catch(() => undefined);
    this.lastBeat = beat;
  }

  /**
   * Since when this process has held the market (its first row with a book of every outcome: before,
   * it had no copy of some book to vouch for), and the gaps on it it wrote since; none before then.
   */
  private heldSince(m: Market): Pick<HeartbeatMarket, 'since' | 'written'> {
    const since = this.firstBook.get(marketKey(m.venue, m.market_id));
    return since === undefined ? {} : { since, written: this.gaps.writtenOf(m.venue, m.market_id) };
  }

  /**
   * A restart writes downtime gaps only for the markets a heartbeat named, and a flush's own
   * heartbeat comes after its rows are on disk: a kill between the two (a slow fsync on a busy
   * machine, seen beside stress-ng --cpu 8) would leave a new market's acknowledged rows, and the
   * changes lost after them, with no gap. So markets new since the last heartbeat are named
   * before their rows go to disk, in a heartbeat that otherwise says what the last one said (its
   * time: every row before it is on disk). Once per new market: a few small writes an hour.
   */
  private async announce(open: HeartbeatMarket[]): Promise<void> {
    const named = new Set(this.lastBeat?.open.map((m) => marketKey(m.venue, m.market_id)));
    const added = open.filter((m) => !named.has(marketKey(m.venue, m.market_id)));
    if (!added.length) return;
    const { buffered_rows, dropped_rows, seal_backlog, seal_error } = this.health();
    const base: Heartbeat = this.lastBeat ?? {
      ts: this.startedClockAt,
      flushed_at: Date.now(),
      acknowledged: this.spool.acknowledged,
      health: { buffered_rows, dropped_rows, seal_backlog, seal_error },
      segment: this.spool.segment,
      open: [],
      gaps: this.gaps.all(),
    };
    const beat = { ...base, open: [...base.open, ...added.map((m) => ({ ...m, newest: null }))] };
    await writeFileAtomic(this.paths.heartbeat, JSON.stringify(beat)).catch(() => undefined);
    this.lastBeat = beat;
  }

  /** Each venue's HTTP requests, retries and failures since start. */
  upstreamStats(): Partial<Record<Venue, Readonly<ClientStats>>> {
    return Object.fromEntries(this.adapters.flatMap((a) => (a.http ? [[a.venue, { ...a.http.stats }]] : [])));
  }

  health(now = Date.now()): CaptureHealth {
    const { failing, ...storage } = this.keeper.health();
    return {
      state: failing ? 'failing' : this.running ? 'running' : 'stopped',
      flush_age_ms: now - (this.keeper.lastFlushAt ?? this.startedAt),
      ...storage,
      seal_backlog: this.sealFailure?.backlog ?? 0,
      seal_error: this.sealFailure?.error ?? null,
      ...(this.publisher ? { publish: this.publisher.health() } : {}),
    };
  }

  /**
   * Whether every row of a market is on disk and no more will come: over by the last heartbeat's
   * time and not named open in it (a heartbeat is written after its flush, and names a market until
   * every loop and stream thread has passed its end and no row of it is held back).
   */
  private finished(venue: Venue, marketId: string): boolean {
    const beat = this.lastBeat;
    const known = this.known.get(marketKey(venue, marketId));
    return (
      beat !== null &&
      known !== undefined &&
      known.market.end_time <= beat.ts &&
      !beat.open.some((m) => m.venue === venue && m.market_id === marketId)
    );
  }

  /** Seals due hours; a failure (a full disk, say) leaves the rows in the spool, logged once per streak. */
  seal(now = this.clock.now()): Promise<SealReport | void> {
    const grace = (d: string) => (d === 'markets' ? this.config.capture.marketsSealGraceMs : this.config.capture.sealGraceMs);
    this.sealsPending++;
    this.sealing = this.sealing
      .then(() => sealDue(this.duck, this.paths, now, grace, this.spool, { finished: (p, market) => this.finished(p.venue, market) }))
      .then((report) => {
        if (report.files > 0) this.log.info(report, 'sealed');
        // Every hour due at `now` is sealed, with what was spooled of it before this pass (see sealedThroughNow).
        this.sealedThrough = floorTo(now - this.config.capture.sealGraceMs, HOUR);
        if (this.sealFailure) this.log.warn({ backlog: this.sealFailure.backlog }, 'sealing recovered');
        this.sealFailure = null;
        return report;
      })
      .catch(async (err: NodeJS.ErrnoException) => {
        const backlog = await dueParts(this.paths.spool, now, grace).catch(() => -1);
        if (!this.sealFailure)
          this.log.error(
            { err: { code: err.code, message: err.message }, backlog },
            'seal failed; the spool keeps the rows and sealing is retried',
          );
        this.sealFailure = { error: `${err.code ?? 'ERROR'}: ${String(err.message).slice(0, 200)}`, backlog };
        this.sealedThrough = null;
      })
      .finally(() => this.sealsPending--);
    return this.sealing;
  }

  /**
   * The clock time every venue's poll loop (its next cycle's, due a poll after its latest ended)
   * and every stream thread has reached: how a paced clock (a fill, the stream audits) keeps the
   * venue's time from running away from a starved capture.
   */
  progress(): number {
    const streams = [...this.streams.values()].map((s) => s.reached?.() ?? Infinity);
    if (this.reference) streams.push(this.reference.reached());
    if (this.cycledTo.size < this.adapters.length) return Math.min(this.startedClockAt, ...streams);
    return Math.min(...[...this.cycledTo.values()].map((t) => t + this.config.capture.pollMs), ...streams);
  }

  private async venueLoop(adapter: VenueAdapter): Promise<void> {
    let previous = -Infinity;
    while (this.running) {
      const started = this.clock.now();
      // A stopped clock (the end of a fill) must not record the same instant twice.
      if (started <= previous) {
        await new Promise((r) => setTimeout(r, 10));
        continue;
      }
      try {
        await this.cycle(adapter, started);
      } catch (err) {
        this.log.error({ err, venue: adapter.venue }, 'capture cycle failed');
      }
      // Rows are stamped when their answers arrive, all by now: the next cycle starts later.
      previous = this.clock.now();
      this.cycledTo.set(adapter.venue, previous);
      const next = started + this.config.capture.pollMs;
      const wait = next - this.clock.now();
      if (wait > 0 && this.running) await this.clock.sleep(wait);
      else await new Promise((r) => setImmediate(r));
    }
  }

  /** One poll of a venue at clock time `now`; exposed so tests can drive capture step by step. */
  async cycle(adapter: VenueAdapter, now: number): Promise<void> {
    this.stats.cycles++;
    const venue = adapter.venue;
    if (now - (this.lastDiscover.get(venue) ?? -Infinity) >= this.config.capture.discoverMs) {
      await this.discover(adapter, now);
    }
    this.gaps.endMarkets(venue, now, this.config.capture.stream.stallMs);
    const live = (m: Market) => m.venue === venue && now < m.end_time && m.status !== 'cancelled';
    const open = [...this.known.values()].map((k) => k.market).filter((m) => live(m) && m.start_time <= now);
    const recorder = this.streams.get(venue) ?? null;
    // Subscribed a little before the open, so the first change of a market is recorded from a snapshot.
    recorder?.track(
      [...this.known.values()].map((k) => k.market).filter((m) => live(m) && m.start_time - STREAM_LEAD_MS <= now),
      now,
    );
    if (open.length === 0) return;
    // A failed REST answer is a gap in a streamed market's books only while the stream is not
    // live, from the poll's time: not when the stream was live as the poll went out, nor when the
    // answer comes back after its market ended (the stream's own gaps say what it missed).
    const liveAtPoll = new Set(open.filter((m) => recorder?.live(m)).map((m) => m.market_id));
    const polled = await adapter.poll(open, now);
    for (const m of open) {
      const r = polled.get(m.market_id);
      if (!r) continue;
      const scope = scopeOf(m);
      if (recorder?.tracks(m)) {
        // Streamed: REST books resync or check the streamed copy, and are recorded only as its fallback.
        if (!(r.books instanceof UpstreamError)) recorder.rest(m, { ...r, sentTs: now });
        else if (!recorder.live(m) && !liveAtPoll.has(m.market_id) && this.clock.now() < m.end_time)
          this.gaps.fail({ ...scope, dataset: 'books' }, now, r.books);
      } else if (r.books instanceof UpstreamError) this.gaps.fail({ ...scope, dataset: 'books' }, now, r.books);
      // A row's time is when its answer arrived, not when the cycle began: a snapshot is never
      // stamped earlier than the exchange and receive times of the books it holds.
      else if (this.keeper.keeps(m, 'books', now, r.books.length)) this.recordBooks(m, r.recvTs, r.recvTs, r.books);
      if (r.quotes instanceof UpstreamError) this.gaps.fail({ ...scope, dataset: 'metrics' }, now, r.quotes);
      else if (recorder?.tracks(m)) {
        // Streamed: a quote row is written when chance, price or last trade changes, not per poll.
        this.gaps.succeed(m, 'metrics', r.recvTs);
        recorder.polled(m, r.quotes, r.recvTs);
      } else if (this.keeper.keeps(m, 'metrics', now, r.quotes.length)) this.recordMetrics(m, r.recvTs, r.recvTs, r.quotes);
    }
  }

  private async discover(adapter: VenueAdapter, now: number): Promise<void> {
    let markets: Market[];
    try {
      markets = await adapter.discover(now);
    } catch (err) {
      this.stats.discoverFailures++;
      const e = err instanceof UpstreamError ? err : new UpstreamError('malformed', String(err));
      this.log.warn({ venue: adapter.venue, err: e.message }, 'discovery failed');
      for (const coin of this.config.capture.coins[adapter.venue]) {
        for (const window of this.config.capture.windows) {
          this.gaps.fail({ venue: adapter.venue, coin, window, market_id: null, dataset: 'markets', until: null }, now, e);
        }
      }
      return;
    }
    this.lastDiscover.set(adapter.venue, now);
    for (const g of this.gaps.all()) {
      if (g.venue === adapter.venue && g.dataset === 'markets') this.gaps.close(g, now);
    }
    // What the stream learnt of a market (its resolution time) stands until the catalogue says it too.
    for (const market of markets)
      this.recordVersion(withStreamFacts(market, this.known.get(marketKey(market.venue, market.market_id))?.market), now);
    // Forget markets long past, so memory stays flat over weeks of capture: their newest books too
    // (a capture without the API in its process, `make capture`, has no reader to prune them; an
    // API reads a book it no longer has from the lake).
    for (const [key, { market }] of this.known) {
      if (market.venue !== adapter.venue || market.end_time >= now - 6 * 3_600_000) continue;
      this.known.delete(key);
      this.latest.delete(key);
      this.unacknowledged.delete(key);
      this.firstBook.delete(key);
    }
    this.gaps.forgetBefore(now - 6 * 3_600_000);
  }

  /** Spools the market as a new version when it differs from the one last recorded. */
  private recordVersion(market: Market, now: number): void {
    const key = marketKey(market.venue, market.market_id);
    const version = JSON.stringify(market);
    if (this.known.get(key)?.version === version) return;
    this.known.set(key, { market, version, ts: now });
    this.openUnheldDowntime(market);
    this.spool.append(partitionOf('markets', market.venue, market.coin, market.window, market.start_time), [
      marketLakeRow(market, now) as unknown as MarketRow,
    ]);
    this.stats.versions++;
  }

  /**
   * A row's books hold the market from `ts` once they hold every outcome: one outcome's book alone
   * (the other's snapshot still to come) vouches for nothing of the other, whose changes until its
   * snapshot another recorder's downtime gap must keep saying were missed.
   */
  private heldFrom(m: Market, ts: number, books: readonly Book[]): void {
    const key = marketKey(m.venue, m.market_id);
    if (this.firstBook.has(key) || !m.outcomes.every((o) => books.some((b) => b.outcome_index === o.index))) return;
    this.firstBook.set(key, ts);
  }

  private recordBooks(m: Market, ts: number, recvTs: number, books: Book[], closesGaps = true): void {
    const rows = bookRows(ts, recvTs, books);
    this.spool.append(partitionOf('books', m.venue, m.coin, m.window, ts), rows);
    this.unacknowledged.set(marketKey(m.venue, m.market_id), { ts, books });
    this.heldFrom(m, ts, books);
    this.stats.books += rows.length;
    if (closesGaps) this.gaps.succeed(m, 'books', ts);
  }

  private recordMetrics(
    m: Market,
    ts: number,
    recvTs: number,
    quotes: { outcome_index: number; chance: number | null; price: number | null; last_trade: number | null }[],
  ): void {
    const rows = metricRows(m, ts, recvTs, quotes);
    this.spool.append(partitionOf('metrics', m.venue, m.coin, m.window, ts), rows);
    this.stats.metrics += rows.length;
    this.gaps.succeed(m, 'metrics', ts);
    if (!this.tradeEvents.has(m.venue)) this.recordTrades(m, this.lastTrades.changed(m, rows, this.clock.now()));
  }

  /**
   * A book's proof vouches for it from the book's last change, but trades are not replayed on a
   * subscription: those before its first message never came. The books' gaps a recovery closes
   * are written again for trades, up to `now`. A market whose feed this process has first, unless
   * an earlier process held it (its downtime gap is closing), lacks its trades from its open up to
   * then (or up to the first gap closing then).
   */
  private tradesBeforeFeed(m: Market, closing: readonly OpenGap[], now: number): void {
    for (const g of closing)
      if (now > g.from_ts)
        this.gaps.close(
          { ...g, dataset: 'trades', channel: undefined, detail: `${g.detail}; trades are not replayed when the feed resumes` },
          now,
        );
    if (this.fed.has(m.market_id)) return;
    for (const [id, end] of this.fed) if (end < now - 3_600_000) this.fed.delete(id);
    this.fed.set(m.market_id, m.end_time);
    // A previous process held the market: the downtime gap closing now says what it missed since.
    if (closing.some((g) => g.reason === 'process_down')) return;
    // Up to the first gap closing now (a late snapshot's wait, say), whose trades copy was just written.
    const to = Math.min(now, m.end_time, ...closing.map((g) => g.from_ts));
    if (to <= m.start_time) return;
    this.gaps.close(
      {
        venue: m.venue,
        coin: m.coin,
        window: m.window,
        market_id: m.market_id,
        dataset: 'trades',
        from_ts: m.start_time,
        until: m.end_time,
        reason: 'not_subscribed',
        detail: 'capture subscribed after the market opened; the venue does not replay trades',
        failures: 1,
      },
      to,
    );
  }

  private recordTrades(m: Market, rows: TradeRow[]): void {
    if (!rows.length || !this.keeper.keeps(m, 'trades', rows[0].ts, rows.length)) return;
    this.spool.append(partitionOf('trades', m.venue, m.coin, m.window, rows[0].ts), rows);
    this.stats.trades += rows.length;
  }
}

/**
 * The last-trade price of each outcome as REST last showed it, for venues that send no trade
 * events: a change is the one trace of trading they give, written as a `rest_last_trade` row with
 * no size, side or hash (it may stand for several fills, or for none this capture saw). The
 * first price seen of an outcome is written too: the newest trade at that time.
 */
export class LastTrades {
  private readonly known = new Map<string, { end: number; prices: Map<number, number> }>();

  changed(m: Market, rows: readonly MetricRow[], now: number): TradeRow[] {
    let entry = this.known.get(m.market_id);
    if (!entry) {
      if (this.known.size >= 4096) for (const [id, e] of this.known) if (e.end < now) this.known.delete(id);
      entry = { end: m.end_time, prices: new Map() };
      this.known.set(m.market_id, entry);
    }
    const trades: TradeRow[] = [];
    for (const r of rows) {
      if (r.last_trade === null || entry.prices.get(r.outcome_index) === r.last_trade) continue;
      entry.prices.set(r.outcome_index, r.last_trade);
      trades.push({
        ts: r.ts,
        market_id: r.market_id,
        token_id: r.token_id,
        outcome_index: r.outcome_index,
        outcome: r.outcome,
        price: r.last_trade,
        size: null,
        side: null,
        fee_rate_bps: null,
        transaction_hash: null,
        source: 'rest_last_trade',
        exchange_ts: null,
        recv_ts: r.recv_ts ?? r.ts,
      });
    }
    return trades;
  }
}

function referenceScope(feed: ReferenceFeed): GapScope {
  return {
    venue: feed.venue,
    coin: feed.coin,
    window: ALL_WINDOWS,
    market_id: feed.id,
    dataset: 'reference',
    until: null,
    channel: 'stream',
  };
}

/** Spool parts whose hour is due for sealing. */
async function dueParts(spoolDir: string, now: number, grace: Grace): Promise<number> {
  return (await listSpool(spoolDir)).filter((p) => isDue(p.partition, now, grace)).length;
}
