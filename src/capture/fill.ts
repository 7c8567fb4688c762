// Fills a lake with recent history by running the real capture code against an in-process
// stand-in whose clock starts `hours` ago and runs `speed` times faster, until it has caught
// up with the wall clock. Used by `make run` on an empty lake, by tests and by benchmarks.
import { Capture } from './capture.js';
import { pacedClock } from '../clock.js';
import type { Config } from '../config.js';
import type { Duck } from '../lake/duckdb.js';
import type { Logger } from '../log.js';
import { type Faults, StandIn, WALLET_PREFIX } from '../standin/server.js';
import { MARKET_CHANNEL_PATH } from '../standin/stream.js';
import { WALLET_STREAM_PATH } from '../standin/walletstream.js';
import { HOUR } from '../time.js';
import { createAdapters } from '../venues/index.js';

export interface FillOptions {
  hours: number;
  speed: number;
  seed?: number;
  pollMs?: number;
  faults?: Partial<Faults>;
  /** Stop at this clock time instead of catching up with the wall clock. */
  until?: number;
  start?: number;
}

/** The config capture uses against a stand-in at `url`, with upstream budgets lifted. */
export function standinConfig(config: Config, url: string, pollMs?: number): Config {
  return {
    ...config,
    capture: { ...config.capture, pollMs: pollMs ?? config.capture.pollMs },
    wallet: {
      ...config.wallet,
      baseUrl: `${url}${WALLET_PREFIX}`,
      wsUrl: `${url.replace(/^http/, 'ws')}${WALLET_STREAM_PATH}`,
      requestsPerSecond: 100_000,
      concurrency: 32,
    },
    polymarket: {
      ...config.polymarket,
      gammaUrl: url,
      clobUrl: url,
      wsUrl: `${url.replace(/^http/, 'ws')}${MARKET_CHANNEL_PATH}`,
      requestsPerSecond: 100_000,
      concurrency: 32,
    },
  };
}

export async function fill(config: Config, duck: Duck, log: Logger, options: FillOptions) {
  if (options.until === undefined && options.speed <= 1)
    throw new Error('a fill that catches up with the wall clock needs a speed above 1');
  const realStart = Date.now();
  const start = options.start ?? realStart - options.hours * HOUR;
  // Without `until`, the fill ends when its clock reaches the wall clock: (R * speed - S) / (speed - 1).
  const until = options.until ?? Math.floor((realStart * options.speed - start) / (options.speed - 1));
  // Paced by capture: the venue's time runs at most ten poll intervals ahead of capture's last
  // poll, so polls are at most twenty apart however busy the machine (idle, a fill keeps its speed).
  let reached = () => start;
  const pollMs = options.pollMs ?? config.capture.pollMs;
  const clock = pacedClock(start, options.speed, realStart, until, 10 * pollMs, () => reached());
  const standin = new StandIn({
    clock,
    seed: options.seed ?? 1,
    apiKey: config.wallet.apiKey,
    apiSecret: config.wallet.apiSecret,
    walletWeightPerMinute: Number.MAX_SAFE_INTEGER,
    faults: options.faults,
  });
  const url = await standin.start(0);
  const polled = standinConfig(config, url, options.pollMs);
  // A fill replays hours in minutes by polling; streaming every change at that speed is live capture's job.
  const cfg = { ...polled, capture: { ...polled.capture, stream: { ...polled.capture.stream, venues: [] } } };
  const capture = new Capture(cfg, clock, duck, createAdapters(cfg, clock), log);
  reached = () => capture.progress();
  await capture.start();
  while (clock.now() < until) await new Promise((r) => setTimeout(r, 50));
  await capture.stop();
  const sealed = await capture.seal(clock.now());
  await standin.stop();
  return { capture, standin, clock, sealed, endedAt: clock.now() };
}
