// Builds and starts the API for a lake: catalogue loaded once, then refreshed; the cursor
// secret generated into DATA_DIR on first start when not configured.
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import type { Clock } from '../clock.js';
import type { Config } from '../config.js';
import type { Duck } from '../lake/duckdb.js';
import { lakePaths } from '../lake/layout.js';
import { LakeReader } from '../lake/reader.js';
import { SpoolTail } from '../lake/tail.js';
import type { Logger } from '../log.js';
import type { LatestBook } from '../records.js';
import type { CaptureHealth } from '../health.js';
import { Admission } from './admission.js';
import { type ConnectionStats, boundedServer, connectionCap, openFileLimit } from './connections.js';
import { createApp } from './app.js';
import { BookCache } from './bookcache.js';
import { LiveBooks } from './livebooks.js';
import { ServingCopies } from '../pages/copyreader.js';
import { CopyCache } from '../pages/copycache.js';
import { writeServingCopy } from '../pages/copywriter.js';
import { ExportPool } from './exports.js';
import { Cursors } from './cursor.js';
import { LeasedLimiter, type RateChannel, RateLimiter } from '../edge/ratelimit.js';
import { KeyStore } from '../edge/keys.js';
import { openApiDocument } from './openapi.js';
import { LatestReads, preloadLatest } from './latest.js';
import { buildRoutes } from './routes.js';
import { sqlString } from '../lake/sql.js';
import { type ReplayEndpoint, replayEndpoint } from '../replay/server.js';
import { TapeCache } from '../replay/tape.js';
import { ReplayCopies } from '../replay/copy.js';
import { lakeCopyBudget } from '../replay/copybudget.js';
import { S3 } from '../bucket/s3.js';
import { BucketReplica, type ReplicaHealth } from '../bucket/replica.js';
import { type FeedHealth, FeedTails } from '../bucket/feedtail.js';
import { combineProofs, parseHeartbeat, proofOf, readHeartbeat } from '../capture/heartbeat.js';

/** Capture fsyncs its spool every second; following it twice as often keeps books under ~1.5 s old. */
const TAIL_MS = 500;

/** New seals, compactions and market versions reach the index and catalogue within this. */
const UPDATE_MS = 2000;
const REINDEX_MS = 3_600_000;

/** How often markets that ended lately are looked at for a replay copy (replay/copy.ts). */
/** The sweep over the last hours (a copy lost, or not written while the API was down); recent markets are looked at on every update. */
const REPLAY_SWEEP_MS = 5 * 60_000;
const RECENT_COPIES_MS = 3_600_000;

/** Runs `task` every `ms`, never two at once. */
function every(ms: number, task: () => Promise<unknown>, failed: (err: unknown) => void): NodeJS.Timeout {
  let running = false;
  return setInterval(() => {
    if (running) return;
    running = true;
    task()
      .catch(failed)
      .finally(() => {
        running = false;
      });
  }, ms);
}

export interface Api {
  url: string;
  /** The clock its routes and replays read (a replay's `play_at` is on it). */
  clock: Clock;
  lake: LakeReader;
  keys: KeyStore;
  server: http.Server;
  /** The WebSocket replays this process serves. */
  replays: ReplayEndpoint;
  /** Finished markets' rendered replay messages on disk; null when off (REPLAY_COPIES, or a bucket-served lake). */
  replayCopies: ReplayCopies | null;
  /** Summarises refused requests every few seconds; `summarise()` writes the line now. */
  requestLog: { summarise(): void };
  stop(): Promise<void>;
}

async function cursorSecret(config: Config): Promise<Buffer> {
  if (config.api.cursorSecret) return Buffer.from(config.api.cursorSecret);
  const file = path.join(config.dataDir, 'state', 'cursor-secret');
  try {
    return Buffer.from(await fs.readFile(file, 'utf8'), 'hex');
  } catch {
    await fs.mkdir(path.dirname(file), { recursive: true });
    const secret = randomBytes(32);
    await fs.writeFile(file, secret.toString('hex'), { mode: 0o600, flag: 'wx' }).catch(() => undefined);
    return Buffer.from(await fs.readFile(file, 'utf8'), 'hex');
  }
}

export interface ApiOptions {
  /** Capture's own map when capture runs in this process; without it the API follows the spool. */
  latest?: Map<string, LatestBook>;
  /** Capture in this process, for health; without it, health reads capture's heartbeat file. */
  capture?: { health(): CaptureHealth | null };
  port?: number;
  /** One of `workers` API processes (jobs/api.ts): keys' limits are leased through `rates`, and the primary prepared the state (prepareApiState). */
  cluster?: { workers: number; rates: RateChannel };
}

/** What the processes serving one lake share, made once before they start: no leftover exports, one cursor secret. */
export async function prepareApiState(config: Config): Promise<void> {
  // Exports are written, streamed and deleted; a crash can leave some behind.
  await fs.rm(path.join(config.dataDir, 'state', 'exports'), { recursive: true, force: true });
  await cursorSecret(config);
}

/** Health is computed at most this often, however often it is asked for (it is public). */
const HEALTH_CACHE_MS = 1000;

export async function startApi(config: Config, duck: Duck, clock: Clock, log: Logger, options: ApiOptions = {}): Promise<Api> {
  const shared = options.latest;
  const port = options.port ?? config.port;
  const paths = lakePaths(config.dataDir);
  // Served from a bucket: DATA_DIR is this process's cache of it; manifests come first.
  const s3 = config.lakeSource === 'bucket' && config.bucket ? new S3(config.bucket) : null;
  const replica = s3 && new BucketReplica(paths, s3, Math.floor(config.bucketCacheBytes / (options.cluster?.workers ?? 1)), log);
  if (replica) {
    const synced = await replica.open();
    log.info({ bucket: s3!.config.bucket, partitions: synced, error: replica.health().sync_error }, 'manifests read from the bucket');
  }
  const lake = new LakeReader(duck, paths, replica);
  // Sorts of large exports spill to disk instead of growing without bound.
  await duck.run(`SET GLOBAL memory_limit = ${sqlString(config.api.duckdbMemoryLimit)}`);
  await duck.run(`SET GLOBAL temp_directory = ${sqlString(path.join(config.dataDir, 'state', 'duckdb-tmp'))}`);
  // In a cluster the primary did it once: a worker restarted later must not remove its siblings' exports.
  if (!options.cluster) await prepareApiState(config);
  const loaded = await lake.open();
  const ms = (a: number, b: number) => Math.round(b - a);
  log.info({ files: lake.sealedFiles().length, markets: lake.size, ...loaded }, 'lake loaded');
  const latest = shared ?? new Map<string, LatestBook>();
  const latestReads = new LatestReads();
  // Capture's newest books: its own map in this process, its spool beside it, or over the network from its feed.
  const feed =
    replica && config.captureFeed.urls.length
      ? new FeedTails(config.captureFeed.urls, config.captureFeed.secret!, latest, (m) => lake.upsert(m), log)
      : null;
  const tail = shared ? null : (feed ?? (replica ? null : new SpoolTail(paths.spool, latest)));
  await tail?.poll();
  const sealedLatest = new WeakSet<LatestBook>();
  const preloading = performance.now();
  const preloaded = await preloadLatest(lake, latest, clock.now(), sealedLatest);
  log.info({ preloaded, in_memory: latest.size, ms: ms(preloading, performance.now()) }, 'latest books loaded');
  // Capture's heartbeat (its own process's, or another's beside this lake): coverage never counts time capture did not hold.
  // A replica has it as capture last published it.
  const proofs = async () => {
    // A record merged from several recorders: each one's heartbeat, as one proof.
    const beats = replica ? replica.heartbeats.map(parseHeartbeat) : [await readHeartbeat(paths)];
    lake.setProof(combineProofs(beats.map((beat) => proofOf(beat, Date.now(), config.api.captureDownAfterMs))));
  };
  await proofs();
  let reindexed = Date.now();
  let sweptRecent = -Infinity;
  const timers = [
    every(TAIL_MS, proofs, (err) => log.warn({ err }, 'capture heartbeat not read')),
    tail &&
      every(
        TAIL_MS,
        () => tail.poll(),
        (err) => log.warn({ err }, 'spool tail failed'),
      ),
    every(
      UPDATE_MS,
      async () => {
        // The full walk is a safety net behind the commit log (a line lost in a crash).
        const walk = Date.now() - reindexed > REINDEX_MS;
        if (walk) reindexed = Date.now();
        await replica?.sync(walk);
        const changed = await lake.update(walk);
        latestReads.prune(latest, clock.now());
        // A market capture sealed at its end since the last update gets its replay copy now: it is settled by
        // the commit of its last rows (or, rarely, by a heartbeat read after that commit: at most 30 s later).
        if (changed.some((p) => p.dataset === 'books' || p.dataset === 'trades') || Date.now() - sweptRecent > 30_000) {
          sweptRecent = Date.now();
          replayCopies?.sweep(clock.now(), RECENT_COPIES_MS);
        }
      },
      (err) => log.warn({ err }, 'lake update failed'),
    ),
  ];
  const keys = KeyStore.open(config, log);
  const exports = await ExportPool.open(duck, config.api.exportSlots, config.api.exportMinRate);
  const admission = new Admission({ limit: config.api.maxInFlight, queue: config.api.queue, waitMs: config.api.queueWaitMs });
  // Each worker of a cluster holds its share of the connections.
  const workers = options.cluster?.workers ?? 1;
  const configured = config.api.connections;
  const connectionLimits = {
    ...configured,
    total: Math.ceil(connectionCap(configured.total, openFileLimit()) / workers),
    perAddress: Math.ceil(configured.perAddress / workers),
  };
  const connections: ConnectionStats = { open: 0, refused: 0 };
  // Missing serving copies are written on a lane of their own, one at a time, never queuing a page's
  // statement. A bucket-served process fetches the file first and counts the copy in its disk cache.
  const copyLane = config.api.servingCopies ? await duck.fork(1) : null;
  // BOOK_CACHE_MB is the service's: each worker keeps its share. With copies, half of it keeps
  // the pieces pages read from them, half the markets decoded whole while their copies are missing.
  const cacheShare = Math.floor(config.api.bookCacheBytes / workers);
  const serving =
    copyLane &&
    new ServingCopies(
      paths.serving,
      async (file) => {
        const began = performance.now();
        const parquet = path.join(paths.lake, file.path);
        const written = await lake
          .ensure([lake.sealedFile(file.path)].filter((f) => f !== null))
          .then(() => writeServingCopy(copyLane, parquet, file.sha256, paths.serving))
          .catch((err: unknown) => {
            log.warn({ err, parquet: file.path }, 'serving copy not written');
            throw err;
          });
        if (written) replica?.copyWritten(file.path, file.sha256, written.bytes);
        log.info({ parquet: file.path, ...written, file: undefined, ms: ms(began, performance.now()) }, 'serving copy written');
        return written !== null;
      },
      new CopyCache(Math.floor(cacheShare / 2)),
    );
  // A bucket-served process's serving directory is its disk cache, emptied at each start: copies
  // of every recent market written again there would cost more than the replays they serve.
  const replayCopies =
    config.api.replay.copies && !replica
      ? new ReplayCopies(path.join(paths.serving, 'replay'), lake, log, lakeCopyBudget(config, paths, lake))
      : null;
  if (replayCopies) {
    await replayCopies.settle();
    replayCopies.sweep(clock.now());
    timers.push(
      every(
        REPLAY_SWEEP_MS,
        async () => {
          await replayCopies.settle();
          replayCopies.sweep(clock.now());
        },
        (err) => log.warn({ err }, 'replay copy sweep failed'),
      ),
    );
  }
  const books = new BookCache(serving ? cacheShare - serving.cache.maxBytes : cacheShare);
  // A few markets record at once; a quarter of the worker's share holds them whole many times over.
  const live = new LiveBooks(Math.floor(cacheShare / 4));
  const health = cached(HEALTH_CACHE_MS, () =>
    checkHealth(
      config,
      duck,
      lake,
      latest,
      options.capture ?? (feed ? { health: () => feed.capture() } : undefined),
      admission,
      exports,
      { ...connections, max: connectionLimits.total },
      replica && { ...replica.health(), capture_feed: feed?.health() ?? null, capture_feeds: feed?.all() ?? [] },
      {
        copies: replayCopies !== null,
        copy_reads: replayCopies?.stats.reads ?? 0,
        copies_written: replayCopies?.stats.written ?? 0,
        copies_queued: replayCopies?.stats.queued ?? 0,
        ...(replayCopies?.budget?.bounded && {
          copies_share: config.api.replay.copiesShare,
          copies_budget_bytes: replayCopies.budget.stats.budget_bytes,
          copies_bytes: replayCopies.budget.stats.replay_bytes,
          serving_copies_bytes: replayCopies.budget.stats.serving_bytes,
          copies_evicted: replayCopies.budget.stats.evicted,
          copies_skipped: replayCopies.budget.stats.skipped,
        }),
      },
      {
        book_cache_bytes: books.bytes,
        book_cache_hits: books.hits,
        book_cache_markets: books.markets,
        book_cache_loads: books.loads,
        book_cache_refused: books.refused,
        live_markets: live.markets,
        live_bytes: live.bytes,
        live_pages: live.pages,
        serving_copies: serving !== null,
        copy_reads: serving?.reads ?? 0,
        copy_cache_bytes: serving?.cache.bytes ?? 0,
        copy_cache_hits: serving?.cache.hits ?? 0,
        copy_cache_kept: serving?.cache.kept ?? 0,
        copy_deflated_pages: serving?.deflatedPages ?? 0,
        copies_written: serving?.written ?? 0,
        copies_queued: serving?.queued ?? 0,
      },
    ),
  );
  const rate = (plan: 'free' | 'paid') => (plan === 'paid' ? config.api.ratePaid : config.api.rateFree);
  const limiter = options.cluster ? new LeasedLimiter(options.cluster.rates) : new RateLimiter();
  let document: unknown = null;
  const routes = buildRoutes({
    lake,
    latest,
    latestReads,
    sealedLatest,
    latestMeta: (book) => ({
      ...(book ? { source: sealedLatest.has(book) ? 'sealed' : 'capture' } : {}),
      ...(replica ? { capture_reachable: feed?.reachable ?? false } : {}),
    }),
    rate,
    exportDir: path.join(config.dataDir, 'state', 'exports'),
    cursors: new Cursors(await cursorSecret(config)),
    maxRangeMs: config.api.maxRangeDays * 86_400_000,
    openapi: () => document,
    health,
    exports,
    books,
    live,
    serving,
  });
  document = openApiDocument(routes);
  const app = createApp({
    routes,
    keys,
    rate,
    anonRate: config.api.rateAnon,
    corsOrigins: config.api.corsOrigins,
    admission,
    log,
    now: () => clock.now(),
    limiter,
    hold: replica ? () => replica.hold() : undefined,
  });
  const server = boundedServer(app.koa.callback(), connectionLimits, connections);
  // A burst of connections (an attacker's, or every client reconnecting at once) waits in the
  // kernel's queue, as deep as it allows (somaxconn), instead of Node's 511: past the queue a
  // client's SYN is dropped and it retries a second later, whoever it is.
  server.listen({ port, host: config.host, backlog: LISTEN_BACKLOG });
  server.maxHeadersCount = 100;
  server.on('clientError', app.clientError);
  // Each worker of a cluster holds its share of the replays and of their tapes' memory.
  const replay = config.api.replay;
  const replays = replayEndpoint({
    lake,
    tapes: new TapeCache(Math.floor(replay.cacheBytes / workers), replayCopies),
    keys,
    limiter,
    rate,
    clock,
    log,
    limits: {
      total: Math.ceil(replay.slots / workers),
      perKey: replay.perKey,
      markets: replay.markets,
      maxRangeMs: config.api.maxRangeDays * 86_400_000,
    },
  });
  server.on('upgrade', replays.upgrade);
  await new Promise<void>((resolve) => server.once('listening', resolve));
  const address = server.address() as AddressInfo;
  return {
    url: `http://${config.host}:${address.port}`,
    clock,
    lake,
    keys,
    server,
    replays,
    replayCopies,
    requestLog: app.requestLog,
    async stop() {
      for (const timer of timers) if (timer) clearInterval(timer);
      app.requestLog.stop();
      if (limiter instanceof LeasedLimiter) limiter.close();
      replays.close();
      await replayCopies?.close();
      replica?.close();
      s3?.close();
      // Drain: stop accepting, let in-flight requests finish, then drop idle keep-alives.
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeIdleConnections();
        setTimeout(() => server.closeAllConnections(), 5000).unref();
      });
      await serving?.close();
    },
  };
}

/** `task` at most once per `ms`; callers within that share the last answer (or the one in flight). */
function cached<T>(ms: number, task: () => Promise<T>): () => Promise<T> {
  let last: { at: number; value: Promise<T> } | null = null;
  return () => {
    if (!last || Date.now() - last.at > ms) last = { at: Date.now(), value: task() };
    return last.value;
  };
}

function within<T>(ms: number, work: Promise<T>): Promise<T | 'timeout'> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    work,
    new Promise<'timeout'>((r) => {
      timer = setTimeout(() => r('timeout'), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

/** A query that has not answered in this long means the engine is stuck, not busy. */
const ENGINE_TIMEOUT_MS = 5000;
/** Asked of listen(); the kernel caps it at somaxconn. */
const LISTEN_BACKLOG = 65_535;

/**
 * Each component says how it is. 503 when capture has not persisted within its bound, the lake
 * cannot be read, or the query engine does not answer: an orchestrator's probe then restarts us.
 */
async function checkHealth(
  config: Config,
  duck: Duck,
  lake: LakeReader,
  latest: Map<string, LatestBook>,
  capture: ApiOptions['capture'],
  admission: Admission,
  exports: ExportPool,
  connections: ConnectionStats & { max: number },
  bucket: (ReplicaHealth & { capture_feed: FeedHealth | null; capture_feeds: FeedHealth[] }) | null,
  replay: Record<string, number | boolean>,
  pages: Record<string, number | boolean>,
) {
  const now = Date.now();
  const bound = config.api.healthMaxFlushAgeMs;
  const captureState = capture ? capture.health() : await heartbeatHealth(config, now, bound);
  const files = lake.sealedFiles();
  const newestFile = files.reduce<(typeof files)[number] | null>((a, f) => (!a || f.partition.hour > a.partition.hour ? f : a), null);
  const [lakeError, engine] = await Promise.all([
    // A replica's files are fetched when asked for: its lake is readable while its bucket is.
    bucket
      ? bucket.sync_error && `bucket: ${bucket.sync_error}`
      : lakeReadable(lake.paths.lake, newestFile && path.join(lake.paths.lake, newestFile.path)),
    within(
      ENGINE_TIMEOUT_MS,
      duck.rows('SELECT 1 AS ok').then(
        () => 'ok' as const,
        (err: Error) => `error: ${err.message.slice(0, 100)}`,
      ),
    ),
  ]);
  let newest = -Infinity;
  for (const l of latest.values()) newest = Math.max(newest, l.ts);
  const stale = captureState !== null && captureState.state !== 'stopped' && (captureState.flush_age_ms ?? Infinity) > bound;
  // A replica whose bucket cannot be read still serves what it holds: degraded, not a process to restart.
  const failing = stale || (lakeError !== null && !bucket) || engine !== 'ok';
  const degraded =
    (captureState !== null &&
      (captureState.state !== 'running' || captureState.seal_error !== null || Boolean(captureState.publish?.last_error))) ||
    Boolean(bucket?.sync_error);
  const status = failing ? 'failing' : degraded ? 'degraded' : 'ok';
  return {
    status: failing ? 503 : 200,
    data: {
      status,
      capture: captureState && { ...captureState, max_flush_age_ms: bound },
      lake: {
        readable: lakeError === null,
        error: lakeError,
        query_engine: engine === 'timeout' ? `no answer in ${ENGINE_TIMEOUT_MS} ms` : engine,
        newest_capture: Number.isFinite(newest) ? new Date(newest).toISOString() : null,
        files: files.length,
        markets: lake.size,
        ...(bucket ? { source: 'bucket', bucket } : { source: 'local' }),
      },
      api: {
        in_flight: admission.inFlight,
        queued: admission.queued,
        max_in_flight: admission.options.limit,
        shed: admission.shed,
        exports: { in_use: exports.inUse, slots: exports.size, slow_readers_cut: exports.slowReaders },
        connections,
        pages,
        replay,
      },
    },
  };
}

/**
 * Capture in another process: judged from the heartbeat it writes after every successful flush,
 * with the figures it had then. A heartbeat that stopped coming says the storage is failing (or
 * the process is stuck); what the error is, only that process's log can say.
 */
async function heartbeatHealth(config: Config, now: number, bound: number): Promise<CaptureHealth | null> {
  const beat = (await readHeartbeat(lakePaths(config.dataDir))) as {
    flushed_at?: number;
    stopped?: boolean;
    health?: Partial<CaptureHealth>;
  } | null;
  if (!beat || typeof beat.flushed_at !== 'number') return null;
  const age = now - beat.flushed_at;
  return {
    state: beat.stopped ? 'stopped' : age > bound ? 'failing' : 'running',
    last_flush: new Date(beat.flushed_at).toISOString(),
    flush_age_ms: age,
    storage_error: age > bound && !beat.stopped ? `no flush for ${age} ms (see capture's log)` : null,
    buffered_rows: beat.health?.buffered_rows ?? 0,
    dropped_rows: beat.health?.dropped_rows ?? 0,
    seal_backlog: beat.health?.seal_backlog ?? 0,
    seal_error: beat.health?.seal_error ?? null,
    ...(beat.health?.publish ? { publish: beat.health.publish } : {}),
  };
}

/** The lake directory can be read and its newest sealed file still ends in Parquet's magic bytes. */
async function lakeReadable(root: string, newest: string | null): Promise<string | null> {
  try {
    // A lake nothing was sealed into yet is empty, not broken.
    if (!newest)
      return await fs.access(root, fs.constants.R_OK | fs.constants.X_OK).then(
        () => null,
        (err: NodeJS.ErrnoException) => (err.code === 'ENOENT' ? null : (err.code ?? 'unreadable')),
      );
    const handle = await fs.open(newest, 'r');
    try {
      const size = (await handle.stat()).size;
      const { buffer } = await handle.read(Buffer.alloc(4), 0, 4, Math.max(0, size - 4));
      return buffer.toString('latin1') === 'PAR1' ? null : `${path.basename(newest)} is not a complete Parquet file`;
    } finally {
      await handle.close();
    }
  } catch (err) {
    return (err as NodeJS.ErrnoException).code ?? 'unreadable';
  }
}
