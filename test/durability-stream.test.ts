// kill -9 of a capture process recording the market channel: every change it acknowledged is
// in the lake exactly once, at most the last flush of changes is lost, and the time it was down
// is a gap, so the audit against the stand-in's book model finds nothing missing without one.
import fs from 'node:fs/promises';
import t from 'tap';
import { lakePaths } from '../src/lake/layout.js';
import { listSpool } from '../src/lake/spool.js';
import { captureEnv, captureProcesses, processRig, exited, runFor, sleep, sealAll } from './helpers.js';
import { auditStream, readStreamLake, subscriptions } from './streamaudit.js';

const START = Date.parse('2026-07-26T12:01:01Z');
const SPEED = 20;
const FLUSH_MS = 200;
const { dir, clock, standin, url, duck, clockEnv } = await processRig(t, START, SPEED);

const env = captureEnv(dir, url, clockEnv, {
  LOG_LEVEL: 'warn',
  CAPTURE_STREAM: 'polymarket',
  CAPTURE_VENUES: 'polymarket',
  POLYMARKET_COINS: 'btc,eth',
  SPOOL_FLUSH_MS: String(FLUSH_MS),
});

const startCapture = captureProcesses(t, env);

/** Book rows the spool holds (whole lines only: a half-written last line was never acknowledged). */
async function spooled(): Promise<{ keys: Set<string>; newest: number }> {
  const keys = new Set<string>();
  let newest = -Infinity;
  for (const part of await listSpool(lakePaths(dir).spool)) {
    if (part.partition.dataset !== 'books') continue;
    const text = await fs.readFile(part.file, 'utf8').catch(() => '');
    for (const line of text.split('\n')) {
      try {
        const r = JSON.parse(line);
        keys.add(`${r.market_id}|${r.token_id}|${r.ts}`);
        newest = Math.max(newest, Number(r.recv_ts));
      } catch {
        // a partial line
      }
    }
  }
  return { keys, newest };
}

t.test('kill -9 mid-stream loses at most the last flush and leaves a gap for the downtime', async (t) => {
  const first = startCapture();
  await runFor(3000, async () => (await spooled()).keys.size > 500);
  first.kill('SIGKILL');
  const killedAt = clock.now();
  await exited(first);
  const before = await spooled();
  t.ok(before.keys.size > 500, `the first process spooled ${before.keys.size} books`);
  // Rows are acknowledged when a flush fsyncs them: what arrived in the last flush interval may be lost, nothing older.
  const lostMs = killedAt - before.newest;
  t.ok(
    lostMs <= 1000 * SPEED,
    `the newest acknowledged book arrived ${lostMs} clock ms (${(lostMs / SPEED).toFixed(0)} real ms) before the kill`,
  );

  await sleep(700);
  const second = startCapture();
  await runFor(3000, async () => (await spooled()).keys.size > before.keys.size + 300);
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
  t.ok(
    lake.gaps.some((g) => g.reason === 'process_down'),
    'the downtime is a gap',
  );
  // Capture's default stall bound (5 s); a second of real time in flight at the stop.
  auditStream(t, {
    ...lake,
    sim: standin.sim,
    undelivered: standin.stream.undelivered,
    subscribedAt: subscriptions(standin, 'polymarket'),
    stallMs: 5000,
    slackMs: 1000 * SPEED,
  });
});
