// make bench-disk: what `make run`'s capture costs on disk, per book row and per venue. Capture of
// both venues' feeds from the stand-in, as `make run` configures them (its coins, both windows,
// change by change), on a clock BENCH_DISK_SPEED times the wall's for BENCH_DISK_HOURS simulated
// hours, every hour sealed; then each form the same rows take: the lake's Parquet, the serving
// copies written at seal, the replay copies of every market (as `make replay-copies` writes them)
// and PostgreSQL 15's table, TOAST and index (one table per venue, loaded from the Parquet).
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { Capture } from '../src/capture/capture.js';
import { pacedClock } from '../src/clock.js';
import { type Venue, loadConfig } from '../src/config.js';
import { Duck } from '../src/lake/duckdb.js';
import { listFiles, sha256File } from '../src/lake/fsutil.js';
import { lakePaths } from '../src/lake/layout.js';
import { LakeReader } from '../src/lake/reader.js';
import { onBooksFile } from '../src/lake/writer.js';
import { SERVING_VERSION } from '../src/pages/copyformat.js';
import { writeServingCopy } from '../src/pages/copywriter.js';
import { ReplayCopies, copyContents } from '../src/replay/copy.js';
import { CopyBudget } from '../src/replay/copybudget.js';
import { StandIn } from '../src/standin/server.js';
import { standinConfig } from '../src/standin/upstream.js';
import { HOUR, MINUTE } from '../src/time.js';
import { createAdapters } from '../src/venues/index.js';
import { ensureTools, startPostgres } from './pg.js';
import { writeSection } from './report.js';
import { builtOnce } from './tools.js';

onBooksFile(writeServingCopy);

const HOURS = Number(process.env.BENCH_DISK_HOURS ?? 24);
const SPEED = Number(process.env.BENCH_DISK_SPEED ?? 20);
const FROM = Date.parse('2026-07-26T00:00:00Z');
const TO = FROM + HOURS * HOUR;
const VENUES: Venue[] = ['polymarket', 'wallet-prediction'];
const root = process.env.BENCH_ROOT ?? (await fs.mkdtemp(path.join(os.tmpdir(), 'bench-disk-')));
const dir = path.join(root, `disk-lake-${HOURS}h-${SPEED}x`);
const log = pino({ level: 'warn' });

/** Recorded once per BENCH_ROOT. */
async function record(): Promise<void> {
  let progress = () => FROM - 2 * MINUTE;
  const clock = pacedClock(FROM - 2 * MINUTE, SPEED, Date.now(), Infinity, 3000, () => progress());
  const config = loadConfig({ ...process.env, DATA_DIR: dir });
  const standin = new StandIn({
    clock,
    apiKey: config.wallet.apiKey,
    apiSecret: config.wallet.apiSecret,
    walletWeightPerMinute: Number.MAX_SAFE_INTEGER,
  });
  const cfg = standinConfig(config, await standin.start());
  const duck = await Duck.open(2);
  const capture = new Capture(cfg, clock, duck, createAdapters(cfg, clock), log, null);
  progress = () => capture.progress();
  await capture.start();
  while (clock.now() < TO) {
    await new Promise((r) => setTimeout(r, 1000));
    process.stderr.write(`\rrecording: ${new Date(clock.now()).toISOString()} (until ${new Date(TO).toISOString()})`);
  }
  process.stderr.write('\n');
  await capture.stop();
  await capture.seal(clock.now());
  await standin.stop();
  await duck.close();
}

const recorded = await builtOnce(dir, record);
await ensureTools();
const paths = lakePaths(dir);
const duck = await Duck.open(2);
const books = Object.fromEntries(VENUES.map((v) => [v, [] as string[]])) as Record<Venue, string[]>;
for (const f of await listFiles(paths.lake, '.parquet')) {
  const venue = VENUES.find((v) => f.startsWith(`books/venue=${v}/`));
  if (venue) books[venue].push(path.join(paths.lake, f));
}
type Row = {
  rows: number;
  parquet: number;
  serving: number;
  replay: number;
  replayRows: number;
  replayMarkets: number;
  kept: number;
  keptRows: number;
  keptMarkets: number;
  pg: number;
  pgIndex: number;
};
const zero = (): Row => ({
  rows: 0,
  parquet: 0,
  serving: 0,
  replay: 0,
  replayRows: 0,
  replayMarkets: 0,
  kept: 0,
  keptRows: 0,
  keptMarkets: 0,
  pg: 0,
  pgIndex: 0,
});
const by = Object.fromEntries(VENUES.map((v) => [v, zero()])) as Record<Venue, Row>;
const servingDir = path.join(paths.serving, 'books');
const servingFiles = new Map(
  (await listFiles(servingDir, `.v${SERVING_VERSION}.pages`)).map((f) => [path.basename(f), path.join(servingDir, f)]),
);
let uncopied = 0;
for (const v of VENUES) {
  const files = books[v];
  if (!files.length) continue;
  by[v].rows = Number((await duck.rows(`SELECT count(*)::BIGINT AS n FROM read_parquet([${files.map((f) => `'${f}'`).join(',')}])`))[0].n);
  for (const f of files) {
    by[v].parquet += (await fs.stat(f)).size;
    const copy = servingFiles.get(`${await sha256File(f)}.v${SERVING_VERSION}.pages`);
    if (copy) by[v].serving += (await fs.stat(copy)).size;
    else uncopied++;
  }
}

// Every market's replay copy, as `make replay-copies` writes them.
const replayBegan = performance.now();
{
  const reader = new LakeReader(duck, paths);
  await reader.open();
  // Unbounded, each ranked by its market's end (its mtime), as the service ranks them.
  const unbounded = new CopyBudget(path.join(paths.serving, 'replay'), servingDir, () => 0, Infinity);
  const copies = new ReplayCopies(path.join(paths.serving, 'replay'), reader, log, unbounded);
  copies.sweep(Date.now(), Infinity);
  await copies.idle();
}
const replaySeconds = (performance.now() - replayBegan) / 1000;
const replayDir = path.join(paths.serving, 'replay');
const replayCopies = async (add: (r: Row, bytes: number, rows: number) => void) => {
  for (const f of await listFiles(replayDir, '.replay')) {
    const bytes = await fs.readFile(path.join(replayDir, f));
    add(by[f.split(path.sep)[0] as Venue], bytes.length, copyContents(bytes).rows);
  }
};
await replayCopies((r, bytes, rows) => ((r.replay += bytes), (r.replayRows += rows), r.replayMarkets++));
// What the service keeps of them at the default COPIES_SHARE=1: serving and replay copies within the
// books Parquet's bytes, the markets that ended last kept (none was read: each ranks by its end).
const parquetBytes = VENUES.reduce((sum, v) => sum + by[v].parquet, 0);
const budget = new CopyBudget(replayDir, servingDir, () => parquetBytes, 1);
await budget.settle();
await replayCopies((r, bytes, rows) => ((r.kept += bytes), (r.keptRows += rows), r.keptMarkets++));

const pg = startPostgres(root, duck, path.join(root, 'pg'));
for (const v of VENUES) {
  if (!books[v].length) continue;
  const table = `books_${v.replace(/-/g, '_')}`;
  const loaded = await pg.load(table, books[v]);
  if (loaded.rows !== by[v].rows) throw new Error(`PostgreSQL has ${loaded.rows} rows of ${v}, the lake ${by[v].rows}`);
  by[v].pg = loaded.bytes;
  by[v].pgIndex = Number(pg.psql(`SELECT pg_indexes_size('${table}')`).trim());
}
const pgVersion = pg.version();
pg.stop();
await duck.close();
const cpus = os.cpus();
const perRow = (bytes: number, rows: number) => (rows ? bytes / rows : 0).toFixed(1);
const times = (bytes: number, of: number) => `${(of ? bytes / of : 0).toFixed(2)}x`;
const mib = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MiB`;
const lines: string[] = [];
const total = zero();
for (const v of [...VENUES, 'both'] as const) {
  const r = v === 'both' ? total : by[v];
  if (v !== 'both') for (const k of Object.keys(total) as (keyof Row)[]) total[k] += r[k];
  const every = r.serving + r.replay;
  const kept = r.serving + r.kept;
  const share = (n: number, of: number) => `${of ? Math.round((100 * n) / of) : 0}%`;
  lines.push(
    `| ${v} | ${r.rows.toLocaleString('en')} | ${mib(r.parquet)}, ${perRow(r.parquet, r.rows)} B | ${perRow(r.serving, r.rows)} B, ${times(r.serving, r.parquet)} | ${perRow(r.replay, r.rows)} B, ${times(r.replay, r.parquet)} | ${perRow(every, r.rows)} B, ${times(every, r.parquet)} | ${share(r.keptMarkets, r.replayMarkets)} of markets, ${share(r.keptRows, r.replayRows)} of rows | ${perRow(kept, r.rows)} B, ${times(kept, r.parquet)} | ${perRow(r.pg, r.rows)} B, ${times(r.pg, r.parquet)} (index ${perRow(r.pgIndex, r.rows)} B) |`,
  );
}
const allCopies = (total.serving + total.replay) / total.parquet;
const keptCopies = (total.serving + total.kept) / total.parquet;
await writeSection(
  '## Disk of a recorded lake (`make bench-disk`)',
  `## Disk of a recorded lake (\`make bench-disk\`)

Machine: ${cpus.length} x ${cpus[0]?.model.replace(/\s+/g, ' ').trim()}, ${Math.round(os.totalmem() / 2 ** 30)} GiB, Node ${process.version}, PostgreSQL ${pgVersion.trim()}, ${new Date().toISOString().slice(0, 10)}.
Capture of both venues' feeds from the stand-in as \`make run\` configures it (its coins, both windows, every change), ${HOURS} simulated hours
at ${SPEED}x (${Math.round(recorded.seconds)} s), every hour sealed. Bytes per book row (one row per recorded change of a book) of each form
the rows take: the lake's books Parquet, the serving copies written at seal (pages), the replay copies of every market (written
after, in ${replaySeconds.toFixed(0)} s; bytes per row they hold), both copies together, what the service keeps of the replay copies
within the default budget (\`COPIES_SHARE=1\`: serving and replay copies together at most the books Parquet's bytes, the markets
that ended last kept), and PostgreSQL 15 loaded from the same Parquet (table, TOAST and btree on
(market_id, ts)).${uncopied ? ` ${uncopied} books file(s) had no serving copy.` : ''}

| venue | book rows | Parquet | serving copies | replay copies | all copies, every market | replay copies kept | all copies kept | PostgreSQL |
|---|---|---|---|---|---|---|---|---|
${lines.join('\n')}

- Parquet at or under 40 B per recorded change: ${total.parquet / total.rows <= 40 ? 'met' : '**missed**'} (${perRow(total.parquet, total.rows)} B).
- All copies at most the Parquet's bytes: with a replay copy of every market ${allCopies <= 1 ? 'met' : '**missed**'} (${allCopies.toFixed(2)}x);
  as the service keeps them ${keptCopies <= 1 ? 'met' : '**missed**'} (${keptCopies.toFixed(2)}x: a replay of a market without a copy renders
  from the Parquet, \`make bench-replay\`'s "copies missed" rows).
`,
);
