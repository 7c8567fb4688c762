// The API through real HTTP, over a real lake written by the capture code from the stand-in.
import fs from 'node:fs/promises';
import path from 'node:path';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { Validator } from '@seriousme/openapi-schema-validator';
import t, { type Test } from 'tap';
import { startApi } from '../src/api/server.js';
import { createClock } from '../src/clock.js';
import { lakeTable, lakeServer } from './helpers.js';

// Across midnight, so market pages cross dates and hours.
const START = Date.parse('2026-07-27T23:40:00Z');
const END = START + 50 * 60_000;
const {
  dir,
  config,
  duck,
  api,
  key: issue,
} = await lakeServer(t, {
  start: START,
  end: END,
  env: { RATE_PAID_PER_SECOND: '100000', RATE_FREE_PER_SECOND: '2' },
  shareCapture: true,
});
const paid = await issue('paid');
const free = await issue('free');

interface Reply {
  status: number;
  headers: Headers;
  body: any;
}

async function get(pathAndQuery: string, key: string | null = paid, init: RequestInit = {}): Promise<Reply> {
  const res = await fetch(`${api.url}${pathAndQuery}`, {
    ...init,
    headers: { ...(key ? { authorization: `Bearer ${key}` } : {}), ...(init.headers ?? {}) },
  });
  const text = await res.text();
  let body: unknown = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = text;
  }
  return { status: res.status, headers: res.headers, body };
}

const doc = (await get('/v3/openapi.json', null)).body;
const ajv = new Ajv2020({ strict: false, allErrors: true });
ajv.addFormat('date-time', true);
ajv.addSchema({ $id: 'doc', components: doc.components });
function conforms(t: Test, reply: Reply, schema: string) {
  const validate = ajv.getSchema(`doc#/components/schemas/${schema}`)!;
  t.ok(validate(reply.body), `${schema}: ${JSON.stringify(validate.errors?.slice(0, 2))}`);
}

const wallet = api.lake.all(END).filter((m) => m.venue === 'wallet-prediction' && m.end_time <= END && m.start_time >= START);
const poly = api.lake.all(END).filter((m) => m.venue === 'polymarket' && m.end_time <= END && m.start_time >= START);
const m15 = wallet.find((m) => m.window === '15m' && m.coin === 'btc')!;
const p15 = poly.find((m) => m.window === '15m' && m.coin === 'eth')!;
const books = lakeTable(dir, 'books');
const withoutMeta = (b: any) => ({ ...b, meta: { ...b.meta, request_id: undefined, timestamp: undefined } });

t.test('the OpenAPI document is valid OpenAPI 3.1 and covers every route', async (t) => {
  const result = await new Validator().validate(doc);
  t.ok(result.valid, String(JSON.stringify(result.errors)).slice(0, 500));
  t.equal(doc.openapi, '3.1.0');
  for (const p of [
    '/v3/wallet-prediction/markets',
    '/v3/provider-alias/{market_id}/snapshots',
    '/v3/{coin}/markets/{market_id}/snapshots',
    '/v3/whoami',
    '/v3/health',
  ]) {
    t.ok(doc.paths[p], p);
  }
  // Public routes refuse unknown parameters as every route does, and say so.
  for (const p of ['/v3/health', '/v3/openapi.json']) {
    const r = await get(`${p}?nocache=1`, null);
    t.equal(r.status, 400, `${p} with an unknown parameter`);
    t.equal(r.body.error.code, 'INVALID_PARAMETER');
    t.ok(doc.paths[p].get.responses['400'], `${p}: its 400 is documented`);
  }
});

t.test('every route answers in both namespaces, and the alias equals the namespace', async (t) => {
  t.ok(m15 && p15, 'the lake has finished markets of both venues');
  const routes = [
    '/markets?coin=btc&limit=3',
    `/${m15.market_id}`,
    `/${m15.market_id}/orderbook/latest`,
    `/${m15.market_id}/snapshots?limit=3`,
    `/${m15.market_id}/timeseries?metric=price&limit=3`,
    `/${m15.market_id}/trades`,
  ];
  const schemas = [
    'ResponseMarketList',
    'ResponseMarketOne',
    'ResponseLatestBook',
    'ResponseSnapshotList',
    'ResponseSampleList',
    'ResponseTradeList',
  ];
  for (const [i, r] of routes.entries()) {
    const a = await get(`/v3/wallet-prediction${r}`);
    const b = await get(`/v3/provider-alias${r}`);
    t.equal(a.status, 200, r);
    t.same(withoutMeta(b.body), withoutMeta(a.body), `alias ${r}`);
    t.ok(a.headers.get('x-request-id'));
    conforms(t, a, schemas[i]);
  }
  // The wallet venue sends no trade events: its trades are the last-trade changes REST showed, labelled so.
  const trades = await get(`/v3/wallet-prediction/${m15.market_id}/trades?limit=1000`);
  t.ok(trades.body.data.length > 0, `${trades.body.data.length} last-trade changes of the market`);
  t.ok(
    trades.body.data.every((x: any) => x.source === 'rest_last_trade' && x.size === null && x.side === null && x.exchange_time === null),
    'each labelled rest_last_trade, with no size, side or venue time',
  );
  t.equal(trades.body.meta.notice, undefined, 'the reserved notice is gone');
  for (const [r, schema] of [
    [`/v3/eth/markets?limit=2`, 'ResponseMarketList'],
    [`/v3/eth/markets/${p15.market_id}`, 'ResponseMarketOne'],
    [`/v3/eth/markets/${p15.market_id}/snapshots?limit=2`, 'ResponseSnapshotList'],
    ['/v3/whoami', 'ResponseWhoAmI'],
  ] as const) {
    const reply = await get(r);
    t.equal(reply.status, 200, r);
    conforms(t, reply, schema);
  }
  const health = await get('/v3/health', null);
  t.equal(health.status, 200);
  conforms(t, health, 'ResponseHealth');
  t.equal((await get('/v3/openapi.json', null)).status, 200);
  const head = await fetch(`${api.url}/v3/wallet-prediction/markets`, { method: 'HEAD', headers: { authorization: `Bearer ${paid}` } });
  t.equal(head.status, 200, 'HEAD works');
});

t.test('snapshots: books as captured, ladders best first, summaries on the per-coin route', async (t) => {
  const r = await get(`/v3/eth/markets/${p15.market_id}/snapshots?limit=5&include_orderbook=true`);
  for (const s of r.body.data) {
    t.equal(s.books.length, 2);
    for (const b of s.books) {
      t.equal(b.bid_prices.length, b.bid_sizes.length);
      t.same(
        b.bid_prices,
        [...b.bid_prices].sort((x: number, y: number) => y - x),
      );
    }
  }
  const summary = await get(`/v3/eth/markets/${p15.market_id}/snapshots?limit=5`);
  const first = summary.body.data[0].books[0];
  t.same(Object.keys(first).sort(), [
    'ask_depth',
    'best_ask',
    'best_bid',
    'bid_depth',
    'exchange_time',
    'outcome',
    'outcome_index',
    'token_id',
  ]);
  t.equal(first.best_bid, r.body.data[0].books[0].bid_prices[0] ?? null);
  const up = await get(`/v3/wallet-prediction/${m15.market_id}/snapshots?limit=5&outcome=UP`);
  t.ok(
    up.body.data.every((s: any) => s.books.length === 1 && s.books[0].outcome_index === 0),
    'outcome by label, case-insensitive',
  );
});

async function walk(first: string, key = paid): Promise<{ stamps: string[]; pages: number }> {
  const stamps: string[] = [];
  let url: string | null = first;
  let pages = 0;
  while (url) {
    const r = await get(url, key);
    if (r.status !== 200) throw new Error(`${url}: ${JSON.stringify(r.body)}`);
    pages++;
    stamps.push(...r.body.data.map((x: any) => x.timestamp ?? `${x.start_time}|${x.market_id}`));
    url = r.body.pagination.has_more ? `${first}&cursor=${encodeURIComponent(r.body.pagination.next_cursor)}` : null;
  }
  return { stamps, pages };
}

t.test('cursor walks return exactly the lake’s records, once each, in order', async (t) => {
  // How many captures a market got depends on the machine's speed at 400x: page by a quarter of them.
  const direct = await duck.rows(
    `SELECT DISTINCT epoch_ms(ts)::DOUBLE AS ts FROM ${books} WHERE market_id = '${m15.market_id}' ORDER BY ts`,
  );
  const expected = direct.map((r) => new Date(Number(r.ts)).toISOString());
  t.ok(expected.length >= 8, `${expected.length} captures`);
  const limit = Math.ceil(expected.length / 4);
  const asc = await walk(`/v3/wallet-prediction/${m15.market_id}/snapshots?limit=${limit}`);
  t.same(asc.stamps, expected);
  t.ok(asc.pages > 2);
  const desc = await walk(`/v3/provider-alias/${m15.market_id}/snapshots?limit=${limit - 1}&order=desc`);
  t.same(desc.stamps, [...expected].reverse());
  const bucketed = await duck.rows(
    `SELECT max(epoch_ms(ts))::DOUBLE AS ts FROM ${books} WHERE market_id = '${m15.market_id}' GROUP BY floor(epoch_ms(ts) / 60000) ORDER BY ts`,
  );
  const byMinute = await walk(`/v3/wallet-prediction/${m15.market_id}/snapshots?limit=4&interval=1m`);
  t.same(
    byMinute.stamps,
    bucketed.map((r) => new Date(Number(r.ts)).toISOString()),
    'interval: the last record in each minute',
  );
  const metrics = await duck.rows(
    `SELECT epoch_ms(ts)::DOUBLE AS ts FROM ${lakeTable(dir, 'metrics')} WHERE market_id = '${m15.market_id}' AND outcome_index = 1 AND chance IS NOT NULL ORDER BY ts`,
  );
  const series = await walk(`/v3/wallet-prediction/${m15.market_id}/timeseries?metric=chance&outcome=1&limit=9`);
  t.same(
    series.stamps,
    metrics.map((r) => new Date(Number(r.ts)).toISOString()),
  );
  // Downsampled and descending: each minute's newest sample, values included.
  const minutes = await duck.rows(`SELECT max(epoch_ms(ts))::DOUBLE AS ts, arg_max(price, ts) AS v FROM ${lakeTable(dir, 'metrics')}
    WHERE market_id = '${m15.market_id}' AND outcome_index = 0 AND price IS NOT NULL GROUP BY floor(epoch_ms(ts) / 60000) ORDER BY ts DESC`);
  const samples: [string, number][] = [];
  for (let url: string | null = `/v3/wallet-prediction/${m15.market_id}/timeseries?metric=price&interval=1m&order=desc&limit=2`; url;) {
    const r = await get(url);
    samples.push(...r.body.data.map((x: { timestamp: string; value: number }) => [x.timestamp, x.value] as [string, number]));
    url = r.body.pagination.next_cursor
      ? `/v3/wallet-prediction/${m15.market_id}/timeseries?metric=price&interval=1m&order=desc&limit=2&cursor=${encodeURIComponent(r.body.pagination.next_cursor)}`
      : null;
  }
  t.same(
    samples,
    minutes.map((r) => [new Date(Number(r.ts)).toISOString(), Number(r.v)]),
    'interval, descending: every minute once, newest sample',
  );
  const minutesDesc = await walk(`/v3/wallet-prediction/${m15.market_id}/snapshots?limit=3&interval=1m&order=desc`);
  t.same(minutesDesc.stamps, bucketed.map((r) => new Date(Number(r.ts)).toISOString()).reverse(), 'snapshots by minute, descending');
  // Markets across midnight: both dates, paged.
  const all = api.lake.all(END).filter((m) => m.venue === 'wallet-prediction');
  const listed = await walk(`/v3/wallet-prediction/markets?limit=11&order=asc&start_time=${START}&end_time=${END}`);
  const want = all
    .filter((m) => m.end_time > START && m.start_time < END)
    .reverse()
    .map((m) => `${new Date(m.start_time).toISOString()}|${m.market_id}`);
  t.same(listed.stamps, want);
  t.ok(new Set(listed.stamps.map((s) => s.slice(0, 10))).size >= 2, 'the walk crossed a date');
});

t.test('cursors are refused when tampered, foreign or used with other filters', async (t) => {
  const first = await get(`/v3/wallet-prediction/${m15.market_id}/snapshots?limit=2`);
  const cursor: string = first.body.pagination.next_cursor;
  const [body, mac] = cursor.split('.');
  const other = wallet.find((m) => m.market_id !== m15.market_id)!;
  const cases = [
    `/v3/wallet-prediction/${m15.market_id}/snapshots?limit=2&cursor=${body}.${mac.replace(/^./, (c) => (c === 'A' ? 'B' : 'A'))}`,
    `/v3/wallet-prediction/${m15.market_id}/snapshots?limit=2&cursor=${Buffer.from('{"s":"x","f":"y","k":[0]}').toString('base64url')}.${mac}`,
    `/v3/wallet-prediction/${other.market_id}/snapshots?limit=2&cursor=${cursor}`,
    `/v3/wallet-prediction/${m15.market_id}/snapshots?limit=2&interval=1m&cursor=${cursor}`,
    `/v3/wallet-prediction/${m15.market_id}/snapshots?limit=2&order=desc&cursor=${cursor}`,
    `/v3/wallet-prediction/${m15.market_id}/timeseries?metric=chance&cursor=${cursor}`,
    `/v3/wallet-prediction/${m15.market_id}/trades?cursor=${cursor}`,
    `/v3/wallet-prediction/${m15.market_id}/snapshots?cursor=garbage`,
  ];
  for (const c of cases) {
    const r = await get(c);
    t.equal(r.status, 400, c);
    t.equal(r.body.error.code, 'INVALID_CURSOR', c);
  }
  const sameFilters = await get(`/v3/provider-alias/${m15.market_id}/snapshots?limit=50&cursor=${cursor}`);
  t.equal(sameFilters.status, 200, 'the alias and another limit accept the same cursor');
});

t.test('auth, plans and rate limits', async (t) => {
  const missing = await get('/v3/whoami', null);
  t.match(missing, { status: 401, body: { error: { code: 'AUTH_MISSING' } } });
  t.match(await get('/v3/whoami', null, { headers: { authorization: 'Basic abc' } }), {
    status: 401,
    body: { error: { code: 'AUTH_MISSING' } },
  });
  t.match(
    await get(`/v3/whoami?api_key=${paid}`, null),
    { status: 401, body: { error: { code: 'AUTH_MISSING' } } },
    'no keys in the query string',
  );
  t.match(await get('/v3/whoami', 'pmh_short'), { status: 401, body: { error: { code: 'AUTH_INVALID' } } });
  t.match(await get('/v3/whoami', `pmh_${'A'.repeat(32)}`), { status: 401, body: { error: { code: 'AUTH_INVALID' } } });
  const doomed = await api.keys.issue('paid', 'to revoke');
  t.equal((await get('/v3/whoami', doomed.key)).status, 200);
  await api.keys.revoke(doomed.record.key_id);
  await new Promise((r) => setTimeout(r, 1100)); // the store re-reads its file at most once a second
  t.match(await get('/v3/whoami', doomed.key), { status: 401, body: { error: { code: 'AUTH_INVALID' } } });
  const stored = await fs.readFile(path.join(dir, 'state/keys.json'), 'utf8');
  t.notOk(stored.includes(paid) || stored.includes(doomed.key), 'only hashes are stored');

  const who = await get('/v3/whoami');
  t.match(who.body.data, { plan: 'paid', rate_limit: { per_second: 100000 } });
  await new Promise((r) => setTimeout(r, 1100));
  const limited = (await api.keys.issue('free', 'limited')).key;
  const replies = [];
  for (let i = 0; i < 4; i++) replies.push(await get('/v3/eth/markets?limit=1', limited));
  t.equal(replies[0].status, 200);
  t.equal(replies[0].headers.get('x-ratelimit-limit'), '2');
  t.equal(replies[0].headers.get('x-ratelimit-remaining'), '1');
  const over = replies.find((r) => r.status === 429)!;
  t.ok(over, 'the free rate of 2/s runs out');
  t.equal(over.body.error.code, 'RATE_LIMITED');
  t.ok(Number(over.headers.get('retry-after')) >= 1);
  t.equal(over.headers.get('x-ratelimit-remaining'), '0');
  t.ok(Number(over.headers.get('x-ratelimit-reset')) >= 1);
  const plan = await get('/v3/provider-alias/markets', free);
  t.match(plan, { status: 403, body: { error: { code: 'PLAN_REQUIRED' } } });
});

t.test('every error code of the contract from a real request', async (t) => {
  const codes: Record<string, [string, number]> = {
    INVALID_PARAMETER: ['/v3/wallet-prediction/markets?window=7m', 400],
    INVALID_CURSOR: ['/v3/wallet-prediction/markets?cursor=abc', 400],
    INVALID_RANGE: [`/v3/wallet-prediction/markets?start_time=${END}&end_time=${START}`, 400],
    NOT_FOUND: ['/v3/nowhere', 404],
    MARKET_NOT_FOUND: ['/v3/wallet-prediction/999999999/snapshots', 404],
  };
  for (const [code, [url, status]] of Object.entries(codes)) {
    const r = await get(url);
    t.equal(r.status, status, code);
    t.equal(r.body.error.code, code);
    t.ok(r.body.meta.request_id, 'errors carry meta');
    conforms(t, r, 'Error');
  }
  const msg = (await get('/v3/wallet-prediction/markets?window=7m')).body.error.message;
  t.equal(msg, 'Invalid "window": "7m". Expected one of: 5m, 15m');
  t.match(
    await get('/v3/doge/markets'),
    { status: 404, body: { error: { code: 'NOT_FOUND' } } },
    'an unknown coin is 404 NOT_FOUND (CONTRACT.md), before any query',
  );
  const post = await get('/v3/whoami', paid, { method: 'POST' });
  t.match(post, { status: 405, body: { error: { code: 'METHOD_NOT_ALLOWED' } } });
  t.equal(post.headers.get('allow'), 'GET, HEAD');
  const kept = await get('/v3/whoami', paid, { headers: { 'x-request-id': 'my-trace-123' } });
  t.equal(kept.headers.get('x-request-id'), 'my-trace-123');
  t.equal(kept.body.meta.request_id, 'my-trace-123');
});

t.test('a lake file that cannot be read is 503 UNAVAILABLE, saying nothing internal', async (t) => {
  const market = wallet.find((m) => m.window === '5m')!;
  const files = await api.lake.files(
    [
      {
        dataset: 'books',
        venue: market.venue,
        coin: market.coin,
        window: market.window,
        hour: Math.floor(market.start_time / 3_600_000) * 3_600_000,
      },
    ],
    market.market_id,
  );
  // A file that holds the market's rows: its changes are read from it alone (its snapshot pages
  // come from the serving copy written when it was sealed, and read no Parquet).
  const victim = files.sealed[0];
  const saved = await fs.readFile(victim);
  await fs.writeFile(victim, 'not parquet');
  const r = await get(`/v3/wallet-prediction/${market.market_id}/orderbook/changes?limit=1`);
  const copied = await get(`/v3/wallet-prediction/${market.market_id}/snapshots?limit=1`);
  await fs.writeFile(victim, saved);
  t.equal(copied.status, 200, 'a page from its serving copy still served');
  t.equal(r.status, 503, JSON.stringify(r.body));
  t.equal(r.body.error.code, 'UNAVAILABLE');
  t.notMatch(r.body.error.message, /parquet|\/tmp|duckdb/i);
});

t.test('at least 100 bad inputs get 4xx, never 5xx', async (t) => {
  const id = m15.market_id;
  const values = [
    '',
    ' ',
    '-1',
    '0',
    '1001',
    '99999999999999999999',
    '1e3',
    '0x10',
    '1.5',
    'NaN',
    'null',
    'true',
    '[]',
    '{}',
    "' OR 1=1 --",
    '1; DROP TABLE books',
    '%00',
    '../../etc/passwd',
    '..%2F..%2Fetc',
    'ü',
    '🙂',
    'a'.repeat(3000),
    '\u0000',
    '2026-13-45',
    'yesterday',
  ];
  const params = [
    'limit',
    'cursor',
    'start_time',
    'end_time',
    'interval',
    'order',
    'outcome',
    'metric',
    'window',
    'coin',
    'status',
    'bogus',
  ];
  const urls: string[] = [];
  for (const p of params)
    for (const v of values) urls.push(`/v3/wallet-prediction/${id}/timeseries?metric=chance&${p}=${encodeURIComponent(v)}`);
  for (const v of values) urls.push(`/v3/wallet-prediction/${encodeURIComponent(v)}/snapshots`);
  for (const v of values) urls.push(`/v3/${encodeURIComponent(v)}/markets`);
  urls.push(
    '/v3/wallet-prediction/..%2F..%2Fetc%2Fpasswd/snapshots',
    `/v3/wallet-prediction/${id}/snapshots?limit=1&limit=2`,
    `/v3/wallet-prediction/%E0%A4%A/snapshots`,
  );
  t.ok(urls.length >= 100);
  // The only generated inputs that are valid: outcome 0, and epoch-ms times of 0 or 1001.
  const valid = new Set(['outcome=0', 'start_time=0', 'start_time=1001', 'end_time=0', 'end_time=1001']);
  const wrong: string[] = [];
  for (const u of urls) {
    const r = await get(u);
    const query = u.split('metric=chance&')[1];
    const ok = query !== undefined && valid.has(query);
    if (ok ? r.status !== 200 : r.status < 400 || r.status >= 500) wrong.push(`${r.status} ${u.slice(0, 100)}`);
    if (!ok && r.status >= 400) t.ok(r.body?.error?.message, 'a message says what was wrong');
  }
  t.same(wrong, [], 'bad input is 4xx (never 5xx); the valid few are 200');
});

/** A second API over the same lake, with no capture memory, whose log lines are kept. */
async function loggedApi(t: Test, now = END) {
  const lines: any[] = [];
  const { default: pino } = await import('pino');
  const log = pino({ level: 'info' }, { write: (line: string) => lines.push(JSON.parse(line)) });
  const server = await startApi(config, duck, createClock(now, 1), log, { latest: new Map(), port: 0 });
  t.teardown(() => server.stop());
  return { server, lines };
}

t.test('a restarted process has the latest books in memory: preloaded when recent, else read once', async (t) => {
  const { server: cold, lines } = await loggedApi(t);
  // This process started from the catalogue checkpoint the first one wrote: the same catalogue.
  await fs.access(path.join(dir, 'state/catalogue.ndjson'));
  t.same(cold.lake.all(END), api.lake.all(END), 'the checkpointed catalogue equals the one read from the lake');
  t.same(cold.lake.sealedFiles(), api.lake.sealedFiles(), 'the checkpointed index equals the walked one');
  t.match(
    lines.find((l) => l.msg === 'lake loaded'),
    { index: 'checkpoint' },
  );
  t.ok(lines.find((l) => l.msg === 'latest books loaded').preloaded >= wallet.length, 'every recent market preloaded');
  const fromMemory = (await get(`/v3/wallet-prediction/${m15.market_id}/orderbook/latest`)).body;
  const ask = (server: typeof cold, id: string) =>
    fetch(`${server.url}/v3/wallet-prediction/${m15.market_id}/orderbook/latest`, {
      headers: { authorization: `Bearer ${paid}`, 'x-request-id': id },
    });
  const preloaded = await (await ask(cold, 'cold-1')).json();
  t.same(preloaded.data, fromMemory.data, 'the book capture holds');
  t.match(
    lines.find((l) => l.req_id === 'cold-1'),
    { msg: 'request finished', status: 200, partitions: 0, rows: 2 },
  );
  // Hours later nothing is preloaded: the first request reads the newest hour, the next is memory.
  const { server: later, lines: laterLines } = await loggedApi(t, END + 4 * 3_600_000);
  t.match(
    laterLines.find((l) => l.msg === 'latest books loaded'),
    { preloaded: 0 },
  );
  const read = await ask(later, 'later-1');
  t.equal(read.status, 200);
  t.same((await read.json()).data, fromMemory.data);
  await ask(later, 'later-2');
  const first = laterLines.find((l) => l.req_id === 'later-1');
  t.match(first, { msg: 'request finished', route: 'wallet-prediction.orderbook', status: 200, partitions: 1, rows: 2 });
  t.type(first.ms, 'number');
  t.match(
    laterLines.find((l) => l.req_id === 'later-2'),
    { partitions: 0, rows: 2 },
    'kept after one read',
  );
  t.notOk(JSON.stringify([...lines, ...laterLines]).includes(paid), 'the key never reaches the log');
});

t.test('a range reaching before coverage returns what exists and says where history starts', async (t) => {
  const r = await get('/v3/wallet-prediction/markets?coin=eth&start_time=2026-01-01&end_time=2026-07-01');
  t.equal(r.status, 200);
  t.same(r.body.data, [], 'nothing is manufactured');
  t.match(r.body.meta.coverage, { dataset: 'markets', starts: '2026-06-29T00:00:00.000Z', truncated: true });
  const s = await get(`/v3/wallet-prediction/${m15.market_id}/snapshots?start_time=2026-01-01&limit=1`);
  t.match(s.body.meta.coverage, { dataset: 'books', truncated: true });
  t.equal(s.body.data.length, 1);
});

t.test('an internal fault is a 500 that says nothing internal and is logged once with the request id', async (t) => {
  const { server: other, lines } = await loggedApi(t);
  const file = path.join(dir, 'state/keys.json');
  const saved = await fs.readFile(file, 'utf8');
  await fs.writeFile(file, '{ not json');
  const res = await fetch(`${other.url}/v3/whoami`, { headers: { authorization: `Bearer ${paid}`, 'x-request-id': 'boom-1' } });
  const body = await res.json();
  await fs.writeFile(file, saved);
  t.equal(res.status, 500);
  t.same(body.error, { code: 'INTERNAL_ERROR', message: 'Internal error; the request id identifies it in our logs', details: [] });
  t.equal(body.meta.request_id, 'boom-1');
  const failures = lines.filter((l) => l.req_id === 'boom-1' && l.msg === 'request failed');
  t.equal(failures.length, 1, 'logged once');
  t.ok(failures[0].err, 'with the error');
});
