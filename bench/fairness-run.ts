// make bench-fairness-run: the bystander of bench-fairness through `make run` as a user starts it
// (jobs/fill.ts into an empty DATA_DIR, then jobs/run.ts: the stand-in, capture and the API in one
// process on the wall clock): 24 paid keys within their plan's rate push snapshot pages of every
// wallet market the lake lists (sealed hours and the markets capture is recording), while a bystander
// key asks a page every 200 ms. Figures go into BENCHMARKS.md.
import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { KeyStore } from '../src/edge/keys.js';
import { loadConfig } from '../src/config.js';
import { BYSTANDER_EVERY_MS, PUSH_EVERY_MS, bystander, bystanderCells, startPushers, statusText } from './pushers.js';
import { writeSection } from './report.js';
import { freePort } from './tools.js';

const KEYS = 24;
const SECONDS = Number(process.env.BENCH_SECONDS ?? 30);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);

const dir = await fs.mkdtemp(path.join(process.env.BENCH_ROOT ?? os.tmpdir(), 'bench-fairness-run-'));
const [port, standinPort] = [await freePort(), await freePort()];
const env = { ...process.env, DATA_DIR: dir, PORT: String(port), STANDIN_PORT: String(standinPort), LOG_LEVEL: 'warn' };
const job = (file: string): ChildProcess =>
  spawn(process.execPath, ['--import', 'tsx', file], { env, stdio: ['ignore', 'ignore', 'inherit'] });

const fillBegan = performance.now();
const fill = job('jobs/fill.ts');
if ((await new Promise((r) => fill.once('exit', r))) !== 0) throw new Error('the fill failed');
const fillSeconds = (performance.now() - fillBegan) / 1000;
const store = KeyStore.at(dir);
const pushers: string[] = [];
for (let i = 0; i < KEYS; i++) pushers.push((await store.issue('paid', `bench-fairness-run-${i}`)).key);
const bystanderKey = (await store.issue('paid', 'bench-fairness-run-bystander')).key;

const run = job('jobs/run.ts');
const base = `http://127.0.0.1:${port}`;
for (let tries = 0; ; tries++) {
  const res = await fetch(`${base}/v3/health`).catch(() => null);
  if (res?.status === 200) break;
  if (tries > 1200) throw new Error('make run did not answer health within 120 s');
  await new Promise((r) => setTimeout(r, 100));
}
const listing = (await (
  await fetch(`${base}/v3/wallet-prediction/markets?limit=1000`, { headers: { authorization: `Bearer ${bystanderKey}` } })
).json()) as { data: { market_id: string; status: string }[] };
const paths = listing.data.map((m) => `/v3/wallet-prediction/${m.market_id}/snapshots?limit=100`);
const byStatus = listing.data.reduce<Record<string, number>>((n, m) => ({ ...n, [m.status]: (n[m.status] ?? 0) + 1 }), {});

const rows: string[] = [];
for (let round = 0; round < ROUNDS; round++) {
  const pushing = startPushers({ base, keys: pushers, paths, seconds: SECONDS }, dir);
  // Let the pushers fill the queue first.
  await new Promise((r) => setTimeout(r, 2000));
  const seen = await bystander(base, bystanderKey, paths, SECONDS - 4);
  const theirs = await pushing;
  const health = (await (await fetch(`${base}/v3/health`)).json()) as {
    data: { capture: { state: string; dropped_rows: number } | null };
  };
  rows.push(
    `| ${round + 1} | ${bystanderCells(seen)} | ${statusText(theirs)} | ${health.data.capture?.state ?? 'none'}, dropped rows ${health.data.capture?.dropped_rows ?? '?'} |`,
  );
  process.stderr.write(`${rows.at(-1)}\n`);
}
run.kill('SIGTERM');
await new Promise((r) => run.once('exit', r));
const config = loadConfig(env);
await writeSection(
  '## 24 keys pushing through `make run` (`make bench-fairness-run`)',
  `## 24 keys pushing through \`make run\` (\`make bench-fairness-run\`)

Machine: ${os.cpus().length} x ${os.cpus()[0].model.split(' ').slice(0, 2).join(' ')}, Node ${process.version}, ${new Date().toISOString().slice(0, 10)}.
\`make run\` as a user starts it: the fill of an empty lake (${config.fill.hours} h at ${config.fill.speed}x, ${fillSeconds.toFixed(0)} s), then the
stand-in, capture and the API in one process on the wall clock, its default admission (${config.api.maxInFlight} running,
${config.api.queue} queued, ${config.api.queueWaitMs} ms wait). ${KEYS} paid keys in another process, each asking a 100-snapshot page of a
wallet market drawn over the ${paths.length} the lake lists (${Object.entries(byStatus)
    .map(([s, n]) => `${n} ${s}`)
    .join(', ')}) every ${PUSH_EVERY_MS} ms (its plan's 25 a second) with at most 2 of its own in flight, for ${SECONDS} s a round;
a bystander key asks one page every ${BYSTANDER_EVERY_MS} ms after its previous answer. Rounds one after the other, capture recording throughout.

| round | the bystander's answers | latency of its 200s | the ${KEYS} keys' answers | capture after the round |
|---|---|---|---|---|
${rows.join('\n')}
`,
);
await fs.rm(dir, { recursive: true, force: true });
