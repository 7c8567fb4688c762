import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { loadConfig, type Config } from '../src/config.js';
import { Duck, type JsonRow } from '../src/lake/duckdb.js';
import { lakePaths } from '../src/lake/layout.js';
import { sealDue } from '../src/lake/seal.js';
import { StandIn, WALLET_PREFIX } from '../src/standin/server.js';
import pino from 'pino';
import { bareMarket } from '../src/records.js';
import type { Test } from 'tap';
import { startApi } from '../src/api/server.js';
import { type FillOptions, fill } from '../src/capture/fill.js';
import { StandInUpstream } from '../src/standin/upstream.js';
import { createClock } from '../src/clock.js';
import { onBooksFile } from '../src/lake/writer.js';
import { writeServingCopy } from '../src/pages/copywriter.js';
// Every file that uses these helpers says what it still holds if it outlives its tests.
import './linger.js';

// Sealed books files get their serving copy, as the jobs that seal give them.
onBooksFile(writeServingCopy);

export const quiet = pino({ level: process.env.TEST_LOG ?? 'silent' });

export function testConfig(dataDir: string, env: Record<string, string> = {}): Config {
  // Polled unless a test asks for the stream: most tests count one snapshot per poll.
  return loadConfig({
    DATA_DIR: dataDir,
    SPOOL_FLUSH_MS: '100',
    WALLET_TIMEOUT_MS: '1000',
    POLYMARKET_TIMEOUT_MS: '1000',
    CAPTURE_STREAM: 'none',
    // The reference prices' socket is its own file's subject (reference.test.ts); elsewhere it would add rows and gaps tests count.
    CAPTURE_REFERENCE: 'off',
    // The API writes replay copies in the background from its start: in a test that ends first, into
    // a fixture directory tap is removing. Tests of the copies turn them on and wait for them.
    REPLAY_COPIES: 'off',
    ...env,
  });
}

/** Seals everything in the spool, the open hour included. */
export async function sealAll(duck: Duck, dataDir: string) {
  return sealDue(duck, lakePaths(dataDir), Number.MAX_SAFE_INTEGER / 2, () => 0);
}

export function lakeTable(dataDir: string, dataset: string): string {
  return `read_parquet('${dataDir}/lake/${dataset}/**/*.parquet', hive_partitioning = true, hive_types = {'hour': INTEGER})`;
}

export async function one(duck: Duck, sql: string): Promise<JsonRow> {
  return (await duck.rows(sql))[0];
}

export interface LakeServerOptions {
  start: number;
  end: number;
  /** Environment for the config (rates, CORS, ...), on top of testConfig's. */
  env?: Record<string, string>;
  fill?: Partial<Omit<FillOptions, 'hours' | 'start' | 'until'>> & ConstructorParameters<typeof StandInUpstream>[0];
  /** Share capture's latest books and health with the API, as `make run` does. */
  shareCapture?: boolean;
}

/**
 * The test's directory, removed only after its teardowns have run. tap removes a `t.testdir()` when
 * the test ends and only then runs the teardowns registered after it (@tapjs/fixture wraps the end
 * inside @tapjs/after's), so processes, servers and DuckDB still wrote into a directory being
 * removed: a write during the removal threw (ENOTEMPTY), the teardowns that stop them were skipped,
 * and an API process kept the file open to its timeout (cluster.test, once). A teardown registered
 * first puts the end in order: teardowns, then the removal.
 */
export function testdir(t: Test): string {
  // A second call in one test would remove the first's directory (tap names it by the test): a fresh one inside it.
  const calls = (testdirs.get(t) ?? 0) + 1;
  testdirs.set(t, calls);
  if (calls > 1) return fs.mkdtempSync(path.join(t.testdirName, `${calls}-`));
  t.teardown(() => undefined);
  return t.testdir();
}
const testdirs = new WeakMap<Test, number>();

/**
 * The fixture most API tests need: a lake written by real capture from the stand-in over
 * [start, end), sealed, and the real API over it on port 0 with its clock at `end`; stopped and
 * closed when the test ends.
 */
export async function lakeServer(t: Test, options: LakeServerOptions) {
  const dir = testdir(t);
  const config = testConfig(dir, options.env);
  const duck = await Duck.open(2);
  const { seed, faults, misresolveRate, ...pace } = options.fill ?? {};
  const run = await fill(
    config,
    duck,
    quiet,
    { hours: 0, speed: 400, pollMs: 3000, ...pace, start: options.start, until: options.end },
    new StandInUpstream({ seed, faults, misresolveRate }),
  );
  await sealAll(duck, dir);
  const shared = options.shareCapture ? { latest: run.capture.latest, capture: run.capture } : {};
  const api = await startApi(config, duck, createClock(options.end, 1), quiet, { ...shared, port: 0 });
  t.teardown(async () => {
    await api.stop();
    await duck.close();
  });
  return { dir, config, duck, run, api, key: async (plan: 'free' | 'paid' = 'paid') => (await api.keys.issue(plan, 'test')).key };
}

/** The environment of a `jobs/capture.ts` process against a stand-in at `url`, on a simulated clock. */
export function captureEnv(
  dir: string,
  url: string,
  clock: { start: number; speed: number; anchor: number },
  extra: Record<string, string> = {},
) {
  return {
    ...CHILD_ENV,
    DATA_DIR: dir,
    LOG_FORMAT: 'json',
    CLOCK_START: String(clock.start),
    CLOCK_SPEED: String(clock.speed),
    CLOCK_ANCHOR: String(clock.anchor),
    WALLET_BASE_URL: `${url}${WALLET_PREFIX}`,
    WALLET_RPS: '100000',
    WALLET_CONCURRENCY: '16',
    POLYMARKET_GAMMA_URL: url,
    POLYMARKET_CLOB_URL: url,
    POLYMARKET_RPS: '100000',
    POLL_MS: '1000',
    SPOOL_FLUSH_MS: '200',
    CAPTURE_STREAM: 'none',
    ...extra,
  };
}

/**
 * How tests start a TypeScript entry point in a child process: as `make` does (tsx), with the test
 * runner's coverage off there. A child compiles the sources with tsx and the tests with the runner's
 * loader; coverage of the two, merged by script URL, miscounted whole files (89-97% run to run), and
 * the runner's loader starts a child a second slower, which clock-driven tests cannot spare.
 */
export const TS_NODE_ARGS: readonly string[] = ['--import', 'tsx'];
export const CHILD_ENV: NodeJS.ProcessEnv = {
  ...process.env,
  _TAPJS_PROCESSINFO_COVERAGE_: '0',
  REPLAY_COPIES: 'off',
  CAPTURE_REFERENCE: 'off',
};

/** Starts `jobs/capture.ts` processes with `env`; a failed assertion never leaves one writing into the test directory. */
export function captureProcesses(t: Test, env: NodeJS.ProcessEnv): () => ChildProcess {
  const children = new Set<ChildProcess>();
  t.teardown(() => Promise.all([...children].map(killProcess)));
  return () => {
    const child = spawn(process.execPath, [...TS_NODE_ARGS, path.resolve('jobs/capture.ts')], {
      env,
      stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
    });
    children.add(child);
    return child;
  };
}

/**
 * A job (`jobs/<script>`) for test `t`: stopped at its teardown however the test ends, and given an IPC
 * channel, so a long-running job whose test process died first (the runner's timeout) stops by itself
 * (jobs stop on `disconnect`) instead of writing on into a directory nobody owns.
 */
export function spawnJob(
  t: Test,
  script: string,
  args: string[],
  env: NodeJS.ProcessEnv,
  stdout: 'pipe' | 'ignore' = 'pipe',
): ChildProcess {
  const child = spawn(process.execPath, [...TS_NODE_ARGS, path.resolve('jobs', script), ...args], {
    env,
    stdio: ['ignore', stdout, 'pipe', 'ipc'],
  });
  t.teardown(() => killProcess(child));
  return child;
}

/** Its exit code once it exits; a job still running after `ms` is killed and fails the wait, never hangs the test. */
export function exitedWithin(child: ChildProcess, ms: number): Promise<number | null> {
  let late = false;
  const timer = setTimeout(() => {
    late = true;
    child.kill('SIGKILL');
  }, ms);
  return exited(child).then((code) => {
    clearTimeout(timer);
    if (late) throw new Error(`${child.spawnargs.join(' ')} still running after ${ms} ms`);
    return code;
  });
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * SIGTERM, then SIGKILL (to its process group, when it leads one) if it has not exited within `ms`:
 * a teardown that never waits forever, nor leaves a process behind.
 */
export function stopProcess(child: ChildProcess, ms = 20_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const killer = setTimeout(() => void killProcess(child), ms);
    child.once('exit', () => {
      clearTimeout(killer);
      resolve();
    });
    child.kill('SIGTERM');
  });
}
/** Its exit code (null: a signal), at once when it has already exited. */
export const exited = (p: ChildProcess): Promise<number | null> =>
  p.exitCode !== null || p.signalCode !== null ? Promise.resolve(p.exitCode) : new Promise((r) => p.once('exit', (code) => r(code)));

/**
 * SIGKILL to the process and, when it leads a process group (an API started by startApiProcess,
 * whose cluster workers share it), to the whole group; resolves once it has exited.
 */
export function killProcess(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  const gone = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  try {
    process.kill(-child.pid!, 'SIGKILL');
  } catch {
    child.kill('SIGKILL');
  }
  return gone;
}

/**
 * At least `ms`, then until `enough` holds, at most 180 s: a guard against a product that never
 * gets there, not a bound on speed (beside stress-ng --cpu 4 a capture process took more than
 * 25 s, the bound this was, to start and record its first rows; the test then stopped it before
 * it had installed its signal handlers).
 */
export async function runFor(ms: number, enough: () => Promise<boolean>): Promise<void> {
  const started = Date.now();
  await sleep(ms);
  while (Date.now() - started < 180_000 && !(await enough())) await sleep(250);
}

/** A stand-in on a shared clock and a DuckDB for tests that run capture as real processes. */
export async function processRig(t: Test, start: number, speed: number) {
  const dir = testdir(t);
  const anchor = Date.now();
  const clock = createClock(start, speed, anchor);
  const standin = new StandIn({ clock, walletWeightPerMinute: Number.MAX_SAFE_INTEGER });
  const url = await standin.start(0);
  const duck = await Duck.open(1);
  t.teardown(async () => {
    await duck.close();
    await standin.stop();
  });
  return { dir, anchor, clock, standin, url, duck, clockEnv: { start, speed, anchor } };
}

export interface ApiProcess {
  child: ChildProcess;
  url: string;
  /** Its log lines, as they come. */
  lines: Record<string, unknown>[];
  stderr: string[];
}

/**
 * `jobs/api.ts` (as `make api` runs it) over `dataDir` on a free port, once it says it listens. Ended at
 * `t`'s teardown from the moment it is spawned: `stop` (SIGTERM, the clean stop) or `kill` (SIGKILL to it
 * and its cluster workers, for tests that leave requests hanging on purpose).
 */
export async function startApiProcess(
  t: Test,
  dataDir: string,
  env: Record<string, string>,
  end: 'stop' | 'kill' = 'stop',
): Promise<ApiProcess> {
  const child = spawn(process.execPath, [...TS_NODE_ARGS, path.resolve('jobs/api.ts')], {
    env: { ...CHILD_ENV, DATA_DIR: dataDir, PORT: '0', LOG_FORMAT: 'json', LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
    // Its own process group: a kill reaches its cluster workers too (killProcess), as a crash of the host would.
    detached: true,
  });
  t.teardown(() => (end === 'stop' ? stopProcess(child) : killProcess(child)));
  const lines: Record<string, unknown>[] = [];
  const stderr: string[] = [];
  child.stderr!.on('data', (d: Buffer) => stderr.push(d.toString()));
  let buffered = '';
  const url = await new Promise<string>((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`api exited ${code}: ${stderr.join('')}`)));
    child.stdout!.on('data', (d: Buffer) => {
      buffered += d.toString();
      const parts = buffered.split('\n');
      buffered = parts.pop()!;
      for (const p of parts) {
        try {
          const line = JSON.parse(p) as Record<string, unknown>;
          lines.push(line);
          if (line.msg === 'api listening') resolve(String(line.url));
        } catch {
          stderr.push(`stdout, not JSON: ${p}`);
        }
      }
    });
  });
  return { child, url, lines, stderr };
}

/** A Polymarket market open for good, with its condition and two outcome tokens: what scripted-venue tests track. */
export function openMarket(id: string, condition: string, tokens: [string, string]) {
  return bareMarket({
    market_id: id,
    venue: 'polymarket',
    coin: 'btc',
    window: '5m',
    start_time: 0,
    end_time: Number.MAX_SAFE_INTEGER,
    status: 'open',
    condition_id: condition,
    outcomes: [
      { index: 0, label: 'Up', token_id: tokens[0] },
      { index: 1, label: 'Down', token_id: tokens[1] },
    ],
  });
}
