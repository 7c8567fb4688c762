// Builds and starts the API for a lake: catalogue loaded once, then refreshed; the cursor
// secret generated into DATA_DIR on first start when not configured.
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import type { Clock } from '../clock.js';
import { type Config, VENUES, VENUE_COINS, WINDOWS } from '../config.js';
import type { Duck } from '../lake/duckdb.js';
import { lakePaths } from '../lake/layout.js';
import { LakeReader } from '../lake/reader.js';
import { SpoolTail } from '../lake/tail.js';
import type { Logger } from '../log.js';
import type { LatestBook } from '../records.js';
import { createApp } from './app.js';
import { Cursors } from './cursor.js';
import { KeyStore } from './keys.js';
import { openApiDocument } from './openapi.js';
import { LatestReads, preloadLatest } from './latest.js';
import { buildRoutes } from './routes.js';

/** Capture fsyncs its spool every second; following it twice as often keeps books under ~1.5 s old. */
const TAIL_MS = 500;

/** New seals, compactions and market versions reach the index and catalogue within this. */
const UPDATE_MS = 2000;
const REINDEX_MS = 3_600_000;

/** Runs `task` every `ms`, never two at once. */
function every(ms: number, task: () => Promise<unknown>, failed: (err: unknown) => void): NodeJS.Timeout {
  let running = false;
  return setInterval(() => {
    if (running) return;
    running = true;
    task().catch(failed).finally(() => {
      running = false;
    });
  }, ms);
}

export interface Api {
  url: string;
  lake: LakeReader;
  keys: KeyStore;
  server: http.Server;
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

/**
 * `latest` is capture's own map when capture runs in this process; without it the API follows
 * the spool capture writes, so the newest books are in memory either way.
 */
export async function startApi(config: Config, duck: Duck, clock: Clock, log: Logger, shared?: Map<string, LatestBook>, port = config.port): Promise<Api> {
  const paths = lakePaths(config.dataDir);
  const series = VENUES.flatMap((venue) => VENUE_COINS[venue].flatMap((coin) => WINDOWS.map((window) => ({ venue, coin, window }))));
  const lake = new LakeReader(duck, paths, series);
  // Sorts of large exports spill to disk instead of growing without bound.
  await duck.run(`SET GLOBAL memory_limit = '${config.api.duckdbMemoryLimit}'`);
  await duck.run(`SET GLOBAL temp_directory = '${path.join(config.dataDir, 'state', 'duckdb-tmp').replaceAll("'", "''")}'`);
  // Exports are written, streamed and deleted; a crash can leave some behind.
  await fs.rm(path.join(config.dataDir, 'state', 'exports'), { recursive: true, force: true });
  const began = performance.now();
  const index = await lake.openIndex();
  const indexed = performance.now();
  await lake.loadAll();
  const ms = (a: number, b: number) => Math.round(b - a);
  log.info({ files: lake.sealedFiles().length, markets: lake.size, index, index_ms: ms(began, indexed), catalogue_ms: ms(indexed, performance.now()) }, 'lake loaded');
  const latest = shared ?? new Map<string, LatestBook>();
  const latestReads = new LatestReads();
  const tail = shared ? null : new SpoolTail(paths.spool, latest);
  await tail?.poll();
  const preloading = performance.now();
  const preloaded = await preloadLatest(lake, latest, clock.now());
  log.info({ preloaded, in_memory: latest.size, ms: ms(preloading, performance.now()) }, 'latest books loaded');
  let reindexed = Date.now();
  const timers = [
    tail && every(TAIL_MS, () => tail.poll(), (err) => log.warn({ err }, 'spool tail failed')),
    every(UPDATE_MS, async () => {
      // The full walk is a safety net behind the commit log (a line lost in a crash).
      if (Date.now() - reindexed > REINDEX_MS) {
        reindexed = Date.now();
        await lake.indexAll();
        await lake.update();
        await lake.writeCheckpoint();
      } else {
        await lake.update();
      }
      latestReads.prune(latest, clock.now());
    }, (err) => log.warn({ err }, 'lake update failed')),
  ];
  const keys = KeyStore.at(config.dataDir);
  const rate = (plan: 'free' | 'paid') => (plan === 'paid' ? config.api.ratePaid : config.api.rateFree);
  let document: unknown = null;
  const routes = buildRoutes({
    lake, latest, latestReads, rate, exportDir: path.join(config.dataDir, 'state', 'exports'), cursors: new Cursors(await cursorSecret(config)), maxRangeMs: config.api.maxRangeDays * 86_400_000,
    openapi: () => document,
    health: async () => {
      let newest = -Infinity;
      for (const l of latest.values()) newest = Math.max(newest, l.ts);
      return { status: 'ok', lake: { newest_capture: Number.isFinite(newest) ? new Date(newest).toISOString() : null, files: lake.sealedFiles().length, markets: lake.size } };
    },
  });
  document = openApiDocument(routes);
  const app = createApp({ routes, keys, rate, log, now: () => clock.now() });
  const server = app.listen(port, config.host);
  await new Promise<void>((resolve) => server.once('listening', resolve));
  const address = server.address() as AddressInfo;
  return {
    url: `http://${config.host}:${address.port}`,
    lake, keys, server,
    async stop() {
      for (const timer of timers) if (timer) clearInterval(timer);
      // Drain: stop accepting, let in-flight requests finish, then drop idle keep-alives.
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeIdleConnections();
        setTimeout(() => server.closeAllConnections(), 5000).unref();
      });
    },
  };
}
