// Lakes written before times were UTC-adjusted: the API answers the same over old, mixed and
// migrated files; `migrateTimestamps` rewrites exactly the naive files (same rows, manifest
// swapped, originals moved aside), is idempotent, and leaves every lake with a gaps dataset.
import fs from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { startApi } from '../src/api/server.js';
import { createClock } from '../src/clock.js';
import { Duck } from '../src/lake/duckdb.js';
import { listFiles, sha256File } from '../src/lake/fsutil.js';
import { type Partition, SCHEMAS, isTime, lakePaths, parsePartitionDir, partitionDir } from '../src/lake/layout.js';
import { readManifest } from '../src/lake/manifest.js';
import { ensureGapsDataset, hasEveryColumn, migrateTimestamps, utcAdjusted } from '../src/lake/migrate.js';
import { syntheticMarket } from '../src/lake/synthetic.js';
import { commitFiles } from '../src/lake/writer.js';
import { HOUR } from '../src/time.js';
import { lakeTable, one, quiet, testConfig, testdir } from './helpers.js';
import { sqlPath } from '../src/lake/sql.js';

const START = Date.parse('2026-07-26T12:00:00Z');
const dir = testdir(t);
const paths = lakePaths(dir);
const duck = await Duck.open(2);
await syntheticMarket(duck, dir, '99000001', START, 2 * HOUR);
await syntheticMarket(duck, dir, '99000002', START, 2 * HOUR);

async function partitions(): Promise<Partition[]> {
  return (await listFiles(paths.manifest, '.json'))
    .map((rel) => parsePartitionDir(rel.replace(/\.json$/, '')))
    .filter((p): p is Partition => p !== null);
}

/** Rewrites a sealed file as the writer did before 2026-11-23: times as naive TIMESTAMP_MS, and no `verified_by`. */
async function makeNaive(p: Partition, name: string): Promise<void> {
  const file = path.join(paths.lake, partitionDir(p), name);
  const old = path.join(paths.lake, partitionDir(p), `old-${name}`);
  const columns = SCHEMAS[p.dataset]
    .filter((c) => c.name !== 'verified_by')
    .map((c) => (isTime(c) ? `"${c.name}"::TIMESTAMP_MS AS "${c.name}"` : `"${c.name}"`))
    .join(', ');
  await duck.run(`COPY (SELECT ${columns} FROM read_parquet(${sqlPath(file)})) TO ${sqlPath(old)} (FORMAT parquet, COMPRESSION zstd)`);
  const { verified_by: _, ...entry } = (await readManifest(paths.manifest, p)).files.find((f) => f.name === name)!;
  if (entry.markets) entry.markets = Object.fromEntries(Object.entries(entry.markets).map(([id, [n, lo, hi]]) => [id, [n, lo, hi]]));
  await commitFiles(
    paths.lake,
    paths.manifest,
    path.join(dir, 'trash'),
    p,
    [{ ...entry, name: `old-${name}`, bytes: (await fs.stat(old)).size, sha256: await sha256File(old) }],
    [name],
  );
}

// Market 1's books and both markets' records become old files; market 2's books stay new, so
// each books partition mixes the two forms.
let naive = 0;
for (const p of await partitions()) {
  for (const f of (await readManifest(paths.manifest, p)).files) {
    if (p.dataset === 'books' && !f.name.includes('99000001')) continue;
    await makeNaive(p, f.name);
    naive++;
  }
}

const config = testConfig(dir, { RATE_PAID_PER_SECOND: '100000', BOOK_CACHE_MB: '0' });
const api = await startApi(config, duck, createClock(START + 3 * HOUR, 1), quiet, { port: 0 });
const key = (await api.keys.issue('paid', 'migrate')).key;
t.teardown(async () => {
  await api.stop();
  await duck.close();
});

async function answers(): Promise<string[]> {
  const out: string[] = [];
  for (const id of ['99000001', '99000002']) {
    for (const q of [
      `snapshots?limit=50&start_time=${START + 1800_000}`,
      'snapshots?limit=20&order=desc&interval=1m',
      'snapshots?format=csv',
      'orderbook/latest',
      'certificate',
    ]) {
      const res = await fetch(`${api.url}/v3/wallet-prediction/${id}/${q}`, { headers: { authorization: `Bearer ${key}` } });
      t.equal(res.status, 200, `${id}/${q}`);
      const text = await res.text();
      out.push(q.includes('csv') ? text : JSON.stringify({ ...JSON.parse(text), meta: undefined }));
    }
  }
  return out;
}

t.test('old, mixed and migrated lakes answer alike', async (t) => {
  t.ok(naive >= 4, `${naive} files made naive`);
  const p = (await partitions()).find((q) => q.dataset === 'books')!;
  const files = (await readManifest(paths.manifest, p)).files.map((f) => path.join(paths.lake, partitionDir(p), f.name));
  t.same(await Promise.all(files.map((f) => utcAdjusted(duck, f, p))), [false, true], 'a books partition holds one old and one new file');
  const before = await answers();
  t.match(before[2], /^timestamp,/, 'the CSV export has its header');
  t.match(before[2].split('\n')[1], /^2026-07-26T12:00:00\.000Z,/, 'CSV times are ISO UTC from old files');

  const cert = JSON.parse(before[4]).data.books;
  t.same(cert.verified_by.unknown, cert.recorded, 'books of files sealed before labels were kept: what vouched for them is not known');

  const report = await migrateTimestamps(duck, paths);
  t.equal(report.rewritten, naive, 'every naive file was rewritten');
  t.equal(report.current, (await partitions()).filter((q) => q.dataset === 'books').length, 'the new files were left alone');
  for (const q of await partitions()) {
    for (const f of (await readManifest(paths.manifest, q)).files) {
      const file = path.join(paths.lake, partitionDir(q), f.name);
      t.ok(await utcAdjusted(duck, file, q), `${partitionDir(q)}/${f.name} is UTC-adjusted`);
      t.ok(await hasEveryColumn(duck, file, q), `${f.name} has every column`);
      t.equal(await sha256File(file), f.sha256, `${f.name}: the manifest's sha256 is the file's`);
    }
  }
  t.ok(
    (await listFiles(path.join(dir, 'trash'), '.parquet')).some((f) => f.includes('old-part-synthetic')),
    'the old files were moved aside, not deleted',
  );
  await api.lake.update();
  t.same(await answers(), before, 'the same answers after the migration');

  const again = await migrateTimestamps(duck, paths);
  t.same({ rewritten: again.rewritten, rows: again.rows }, { rewritten: 0, rows: 0 }, 'a second run changes nothing');
});

t.test('every lake has a gaps dataset, empty when no gap was recorded', async (t) => {
  const gaps = await one(duck, `SELECT count(*)::INTEGER AS n FROM ${lakeTable(dir, 'gaps')}`);
  t.equal(gaps.n, 0, "read_parquet('gaps/**') answers: no gap recorded");
  t.equal(await ensureGapsDataset(duck, paths), false, 'written once');
  const types = await duck.rows(`DESCRIBE SELECT * FROM ${lakeTable(dir, 'gaps')}`);
  t.match(Object.fromEntries(types.map((r) => [r.column_name, r.column_type])), {
    from_ts: 'TIMESTAMP WITH TIME ZONE',
    reason: 'VARCHAR',
    hour: 'INTEGER',
  });
});

t.test('times compare with UTC times, as pandas and Polars compare them', async (t) => {
  const r = await one(
    duck,
    `SELECT typeof(ts) AS type, count(*)::INTEGER AS n FROM ${lakeTable(dir, 'books')} WHERE ts >= TIMESTAMPTZ '2026-07-26 13:00:00+00' GROUP BY ALL`,
  );
  t.same(r, { type: 'TIMESTAMP WITH TIME ZONE', n: 2 * 3600 * 2 }, 'the second hour of both markets');
});
