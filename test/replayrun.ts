// The replay's round trip, shared by both venues' tests: capture B, with the venue's REST faces
// from a stand-in of the same seed, takes the venue's stream from the replay of lake A, which
// plays on B's own clock (`play_at` is B's start), so the replay is the venue as it was when A
// recorded it; then B's books are compared with A's, row for row, where neither has a gap.
import type { Test } from 'tap';
import { startApi } from '../src/api/server.js';
import { Capture } from '../src/capture/capture.js';
import { pacedClock } from '../src/clock.js';
import type { Venue } from '../src/config.js';
import { Duck } from '../src/lake/duckdb.js';
import { StandIn } from '../src/standin/server.js';
import { SECOND } from '../src/time.js';
import { createAdapters } from '../src/venues/index.js';
import { quiet, sealAll, testConfig, testdir } from './helpers.js';
import { type Gap, type Recorded, readStreamLake } from './streamaudit.js';
import { COINS, venuesAt } from './streamrun.js';

const REPLAY_PATH: Record<Venue, { env: string; path: string }> = {
  polymarket: { env: 'POLYMARKET_WS_URL', path: '/v3/replay/polymarket/ws/market' },
  'wallet-prediction': { env: 'WALLET_WS_URL', path: '/v3/replay/wallet-prediction/sapi/wss' },
};

export async function roundTrip(
  t: Test,
  venue: Venue,
  a: { dir: string; duck: Duck; rows: Recorded[]; gaps: Gap[] },
  start: number,
  end: number,
) {
  const dirB = testdir(t);
  let progress = () => start;
  const leadMs = 1500;
  const clock = pacedClock(start, 20, Date.now(), Infinity, leadMs, () => progress());
  const standin = new StandIn({ clock, coins: COINS, walletWeightPerMinute: Number.MAX_SAFE_INTEGER });
  const url = await standin.start();
  t.teardown(() => standin.stop());
  const replayApi = await startApi(testConfig(a.dir, { RATE_PAID_PER_SECOND: '1000' }), a.duck, clock, quiet, { port: 0 });
  t.teardown(() => replayApi.stop());
  const key = (await replayApi.keys.issue('paid', 'round trip')).key;
  const { env, path } = REPLAY_PATH[venue];
  const config = testConfig(dirB, {
    CAPTURE_STREAM: venue,
    CAPTURE_VENUES: venue,
    ...venuesAt(url),
    [env]: `${replayApi.url.replace('http', 'ws')}${path}?from=${start}&to=${end}&speed=1&play_at=${start}&api_key=${key}`,
    WALLET_CONCURRENCY: '16',
    // A stall is real time while the replay is paced by B: beside stress-ng --cpu 4 a 3 s bound had B
    // take a starved replay for stalled throughout, leaving nothing outside its gaps to compare.
    STREAM_STALL_MS: '15000',
    STREAM_BACKOFF_MIN_MS: '20',
    STREAM_BACKOFF_MAX_MS: '200',
  });
  const duck = await Duck.open(2);
  t.teardown(() => duck.close());
  const capture = new Capture(config, clock, duck, createAdapters(config, clock), quiet, null);
  // Stopped once, by the run or, when something in it threw, before the duck closes under it.
  let stopped: Promise<void> | null = null;
  const stopCapture = () => (stopped ??= capture.stop());
  t.teardown(stopCapture);
  // The venue's time holds at the start until the replay has loaded a market B subscribed to and,
  // on the market channel (whose replay sends each token's book on subscription), until B recorded
  // a book: B's stream thread reports progress while its connection is still being answered, and a
  // loaded machine let the clock run the whole window before B's first subscription arrived, or
  // before its first book (twice beside stress-ng, B recorded nothing).
  let replaying = false;
  const diagnosis = {
    releasedAt: null as number | null,
    sessions: 0,
    messages: 0,
    capture: { ...capture.stats },
    rows: 0,
    gaps: [] as string[],
  };
  // B's clock also waits for the replay's delivery: a replay in the same busy process (or reading a
  // tape B just subscribed to) that falls behind sends its backlog at once, and B would record those
  // books after rows of its own polls, where a venue never falls behind.
  progress = () => {
    const open = replayApi.replays.stats().open;
    const sent = open.length ? Math.min(...open.map((s) => s.sentTo)) : Infinity;
    // A quarter second past what the replay has sent, not the lead: a poll of B's in between would
    // come before the books the replay sends late (the replay wakes every 10 ms, 200 simulated).
    return Math.min(Math.max(start, sent - leadMs + 250), pacedProgress());
  };
  const pacedProgress = () => {
    if (!replaying) {
      const open = replayApi.replays.stats().open;
      replaying = open.some((s) => s.markets > 0) && (venue !== 'polymarket' || capture.stats.books > 0);
      if (replaying) diagnosis.releasedAt = clock.now();
    }
    return replaying ? capture.progress() : start;
  };
  await capture.start();
  for (let waited = 0; clock.now() < end; waited += 50) {
    if (!replaying && waited > 60_000)
      throw new Error(`B recorded nothing of the replay in 60 s: ${JSON.stringify(replayApi.replays.stats().open)}`);
    const open = replayApi.replays.stats().open;
    diagnosis.sessions = Math.max(diagnosis.sessions, open.length);
    diagnosis.messages = Math.max(diagnosis.messages, ...open.map((s) => s.messages));
    await new Promise((r) => setTimeout(r, 50));
  }
  diagnosis.capture = { ...capture.stats };
  await stopCapture();
  await sealAll(duck, dirB);
  const b = await readStreamLake(duck, dirB);
  diagnosis.rows = b.rows.length;
  diagnosis.gaps = b.gaps.map((g) => `${g.market_id}@${g.f - start}..${g.t - start}:${g.reason}`);
  // After B's first book of each outcome (its subscription: B cannot record what the venue sent before
  // it asked) to shortly before the end, outside both records' gaps. The first book itself is left
  // out: a market's first book may come from REST (the stand-in's, live) at B's own poll instant,
  // which A's polls need not have shared (seen once: B's first row of a market paired the Yes book of
  // its time with REST's No book of 217 ms later, a row A did not record). An outcome A recorded
  // after B's first subscription and B never did is `unrecorded`.
  const outcomeOf = (r: Recorded) => `${r.market_id}/${r.outcome_index}`;
  const firstB = new Map<string, number>();
  for (const r of b.rows) {
    const outcome = outcomeOf(r);
    firstB.set(outcome, Math.min(firstB.get(outcome) ?? Infinity, r.ts));
  }
  // A's first book of an outcome likewise: the replay sends it with the venue's time of that book, which
  // a recorder places by its own rules (A's subscription dump row came at its receipt, after a poll's row).
  const firstA = new Map<string, number>();
  for (const r of a.rows) {
    const outcome = outcomeOf(r);
    firstA.set(outcome, Math.min(firstA.get(outcome) ?? Infinity, r.ts));
  }
  const first = (r: Recorded) => Math.max(firstB.get(outcomeOf(r)) ?? Infinity, firstA.get(outcomeOf(r)) ?? -Infinity);
  const subscribed = Math.min(...firstB.values());
  const outside = (r: Recorded, gaps: Gap[]) => !gaps.some((g) => g.market_id === r.market_id && r.ts >= g.f - 10 && r.ts <= g.t + 10);
  const within = (r: Recorded) => r.ts > first(r) && r.ts < end - 2 * SECOND && outside(r, a.gaps) && outside(r, b.gaps);
  const keyOf = (r: Recorded) =>
    `${r.market_id}/${r.outcome_index}@${r.ts}:${JSON.stringify([r.bid_prices, r.bid_sizes, r.ask_prices, r.ask_sizes])}`;
  // The same book at the same venue time, recorded up to a second later than the other recorder did:
  // where a recorder puts its row also follows its own polls, whose rows a book that arrives after them
  // must follow (the replay, in this busy process, may send late). Never an earlier row, other levels
  // or another venue time.
  const bookOf = (r: Recorded) =>
    `${r.market_id}/${r.outcome_index}@${r.ex}:${JSON.stringify([r.bid_prices, r.bid_sizes, r.ask_prices, r.ask_sizes])}`;
  const placed = (rows: Recorded[]) => {
    const at = new Map<string, number[]>();
    for (const r of rows) at.set(bookOf(r), [...(at.get(bookOf(r)) ?? []), r.ts]);
    return at;
  };
  const placedA = placed(a.rows);
  const placedB = placed(b.rows);
  const laterIn = (at: Map<string, number[]>, r: Recorded) => (at.get(bookOf(r)) ?? []).some((ts) => ts >= r.ts && ts <= r.ts + SECOND);
  const earlierIn = (at: Map<string, number[]>, r: Recorded) => (at.get(bookOf(r)) ?? []).some((ts) => ts <= r.ts && ts >= r.ts - SECOND);
  const inA = new Set(a.rows.map(keyOf));
  const inB = new Set(b.rows.map(keyOf));
  const compared = a.rows.filter(within);
  const unrecorded = [
    ...new Set(a.rows.filter((r) => r.ts >= subscribed && r.ts < end - 2 * SECOND && !firstB.has(outcomeOf(r))).map(outcomeOf)),
  ];
  return {
    /** What B and the replay did, for a failure to say. */
    diagnosis,
    compared: compared.length,
    unrecorded,
    missing: compared.filter((r) => !inB.has(keyOf(r)) && !laterIn(placedB, r)),
    extra: b.rows.filter(within).filter((r) => !inA.has(keyOf(r)) && !earlierIn(placedA, r)),
  };
}
