// The harness of the stream tests: capture against the stand-in over real WebSockets, and what
// the stand-in knew, for the audit (test/streamaudit.ts) to compare with the lake.
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Test } from 'tap';
import { Capture } from '../src/capture/capture.js';
import type { Venue } from '../src/config.js';
import { type Clock, pacedClock } from '../src/clock.js';
import { Duck } from '../src/lake/duckdb.js';
import { StandIn, WALLET_PREFIX } from '../src/standin/server.js';
import type { StreamFaults } from '../src/standin/streamserver.js';
import type { ChannelQuirks } from '../src/standin/stream.js';
import { SECOND } from '../src/time.js';
import { createAdapters } from '../src/venues/index.js';
import { quiet, sealAll, testConfig, testdir } from './helpers.js';
import { type Gap, type Recorded, presumedDowntime, readStreamLake, subscriptions } from './streamaudit.js';

export const COINS = { 'wallet-prediction': ['btc', 'eth', 'bnb'], polymarket: ['btc', 'eth', 'sol', 'xrp'] } as const;
export const OPEN = Date.parse('2026-07-26T12:00:00Z');

export interface RunOptions {
  venue?: Venue;
  env?: Record<string, string>;
  start?: number;
  /** Runs while capture records (after its start), e.g. to inject a fault of capture's own. */
  during?: (capture: Capture, clock: Clock, venue: { standin: StandIn; url: string; dir: string }) => Promise<void>;
  /** What the market channel does that the real venue does (hash layout and skew, books after trades...). */
  quirks?: Partial<ChannelQuirks>;
  /** Simulated time to record from the first book on, however long a busy machine takes to start. */
  spanMs?: number;
  /**
   * The venue's freezes and disconnects, set from the time capture recorded its first book: fixed
   * times would fall before a starved capture had subscribed, and its run would test nothing.
   */
  faultsFromFirstBook?: (at: number) => Pick<StreamFaults, 'freezes' | 'disconnects'>;
}

/** Both venues' BTC markets at the stand-in's `url`, with budgets no test reaches. */
export function venuesAt(url: string) {
  return {
    POLYMARKET_COINS: 'btc',
    POLYMARKET_GAMMA_URL: url,
    POLYMARKET_CLOB_URL: url,
    POLYMARKET_RPS: '100000',
    WALLET_COINS: 'btc',
    WALLET_BASE_URL: `${url}${WALLET_PREFIX}`,
    WALLET_RPS: '100000',
  };
}

/** Capture with the market channel against the stand-in for `seconds` of real time at `speed`. */
export async function streamRun(t: Test, faults: Partial<StreamFaults>, seconds: number, speed: number, options: RunOptions = {}) {
  const { venue = 'polymarket', env = {}, start = OPEN + 61 * SECOND, during, quirks } = options;
  const dir = testdir(t);
  // Paced: the venue's time runs at most a quarter second of real time (three polls, if longer) past
  // the slowest of capture's loops and stream threads and of the stand-in's pumps, and less than half
  // the stall bound, so a starved process sees what a fast one would and no silence of the venue's
  // stand-in is a stall (a clean run on a fresh clone, four test files at a time, once saw 6 simulated
  // seconds without data when only capture was waited for); idle, the clock keeps its speed.
  let reached = () => start;
  const leadMs = Math.min(Math.max(250 * speed, 3 * Number(env.POLL_MS ?? 1000)), Number(env.STREAM_STALL_MS ?? 3000) / 2);
  const anchor = Date.now();
  const clock = pacedClock(start, speed, anchor, Infinity, leadMs, () => reached());
  const standin = new StandIn({
    clock,
    coins: COINS,
    streamFaults: faults,
    channelQuirks: quirks,
    walletWeightPerMinute: Number.MAX_SAFE_INTEGER,
  });
  const url = await standin.start();
  const config = testConfig(dir, {
    CAPTURE_STREAM: venue,
    CAPTURE_VENUES: venue,
    ...venuesAt(url),
    WALLET_CONCURRENCY: '16',
    STREAM_STALL_MS: '3000',
    STREAM_BACKOFF_MIN_MS: '20',
    STREAM_BACKOFF_MAX_MS: '200',
    RATE_PAID_PER_SECOND: '100000',
    ...env,
  });
  const duck = await Duck.open(2);
  t.teardown(() => duck.close());
  const capture = new Capture(config, clock, duck, createAdapters(config, clock), quiet, null);
  // Stopped once, by the run or, when something in it threw, before the duck closes under them.
  let stopped: Promise<void> | null = null;
  const stopAll = () => (stopped ??= capture.stop().finally(() => standin.stop()));
  t.teardown(stopAll);
  reached = () => Math.min(capture.progress(), standin.stream.delivered(), standin.walletStream.delivered());
  await capture.start();
  const began = Date.now();
  let firstBookAt: number | null = null;
  const watch = setInterval(() => {
    if (firstBookAt !== null || capture.stats.books === 0) return;
    firstBookAt = clock.now();
    const windows = options.faultsFromFirstBook?.(firstBookAt);
    if (windows) for (const stream of [standin.stream, standin.walletStream]) Object.assign(stream.faults, windows);
  }, 20);
  t.teardown(() => clearInterval(watch));
  await during?.(capture, clock, { standin, url, dir });
  await new Promise((r) => setTimeout(r, Math.max(0, seconds * 1000 - (Date.now() - began))));
  // Bounded only against a hang (a run that never records): how long a starved machine takes is not the test's to judge,
  // but a run cut short by the bound has not done what its test is about, and says so.
  for (
    let waited = 0;
    options.spanMs && (firstBookAt === null || clock.now() < firstBookAt + options.spanMs) && waited < 300_000;
    waited += 50
  )
    await new Promise((r) => setTimeout(r, 50));
  // Thrown, not asserted: several files run this at their top level, where tap takes no assertion between awaits.
  if (options.spanMs && (firstBookAt === null || clock.now() < firstBookAt + options.spanMs))
    throw new Error(
      `the run was cut short before its ${options.spanMs / 1000} simulated s from the first book (first book: ${firstBookAt})`,
    );
  // A loaded machine may take its first seconds to discover: run on until books were recorded (at most 20 s more).
  for (let waited = 0; capture.stats.books === 0 && waited < 20_000; waited += 250) await new Promise((r) => setTimeout(r, 250));
  // How much of the simulated time the machine could not keep up with: the pace held the clock back this far.
  const unpaced = start + (Date.now() - anchor) * speed;
  const heldBack = Math.max(0, unpaced - clock.now());
  t.comment(
    `${venue} run at ${speed}x: ${((clock.now() - start) / 1000).toFixed(0)} simulated s in ${((Date.now() - anchor) / 1000).toFixed(1)} real s; ` +
      `the clock was held back ${(heldBack / 1000).toFixed(1)} simulated s (${((100 * heldBack) / Math.max(1, unpaced - start)).toFixed(1)}%) for the slowest party`,
  );
  await stopAll();
  await sealAll(duck, dir);
  const lake = await readStreamLake(duck, dir);
  // The run's capture stopped for good: what every reader takes as down after it, which the audit counts as a gap.
  const presumed = await presumedDowntime(dir);
  const undelivered = venue === 'polymarket' ? standin.stream.undelivered : standin.walletStream.undelivered;
  // What a stop may leave in flight: a second of real time, at least 2 s. A stream thread hands its rows over every
  // 20 ms, but on a busy machine one thread may lag the other by most of a second (seen on a clean clone at 360x:
  // one thread's newest market 0.7 s of real time behind the other's rows at the stop).
  const slackMs = Math.max(2000, 1000 * speed);
  return {
    ...lake,
    capture,
    standin,
    sim: standin.sim,
    undelivered,
    venue,
    dir,
    config,
    duck,
    end: clock.now(),
    stallMs: config.capture.stream.stallMs,
    slackMs,
    presumed,
    subscribedAt: subscriptions(standin, venue),
  };
}

/**
 * The rest of each window the run's capture held when it stopped: a `process_down` gap (provisional
 * until a restart writes it) from the market's newest recorded book, else the stop, to its end.
 * Which markets it held is the heartbeat's to say; where each gap starts is checked against the lake.
 */
export async function stopGaps(run: { dir: string; rows: Recorded[] }): Promise<Gap[]> {
  const beat = JSON.parse(await fs.readFile(path.join(run.dir, 'state', 'capture-heartbeat.json'), 'utf8')) as {
    ts: number;
    stopped?: boolean;
    open: { market_id: string; end_time: number }[];
  };
  if (!beat.stopped) throw new Error('the run’s capture did not stop cleanly');
  const newest = new Map<string, number>();
  for (const r of run.rows) newest.set(r.market_id, Math.max(newest.get(r.market_id) ?? -Infinity, r.ts));
  return beat.open
    .map((m) => ({ market_id: m.market_id, f: newest.get(m.market_id) ?? beat.ts, t: m.end_time, reason: 'process_down' }))
    .filter((g) => g.f < g.t);
}
