// make bench-profile: where a cold page's time goes on the SQL path (issue 22). One API process
// over the 1-day bench lake with the book cache off, wrk asking first pages of 50 markets on one
// connection while the V8 CPU profiler samples the process; the samples' self time is summed by
// what the code is (DuckDB's binding, our rendering, Koa, Node's HTTP, GC, waiting), and the page's
// statement is timed alone through the same binding. Figures go into BENCHMARKS.md.
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import { Session } from 'node:inspector/promises';
import os from 'node:os';
import path from 'node:path';
import { openSync } from 'node:fs';
import { startApi } from '../src/api/server.js';
import { planPartitions, snapshotPageSql } from '../src/api/plan.js';
import { createClock } from '../src/clock.js';
import { loadConfig } from '../src/config.js';
import { Duck } from '../src/lake/duckdb.js';
import { LakeReader } from '../src/lake/reader.js';
import { lakePaths } from '../src/lake/layout.js';
import { relation } from '../src/lake/sql.js';
import { createLogger } from '../src/log.js';
import { END, buildLake } from './lake.js';
import { writeSection } from './report.js';
import { type WrkFigure, aptInstall, commandMissing, writeWrkScript, wrkFigure } from './tools.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
if (commandMissing('wrk')) aptInstall(['wrk']);
const root = process.env.BENCH_ROOT ?? (await fs.mkdtemp(path.join(os.tmpdir(), 'bench-profile-')));
const duck = await Duck.open(2);
const lake = await buildLake(duck, root, 1);
const config = loadConfig({
  ...process.env,
  DATA_DIR: lake.dir,
  RATE_PAID_PER_SECOND: '100000',
  BOOK_CACHE_MB: '0',
  SERVING_COPIES: 'off',
  LOG_LEVEL: 'info',
});
const api = await startApi(config, duck, createClock(END, 1), createLogger('info', 'api', openSync('/dev/null', 'w')), { port: 0 });
const { key } = await api.keys.issue('paid', 'bench-profile');
const auth = { authorization: `Bearer ${key}` };
const markets = (
  (await (await fetch(`${api.url}/v3/wallet-prediction/markets?window=15m&limit=200&end_time=${END}`, { headers: auth })).json()) as {
    data: { market_id: string }[];
  }
).data
  .filter((_, i) => i % 4 === 0)
  .slice(0, 50);
const pages = markets.map((m) => `/v3/wallet-prediction/${m.market_id}/snapshots?limit=100`);

/** wrk on one connection cycling over `pages`. Asynchronous: the API answers on this thread. */
const script = path.join(root, `wrk-${process.pid}.lua`);
await writeWrkScript(script, pages, auth);
function wrk(seconds: number): Promise<WrkFigure> {
  return new Promise((resolve, reject) =>
    execFile('wrk', ['-t1', '-c1', `-d${seconds}s`, '--latency', '-s', script, api.url], { encoding: 'utf8' }, (err, out) => {
      if (err) reject(err);
      else {
        try {
          resolve(wrkFigure(out));
        } catch (e) {
          reject(e);
        }
      }
    }),
  );
}

await wrk(2);
const session = new Session();
session.connect();
await session.post('Profiler.enable');
await session.post('Profiler.setSamplingInterval', { interval: 200 });
await session.post('Profiler.start');
const figure = await wrk(SECONDS);
const { profile } = await session.post('Profiler.stop');
session.disconnect();

// Self time by what the sampled code is.
const KINDS: [string, (url: string, fn: string) => boolean][] = [
  ['waiting (idle: DuckDB runs the statement on the threadpool)', (_u, fn) => fn === '(idle)'],
  ['garbage collection', (_u, fn) => fn === '(garbage collector)'],
  ['DuckDB binding (JS side: results to vectors and values)', (u) => u.includes('@duckdb')],
  ['rendering JSON from the result vectors (api/shape.ts)', (u) => u.includes('/src/api/shape')],
  ['the page route, plan and SQL text (api/*)', (u) => u.includes('/src/api/')],
  ['lake reader (file lists, spool checks)', (u) => u.includes('/src/lake/')],
  ['Koa, router, ajv, pino', (u) => /node_modules\/(koa|@koa|ajv|pino|fast-json)/.test(u)],
  ['Node: HTTP, streams, zlib, timers', (u) => u.startsWith('node:')],
  ['native and other', () => true],
];
const nodes = new Map(profile.nodes.map((n) => [n.id, n]));
const selfUs = new Map<number, number>();
const deltas = profile.timeDeltas ?? [];
(profile.samples ?? []).forEach((id, i) => selfUs.set(id, (selfUs.get(id) ?? 0) + (deltas[i] ?? 0)));
const byKind = new Map<string, number>();
let total = 0;
for (const [id, us] of selfUs) {
  const { url, functionName } = nodes.get(id)!.callFrame;
  const kind = KINDS.find(([, test]) => test(url, functionName))![0];
  byKind.set(kind, (byKind.get(kind) ?? 0) + us);
  total += us;
}
const requests = figure.rps * SECONDS;

// The page's statement alone, through the same binding (the first market's first page, prepared as the route does).
const reader = new LakeReader(duck, lakePaths(lake.dir));
await reader.open();
const m = reader.market('wallet-prediction', markets[0].market_id, END)!;
const plan = planPartitions('books', m, null, null);
const wide = relation('books', await reader.files(plan.partitions))!;
const statement = snapshotPageSql(
  wide,
  { marketId: m.market_id, from: plan.from, to: plan.to, order: 'asc', after: null, limit: 100, intervalMs: null, outcomeIndex: null },
  202,
);
const times: number[] = [];
for (let i = 0; i < 200; i++) {
  const began = performance.now();
  await duck.rows(statement.sql, statement.params);
  times.push(performance.now() - began);
}
times.sort((a, b) => a - b);
await api.stop();
await duck.close();
const rows = [...byKind]
  .sort((a, b) => b[1] - a[1])
  .map(([kind, us]) => `| ${kind} | ${(us / 1000 / requests).toFixed(2)} | ${((100 * us) / total).toFixed(1)}% |`);
await writeSection(
  '## Where a cold page goes (SQL path, book cache off)',
  `## Where a cold page goes (SQL path, book cache off)

\`make bench-profile\` (${new Date().toISOString().slice(0, 10)}, ${os.cpus().length} cores, ${os.cpus()[0].model}, Node ${process.version}): one API
process over the 1-day bench lake with \`BOOK_CACHE_MB=0\`, wrk on one connection for ${SECONDS} s cycling over the first
100-snapshot page of 50 markets, the V8 profiler sampling the API's thread every 200 us. ${figure.rps.toFixed(0)} pages/s, p50
${figure.p50.toFixed(2)} ms. The page's statement alone, through the same binding (200 runs, one market): p50
${times[100].toFixed(2)} ms, p90 ${times[180].toFixed(2)} ms.

| the API thread's time, by what runs | ms per page | share |
|---|---|---|
${rows.join('\n')}

"Waiting" is the thread idle while DuckDB reads and decodes the Parquet row groups (the four ladder lists are most of
that: see the floor measured in issue 22) on the threadpool; the rest is work on the one thread that a second core
could take (\`make api\` runs a process per core). So the statement is the page: rendering, Koa and Node together cost
less than a third of it, and no tuning of them reaches PostgreSQL's page (6.0 ms p50 in issue 22's run) by half. What
would is not decoding the ladders per request: a serving copy written at seal (each snapshot's rendered bytes and an
index by time, a page a read and a slice), tested to answer the same bytes as this path.
`,
);
