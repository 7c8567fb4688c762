// Manifests brought from a bucket: replica workers sharing a directory each bring the same ones,
// and only a change is written and announced on the commit log readers follow.
import fs from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { lakePaths, partitionDir, partitionOf } from '../src/lake/layout.js';
import { COMMIT_LOG, type PartitionManifest, adoptManifest, readManifest } from '../src/lake/manifest.js';
import { testdir } from './helpers.js';

const p = partitionOf('markets', 'polymarket', 'eth', '5m', Date.parse('2026-08-04T10:00:00Z'));
const manifest = (sha256: string): PartitionManifest => ({
  partition: partitionDir(p),
  files: [{ name: 'part-a.parquet', rows: 3, bytes: 100, sha256, sources: ['s:1'], min_ts: 1, max_ts: 2, written_at: 3 }],
});

t.test('a manifest the directory already holds is neither written nor announced again', async (t) => {
  const dir = lakePaths(testdir(t)).manifest;
  await fs.mkdir(dir, { recursive: true });
  const log = async () => (await fs.readFile(path.join(dir, COMMIT_LOG), 'utf8').catch(() => '')).split('\n').filter(Boolean);
  t.equal(await adoptManifest(dir, p, manifest('x')), true, 'a new manifest is written');
  t.equal(await adoptManifest(dir, p, manifest('x')), false, "a sibling's copy of the same one is not");
  t.equal((await log()).length, 1, 'and is announced once');
  t.equal(await adoptManifest(dir, p, manifest('y')), true, 'a changed one is written');
  t.equal((await log()).length, 2, 'and announced');
  t.same(await readManifest(dir, p), manifest('y'));
});
