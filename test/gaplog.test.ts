// The gap log reads each sealed gaps file once: a new gap reads the one new file, and a restart
// (or a new replica, from the bucket's snapshot) starts from the checkpoint, reading none again.
import fs from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { Duck } from '../src/lake/duckdb.js';
import { lakePaths, partitionDir, partitionOf } from '../src/lake/layout.js';
import { LakeReader } from '../src/lake/reader.js';
import { sealAll, testdir } from './helpers.js';

const HOUR = 3_600_000;
const START = Date.parse('2026-08-04T10:00:00Z');
const dir = testdir(t);
const paths = lakePaths(dir);
const duck = await Duck.open(1);
t.teardown(() => duck.close());

/** One gap of `market` in the spool at `at`, then sealed as capture's seal would. */
async function gap(market: string, at: number, segment: string) {
  const p = partitionOf('gaps', 'wallet-prediction', 'eth', '5m', at);
  const part = path.join(paths.spool, segment, partitionDir(p), '000001.ndjson');
  await fs.mkdir(path.dirname(part), { recursive: true });
  const row = { market_id: market, dataset: 'books', from_ts: at, to_ts: at + 5000, reason: 'timeout', detail: null, failures: 3 };
  await fs.writeFile(part, `${JSON.stringify(row)}\n`);
  await sealAll(duck, dir);
}

const ids = (reader: LakeReader) => reader.gaps({ venue: 'wallet-prediction' }).map((g) => g.market_id);

t.test('each gaps file is read once, and a restart reads none again', async (t) => {
  await gap('m-1', START, 'seg-1');
  await gap('m-2', START + HOUR, 'seg-2');
  const first = new LakeReader(duck, paths);
  t.match(await first.open(), { gap_files_read: 2 }, 'both files read at the first start');
  t.same(ids(first), ['m-1', 'm-2']);

  await gap('m-3', START + 2 * HOUR, 'seg-3');
  await first.update();
  t.same(ids(first), ['m-1', 'm-2', 'm-3'], 'the new gap is found');

  // Files a reader already read are not opened again: one made unreadable changes nothing it holds.
  const sealedFirst = first.sealedFiles().find((f) => f.partition.dataset === 'gaps' && f.partition.hour === START)!;
  const saved = await fs.readFile(path.join(paths.lake, sealedFirst.path));
  await fs.writeFile(path.join(paths.lake, sealedFirst.path), 'not parquet');
  await gap('m-4', START + 3 * HOUR, 'seg-4');
  await first.update();
  t.same(ids(first), ['m-1', 'm-2', 'm-3', 'm-4'], 'only the new file was read');

  const restarted = new LakeReader(duck, paths);
  t.match(await restarted.open(), { gap_files_read: 2 }, 'the two files sealed since the checkpoint, no other');
  t.same(ids(restarted), ids(first));
  await fs.writeFile(path.join(paths.lake, sealedFirst.path), saved);

  const again = new LakeReader(duck, paths);
  t.match(await again.open(), { gap_files_read: 0 }, 'a start after that reads none');
  t.same(ids(again), ids(first));
});
