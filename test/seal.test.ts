// Sealing by runs: books and metrics are spooled as sorted runs of one market, and a seal
// concatenates them in order instead of sorting the hour. These tests write through the real
// spool, seal with the real writer, and read the Parquet file back in its stored row order.
import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs/promises';
import os from 'node:os';
import { promisify } from 'node:util';
import path from 'node:path';
import t from 'tap';
import { Duck, type JsonRow } from '../src/lake/duckdb.js';
import { lakePaths, partitionDir, partitionOf } from '../src/lake/layout.js';
import { manifestFile, readManifest } from '../src/lake/manifest.js';
import { LakeReader } from '../src/lake/reader.js';
import { runsInOrder, sealDue, sealingDuck } from '../src/lake/seal.js';
import { sweepUncommitted } from '../src/lake/writer.js';
import { Spool, listSpool } from '../src/lake/spool.js';
import { relation, sqlPath } from '../src/lake/sql.js';
import { scansInOrder } from '../src/api/plan.js';
import type { BookRow } from '../src/records.js';
import { HOUR } from '../src/time.js';
import { CHILD_ENV, TS_NODE_ARGS, exitedWithin, spawnJob, testConfig, testdir } from './helpers.js';
import { servingCopyPath } from '../src/pages/copyformat.js';

const run = promisify(execFile);
const HOUR0 = Date.parse('2026-07-26T13:00:00Z');
const books = partitionOf('books', 'polymarket', 'btc', '5m', HOUR0);

function book(market: string, ts: number, outcome: 0 | 1, size: number): BookRow {
  return {
    ts,
    recv_ts: ts + 5,
    market_id: market,
    token_id: `${market}-${outcome}`,
    outcome_index: outcome,
    outcome: outcome ? 'Down' : 'Up',
    exchange_ts: ts - 2,
    bid_prices: [0.49, 0.48],
    bid_sizes: [size, 10],
    ask_prices: [0.51],
    ask_sizes: [size + 1],
  };
}

type Stored = { market_id: string; ts: number; outcome_index: number; size: number };

/** A row of the SELECT that reads `Stored` columns (size is bid_sizes[1]). */
function asStored(r: JsonRow): Stored {
  return { market_id: String(r.market_id), ts: Number(r.ts), outcome_index: Number(r.outcome_index), size: Number(r.size) };
}

/** A sealed file's rows in the order it stores them. */
async function fileRows(duck: Duck, dir: string, name: string): Promise<Stored[]> {
  const file = path.join(lakePaths(dir).lake, partitionDir(books), name);
  const rows = await duck.rows(
    `SELECT market_id, epoch_ms(ts)::BIGINT AS ts, outcome_index, bid_sizes[1] AS size FROM read_parquet(${sqlPath(file)}, file_row_number = true) ORDER BY file_row_number`,
  );
  return rows.map(asStored);
}

/** The rows of the partition's one sealed file, in stored order. */
async function stored(duck: Duck, dir: string): Promise<Stored[]> {
  const manifest = await readManifest(lakePaths(dir).manifest, books);
  if (manifest.files.length !== 1) throw new Error(`${manifest.files.length} sealed files`);
  return fileRows(duck, dir, manifest.files[0].name);
}

function sortedAsDuckDB(rows: Stored[]): Stored[] {
  return [...rows].sort(
    (a, b) => Buffer.compare(Buffer.from(a.market_id), Buffer.from(b.market_id)) || a.ts - b.ts || a.outcome_index - b.outcome_index,
  );
}

t.test('each market gets parts of its own, and a row that goes back starts a new part', async (t) => {
  const dir = testdir(t);
  const spool = new Spool(lakePaths(dir).spool);
  spool.append(books, [book('m1', HOUR0 + 1000, 0, 1), book('m2', HOUR0 + 1000, 0, 2), book('m1', HOUR0 + 1000, 1, 3)]);
  await spool.flush();
  spool.append(books, [book('m1', HOUR0 + 2000, 0, 4), book('m1', HOUR0 + 1500, 0, 5), book('m1', HOUR0 + 1600, 1, 6)]);
  await spool.close();
  const parts = (await listSpool(lakePaths(dir).spool)).sort((a, b) => a.source.localeCompare(b.source));
  t.same(
    parts.map((p) => p.market),
    ['m1', 'm2', 'm1'],
    'm1 broke order once: two runs; m2 one',
  );
  const lines = await Promise.all(parts.map(async (p) => (await fs.readFile(p.file, 'utf8')).trim().split('\n').length));
  t.same(lines, [3, 1, 2]);
  const runs = await runsInOrder(parts, path.join(dir, 'staging'));
  t.same(
    runs?.map((r) => r.sources.length),
    [2, 1],
    'the overlapping runs of m1 are merged into one staged file; m2 is its own part',
  );
  t.ok(runs?.[0].file.startsWith(path.join(dir, 'staging')));
});

t.test('a seal concatenates runs in sealed order: markets by bytes, overlapping runs merged, restarts included', async (t) => {
  const dir = testdir(t);
  const duck = await Duck.open(1);
  t.teardown(() => duck.close());
  const appended: Stored[] = [];
  const add = (spool: Spool, rows: BookRow[]) => {
    spool.append(books, rows);
    for (const r of rows) appended.push({ market_id: r.market_id, ts: r.ts, outcome_index: r.outcome_index, size: r.bid_sizes[0] });
  };
  // Market ids whose byte order differs from their order in UTF-16 and in insertion.
  const markets = ['b', 'a', '\uff21', '\ud83d\ude00', 'Z', '0x9f'];
  const first = new Spool(lakePaths(dir).spool);
  let size = 0;
  for (let s = 0; s < 300; s++)
    for (const m of markets) add(first, [book(m, HOUR0 + s * 1000, 0, ++size), book(m, HOUR0 + s * 1000, 1, ++size)]);
  // A late REST row for one market, stamped before the rows already spooled: a second run.
  add(first, [book('a', HOUR0 + 150_500, 0, ++size)]);
  for (let s = 300; s < 310; s++) add(first, [book('a', HOUR0 + s * 1000, 0, ++size)]);
  await first.close();
  // A restarted process (another segment) whose rows overlap the first's for one market and follow them for another.
  const second = new Spool(lakePaths(dir).spool);
  add(second, [book('b', HOUR0 + 100_200, 1, ++size), book('Z', HOUR0 + 400_000, 0, ++size)]);
  await second.close();

  const report = await sealDue(duck, lakePaths(dir), HOUR0 + 2 * HOUR, () => 0);
  t.equal(report.rows, appended.length);
  const rows = await stored(duck, dir);
  t.same(rows, sortedAsDuckDB(appended), 'every row once, in (market_id, ts, outcome_index) order as stored');
  const [check] = await duck.rows(
    `SELECT count(*) FILTER (WHERE k < pk)::INTEGER AS back FROM (SELECT (market_id, ts, outcome_index) AS k, lag((market_id, ts, outcome_index)) OVER (ORDER BY file_row_number) AS pk FROM read_parquet(${sqlPath(path.join(lakePaths(dir).lake, partitionDir(books), '*.parquet'))}, file_row_number = true))`,
  );
  t.equal(check.back, 0, 'DuckDB agrees the file is in its own order');
  t.same(await listSpool(lakePaths(dir).spool), [], 'the spool is empty');
  t.same(await fs.readdir(path.join(lakePaths(dir).state, 'seal')).catch(() => []), [], 'staged merges are removed');
});

t.test('a busy hour becomes several files of bounded size, each in order, every row once', async (t) => {
  const dir = testdir(t);
  const duck = await Duck.open(1);
  t.teardown(() => duck.close());
  const spool = new Spool(lakePaths(dir).spool);
  const appended: Stored[] = [];
  for (let s = 0; s < 200; s++)
    for (let m = 0; m < 8; m++)
      for (const o of [0, 1] as const) {
        spool.append(books, [book(`m${m}`, HOUR0 + s * 1000, o, s * 100 + m)]);
        appended.push({ market_id: `m${m}`, ts: HOUR0 + s * 1000, outcome_index: o, size: s * 100 + m });
      }
  await spool.close();
  const spooled = (await Promise.all((await listSpool(lakePaths(dir).spool)).map(async (p) => (await fs.stat(p.file)).size))).reduce(
    (a, b) => a + b,
  );
  const report = await sealDue(duck, lakePaths(dir), HOUR0 + 2 * HOUR, () => 0, undefined, { fileSpoolBytes: spooled * 0.3 });
  const manifest = await readManifest(lakePaths(dir).manifest, books);
  t.equal(report.files, 4, 'eight equal markets, at most 30% of the bytes a file: four files of two');
  t.equal(manifest.files.length, 4);
  t.equal(
    manifest.files.reduce((n, f) => n + f.rows, 0),
    appended.length,
  );
  const all: Stored[] = [];
  for (const f of manifest.files) {
    const file = await fileRows(duck, dir, f.name);
    t.same(file, sortedAsDuckDB(file), `${f.name} is in order`);
    t.same(
      [f.min_ts, f.max_ts, f.rows],
      [Math.min(...file.map((r) => r.ts)), Math.max(...file.map((r) => r.ts)), file.length],
      'its manifest entry has its span and rows, known without reading it back',
    );
    all.push(...file);
  }
  t.same(sortedAsDuckDB(all), sortedAsDuckDB(appended), 'together, every row once');
});

t.test('an hour still being written is sealed a stretch at a time; readers see every row once throughout', async (t) => {
  const dir = testdir(t);
  const paths = lakePaths(dir);
  const duck = await Duck.open(1);
  t.teardown(() => duck.close());
  const reader = new LakeReader(duck, paths);
  await reader.open();
  const spool = new Spool(paths.spool);
  const fileSpoolBytes = 64 * 1024;
  const during = HOUR0 + 30 * 60_000;
  const appended: Stored[] = [];
  const add = (market: string, ts: number, outcome: 0 | 1) => {
    const size = appended.length;
    spool.append(books, [book(market, ts, outcome, size)]);
    appended.push({ market_id: market, ts, outcome_index: outcome, size });
  };
  const read = async () => {
    const rows = await duck.rows(
      `SELECT market_id, epoch_ms(ts)::BIGINT AS ts, outcome_index, bid_sizes[1] AS size FROM (${relation('books', await reader.files([books]))})`,
    );
    return rows.map(asStored);
  };
  let sealedEarly = 0;
  let spoolPeak = 0;
  for (let s = 0; s < 300; s++) {
    // Markets' rows interleave in time as a stream's do; one late row goes back and starts a run of its own.
    for (let m = 0; m < 4; m++) for (const o of [0, 1] as const) add(`m${m}`, HOUR0 + s * 1000 + ((m * 337) % 1000), o);
    if (s === 150) add('m0', HOUR0 + 20_500, 1);
    await spool.flush();
    if (s % 30 !== 29) continue;
    const parts = await listSpool(paths.spool);
    spoolPeak = Math.max(
      spoolPeak,
      (await Promise.all(parts.map(async (p) => (await fs.stat(p.file)).size))).reduce((a, b) => a + b, 0),
    );
    sealedEarly += (await sealDue(duck, paths, during, () => 0, spool, { fileSpoolBytes })).files;
    t.same(sortedAsDuckDB(await read()), sortedAsDuckDB(appended), `after ${s + 1} s: every row once, sealed or spooled`);
  }
  t.ok(sealedEarly >= 8, `${sealedEarly} files sealed while the hour was still being written`);
  // A sealed stretch stays one more pass (for readers that listed it just before its commit).
  t.ok(spoolPeak < fileSpoolBytes * 2.5, `the spool on disk stayed within two and a half files' worth (${spoolPeak} bytes)`);
  t.notOk(scansInOrder(await reader.files([books])), 'an export of such an hour sorts: its files may interleave a market');

  for (let m = 0; m < 4; m++) add(`m${m}`, HOUR0 + 301_000, 0);
  await spool.close();
  const last = await sealDue(duck, paths, HOUR0 + 2 * HOUR, () => 0, spool, { fileSpoolBytes });
  t.equal(last.files, 1, 'the hour over, its last stretch is sealed');
  t.equal((await listSpool(paths.spool)).length, 4, 'its parts stay for one pass');
  t.same(sortedAsDuckDB(await read()), sortedAsDuckDB(appended), '(and are not read twice)');
  await sealDue(duck, paths, HOUR0 + 2 * HOUR, () => 0, spool, { fileSpoolBytes });
  t.same(await listSpool(paths.spool), [], 'and are gone after it');
  const manifest = await readManifest(paths.manifest, books);
  t.equal(manifest.files.length, sealedEarly + 1);
  const all: Stored[] = [];
  for (const f of manifest.files) {
    const file = await fileRows(duck, dir, f.name);
    t.same(file, sortedAsDuckDB(file), `${f.name} is in order`);
    t.same([f.min_ts, f.max_ts, f.rows], [Math.min(...file.map((r) => r.ts)), Math.max(...file.map((r) => r.ts)), file.length]);
    all.push(...file);
  }
  t.same(sortedAsDuckDB(all), sortedAsDuckDB(appended), 'together, every row once');
});

t.test('flushes and rolls asked for at once neither repeat nor lose a row, and every part stays in order', async (t) => {
  const dir = testdir(t);
  const spool = new Spool(lakePaths(dir).spool);
  const appended: Stored[] = [];
  const asked: Promise<unknown>[] = [];
  for (let s = 0; s < 60; s++) {
    for (let m = 0; m < 3; m++) {
      spool.append(books, [book(`m${m}`, HOUR0 + s * 1000, 0, appended.length)]);
      appended.push({ market_id: `m${m}`, ts: HOUR0 + s * 1000, outcome_index: 0, size: appended.length });
    }
    asked.push(spool.flush());
    if (s % 7 === 0) {
      const roll = spool.roll(0);
      asked.push(roll);
      // Some rolls are waited for, so rows come after them however far a busy machine lets the
      // queued operations fall behind the appends (all of them after the last append, once: 3 parts).
      if (s % 21 === 0) await roll;
    }
    // Let the operations get under way (and be mid-write) before more rows come.
    await new Promise((r) => setTimeout(r, 1));
  }
  await Promise.all(asked);
  await spool.close();
  const parts = await listSpool(lakePaths(dir).spool);
  t.ok(parts.length > 3, `rolled into ${parts.length} parts`);
  const all: Stored[] = [];
  for (const part of parts) {
    const rows = (await fs.readFile(part.file, 'utf8'))
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { market_id: string; ts: number; outcome_index: number; bid_sizes: number[] })
      .map((r) => ({ market_id: r.market_id, ts: r.ts, outcome_index: r.outcome_index, size: r.bid_sizes[0] }));
    if (!rows.every((r, i) => r.market_id === part.market && (i === 0 || r.ts > rows[i - 1].ts))) t.fail(`${part.file} is out of order`);
    all.push(...rows);
  }
  t.same(sortedAsDuckDB(all), sortedAsDuckDB(appended), 'every row once');
});

t.test('parts of an earlier version (any markets, any order) are sorted as before', async (t) => {
  const dir = testdir(t);
  const duck = await Duck.open(1);
  t.teardown(() => duck.close());
  const rows = [book('m2', HOUR0 + 5000, 0, 1), book('m1', HOUR0 + 9000, 1, 2), book('m1', HOUR0 + 3000, 0, 3)];
  const legacy = path.join(lakePaths(dir).spool, 'old-seg', partitionDir(books), '000001.ndjson');
  await fs.mkdir(path.dirname(legacy), { recursive: true });
  await fs.writeFile(legacy, rows.map((r) => `${JSON.stringify(r)}\n`).join(''));
  const spool = new Spool(lakePaths(dir).spool);
  spool.append(books, [book('m1', HOUR0 + 4000, 0, 4)]);
  await spool.close();
  t.equal(await runsInOrder(await listSpool(lakePaths(dir).spool), path.join(dir, 'staging')), null, 'not all runs: sorted');
  await sealDue(duck, lakePaths(dir), HOUR0 + 2 * HOUR, () => 0);
  t.same(
    (await stored(duck, dir)).map((r) => r.size),
    [3, 4, 2, 1],
  );
});

t.test('an hour larger than the memory limit seals with capture’s settings, because it streams', async (t) => {
  const dir = testdir(t);
  const spool = new Spool(lakePaths(dir).spool);
  const ladder = Array.from({ length: 40 }, (_, i) => 100 + i);
  let rows = 0;
  // Five changes a second for an hour.
  for (let i = 0; i < 18_000; i++) {
    const batch: BookRow[] = [];
    for (let m = 0; m < 4; m++)
      for (const o of [0, 1] as const) {
        const r = book(`m${m}`, HOUR0 + i * 200, o, i);
        batch.push({ ...r, bid_prices: ladder, bid_sizes: ladder.map((x) => x + i + m), ask_prices: ladder, ask_sizes: ladder });
      }
    spool.append(books, batch);
    rows += batch.length;
    if (i % 500 === 0) await spool.flush();
  }
  await spool.close();
  const bytes = (await Promise.all((await listSpool(lakePaths(dir).spool)).map(async (p) => (await fs.stat(p.file)).size))).reduce(
    (a, b) => a + b,
  );
  t.ok(bytes > 96 * 2 ** 20, `spooled ${(bytes / 2 ** 20).toFixed(0)} MiB of rows, more than the limit of 96 MB`);
  // Few markets, so each run is large: two DuckDB threads would hold a whole run in memory.
  const duck = await Duck.open(1, sealingDuck(testConfig(dir, { SEAL_MEMORY_LIMIT: '96MB' })));
  t.teardown(() => duck.close());
  const report = await sealDue(duck, lakePaths(dir), HOUR0 + 2 * HOUR, () => 0);
  t.equal(report.rows, rows);
  const out = await stored(duck, dir);
  t.equal(out.length, rows);
  t.ok(
    out.every((r, i) => i === 0 || sortedAsDuckDB([out[i - 1], r])[0] === out[i - 1]),
    'in order',
  );
});

t.test('make seal (jobs/seal.ts) seals the spool and gives each books file its serving copy', async (t) => {
  const dir = testdir(t);
  const spool = new Spool(lakePaths(dir).spool);
  spool.append(books, [book('m1', HOUR0 + 1000, 0, 1), book('m1', HOUR0 + 1000, 1, 2), book('m2', HOUR0 + 2000, 0, 3)]);
  await spool.flush();
  await spool.close();
  const job = spawnJob(t, 'seal.ts', ['--all'], { ...CHILD_ENV, DATA_DIR: dir, LOG_LEVEL: 'warn' });
  let stderr = '';
  job.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  t.equal(await exitedWithin(job, 120_000), 0, stderr);
  const manifest = await readManifest(lakePaths(dir).manifest, books);
  t.equal(manifest.files.length, 1, 'the hour sealed');
  const copy = servingCopyPath(lakePaths(dir).serving, manifest.files[0].sha256);
  t.ok(await fs.stat(copy).catch(() => null), 'its serving copy written by the job, as capture writes one');
});

t.test(
  'a market capture finished is sealed at its end in a file of its own; its signature survives the hour’s seal and a compaction',
  async (t) => {
    const dir = testdir(t);
    const paths = lakePaths(dir);
    const duck = await Duck.open(1);
    t.teardown(() => duck.close());
    const reader = new LakeReader(duck, paths);
    await reader.open();
    const spool = new Spool(paths.spool);
    const during = HOUR0 + 20 * 60_000;
    const finished = new Set<string>();
    const seal = () =>
      sealDue(duck, paths, during, () => 0, spool, { finished: (p, market) => p.dataset === 'books' && finished.has(market) });
    const appended: Stored[] = [];
    const add = (market: string, ts: number, outcome: 0 | 1) => {
      const size = appended.length;
      spool.append(books, [book(market, ts, outcome, size)]);
      appended.push({ market_id: market, ts, outcome_index: outcome, size });
    };
    for (let s = 0; s < 300; s++) for (const m of ['a', 'b']) for (const o of [0, 1] as const) add(m, HOUR0 + s * 1000 + o, o);
    await spool.flush();
    t.equal((await seal()).files, 0, 'nothing finished, the hour not over: nothing sealed');
    t.ok(reader.spooled([books], 'a') && reader.spooled([books], 'b'));

    finished.add('a');
    t.equal((await seal()).files, 1, 'market a finished: sealed now, its hour still open');
    const manifest = await readManifest(paths.manifest, books);
    t.same(
      manifest.files.map((f) => Object.keys(f.markets ?? {})),
      [['a']],
      'a file of market a alone',
    );
    await seal();
    t.notOk(reader.spooled([books], 'a'), 'no part of a left in the spool (after the pass a sealed part lingers)');
    t.ok(reader.spooled([books], 'b'), 'b still spooled');
    t.ok(reader.spooled([books]), 'the hour still spooled');
    await reader.update();
    const signature = reader.marketSignature([books], 'a');
    t.not(signature, '', 'a has a signature');
    t.equal(reader.marketSignature([books], 'b'), '', 'b has none yet');
    const aRows = async () =>
      (
        await duck.rows(
          `SELECT market_id, epoch_ms(ts)::BIGINT AS ts, outcome_index, bid_sizes[1] AS size FROM (${relation('books', await reader.files([books], 'a'))}) WHERE market_id = 'a'`,
        )
      ).map(asStored);
    t.same(sortedAsDuckDB(await aRows()), sortedAsDuckDB(appended.filter((r) => r.market_id === 'a')), 'a read whole from its file');
    t.same((await reader.files([books], 'a')).spool, [], 'a market-filtered read lists no part of another market');

    // A row of a finished market that still comes starts a new part: sealed with its hour, and a's signature is gone till then.
    add('a', HOUR0 + 400_000, 0);
    add('b', HOUR0 + 400_000, 0);
    await spool.flush();
    await seal();
    t.ok(reader.spooled([books], 'a'), 'a late row of a is in the spool (its market is finished once)');
    await spool.close();
    await sealDue(duck, paths, HOUR0 + 2 * HOUR, () => 0, spool);
    await sealDue(duck, paths, HOUR0 + 2 * HOUR, () => 0, spool);
    await reader.update();
    const sealedA = reader.marketSignature([books], 'a');
    t.not(sealedA, signature, 'the late row changed what a holds');
    const sealedB = reader.marketSignature([books], 'b');
    t.same(sortedAsDuckDB(await aRows()), sortedAsDuckDB(appended.filter((r) => r.market_id === 'a')), 'every row of a once');

    // A compaction rewrites the hour as one file: what each market holds is the same, and so are their signatures.
    const { compact } = await import('../src/lake/compact.js');
    const report = await compact(duck, paths, HOUR0 + 3 * HOUR);
    t.equal(report.merged, 2, 'the hour’s two files compacted');
    await reader.update(true);
    t.equal((await readManifest(paths.manifest, books)).files.length, 1);
    t.equal(reader.marketSignature([books], 'a'), sealedA, 'a’s signature unchanged by the compaction');
    t.equal(reader.marketSignature([books], 'b'), sealedB, 'b’s too');
  },
);

/** Whether this process may make a directory immutable (root, on ext4 or xfs). */
async function immutableDirs(): Promise<boolean> {
  const probe = await fs.mkdtemp(path.join(os.tmpdir(), 'pmh-chattr-'));
  const ok = await run('chattr', ['+i', probe]).then(
    () =>
      fs.writeFile(path.join(probe, 'x'), '').then(
        () => false,
        () => true,
      ),
    () => false,
  );
  await run('chattr', ['-i', probe]).catch(() => undefined);
  await fs.rm(probe, { recursive: true, force: true });
  return ok;
}

t.test(
  'a commit the disk refuses leaves no file a glob over the lake would read twice',
  { skip: (await immutableDirs()) ? false : 'making a directory immutable (chattr +i) needs root on ext4 or xfs' },
  async (t) => {
    const dir = testdir(t);
    const duck = await Duck.open(1);
    t.teardown(() => duck.close());
    const paths = lakePaths(dir);
    const spool = new Spool(paths.spool);
    spool.append(books, [book('m1', HOUR0 + 1000, 0, 1), book('m2', HOUR0 + 1000, 0, 2)]);
    await spool.close();
    // The manifest's directory made immutable (chattr +i: not even root creates a file in it), so
    // the manifest's write fails after the Parquet file is in place, as on a disk full by then.
    const manifestDir = path.dirname(manifestFile(paths.manifest, books));
    await fs.mkdir(manifestDir, { recursive: true });
    const chattr = (flag: string) =>
      run('chattr', [flag, manifestDir]).then(
        () => true,
        () => false,
      );
    t.teardown(() => chattr('-i'));
    t.ok(await chattr('+i'));
    await t.rejects(sealDue(duck, paths, HOUR0 + 2 * HOUR, () => 0));
    const partitionFiles = async () =>
      (await fs.readdir(path.join(paths.lake, partitionDir(books))).catch(() => [] as string[])).filter((n) => n.endsWith('.parquet'));
    t.same(await partitionFiles(), [], 'the file of the failed commit is gone');
    await chattr('-i');
    await sealDue(duck, paths, HOUR0 + 2 * HOUR, () => 0);
    t.equal((await partitionFiles()).length, 1, 'the retry commits one file');
    const [{ n }] = await duck.rows(
      `SELECT count(*)::INTEGER AS n FROM read_parquet(${sqlPath(path.join(paths.lake, partitionDir(books), '*.parquet'))})`,
    );
    t.equal(n, 2, 'each row once');
  },
);

t.test('a seal killed between its file and its commit leaves no row a glob over the lake reads twice', async (t) => {
  const dir = testdir(t);
  const duck = await Duck.open(1);
  t.teardown(() => duck.close());
  const paths = lakePaths(dir);
  const spool = new Spool(paths.spool);
  for (let s = 0; s < 50; s++) for (const m of ['a', 'b']) spool.append(books, [book(m, HOUR0 + s * 1000, 0, s)]);
  await spool.close();
  const partition = path.join(paths.lake, partitionDir(books));
  const parquet = async () => (await fs.readdir(partition).catch(() => [] as string[])).filter((n) => n.endsWith('.parquet'));

  const sealing = (market: string, hang = false) =>
    spawn(
      process.execPath,
      [...TS_NODE_ARGS, path.resolve('test/fixtures/seal-killed-before-commit.ts'), dir, market, ...(hang ? ['hang'] : [])],
      { env: CHILD_ENV, stdio: ['ignore', 'pipe', 'inherit'] },
    );

  // Market a's file in place, as a capture sealing a finished market leaves it when killed before the manifest.
  const dead = sealing('a');
  await exitedWithin(dead, 120_000);
  t.equal(dead.signalCode, 'SIGKILL', 'the sealing process died by SIGKILL');
  const left = await parquet();
  t.equal(left.length, 1, 'it left a file in the lake');
  t.same((await readManifest(paths.manifest, books)).files, [], 'that no manifest names');

  // Another writer of the partition, its commit in flight: it removed the dead one's file before writing its own.
  const inflight = sealing('b', true);
  t.teardown(() => inflight.kill('SIGKILL'));
  await once(inflight.stdout!, 'data');
  const written = (await parquet()).filter((n) => !left.includes(n));
  t.equal(written.length, 1, 'the writer in flight put its file in place');
  t.same(await parquet(), written, 'and the dead writer’s file is gone');

  await sealDue(duck, paths, HOUR0 + 2 * HOUR, () => 0);
  const named = (await readManifest(paths.manifest, books)).files.map((f) => f.name);
  t.equal(named.length, 1, 'the hour sealed as one file');
  t.same((await parquet()).sort(), [...named, ...written].sort(), 'a seal leaves the file of a writer still running alone');

  inflight.kill('SIGKILL');
  await exitedWithin(inflight, 120_000);
  t.equal(await sweepUncommitted(paths.lake, paths.manifest), 1, 'once that writer is dead, a sweep (as capture starts) removes its file');
  t.same(await parquet(), named, 'only the committed file is left');
  const [{ n, keys }] = await duck.rows(
    `SELECT count(*)::INTEGER AS n, count(DISTINCT (market_id, token_id, ts))::INTEGER AS keys FROM read_parquet(${sqlPath(path.join(paths.lake, 'books', '**', '*.parquet'))})`,
  );
  t.same({ n, keys }, { n: 100, keys: 100 }, 'a glob over the lake reads each row once');
  t.same(await fs.readdir(path.join(paths.manifest, '.pending')), [], 'no marker of a commit left behind');
});

t.test('a series gap (no market) is sealed with the others', async (t) => {
  const dir = testdir(t);
  const duck = await Duck.open(1);
  t.teardown(() => duck.close());
  const gaps = partitionOf('gaps', 'polymarket', 'btc', '5m', HOUR0);
  const spool = new Spool(lakePaths(dir).spool);
  spool.append(gaps, [
    { market_id: null, dataset: 'markets', from_ts: HOUR0 + 1000, to_ts: HOUR0 + 2000, reason: 'timeout', detail: null, failures: 1 },
    { market_id: 'm1', dataset: 'books', from_ts: HOUR0 + 1000, to_ts: HOUR0 + 2000, reason: 'timeout', detail: null, failures: 1 },
  ]);
  await spool.close();
  await sealDue(duck, lakePaths(dir), HOUR0 + 2 * HOUR, () => 0);
  const rows = await duck.rows(
    `SELECT market_id, dataset FROM read_parquet(${sqlPath(path.join(lakePaths(dir).lake, partitionDir(gaps), '*.parquet'))}) ORDER BY dataset`,
  );
  t.same(rows, [
    { market_id: 'm1', dataset: 'books' },
    { market_id: null, dataset: 'markets' },
  ]);
});
