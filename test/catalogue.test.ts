// The market catalogue reads a markets file once: a partition announced again with the same files
// (a sibling worker sharing the directory adopting the same manifest from a bucket) reads nothing,
// which on a bucket-served process would fetch it; a partition whose files changed is read.
import t from 'tap';
import { fill } from '../src/capture/fill.js';
import { Duck } from '../src/lake/duckdb.js';
import type { IndexedFile } from '../src/lake/fileindex.js';
import { lakePaths } from '../src/lake/layout.js';
import { readManifest, writeManifest } from '../src/lake/manifest.js';
import { LakeReader } from '../src/lake/reader.js';
import { StandInUpstream } from '../src/standin/upstream.js';
import { quiet, sealAll, testConfig, testdir } from './helpers.js';

const START = Date.parse('2026-08-04T10:00:00Z');
const MIN = 60_000;
const dir = testdir(t);
const paths = lakePaths(dir);
const config = testConfig(dir, {});
const duck = await Duck.open(1);
t.teardown(() => duck.close());

const dirOf = (f: IndexedFile) => f.path.split('/').slice(0, -1).join('/');

async function capture(from: number, to: number) {
  await fill(config, duck, quiet, { hours: 0, speed: 400, pollMs: 3000, start: from, until: to }, new StandInUpstream({}));
  await sealAll(duck, dir);
}

t.test('a partition announced again with the files already read is not read again; a changed one is', async (t) => {
  await capture(START, START + 10 * MIN);
  // What the reader asks to have on disk before DuckDB opens it: on a bucket-served process, a fetch.
  const ensured: IndexedFile[] = [];
  const reader = new LakeReader(duck, paths, { ensure: async (files) => void ensured.push(...files) });
  await reader.open();
  const markets = () => reader.sealedFiles().filter((f) => f.partition.dataset === 'markets');
  const before = markets();
  t.ok(before.length >= 4, `${before.length} markets files`);
  const known = reader.all(START + 10 * MIN).length;
  t.ok(known > 4, `${known} markets`);
  ensured.length = 0;

  // A sibling adopts the same manifests after this reader read them: each partition announced again.
  for (const p of new Map(before.map((f) => [dirOf(f), f.partition])).values())
    await writeManifest(paths.manifest, p, await readManifest(paths.manifest, p));
  await reader.update();
  t.same(
    ensured.filter((f) => f.partition.dataset === 'markets').map((f) => f.path),
    [],
    'no markets file read again',
  );

  // Capture goes on: new markets files, and the catalogue reads them.
  await capture(START + 10 * MIN, START + 25 * MIN);
  await reader.update();
  const read = new Set(ensured.filter((f) => f.partition.dataset === 'markets').map((f) => f.path));
  const changed = new Set(
    markets()
      .filter((f) => !before.some((b) => b.path === f.path && b.sha256 === f.sha256))
      .map(dirOf),
  );
  t.ok(changed.size > 0, `${changed.size} partitions with new markets files`);
  t.same(
    [...read].sort(),
    markets()
      .filter((f) => changed.has(dirOf(f)))
      .map((f) => f.path)
      .sort(),
    'the partitions with new files read, no other',
  );
  t.ok(reader.all(START + 25 * MIN).length > known, 'their markets found');
});
