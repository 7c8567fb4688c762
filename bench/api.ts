// make bench-api: a 1-day and a 90-day lake (bench/lake.ts), then the API under autocannon on loopback.
// Figures go into BENCHMARKS.md.
import fs from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import pino from 'pino';
import { writeSection } from './report.js';
import { startApi } from '../src/api/server.js';
import { createClock } from '../src/clock.js';
import { loadConfig } from '../src/config.js';
import { Duck } from '../src/lake/duckdb.js';
import { DAY } from '../src/time.js';
import { END, buildLake } from './lake.js';

const DAYS = (process.env.BENCH_DAYS ?? '1,90').split(',').map(Number);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
// BENCH_ROOT keeps the lakes between runs (a 90-day build takes 20-25 minutes); a lake is reused once complete.
const root = process.env.BENCH_ROOT ?? (await fs.mkdtemp(path.join(os.tmpdir(), 'bench-api-')));
const duck = await Duck.open(2);

interface Figure {
  route: string;
  p50: number;
  p99: number;
  rps: number;
}

async function load(url: string, key: string, paths: string[], connections: number): Promise<autocannon.Result> {
  return autocannon({
    url,
    connections,
    duration: SECONDS,
    headers: { authorization: `Bearer ${key}` },
    requests: paths.map((p) => ({ method: 'GET', path: p })),
  });
}

/**
 * Sequential requests on one keep-alive connection per server, taking turns between the servers
 * (one per lake), timed to the microsecond: the noise of a shared 2-core machine falls on every
 * lake alike, so their ratio is the lakes' and not the minute's.
 */
async function interleaved(servers: Served[], route: string, seconds: number): Promise<{ p50: number; p99: number }[]> {
  const agents = servers.map(() => new http.Agent({ keepAlive: true, maxSockets: 1 }));
  const times: number[][] = servers.map(() => []);
  const until = performance.now() + seconds * 1000;
  for (let i = 0; performance.now() < until; i++) {
    for (const [s, server] of servers.entries()) {
      const target = server.routes[route][i % server.routes[route].length];
      const started = performance.now();
      await new Promise<void>((resolve, reject) => {
        http
          .get(`${server.url}${target}`, { agent: agents[s], headers: { authorization: `Bearer ${server.key}` } }, (res) => {
            if (res.statusCode !== 200) reject(new Error(`${target}: HTTP ${res.statusCode}`));
            res.resume();
            res.on('end', resolve);
          })
          .on('error', reject);
      });
      times[s].push(performance.now() - started);
    }
  }
  for (const agent of agents) agent.destroy();
  return times.map((t) => {
    t.sort((a, b) => a - b);
    const at = (q: number) => Math.round(t[Math.min(t.length - 1, Math.floor(q * t.length))] * 100) / 100;
    return { p50: at(0.5), p99: at(0.99) };
  });
}

interface Startup {
  seconds: number;
  index_ms: number;
  catalogue_ms: number;
}

/** Starts the API on the lake; the log line of the load gives the phases. */
async function start(dir: string): Promise<{ api: Awaited<ReturnType<typeof startApi>>; startup: Startup }> {
  const config = loadConfig({ DATA_DIR: dir, RATE_PAID_PER_SECOND: '100000', LOG_LEVEL: 'silent' });
  const started = performance.now();
  // Request lines are built as in production (their cost is in the figures); only the load line is kept.
  let loaded = { index_ms: 0, catalogue_ms: 0 };
  const log = pino({ level: 'info' }, { write: (line: string) => void (line.includes('"lake loaded"') && (loaded = JSON.parse(line))) });
  const api = await startApi(config, duck, createClock(END, 1), log, { port: 0 });
  return { api, startup: { seconds: (performance.now() - started) / 1000, index_ms: loaded.index_ms, catalogue_ms: loaded.catalogue_ms } };
}

/** A first start: no checkpoints, so every manifest and every market file is read. */
async function firstStart(dir: string): Promise<Startup> {
  for (const f of ['index.ndjson', 'catalogue.ndjson']) await fs.rm(path.join(dir, 'state', f), { force: true });
  const { api, startup } = await start(dir);
  await api.stop();
  return startup;
}

interface Served {
  url: string;
  key: string;
  /** Per route, the paths to cycle over. */
  routes: Record<string, string[]>;
  restart: Startup;
  markets: number;
  files: number;
}

/** Child: a restarted API on the lake, described on stdout; it stops when stdin closes. */
async function serve(dir: string): Promise<void> {
  const { api, startup: restart } = await start(dir);
  const { key } = await api.keys.issue('paid', 'bench');
  // The newest day's ended markets, the same set whatever the lake's length.
  const recent = api.lake.all(END).filter((m) => m.start_time >= END - DAY && m.end_time <= END);
  const pick = (n: number) => Array.from({ length: n }, (_, i) => recent[Math.floor((i * recent.length) / n)]);
  const ns = '/v3/wallet-prediction';
  const routes: Record<string, string[]> = {
    'orderbook/latest': pick(50).map((m) => `${ns}/${m.market_id}/orderbook/latest`),
    'snapshots, 100 per page': pick(50).map((m) => `${ns}/${m.market_id}/snapshots?limit=100`),
    'timeseries, 100 per page': pick(50).map((m) => `${ns}/${m.market_id}/timeseries?metric=chance&limit=100`),
    'markets discovery, 100 per page': ['btc', 'eth', 'bnb'].flatMap((c) =>
      ['5m', '15m'].map((w) => `${ns}/markets?coin=${c}&window=${w}&limit=100`),
    ),
  };
  const served: Served = { url: api.url, key, routes, restart, markets: api.lake.size, files: api.lake.sealedFiles().length };
  console.log(JSON.stringify(served));
  process.stdin.resume();
  await new Promise((resolve) => process.stdin.once('end', resolve));
  await api.stop();
}

// Starts and servers run in their own processes, as deployed servers would, so one lake's
// caches and heap never weigh on the other's figures.
if (process.env.BENCH_CHILD) {
  const dir = process.env.BENCH_DIR!;
  if (process.env.BENCH_CHILD === 'first') console.log(JSON.stringify(await firstStart(dir)));
  else await serve(dir);
  await duck.close();
  process.exit(0);
}

function child(mode: 'first' | 'serve', dir: string): { process: ChildProcess; first: Promise<string> } {
  const proc = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url)], {
    env: { ...process.env, BENCH_CHILD: mode, BENCH_DIR: dir, BENCH_ROOT: root },
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const first = new Promise<string>((resolve, reject) => {
    let out = '';
    proc.stdout!.on('data', (d: Buffer) => {
      out += d.toString('utf8');
      const complete = out.split('\n').slice(0, -1);
      const line = complete.find((l) => l.startsWith('{'));
      if (line) resolve(line);
    });
    proc.once('exit', (code) => reject(new Error(`bench child ${mode} ${dir} exited ${code}`)));
  });
  return { process: proc, first };
}

if (process.env.BENCH_BUILD_ONLY) {
  for (const days of DAYS) console.log(`built ${(await buildLake(duck, root, days)).dir}`);
  process.exit(0);
}
/**
 * Overload: 64 connections, far beyond what two DuckDB lanes serve, with the global in-flight
 * limit at its defaults. What is admitted must stay fast; the rest is shed at once (503 +
 * Retry-After), and nothing may time out.
 */
async function overload(server: Served): Promise<string> {
  const rows: string[] = [];
  const judged: string[] = [];
  for (const [route, target] of [
    ['orderbook/latest', 250],
    ['snapshots, 100 per page', 1000],
  ] as const) {
    const r = await autocannon({
      url: server.url,
      connections: 64,
      duration: SECONDS * 2,
      timeout: 10,
      headers: { authorization: `Bearer ${server.key}` },
      requests: server.routes[route].map((p) => ({ method: 'GET', path: p })),
    });
    const shed = (r.statusCodeStats as Record<string, { count: number }>)['503']?.count ?? 0;
    const ok = r['2xx'];
    rows.push(
      `| ${route} | ${r.latency.p50} / ${r.latency.p99} / ${r.latency.max} ms | ${Math.round(ok / (SECONDS * 2)).toLocaleString('en')}/s | ${shed.toLocaleString('en')} | ${r.timeouts} | ${r.errors} |`,
    );
    judged.push(
      `- ${route}: p99 under ${target} ms with no timeouts: ${r.latency.p99 < target && r.timeouts === 0 ? 'met' : '**missed**'} (${r.latency.p99} ms, ${r.timeouts} timeouts).`,
    );
    console.log('overload', route, r.latency.p99, ok, shed, r.timeouts);
  }
  return `## API under overload (\`make bench-api\`, \`make bench-overload\`)

Machine: ${os.cpus().length} x ${os.cpus()[0]?.model ?? 'unknown'}, Node ${process.version}, ${new Date().toISOString().slice(0, 10)}; the ${DAYS[0]}-day lake.
autocannon, 64 connections for ${SECONDS * 2} s per route, one paid key with its rate lifted (the per-key limit would
otherwise refuse most of it first), the global limit at its defaults (8 lake requests running, 32 waiting at most
250 ms; \`API_MAX_INFLIGHT\`, \`API_QUEUE\`, \`API_QUEUE_WAIT_MS\`). Latency counts every answer, shed ones included.

| route | p50 / p99 / max | served (2xx) | shed (503) | timeouts | errors |
|---|---|---|---|---|---|
${rows.join('\n')}

${judged.join('\n')}

autocannon ignores Retry-After and asks again at once, so every refusal is asked again: refusals take CPU that the
admitted requests need, and every answer, refused or served, is prompt. Refusals are summarised in the log, not
written one line each. Pages of ended markets come from the book cache, so few wait long enough to be shed.
`;
}

if (process.env.BENCH_OVERLOAD_ONLY) {
  const lake = await buildLake(duck, root, DAYS[0]);
  const server = child('serve', lake.dir);
  const served = JSON.parse(await server.first) as Served;
  await interleaved([served], 'snapshots, 100 per page', 2);
  await writeSection('## API under overload', await overload(served));
  server.process.stdin!.end();
  await new Promise((resolve) => server.process.once('exit', resolve));
  await duck.close();
  process.exit(0);
}

const lakes = [];
for (const days of DAYS) lakes.push({ days, lake: await buildLake(duck, root, days) });
const firsts: Startup[] = [];
for (const { lake } of lakes) firsts.push(JSON.parse(await child('first', lake.dir).first) as Startup);
const servers = lakes.map(({ lake }) => child('serve', lake.dir));
const served = await Promise.all(servers.map(async (s) => JSON.parse(await s.first) as Served));
const figures: Figure[][] = lakes.map(() => []);
for (const route of Object.keys(served[0].routes)) {
  await interleaved(served, route, 2); // warm: caches, metadata, the latest-book memory
  const times = await interleaved(served, route, SECONDS * 2);
  for (const [i, server] of served.entries()) {
    const four = await load(server.url, server.key, server.routes[route], 4);
    if (four.non2xx) throw new Error(`${route}: ${four.non2xx} non-2xx answers`);
    figures[i].push({ route, ...times[i], rps: four.requests.average });
  }
  console.log(
    route,
    figures.map((f) => f[f.length - 1]),
  );
}
const overloaded = await overload(served[0]);
for (const s of servers) s.process.stdin!.end();
await Promise.all(servers.map((s) => new Promise((resolve) => s.process.once('exit', resolve))));
const results = lakes.map(({ days, lake }, i) => ({
  days,
  lake,
  figures: figures[i],
  first: firsts[i],
  restart: served[i].restart,
  markets: served[i].markets,
  files: served[i].files,
}));
await duck.close();
const base = results[0];
const row = (f: Figure, i: number) => {
  const cells = results.map((r) => `${r.figures[i].p50} / ${r.figures[i].p99} ms, ${Math.round(r.figures[i].rps)}/s`).join(' | ');
  const ratio = results.length > 1 ? (results[results.length - 1].figures[i].p50 / Math.max(base.figures[i].p50, 0.001)).toFixed(2) : '-';
  return `| ${f.route} | ${cells} | ${ratio} |`;
};
function phases(s: Startup): string {
  return `${s.seconds.toFixed(1)} s (index ${(s.index_ms / 1000).toFixed(1)} s, catalogue ${(s.catalogue_ms / 1000).toFixed(1)} s)`;
}

/** The targets of the issue and the PostgreSQL reference, judged from this run's figures. */
function verdict(): string {
  const last = results[results.length - 1];
  const p50 = (r: typeof last, route: string) => r.figures.find((f) => f.route.startsWith(route))!.p50;
  const met = (ok: boolean) => (ok ? 'met' : '**missed**');
  const ratios = base.figures.map((f, i) => ({ route: f.route, ratio: last.figures[i].p50 / Math.max(f.p50, 0.001) }));
  const worst = ratios.reduce((a, b) => (b.ratio > a.ratio ? b : a));
  const latest = Math.max(...results.map((r) => p50(r, 'orderbook')));
  const snapshots = Math.max(...results.map((r) => p50(r, 'snapshots')));
  return [
    'Targets, judged from the worse of the lakes:',
    `- orderbook/latest p50 under 1 ms: ${met(latest < 1)} (${latest} ms).`,
    `- 100-snapshot page p50 under 15 ms: ${met(snapshots < 15)} (${snapshots} ms).`,
    `- ${last.days}-day to ${base.days}-day p50 ratio under 1.2 for every route: ${results.length > 1 ? `${met(worst.ratio < 1.2)} (highest: ${worst.route}, ${worst.ratio.toFixed(2)})` : 'not measured (one lake)'}.`,
    '',
    'Against PostgreSQL on the same rows, side by side in one run: see the section written by `make bench-compare`. Pages of',
    "ended markets come from the book cache (decoded once per market), so their cost does not depend on the lake's length.",
  ].join('\n');
}

const report = `## API (\`make bench-api\`)

Machine: ${os.cpus().length} x ${os.cpus()[0]?.model ?? 'unknown'}, ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}, ${new Date().toISOString().slice(0, 10)}.
Lakes: ${results.map((r) => `${r.days} day(s): ${r.files.toLocaleString('en')} sealed files, ${(r.lake.bytes / 2 ** 30).toFixed(2)} GiB, built in ${r.lake.seconds.toFixed(0)} s, ${r.markets.toLocaleString('en')} markets, API first start ${phases(r.first)}, restart ${phases(r.restart)}`).join('; ')}.
Books and metrics every second for the open market of each of 3 coins x 2 windows (synthetic ladders, 15 levels a side),
written by the lake writer. Each lake is served by its own API process, restarted from its checkpoints. p50 / p99 over
one keep-alive connection per server, requests taking turns between the servers (${SECONDS * 2} s per route, timed to the
microsecond), so machine noise falls on both lakes alike; requests/s from autocannon at 4 connections on loopback, one
server at a time. Requests cycle over 50 ended markets of the newest day (the same markets in every lake).

| route | ${results.map((r) => `${r.days}-day lake`).join(' | ')} | p50 ratio ${results.length > 1 ? `${results[results.length - 1].days}d / ${base.days}d` : ''} |
|---|${results.map(() => '---|').join('')}---|
${base.figures.map(row).join('\n')}

${verdict()}
`;
await writeSection('## API (', report);
await writeSection('## API under overload', overloaded);
if (process.env.BENCH_KEEP || process.env.BENCH_ROOT) console.log(`kept ${root}`);
else await fs.rm(root, { recursive: true, force: true });
