// kill -9 of a capture process recording a venue's stream: every change it acknowledged is in the
// lake exactly once (the heartbeat after each flush counts them), and the time it was down is a gap,
// so the audit against the stand-in's book model finds nothing missing without one.
import fs from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import type { Venue } from '../src/config.js';
import { lakePaths } from '../src/lake/layout.js';
import type { PartitionManifest } from '../src/lake/manifest.js';
import { listSpool } from '../src/lake/spool.js';
import { captureEnv, captureProcesses, processRig, exited, lakeTable, runFor, sleep, sealAll } from './helpers.js';
import { auditStream, auditTrades, readStreamLake, subscriptions } from './streamaudit.js';

const START = Date.parse('2026-07-26T12:01:01Z');
const SPEED = 20;
const FLUSH_MS = 200;

/** Every manifest file of the lake: the rows sealed so far and the spool parts they came from. */
async function sealed(dir: string): Promise<{ rows: number; sources: Set<string> }> {
  const { manifest } = lakePaths(dir);
  const names = (await fs.readdir(manifest, { recursive: true }).catch(() => [] as string[])).filter((n) => n.endsWith('.json'));
  const files = (
    await Promise.all(names.map(async (n) => JSON.parse(await fs.readFile(path.join(manifest, n), 'utf8')) as PartitionManifest))
  ).flatMap((m) => m.files);
  return { rows: files.reduce((n, f) => n + f.rows, 0), sources: new Set(files.flatMap((f) => f.sources)) };
}

/**
 * Rows of `dataset` the spool holds (whole lines only: a half-written last line was never
 * acknowledged), leaving out parts already sealed (capture seals a finished market's runs before
 * its hour is over, and removes them from the spool a pass later).
 */
async function spooled(dir: string, dataset = 'books'): Promise<{ keys: Set<string>; newest: number; lines: number }> {
  const keys = new Set<string>();
  let newest = -Infinity;
  let lines = 0;
  const { sources } = await sealed(dir);
  for (const part of await listSpool(lakePaths(dir).spool)) {
    if (dataset !== '*' && part.partition.dataset !== dataset) continue;
    if (sources.has(part.source)) continue;
    const text = await fs.readFile(part.file, 'utf8').catch(() => '');
    for (const line of text.split('\n')) {
      try {
        const r = JSON.parse(line);
        lines++;
        keys.add(`${r.market_id}|${r.token_id}|${r.ts}`);
        newest = Math.max(newest, Number(r.recv_ts));
      } catch {
        // a partial line
      }
    }
  }
  return { keys, newest, lines };
}

const VENUES: { venue: Venue; coins: Record<string, string>; enough: number; staleHeartbeat?: boolean; downMs?: number }[] = [
  { venue: 'polymarket', coins: { POLYMARKET_COINS: 'btc,eth' }, enough: 500 },
  // One push a change of a whole market: fewer rows a second than Polymarket's two tokens.
  { venue: 'wallet-prediction', coins: { WALLET_COINS: 'btc,eth' }, enough: 150 },
  // The heartbeat names none of the markets the process spooled books of: on a starved machine a
  // flush in flight for seconds leaves the last heartbeat from before they were known (seen once,
  // 154 clock s behind the kill). Their downtime must be a gap all the same.
  { venue: 'wallet-prediction', coins: { WALLET_COINS: 'btc,eth' }, enough: 150, staleHeartbeat: true },
  // ... and they all end while no process runs, so long before the restart that discovery (the
  // previous, current and next 5-minute windows) never lists them again.
  {
    venue: 'polymarket',
    coins: { POLYMARKET_COINS: 'btc,eth', CAPTURE_WINDOWS: '5m' },
    enough: 500,
    staleHeartbeat: true,
    downMs: 15 * 60_000,
  },
];

for (const { venue, coins, enough, staleHeartbeat, downMs = 14_000 } of VENUES) {
  const title = `kill -9 mid-stream (${venue}${staleHeartbeat ? ', a heartbeat naming none of the markets it spooled' : ''}${downMs > 60_000 ? `, down ${downMs / 60_000} clock minutes` : ''})`;
  t.test(`${title} loses nothing it acknowledged and leaves a gap for the downtime`, async (t) => {
    const { dir, clock, standin, url, duck, clockEnv } = await processRig(t, START, SPEED);
    const env = captureEnv(dir, url, clockEnv, {
      LOG_LEVEL: 'warn',
      CAPTURE_STREAM: venue,
      CAPTURE_VENUES: venue,
      ...coins,
      SPOOL_FLUSH_MS: String(FLUSH_MS),
    });
    const startCapture = captureProcesses(t, env);

    const first = startCapture();
    await runFor(3000, async () => (await spooled(dir)).keys.size > enough);
    first.kill('SIGKILL');
    const killedAt = clock.now();
    await exited(first);
    const before = await spooled(dir);
    const tradesBefore = await spooled(dir, 'trades');
    t.ok(before.keys.size > enough, `the first process spooled ${before.keys.size} books`);
    // A row is acknowledged once a flush has fsynced it, and the heartbeat written after each flush
    // counts them: none of those may be missing. What arrived after the last flush began may be lost;
    // how long that was depends on the flush interval and on how busy the machine is, so it is said.
    const beat = JSON.parse(await fs.readFile(`${lakePaths(dir).state}/capture-heartbeat.json`, 'utf8')) as {
      ts: number;
      acknowledged: number;
    };
    // A 5-minute market is over every 15 s here, so on a slow machine some rows are sealed already.
    const onDisk = (await spooled(dir, '*')).lines + (await sealed(dir)).rows;
    // On a starved machine the kill can land while the first flush with rows is in flight: its heartbeat
    // then counts none yet (the rows are still covered, by the downtime gap of the markets it names).
    t.ok(
      onDisk >= beat.acknowledged,
      `the ${beat.acknowledged} rows its last heartbeat counted as acknowledged are on disk (${onDisk} whole lines and sealed rows)`,
    );
    t.pass(
      `its last flush began ${((killedAt - beat.ts) / 1000).toFixed(1)} clock s before the kill; the newest acknowledged book arrived ${((killedAt - before.newest) / 1000).toFixed(1)} clock s before it (${SPEED}x, flushes every ${FLUSH_MS} ms)`,
    );

    if (staleHeartbeat) {
      const file = `${lakePaths(dir).state}/capture-heartbeat.json`;
      const held = JSON.parse(await fs.readFile(file, 'utf8')) as { open: { market_id: string }[] };
      const spooledMarkets = new Set([...before.keys].map((k) => k.split('|')[0]));
      const open = held.open.filter((m) => !spooledMarkets.has(m.market_id));
      t.ok(open.length < held.open.length, `${held.open.length - open.length} markets spooled left out of the heartbeat`);
      await fs.writeFile(file, JSON.stringify({ ...held, open }));
    }
    while (clock.now() < killedAt + downMs) await sleep(100);
    const restartedAt = clock.now();
    const second = startCapture();
    await runFor(3000, async () => (await spooled(dir)).keys.size > before.keys.size + enough / 2);
    second.kill('SIGTERM');
    t.equal(await exited(second), 0, 'a graceful stop exits 0');

    await sealAll(duck, dir);
    const lake = await readStreamLake(duck, dir);
    const keys = lake.rows.map((r) => `${r.market_id}|${r.token_id}|${r.ts}`);
    t.equal(new Set(keys).size, keys.length, 'no book row appears twice');
    t.same(
      [...before.keys].filter((k) => !keys.includes(k)),
      [],
      'every row the first process acknowledged is in the lake',
    );
    const down = lake.gaps.filter((g) => g.reason === 'process_down');
    t.ok(down.length > 0, 'the downtime is a gap');
    // What a restart costs past the downtime: from the second process's start to its market's first
    // proof (a snapshot, a push, or a poll of an unchanged book), in clock time. A process's start
    // (tsx compiling the sources) is part of it, and slower on a busy machine: said, not bounded.
    const cost = down
      .map((g) => g.t - restartedAt)
      .filter((c) => c > 0)
      .sort((a, b) => a - b);
    t.pass(
      cost.length
        ? `each market's downtime gap ends ${(cost[0] / 1000).toFixed(1)}-${(cost.at(-1)! / 1000).toFixed(1)} clock s after the restart (${SPEED}x; killed ${((restartedAt - killedAt) / 1000).toFixed(1)} clock s before)`
        : `every market spooled ended while no process ran (killed ${((restartedAt - killedAt) / 1000).toFixed(1)} clock s before the restart): its gap ends at its end`,
    );
    // Capture's default stall bound (5 s); a second of real time in flight at the stop.
    auditStream(t, {
      ...lake,
      sim: standin.sim,
      undelivered: venue === 'polymarket' ? standin.stream.undelivered : standin.walletStream.undelivered,
      subscribedAt: subscriptions(standin, venue),
      venue,
      stallMs: 5000,
      slackMs: 1000 * SPEED,
    });
    if (venue === 'polymarket') {
      const trades = await auditTrades(t, { ...lake, duck, dir, sim: standin.sim, slackMs: 1000 * SPEED });
      t.ok(
        tradesBefore.keys.size > 0 && trades.recorded > tradesBefore.keys.size,
        `${trades.recorded} trades, ${tradesBefore.keys.size} of them before the kill`,
      );
      const inLake = await duck.rows(`SELECT market_id, token_id, epoch_ms(ts)::DOUBLE AS ts FROM ${lakeTable(dir, 'trades')}`);
      const lakeKeys = new Set(inLake.map((r) => `${r.market_id}|${r.token_id}|${r.ts}`));
      t.same(
        [...tradesBefore.keys].filter((k) => !lakeKeys.has(k)),
        [],
        'every trade the first process acknowledged is in the lake',
      );
    }
  });
}
