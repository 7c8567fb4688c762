// make bench-capture (last step): an hour at 50,000 changes/s (360M book rows, a row per
// outcome, about 190 GiB of spool in all) written and sealed as capture does, rolling stretches
// as it goes, in about half an hour; then spools left whole sealed in a fresh process (make seal).
// Peak RSS of each process, with capture's DuckDB settings. BENCH_LIVE_ROWS shortens the hour.
import { fork } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { writeSection } from './report.js';
import { loadConfig } from '../src/config.js';
import { Duck } from '../src/lake/duckdb.js';
import { listFiles } from '../src/lake/fsutil.js';
import { lakePaths, partitionOf } from '../src/lake/layout.js';
import { FILE_SPOOL_BYTES, sealDue, sealingDuck } from '../src/lake/seal.js';
import { Spool } from '../src/lake/spool.js';
import type { BookRow } from '../src/records.js';
import { HOUR } from '../src/time.js';
import { onBooksFile } from '../src/lake/writer.js';
import { writeServingCopy } from '../src/pages/copywriter.js';

// Sealed books files get their serving copy, as the jobs that seal give them.
onBooksFile(writeServingCopy);

const HOUR0 = Date.parse('2026-07-26T13:00:00Z');
const MARKETS = Number(process.env.BENCH_SEAL_MARKETS ?? 100);
const LEVELS = 15;

interface Figures {
  rows: number;
  files: number;
  spoolBytes: number;
  seconds: number;
  peakRss: number;
  parquetBytes: number;
  memoryLimit: string;
}

/**
 * An hour of book changes of MARKETS markets in time order, in batches: each change moves one
 * level of one outcome's book and writes a row per outcome, the unchanged outcome's row with the
 * very arrays of its previous one, as streamed capture does (so its ladders are encoded once).
 */
function* hourBatches(rows: number, batchRows = 20_000): Generator<BookRow[]> {
  const ladder = (from: number, step: number) => Array.from({ length: LEVELS }, (_, i) => Math.round((from + i * step) * 100) / 100);
  const books = Array.from({ length: MARKETS * 2 }, () => ({
    bid_prices: ladder(0.49, -0.01),
    bid_sizes: ladder(100, 7),
    ask_prices: ladder(0.51, 0.01),
    ask_sizes: ladder(90, 5),
  }));
  let seed = 7;
  const random = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
  let batch: BookRow[] = [];
  for (let r = 0; r < rows; r += 2) {
    const market = (r / 2) % MARKETS;
    const ts = HOUR0 + Math.floor((r / rows) * HOUR);
    const moved = random() < 0.5 ? 0 : 1;
    const book = books[market * 2 + moved];
    const side = random() < 0.5 ? 'bid_sizes' : 'ask_sizes';
    const sizes = [...book[side]];
    sizes[Math.floor(random() * LEVELS)] = Math.round(random() * 50_000) / 100;
    books[market * 2 + moved] = { ...book, [side]: sizes };
    for (const outcome of [0, 1] as const) {
      batch.push({
        ts,
        recv_ts: ts + 3,
        market_id: String(1_000_000 + market),
        token_id: `token-${market}-${outcome}`,
        outcome_index: outcome,
        outcome: outcome ? 'Down' : 'Up',
        exchange_ts: ts,
        ...books[market * 2 + outcome],
      });
    }
    if (batch.length >= batchRows) {
      yield batch;
      batch = [];
    }
  }
  if (batch.length) yield batch;
}

const PARTITION = partitionOf('books', 'polymarket', 'btc', '5m', HOUR0);

/** Bytes of the files under `root` whose names end with `suffix`. */
async function bytesUnder(root: string, suffix: string): Promise<number> {
  let bytes = 0;
  for (const rel of await listFiles(root, suffix)) bytes += (await fs.stat(path.join(root, rel))).size;
  return bytes;
}

const spoolBytes = (dir: string) => bytesUnder(lakePaths(dir).spool, '.ndjson');
const parquetBytes = (dir: string) => bytesUnder(path.join(dir, 'lake', 'books'), '.parquet');

async function spoolHour(dir: string, rows: number): Promise<number> {
  const spool = new Spool(lakePaths(dir).spool);
  for (const batch of hourBatches(rows)) {
    spool.append(PARTITION, batch);
    await spool.flush();
  }
  await spool.close();
  return spoolBytes(dir);
}

interface LiveFigures {
  rows: number;
  files: number;
  seconds: number;
  peakRss: number;
  spoolPeak: number;
  parquetBytes: number;
  memoryLimit: string;
}

/**
 * An hour written and sealed as capture does it, in one process: rows appended and flushed,
 * and a seal pass (sealDue with the spool) every PASS_ROWS rows, as capture's every 2 s at
 * 50,000 changes/s. The rows come faster than that, so a pass that is still running when the
 * next is due makes the writer wait once the spool since it began holds more than a roll.
 */
async function liveHour(dir: string, rows: number): Promise<LiveFigures> {
  const PASS_ROWS = 200_000;
  const config = loadConfig({ DATA_DIR: dir });
  const duck = await Duck.open(1, sealingDuck(config));
  const paths = lakePaths(dir);
  const spool = new Spool(paths.spool);
  const during = HOUR0 + HOUR - 1;
  let files = 0;
  let pass: Promise<void> | null = null;
  let passStartedAt = 0;
  let spoolPeak = 0;
  const runPass = (now: number) =>
    sealDue(duck, paths, now, () => 0, spool).then(async (r) => {
      files += r.files;
      spoolPeak = Math.max(spoolPeak, await spoolBytes(dir));
    });
  const started = performance.now();
  let written = 0;
  let sinceOne = 0;
  for (const batch of hourBatches(rows)) {
    spool.append(PARTITION, batch);
    await spool.flush();
    written += batch.length;
    sinceOne += batch.length;
    if (sinceOne < PASS_ROWS) continue;
    sinceOne = 0;
    if (pass && written - passStartedAt > (FILE_SPOOL_BYTES * 0.75) / 500) await pass;
    if (pass) continue;
    passStartedAt = written;
    pass = runPass(during).finally(() => (pass = null));
  }
  await pass;
  await spool.close();
  // The hour over: its last stretch, then the pass that removes what lingered.
  await runPass(HOUR0 + 2 * HOUR);
  await runPass(HOUR0 + 2 * HOUR);
  const seconds = (performance.now() - started) / 1000;
  const hwm = Number(/VmHWM:\s+(\d+)/.exec(await fs.readFile('/proc/self/status', 'utf8'))?.[1] ?? 0) / 1024;
  const figures = {
    rows: written,
    files,
    seconds,
    peakRss: hwm,
    spoolPeak,
    parquetBytes: await parquetBytes(dir),
    memoryLimit: config.capture.sealMemoryLimit,
  };
  await duck.close();
  return figures;
}

/** Runs `mode` on `dir` in a fresh process, so VmHWM is that process's own peak. */
async function child<T>(mode: string, dir: string, rows?: number): Promise<T> {
  const proc = fork(path.resolve('bench/seal.ts'), [mode, dir, String(rows ?? '')], { execArgv: ['--import', 'tsx'] });
  return new Promise<T>((resolve, reject) => {
    proc.once('message', (m) => resolve(m as T));
    proc.once('exit', (code) => code !== 0 && reject(new Error(`${mode} child exited ${code}`)));
  });
}

if (process.argv[2] === 'spool') {
  // By hand: an hour's spool left in a directory, to seal with other settings.
  await spoolHour(process.argv[3], Number(process.argv[4]));
} else if (process.argv[2] === 'seal') {
  // The child: only the seal of a spool left whole (a dead capture's, by `make seal`).
  const dir = process.argv[3];
  const config = loadConfig({ DATA_DIR: dir });
  const duck = await Duck.open(1, sealingDuck(config));
  const started = performance.now();
  const report = await sealDue(duck, lakePaths(dir), HOUR0 + 2 * HOUR, () => 0);
  const seconds = (performance.now() - started) / 1000;
  const hwm = Number(/VmHWM:\s+(\d+)/.exec(await fs.readFile('/proc/self/status', 'utf8'))?.[1] ?? 0) / 1024;
  const figures = { rows: report.rows, files: report.files, seconds, peakRss: hwm, parquetBytes: await parquetBytes(dir) };
  await duck.close();
  process.send!({ ...figures, memoryLimit: config.capture.sealMemoryLimit }, () => process.exit(0));
} else if (process.argv[2] === 'live') {
  process.send!(await liveHour(process.argv[3], Number(process.argv[4])), () => process.exit(0));
} else {
  const n = (x: number) => Math.round(x).toLocaleString('en');
  const gib = (x: number) => `${(x / 2 ** 30).toFixed(2)} GiB`;
  const sizes = (process.env.BENCH_SEAL_ROWS ?? '1000000,3000000').split(',').map(Number);
  const whole: Figures[] = [];
  for (const rows of sizes) {
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'bench-seal-'));
    const spooled = await spoolHour(dir, rows);
    whole.push({ ...(await child<Omit<Figures, 'spoolBytes'>>('seal', dir)), spoolBytes: spooled });
    console.log(`${rows} rows, sealed whole: ${JSON.stringify(whole.at(-1))}`);
    await fs.rm(dir, { recursive: true, force: true });
  }
  const hourRows = 50_000 * 2 * 3600;
  const liveRows = Number(process.env.BENCH_LIVE_ROWS ?? hourRows);
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'bench-seal-'));
  const live = await child<LiveFigures>('live', dir, liveRows);
  console.log(`${liveRows} rows, written and sealed live: ${JSON.stringify(live)}`);
  await fs.rm(dir, { recursive: true, force: true });
  const table = whole
    .map(
      (r) =>
        `| ${n(r.rows)} | ${gib(r.spoolBytes)} | ${r.files} | ${r.seconds.toFixed(1)} s (${n(r.rows / r.seconds)} rows/s) | ${r.peakRss.toFixed(0)} MiB | ${(r.parquetBytes / r.rows).toFixed(1)} B |`,
    )
    .join('\n');
  const perRow = whole.length ? whole[whole.length - 1].spoolBytes / whole[whole.length - 1].rows : 0;
  await writeSection(
    '## Sealing an hour (`make bench-capture`)',
    `## Sealing an hour (\`make bench-capture\`)

Machine: ${os.cpus().length} x ${os.cpus()[0]?.model ?? 'unknown'}, ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}, ${new Date().toISOString().slice(0, 10)}.
Book rows of ${MARKETS} markets in one partition (${LEVELS} levels a side; each change moves one level of one outcome and writes a row per
outcome, as streamed capture does), through the real spool and \`sealDue\` with capture's DuckDB settings (memory_limit
${live.memoryLimit}, \`SEAL_MEMORY_LIMIT\`, one thread). Peak RSS is the process's VmHWM.

**An hour at 50,000 changes/s, written and sealed as capture does** (one process: rows appended and flushed, a seal pass every
200,000 rows as capture's every 2 s at that rate; a partition is rolled and sealed each time its spool reaches 3/4 of
\`FILE_SPOOL_BYTES\`; the rows come faster than real time, so the writer waits for a pass still running once the spool holds
more than a roll):

| rows | files | written and sealed in | peak RSS (writer and seals) | spool on disk at most | Parquet per row |
|---|---|---|---|---|---|
| ${n(live.rows)} | ${live.files} | ${(live.seconds / 60).toFixed(1)} min (${n(live.rows / live.seconds)} rows/s) | ${live.peakRss.toFixed(0)} MiB | ${gib(live.spoolPeak)} | ${(live.parquetBytes / live.rows).toFixed(1)} B |

${liveRows === hourRows ? 'That is the whole hour. ' : `(${n(liveRows)} rows, not the whole hour of ${n(hourRows)}: \`BENCH_LIVE_ROWS\`.) `}The spool on disk never
holds more than about two rolls (one being written, one sealed and kept until the next pass for readers), and each seal is one
stretch, so neither the disk nor the memory a seal needs grows with the hour's rate.

**A spool left whole** (a dead capture's, sealed by \`make seal\` in a fresh process):

| rows in the hour | spool | files | seal | peak RSS | Parquet per row |
|---|---|---|---|---|---|
${table}

A file holds at most ${(FILE_SPOOL_BYTES / 2 ** 30).toFixed(0)} GiB of spool (\`FILE_SPOOL_BYTES\`${perRow ? `, about ${n(FILE_SPOOL_BYTES / perRow)} rows here` : ''}): DuckDB's writer keeps each
row group's metadata until the footer (measured with one file per hour: +6.1 MiB per million rows), and a file per stretch
bounds that, and the footers readers load. On 2026-11-23 a 9M-row spool sealed whole into 3 files peaked at 218-283 MiB
across six runs. Before that date the seal sorted the hour in memory: 2M rows peaked at 3.0 GiB.
`,
  );
}
