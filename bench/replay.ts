// make bench-replay: the WebSocket replay (issues 25, 45) from a lake that real capture recorded off
// the stand-in's feeds (both venues, every coin, both windows, change by change), served by `make
// api`'s own process with its clock a minute after the newest markets ended (their hour still being
// recorded, as a service beside capture sees it): messages per second as fast as possible and time
// to the first message of a range starting mid-window, for the markets of a sealed hour and for
// those that ended a minute before, each venue, with replay copies missed (off), hit (read for each
// replay: nothing kept in memory) and tapes cached; then memory per open replay.
import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import WebSocket from 'ws';
import { KeyStore } from '../src/edge/keys.js';
import { Capture } from '../src/capture/capture.js';
import { pacedClock } from '../src/clock.js';
import { type Venue, loadConfig } from '../src/config.js';
import { Duck } from '../src/lake/duckdb.js';
import { lakePaths } from '../src/lake/layout.js';
import { LakeReader, type StoredMarket } from '../src/lake/reader.js';
import { copyContents } from '../src/replay/copy.js';
import { tapeSpan } from '../src/replay/tape.js';
import { WALLET_TOPIC_PREFIX } from '../src/replay/wallet.js';
import { StandIn, WALLET_PREFIX } from '../src/standin/server.js';
import { HOUR, MINUTE } from '../src/time.js';
import { createAdapters } from '../src/venues/index.js';
import { writeSection } from './report.js';
import { builtOnce, freePort } from './tools.js';
import { onBooksFile } from '../src/lake/writer.js';
import { writeServingCopy } from '../src/pages/copywriter.js';
import { SERVING_VERSION } from '../src/pages/copyformat.js';

// Sealed books files get their serving copy, as the jobs that seal give them.
onBooksFile(writeServingCopy);

const HOURS = Number(process.env.BENCH_REPLAY_HOURS ?? 1);
const SPEED = Number(process.env.BENCH_REPLAY_CAPTURE_SPEED ?? 20);
/** Room for the lake's tapes and their rendered messages; the default, 256 MB, holds part of them. */
const CACHE_MB = process.env.REPLAY_CACHE_MB ?? '1024';
/** Samples of the time to a first message, per venue and case: its p99 is the second slowest of 200. */
const SAMPLES = Number(process.env.BENCH_REPLAY_SAMPLES ?? 200);
const FROM = Date.parse('2026-07-26T12:00:00Z');
const TO = FROM + HOURS * HOUR;
/** The five-minute markets that opened at TO end here; the API's clock is a minute later. */
const RECENT_END = TO + 5 * MINUTE;
const NOW = RECENT_END + MINUTE;
const VENUES: Venue[] = ['polymarket', 'wallet-prediction'];
const root = process.env.BENCH_ROOT ?? (await fs.mkdtemp(path.join(os.tmpdir(), 'bench-replay-')));
const dir = path.join(root, `replay-lake-${HOURS}h-v2`);
const log = pino({ level: 'warn' });

/**
 * The recorded lake, built once per BENCH_ROOT: capture of both venues' feeds from the stand-in
 * over [FROM, RECENT_END), stopped once it has sealed the markets that ended at RECENT_END (as it
 * does at a market's end). Hours up to TO are sealed by capture as they end; the last is left in the
 * spool, its later markets still open, as a lake is a minute after those markets ended.
 */
async function record(): Promise<void> {
  let progress = () => FROM - 2 * MINUTE;
  const clock = pacedClock(FROM - 2 * MINUTE, SPEED, Date.now(), Infinity, 3000, () => progress());
  const coins = { 'wallet-prediction': ['btc', 'eth', 'bnb'], polymarket: ['btc', 'eth', 'sol', 'xrp'] };
  const standin = new StandIn({ clock, coins, walletWeightPerMinute: Number.MAX_SAFE_INTEGER });
  const url = await standin.start();
  const config = loadConfig({
    DATA_DIR: dir,
    CAPTURE_STREAM: VENUES.join(','),
    CAPTURE_VENUES: VENUES.join(','),
    POLYMARKET_COINS: 'btc,eth,sol,xrp',
    POLYMARKET_GAMMA_URL: url,
    POLYMARKET_CLOB_URL: url,
    POLYMARKET_RPS: '100000',
    WALLET_COINS: 'btc,eth,bnb',
    WALLET_BASE_URL: `${url}${WALLET_PREFIX}`,
    WALLET_RPS: '100000',
    WALLET_CONCURRENCY: '16',
  });
  const duck = await Duck.open(2);
  const capture = new Capture(config, clock, duck, createAdapters(config, clock), log, null);
  progress = () => capture.progress();
  await capture.start();
  const reader = new LakeReader(duck, lakePaths(dir));
  await reader.open();
  for (;;) {
    await new Promise((r) => setTimeout(r, 1000));
    process.stderr.write(
      `\rrecording: ${new Date(clock.now()).toISOString()} (until ${new Date(RECENT_END).toISOString()}, then its markets sealed)`,
    );
    if (clock.now() < RECENT_END) continue;
    await reader.update();
    const ended = [...reader.walk('desc', clock.now())].filter((m) => m.end_time === RECENT_END);
    if (ended.length && ended.every((m) => !reader.spooled(tapeSpan('books', m).partitions, m.market_id))) break;
  }
  process.stderr.write('\n');
  await capture.stop();
  await standin.stop();
  await duck.close();
}

const built = await builtOnce(dir, record);
const duck = await Duck.open(1);
const reader = new LakeReader(duck, lakePaths(dir));
await reader.open();
const all = [...reader.walk('asc', NOW)];
/** Per venue: the markets of the sealed hours, and the five-minute ones that ended a minute before NOW. */
const sets = Object.fromEntries(
  VENUES.map((v) => [
    v,
    {
      sealed: all.filter((m) => m.venue === v && m.start_time >= FROM && m.end_time <= TO),
      recent: all.filter((m) => m.venue === v && m.end_time === RECENT_END && m.window === '5m'),
    },
  ]),
) as Record<Venue, { sealed: StoredMarket[]; recent: StoredMarket[] }>;
const count = async (sql: string) => Number((await duck.rows(sql))[0].n);
const bookRows = await count(`SELECT count(*)::BIGINT AS n FROM read_parquet('${dir}/lake/books/**/*.parquet')`);
const venueRows = Object.fromEntries(
  await Promise.all(
    VENUES.map(
      async (v) => [v, await count(`SELECT count(*)::BIGINT AS n FROM read_parquet('${dir}/lake/books/venue=${v}/**/*.parquet')`)] as const,
    ),
  ),
);
const tradeRows = await count(`SELECT count(*)::BIGINT AS n FROM read_parquet('${dir}/lake/trades/**/*.parquet')`);
await duck.close();
const { key } = await KeyStore.at(dir).issue('paid', 'bench-replay');

/** `make api` with one worker over the lake, its clock at NOW, `env` over the bench's settings; resolves once it answers. */
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
      CLOCK_START: new Date(NOW).toISOString(),
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

let port = 0;
let api: ChildProcess | null = null;
async function restart(env: Record<string, string>): Promise<void> {
  if (api) await stopApi(api);
  ({ port, api } = await startApi(env));
}

// The worker's pid (make api runs a primary and its workers): the process whose memory a replay costs.
const workerPid = async () => {
  const children = (await fs.readFile(`/proc/${api!.pid}/task/${api!.pid}/children`, 'utf8')).trim().split(/\s+/).filter(Boolean);
  return Number(children[0] ?? api!.pid);
};
const rssMiB = async () => {
  const status = await fs.readFile(`/proc/${await workerPid()}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+)/.exec(status)![1]) / 1024;
};

/** A replay socket of `venue` for `markets` over [from, to): Polymarket's subscribes their tokens, the wallet's names their topics. */
function open(venue: Venue, markets: StoredMarket[], from: number, to: number, speed: string): WebSocket {
  const headers = { Authorization: `Bearer ${key}` };
  const range = `from=${from}&to=${to}&speed=${speed}`;
  if (venue === 'polymarket') {
    const ws = new WebSocket(`ws://127.0.0.1:${port}/v3/replay/polymarket/ws/market?${range}`, { headers });
    const assets = markets.flatMap((m) => m.outcomes.map((o) => o.token_id));
    ws.on('open', () => ws.send(JSON.stringify({ assets_ids: assets, type: 'market', initial_dump: true, custom_feature_enabled: true })));
    return ws;
  }
  const topic = markets.map((m) => `${WALLET_TOPIC_PREFIX}${m.market_id}`).join('|');
  return new WebSocket(`ws://127.0.0.1:${port}/v3/replay/wallet-prediction/sapi/wss?${range}&topic=${encodeURIComponent(topic)}`, {
    headers,
  });
}

/** Where a message starts in a frame: Polymarket's frames hold arrays of events, the wallet's one `DATA` push each. */
const MARK: Record<Venue, string> = { polymarket: '"event_type"', 'wallet-prediction': '"type":"DATA"' };

interface Run {
  messages: number;
  /** From the socket's open to its close, and from its first message (the tapes read, the replay under way) to its last. */
  seconds: number;
  sending: number;
}

/** One replay to its end, as fast as possible: messages (the venue's, counted in the frames) and seconds. */
function replay(venue: Venue, markets: StoredMarket[], from: number, to: number): Promise<Run> {
  return new Promise((resolve, reject) => {
    const ws = open(venue, markets, from, to, 'max');
    let messages = 0;
    let began = 0;
    let first = 0;
    let last = 0;
    ws.on('open', () => (began = performance.now()));
    ws.on('message', (data: Buffer) => {
      // The replay's own end packet is not one of the venue's messages.
      if (data.length < 4096 && data.includes('replay_end')) return;
      const before = messages;
      for (let i = data.indexOf(MARK[venue]); i >= 0; i = data.indexOf(MARK[venue], i + 12)) messages++;
      if (messages === before) return;
      last = performance.now();
      if (!before) first = last;
    });
    // The end packet (its certificates read) and the close are the replay's end, not its sending.
    ws.on('close', () => resolve({ messages, seconds: (performance.now() - began) / 1000, sending: (last - first) / 1000 }));
    ws.on('error', reject);
  });
}

/** From the socket's open to the first message of the venue's (a book, in practice), for a paced replay from `from`; closed after it. */
function firstMessage(venue: Venue, m: StoredMarket, from: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const ws = open(venue, [m], from, from + HOUR / 4, '1');
    let opened = 0;
    ws.on('open', () => (opened = performance.now()));
    ws.on('message', (data: Buffer) => {
      if (data.indexOf(MARK[venue]) < 0) return;
      resolve(performance.now() - opened);
      ws.removeAllListeners('message');
      ws.close();
    });
    ws.on('error', reject);
  });
}

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.ceil(p * xs.length) - 1)];
const rate = (r: Run) => Math.round(r.messages / r.seconds);
/** Messages/s once the first came: what the connection sustains, a replay's start (subscription, tape reads) aside. */
const sustained = (r: Run) => Math.round(r.messages / r.sending);
/** A start in the middle of each market's window (and of its hour's run of windows): books held then, changes after. */
const middleOf = (m: StoredMarket) => m.start_time + Math.floor((m.end_time - m.start_time) / 2) + 17_123;

interface Figures {
  /** One connection replaying every market of the set. */
  sealed: Run;
  recent: Run;
  /** Times to the first message over SAMPLES replays (markets taken in turn). */
  ttfmSealed: number[];
  ttfmRecent: number[];
}

async function measure(venue: Venue): Promise<Figures> {
  const { sealed, recent } = sets[venue];
  const samples = async (markets: StoredMarket[]) => {
    const out: number[] = [];
    for (let i = 0; i < SAMPLES; i++)
      out.push(await firstMessage(venue, markets[i % markets.length], middleOf(markets[i % markets.length])));
    return out;
  };
  // Three runs, the median by messages/s: the process's first replay is also its code's first (not compiled yet).
  const median = async (run: () => Promise<Run>) => {
    const runs = [await run(), await run(), await run()];
    return runs.sort((a, b) => rate(a) - rate(b))[1];
  };
  return {
    sealed: await median(() => replay(venue, sealed, FROM - 5 * MINUTE, TO)),
    recent: await median(() => replay(venue, recent, RECENT_END - 10 * MINUTE, NOW)),
    ttfmSealed: await samples(sealed),
    ttfmRecent: await samples(recent),
  };
}

/**
 * Done when nothing is queued and nothing more was written for a second (the last copy is written after it leaves the queue).
 * `first`: the copies are not on disk yet, so done only once one was written; a restart over copies already written writes none.
 */
async function copiesWritten(first = true): Promise<{ written: number; seconds: number }> {
  const began = performance.now();
  const health = async () =>
    ((await (await fetch(`http://127.0.0.1:${port}/v3/health`)).json()) as { data: { api: { replay: Record<string, number> } } }).data.api
      .replay;
  let h = await health();
  for (let last = -1; h.copies_queued > 0 || h.copies_written !== last || (first && last <= 0); h = await health()) {
    last = h.copies_written;
    await new Promise((r) => setTimeout(r, 1000));
  }
  return { written: h.copies_written, seconds: (performance.now() - began) / 1000 };
}

const figures: Record<string, Record<Venue, Figures>> = {};
// Copies missed: every replay reads its tape from Parquet (and the spool) and renders its messages; nothing kept.
await restart({ REPLAY_COPIES: 'off', REPLAY_CACHE_MB: '0' });
figures.missed = {} as Record<Venue, Figures>;
for (const v of VENUES) figures.missed[v] = await measure(v);
// Copies hit: the API writes a copy of every market that ended in the last hours at its start (and of each market at its end
// when it runs beside capture); every replay then reads its copy, nothing kept in memory. Unbounded here, to
// measure a hit on every market: under the default COPIES_SHARE=1 only those read or ended last keep one.
const copiesDir = path.join(dir, 'serving', 'replay');
await fs.rm(copiesDir, { recursive: true, force: true });
await restart({ REPLAY_CACHE_MB: '0', COPIES_SHARE: 'unbounded' });
const writing = await copiesWritten();
figures.hit = {} as Record<Venue, Figures>;
for (const v of VENUES) figures.hit[v] = await measure(v);
const copyFiles = (await fs.readdir(copiesDir, { recursive: true })).filter((f) => String(f).endsWith('.replay'));
let copyBytes = 0;
// Each venue's copies by part (the rows' table, the messages, the ladders), against its books Parquet.
const parts = Object.fromEntries(VENUES.map((v) => [v, { rows: 0, table: 0, messages: 0, ladders: 0, header: 0 }]));
for (const f of copyFiles) {
  const bytes = await fs.readFile(path.join(copiesDir, String(f)));
  copyBytes += bytes.length;
  const { rows, packed } = copyContents(bytes);
  const of = parts[String(f).split(path.sep)[0]];
  of.rows += rows;
  of.table += packed[0];
  of.messages += packed[1];
  of.ladders += packed[2];
  of.header += bytes.length - packed[0] - packed[1] - packed[2];
}
let [lakeBytes, booksBytes, servingBytes] = [0, 0, 0];
const venueBooks = Object.fromEntries(VENUES.map((v) => [v, 0]));
for (const f of await fs.readdir(path.join(dir, 'lake'), { recursive: true })) {
  if (!String(f).endsWith('.parquet')) continue;
  const bytes = (await fs.stat(path.join(dir, 'lake', String(f)))).size;
  lakeBytes += bytes;
  if (String(f).startsWith('books/')) booksBytes += bytes;
  for (const v of VENUES) if (String(f).startsWith('books/') && String(f).includes(`venue=${v}/`)) venueBooks[v] += bytes;
}
// The pages' serving copies, which capture wrote as it sealed each books file.
for (const f of await fs.readdir(path.join(dir, 'serving', 'books'), { recursive: true }))
  if (String(f).endsWith(`.v${SERVING_VERSION}.pages`)) servingBytes += (await fs.stat(path.join(dir, 'serving', 'books', String(f)))).size;
// Tapes cached: a first pass reads them, the measured one only sends.
await restart({ REPLAY_CACHE_MB: CACHE_MB, COPIES_SHARE: 'unbounded' });
await copiesWritten(false);
figures.cached = {} as Record<Venue, Figures>;
for (const v of VENUES) await measure(v);
for (const v of VENUES) figures.cached[v] = await measure(v);
const polymarketAll = [...sets.polymarket.sealed];
const fourStarted = performance.now();
const four = await Promise.all([0, 1, 2, 3].map(() => replay('polymarket', polymarketAll, FROM - 5 * MINUTE, TO)));
const fourRate = Math.round(four.reduce((n, r) => n + r.messages, 0) / ((performance.now() - fourStarted) / 1000));

// Memory: 200 paced replays of the Polymarket markets open mid-hour, held open.
const middle = FROM + 30 * MINUTE + 17_123;
const openThen = sets.polymarket.sealed.filter((m) => m.start_time <= middle && m.end_time > middle);
const before = await rssMiB();
const held: WebSocket[] = [];
for (let i = 0; i < 200; i++) {
  const ws = open('polymarket', openThen, middle, middle + HOUR / 4, '1');
  await new Promise<void>((resolve, reject) => {
    ws.on('open', () => resolve());
    ws.on('error', reject);
  });
  held.push(ws);
}
await new Promise((r) => setTimeout(r, 3000));
const after = await rssMiB();
for (const ws of held) ws.close();
await stopApi(api!);

const ms = (x: number) => x.toFixed(1);
const n = (x: number) => x.toLocaleString('en');
const CASES = [
  ['missed', 'copies missed (`REPLAY_COPIES=off`: tape read from Parquet and the spool, messages rendered and hashed)'],
  ['hit', 'copies hit (each replay reads its copy; `REPLAY_CACHE_MB=0`: nothing kept)'],
  ['cached', `tapes cached (\`REPLAY_CACHE_MB=${CACHE_MB}\`, read once before)`],
] as const;
const rows: string[] = [];
for (const v of VENUES)
  for (const [c, label] of CASES) {
    const f = figures[c][v];
    rows.push(
      `| ${v} | ${label} | ${n(rate(f.sealed))} / ${n(sustained(f.sealed))} (${n(f.sealed.messages)}) | ${ms(pct(f.ttfmSealed, 0.5))} / ${ms(pct(f.ttfmSealed, 0.99))} | ${n(rate(f.recent))} / ${n(sustained(f.recent))} (${n(f.recent.messages)}) | ${ms(pct(f.ttfmRecent, 0.5))} / ${ms(pct(f.ttfmRecent, 0.99))} |`,
    );
  }
const worst = (c: 'hit' | 'cached') => ({
  rate: Math.min(...VENUES.flatMap((v) => [rate(figures[c][v].sealed), rate(figures[c][v].recent)])),
  sustained: Math.min(...VENUES.flatMap((v) => [sustained(figures[c][v].sealed), sustained(figures[c][v].recent)])),
  p99: Math.max(...VENUES.flatMap((v) => [pct(figures[c][v].ttfmSealed, 0.99), pct(figures[c][v].ttfmRecent, 0.99)])),
});
const hit = worst('hit');
const countOf = (v: Venue) => `${sets[v].sealed.length} + ${sets[v].recent.length}`;
await writeSection(
  '## Replay over WebSocket',
  `## Replay over WebSocket

\`make bench-replay\` (${new Date().toISOString().slice(0, 10)}, ${os.cpus().length} x ${os.cpus()[0]?.model ?? 'unknown'}, Node ${process.version}):
a lake that capture recorded from the stand-in's feeds, both venues (Polymarket's market channel, 4 coins; the wallet's signed
book stream, 3 coins; both windows), from ${new Date(FROM).toISOString().slice(11, 16)} for ${HOURS} h and on until the five-minute markets
that opened at ${new Date(TO).toISOString().slice(11, 16)} ended (${n(bookRows)} sealed book rows, ${n(tradeRows)} trades, ${(lakeBytes / 2 ** 20).toFixed(1)} MiB of Parquet; recorded at ${SPEED}x
in ${Math.round(built.seconds)} s). Capture sealed each hour as it ended and each market's rows at the market's end (Spool.finish), and
was stopped there: the last hour's other markets are still in the spool, as a minute after those markets ended. Served by \`make api\`
with one worker and its clock at ${new Date(NOW).toISOString().slice(11, 16)}, a minute after they ended; the client is another process on the same 2 cores.

Replay copies (\`DATA_DIR/serving/replay\`, replay/copy.ts) hold a finished market's messages rendered once in its venue's protocol
and (Polymarket's) its rows' ladders, each in blocks of 64 KiB deflated on their own, beside a table of the rows; a replay reads one and inflates the
blocks it plays (a start mid-window: its first message's and those of the books it sends first), running no statement. The API writes a market's copy after the lake update that sees its rows sealed (capture seals them at its end:
\`test/replay-copies.test.ts\` sees both venues' copies about 4 s of real time after a market's end), and at its start for every market
that ended in the last hours: here ${n(writing.written)} copies in ${writing.seconds.toFixed(1)} s (${(copyBytes / 2 ** 20).toFixed(1)} MiB, ${(copyBytes / lakeBytes).toFixed(1)}x the Parquet).
The pages' serving copies of the same lake (written by capture as it sealed each books file) are ${(servingBytes / 2 ** 20).toFixed(1)} MiB for
${(booksBytes / 2 ** 20).toFixed(1)} MiB of books Parquet: ${(servingBytes / bookRows).toFixed(1)} and ${(booksBytes / bookRows).toFixed(1)} bytes a book row (${(servingBytes / booksBytes).toFixed(2)}x).
The replay copies by part, in bytes a book row of the copied markets (the wallet's walk sends every book as its rendered
payload, so its copies keep no ladders), against the venue's books Parquet (all of its rows, copied or not):

| venue | copied rows | table | messages | ladders | header | copies in all | books Parquet (its rows) |
|---|---|---|---|---|---|---|---|
${VENUES.map((v) => {
  const p = parts[v];
  const per = (b: number) => (b / Math.max(1, p.rows)).toFixed(1);
  const all = p.table + p.messages + p.ladders + p.header;
  return `| ${v} | ${n(p.rows)} | ${per(p.table)} | ${per(p.messages)} | ${per(p.ladders)} | ${per(p.header)} | ${per(all)} | ${(venueBooks[v] / Math.max(1, venueRows[v])).toFixed(1)} (${n(venueRows[v])}) |`;
}).join('\n')}

Markets (sealed hour + ended a minute before): Polymarket ${countOf('polymarket')}, wallet ${countOf('wallet-prediction')}. One connection, as fast as possible,
every market of the set (messages/s from the socket's open / from its first message, and messages; the median of three runs, the
first of a process being also its code's first); time from the socket's open to the first message of a paced replay starting mid-window,
p50 / p99 over ${SAMPLES} replays (markets in turn):

| venue | case | sealed hour: msg/s whole / sustained (messages) | sealed: first message p50 / p99 ms | ended a minute before: msg/s whole / sustained (messages) | ended: first message p50 / p99 ms |
|---|---|---|---|---|---|
${rows.join('\n')}

Four Polymarket connections at once, tapes cached, the sealed hour: ${n(fourRate)} messages/s together.

The issue's targets, for the first replay (copies hit, nothing in memory) of either venue, a sealed market or one that ended a minute before:
at least 300,000 messages/s per connection: ${hit.sustained >= 300_000 ? 'met' : 'missed'} once the replay is under way (slowest ${n(hit.sustained)}/s), ${hit.rate >= 300_000 ? 'met' : 'missed'} counting its start too (slowest ${n(hit.rate)}/s: the ended markets' replays are short, ${VENUES.map((v) => n(figures.hit[v].recent.messages)).join(' and ')} messages, so their start and end packet weigh); the first message within 50 ms at p99:
${hit.p99 <= 50 ? 'met' : 'missed'} (slowest p99 ${ms(hit.p99)} ms).

Memory: 200 paced replays of the ${openThen.length} Polymarket markets open at ${new Date(middle).toISOString().slice(11, 19)}, held open: the API worker's RSS ${before.toFixed(0)} -> ${after.toFixed(0)} MiB,
${(((after - before) * 1024) / 200).toFixed(0)} KiB per replay (tapes are shared: a replay holds its walks and its unsent frames: 8, or 64 KiB).
`,
);
if (!process.env.BENCH_ROOT) await fs.rm(root, { recursive: true, force: true });
process.exit(0);
