// make bench-recent: pages of the newest hour's markets (rows still in the spool: recording, or
// over and not sealed yet, the markets users look at most) against PostgreSQL holding the same
// rows. The 1-day bench lake (bench/lake.ts) is copied and its last hour's books moved back into
// the spool by the service's own Spool writer, as capture leaves them; the service reads them
// followed in memory (api/livebooks.ts) and, with BOOK_CACHE_MB=0, by SQL over the spool's JSON.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Window } from '../src/config.js';
import { Duck } from '../src/lake/duckdb.js';
import { listFiles } from '../src/lake/fsutil.js';
import { lakePaths, partitionDir, partitionOf } from '../src/lake/layout.js';
import { readManifest } from '../src/lake/manifest.js';
import { parquetSource } from '../src/lake/sql.js';
import { Spool } from '../src/lake/spool.js';
import { commitFiles } from '../src/lake/writer.js';
import type { BookRow } from '../src/records.js';
import { HOUR } from '../src/time.js';
import { END, buildLake } from './lake.js';
import { ensureTools, startPostgres } from './pg.js';
import { writeSection } from './report.js';
import { child } from './servers.js';
import { type WrkFigure, figureText, inTurns, wrkRun } from './tools.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const COINS = ['btc', 'eth', 'bnb'];
const WINDOWS: Window[] = ['5m', '15m'];

await ensureTools();
const root = process.env.BENCH_ROOT ?? (await fs.mkdtemp(path.join(os.tmpdir(), 'bench-recent-')));
const duck = await Duck.open(2);
const lake = await buildLake(duck, root, 1);

// The newest hour back in the spool: its books files' rows appended as capture appends them (one run per market), the files dropped.
const dir = path.join(root, 'lake-1d-recent');
await fs.rm(dir, { recursive: true, force: true });
execFileSync('cp', ['-a', lake.dir, dir]);
const paths = lakePaths(dir);
const spool = new Spool(paths.spool);
let spooled = 0;
for (const coin of COINS) {
  for (const window of WINDOWS) {
    const p = partitionOf('books', 'wallet-prediction', coin, window, END - HOUR);
    const { files } = await readManifest(paths.manifest, p);
    const sources = files.map((f) => path.join(paths.lake, partitionDir(p), f.name));
    const rows =
      await duck.rows(`SELECT epoch_ms(ts)::DOUBLE AS ts, epoch_ms(recv_ts)::DOUBLE AS recv_ts, market_id, token_id, outcome_index,
        outcome, epoch_ms(exchange_ts)::DOUBLE AS exchange_ts, bid_prices, bid_sizes, ask_prices, ask_sizes
      FROM ${parquetSource(sources)} ORDER BY market_id, ts, outcome_index`);
    spool.append(
      p,
      rows.map((r) => ({
        ...(r as unknown as BookRow),
        verified_by: null,
        hash_check: null,
        price_decimals: null,
        size_decimals: null,
        level_texts: null,
        hash_fields: null,
        venue_hash: null,
      })),
    );
    spooled += rows.length;
    await spool.flush();
    await commitFiles(
      paths.lake,
      paths.manifest,
      path.join(dir, 'trash'),
      p,
      [],
      files.map((f) => f.name),
    );
  }
}
await spool.close();

const pg = startPostgres(root, duck, path.join(root, 'pg-recent'));
const parquet = (await listFiles(lakePaths(lake.dir).lake, '.parquet'))
  .filter((f) => f.startsWith('books/'))
  .map((f) => path.join(lakePaths(lake.dir).lake, f));
const loaded = await pg.load('books', parquet);
const followed = child('service', { COMPARE_DIR: dir });
const bySql = child('service', { COMPARE_DIR: dir, BOOK_CACHE_MB: '0' });
const pgServer = child('pg', { COMPARE_PG_PORT: String(pg.port) });
const [svc, sqlSvc, pgs] = [await followed.ready, await bySql.ready, await pgServer.ready];

async function getJson(url: string, key?: string): Promise<any> {
  const res = await fetch(url, { headers: key ? { authorization: `Bearer ${key}` } : {} });
  if (res.status !== 200) throw new Error(`${url}: HTTP ${res.status}`);
  return res.json();
}
const markets: { market_id: string; start_time: string }[] = (
  await getJson(`${svc.url}/v3/wallet-prediction/markets?limit=200&start_time=${END - HOUR}&end_time=${END}`, svc.key)
).data.filter((m: { start_time: string }) => Date.parse(m.start_time) >= END - HOUR);
const ours = {
  first: markets.map((m) => `/v3/wallet-prediction/${m.market_id}/snapshots?limit=100`),
  newest: markets.map((m) => `/v3/wallet-prediction/${m.market_id}/snapshots?limit=100&order=desc`),
};
const theirs = { first: markets.map((m) => `/snapshots/${m.market_id}?limit=100`) };
// Every first page equal on all three before timing (PostgreSQL's server walks forward only).
for (const [i, m] of markets.entries()) {
  const want = JSON.stringify((await getJson(`${pgs.url}${theirs.first[i]}`)).data);
  for (const s of [svc, sqlSvc]) {
    for (let again = 0; again < 2; again++) {
      const got = JSON.stringify((await getJson(`${s.url}${ours.first[i]}`, s.key)).data);
      if (got !== want) throw new Error(`market ${m.market_id}: the first pages disagree`);
    }
  }
}
console.log(`${markets.length} markets in the spool, first pages equal`);

const wrk = (base: string, paths: string[], connections: number, key?: string) =>
  wrkRun(path.join(root, `wrk-${process.pid}.lua`), base, paths, connections, key ? { authorization: `Bearer ${key}` } : {}, SECONDS);
const table: string[] = [];
const verdicts: string[] = [];
for (const connections of [1, 4]) {
  const [live, p] = await inTurns(
    () => wrk(svc.url, ours.first, connections, svc.key),
    () => wrk(pgs.url, theirs.first, connections),
  );
  const [sql] = await inTurns(
    () => wrk(sqlSvc.url, ours.first, connections, sqlSvc.key),
    async () => p,
  );
  const newest = (
    await inTurns(
      () => wrk(svc.url, ours.newest, connections, svc.key),
      async () => p,
    )
  )[0];
  const row = (label: string, s: WrkFigure) =>
    `| ${label} | ${connections} | ${figureText(s)} | ${figureText(p)} | ${(s.p50 / p.p50).toFixed(2)} | ${(s.p99 / p.p99).toFixed(2)} | ${(s.rps / p.rps).toFixed(2)} |`;
  table.push(
    row('first page, followed in memory', live),
    row('newest page (order=desc), followed', newest),
    row('first page by SQL (BOOK_CACHE_MB=0)', sql),
  );
  verdicts.push(
    `- ${connections} connection(s): followed p50 at most PostgreSQL's: ${live.p50 <= p.p50 && newest.p50 <= p.p50 ? 'met' : '**missed**'}; p99 at most PostgreSQL's: ${live.p99 <= p.p99 && newest.p99 <= p.p99 ? 'met' : '**missed**'}.`,
  );
  console.log(connections, 'followed', figureText(live), 'newest', figureText(newest), 'sql', figureText(sql), 'pg', figureText(p));
}
const after = (await getJson(`${svc.url}/v3/health`)).data.api.pages;
if (!(after.live_pages > 0)) throw new Error(`the service followed no market: ${JSON.stringify(after)}`);
for (const s of [followed, bySql, pgServer]) s.proc.stdin!.end();
await Promise.all([followed, bySql, pgServer].map((s) => new Promise((r) => s.proc.once('exit', r))));
pg.stop();
await duck.close();
await writeSection(
  '## The newest hour against PostgreSQL',
  `## The newest hour against PostgreSQL (\`make bench-recent\`)

Machine: ${os.cpus().length} x ${os.cpus()[0]?.model ?? 'unknown'}, ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}, PostgreSQL ${pg.version()}, ${new Date().toISOString().slice(0, 10)}.
The 1-day lake of bench-compare with its last hour's books (${spooled.toLocaleString('en')} rows, ${markets.length} markets) moved back into the
spool by the service's Spool writer, as capture leaves a market still recording or over and not sealed yet; PostgreSQL holds the
whole day (${loaded.rows.toLocaleString('en')} rows, loaded in ${loaded.seconds.toFixed(0)} s). The service as \`make api\` runs it (${svc.workers} workers), its default
book cache: a market's second page on a worker starts following its spool parts (api/livebooks.ts: each line rendered once,
as sealing will render it; later pages read only what was appended). A second process with \`BOOK_CACHE_MB=0\` follows nothing:
every page one statement over the spool's JSON. Every first page was checked equal on all three before timing. wrk (1 thread) cycles
over the ${markets.length} markets for ${SECONDS} s a run, the sides in turns, twice each, the better run shown. Capture appends nothing
during the runs: a market being recorded adds, per page, the read of what its parts gained since the page before (a stat and a
read of a few KB per part).

| page | connections | this service p50 / p99, req/s | PostgreSQL p50 / p99, req/s | p50 ratio | p99 ratio | req/s ratio |
|---|---|---|---|---|---|---|
${table.join('\n')}

${verdicts.join('\n')}

The service's pages counters after the runs (the worker that answered): ${after.live_markets} markets followed, ${after.live_pages.toLocaleString('en')} pages
from them, ${(after.live_bytes / 2 ** 20).toFixed(1)} MiB held.
`,
);
if (!process.env.BENCH_ROOT) await fs.rm(root, { recursive: true, force: true });
