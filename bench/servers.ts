// The servers bench-compare and bench-recent drive, each in a process of its own: the service as
// `make api` deploys it, and a minimal Node server over PostgreSQL. Run as a child (COMPARE_CHILD),
// this module serves and exits; imported, it only offers `child`.
import { type ChildProcess, spawn } from 'node:child_process';
import { openSync } from 'node:fs';
import http from 'node:http';
import { fileURLToPath } from 'node:url';
import cluster from 'node:cluster';
import pg from 'pg';
import { startCluster } from '../src/api/cluster.js';
import { prepareApiState, startApi } from '../src/api/server.js';
import { createClock } from '../src/clock.js';
import { loadConfig } from '../src/config.js';
import { KeyStore } from '../src/edge/keys.js';
import type { RateChannel } from '../src/edge/ratelimit.js';
import { Duck } from '../src/lake/duckdb.js';
import { createLogger } from '../src/log.js';
import { END } from './lake.js';

const TS = `to_char(%s AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;
const ts = (c: string) => TS.replace('%s', c);
const BOOK = `json_build_object('outcome_index', outcome_index, 'outcome', outcome, 'token_id', token_id, 'exchange_time', ${ts('exchange_ts')},
  'bid_prices', bid_prices, 'bid_sizes', bid_sizes, 'ask_prices', ask_prices, 'ask_sizes', ask_sizes)`;

// --- children: each server in a process of its own -----------------------------------------

/**
 * The service as `make api` deploys it: API_WORKERS processes (one per core) on one port, keys'
 * limits held by the primary, restarted over the lake, request log lines built (and dropped).
 */
async function serveService(dir: string): Promise<void> {
  const config = loadConfig({ ...process.env, DATA_DIR: dir, RATE_PAID_PER_SECOND: '100000', LOG_LEVEL: 'info' });
  // COMPARE_LOG: a file to keep the request log in (by hand: each request's time inside the service).
  const log = createLogger('info', 'api', openSync(process.env.COMPARE_LOG ?? '/dev/null', 'a'));
  const workers = config.api.workers;
  if (cluster.isPrimary && workers > 1) {
    await prepareApiState(config);
    const { key } = await KeyStore.at(dir).issue('paid', 'bench-compare');
    const api = await startCluster(workers, log, { incrementalMarking: config.api.incrementalMarking });
    console.log(JSON.stringify({ url: `http://${config.host}:${api.port}`, key, workers }));
    await new Promise((resolve) => process.stdin.once('end', resolve).resume());
    await api.stop();
    return;
  }
  const duck = await Duck.open(2);
  const rates: RateChannel = { send: (m) => process.send!(m), listen: (h) => process.on('message', h) };
  const api = await startApi(config, duck, createClock(END, 1), log, {
    port: 0,
    ...(cluster.isWorker ? { cluster: { workers, rates } } : {}),
  });
  if (cluster.isWorker) {
    // Stopped by the primary.
    process.once('SIGTERM', () => void api.stop().then(() => process.exit(0)));
    return new Promise(() => undefined);
  }
  const { key } = await api.keys.issue('paid', 'bench-compare');
  console.log(JSON.stringify({ url: api.url, key, workers: 1 }));
  await new Promise((resolve) => process.stdin.once('end', resolve).resume());
  await api.stop();
  await duck.close();
}

/** The minimal PostgreSQL server: prepared statements, JSON from json_agg spliced into the same envelope. */
async function servePg(port: number, table: string): Promise<void> {
  const pool = new pg.Pool({ host: '127.0.0.1', port, user: 'postgres', database: 'postgres', max: 4 });
  const latest = {
    name: 'latest',
    text: `SELECT json_build_object('market_id', $1::text, 'timestamp', ${ts('max(ts)')}, 'books', json_agg(${BOOK} ORDER BY outcome_index))::text AS j
      FROM ${table} WHERE market_id = $1 AND ts = (SELECT max(ts) FROM ${table} WHERE market_id = $1)`,
  };
  const page = {
    name: 'page',
    text: `WITH t AS (SELECT DISTINCT ts FROM ${table} WHERE market_id = $1 AND ts > to_timestamp($2::float8 / 1000) ORDER BY ts LIMIT $3 + 1),
      p AS (SELECT ts FROM t ORDER BY ts LIMIT $3)
      SELECT (SELECT count(*) FROM t) AS n, (SELECT (extract(epoch FROM max(ts)) * 1000)::bigint FROM p) AS last,
        coalesce((SELECT json_agg(json_build_object('timestamp', ${ts('s.ts')}, 'books', s.books) ORDER BY s.ts)
          FROM (SELECT b.ts, json_agg(${BOOK} ORDER BY outcome_index) AS books FROM ${table} b JOIN p USING (ts) WHERE b.market_id = $1 GROUP BY b.ts) s), '[]'::json)::text AS j`,
  };
  const server = http.createServer(async (req, res) => {
    const url = new URL(req.url!, 'http://x');
    const [, route, id] = url.pathname.split('/');
    const meta = `"meta":{"request_id":"pg","timestamp":"${new Date().toISOString()}"}`;
    try {
      let body: string;
      if (route === 'latest') {
        const { rows } = await pool.query({ ...latest, values: [id] });
        body = `{"data":${rows[0].j},${meta}}`;
      } else {
        const limit = Number(url.searchParams.get('limit') ?? 100);
        const { rows } = await pool.query({ ...page, values: [id, Number(url.searchParams.get('after') ?? 0), limit] });
        const more = Number(rows[0].n) > limit;
        body = `{"data":${rows[0].j},"pagination":{"limit":${limit},"has_more":${more},"next_cursor":${more ? `"${rows[0].last}"` : 'null'}},${meta}}`;
      }
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
      res.end(body);
    } catch (err) {
      res.writeHead(500).end(String(err));
    }
  });
  server.listen(0, '127.0.0.1');
  await new Promise((r) => server.once('listening', r));
  console.log(JSON.stringify({ url: `http://127.0.0.1:${(server.address() as { port: number }).port}` }));
  await new Promise((resolve) => process.stdin.once('end', resolve).resume());
  server.close();
  await pool.end();
}

if (process.env.COMPARE_CHILD === 'service') {
  await serveService(process.env.COMPARE_DIR!);
  process.exit(0);
}
if (process.env.COMPARE_CHILD === 'pg') {
  await servePg(Number(process.env.COMPARE_PG_PORT), process.env.COMPARE_PG_TABLE ?? 'books');
  process.exit(0);
}

export function child(mode: 'service' | 'pg', env: Record<string, string>): { proc: ChildProcess; ready: Promise<Record<string, string>> } {
  const proc = spawn(
    process.execPath,
    [
      ...(env.TRACE_GC ? ['--trace-gc'] : []),
      ...(env.CHILD_NODE_ARGS?.split(' ').filter(Boolean) ?? []),
      '--import',
      'tsx',
      fileURLToPath(import.meta.url),
    ],
    {
      env: { ...process.env, COMPARE_CHILD: mode, ...env },
      stdio: ['pipe', 'pipe', 'inherit'],
    },
  );
  const ready = new Promise<Record<string, string>>((resolve, reject) => {
    let out = '';
    proc.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const line = out.split('\n').find((l) => l.startsWith('{'));
      if (line) resolve(JSON.parse(line));
    });
    proc.once('exit', (code) => reject(new Error(`${mode} exited ${code}`)));
  });
  return { proc, ready };
}
