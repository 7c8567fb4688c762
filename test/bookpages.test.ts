// Serving copies (pages/copy.ts): pages of markets that are over, answered from the copies the
// seal wrote, equal the pages of the SQL path byte for byte, through real HTTP over a lake real
// capture wrote from the stand-in; a copy that is missing means the SQL path, and the API writes
// it again; a market in several files, interleaved in time, comes out as SQL orders it.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs/promises';
import http from 'node:http';
import path from 'node:path';
import zlib from 'node:zlib';
import t from 'tap';
import { startApi } from '../src/api/server.js';
import { marketBooksSql } from '../src/api/plan.js';
import { marketBooks, pageFromBooks } from '../src/api/shape.js';
import { createClock } from '../src/clock.js';
import { Duck } from '../src/lake/duckdb.js';
import { parquetSource } from '../src/lake/sql.js';
import { type CopyIndex, TRAILER, decodeTable, servingCopyPath } from '../src/pages/copyformat.js';
import { ServingCopies } from '../src/pages/copyreader.js';
import { refreshServingCopies, writeServingCopy } from '../src/pages/copywriter.js';
import { lakeServer, quiet, testConfig, testdir } from './helpers.js';

// Across midnight, so markets span hours and dates (and so more than one file).
const START = Date.parse('2026-07-27T23:35:00Z');
const END = START + 40 * 60_000;
const {
  dir,
  duck,
  api,
  key: issue,
} = await lakeServer(t, {
  start: START,
  end: END,
  env: { RATE_PAID_PER_SECOND: '100000', BOOK_CACHE_MB: '0' },
});
const key = await issue('paid');
// The same lake, keys and cursor secret, every page by SQL.
const sqlApi = await startApi(
  testConfig(dir, { RATE_PAID_PER_SECOND: '100000', BOOK_CACHE_MB: '0', SERVING_COPIES: 'off' }),
  duck,
  createClock(END, 1),
  quiet,
  { port: 0 },
);
// And with the cache on: pages read from the copies keep what they inflated, for the next pages.
const cacheApi = await startApi(testConfig(dir, { RATE_PAID_PER_SECOND: '100000' }), duck, createClock(END, 1), quiet, { port: 0 });
t.teardown(async () => {
  await sqlApi.stop();
  await cacheApi.stop();
});

/** The response up to its `meta` (which holds the request id and time): `data` and `pagination` as sent. */
async function page(base: string, url: string): Promise<{ status: number; text: string; cursor: string | null }> {
  const res = await fetch(`${base}${url}`, { headers: { authorization: `Bearer ${key}` } });
  const text = await res.text();
  const body = JSON.parse(text) as { pagination?: { next_cursor: string | null } };
  const at = text.indexOf(',"meta":');
  return { status: res.status, text: at < 0 ? text : text.slice(0, at), cursor: body.pagination?.next_cursor ?? null };
}

const health = async (base: string) =>
  ((await (await fetch(`${base}/v3/health`)).json()) as { data: { api: { pages: Record<string, number | boolean> } } }).data.api.pages;

const snapshotsPath = (m: { venue: string; coin: string; market_id: string }) =>
  m.venue === 'wallet-prediction' ? `/v3/wallet-prediction/${m.market_id}/snapshots` : `/v3/${m.coin}/markets/${m.market_id}/snapshots`;

const over = api.lake.all(END).filter((m) => m.end_time + 60_000 < END);
const books = api.lake.sealedFiles().filter((f) => f.partition.dataset === 'books' && f.rows > 0);

t.test('the seal wrote a serving copy of every books file', async (t) => {
  t.ok(books.length >= 2, `${books.length} books files`);
  for (const f of books) t.ok(await fs.stat(servingCopyPath(api.lake.paths.serving, f.sha256)).catch(() => null), f.path);
});

t.test('every page of every market that is over equals the SQL path, byte for byte', async (t) => {
  t.ok(over.length >= 8, `${over.length} markets over`);
  const venues = new Set(over.map((m) => m.venue));
  t.same([...venues].sort(), ['polymarket', 'wallet-prediction'], 'both venues');
  const before = (await health(api.url)).copy_reads as number;
  let compared = 0;
  for (const [i, m] of over.entries()) {
    const base = snapshotsPath(m);
    const mid = new Date((m.start_time + m.end_time) / 2).toISOString();
    // Wallet pages always carry ladders; the coin routes' default is the summary.
    const ladders = m.venue === 'wallet-prediction' ? [] : ['limit=7&include_orderbook=true'];
    const variants = [
      'limit=100',
      ...ladders,
      'limit=13&order=desc',
      `limit=5&interval=15s&outcome=${m.outcomes[1]?.label ?? 'Up'}`,
      `limit=9&start_time=${encodeURIComponent(mid)}&order=${i % 2 ? 'asc' : 'desc'}`,
    ];
    for (const query of variants) {
      // Walk both servers' pages in step: same bytes, then the copy side's cursor on both.
      let cursor: string | null = null;
      for (let n = 0; n < 400; n++) {
        const url: string = `${base}?${query}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`;
        const [a, b, c]: Awaited<ReturnType<typeof page>>[] = await Promise.all([
          page(api.url, url),
          page(sqlApi.url, url),
          page(cacheApi.url, url),
        ]);
        if (a.status !== 200 || a.text !== b.text || c.text !== b.text) {
          t.fail(`${url}: ${a.status} ${a.text.slice(0, 200)} / ${c.text.slice(0, 200)} vs ${b.status} ${b.text.slice(0, 200)}`);
          return;
        }
        compared++;
        cursor = a.cursor;
        if (!cursor) break;
      }
    }
    const at = await Promise.all([api.url, sqlApi.url].map((u) => page(u, `${snapshotsPath(m)}/at?timestamp=${encodeURIComponent(mid)}`)));
    t.equal(at[0].text, at[1].text, `${m.market_id}: the book at an instant`);
  }
  t.ok(compared > 100, `${compared} pages compared`);
  const after = await health(api.url);
  t.ok((after.copy_reads as number) - before >= over.length, `pages read from copies (${after.copy_reads})`);
  t.equal((await health(sqlApi.url)).copy_reads, 0, 'the other side never read one');
  const cached = await health(cacheApi.url);
  t.ok((cached.copy_cache_hits as number) > 0 && (cached.copy_reads as number) > 0, `with the cache on: ${JSON.stringify(cached)}`);
  t.equal(cached.book_cache_loads, 0, 'no market decoded whole: every one has its copies');
});

t.test('a market just over, in its minute of capture lag, is served from its copies at once, as the SQL path serves it', async (t) => {
  // Capture seals a market at its end: its pages are the files' from then on, the markets users look at most.
  const lagging = api.lake.all(END).filter((m) => m.end_time <= END && m.end_time + 60_000 >= END);
  t.ok(lagging.length >= 2, `${lagging.length} markets over less than a minute ago`);
  // Health is computed at most once a second: the counts before are those of now.
  await new Promise((r) => setTimeout(r, 1_100));
  const before = (await health(api.url)).copy_reads as number;
  const wrong: string[] = [];
  for (const m of lagging) {
    for (const query of ['limit=100', 'limit=13&order=desc']) {
      const url = `${snapshotsPath(m)}?${query}`;
      const [a, b] = await Promise.all([page(api.url, url), page(sqlApi.url, url)]);
      if (a.status !== 200 || a.text !== b.text || !a.text.includes('"books"')) wrong.push(`${url}: ${a.status} ${a.text.slice(0, 120)}`);
    }
  }
  t.same(wrong, [], `${2 * lagging.length} pages, each the SQL path's bytes`);
  await new Promise((r) => setTimeout(r, 1_100));
  t.equal(((await health(api.url)).copy_reads as number) - before, 2 * lagging.length, 'every one read from copies');
});

/** A response as sent: status, headers and the body's bytes, not decoded. */
function raw(base: string, url: string, encoding: string): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: Buffer }> {
  return new Promise((resolve, reject) => {
    http
      .get(`${base}${url}`, { headers: { authorization: `Bearer ${key}`, 'accept-encoding': encoding } }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
      })
      .on('error', reject);
  });
}

t.test('gzip pages of the common shape come from the pre-deflated copies and inflate to the SQL path’s bytes', async (t) => {
  const upTo = (text: string) => text.slice(0, text.indexOf(',"meta":'));
  const before = (await health(api.url)).copy_deflated_pages as number;
  let [pages, gzipped, edged] = [0, 0, 0];
  const bodies: Buffer[] = [];
  for (const m of over) {
    const base = snapshotsPath(m);
    const mid = new Date((m.start_time + m.end_time) / 2 + 1_000).toISOString();
    const views = m.venue === 'wallet-prediction' ? [''] : ['&include_orderbook=true', '&include_orderbook=false'];
    // Pages on chunks' edges (100, 1000), across them (250: edges both sides; 20 and 7: inside one chunk), from a time inside one.
    for (const view of views)
      for (const query of [
        'limit=100',
        'limit=20',
        'limit=250',
        'limit=7',
        'limit=1000',
        `limit=160&start_time=${encodeURIComponent(mid)}`,
      ]) {
        let cursor: string | null = null;
        // Pages of 7 mostly fall within one chunk: a few are enough.
        for (let n = 0; n < (query === 'limit=7' ? 12 : 200); n++) {
          const url: string = `${base}?${query}${view}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`;
          const [gz, want] = await Promise.all([raw(api.url, url, 'gzip, deflate, br'), page(sqlApi.url, url)]);
          // Pre-deflated pages are gzip though br is taken too; those within one chunk brotli, compressed now; short
          // ones (a market without books) not at all. Summaries are cut from the ladders: never pre-deflated.
          // Pages of ladders walked from the open with a limit the chunks divide always cover whole chunks.
          const encoding = gz.headers['content-encoding'];
          const summary = view.endsWith('false');
          const aligned = /^limit=(100|1000)$/.test(query) && !summary;
          const short = !encoding && gz.body.length < 1024;
          t.ok(encoding === 'gzip' || short || (!aligned && encoding === 'br'), `${url}: ${encoding}`);
          if (summary) t.not(encoding, 'gzip', `${url}: a summary compressed now`);
          t.match(gz.headers.vary, /Accept-Encoding/);
          // gunzip checks the member's CRC-32 and length.
          const decode = { gzip: zlib.gunzipSync, br: zlib.brotliDecompressSync }[encoding ?? ''] ?? ((x: Buffer) => x);
          const text = decode(gz.body).toString('utf8');
          if (gz.status !== 200 || upTo(text) !== want.text) {
            t.fail(`${url}: ${gz.status} ${text.slice(0, 300)} vs ${want.text.slice(0, 300)}`);
            return;
          }
          pages++;
          if (encoding === 'gzip') gzipped++;
          if (encoding === 'gzip' && !aligned) edged++;
          if (bodies.length < 40 && n % 3 === 0 && encoding === 'gzip') bodies.push(gz.body);
          cursor = (JSON.parse(text) as { pagination: { next_cursor: string | null } }).pagination.next_cursor;
          if (!cursor) break;
        }
      }
  }
  // Another decoder than the one that wrote the pieces.
  const python = `import gzip, sys, json
for n in json.load(sys.stdin):
    json.loads(gzip.decompress(bytes.fromhex(n)))
print(len(n))`;
  t.ok(
    execFileSync('python3', ['-c', python], { input: JSON.stringify(bodies.map((b) => b.toString('hex'))) }).length > 0,
    'Python reads them',
  );
  await new Promise((r) => setTimeout(r, 1100));
  const sent = ((await health(api.url)).copy_deflated_pages as number) - before;
  // Every gzip page here was pre-deflated: a page compressed now would have gone as brotli.
  t.equal(sent, gzipped, `${sent} of ${pages} pages pre-deflated`);
  t.ok(edged > 20 && gzipped < pages, `${edged} with edges deflated now; ${pages - gzipped} within one chunk, compressed now`);
  // With the book cache on, a market asked again in gzip is not loaded whole: its pages still come pre-deflated.
  const walked = over.find((m) => m.venue === 'wallet-prediction')!;
  const cachedBefore = (await health(cacheApi.url)) as Record<string, number>;
  for (let i = 0; i < 3; i++) {
    const again = await raw(cacheApi.url, `${snapshotsPath(walked)}?limit=100`, 'gzip, br');
    t.equal(again.headers['content-encoding'], 'gzip', `asked ${i + 1} time(s), the cache on: pre-deflated`);
  }
  await new Promise((r) => setTimeout(r, 1100));
  const cachedAfter = (await health(cacheApi.url)) as Record<string, number>;
  t.equal(cachedAfter.copy_deflated_pages - cachedBefore.copy_deflated_pages, 3, 'three pages from the copy');
  t.equal(cachedAfter.book_cache_bytes, cachedBefore.book_cache_bytes, 'the cache as it was');
  const identity = await raw(api.url, `${snapshotsPath(over[0])}?limit=100`, 'identity');
  t.equal(identity.headers['content-encoding'], undefined, 'identity when gzip is not taken');
  const brotli = await raw(api.url, `${snapshotsPath(over[0])}?limit=100&order=desc`, 'br, gzip');
  t.equal(brotli.headers['content-encoding'], 'br', 'a shape not pre-deflated: brotli when taken');
});

t.test('a copy that is missing: the page by SQL, the copy written again, then read', async (t) => {
  const m = over.find((x) => x.venue === 'wallet-prediction')!;
  const file = books.find((f) => f.markets?.[m.market_id])!;
  const copy = servingCopyPath(api.lake.paths.serving, file.sha256);
  const url = `${snapshotsPath(m)}?limit=50`;
  const expected = (await page(sqlApi.url, url)).text;
  t.equal((await page(api.url, url)).text, expected, 'read from the copy');
  await fs.rm(copy);
  // A copy never changes once written: a process that has it open reads what it would read again.
  t.equal((await page(api.url, url)).text, expected, 'removed, the same page from the process that keeps it open');
  // Another API over the lake, which never opened it.
  const fresh = await startApi(testConfig(dir, { RATE_PAID_PER_SECOND: '100000', BOOK_CACHE_MB: '0' }), duck, createClock(END, 1), quiet, {
    port: 0,
  });
  t.teardown(() => fresh.stop());
  const reads = (await health(fresh.url)).copy_reads as number;
  t.equal((await page(fresh.url, url)).text, expected, 'served by SQL meanwhile');
  // Written in the background; health is cached for a second, the file is not.
  for (let i = 0; i < 600 && !(await fs.stat(copy).catch(() => null)); i++) await new Promise((r) => setTimeout(r, 50));
  t.ok(await fs.stat(copy).catch(() => null), 'written again by the API');
  t.equal((await page(fresh.url, url)).text, expected, 'and the same page from it');
  await new Promise((r) => setTimeout(r, 1100));
  const now = await health(fresh.url);
  t.ok((now.copy_reads as number) > reads, 'read from the copy');
  t.ok((now.copies_written as number) >= 1, 'counted in health');
});

t.test('a market in several files, interleaved in time, comes out in SQL order; a file out of order has no copy', async (t) => {
  const work = testdir(t);
  const scratch = await Duck.open(1);
  t.teardown(() => scratch.close());
  const T0 = Date.parse('2026-07-26T12:00:00Z');
  const table = (keep: string) => `SELECT epoch_ms(${T0} + i * 1000)::TIMESTAMPTZ AS ts, m AS market_id, 'tok-' || o AS token_id,
      o::INTEGER AS outcome_index, CASE o WHEN 0 THEN 'Up' ELSE 'Down' END AS outcome,
      CASE WHEN i % 5 = 0 THEN NULL ELSE epoch_ms(${T0} + i * 1000 - 40)::TIMESTAMPTZ END AS exchange_ts,
      [round(0.5 - i % 7 * 0.01, 2), 0.4]::DOUBLE[] AS bid_prices, [i * 1.5, 10.25]::DOUBLE[] AS bid_sizes,
      [0.6, 0.61]::DOUBLE[] AS ask_prices, [o + 0.5, 3.0]::DOUBLE[] AS ask_sizes
    FROM range(300) r(i), range(2) x(o), (VALUES ('m1'), ('m2')) v(m) WHERE ${keep}`;
  const files = ['a', 'b'].map((name) => path.join(work, `${name}.parquet`));
  // Interleaved stretches of time: a busy hour sealed in pieces, or a late file.
  await scratch.run(`COPY (${table('i % 40 < 20')} ORDER BY market_id, ts, outcome_index) TO '${files[0]}' (FORMAT parquet)`);
  await scratch.run(`COPY (${table('i % 40 >= 20')} ORDER BY market_id, ts, outcome_index) TO '${files[1]}' (FORMAT parquet)`);
  for (const [i, f] of files.entries()) t.ok(await writeServingCopy(scratch, f, `sha-${i}`, work), `copy of ${f}`);
  const copies = new ServingCopies(work);
  t.teardown(() => copies.close());
  const [from, to] = [T0 + 15_000, T0 + 250_000];
  const got = await copies.market([{ sha256: 'sha-0' }, { sha256: 'sha-1' }], 'm2', from, to);
  const { sql, params } = marketBooksSql(`SELECT * FROM ${parquetSource(files)}`, 'm2', from, to);
  const want = marketBooks(await scratch.chunks(sql, params));
  t.ok(got && want.ts.length > 400);
  t.same(Array.from(got!.ts), Array.from(want.ts), 'times');
  t.same(Array.from(got!.outcome), Array.from(want.outcome), 'outcomes');
  const text = (b: typeof want, i: number) =>
    `${b.heads.subarray(i * 47, (i + 1) * 47).toString()}${b.ladder.subarray(b.ladderAt[i], b.ladderAt[i + 1]).toString()}${b.summary.subarray(b.summaryAt[i], b.summaryAt[i + 1]).toString()}`;
  let same = 0;
  for (let i = 0; i < want.ts.length; i++) if (text(got!, i) === text(want, i)) same++;
  t.equal(same, want.ts.length, 'every book rendered the same');
  // A page read piecewise from interleaved files falls back to the whole market, merged.
  for (const order of ['asc', 'desc'] as const) {
    const q = { from, to, order, after: null, intervalMs: null, outcomeIndex: null };
    const piecewise = await copies.page([{ sha256: 'sha-0' }, { sha256: 'sha-1' }], 'm2', {
      span: { from, to },
      q,
      ladders: true,
      maxTimes: 50,
    });
    t.equal(
      piecewise && 'json' in piecewise && piecewise.json.toString(),
      pageFromBooks(want, q, true, 50).json.toString(),
      `a page ${order}`,
    );
  }
  t.equal(await copies.market([{ sha256: 'sha-0' }, { sha256: 'none' }], 'm2', from, to), null, 'a file without a copy: null');
  t.same(await copies.missing([{ sha256: 'sha-0' }, { sha256: 'none' }]), [{ sha256: 'none' }]);
  const unordered = path.join(work, 'c.parquet');
  await scratch.run(`COPY (${table('true')} ORDER BY ts, market_id) TO '${unordered}' (FORMAT parquet)`);
  t.equal(await writeServingCopy(scratch, unordered, 'sha-c', work), null, 'rows not in (market, time) order: no copy');
  t.notOk(await fs.stat(servingCopyPath(work, 'sha-c')).catch(() => null), 'and nothing left behind');
});

t.test('summaries are cut from the ladders byte for byte, whatever the labels and numbers', async (t) => {
  const work = testdir(t);
  const scratch = await Duck.open(1);
  t.teardown(() => scratch.close());
  const T0 = Date.parse('2026-07-26T12:00:00Z');
  const file = path.join(work, 'odd.parquet');
  // Labels holding the keys the cut looks for, quotes, backslashes and UTF-8; lists empty, tiny, huge and long.
  await scratch.run(`COPY (SELECT epoch_ms(${T0} + i * 1000)::TIMESTAMPTZ AS ts, 'm' AS market_id, 'tok-' || o AS token_id,
      o::INTEGER AS outcome_index,
      CASE o WHEN 0 THEN 'Up ,"bid_prices":[0.1],"ask_prices":[' ELSE 'Dówn \\ "ask" 上' END AS outcome,
      CASE WHEN i % 3 = 0 THEN NULL ELSE epoch_ms(${T0} + i * 1000 - 7)::TIMESTAMPTZ END AS exchange_ts,
      CASE WHEN i % 4 = 0 THEN []::DOUBLE[] ELSE [round(0.5 - i % 7 * 0.01, 2), 1e-7, 0.1 + 0.2]::DOUBLE[] END AS bid_prices,
      CASE WHEN i % 4 = 0 THEN []::DOUBLE[] ELSE [i * 1.1, 1e21, 3.0000000001]::DOUBLE[] END AS bid_sizes,
      CASE WHEN i % 5 = 0 THEN []::DOUBLE[] ELSE [0.6, 0.61]::DOUBLE[] END AS ask_prices,
      CASE WHEN i % 5 = 0 THEN []::DOUBLE[] ELSE [o + 0.5, i / 3]::DOUBLE[] END AS ask_sizes
    FROM range(250) r(i), range(2) x(o) ORDER BY ts, outcome_index) TO '${file}' (FORMAT parquet)`);
  t.ok(await writeServingCopy(scratch, file, 'sha-odd', work), 'a copy');
  const copies = new ServingCopies(work);
  t.teardown(() => copies.close());
  const got = await copies.market([{ sha256: 'sha-odd' }], 'm', T0, T0 + 250_000);
  const { sql, params } = marketBooksSql(`SELECT * FROM ${parquetSource([file])}`, 'm', T0, T0 + 250_000);
  const want = marketBooks(await scratch.chunks(sql, params));
  const views = (b: typeof want) =>
    Array.from(b.ts, (_, i) => [
      b.ladder.subarray(b.ladderAt[i], b.ladderAt[i + 1]),
      b.summary.subarray(b.summaryAt[i], b.summaryAt[i + 1]),
    ]);
  t.equal(got?.ts.length, 500);
  const [a, b] = [views(got!), views(want)];
  t.equal(a.filter(([l, s], i) => l.equals(b[i][0]) && s.equals(b[i][1])).length, 500, 'every book, both views');
  t.ok(
    b.some(([, s]) => s.includes('"best_bid":null')),
    'empty lists',
  );
  t.ok(
    b.some(([l, s]) => l.includes('1e+21') && s.includes('"bid_depth":999999999999999900000')),
    'exponents and huge depths',
  );
  for (const order of ['asc', 'desc'] as const) {
    const q = { from: T0, to: T0 + 250_000, order, after: null, intervalMs: null, outcomeIndex: 1 };
    const piece = await copies.page([{ sha256: 'sha-odd' }], 'm', {
      span: { from: T0, to: T0 + 250_000 },
      q,
      ladders: false,
      maxTimes: 30,
    });
    t.equal(
      piece && 'json' in piece && piece.json.toString(),
      pageFromBooks(want, q, false, 30).json.toString(),
      `a page of summaries, ${order}`,
    );
  }
});

t.test('a copy damaged on disk: the page by SQL, the copy removed and written again', async (t) => {
  const m = over.find((x) => x.venue === 'polymarket')!;
  const file = books.find((f) => f.markets?.[m.market_id])!;
  const copy = servingCopyPath(api.lake.paths.serving, file.sha256);
  const whole = await fs.readFile(copy);
  // The index and trailer intact, the blocks they point at gone.
  const indexLength = whole.readUInt32LE(whole.length - TRAILER);
  await fs.writeFile(copy, Buffer.concat([Buffer.alloc(64), whole.subarray(whole.length - TRAILER - indexLength)]));
  const url = `${snapshotsPath(m)}?limit=20&include_orderbook=true`;
  const expected = (await page(sqlApi.url, url)).text;
  // Another API over the lake: this one has not read the damaged copy's index before.
  const fresh = await startApi(testConfig(dir, { RATE_PAID_PER_SECOND: '100000', BOOK_CACHE_MB: '0' }), duck, createClock(END, 1), quiet, {
    port: 0,
  });
  t.teardown(() => fresh.stop());
  t.equal((await page(fresh.url, url)).text, expected, 'served by SQL');
  for (let i = 0; i < 600 && (await fs.stat(copy).catch(() => null))?.size !== whole.length; i++)
    await new Promise((r) => setTimeout(r, 50));
  t.ok((await fs.readFile(copy)).equals(whole), 'written again, the same bytes as the seal wrote');
  t.equal((await page(fresh.url, url)).text, expected, 'and the page from it');
});

t.test('a damaged chunk or table: never sent or cut from, the copy removed and written again', async (t) => {
  // A 15-minute market in one file: pages of 100 cover whole chunks.
  const m = over
    .filter((x) => x.venue === 'wallet-prediction' && x.window === '15m' && books.filter((f) => f.markets?.[x.market_id]).length === 1)
    .at(-1)!;
  const file = books.find((f) => f.markets?.[m.market_id])!;
  const copy = servingCopyPath(api.lake.paths.serving, file.sha256);
  const whole = await fs.readFile(copy);
  const indexLength = whole.readUInt32LE(whole.length - TRAILER);
  const indexAt = whole.length - TRAILER - indexLength;
  const index = JSON.parse(whole.subarray(indexAt, whole.length - TRAILER).toString()) as CopyIndex;
  const [offset, length, rows, table] = index.markets[m.market_id];
  const { table: chunks } = decodeTable(whole.subarray(offset, offset + table), rows, index.chunkTimes, length - table);
  const entry = `"${m.market_id}":[${offset},${length}`;
  const damages = {
    // A byte in the middle of the first chunk: a gzip page would send it as it is.
    chunk: offset + table + Math.floor((chunks.at[0] + chunks.at[1]) / 2),
    table: offset + Math.floor(table / 2),
    // The last digit of the market's length in the index: still JSON, pointing its pages at other bytes.
    index: whole.indexOf(entry, indexAt) + entry.length - 1,
  };
  const url = `${snapshotsPath(m)}?limit=100`;
  const expected = (await page(sqlApi.url, url)).text;
  for (const [name, at] of Object.entries(damages)) {
    for (const encoding of ['gzip', 'identity']) {
      const damaged = Buffer.from(whole);
      // A digit stays a digit (0x30-0x39 flipped in its low bit), any other byte is flipped wholly.
      damaged[at] ^= name === 'index' ? 0x01 : 0x5a;
      await fs.writeFile(copy, damaged);
      // Another API over the lake: none has read the damaged copy's index before.
      const fresh = await startApi(
        testConfig(dir, { RATE_PAID_PER_SECOND: '100000', BOOK_CACHE_MB: '0' }),
        duck,
        createClock(END, 1),
        quiet,
        {
          port: 0,
        },
      );
      const got = await raw(fresh.url, url, encoding);
      const text = (got.headers['content-encoding'] === 'gzip' ? zlib.gunzipSync(got.body) : got.body).toString();
      t.equal(text.slice(0, text.indexOf(',"meta":')), expected, `a damaged ${name}, ${encoding}: the page as SQL answers it`);
      for (let i = 0; i < 600 && !(await fs.readFile(copy).catch(() => Buffer.alloc(0))).equals(whole); i++)
        await new Promise((r) => setTimeout(r, 50));
      t.ok((await fs.readFile(copy)).equals(whole), 'written again, the same bytes as the seal wrote');
      const again = await raw(fresh.url, url, encoding);
      t.equal(again.headers['content-encoding'], encoding === 'gzip' ? 'gzip' : undefined);
      const served = (encoding === 'gzip' ? zlib.gunzipSync(again.body) : again.body).toString();
      t.equal(served.slice(0, served.indexOf(',"meta":')), expected, 'and the page from it');
      await fresh.stop();
    }
  }
});

t.test('make serving-copies writes what is missing, removes what no file names, and is idempotent', async (t) => {
  const files = api.lake.sealedFiles().map((f) => ({ ...f, dataset: f.partition.dataset }));
  const serving = api.lake.paths.serving;
  const lost = books[books.length - 1];
  await fs.rm(servingCopyPath(serving, lost.sha256));
  // A copy of a file compacted away an hour ago, and one a seal wrote a moment ago before its commit.
  const [old, young] = ['0'.repeat(64), '1'.repeat(64)].map((sha) => servingCopyPath(serving, sha));
  for (const f of [old, young]) {
    await fs.mkdir(path.dirname(f), { recursive: true });
    await fs.writeFile(f, 'stale');
  }
  const hourAgo = new Date(Date.now() - 2 * 3_600_000);
  await fs.utimes(old, hourAgo, hourAgo);
  const first = await refreshServingCopies(duck, api.lake.paths.lake, serving, files);
  t.same(first, { written: 1, present: books.length - 1, unwritable: 0, removed: 1 });
  t.ok(await fs.stat(servingCopyPath(serving, lost.sha256)), 'the lost copy is back');
  t.notOk(await fs.stat(old).catch(() => null), 'the orphan is gone');
  t.ok(await fs.stat(young), 'a fresh copy stays (its commit may be on its way)');
  t.same(await refreshServingCopies(duck, api.lake.paths.lake, serving, files), {
    written: 0,
    present: books.length,
    unwritable: 0,
    removed: 0,
  });
});
