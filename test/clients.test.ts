// The tools users already have, against the real server over a lake written by capture:
// a TypeScript client generated from the live OpenAPI document (openapi-typescript +
// openapi-fetch, typechecked with tsc, then run), the repository's Python client run by the
// machine's python3, browsers (CORS, the API reference page), and list parameters sent the
// way generators send them.
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import t from 'tap';
import { CHILD_ENV, TS_NODE_ARGS, lakeServer } from './helpers.js';

const execFileAsync = promisify(execFile);
/** A child of this test, killed if it runs past three minutes: a hung tool fails the test, never hangs the suite. */
const run = (file: string, args: string[], options: { env?: NodeJS.ProcessEnv } = {}) =>
  execFileAsync(file, args, { encoding: 'utf8', timeout: 180_000, killSignal: 'SIGKILL', ...options });
const START = Date.parse('2026-07-27T23:40:00Z');
const END = START + 35 * 60_000;
const {
  dir,
  api,
  key: issue,
} = await lakeServer(t, {
  start: START,
  end: END,
  env: { RATE_PAID_PER_SECOND: '100000', CORS_ORIGINS: 'https://research.example.com,http://localhost:5173', CAPTURE_REFERENCE: 'on' },
  shareCapture: true,
});
const key = await issue();
const auth = { authorization: `Bearer ${key}` };
const ended = api.lake
  .all(END)
  .find((m) => m.venue === 'wallet-prediction' && m.window === '15m' && m.end_time <= END && m.start_time >= START)!;

t.test('browsers: CORS for configured origins only, never a wildcard', async (t) => {
  const url = `${api.url}/v3/wallet-prediction/markets?coin=btc`;
  const preflight = await fetch(url, {
    method: 'OPTIONS',
    headers: {
      origin: 'https://research.example.com',
      'access-control-request-method': 'GET',
      'access-control-request-headers': 'authorization',
    },
  });
  t.equal(preflight.status, 204, 'a preflight from an allowed origin is answered');
  t.equal(preflight.headers.get('access-control-allow-origin'), 'https://research.example.com');
  t.match(preflight.headers.get('access-control-allow-headers'), /Authorization/);
  t.match(preflight.headers.get('access-control-allow-methods'), /GET/);
  const stranger = await fetch(url, {
    method: 'OPTIONS',
    headers: { origin: 'https://evil.example.net', 'access-control-request-method': 'GET' },
  });
  t.equal(
    stranger.headers.get('access-control-allow-origin'),
    null,
    'another origin gets no Access-Control headers, so browsers refuse it',
  );
  const got = await fetch(url, { headers: { ...auth, origin: 'http://localhost:5173' } });
  t.equal(got.status, 200);
  t.equal(got.headers.get('access-control-allow-origin'), 'http://localhost:5173');
  t.match(
    got.headers.get('access-control-expose-headers'),
    /X-RateLimit-Remaining.*Retry-After/,
    'rate-limit and retry headers readable by scripts',
  );
  t.match(got.headers.get('vary'), /Origin/);
  const plain = await fetch(url, { headers: auth });
  t.equal(plain.headers.get('access-control-allow-origin'), null, 'no Origin, no CORS headers');
  const options = await fetch(url, { method: 'OPTIONS' });
  t.equal(options.status, 405, 'OPTIONS that is not a preflight is still not a method here');
  const keyInUrl = await fetch(`${url}&api_key=${key}`, { headers: { origin: 'http://localhost:5173' } });
  t.equal(keyInUrl.status, 401, 'a key in the URL is never accepted, CORS or not');
});

t.test('browsers: the API reference page is served locally', async (t) => {
  const page = await fetch(`${api.url}/v3/docs`);
  t.equal(page.status, 200);
  t.match(page.headers.get('content-type'), /text\/html/);
  t.match(page.headers.get('content-security-policy'), /script-src 'self'/);
  const html = await page.text();
  t.notMatch(html, /https?:\/\//, 'no CDN: every asset from this origin');
  const assets = [...html.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]);
  t.ok(assets.length >= 3, `assets: ${assets.join(', ')}`);
  for (const asset of assets) {
    const res = await fetch(`${api.url}${asset}`);
    t.equal(res.status, 200, asset);
    t.ok((await res.arrayBuffer()).byteLength > 0, `${asset} has content`);
  }
  const init = await (await fetch(`${api.url}/v3/docs/init.js`)).text();
  t.match(init, /\/v3\/openapi\.json/, 'the page reads the live document');
});

t.test('lists as generators send them: repeated, comma-separated, or both', async (t) => {
  const ids = async (query: string) => {
    const res = await fetch(`${api.url}/v3/wallet-prediction/markets?${query}&limit=500`, { headers: auth });
    t.equal(res.status, 200, query);
    return ((await res.json()).data as { market_id: string }[]).map((m) => m.market_id);
  };
  const comma = await ids('coin=btc,eth&window=15m');
  t.ok(comma.length > 0);
  t.same(await ids('coin=btc&coin=eth&window=15m'), comma, 'repeated equals comma-separated');
  t.same(await ids('coin=btc&coin=eth,bnb&window=15m'), await ids('coin=btc,eth,bnb&window=15m'), 'mixed');
  const twice = await fetch(`${api.url}/v3/wallet-prediction/markets?limit=5&limit=6`, { headers: auth });
  t.equal(twice.status, 400, 'a single-valued parameter given twice is still refused');
  t.match((await twice.json()).error.message, /"limit" was given 2 times/);
});

t.test('exports as operations of their own', async (t) => {
  const base = `${api.url}/v3/wallet-prediction/${ended.market_id}`;
  for (const [op, query] of [
    ['snapshots.csv', 'snapshots?format=csv'],
    ['snapshots.parquet', 'snapshots?format=parquet'],
    ['timeseries.csv?metric=chance', 'timeseries?metric=chance&format=csv'],
  ]) {
    // One after the other, each read whole: an export holds a slot of a small pool until it is sent.
    const a = await fetch(`${base}/${op}`, { headers: auth });
    const x = Buffer.from(await a.arrayBuffer());
    const b = await fetch(`${base}/${query}`, { headers: auth });
    const y = Buffer.from(await b.arrayBuffer());
    t.equal(a.status, 200, op);
    t.equal(b.status, 200, `${query}: ${b.status === 200 ? '' : y.toString().slice(0, 200)}`);
    t.equal(a.headers.get('content-type'), b.headers.get('content-type'), `${op}: ${a.headers.get('content-type')}`);
    if (op.includes('csv')) t.equal(x.toString(), y.toString(), `${op} is ${query}`);
    else t.equal(x.subarray(0, 4).toString(), 'PAR1', `${op} is Parquet`);
  }
  const paged = await fetch(`${base}/snapshots.csv?limit=10`, { headers: auth });
  t.equal(paged.status, 400, 'no paging parameters on a file');
  const doc = await (await fetch(`${api.url}/v3/openapi.json`)).json();
  const op = doc.paths['/v3/wallet-prediction/{market_id}/snapshots.csv'].get;
  t.same(Object.keys(op.responses[200].content), ['text/csv'], 'one response type per export operation');
  t.same(
    Object.keys(doc.paths['/v3/wallet-prediction/{market_id}/snapshots'].get.responses[200].content),
    ['application/json'],
    'the paged operation answers JSON',
  );
  t.ok(op.parameters.every((p: { name: string }) => !['limit', 'cursor', 'format'].includes(p.name)));
});

t.test('a TypeScript client generated from the live document typechecks and works', async (t) => {
  const work = path.join(dir, 'ts-client');
  await fs.mkdir(work, { recursive: true });
  await fs.writeFile(path.join(work, 'openapi.json'), await (await fetch(`${api.url}/v3/openapi.json`)).text());
  const bin = (name: string) => path.resolve('node_modules/.bin', name);
  // The package's own code over types generated now from the live document.
  await fs.mkdir(path.join(work, 'client'));
  await run(bin('openapi-typescript'), [path.join(work, 'openapi.json'), '-o', path.join(work, 'client', 'api.d.ts')]);
  t.equal(
    await fs.readFile(path.join(work, 'client', 'api.d.ts'), 'utf8'),
    await fs.readFile(path.resolve('clients/typescript/src/api.d.ts'), 'utf8'),
    "the package's committed types are the live document's (`make client-ts` regenerates them)",
  );
  await fs.copyFile(path.resolve('clients/typescript/src/index.ts'), path.join(work, 'client', 'index.ts'));
  await fs.copyFile(path.resolve('test/fixtures/ts-client.ts'), path.join(work, 'script.ts'));
  await fs.writeFile(
    path.join(work, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        strict: true,
        noEmit: true,
        module: 'nodenext',
        moduleResolution: 'nodenext',
        target: 'es2022',
        types: ['node'],
        typeRoots: [path.resolve('node_modules/@types')],
        skipLibCheck: true,
        baseUrl: '.',
        paths: { 'openapi-fetch': [path.resolve('node_modules/openapi-fetch')] },
      },
      files: ['script.ts', 'client/index.ts', 'client/api.d.ts'],
    }),
  );
  // Resolved from this repository's node_modules, as a project that installed them would.
  await fs.symlink(path.resolve('node_modules'), path.join(work, 'node_modules'));
  await fs.writeFile(path.join(work, 'package.json'), '{"type":"module"}');
  const tsc = await run(bin('tsc'), ['-p', work]).then(
    () => '',
    (err) => String(err.stdout ?? err),
  );
  t.equal(tsc, '', 'the generated types and a script using them typecheck under strict');
  const direct = await (await fetch(`${api.url}/v3/wallet-prediction/${ended.market_id}/snapshots?limit=1000`, { headers: auth })).json();
  // How many snapshots the fill took depends on how busy the machine was: pages are sized to make three or more.
  t.ok(direct.data.length >= 3, `${direct.data.length} snapshots of the market`);
  const pageSize = Math.max(1, Math.floor(direct.data.length / 3));
  const out = await run(process.execPath, [...TS_NODE_ARGS, path.join(work, 'script.ts')], {
    env: { ...CHILD_ENV, BASE_URL: api.url, KEY: key, MARKET_ID: ended.market_id, PAGE_SIZE: String(pageSize) },
  });
  const result = JSON.parse(out.stdout);
  t.same(result.coins, ['btc', 'eth'], 'markets of two coins, the list sent as generators send it');
  t.ok(result.pages >= 3, `a cursor walk of ${result.pages} pages`);
  t.equal(result.pages, Math.ceil(result.snapshots / pageSize), `pages of ${pageSize}, the last one short or full`);
  t.equal(result.snapshots, direct.data.length, 'the walk saw every snapshot once');
  const trades = await (await fetch(`${api.url}/v3/wallet-prediction/${ended.market_id}/trades?limit=1000`, { headers: auth })).json();
  t.equal(result.trades, trades.data.length, `the client walked the market's ${trades.data.length} trades, 2 a page`);
  t.same(result.tradeSources, trades.data.length ? ['rest_last_trade'] : [], 'typed, with their source');
  t.equal(
    result.csvLines,
    1 + direct.data.reduce((n: number, s: { books: unknown[] }) => n + s.books.length, 0),
    'the CSV export: a header and a row per book',
  );
  t.equal(result.fileMagic, 'PAR1', 'a lake file downloaded through the client');
  t.equal(result.fileSha256, result.listedSha256, 'and it is the file the listing describes');
});

t.test("the repository's Python client, run by the machine's python3 (standard library only)", async (t) => {
  const out = await run('python3', ['-m', 'unittest', '-v', 'clients/python/tests/test_client.py'], {
    env: { ...process.env, PMH_API_URL: api.url, PMH_API_KEY: key, PMH_MARKET_ID: ended.market_id, PYTHONDONTWRITEBYTECODE: '1' },
  }).then(
    (r) => ({ code: 0, text: r.stderr }),
    (err) => ({ code: err.code as number, text: String(err.stderr ?? err) }),
  );
  t.equal(out.code, 0, out.code === 0 ? 'unittest passed' : out.text);
  const ran = /Ran (\d+) tests?/.exec(out.text);
  t.ok(ran && Number(ran[1]) >= 10, `ran ${ran?.[1]} Python tests`);
  t.notMatch(out.text, /FAILED|Error/, 'no failure or error');
});

t.test('DepthFeed users: `type` for `window`, and the book at an instant', async (t) => {
  const list = async (query: string) => {
    const res = await fetch(`${api.url}/v3/eth/markets?${query}&limit=500`, { headers: auth });
    t.equal(res.status, 200, query);
    return ((await res.json()).data as { market_id: string }[]).map((m) => m.market_id);
  };
  const byWindow = await list('window=5m');
  t.ok(byWindow.length > 0);
  t.same(await list('type=5m'), byWindow, '`type` is `window`');
  const clash = await fetch(`${api.url}/v3/eth/markets?type=5m&window=15m`, { headers: auth });
  t.equal(clash.status, 400, 'both, disagreeing: a clear 400');
  t.match((await clash.json()).error.message, /"window" and "type"/);

  const poly = api.lake.all(END).find((m) => m.venue === 'polymarket' && m.coin === 'eth' && m.end_time <= END && m.start_time >= START)!;
  const pages = await (
    await fetch(`${api.url}/v3/eth/markets/${poly.market_id}/snapshots?limit=1000&include_orderbook=true`, { headers: auth })
  ).json();
  const snaps = pages.data as { timestamp: string }[];
  t.ok(snaps.length > 3);
  const at = async (ms: number, extra = '') =>
    (
      await fetch(`${api.url}/v3/eth/markets/${poly.market_id}/snapshots/at?timestamp=${ms}&include_orderbook=true${extra}`, {
        headers: auth,
      })
    ).json();
  const exact = Date.parse(snaps[2].timestamp);
  const hit = await at(exact);
  t.same(hit.data, snaps[2], 'at a recorded time: that snapshot');
  t.equal(hit.meta.age_ms, 0);
  const between = await at(exact + 500);
  t.same(between.data, Date.parse(snaps[3].timestamp) <= exact + 500 ? snaps[3] : snaps[2], 'between two: the one before');
  t.equal(between.meta.age_ms, exact + 500 - Date.parse(between.data.timestamp), 'with how old it was');
  const before = await at(poly.start_time - 1);
  t.equal(before.data, null, 'before the market: nothing, never an invented book');
  const iso = await at(0, '')
    .then(() =>
      fetch(
        `${api.url}/v3/eth/markets/${poly.market_id}/snapshots/at?timestamp=${encodeURIComponent(snaps[2].timestamp)}&include_orderbook=true`,
        { headers: auth },
      ),
    )
    .then((r) => r.json());
  t.same(iso.data, snaps[2], 'ISO times too');
  const missing = await fetch(`${api.url}/v3/eth/markets/${poly.market_id}/snapshots/at`, { headers: auth });
  t.equal(missing.status, 400, 'timestamp is required');
  const ns = await fetch(`${api.url}/v3/wallet-prediction/${ended.market_id}/snapshots/at?timestamp=${ended.end_time + 60_000}`, {
    headers: auth,
  }).then((r) => r.json());
  const last = await fetch(`${api.url}/v3/wallet-prediction/${ended.market_id}/snapshots?order=desc&limit=1`, { headers: auth }).then((r) =>
    r.json(),
  );
  t.same(ns.data, last.data[0], 'after the end: the last recorded book');
  t.ok(ns.meta.age_ms >= 60_000, 'and its age says so');
});
