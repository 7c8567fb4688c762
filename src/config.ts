// The one place that reads the environment. Everything else receives a frozen Config.
import os from 'node:os';
import path from 'node:path';

export const VENUES = ['wallet-prediction', 'polymarket'] as const;
export type Venue = (typeof VENUES)[number];
export const WINDOWS = ['5m', '15m'] as const;
export type Window = (typeof WINDOWS)[number];
export const VENUE_COINS: Record<Venue, readonly string[]> = {
  'wallet-prediction': ['btc', 'eth', 'bnb'],
  polymarket: ['btc', 'eth', 'sol', 'xrp'],
};
/** Every coin either venue trades: each has a reference price (UPSTREAMS.md E). */
export const REFERENCE_COINS: readonly string[] = [...new Set(Object.values(VENUE_COINS).flat())];

export interface UpstreamConfig {
  timeoutMs: number;
  maxRetries: number;
  concurrency: number;
  /** Requests per second this client allows itself, below the upstream's documented limit. */
  requestsPerSecond: number;
}

export interface ConnectionLimits {
  /** Sockets open at once, all addresses together. */
  total: number;
  /** Sockets open at once from one address. */
  perAddress: number;
  /** A request's headers must have arrived this long after its socket opened (or its previous response ended). */
  headersTimeoutMs: number;
  /** A whole request must have arrived by then. */
  requestTimeoutMs: number;
  /** An idle keep-alive socket is closed after this. */
  keepAliveMs: number;
  /** A socket with no bytes moving either way for this long is closed (a reader that stopped reading). */
  idleMs: number;
}

export interface BucketConfig {
  endpoint: string;
  region: string;
  bucket: string;
  /** Keys start with this (no leading slash; ends with `/` unless empty). */
  prefix: string;
  accessKeyId: string;
  secretAccessKey: string;
  /** A request that has not finished in this long is abandoned. */
  timeoutMs: number;
}

export interface Config {
  dataDir: string;
  host: string;
  port: number;
  logLevel: string;
  /** `json` lines, `pretty` (pino-pretty), or `auto`: pretty when a person watches a terminal. */
  logFormat: 'json' | 'pretty' | 'auto';
  /** The local venue stand-in (`make standin`, `make run`). */
  standin: { port: number; seed: number; walletWeightPerMinute: number };
  /** `make fill`: how far back, how fast, and the poll interval of the simulated capture. */
  fill: { hours: number; speed: number; pollMs: number };
  /** `make download` as a client of a running API. Never logged. */
  client: { apiUrl: string; apiKey: string | null };
  /** A simulated clock for fills and tests; real time when `startMs` is null. */
  clock: { startMs: number | null; speed: number; anchorMs: number | null };
  capture: {
    venues: Venue[];
    coins: Record<Venue, string[]>;
    windows: Window[];
    pollMs: number;
    discoverMs: number;
    flushMs: number;
    sealGraceMs: number;
    marketsSealGraceMs: number;
    /** While the disk refuses writes, rows stay in memory up to this; beyond, a `storage` gap. */
    spoolMaxBufferBytes: number;
    /** DuckDB's memory_limit where hours are sealed: a seal streams, so this bounds it whatever the hour's size. */
    sealMemoryLimit: string;
    /** Venues whose books are recorded from their WebSocket feeds, change by change (REST stays the fallback). */
    stream: {
      venues: Venue[];
      maxAssetsPerConnection: number;
      /** Threads the market channel's markets are shared among; 0 records on capture's own thread. */
      threads: number;
      pingMs: number;
      /** Clock ms without data after which a connection counts as silently stalled. */
      stallMs: number;
      /**
       * The wallet's stream: venue ms with no push of any market after which the silence is taken
       * for a pause (the venue's upstream down), a gap for every market held. On the venue's clock,
       * so a starved process cannot fake one.
       */
      pauseMs: number;
      /** Clock ms past its end an ended market stays subscribed for the venue's `market_resolved` (its resolution time). */
      resolveWaitMs: number;
      backoffMinMs: number;
      backoffMaxMs: number;
    };
    /**
     * The reference prices the markets resolve on, from Polymarket's price socket (RTDS): recorded
     * for `coins` (both venues' by default: the wallet's markets name no source, so they get the same).
     */
    reference: {
      on: boolean;
      coins: string[];
      /** Clock ms without an observation of a symbol, while its socket is open, after which the symbol counts as stalled (a gap). */
      stallMs: number;
    };
  };
  wallet: UpstreamConfig & { baseUrl: string; apiKey: string; apiSecret: string; wsUrl: string };
  polymarket: UpstreamConfig & { gammaUrl: string; clobUrl: string; wsUrl: string; rtdsUrl: string };
  backfill: { concurrency: number };
  /** An S3-compatible bucket the lake is published to (capture) or served from (`LAKE_SOURCE=bucket`); null without S3_BUCKET. Credentials are never logged. */
  bucket: BucketConfig | null;
  /**
   * One of several captures recording the same venues (`RECORDER_ID`, a DNS label): it publishes
   * under `_recorders/<id>/` of the bucket and merges every recorder's sealed hours into the
   * record at the prefix (bucket/merger.ts). Null: the only capture, publishing the record itself.
   */
  recorderId: string | null;
  /** How often a recorder (or `make merge`) merges what the recorders published since. */
  mergeMs: number;
  /** Groups a merge pass works on at once: most of a group's time is waiting on the bucket. */
  mergeConcurrency: number;
  /** Bytes of recorders' files a merger keeps fetched between passes (the groups merged longest ago go first). */
  mergeCacheBytes: number;
  /** How often capture publishes what it committed since. */
  publishMs: number;
  /** How often it also writes the manifests snapshot a new replica starts from (one object instead of a GET per partition). */
  publishSnapshotMs: number;
  /** `local`: the lake in DATA_DIR. `bucket`: manifests and files from the bucket, DATA_DIR a cache of them. */
  lakeSource: 'local' | 'bucket';
  /** What a bucket-served API keeps of fetched files on its disk. */
  bucketCacheBytes: number;
  /**
   * Capture's newest books over the network: capture serves them on `port` (null: not at all) to
   * bucket-served API processes, which poll `url`. Both ends hold `secret`, which is never logged.
   */
  /** `urls`: the feeds a bucket-served API takes the newest books from (several: one per recorder of a merged record). */
  captureFeed: { port: number | null; host: string; secret: string | null; urls: string[] };
  /** The API keys' store (hashes only): API processes on several machines share one. */
  keysFile: string;
  /**
   * The key store as an object in the bucket (its full key, best outside the prefix analysts read),
   * shared by API servers on any machine; `keysFile` then keeps the last records read. Null: `keysFile` alone.
   */
  keysObject: string | null;
  api: {
    rateFree: number;
    ratePaid: number;
    /** Per client address, for requests without a valid key. */
    rateAnon: number;
    cursorSecret: string | null;
    maxRangeDays: number;
    duckdbMemoryLimit: string;
    /** Lake-reading requests running at once; beyond, a short queue, then 503. */
    maxInFlight: number;
    queue: number;
    queueWaitMs: number;
    /** Exports at once, each with its own DuckDB connection; beyond, 503. */
    exportSlots: number;
    /** A reader taking less than this while bytes wait for it, over the window, is cut off (its slot freed). */
    exportMinRate: { bytesPerSecond: number; windowMs: number };
    /** Health answers 503 when capture has not persisted for longer than this. */
    healthMaxFlushAgeMs: number;
    /**
     * Capture silent this long (no heartbeat) is taken as down: the rest of every window it held is
     * a gap in coverage at once, until a restart writes the real one. Before that, coverage counts
     * only up to the last heartbeat.
     */
    captureDownAfterMs: number;
    /** Decoded books of recently read markets kept in memory. */
    bookCacheBytes: number;
    /**
     * Pages of markets that are over from the books files' serving copies (pages/copyformat.ts), written
     * by the API where one is missing; off: every page not in the book cache by SQL.
     */
    servingCopies: boolean;
    /** Browser origins allowed to call the API (CORS); the service's own pages need none. */
    corsOrigins: string[];
    /** Processes `make api` serves with (one per core by default); keys' limits hold across them. */
    workers: number;
    /**
     * Whether those worker processes run V8's incremental marking (API_INCREMENTAL_MARKING, off by
     * default): with it, a worker serving pages fell into full collections every 50-100 ms once its
     * first one had shrunk the heap, a fifth of its time, and the p99 of every page with it
     * (BENCHMARKS.md, "Where the slow pages went"). Without it a full collection is one pause, rare.
     */
    incrementalMarking: boolean;
    /** What any client's sockets may hold (api/connections.ts). */
    connections: ConnectionLimits;
    /** WebSocket replays (replay/): open at once per process and per key, and the tapes kept for the next replay of a market. */
    replay: { slots: number; perKey: number; markets: number; cacheBytes: number; copies: boolean; copiesShare: number };
  };
}

type Env = Record<string, string | undefined>;

export class ConfigError extends Error {
  override name = 'ConfigError';
}

function int(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min || n > max) {
    throw new ConfigError(`${name}=${JSON.stringify(raw)} is not an integer in ${min}..${max}`);
  }
  return n;
}

function num(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isFinite(n) || n < min || n > max) {
    throw new ConfigError(`${name}=${JSON.stringify(raw)} is not a number in ${min}..${max}`);
  }
  return n;
}

function list<T extends string>(env: Env, name: string, allowed: readonly T[], fallback: readonly T[]): T[] {
  const raw = env[name];
  if (raw === undefined || raw === '') return [...fallback];
  const items = raw
    .split(',')
    .map((s) => s.trim().toLowerCase())
    .filter(Boolean);
  for (const item of items) {
    if (!allowed.includes(item as T)) {
      throw new ConfigError(`${name} has ${JSON.stringify(item)}; expected some of: ${allowed.join(', ')}`);
    }
  }
  if (items.length === 0) throw new ConfigError(`${name} is empty`);
  return items as T[];
}

/** Exact origins (`https://app.example.com`), comma-separated; never a wildcard: keys ride on these requests. */
function origins(env: Env, name: string): string[] {
  const raw = env[name] ?? '';
  return raw
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((o) => {
      let u: URL;
      try {
        u = new URL(o);
      } catch {
        throw new ConfigError(`${name} has ${JSON.stringify(o)}; expected origins such as https://app.example.com`);
      }
      if (!/^https?:$/.test(u.protocol) || u.origin !== o.replace(/\/$/, '')) {
        throw new ConfigError(`${name} has ${JSON.stringify(o)}; expected an origin (scheme, host, port; no path)`);
      }
      return u.origin;
    });
}

function oneOf<T extends string>(env: Env, name: string, allowed: readonly T[], fallback: T): T {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (!allowed.includes(raw as T)) throw new ConfigError(`${name}=${JSON.stringify(raw)}; expected one of: ${allowed.join(', ')}`);
  return raw as T;
}

/** COPIES_SHARE: a share of the books Parquet (0..1000), or `unbounded`. */
function copiesShare(env: Env): number {
  return env.COPIES_SHARE === 'unbounded' ? Infinity : num(env, 'COPIES_SHARE', 1, 0, 1000);
}

/** A DuckDB memory size such as `4GB` or `512MiB`; anything else is refused, not replaced. */
function memory(env: Env, name: string, fallback: string): string {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (!/^\d+(\.\d+)?\s*(MB|GB|MiB|GiB)$/i.test(raw))
    throw new ConfigError(`${name}=${JSON.stringify(raw)} is not a size such as 4GB or 512MiB`);
  return raw;
}

function url(env: Env, name: string, fallback: string): string {
  const raw = env[name] || fallback;
  try {
    const u = new URL(raw);
    return u.toString().replace(/\/$/, '');
  } catch {
    throw new ConfigError(`${name}=${JSON.stringify(raw)} is not a URL`);
  }
}

function time(env: Env, name: string): number | null {
  const raw = env[name];
  if (raw === undefined || raw === '') return null;
  const ms = /^\d+$/.test(raw) ? Number(raw) : Date.parse(raw);
  if (!Number.isFinite(ms)) throw new ConfigError(`${name}=${JSON.stringify(raw)} is not a time`);
  return ms;
}

function deepFreeze<T>(value: T): T {
  if (value && typeof value === 'object') {
    for (const v of Object.values(value)) deepFreeze(v);
    Object.freeze(value);
  }
  return value;
}

/**
 * Every DuckDB statement and every file operation holds one of libuv's threadpool threads while
 * it runs. The API's two lanes, capture's lane, and each export slot can each hold one, so the
 * default number of export slots leaves threads for file I/O (the Makefile raises the pool to 16).
 */
function exportSlots(env: Env): number {
  const threads = int(env, 'UV_THREADPOOL_SIZE', 4, 1, 1024);
  const spare = threads - 4;
  const slots = int(env, 'EXPORT_SLOTS', Math.max(1, Math.min(os.availableParallelism(), spare)), 1, 64);
  if (slots > Math.max(1, spare)) {
    throw new ConfigError(
      `EXPORT_SLOTS=${slots} needs UV_THREADPOOL_SIZE of at least ${slots + 4} (it is ${threads}): exports would take the threads queries and capture need`,
    );
  }
  return slots;
}

function keysObject(env: Env): string | null {
  const key = env.KEYS_OBJECT?.trim();
  if (!key) return null;
  if (key.startsWith('/') || key.length > 512 || /[\u0000-\u001f]/.test(key))
    throw new ConfigError(`KEYS_OBJECT=${JSON.stringify(key)} is not an object key (no leading slash, at most 512 characters)`);
  return key;
}

/** A recorder's name: a DNS label, so it is a key segment, a column value and a log field as it is. */
export const RECORDER_ID_RE = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;

function recorderId(env: Env): string | null {
  const id = env.RECORDER_ID?.trim();
  if (!id) return null;
  if (!RECORDER_ID_RE.test(id)) throw new ConfigError(`RECORDER_ID=${JSON.stringify(id)} is not a DNS label (a-z, 0-9, -; at most 63)`);
  return id;
}

/** A bucket when S3_BUCKET names one: endpoint, region and credentials beside it (AWS's variable names work too). */
function bucket(env: Env): BucketConfig | null {
  const name = env.S3_BUCKET;
  if (!name) return null;
  if (!/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/.test(name)) throw new ConfigError(`S3_BUCKET=${JSON.stringify(name)} is not a bucket name`);
  const region = env.S3_REGION || env.AWS_REGION || 'us-east-1';
  const accessKeyId = env.S3_ACCESS_KEY_ID || env.AWS_ACCESS_KEY_ID;
  const secretAccessKey = env.S3_SECRET_ACCESS_KEY || env.AWS_SECRET_ACCESS_KEY;
  if (!accessKeyId || !secretAccessKey) throw new ConfigError('S3_BUCKET is set without S3_ACCESS_KEY_ID and S3_SECRET_ACCESS_KEY');
  const prefix = (env.S3_PREFIX ?? '').replace(/^\/+/, '');
  return {
    endpoint: url(env, 'S3_ENDPOINT', `https://s3.${region}.amazonaws.com`),
    region,
    bucket: name,
    prefix: prefix && !prefix.endsWith('/') ? `${prefix}/` : prefix,
    accessKeyId,
    secretAccessKey,
    timeoutMs: int(env, 'S3_TIMEOUT_MS', 30_000, 100, 3_600_000),
  };
}

function captureFeed(env: Env): Config['captureFeed'] {
  const port = env.CAPTURE_FEED_PORT ? int(env, 'CAPTURE_FEED_PORT', 0, 0, 65535) : null;
  // Comma-separated: each recorder's feed, when the record is merged from several.
  const urls = (env.CAPTURE_FEED_URL ?? '')
    .split(',')
    .map((u) => u.trim())
    .filter(Boolean)
    .map((u) => url({ CAPTURE_FEED_URL: u }, 'CAPTURE_FEED_URL', ''));
  const secret = env.CAPTURE_FEED_SECRET || null;
  if ((port !== null || urls.length > 0) && (!secret || secret.length < 16))
    throw new ConfigError('CAPTURE_FEED_PORT and CAPTURE_FEED_URL need CAPTURE_FEED_SECRET, of 16 characters or more');
  return { port, host: env.CAPTURE_FEED_HOST || '127.0.0.1', secret, urls };
}

export function loadConfig(env: Env = process.env): Config {
  const standinPort = int(env, 'STANDIN_PORT', 8090, 1, 65535);
  const standin = `http://127.0.0.1:${standinPort}`;
  const config: Config = {
    dataDir: path.resolve(env.DATA_DIR || './data'),
    host: env.HOST || '127.0.0.1',
    port: int(env, 'PORT', 8080, 0, 65535),
    logLevel: oneOf(env, 'LOG_LEVEL', ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'], 'info'),
    logFormat: oneOf(env, 'LOG_FORMAT', ['json', 'pretty', 'auto'], 'auto'),
    standin: {
      port: standinPort,
      seed: int(env, 'STANDIN_SEED', 1, 0, 2 ** 31),
      walletWeightPerMinute: int(env, 'STANDIN_WALLET_WEIGHT', 12_000, 1, Number.MAX_SAFE_INTEGER),
    },
    fill: {
      hours: num(env, 'FILL_HOURS', 2, 0.01, 24 * 90),
      speed: num(env, 'FILL_SPEED', 240, 1.01, 100_000),
      pollMs: int(env, 'FILL_POLL_MS', 5000, 10, 3_600_000),
    },
    client: {
      apiUrl: url(env, 'PMH_API_URL', `http://127.0.0.1:${int(env, 'PORT', 8080, 0, 65535)}`),
      apiKey: env.PMH_API_KEY || null,
    },
    clock: { startMs: time(env, 'CLOCK_START'), speed: num(env, 'CLOCK_SPEED', 1, 1, 100_000), anchorMs: time(env, 'CLOCK_ANCHOR') },
    capture: {
      venues: list(env, 'CAPTURE_VENUES', VENUES, VENUES),
      coins: {
        'wallet-prediction': list(env, 'WALLET_COINS', VENUE_COINS['wallet-prediction'], VENUE_COINS['wallet-prediction']),
        polymarket: list(env, 'POLYMARKET_COINS', VENUE_COINS.polymarket, VENUE_COINS.polymarket),
      },
      windows: list(env, 'CAPTURE_WINDOWS', WINDOWS, WINDOWS),
      pollMs: int(env, 'POLL_MS', 1000, 10, 3_600_000),
      discoverMs: int(env, 'DISCOVER_MS', 30_000, 100, 3_600_000),
      flushMs: int(env, 'SPOOL_FLUSH_MS', 1000, 10, 60_000),
      sealGraceMs: int(env, 'SEAL_GRACE_MS', 30_000, 0, 3_600_000),
      marketsSealGraceMs: int(env, 'MARKETS_SEAL_GRACE_MS', 3_600_000, 0, 86_400_000),
      spoolMaxBufferBytes: int(env, 'SPOOL_MAX_BUFFER_MB', 256, 1, 65_536) * 1024 * 1024,
      sealMemoryLimit: memory(env, 'SEAL_MEMORY_LIMIT', '256MB'),
      stream: {
        venues: env.CAPTURE_STREAM === 'none' ? [] : list(env, 'CAPTURE_STREAM', VENUES, VENUES),
        maxAssetsPerConnection: int(env, 'STREAM_MAX_ASSETS', 500, 1, 500),
        threads: int(env, 'STREAM_THREADS', 2, 0, 16),
        pingMs: int(env, 'STREAM_PING_MS', 10_000, 100, 60_000),
        stallMs: int(env, 'STREAM_STALL_MS', 5_000, 100, 600_000),
        pauseMs: int(env, 'STREAM_PAUSE_MS', 5_000, 100, 600_000),
        resolveWaitMs: int(env, 'STREAM_RESOLVE_WAIT_MS', 900_000, 0, 86_400_000),
        backoffMinMs: int(env, 'STREAM_BACKOFF_MIN_MS', 250, 10, 60_000),
        backoffMaxMs: int(env, 'STREAM_BACKOFF_MAX_MS', 15_000, 10, 600_000),
      },
      reference: {
        on: oneOf(env, 'CAPTURE_REFERENCE', ['on', 'off'], 'on') === 'on',
        coins: list(env, 'REFERENCE_COINS', REFERENCE_COINS, REFERENCE_COINS),
        stallMs: int(env, 'REFERENCE_STALL_MS', 10_000, 100, 600_000),
      },
    },
    wallet: {
      baseUrl: url(env, 'WALLET_BASE_URL', `${standin}/sapi/v1/w3w/wallet/prediction`),
      // Binance's SApi socket sits on the REST host (wss://api.binance.com/sapi/wss), as the stand-in's does.
      wsUrl: url(env, 'WALLET_WS_URL', `${new URL(env.WALLET_BASE_URL || standin).origin.replace(/^http/, 'ws')}/sapi/wss`),
      apiKey: env.WALLET_API_KEY ?? 'standin-key',
      apiSecret: env.WALLET_API_SECRET ?? 'standin-secret',
      timeoutMs: int(env, 'WALLET_TIMEOUT_MS', 5000, 50, 120_000),
      maxRetries: int(env, 'WALLET_MAX_RETRIES', 3, 0, 20),
      concurrency: int(env, 'WALLET_CONCURRENCY', 4, 1, 256),
      // 12000 weight per minute at 200 per call is one call per second.
      requestsPerSecond: num(env, 'WALLET_RPS', 1, 0.01, 100_000),
    },
    polymarket: {
      gammaUrl: url(env, 'POLYMARKET_GAMMA_URL', standin),
      clobUrl: url(env, 'POLYMARKET_CLOB_URL', standin),
      wsUrl: url(env, 'POLYMARKET_WS_URL', polymarketWsUrl(env.POLYMARKET_CLOB_URL || standin)),
      rtdsUrl: url(env, 'POLYMARKET_RTDS_URL', polymarketRtdsUrl(env.POLYMARKET_CLOB_URL || standin)),
      timeoutMs: int(env, 'POLYMARKET_TIMEOUT_MS', 5000, 50, 120_000),
      maxRetries: int(env, 'POLYMARKET_MAX_RETRIES', 3, 0, 20),
      concurrency: int(env, 'POLYMARKET_CONCURRENCY', 8, 1, 256),
      requestsPerSecond: num(env, 'POLYMARKET_RPS', 50, 0.01, 100_000),
    },
    backfill: { concurrency: int(env, 'BACKFILL_CONCURRENCY', 4, 1, 64) },
    bucket: bucket(env),
    recorderId: recorderId(env),
    mergeMs: int(env, 'MERGE_MS', 10_000, 100, 3_600_000),
    mergeConcurrency: int(env, 'MERGE_CONCURRENCY', 4, 1, 64),
    mergeCacheBytes: int(env, 'MERGE_CACHE_BYTES', 2 ** 31, 0, Number.MAX_SAFE_INTEGER),
    publishMs: int(env, 'PUBLISH_MS', 2000, 10, 3_600_000),
    publishSnapshotMs: int(env, 'PUBLISH_SNAPSHOT_MS', 3_600_000, 1000, 86_400_000),
    lakeSource: oneOf(env, 'LAKE_SOURCE', ['local', 'bucket'], 'local'),
    bucketCacheBytes: int(env, 'BUCKET_CACHE_MB', 4096, 1, 1_048_576) * 1024 * 1024,
    captureFeed: captureFeed(env),
    keysFile: path.resolve(env.KEYS_FILE || path.join(env.DATA_DIR || './data', 'state', 'keys.json')),
    keysObject: keysObject(env),
    api: {
      rateFree: num(env, 'RATE_FREE_PER_SECOND', 2, 0.1, 100_000),
      ratePaid: num(env, 'RATE_PAID_PER_SECOND', 25, 0.1, 100_000),
      rateAnon: num(env, 'RATE_ANON_PER_SECOND', 5, 0.1, 100_000),
      // Never logged: it signs cursors. Generated into DATA_DIR/state when not set.
      cursorSecret: env.CURSOR_SECRET || null,
      maxRangeDays: int(env, 'MAX_RANGE_DAYS', 31, 1, 3660),
      duckdbMemoryLimit: memory(env, 'DUCKDB_MEMORY_LIMIT', '4GB'),
      maxInFlight: int(env, 'API_MAX_INFLIGHT', 8, 1, 10_000),
      queue: int(env, 'API_QUEUE', 32, 0, 100_000),
      queueWaitMs: int(env, 'API_QUEUE_WAIT_MS', 250, 1, 60_000),
      exportSlots: exportSlots(env),
      exportMinRate: {
        bytesPerSecond: int(env, 'EXPORT_MIN_BYTES_PER_SECOND', 16_384, 0, 1_073_741_824),
        windowMs: int(env, 'EXPORT_SLOW_MS', 30_000, 100, 3_600_000),
      },
      healthMaxFlushAgeMs: int(env, 'HEALTH_MAX_FLUSH_AGE_MS', 30_000, 100, 3_600_000),
      captureDownAfterMs: int(env, 'CAPTURE_DOWN_AFTER_MS', 10_000, 100, 3_600_000),
      bookCacheBytes: int(env, 'BOOK_CACHE_MB', 512, 0, 1_048_576) * 1024 * 1024,
      servingCopies: oneOf(env, 'SERVING_COPIES', ['on', 'off'], 'on') === 'on',
      corsOrigins: origins(env, 'CORS_ORIGINS'),
      workers: int(env, 'API_WORKERS', os.availableParallelism(), 1, 64),
      incrementalMarking: oneOf(env, 'API_INCREMENTAL_MARKING', ['on', 'off'], 'off') === 'on',
      connections: {
        // Capped again at start by what the process's descriptor limit leaves (api/connections.ts).
        total: int(env, 'API_MAX_CONNECTIONS', 10_000, 16, 1_000_000),
        perAddress: int(env, 'API_MAX_CONNECTIONS_PER_ADDRESS', 256, 1, 1_000_000),
        headersTimeoutMs: int(env, 'API_HEADERS_TIMEOUT_MS', 10_000, 100, 600_000),
        requestTimeoutMs: int(env, 'API_REQUEST_TIMEOUT_MS', 30_000, 100, 3_600_000),
        keepAliveMs: int(env, 'API_KEEPALIVE_MS', 5_000, 100, 600_000),
        idleMs: int(env, 'API_IDLE_MS', 60_000, 1_000, 3_600_000),
      },
      replay: {
        slots: int(env, 'REPLAY_SLOTS', 64, 1, 100_000),
        perKey: int(env, 'REPLAY_PER_KEY', 8, 1, 100_000),
        // Each market playing holds its tape (a few MB): what one connection may hold at once.
        markets: int(env, 'REPLAY_MAX_MARKETS', 500, 1, 100_000),
        cacheBytes: int(env, 'REPLAY_CACHE_MB', 256, 0, 1_048_576) * 1024 * 1024,
        // Finished markets' messages rendered once into DATA_DIR/serving/replay (replay/copy.ts).
        copies: oneOf(env, 'REPLAY_COPIES', ['on', 'off'], 'on') === 'on',
        // Serving and replay copies together at most this share of the books Parquet's bytes (replay/copybudget.ts).
        copiesShare: copiesShare(env),
      },
    },
  };
  if (config.lakeSource === 'bucket' && !config.bucket)
    throw new ConfigError('LAKE_SOURCE=bucket needs S3_BUCKET (and its endpoint and credentials)');
  if (config.recorderId && !config.bucket) throw new ConfigError('RECORDER_ID needs S3_BUCKET: recorders meet in the bucket');
  if (config.keysObject && !config.bucket) throw new ConfigError('KEYS_OBJECT needs S3_BUCKET (and its endpoint and credentials)');
  return deepFreeze(config);
}

/**
 * The market channel's URL for a CLOB host: the real venue serves it from its own host (not
 * derived from the REST one, UPSTREAMS.md C1); a stand-in serves it beside its REST faces.
 */
export function polymarketWsUrl(clobUrl: string): string {
  if (new URL(clobUrl).hostname === 'clob.polymarket.com') return 'wss://ws-subscriptions-clob.polymarket.com/ws/market';
  return `${clobUrl.replace(/^http/, 'ws').replace(/\/$/, '')}/ws/market`;
}

/** The price socket (RTDS) beside a CLOB host: the real one for the real venue, else the stand-in's path. */
export function polymarketRtdsUrl(clobUrl: string): string {
  if (new URL(clobUrl).hostname === 'clob.polymarket.com') return 'wss://ws-live-data.polymarket.com';
  return `${clobUrl.replace(/^http/, 'ws').replace(/\/$/, '')}/rtds`;
}
