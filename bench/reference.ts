// make bench-reference: capture's reference-price socket alone against the stand-in, which runs in
// a process of its own so this process's CPU is capture's: a simulated hour at BENCH_SPEED, every
// symbol the socket sends (the recorded coins' on both topics, and others it ignores). Figures:
// capture's CPU per message and, at the socket's real rate, its share of a core; spool and zstd
// Parquet bytes per observation. Written into BENCHMARKS.md.
import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { writeSection } from './report.js';
import { Capture } from '../src/capture/capture.js';
import { loadConfig } from '../src/config.js';
import { Duck } from '../src/lake/duckdb.js';
import { listFiles } from '../src/lake/fsutil.js';
import { lakePaths } from '../src/lake/layout.js';
import { sealDue } from '../src/lake/seal.js';
import { createClock } from '../src/clock.js';
import { RTDS_PATH } from '../src/standin/rtds.js';
import { HOUR } from '../src/time.js';

const SPEED = Number(process.env.BENCH_SPEED ?? 60);
const PORT = 18_000 + Math.floor(Math.random() * 1000);
const start = Date.parse('2026-07-26T13:00:00Z');
const anchor = Date.now() + 2000;

const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'bench-reference-'));
const env = {
  ...process.env,
  STANDIN_PORT: String(PORT),
  CLOCK_START: String(start),
  CLOCK_SPEED: String(SPEED),
  CLOCK_ANCHOR: String(anchor),
  LOG_LEVEL: 'warn',
};
const standin: ChildProcess = spawn(process.execPath, ['--import', 'tsx', 'jobs/standin.ts'], { env, stdio: 'ignore' });
try {
  const base = loadConfig({ DATA_DIR: dir, CAPTURE_REFERENCE: 'on', POLYMARKET_CLOB_URL: `http://127.0.0.1:${PORT}`, LOG_LEVEL: 'silent' });
  const config = {
    ...base,
    capture: { ...base.capture, venues: [], stream: { ...base.capture.stream, venues: [] } },
    polymarket: { ...base.polymarket, rtdsUrl: `ws://127.0.0.1:${PORT}${RTDS_PATH}` },
  };
  while (Date.now() < anchor) await new Promise((r) => setTimeout(r, 50));
  const clock = createClock(start, SPEED, anchor);
  const duck = await Duck.open(1);
  const capture = new Capture(config, clock, duck, [], pino({ level: 'silent' }), null);
  await capture.start();
  const cpu0 = process.cpuUsage();
  const wall0 = performance.now();
  while (clock.now() < start + HOUR) await new Promise((r) => setTimeout(r, 200));
  const cpu = process.cpuUsage(cpu0);
  const wall = (performance.now() - wall0) / 1000;
  await capture.stop();
  const counts = capture.reference!.counts;
  const messages = counts.observations + counts.duplicates + counts.ignored;
  const spoolBytes = (
    await Promise.all(
      (await listFiles(lakePaths(dir).spool, '.ndjson')).map((f) => fs.stat(path.join(lakePaths(dir).spool, f)).then((s) => s.size)),
    )
  ).reduce((a, b) => a + b, 0);
  const spooledRows = capture.stats.reference;
  await sealDue(duck, lakePaths(dir), start + 3 * HOUR, () => 0);
  const files = (await listFiles(lakePaths(dir).lake, '.parquet')).filter((f) => f.startsWith('reference/'));
  const parquetBytes = (await Promise.all(files.map((f) => fs.stat(path.join(lakePaths(dir).lake, f)).then((s) => s.size)))).reduce(
    (a, b) => a + b,
    0,
  );
  const [{ n }] = await duck.rows(`SELECT count(*)::INTEGER AS n FROM read_parquet('${lakePaths(dir).lake}/reference/**/*.parquet')`);
  await duck.close();
  const cpuMs = (cpu.user + cpu.system) / 1000;
  const perMessageUs = (cpuMs * 1000) / messages;
  const realRate = messages / (wall * SPEED);
  await writeSection(
    '## Reference prices (`make bench-reference`)',
    `## Reference prices (\`make bench-reference\`)

Machine: ${os.cpus().length} x ${os.cpus()[0]?.model ?? 'unknown'}, ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}, ${new Date().toISOString().slice(0, 10)}.
Capture's price-socket recorder alone (\`CAPTURE_REFERENCE=on\`, no venue), against the stand-in in a process of its own, over a
simulated hour at ${SPEED}x (${wall.toFixed(0)} s): ${messages.toLocaleString('en')} messages, one observation each, of which
${counts.observations.toLocaleString('en')} recorded (5 coins on both topics), ${counts.ignored.toLocaleString('en')} of symbols no market trades, ${counts.duplicates} repeats; then sealed.

| figure | value |
|---|---|
| capture CPU per message (all the process did: parse, dedup, spool, flushes, timers; an upper bound) | ${perMessageUs.toFixed(1)} µs |
| at the socket's real rate (${realRate.toFixed(1)} messages/s) | ${((perMessageUs * realRate) / 1e4).toFixed(3)}% of one core |
| spool, per observation (JSON lines) | ${(spoolBytes / spooledRows).toFixed(1)} bytes |
| sealed, per observation (zstd Parquet, ${files.length} files) | ${(parquetBytes / Number(n)).toFixed(1)} bytes |
| sealed, per coin and day | ${(((parquetBytes / 5) * 24) / 2 ** 20).toFixed(2)} MiB |

The recorder runs on capture's main thread beside the poll loops; at about one observation a second per symbol it is noise
beside the market channel (see Streamed capture).
`,
  );
} finally {
  standin.kill('SIGTERM');
  await fs.rm(dir, { recursive: true, force: true });
}
