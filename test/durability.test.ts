// kill -9 of a real capture process in the middle of an hour, restart, seal: everything that
// reached the spool is in the lake exactly once, and the downtime is a recorded gap.
import fs from 'node:fs/promises';
import t from 'tap';
import { lakePaths } from '../src/lake/layout.js';
import { HOUR } from '../src/time.js';
import { listSpool } from '../src/lake/spool.js';
import { captureEnv, captureProcesses, processRig, exited, runFor, sleep, lakeTable, sealAll } from './helpers.js';

// A quarter of a minute of real time before 13:00 at 60x. The second process runs until its rows
// reach the hour after the first process's first row, however long that takes: beside stress-ng
// the first process once spooled its first row past 13:00.
const START = Date.parse('2026-07-26T12:45:00Z');
const SPEED = 60;
const { dir, url, duck, clockEnv } = await processRig(t, START, SPEED);

const env = captureEnv(dir, url, clockEnv, { LOG_LEVEL: 'warn' });

const startCapture = captureProcesses(t, env);

async function bookKeysInSpool(): Promise<Set<string>> {
  const keys = new Set<string>();
  for (const part of await listSpool(lakePaths(dir).spool)) {
    if (part.partition.dataset !== 'books') continue;
    // A running capture seals finished hours: a part listed a moment ago may be gone (into the lake).
    const text = await fs.readFile(part.file, 'utf8').catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT') return '';
      throw err;
    });
    for (const line of text.split('\n')) {
      try {
        const r = JSON.parse(line);
        keys.add(`${r.market_id}|${r.token_id}|${r.ts}`);
      } catch {
        // a half-written last line: never acknowledged
      }
    }
  }
  return keys;
}

t.test('kill -9 mid-hour loses nothing that reached the spool and duplicates nothing', async (t) => {
  const first = startCapture();
  await runFor(4000, async () => (await bookKeysInSpool()).size > 100);
  first.kill('SIGKILL');
  await exited(first);
  const beforeKill = await bookKeysInSpool();
  t.ok(beforeKill.size > 100, `the first process spooled ${beforeKill.size} books`);
  const firstTs = Math.min(...[...beforeKill].map((k) => Number(k.split('|')[2])));
  const boundary = Math.floor(firstTs / HOUR) * HOUR + HOUR;

  await sleep(1000); // the process is down for about a simulated minute
  const second = startCapture();
  await runFor(4000, async () => {
    // The first hour's parts leave the spool once sealed: counted by the next hour's rows, the second process's
    // (a starved first one may have run past the boundary before its kill).
    const keys = await bookKeysInSpool();
    return [...keys].filter((k) => !beforeKill.has(k) && Number(k.split('|')[2]) >= boundary).length > 50;
  });
  second.kill('SIGTERM');
  t.equal(await exited(second), 0, 'a graceful stop exits 0');

  await sealAll(duck, dir);
  const rows = await duck.rows(`SELECT market_id || '|' || token_id || '|' || epoch_ms(ts)::BIGINT AS k FROM ${lakeTable(dir, 'books')}`);
  const lake = new Set(rows.map((r) => String(r.k)));
  t.equal(lake.size, rows.length, 'no book row appears twice');
  const lost = [...beforeKill].filter((k) => !lake.has(k));
  t.same(lost, [], 'every row the first process spooled is in the lake');
  t.ok(lake.size > beforeKill.size, 'the restarted process kept capturing');

  const hours = await duck.rows(`SELECT DISTINCT hour FROM ${lakeTable(dir, 'books')} ORDER BY hour`);
  t.same(
    hours.map((h) => h.hour),
    [new Date(firstTs).getUTCHours(), new Date(boundary).getUTCHours()],
    'the run crossed an hour boundary',
  );

  const gaps = await duck.rows(
    `SELECT market_id, dataset, epoch_ms(from_ts)::BIGINT AS f, epoch_ms(to_ts)::BIGINT AS t FROM ${lakeTable(dir, 'gaps')} WHERE reason = 'process_down'`,
  );
  t.ok(gaps.length > 0, 'the downtime is recorded as gaps');
  for (const g of gaps.filter((x) => x.dataset === 'books')) {
    const inside = await duck.rows(
      `SELECT count(*) AS n FROM ${lakeTable(dir, 'books')} WHERE market_id = '${g.market_id}' AND epoch_ms(ts) > ${g.f} AND epoch_ms(ts) < ${g.t}`,
    );
    t.equal(Number(inside[0].n), 0, `nothing is recorded inside the gap of ${g.market_id}`);
  }
});
