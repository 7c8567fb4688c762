// Exports can never stall the service: sixteen at once (some read at 1 KB/s, some abandoned)
// against a real API process on libuv's default threadpool, while latest books and snapshot
// pages keep answering. Every temporary file is gone afterwards, a kill -9 mid-export leaves
// nothing behind after a restart, and a cut-short export is logged through pino only.
import fs from 'node:fs/promises';
import http from 'node:http';
import path from 'node:path';
import t, { type Test } from 'tap';
import { KeyStore } from '../src/edge/keys.js';
import { Duck } from '../src/lake/duckdb.js';
import { syntheticMarket } from '../src/lake/synthetic.js';
import { HOUR } from '../src/time.js';
import { type ApiProcess, killProcess, startApiProcess, testdir } from './helpers.js';

// Markets far longer than real ones, so an export is megabytes and takes real time to read.
const START = Date.parse('2026-07-26T12:00:00Z');
const END = START + 2 * HOUR;
const dir = testdir(t);
const duck = await Duck.open(1);
const IDS = ['99000001', '99000002', '99000003'];
for (const id of IDS) await syntheticMarket(duck, dir, id, START, END - START);
await duck.close();
const key = (await KeyStore.at(dir).issue('paid', 'exports test')).key;
const exportDir = path.join(dir, 'state', 'exports');

type Server = ApiProcess;

function startServer(t: Test): Promise<Server> {
  // A small threadpool (four pipe-based exports used to exhaust libuv's default four) with
  // four export slots: slow readers hold slots, never threads. One page request at a time and
  // none waiting: a page that had to wait behind an export (exports once took the pages'
  // admission until their first bytes) is refused, however fast the machine.
  return startApiProcess(
    t,
    dir,
    {
      CLOCK_START: String(END + HOUR),
      CLOCK_SPEED: '1',
      RATE_PAID_PER_SECOND: '100000',
      UV_THREADPOOL_SIZE: '8',
      EXPORT_SLOTS: '4',
      API_MAX_INFLIGHT: '1',
      API_QUEUE: '0',
    },
    'kill',
  );
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** GET with a deadline: a request that never answers fails the test instead of hanging it. */
async function get(url: string, deadlineMs = 20_000): Promise<{ status: number; headers: Headers; text: string }> {
  const res = await fetch(url, { headers: { authorization: `Bearer ${key}` }, signal: AbortSignal.timeout(deadlineMs) });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

type Reader = 'fast' | 'slow' | 'abandon-early' | 'abandon-late';

/** An export read as `how` says; resolves with the status and the bytes read. */
function exportRequest(
  url: string,
  how: Reader,
  requestId?: string,
): Promise<{ status: number; bytes: number; retryAfter: string | null }> {
  return new Promise((resolve, reject) => {
    const headers = { authorization: `Bearer ${key}`, ...(requestId ? { 'x-request-id': requestId } : {}) };
    const req = http.get(url, { headers }, (res) => {
      let bytes = 0;
      const status = res.statusCode!;
      const retryAfter = (res.headers['retry-after'] as string | undefined) ?? null;
      if (how === 'abandon-early' || (how === 'abandon-late' && status === 200)) {
        res.once('data', (d: Buffer) => {
          bytes += d.length;
          req.destroy();
          resolve({ status, bytes, retryAfter });
        });
        res.once('end', () => resolve({ status, bytes, retryAfter }));
        return;
      }
      if (how === 'slow' && status === 200) {
        // 1 KB a second for a few seconds, then abandoned: a client that never finishes.
        res.pause();
        let ticks = 0;
        const timer = setInterval(() => {
          const chunk = res.read(1024) as Buffer | null;
          if (chunk) bytes += chunk.length;
          if (++ticks === 5) {
            clearInterval(timer);
            req.destroy();
            resolve({ status, bytes, retryAfter });
          }
        }, 1000);
        res.once('end', () => {
          clearInterval(timer);
          resolve({ status, bytes, retryAfter });
        });
        return;
      }
      res.on('data', (d: Buffer) => {
        bytes += d.length;
      });
      res.once('end', () => resolve({ status, bytes, retryAfter }));
    });
    req.once('error', (err) => (req.destroyed ? undefined : reject(err)));
  });
}

const server = await startServer(t);
const done = IDS.map((market_id) => ({ market_id }));

t.test('sixteen concurrent exports never block pages, latest books, or each other', async (t) => {
  const how: Reader[] = [
    'slow',
    'slow',
    'slow',
    'slow',
    'abandon-early',
    'abandon-early',
    'abandon-late',
    'abandon-late',
    'fast',
    'fast',
    'fast',
    'fast',
    'fast',
    'fast',
    'slow',
    'abandon-early',
  ];
  const exports = how.map((h, i) => {
    const m = done[i % done.length];
    const format = i % 2 ? 'csv' : 'parquet';
    return exportRequest(`${server.url}/v3/wallet-prediction/${m.market_id}/snapshots?format=${format}`, h);
  });
  // While they run: pages and latest books answer, one after another.
  const unanswered: string[] = [];
  for (let i = 0; i < 20; i++) {
    const m = done[i % done.length];
    const page = await get(`${server.url}/v3/wallet-prediction/${m.market_id}/snapshots?limit=20`);
    const latest = await get(`${server.url}/v3/wallet-prediction/${m.market_id}/orderbook/latest`);
    for (const r of [page, latest]) if (r.status !== 200) unanswered.push(`${r.status} ${r.text.slice(0, 300)}`);
  }
  t.same(unanswered, [], 'every page and latest book answered while the exports ran');
  const results = await Promise.all(exports);
  const statuses = results.map((r) => r.status);
  t.ok(
    statuses.every((s) => s === 200 || s === 503),
    `every export was served or refused: ${statuses.join(',')}`,
  );
  t.ok(statuses.includes(200), 'some exports ran');
  const refused = results.filter((r) => r.status === 503);
  t.ok(
    refused.every((r) => r.retryAfter !== null),
    'a refused export says when to retry',
  );

  // Abandoned and slow exports are cleaned up: no temporary file remains, every slot is free.
  let left: string[] = [];
  let health: { api: { exports: { in_use: number } } } | null = null;
  for (let i = 0; i < 100; i++) {
    left = await fs.readdir(exportDir).catch(() => []);
    health = JSON.parse((await get(`${server.url}/v3/health`)).text).data;
    if (left.length === 0 && health!.api.exports.in_use === 0) break;
    await sleep(200);
  }
  t.same(left, [], 'no export file is left behind');
  t.equal(health!.api.exports.in_use, 0, 'every export slot is free again');

  // And the next export works.
  const again = await get(`${server.url}/v3/wallet-prediction/${done[0].market_id}/snapshots?format=csv`);
  t.equal(again.status, 200);
  t.equal(
    again.text.trimEnd().split('\n').length,
    1 + (2 * (END - START)) / 1000,
    'a whole CSV export after the storm: a header and every book',
  );
});

// Which of the storm's exports win the four slots is up to timing, so the two fates that
// matter most are also checked one at a time, where nothing else competes for a slot.
t.test('alone: a fast reader gets the whole export, an abandoned one is cut short and logged as such', async (t) => {
  const url = `${server.url}/v3/wallet-prediction/${done[2].market_id}/snapshots?format=csv`;
  const fast = await exportRequest(url, 'fast');
  t.equal(fast.status, 200);
  t.ok(fast.bytes > 1_000_000, `a fast reader got the whole export: ${fast.bytes} bytes`);
  const abandoned = await exportRequest(url, 'abandon-early', 'abandoned-export-1');
  t.equal(abandoned.status, 200);
  t.ok(abandoned.bytes < fast.bytes, `the abandoning client read ${abandoned.bytes} of ${fast.bytes} bytes`);
  let line: Record<string, unknown> | undefined;
  for (let i = 0; i < 100 && !line; i++) {
    line = server.lines.find((l) => l.msg === 'request finished' && l.req_id === 'abandoned-export-1');
    if (!line) await sleep(100);
  }
  t.equal(line?.aborted, true, 'its request line says aborted');
});

t.test('export log lines come through pino with their row counts; nothing raw on stderr', async (t) => {
  const exportLines = server.lines.filter(
    (l) => l.msg === 'request finished' && String(l.route).endsWith('.snapshots') && l.status === 200 && l.partitions !== undefined,
  );
  const completed = exportLines.filter((l) => !l.aborted && (l.rows as number) > 0);
  t.ok(completed.length > 0, `${completed.length} completed exports logged with their rows`);
  t.equal(server.stderr.join('').trim(), '', 'nothing was written outside pino');
});

t.test('kill -9 in the middle of an export: the restart removes what it left', async (t) => {
  const pending = exportRequest(`${server.url}/v3/wallet-prediction/${done[1].market_id}/snapshots?format=csv`, 'slow');
  await sleep(1500);
  await killProcess(server.child);
  await pending.catch(() => undefined);
  const restarted = await startServer(t);
  t.same(await fs.readdir(exportDir).catch(() => []), [], 'the export directory is empty after the restart');
  t.equal(
    (await get(`${restarted.url}/v3/wallet-prediction/${done[1].market_id}/snapshots?format=csv`)).status,
    200,
    'exports work after the restart',
  );
});

t.test('two stalled readers do not hold the export slots: each is cut off below the minimum rate', async (t) => {
  // Two slots, a 64 KiB/s floor judged over each second, and no idle-socket bound to do the work instead.
  const strict = await startApiProcess(
    t,
    dir,
    {
      CLOCK_START: String(END + HOUR),
      CLOCK_SPEED: '1',
      RATE_PAID_PER_SECOND: '100000',
      UV_THREADPOOL_SIZE: '8',
      // One process, so health counts the exports it served.
      API_WORKERS: '1',
      EXPORT_SLOTS: '2',
      EXPORT_MIN_BYTES_PER_SECOND: '65536',
      EXPORT_SLOW_MS: '1000',
      API_IDLE_MS: '600000',
    },
    'kill',
  );
  const url = (id: string) => `${strict.url}/v3/wallet-prediction/${id}/snapshots?format=csv`;
  // Readers that take the headers, then nothing: their sockets stay open.
  const stalled = IDS.slice(0, 2).map(
    (id) =>
      new Promise<{ status: number; bytes: number; complete: boolean }>((resolve) => {
        const req = http.get(url(id), { headers: { authorization: `Bearer ${key}` } }, (res) => {
          res.pause();
          let bytes = 0;
          // Read nothing for 5 s, then drain what the server sent before it cut the export off.
          setTimeout(() => {
            res.on('data', (d: Buffer) => (bytes += d.length));
            res.resume();
          }, 5000);
          res.once('end', () => resolve({ status: res.statusCode!, bytes, complete: res.complete }));
          res.once('error', () => resolve({ status: res.statusCode!, bytes, complete: false }));
          res.once('aborted', () => resolve({ status: res.statusCode!, bytes, complete: false }));
        });
        req.once('error', () => undefined);
      }),
  );
  const health = async () => (await get(`${strict.url}/v3/health`)).text;
  let exports: { in_use: number; slow_readers_cut: number } = { in_use: -1, slow_readers_cut: 0 };
  const waited = Date.now();
  while (exports.slow_readers_cut < 2 && Date.now() - waited < 30_000) {
    await sleep(250);
    exports = JSON.parse(await health()).data.api.exports;
  }
  t.equal(
    exports.slow_readers_cut,
    2,
    `both stalled exports were cut off, ${((Date.now() - waited) / 1000).toFixed(1)} s after they began`,
  );
  t.equal(exports.in_use, 0, 'and their slots are free');
  const third = await exportRequest(url(IDS[2]), 'fast');
  t.equal(third.status, 200, 'a third client gets its export');
  for (const r of await Promise.all(stalled)) {
    t.equal(r.status, 200);
    t.notOk(r.complete, `a stalled reader's transfer ends incomplete (${r.bytes} of ${third.bytes} bytes), never as if whole`);
  }
  t.ok(
    strict.lines.some((l) => l.msg === 'export cut off: its reader was too slow' && l.level === 40),
    'each is logged once at warn',
  );
});
