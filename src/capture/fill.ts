// Fills a lake with recent history by running the real capture code against an upstream whose
// clock starts `hours` ago and runs `speed` times faster, until it has caught up with the wall
// clock. The upstream is handed in (the stand-in, from jobs/, tests and benchmarks): capture's
// code never depends on the test double. Used by `make run` on an empty lake, by tests and by
// benchmarks.
import { Capture } from './capture.js';
import { type Clock, pacedClock } from '../clock.js';
import type { Config } from '../config.js';
import type { Duck } from '../lake/duckdb.js';
import type { Logger } from '../log.js';
import { HOUR } from '../time.js';
import { createAdapters } from '../venues/index.js';
import { publisherFor } from '../bucket/publish.js';

export interface FillOptions {
  hours: number;
  speed: number;
  pollMs?: number;
  /** Stop at this clock time instead of catching up with the wall clock. */
  until?: number;
  start?: number;
  /**
   * Ends the fill before `until` once this says it has what it came for: a scenario set off by
   * what capture recorded (tests), not by when the machine was hoped to get there.
   */
  stopWhen?: (capture: Capture, now: number) => boolean;
}

/** What a fill replays from: started on the fill's clock, it answers with capture's config pointed at it. */
export interface FillUpstream {
  start(clock: Clock, config: Config, pollMs: number): Promise<Config>;
  stop(): Promise<void>;
}

export async function fill(config: Config, duck: Duck, log: Logger, options: FillOptions, upstream: FillUpstream) {
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
  const polled = await upstream.start(clock, config, pollMs);
  // A fill replays hours in minutes by polling; streaming every change at that speed is live capture's job.
  // The reference prices stream even so (a second's observation of each symbol, not every book
  // change): their socket counts as silent only after two real seconds without an observation.
  const reference = { ...polled.capture.reference, stallMs: Math.max(polled.capture.reference.stallMs, 2_000 * options.speed) };
  const cfg = { ...polled, capture: { ...polled.capture, stream: { ...polled.capture.stream, venues: [] }, reference } };
  const capture = new Capture(cfg, clock, duck, createAdapters(cfg, clock), log, publisherFor(cfg, log, duck));
  reached = () => capture.progress();
  await capture.start();
  while (clock.now() < until && !options.stopWhen?.(capture, clock.now())) await new Promise((r) => setTimeout(r, 50));
  await capture.stop();
  const sealed = await capture.seal(clock.now());
  await upstream.stop();
  return { capture, clock, sealed, endedAt: clock.now() };
}
