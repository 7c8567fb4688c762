// Bulk access through real HTTP: the files listing, downloads (ETag, Range, traversal), the
// coverage table, and gaps reported beside the data they interrupt.
import { createHash } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { parquetMetadata, parquetReadObjects } from 'hyparquet';
import { compressors } from 'hyparquet-compressors';
import t from 'tap';
import { startApi } from '../src/api/server.js';
import { createClock } from '../src/clock.js';
import { WALLET_PREFIX } from '../src/standin/server.js';
import { CHILD_ENV, exitedWithin, lakeTable, lakeServer, spawnJob } from './helpers.js';

const START = Date.parse('2026-07-28T10:00:00Z');
const END = START + 45 * 60_000;
// Ten simulated minutes (1.5 s of wall time at 400x): long enough that no poll cycle can miss it.
const OUTAGE = { from: START + 20 * 60_000, to: START + 30 * 60_000 };
const {
  dir,
  config,
  duck,
  api,
  key: issue,
} = await lakeServer(t, {
  start: START,
  end: END,
  env: { RATE_PAID_PER_SECOND: '100000', RATE_FREE_PER_SECOND: '100000' },
  fill: { faults: { outages: [{ path: `${WALLET_PREFIX}/order-book`, ...OUTAGE }] } },
});
const paid = await issue('paid');
const free = await issue('free');

async function get(url: string, key: string | null = paid, headers: Record<string, string> = {}) {
  const res = await fetch(`${api.url}${url}`, { headers: { ...(key ? { authorization: `Bearer ${key}` } : {}), ...headers } });
  const buf = Buffer.from(await res.arrayBuffer());
  const json = res.headers.get('content-type')?.includes('json') ? JSON.parse(buf.toString('utf8')) : null;
  return { status: res.status, headers: res.headers, buf, json };
}

async function listAll(first: string, key = paid) {
  const out: any[] = [];
  let url: string | null = first;
  while (url) {
    const r = await get(url, key);
    if (r.status !== 200) throw new Error(`${url}: ${r.buf}`);
    out.push(...r.json.data);
    url = r.json.pagination.has_more ? `${first}&cursor=${encodeURIComponent(r.json.pagination.next_cursor)}` : null;
  }
  return out;
}

t.test('the listing pages through every sealed file with rows and sha256 from the manifest', async (t) => {
  const listed = await listAll('/v3/wallet-prediction/files?limit=7');
  const onDisk = (await fs.readdir(path.join(dir, 'lake'), { recursive: true })).filter(
    (f) => f.endsWith('.parquet') && f.includes('venue=wallet-prediction'),
  );
  t.equal(listed.length, onDisk.length, 'every wallet file, once');
  t.equal(new Set(listed.map((f) => f.url)).size, listed.length);
  const books = await listAll('/v3/provider-alias/files?dataset=books&coin=btc&window=15m&limit=3');
  t.ok(books.length > 0 && books.every((f) => f.dataset === 'books' && f.coin === 'btc' && f.window === '15m'));
  const ranged = await listAll(`/v3/wallet-prediction/files?start_time=${START + 3_600_000}&limit=50`);
  t.ok(ranged.every((f) => Date.parse(`${f.date}T${String(f.hour).padStart(2, '0')}:00:00Z`) + 3_600_000 > START + 3_600_000));
  t.match(await get('/v3/wallet-prediction/files', free), { status: 403 });
  const coin = await listAll('/v3/sol/files?dataset=books&limit=100', free);
  t.ok(coin.length > 0 && coin.every((f) => f.coin === 'sol' && f.url.startsWith('/v3/sol/files/')));
});

t.test('downloads match the listing and read back with an independent Parquet reader', async (t) => {
  const listed = await listAll('/v3/wallet-prediction/files?dataset=books&limit=100');
  for (const f of listed.slice(0, 4)) {
    const r = await get(f.url);
    t.equal(r.status, 200);
    t.equal(r.headers.get('content-type'), 'application/vnd.apache.parquet');
    t.equal(Number(r.headers.get('content-length')), f.bytes);
    t.equal(r.headers.get('etag'), `"${f.sha256}"`);
    t.equal(createHash('sha256').update(r.buf).digest('hex'), f.sha256, 'the bytes are the listed sha256');
    const file = r.buf.buffer.slice(r.buf.byteOffset, r.buf.byteOffset + r.buf.byteLength);
    const meta = parquetMetadata(file);
    t.equal(Number(meta.num_rows), f.rows, 'rows as listed');
    t.same(
      meta.schema.filter((s) => s.name !== 'duckdb_schema' && s.name !== 'list' && s.name !== 'element').map((s) => s.name),
      [
        'ts',
        'market_id',
        'token_id',
        'outcome_index',
        'outcome',
        'exchange_ts',
        'recv_ts',
        'bid_prices',
        'bid_sizes',
        'ask_prices',
        'ask_sizes',
        'verified_by',
        'hash_check',
        'price_decimals',
        'size_decimals',
        'level_texts',
        'hash_fields',
        'venue_hash',
      ],
    );
    const rows = await parquetReadObjects({ file, compressors, rowEnd: 3 });
    t.type(rows[0].market_id, 'string');
    t.ok(Array.isArray(rows[0].bid_prices), 'ladders are standard lists');
    t.equal(rows[0].bid_prices.length, rows[0].bid_sizes.length);
  }
});

t.test('ETag, If-None-Match, Range', async (t) => {
  const [f] = await listAll('/v3/wallet-prediction/files?dataset=books&limit=1');
  const whole = (await get(f.url)).buf;
  t.equal((await get(f.url, paid, { 'if-none-match': `"${f.sha256}"` })).status, 304);
  t.equal((await get(f.url, paid, { 'if-none-match': '"other"' })).status, 200);
  const head = await get(f.url, paid, { range: 'bytes=0-99' });
  t.equal(head.status, 206);
  t.equal(head.headers.get('content-range'), `bytes 0-99/${f.bytes}`);
  t.same(head.buf, whole.subarray(0, 100));
  const tail = await get(f.url, paid, { range: 'bytes=-16' });
  t.same(tail.buf, whole.subarray(whole.length - 16), 'a suffix range: the footer');
  const rest = await get(f.url, paid, { range: `bytes=${f.bytes - 10}-` });
  t.equal(rest.buf.length, 10, 'an open range resumes a partial download');
  const outside = await get(f.url, paid, { range: `bytes=${f.bytes}-${f.bytes + 10}` });
  t.equal(outside.status, 416);
  t.equal(outside.json.error.code, 'RANGE_NOT_SATISFIABLE');
  t.equal(outside.headers.get('content-range'), `bytes */${f.bytes}`);
});

t.test('nothing outside the listed files can be read', async (t) => {
  const secret = path.join(dir, 'state', 'cursor-secret');
  const [f] = await listAll('/v3/wallet-prediction/files?dataset=books&limit=1');
  const partitionDir = path.dirname(path.join(dir, 'lake', f.url.replace('/v3/wallet-prediction/files/', '')));
  const sneaky = path.join(partitionDir, 'sneaky.parquet');
  await fs.symlink(secret, sneaky);
  t.teardown(() => fs.rm(sneaky, { force: true }));
  const attempts = [
    '/v3/wallet-prediction/files/..%2F..%2Fstate%2Fcursor-secret',
    '/v3/wallet-prediction/files/%2e%2e/%2e%2e/state/cursor-secret',
    '/v3/wallet-prediction/files/%2Fetc%2Fpasswd',
    '/v3/wallet-prediction/files//etc/passwd',
    `${f.url.replace(/[^/]+\.parquet$/, 'sneaky.parquet')}`,
    `${f.url.replace('venue=wallet-prediction', 'venue=polymarket')}`,
    `${f.url}.tmp`,
    f.url.replace('/v3/wallet-prediction/', '/v3/btc/'),
  ];
  for (const a of attempts) {
    const r = await get(a);
    t.ok(r.status >= 400 && r.status < 500, `${r.status} ${a}`);
    t.notOk(r.buf.toString('utf8').includes(await fs.readFile(secret, 'utf8')), 'never the secret');
  }
});

t.test('coverage: the published table, recorded spans from the lake, and every recorded gap', async (t) => {
  const r = await get('/v3/wallet-prediction/coverage');
  t.equal(r.status, 200);
  t.ok(r.json.data.published.some((p: any) => p.dataset === 'markets' && p.starts === '2026-05-05'));
  const span = await duck.rows(
    `SELECT coin, "window", epoch_ms(min(ts))::DOUBLE AS lo, epoch_ms(max(ts))::DOUBLE AS hi, count(*) AS n FROM ${lakeTable(dir, 'books')} WHERE venue = 'wallet-prediction' GROUP BY ALL`,
  );
  for (const s of span) {
    const rec = r.json.data.recorded.find((x: any) => x.dataset === 'books' && x.coin === s.coin && x.window === s.window);
    t.match(rec, { first: new Date(Number(s.lo)).toISOString(), last: new Date(Number(s.hi)).toISOString(), rows: Number(s.n) });
  }
  const gaps = await duck.rows(`SELECT count(*) AS n FROM ${lakeTable(dir, 'gaps')} WHERE venue = 'wallet-prediction'`);
  const recorded = r.json.data.gaps.filter((g: any) => !g.provisional);
  t.equal(recorded.length, Number(gaps[0].n), 'every gap the lake holds');
  // The fill stopped with windows open: the rest of each is a process_down gap not written yet (capture/heartbeat.ts).
  const provisional = r.json.data.gaps.filter((g: any) => g.provisional);
  t.ok(
    provisional.length > 0 && provisional.every((g: any) => g.reason === 'process_down' && g.market_id && Date.parse(g.from) <= END),
    `${provisional.length} provisional process_down gaps, from capture's stop on`,
  );
  t.ok(
    r.json.data.gaps.some((g: any) => g.reason === 'http_5xx' && Date.parse(g.from) < OUTAGE.to && Date.parse(g.to) > OUTAGE.from),
    'the outage is there',
  );
});

t.test('snapshots and timeseries overlapping a gap say so in meta.gaps', async (t) => {
  const cov = (await get('/v3/wallet-prediction/coverage')).json.data.gaps.find(
    (g: any) => g.dataset === 'books' && g.market_id && !g.provisional,
  );
  const snap = await get(`/v3/wallet-prediction/${cov.market_id}/snapshots?limit=1000`);
  t.ok(snap.json.meta.gaps.some((g: any) => g.from === cov.from && g.to === cov.to));
  const inside = snap.json.data.filter((s: any) => s.timestamp > cov.from && s.timestamp < cov.to);
  t.same(inside, [], 'and nothing is returned inside it');
  const before = await get(`/v3/wallet-prediction/${cov.market_id}/snapshots?end_time=${encodeURIComponent(cov.from)}`);
  t.same(before.json.meta.gaps, [], 'a range before the gap has none');
});

function parseCsv(text: string): Record<string, string>[] {
  const rows: string[][] = [];
  let row: string[] = [];
  let cell = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') ((cell += '"'), i++);
      else if (c === '"') quoted = false;
      else cell += c;
    } else if (c === '"') quoted = true;
    else if (c === ',') (row.push(cell), (cell = ''));
    else if (c === '\n') (row.push(cell), rows.push(row), (row = []), (cell = ''));
    else cell += c;
  }
  const [header, ...body] = rows;
  return body.map((r) => Object.fromEntries(header.map((h, i) => [h, r[i]])));
}

t.test('CSV and Parquet exports equal the JSON pages of the same range, record for record', async (t) => {
  const market = (await get('/v3/wallet-prediction/markets?window=15m&status=closed,resolved&limit=5')).json.data.find(
    (m: any) => Date.parse(m.end_time) <= END && Date.parse(m.start_time) >= START,
  );
  const base = `/v3/wallet-prediction/${market.market_id}`;
  const pages: any[] = [];
  let url: string | null = `${base}/snapshots?limit=40&interval=15s`;
  while (url) {
    const r = await get(url);
    pages.push(...r.json.data);
    url = r.json.pagination.has_more
      ? `${base}/snapshots?limit=40&interval=15s&cursor=${encodeURIComponent(r.json.pagination.next_cursor)}`
      : null;
  }
  const fromJson = pages.flatMap((s) => s.books.map((b: any) => [s.timestamp, b.outcome_index, b.bid_prices, b.ask_sizes]));
  t.ok(fromJson.length > 10);

  const csv = await get(`${base}/snapshots?interval=15s&format=csv`);
  t.equal(csv.status, 200);
  t.match(csv.headers.get('content-type'), /text\/csv/);
  t.match(csv.headers.get('content-disposition'), new RegExp(`attachment; filename="${market.market_id}-snapshots-.*\\.csv"`));
  const fromCsv = parseCsv(csv.buf.toString('utf8')).map((r) => [
    r.timestamp,
    Number(r.outcome_index),
    JSON.parse(r.bid_prices),
    JSON.parse(r.ask_sizes),
  ]);
  t.same(fromCsv, fromJson, 'CSV = JSON');

  const pq = await get(`${base}/snapshots?interval=15s&format=parquet`);
  t.equal(pq.headers.get('content-type'), 'application/vnd.apache.parquet');
  const file = pq.buf.buffer.slice(pq.buf.byteOffset, pq.buf.byteOffset + pq.buf.byteLength);
  const rows = await parquetReadObjects({ file, compressors });
  const fromParquet = rows.map((r: any) => [new Date(r.ts).toISOString(), r.outcome_index, r.bid_prices, r.ask_sizes]);
  t.same(fromParquet, fromJson, 'Parquet = JSON');

  const series = await get(`${base}/timeseries?metric=price&outcome=1&limit=1000`);
  const seriesCsv = parseCsv((await get(`${base}/timeseries?metric=price&outcome=1&format=csv`)).buf.toString('utf8'));
  t.same(
    seriesCsv.map((r) => [r.timestamp, Number(r.value)]),
    series.json.data.map((s: any) => [s.timestamp, s.value]),
  );

  t.match(await get(`${base}/snapshots?format=csv&limit=10`), { status: 400 });
  const long = await get(`${base}/snapshots?format=csv&start_time=2026-06-01&end_time=2026-07-15`);
  t.equal(long.json.error.code, 'INVALID_RANGE', 'over 31 days');
  // Deleted when the stream closes, just after the response ends.
  let exportsLeft: string[] = [];
  for (let i = 0; i < 20; i++) {
    exportsLeft = await fs.readdir(path.join(dir, 'state', 'exports')).catch(() => []);
    if (!exportsLeft.length) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  t.same(exportsLeft, [], 'exports are deleted once sent');
});

t.test('every DuckDB example of the analyst guide runs against a real lake and returns rows', async (t) => {
  const guide = await fs.readFile(path.resolve('docs/ANALYSTS.md'), 'utf8');
  const examples = [...guide.matchAll(/```sql\n-- run\n([\s\S]*?)```/g)].map((m) => m[1].replaceAll('LAKE', path.join(dir, 'lake')));
  t.ok(examples.length >= 4, `${examples.length} examples`);
  for (const sql of examples) {
    const rows = await duck.rows(sql.trim().replace(/;$/, ''));
    t.ok(rows.length > 0, sql.split('\n')[1]?.slice(0, 60));
  }
});

t.test('the download job mirrors, skips what is valid, replaces corrupt copies, resumes, and names failures', async (t) => {
  const { download } = await import('../src/download.js');
  const dest = path.join(dir, 'mirror');
  const req = { baseUrl: api.url, key: paid, namespace: 'wallet-prediction', dest, query: { dataset: 'books', coin: 'btc' } };
  const first = await download(req);
  t.ok(first.listed > 0);
  const gapFiles = (await fs.readdir(path.join(dest, 'gaps'), { recursive: true }).catch(() => [])).filter((f) =>
    String(f).endsWith('.parquet'),
  );
  t.ok(gapFiles.length > 0, 'a mirror of books also holds the gaps of the same coins and hours');
  t.match(first, { downloaded: first.listed, skipped: 0, failed: [] });
  const second = await download(req);
  t.match(second, { downloaded: 0, skipped: first.listed, bytes: 0 }, 'a second run downloads nothing');

  const files = (await fs.readdir(dest, { recursive: true })).filter((f) => f.endsWith('.parquet')).map((f) => path.join(dest, f));
  const corrupt = files[0];
  const bytes = await fs.readFile(corrupt);
  bytes[100] ^= 0xff;
  await fs.writeFile(corrupt, bytes);
  const partial = files[1];
  const whole = await fs.readFile(partial);
  await fs.rm(partial);
  await fs.writeFile(`${partial}.part`, whole.subarray(0, Math.floor(whole.length / 2)));
  const third = await download(req);
  t.match(third, { refetched: 1, resumed: 1, downloaded: 2, failed: [] });
  t.equal(third.bytes, bytes.length + (whole.length - Math.floor(whole.length / 2)), 'the partial file fetched only its missing half');
  t.same(await fs.readFile(partial), whole);

  // A server-side file that no longer matches its listing: the job fails, naming it.
  const listed = (await get('/v3/wallet-prediction/files?dataset=books&coin=btc&limit=1')).json.data[0];
  const served = path.join(dir, 'lake', listed.url.replace('/v3/wallet-prediction/files/', ''));
  const original = await fs.readFile(served);
  const tampered = Buffer.from(original);
  tampered[200] ^= 0xff;
  await fs.writeFile(served, tampered);
  await fs.rm(path.join(dest, listed.url.replace('/v3/wallet-prediction/files/', '')));
  const cli = spawnJob(t, 'download.ts', ['--dataset', 'books', '--coin', 'btc', '--dest', dest, '--url', api.url], {
    ...CHILD_ENV,
    PMH_API_KEY: paid,
  });
  let out = '';
  cli.stdout!.on('data', (d) => (out += d));
  cli.stderr!.on('data', (d) => (out += d));
  const code = await exitedWithin(cli, 120_000);
  await fs.writeFile(served, original);
  t.equal(code, 1, 'exit non-zero');
  t.match(out, new RegExp(`FAILED ${listed.url.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: sha256`));
  t.notOk(out.includes(paid), 'the key is never printed');
});

t.test('an export whose lake file cannot be read is a 503, not a hung or empty download', async (t) => {
  const market = (await get('/v3/wallet-prediction/markets?window=5m&status=closed,resolved&limit=5')).json.data.find(
    (m: any) => Date.parse(m.end_time) <= END && Date.parse(m.start_time) >= START,
  );
  const files = await api.lake.files(
    [
      {
        dataset: 'books',
        venue: 'wallet-prediction',
        coin: market.coin,
        window: '5m',
        hour: Math.floor(Date.parse(market.start_time) / 3_600_000) * 3_600_000,
      },
    ],
    market.market_id,
  );
  // A file that holds the market's rows: an export reads no other.
  const victim = files.sealed[0];
  const saved = await fs.readFile(victim);
  await fs.writeFile(victim, 'not parquet');
  const r = await get(`/v3/wallet-prediction/${market.market_id}/snapshots?format=csv`);
  await fs.writeFile(victim, saved);
  t.equal(r.status, 503);
  t.equal(r.json.error.code, 'UNAVAILABLE');
  const again = await get(`/v3/wallet-prediction/${market.market_id}/snapshots?format=csv`);
  t.equal(again.status, 200, 'and the next export works');
  // The export's file goes when its stream has closed, a moment after the response ended: waited for, not timed.
  let left = await fs.readdir(path.join(dir, 'state', 'exports'));
  for (let i = 0; i < 300 && left.length > 0; i++) {
    await new Promise((res) => setTimeout(res, 50));
    left = await fs.readdir(path.join(dir, 'state', 'exports'));
  }
  t.same(left, [], 'no pipe is left behind');
});

t.test('a gap still in the spool (open hour) is reported before it is sealed', async (t) => {
  const { partitionOf, partitionDir } = await import('../src/lake/layout.js');
  const p = partitionOf('gaps', 'wallet-prediction', 'eth', '5m', END);
  const part = path.join(dir, 'spool', 'live-seg', partitionDir(p), '000001.ndjson');
  await fs.mkdir(path.dirname(part), { recursive: true });
  await fs.writeFile(
    part,
    `${JSON.stringify({ market_id: 'm-open', dataset: 'books', from_ts: END + 1000, to_ts: END + 5000, reason: 'timeout', detail: null, failures: 3 })}\n`,
  );
  await api.lake.update();
  const r = await get('/v3/wallet-prediction/coverage');
  t.ok(r.json.data.gaps.some((g: any) => g.market_id === 'm-open' && g.reason === 'timeout'));
  await fs.rm(path.join(dir, 'spool', 'live-seg'), { recursive: true });
  await api.lake.update();
});

t.test('a file committed beside the API (late seal, then compaction) is listed within seconds', async (t) => {
  const { lakePaths, parsePartitionDir } = await import('../src/lake/layout.js');
  const { commitFiles, writeParquet } = await import('../src/lake/writer.js');
  const { parquetSource } = await import('../src/lake/sql.js');
  const { compact } = await import('../src/lake/compact.js');
  const paths = lakePaths(dir);
  const listed = async () => await listAll('/v3/wallet-prediction/files?dataset=metrics&coin=btc&window=15m&limit=100');
  const before = await listed();
  const victim = before[0];
  const rel = victim.url.split('/files/')[1] as string;
  const partition = parsePartitionDir(path.posix.dirname(rel))!;
  const inPartition = (files: any[]) => files.filter((f) => f.url.includes(path.posix.dirname(rel) + '/'));
  const until = async (check: (files: any[]) => boolean) => {
    for (let i = 0; i < 100; i++) {
      const files = await listed();
      if (check(files)) return files;
      await new Promise((r) => setTimeout(r, 100));
    }
    return listed();
  };
  // A damaged line (a torn write, a hand edit) is skipped, not fatal to following the log.
  await fs.appendFile(path.join(paths.manifest, '_commits.ndjson'), '{"partition": "books/venue=x\n{not json\n');
  // Another process writes a second file into an hour the API indexed at start.
  const late = await writeParquet(duck, paths.lake, partition, 'part-late.parquet', parquetSource([path.join(paths.lake, rel)]), [
    'late-test',
  ]);
  await commitFiles(paths.lake, paths.manifest, path.join(paths.root, 'trash'), partition, [late], []);
  const two = await until((files) => inPartition(files).length === 2);
  t.equal(inPartition(two).length, 2, 'the late file is listed');
  t.ok(inPartition(two).some((f) => f.url.endsWith('/part-late.parquet') && f.sha256 === late.sha256));
  await compact(duck, paths, END + 3_600_000);
  const one = await until((files) => inPartition(files).length === 1);
  t.equal(inPartition(one).length, 1, 'compaction replaced both with one file');
  t.match(inPartition(one)[0].url, /\/compact-[0-9a-f]+\.parquet$/);
  t.equal(inPartition(one)[0].rows, victim.rows * 2);
  const download = await get(`/v3/wallet-prediction/files/${inPartition(one)[0].url.split('/files/')[1]}`);
  t.equal(download.status, 200);
  t.equal(createHash('sha256').update(download.buf).digest('hex'), inPartition(one)[0].sha256);
});

t.test('a restart restores the index from its checkpoint plus the commits since: the same listing', async (t) => {
  const lines: any[] = [];
  const { default: pino } = await import('pino');
  const again = await startApi(
    config,
    duck,
    createClock(END, 1),
    pino({ level: 'info' }, { write: (l: string) => lines.push(JSON.parse(l)) }),
    { port: 0 },
  );
  t.teardown(() => again.stop());
  t.match(
    lines.find((l) => l.msg === 'lake loaded'),
    { index: 'checkpoint' },
    'no manifest walk',
  );
  await api.lake.update();
  t.same(again.lake.sealedFiles(), api.lake.sealedFiles(), 'the late file and the compaction since the checkpoint are in it');
  // A commit log that is not the one the checkpoint was taken against: walk instead.
  const log = path.join(dir, 'manifest', '_commits.ndjson');
  await fs.writeFile(log, '');
  const walked: any[] = [];
  const third = await startApi(
    config,
    duck,
    createClock(END, 1),
    pino({ level: 'info' }, { write: (l: string) => walked.push(JSON.parse(l)) }),
    { port: 0 },
  );
  t.teardown(() => third.stop());
  t.match(
    walked.find((l) => l.msg === 'lake loaded'),
    { index: 'walk' },
  );
  t.same(third.lake.sealedFiles(), api.lake.sealedFiles());
});
