// Backfill through the stand-in over HTTP: idempotent, resumable, never before coverage.
import fs from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { CoverageError, backfill } from '../src/capture/backfill.js';
import { standinConfig } from '../src/standin/upstream.js';
import { createClock } from '../src/clock.js';
import { Duck } from '../src/lake/duckdb.js';
import { listFiles, sha256File } from '../src/lake/fsutil.js';
import { StandIn } from '../src/standin/server.js';
import { lakeTable, testConfig, testdir } from './helpers.js';

const dir = testdir(t);
const clock = createClock(Date.parse('2026-08-01T00:00:00Z'));
const standin = new StandIn({ clock, walletWeightPerMinute: Number.MAX_SAFE_INTEGER });
const config = standinConfig(testConfig(dir), await standin.start(0));
const duck = await Duck.open(1);
t.teardown(async () => {
  await duck.close();
  await standin.stop();
});
const { createAdapter } = await import('../src/venues/index.js');
const wallet = createAdapter(config, clock, 'wallet-prediction');
const poly = createAdapter(config, clock, 'polymarket');
const from = Date.parse('2026-05-04T00:00:00Z');
const to = Date.parse('2026-05-06T00:00:00Z');

async function lakeState() {
  const files = (await listFiles(path.join(dir, 'lake'), '.parquet')).sort();
  return Promise.all(files.map(async (f) => [f, await sha256File(path.join(dir, 'lake', f))]));
}

t.test('a range reaching before coverage is clamped, and says so', async (t) => {
  const s = await backfill(config, duck, wallet, { venue: 'wallet-prediction', coin: 'btc', window: '15m', from, to }, clock.now());
  t.equal(s.clampedFrom, Date.parse('2026-05-05T00:00:00Z'));
  t.match(s.notes.join('\n'), /clamped to 2026-05-05/);
  t.equal(s.markets, 96, 'one 15m market per window for the one day that exists');
  const rows = await duck.rows(
    `SELECT count(*) AS n, count(DISTINCT market_id) AS m, min(start_time) AS lo, count(*) FILTER (WHERE status = 'resolved' AND winning_outcome_index IS NOT NULL AND reference_price_start IS NOT NULL) AS resolved FROM ${lakeTable(dir, 'markets')}`,
  );
  t.equal(Number(rows[0].n), 96);
  t.equal(Number(rows[0].m), 96);
  t.equal(Number(rows[0].resolved), 96, 'resolution, winner and reference prices are kept');
  t.equal(String(rows[0].lo).slice(0, 10), '2026-05-05');
  t.same(await listFiles(path.join(dir, 'lake/books'), '.parquet'), [], 'backfill never writes books');
});

t.test('a second run gives the same lake, byte for byte', async (t) => {
  const before = await lakeState();
  await backfill(config, duck, wallet, { venue: 'wallet-prediction', coin: 'btc', window: '15m', from, to }, clock.now());
  t.same(await lakeState(), before);
});

t.test('an interrupted run resumes from its checkpoint', async (t) => {
  const req = {
    venue: 'wallet-prediction' as const,
    coin: 'btc',
    window: '5m' as const,
    from: Date.parse('2026-05-05T00:00:00Z'),
    to: Date.parse('2026-05-08T00:00:00Z'),
  };
  const checkpoint = path.join(dir, 'state/backfill', `wallet-prediction-btc-5m-${req.from}-${req.to}.json`);
  await fs.mkdir(path.dirname(checkpoint), { recursive: true });
  await fs.writeFile(checkpoint, JSON.stringify({ days: [req.from] }));
  const s = await backfill(config, duck, wallet, req, clock.now());
  t.equal(s.skippedDays, 1);
  t.equal(s.markets, 2 * 288);
  await fs.access(checkpoint).then(
    () => t.fail('checkpoint left behind'),
    () => t.pass('checkpoint removed when done'),
  );
});

t.test('a range wholly before coverage is refused', async (t) => {
  await t.rejects(
    backfill(config, duck, wallet, { venue: 'wallet-prediction', coin: 'eth', window: '5m', from, to }, clock.now()),
    CoverageError,
  );
  await t.rejects(
    backfill(config, duck, poly, { venue: 'polymarket', coin: 'btc', window: '5m', from, to }, clock.now()),
    /starts 2026-07-26/,
  );
});

t.test('polymarket backfill walks deterministic slugs', async (t) => {
  const s = await backfill(
    config,
    duck,
    poly,
    { venue: 'polymarket', coin: 'sol', window: '15m', from: Date.parse('2026-07-26T00:00:00Z'), to: Date.parse('2026-07-26T06:00:00Z') },
    clock.now(),
  );
  t.equal(s.markets, 24);
  t.match(s.notes.join('\n'), /no price history/, 'resolved markets have no fine history upstream, and the summary says so');
});
