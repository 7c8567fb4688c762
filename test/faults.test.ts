// Upstream faults: capture keeps running, every failure span becomes a gap, and nothing is
// recorded (or invented) inside a gap.
import t from 'tap';
import { fill } from '../src/capture/fill.js';
import { StandInUpstream } from '../src/standin/upstream.js';
import { Duck } from '../src/lake/duckdb.js';
import { WALLET_PREFIX } from '../src/standin/server.js';
import { HOUR, MINUTE } from '../src/time.js';
import type { Capture } from '../src/capture/capture.js';
import { lakeTable, quiet, sealAll, testConfig, testdir } from './helpers.js';

const START = Date.parse('2026-07-27T08:00:00Z');
const VENUES = ['polymarket', 'wallet-prediction'] as const;
const WINDOW = 15 * MINUTE;
const SLACK = 30_000;
/**
 * Set off by what capture recorded, not by when a machine was hoped to get there: a starved run
 * may take many simulated minutes to discover its first market (timeouts are real milliseconds).
 */
const OUTAGE = { from: Infinity, to: Infinity };
const dir = testdir(t);
// Timeouts of a second: the venue's injected silences cost that much real time each (the clock is
// paced by capture, so no simulated time is lost), and a starved event loop still hears answers.
const config = testConfig(dir, {
  WALLET_TIMEOUT_MS: '1000',
  POLYMARKET_TIMEOUT_MS: '1000',
  WALLET_MAX_RETRIES: '1',
  POLYMARKET_MAX_RETRIES: '1',
});
const duck = await Duck.open(1);
t.teardown(() => duck.close());

const upstream = new StandInUpstream({
  faults: {
    errorRate: 0.03,
    rateLimitRate: 0.03,
    retryAfterSec: 0,
    timeoutRate: 0.005,
    stallRate: 0.005,
    truncateRate: 0.02,
    malformedRate: 0.02,
    outages: [
      { path: '/books', ...OUTAGE },
      { path: `${WALLET_PREFIX}/order-book`, ...OUTAGE },
    ],
  },
});
const newestBook = (capture: Capture, venue: string) =>
  Math.max(-Infinity, ...[...capture.latest].filter(([key]) => key.startsWith(`${venue}:`)).map(([, book]) => book.ts));
/**
 * Once capture holds books of both venues, the outage is four minutes from one minute into the next
 * 15-minute window, so that window's markets are open through all of it; the fill ends when both
 * venues are recorded again and those markets have ended (each gap over the outage closed by then).
 */
function scenario(capture: Capture, now: number): boolean {
  if (OUTAGE.from === Infinity) {
    if (!VENUES.every((v) => newestBook(capture, v) > -Infinity)) return false;
    OUTAGE.from = START + Math.ceil((now - START - MINUTE) / WINDOW) * WINDOW + MINUTE;
    OUTAGE.to = OUTAGE.from + 4 * MINUTE;
    for (const outage of upstream.standin.faults.outages) Object.assign(outage, OUTAGE);
    return false;
  }
  return now >= OUTAGE.to + 11 * MINUTE && VENUES.every((v) => newestBook(capture, v) >= OUTAGE.to + 2 * MINUTE);
}
const run = {
  ...(await fill(
    config,
    duck,
    quiet,
    { hours: 0, speed: 120, start: START, until: START + 3 * HOUR, pollMs: 2000, stopWhen: scenario },
    upstream,
  )),
  standin: upstream.standin,
};
const summary = `capture ${JSON.stringify(run.capture.stats)}; outage ${(OUTAGE.from - START) / MINUTE}-${(OUTAGE.to - START) / MINUTE} min, fill ended at ${(run.endedAt - START) / MINUTE} min`;
await sealAll(duck, dir);
const books = lakeTable(dir, 'books');
const gaps = lakeTable(dir, 'gaps');

t.test('the stand-in really misbehaved', async (t) => {
  t.comment(summary);
  t.ok(OUTAGE.to < run.endedAt, 'capture recorded both venues, so the outage was set off and ran its course');
  t.ok(run.standin.stats.faults > 50, `${run.standin.stats.faults} faults injected`);
});

t.test('capture kept recording before, between and after the faults', async (t) => {
  // How many polls answered in time is the machine's (timeouts are real milliseconds; a starved run
  // has more of them, each a gap): what capture owes is to go on recording each venue through them.
  // (The outage began once both had books, and the fill ran until both had them after it.)
  const counts = (await duck.rows(
    `SELECT venue, count(*) FILTER (WHERE epoch_ms(ts) < ${OUTAGE.from})::INTEGER AS before,
       count(*) FILTER (WHERE epoch_ms(ts) >= ${OUTAGE.to + MINUTE})::INTEGER AS after FROM ${books} GROUP BY venue ORDER BY venue`,
  )) as { venue: string; before: number; after: number }[];
  t.same(
    counts.map((c) => c.venue),
    ['polymarket', 'wallet-prediction'],
    'both venues recorded',
  );
  for (const c of counts) {
    t.ok(c.before > 0, `${c.venue}: ${c.before} books recorded before the outage`);
    t.ok(c.after > 0, `${c.venue}: ${c.after} books recorded after the outage`);
  }
});

t.test('the outage is a gap on every market open through it, with its span', async (t) => {
  // Polls are sparse on a loaded machine: request timeouts are real milliseconds, tens of
  // simulated seconds at this clock's 120x. So a gap may open well after the outage began (at the
  // first poll inside it: nothing was recorded between the outage's start and the gap), and the
  // poll that closes it may have begun inside the outage (its answer, recv_ts, came after it).
  const rows = await duck.rows(`SELECT g.venue, g.market_id, g.reason, epoch_ms(g.from_ts)::BIGINT AS f, epoch_ms(g.to_ts)::BIGINT AS t,
      (SELECT max(epoch_ms(b.ts)) FROM ${books} b WHERE b.market_id = g.market_id AND b.ts < g.from_ts)::BIGINT AS last_before,
      (SELECT min(epoch_ms(b.recv_ts)) FROM ${books} b WHERE b.market_id = g.market_id AND b.ts = g.to_ts)::BIGINT AS closed_by
    FROM ${gaps} g WHERE g.dataset = 'books' AND epoch_ms(g.from_ts) < ${OUTAGE.to}
      AND (epoch_ms(g.from_ts) <= ${OUTAGE.from + SLACK} OR coalesce(last_before, 0) < ${OUTAGE.from})
      AND (epoch_ms(g.to_ts) >= ${OUTAGE.to - SLACK} OR closed_by >= ${OUTAGE.to})`);
  const venues = new Set(rows.map((r) => r.venue));
  t.same([...venues].sort(), ['polymarket', 'wallet-prediction'], 'both venues');
  t.ok(
    rows.some((r) => r.reason === 'http_5xx'),
    'the reason says what failed',
  );
  const open = await duck.rows(`SELECT DISTINCT m.venue, m.market_id FROM ${lakeTable(dir, 'markets')} m
    WHERE epoch_ms(m.start_time) <= ${OUTAGE.from} AND epoch_ms(m.end_time) >= ${OUTAGE.to + SLACK}`);
  const gapped = new Set(rows.map((r) => r.market_id));
  const missing = open.filter((m) => !gapped.has(m.market_id));
  t.ok(open.length >= 2, `${open.length} markets were open through the whole outage`);
  t.same(missing, [], 'each of them has a gap over it');
});

t.test('nothing is recorded inside any gap', async (t) => {
  const inside = await duck.rows(`SELECT g.market_id, g.from_ts, g.to_ts, b.ts FROM ${gaps} g JOIN ${books} b
    ON b.market_id = g.market_id AND b.ts > g.from_ts AND b.ts < g.to_ts WHERE g.dataset = 'books' LIMIT 5`);
  t.same(inside, []);
  const count = await duck.rows(`SELECT count(*) AS n, count(DISTINCT reason) AS reasons FROM ${gaps}`);
  t.ok(Number(count[0].n) > 10, `${count[0].n} gaps recorded`);
});
