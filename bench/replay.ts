// make bench-replay: the WebSocket replay (issue 25) from a sealed lake that real capture recorded
// off the stand-in's market channel (every coin, both windows, change by change), served by
// `make api`'s own process: messages per second as fast as possible (tapes cold, then cached;
// one replay, then four at once), time to the first message for a range starting in the middle of
// an hour, and memory per open replay.
import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import WebSocket from 'ws';
import { KeyStore } from '../src/edge/keys.js';
import { Capture } from '../src/capture/capture.js';
import { pacedClock } from '../src/clock.js';
import { loadConfig } from '../src/config.js';
import { Duck } from '../src/lake/duckdb.js';
import { lakePaths } from '../src/lake/layout.js';
import { sealDue } from '../src/lake/seal.js';
import { StandIn, WALLET_PREFIX } from '../src/standin/server.js';
import { HOUR, MINUTE } from '../src/time.js';
import { createAdapters } from '../src/venues/index.js';
import { writeSection } from './report.js';
import { freePort } from './tools.js';
import { onBooksFile } from '../src/lake/writer.js';
import { writeServingCopy } from '../src/pages/copywriter.js';

// Sealed books files get their serving copy, as the jobs that seal give them.
onBooksFile(writeServingCopy);

const HOURS = Number(process.env.BENCH_REPLAY_HOURS ?? 1);
const SPEED = Number(process.env.BENCH_REPLAY_CAPTURE_SPEED ?? 60);
/** Room for the hour's tapes and their rendered messages (about 420 MB); the default, 256 MB, holds part of it. */
const CACHE_MB = process.env.REPLAY_CACHE_MB ?? '1024';
const FROM = Date.parse('2026-07-26T12:00:00Z');
const TO = FROM + HOURS * HOUR;
const root = process.env.BENCH_ROOT ?? (await fs.mkdtemp(path.join(os.tmpdir(), 'bench-replay-')));
const dir = path.join(root, `replay-lake-${HOURS}h`);
const log = pino({ level: 'warn' });

/** The recorded lake, built once per BENCH_ROOT: capture on the stand-in's market channel over [FROM, TO), sealed. */
async function buildLake(): Promise<{ seconds: number; rows: number }> {
  const done = path.join(dir, 'built.json');
  const built = await fs.readFile(done, 'utf8').catch(() => null);
  if (built) return JSON.parse(built);
  await fs.rm(dir, { recursive: true, force: true });
  const began = performance.now();
  let progress = () => FROM - 2 * MINUTE;
  const clock = pacedClock(FROM - 2 * MINUTE, SPEED, Date.now(), Infinity, 3000, () => progress());
  const coins = { 'wallet-prediction': ['btc'], polymarket: ['btc', 'eth', 'sol', 'xrp'] };
  const standin = new StandIn({ clock, coins, walletWeightPerMinute: Number.MAX_SAFE_INTEGER });
  const url = await standin.start();
  const config = loadConfig({
    DATA_DIR: dir,
    CAPTURE_STREAM: 'polymarket',
    CAPTURE_VENUES: 'polymarket',
    POLYMARKET_COINS: 'btc,eth,sol,xrp',
    POLYMARKET_GAMMA_URL: url,
    POLYMARKET_CLOB_URL: url,
    POLYMARKET_RPS: '100000',
    WALLET_BASE_URL: `${url}${WALLET_PREFIX}`,
  });
  const duck = await Duck.open(2);
  const capture = new Capture(config, clock, duck, createAdapters(config, clock), log, null);
  progress = () => capture.progress();
  await capture.start();
  while (clock.now() < TO) {
    await new Promise((r) => setTimeout(r, 1000));
    process.stderr.write(`\rrecording: ${new Date(clock.now()).toISOString()} (until ${new Date(TO).toISOString()})`);
  }
  process.stderr.write('\n');
  await capture.stop();
  await standin.stop();
  await sealDue(duck, lakePaths(dir), Number.MAX_SAFE_INTEGER / 2, () => 0);
  const [{ n }] = await duck.rows(`SELECT count(*)::INTEGER AS n FROM read_parquet('${dir}/lake/books/**/*.parquet')`);
  duck.close();
  const result = { seconds: (performance.now() - began) / 1000, rows: Number(n) };
  await fs.writeFile(done, JSON.stringify(result));
  return result;
}

const lake = await buildLake();
const duck = await Duck.open(1);
const markets = (await duck.rows(
  `SELECT market_id, list(DISTINCT token_id) AS tokens, min(epoch_ms(ts))::DOUBLE AS first FROM read_parquet('${dir}/lake/books/**/*.parquet') GROUP BY market_id ORDER BY first`,
)) as { market_id: string; tokens: string[]; first: number }[];
const [{ trades }] = await duck.rows(`SELECT count(*)::INTEGER AS trades FROM read_parquet('${dir}/lake/trades/**/*.parquet')`);
duck.close();
const tokens = markets.flatMap((m) => m.tokens);
const { key } = await KeyStore.at(dir).issue('paid', 'bench-replay');

/** `make api` with one worker over the lake, `env` over the bench's settings; resolves once it answers. */
async function startApi(env: Record<string, string>): Promise<{ port: number; api: ChildProcess }> {
  const port = await freePort();
  const api = spawn(process.execPath, ['--import', 'tsx', 'jobs/api.ts'], {
    env: {
      ...process.env,
      DATA_DIR: dir,
      PORT: String(port),
      LOG_LEVEL: 'warn',
      API_WORKERS: '1',
      REPLAY_SLOTS: '1000',
      REPLAY_PER_KEY: '1000',
      RATE_PAID_PER_SECOND: '100000',
      REPLAY_CACHE_MB: CACHE_MB,
      ...env,
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  for (let tries = 0; ; tries++) {
    const res = await fetch(`http://127.0.0.1:${port}/v3/health`).catch(() => null);
    if (res) break;
    if (tries > 600) throw new Error('the API did not start');
    await new Promise((r) => setTimeout(r, 100));
  }
  return { port, api };
}

async function stopApi(api: ChildProcess): Promise<void> {
  api.kill('SIGTERM');
  await new Promise((r) => api.once('exit', r));
}

let { port, api } = await startApi({ REPLAY_COPIES: 'off' });
// The worker's pid (make api runs a primary and its workers): the process whose memory a replay costs.
const workerPid = async () => {
  const children = (await fs.readFile(`/proc/${api.pid}/task/${api.pid}/children`, 'utf8')).trim().split(/\s+/).filter(Boolean);
  return Number(children[0] ?? api.pid);
};
const rssMiB = async () => {
  const status = await fs.readFile(`/proc/${await workerPid()}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+)/.exec(status)![1]) / 1024;
};
const url = (from: number, to: number, speed: string) =>
  `ws://127.0.0.1:${port}/v3/replay/polymarket/ws/market?from=${from}&to=${to}&speed=${speed}`;
const subscribe = (assets: string[]) =>
  JSON.stringify({ assets_ids: assets, type: 'market', initial_dump: true, custom_feature_enabled: true });

/** One replay to its end: messages (counted by their event_type, as frames may hold several) and seconds. */
function replay(from: number, to: number, assets: string[]): Promise<{ messages: number; seconds: number }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url(from, to, 'max'), { headers: { Authorization: `Bearer ${key}` } });
    let messages = 0;
    let began = 0;
    ws.on('open', () => {
      began = performance.now();
      ws.send(subscribe(assets));
    });
    ws.on('message', (data: Buffer) => {
      for (let i = data.indexOf('"event_type"'); i >= 0; i = data.indexOf('"event_type"', i + 12)) messages++;
    });
    ws.on('close', () => resolve({ messages, seconds: (performance.now() - began) / 1000 }));
    ws.on('error', reject);
  });
}

/** From subscribing to the first message, for a replay starting at `from` (paced, closed after it). */
function firstMessage(from: number, assets: string[]): Promise<number> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url(from, from + HOUR / 4, '1'), { headers: { Authorization: `Bearer ${key}` } });
    let sent = 0;
    ws.on('open', () => {
      sent = performance.now();
      ws.send(subscribe(assets));
    });
    ws.once('message', () => {
      resolve(performance.now() - sent);
      ws.close();
    });
    ws.on('error', reject);
  });
}

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(p * xs.length))];
const rate = (r: { messages: number; seconds: number }) => Math.round(r.messages / r.seconds);

// Time to the first message from the middle of an hour, first of all (no tape read yet): markets open then, each once
// (its tape read then), then again (cached).
const middle = FROM + 30 * MINUTE + 17_123;
const openThen = markets.filter((m) => m.first < middle).slice(-8);
const firstMessages = async () => {
  const cold: number[] = [];
  const warm: number[] = [];
  for (const m of openThen) cold.push(await firstMessage(middle, m.tokens));
  for (let i = 0; i < 3; i++) for (const m of openThen) warm.push(await firstMessage(middle, m.tokens));
  return { cold, warm };
};

// Without replay copies: every market's tape read from Parquet and its messages rendered and hashed.
const ttfmLake = await firstMessages();
const lakeCold = await replay(FROM, TO, tokens);
console.error(`cold from the lake: ${lakeCold.messages} messages in ${lakeCold.seconds.toFixed(2)} s`);
await stopApi(api);

// With replay copies, as a service running beside capture has them: the API, its clock twenty minutes past the lake's end (every market of it over),
// writes a copy of every market that ended in the last hours; then the same replays read them.
const copiesDir = path.join(dir, 'serving', 'replay');
await fs.rm(copiesDir, { recursive: true, force: true });
const writing = performance.now();
({ port, api } = await startApi({ CLOCK_START: new Date(TO + 20 * MINUTE).toISOString() }));
const health = async () =>
  ((await (await fetch(`http://127.0.0.1:${port}/v3/health`)).json()) as { data: { api: { replay: Record<string, number> } } }).data.api
    .replay;
// Done when nothing is queued and nothing more was written for a second (the last copy is written after it leaves the queue).
for (let h = await health(), last = -1; h.copies_queued > 0 || h.copies_written !== last || last <= 0; h = await health()) {
  last = h.copies_written;
  await new Promise((r) => setTimeout(r, 1000));
}
const writeSeconds = (performance.now() - writing) / 1000;
const copyFiles = (await fs.readdir(copiesDir, { recursive: true })).filter((f) => String(f).endsWith('.replay'));
let copyBytes = 0;
for (const f of copyFiles) copyBytes += (await fs.stat(path.join(copiesDir, String(f)))).size;
let lakeBytes = 0;
for (const f of await fs.readdir(path.join(dir, 'lake'), { recursive: true }))
  if (String(f).endsWith('.parquet')) lakeBytes += (await fs.stat(path.join(dir, 'lake', String(f)))).size;
console.error(`copies: ${copyFiles.length} written in ${writeSeconds.toFixed(1)} s, ${(copyBytes / 2 ** 20).toFixed(1)} MiB`);
const ttfmCopies = await firstMessages();
const cold = await replay(FROM, TO, tokens);
console.error(`cold from copies: ${cold.messages} messages in ${cold.seconds.toFixed(2)} s, worker RSS ${(await rssMiB()).toFixed(0)} MiB`);
const warm = await replay(FROM, TO, tokens);
console.error(`cached: ${warm.messages} messages in ${warm.seconds.toFixed(2)} s`);
const fourStarted = performance.now();
const four = await Promise.all([0, 1, 2, 3].map(() => replay(FROM, TO, tokens)));
const fourRate = Math.round(four.reduce((n, r) => n + r.messages, 0) / ((performance.now() - fourStarted) / 1000));
console.error(`four at once: ${fourRate} messages/s`);

// Memory: 200 paced replays of the markets open mid-hour, held open.
const before = await rssMiB();
const held: WebSocket[] = [];
for (let i = 0; i < 200; i++) {
  const ws = new WebSocket(url(middle, middle + HOUR / 4, '1'), { headers: { Authorization: `Bearer ${key}` } });
  await new Promise<void>((resolve, reject) => {
    ws.on('open', () => {
      ws.send(subscribe(openThen.flatMap((m) => m.tokens)));
      resolve();
    });
    ws.on('error', reject);
  });
  held.push(ws);
}
await new Promise((r) => setTimeout(r, 3000));
const after = await rssMiB();
for (const ws of held) ws.close();
await stopApi(api);

const ms = (x: number) => x.toFixed(1);
const ttfm = (t: { cold: number[]; warm: number[] }) =>
  `first read p50 ${ms(pct(t.cold, 0.5))} ms, max ${ms(Math.max(...t.cold))} ms over ${t.cold.length}; cached p50 ${ms(pct(t.warm, 0.5))} ms, p95 ${ms(pct(t.warm, 0.95))} ms over ${t.warm.length}`;
await writeSection(
  '## Replay over WebSocket',
  `## Replay over WebSocket

\`make bench-replay\` (${new Date().toISOString().slice(0, 10)}, ${os.cpus().length} x ${os.cpus()[0]?.model ?? 'unknown'}, Node ${process.version}):
a sealed lake that capture recorded from the stand-in's market channel (${HOURS} h, 4 coins x 2 windows, ${markets.length} markets,
${lake.rows.toLocaleString('en')} book rows, ${Number(trades).toLocaleString('en')} trades, ${(lakeBytes / 2 ** 20).toFixed(1)} MiB of Parquet; recorded at ${SPEED}x in ${Math.round(lake.seconds)} s), served by
\`make api\` with one worker and \`REPLAY_CACHE_MB=${CACHE_MB}\`; the client is another process on the same 2 cores, counting messages.

A replay of a market with no copy reads its tape (one statement for its books into typed arrays) and renders every message (diffs of
consecutive rows, the venue's SHA-1 hash of each changed book): about 14 µs a message, the socket's part aside. A finished market's
**replay copy** (\`DATA_DIR/serving/replay\`, replay/copy.ts) holds those messages rendered once, deflated, with the rows' times:
the API writes it in the background for every market that ended in the last hours (and for an older one after its first replay), and
a replay then reads it and inflates the messages, reading from Parquet only each outcome's book at its start. Here the API was started
with its clock twenty minutes past the lake's end, as a service running beside capture is: it wrote the ${copyFiles.length} copies in
${writeSeconds.toFixed(1)} s from its start (${(copyBytes / 2 ** 20).toFixed(1)} MiB, ${(copyBytes / lakeBytes).toFixed(1)}x the Parquet). Messages are kept with a tape in memory too, so a
replay of cached tapes only sends.

| as fast as possible (every market of the lake, one connection) | messages | seconds | messages/s |
|---|---|---|---|
| first replay, no replay copies (\`REPLAY_COPIES=off\`: tapes read from Parquet, messages rendered and hashed) | ${lakeCold.messages.toLocaleString('en')} | ${lakeCold.seconds.toFixed(2)} | ${rate(lakeCold).toLocaleString('en')} |
| first replay, from replay copies (nothing in memory) | ${cold.messages.toLocaleString('en')} | ${cold.seconds.toFixed(2)} | ${rate(cold).toLocaleString('en')} |
| tapes cached (the same range again) | ${warm.messages.toLocaleString('en')} | ${warm.seconds.toFixed(2)} | ${rate(warm).toLocaleString('en')} |
| four connections at once, cached (all four together) | ${(4 * warm.messages).toLocaleString('en')} | | ${fourRate.toLocaleString('en')} |

Time to the first message, replay starting ${new Date(middle).toISOString().slice(11, 23)} (the middle of an hour), per market:
- no copies: ${ttfm(ttfmLake)};
- from copies: ${ttfm(ttfmCopies)}.

The issue's targets: at least 300,000 messages/s as fast as possible is ${rate(cold) >= 300_000 ? 'met' : 'missed'} by a first replay of a sealed lake
(${rate(cold).toLocaleString('en')}/s from copies; ${rate(lakeCold).toLocaleString('en')}/s without them), and by cached tapes. The first message within 50 ms of a
range starting mid-hour is ${pct(ttfmCopies.cold, 0.5) < 50 ? 'met' : 'missed'} at the median from copies (${ms(pct(ttfmCopies.cold, 0.5))} ms: the copy read and inflated, and one
statement for the books the market held then) and ${pct(ttfmLake.cold, 0.5) < 50 ? 'met' : 'missed'} without (${ms(pct(ttfmLake.cold, 0.5))} ms: one statement reading all the market's rows).

Memory: 200 paced replays of the ${openThen.length} markets open then, held open: the API worker's RSS ${before.toFixed(0)} -> ${after.toFixed(0)} MiB,
${(((after - before) * 1024) / 200).toFixed(0)} KiB per replay (tapes are shared: a replay holds its walks and at most 8 unsent frames).
`,
);
if (!process.env.BENCH_ROOT) await fs.rm(root, { recursive: true, force: true });
process.exit(0);
