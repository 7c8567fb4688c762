// Pages of markets still in the spool (recording, or over and not sealed yet) come from their
// books followed in memory (api/livebooks.ts): byte for byte the SQL path's pages, through real
// HTTP over a spool real capture wrote from the stand-in; what capture appends later (a restart's
// new parts included) is in the next page; and sealing the market serves the same bytes.
import t, { type Test } from 'tap';
import { startApi } from '../src/api/server.js';
import { fill } from '../src/capture/fill.js';
import { createClock } from '../src/clock.js';
import { Duck } from '../src/lake/duckdb.js';
import { planPartitions } from '../src/lake/layout.js';
import { StandInUpstream } from '../src/standin/upstream.js';
import { quiet, sealAll, testConfig, testdir } from './helpers.js';

// A 15-minute market open across both captures, 5-minute ones opening and ending in each.
const START = Date.parse('2026-07-28T12:14:00Z');
const MID = START + 7 * 60_000;
const END = MID + 7 * 60_000;
const ENV = { RATE_PAID_PER_SECOND: '100000' };

const dir = testdir(t);
const duck = await Duck.open(2);
const capture = (start: number, until: number) =>
  fill(testConfig(dir, ENV), duck, quiet, { hours: 0, speed: 400, pollMs: 3000, start, until }, new StandInUpstream({}));
await capture(START, MID);
// Markets are followed from their second page; BOOK_CACHE_MB=0 follows none (every page of them by SQL).
const api = await startApi(testConfig(dir, ENV), duck, createClock(END, 1), quiet, { port: 0 });
const sqlApi = await startApi(testConfig(dir, { ...ENV, BOOK_CACHE_MB: '0' }), duck, createClock(END, 1), quiet, { port: 0 });
t.teardown(async () => {
  await api.stop();
  await sqlApi.stop();
  await duck.close();
});
const key = (await api.keys.issue('paid', 'test')).key;

/** The response up to its `meta` (request id, time, gaps): `data` and `pagination` as sent. */
async function page(base: string, url: string): Promise<{ status: number; text: string; cursor: string | null }> {
  // A request that never finishes names itself rather than waiting for the file's timeout.
  const res = await fetch(`${base}${url}`, { headers: { authorization: `Bearer ${key}` }, signal: AbortSignal.timeout(120_000) }).catch(
    (err: unknown) => {
      throw new Error(`${base}${url}: ${String(err)}`);
    },
  );
  const text = await res.text();
  const body = JSON.parse(text) as { pagination?: { next_cursor: string | null } };
  const at = text.indexOf(',"meta":');
  return { status: res.status, text: at < 0 ? text : text.slice(0, at), cursor: body.pagination?.next_cursor ?? null };
}

const pages = async () =>
  ((await (await fetch(`${api.url}/v3/health`)).json()) as { data: { api: { pages: Record<string, number> } } }).data.api.pages;

const snapshotsPath = (m: { venue: string; coin: string; market_id: string }) =>
  m.venue === 'wallet-prediction' ? `/v3/wallet-prediction/${m.market_id}/snapshots` : `/v3/${m.coin}/markets/${m.market_id}/snapshots`;

/** Markets whose every book is in the spool, as the live path takes them. */
async function spooled(at: number) {
  const out = [];
  for (const m of api.lake.all(at)) {
    const parts = await api.lake.spoolOnly(planPartitions('books', m, null, null).partitions, m.market_id);
    if (parts?.length) out.push(m);
  }
  return out;
}

/** Every shape a client asks, the first three pages of each walk compared; twice on `api` so the second is followed. */
async function compareAll(t: Test, m: { venue: string; coin: string; market_id: string; outcomes: unknown[] }): Promise<number> {
  const base = snapshotsPath(m);
  const shapes = [
    '?limit=7',
    '?order=desc&limit=5',
    '?outcome=1&order=desc&limit=4',
    '?interval=15s&limit=6',
    '?interval=1m&order=desc&limit=3',
  ];
  // The per-coin route sends summaries by default.
  if (m.venue === 'polymarket') shapes.push('?include_orderbook=true&limit=9', '?include_orderbook=true&interval=15s&order=desc&limit=4');
  let compared = 0;
  for (const shape of shapes) {
    let url: string | null = `${base}${shape}`;
    for (let walked = 0; url && walked < 3; walked++) {
      const want = await page(sqlApi.url, url);
      t.equal(want.status, 200, url);
      for (let again = 0; again < 2; again++) {
        const got = await page(api.url, url);
        if (got.text !== want.text)
          t.fail(`${url} differs (${again ? 'followed' : 'first ask'})`, { got: got.text.slice(0, 300), want: want.text.slice(0, 300) });
        compared++;
      }
      url = want.cursor ? `${base}${shape}&cursor=${want.cursor}` : null;
    }
  }
  return compared;
}

t.test('every page of a market still in the spool equals the SQL path, byte for byte', async (t) => {
  const live = await spooled(MID);
  t.ok(new Set(live.map((m) => m.venue)).size === 2 && live.length >= 4, `${live.length} markets wholly in the spool, both venues`);
  let compared = 0;
  for (const m of live) compared += await compareAll(t, m);
  const health = await pages();
  t.ok(
    health.live_pages > 0 && health.live_markets > 0,
    `followed ${health.live_markets} markets, ${health.live_pages} pages of them (${compared} compared)`,
  );
});

t.test('what capture appends after a restart is in the next page; sealing serves the same bytes', async (t) => {
  const before = await spooled(MID);
  const followed = (await pages()).live_pages;
  // A new capture process: new spool parts beside the old, and rows appended to the markets still open.
  await capture(MID, END);
  const live = await spooled(END);
  const kept = live.filter((m) => before.some((b) => b.market_id === m.market_id));
  t.ok(live.length >= 4, `${live.length} markets wholly in the spool after the restart (${kept.length} of them followed before it)`);
  const whole = new Map<string, string>();
  for (const m of live) {
    await compareAll(t, m);
    const all = await page(api.url, `${snapshotsPath(m)}?limit=1000`);
    t.ok(all.status === 200 && all.cursor === null && all.text.length > 1000, `one page holds the market (${all.text.length} bytes)`);
    whole.set(m.market_id, all.text);
  }
  t.ok((await pages()).live_pages > followed, 'followed again after the restart');
  await sealAll(duck, dir);
  t.same(await spooled(END), [], 'every market sealed');
  for (const m of live) {
    const sealed = await page(api.url, `${snapshotsPath(m)}?limit=1000`);
    t.equal(sealed.text, whole.get(m.market_id), `${m.market_id}: sealed, the same bytes as followed in the spool`);
  }
});
