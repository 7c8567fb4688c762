// make bench-bucket: the lake on object storage against the same lake on local disk. A 1-day
// bench lake is mirrored into Ceph's RADOS Gateway on this machine (scripts/rgw.sh); one API
// serves the local lake, another the bucket alone (LAKE_SOURCE=bucket, its own empty cache).
// Both run with the book cache off, so every page goes through the lake's SQL path. Pages are
// of markets drawn at random over the lake, one per books hour, so each first page on the bucket
// side fetches its hour's files (cold), and the same pages again read the cache (warm).
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { snapshotKey } from '../src/bucket/layout.js';
import { Publisher } from '../src/bucket/publish.js';
import { S3 } from '../src/bucket/s3.js';
import { KeyStore } from '../src/edge/keys.js';
import { startApi } from '../src/api/server.js';
import { createClock } from '../src/clock.js';
import { loadConfig } from '../src/config.js';
import { Duck } from '../src/lake/duckdb.js';
import { FileIndex } from '../src/lake/fileindex.js';
import { lakePaths } from '../src/lake/layout.js';
import { HOUR } from '../src/time.js';
import { END, buildLake } from './lake.js';
import { writeSection } from './report.js';
import { startRgw } from './tools.js';

/** How the replica spreads its GETs (replica.ts: manifests 32 at a time, files 16). */
const MANIFEST_PARALLEL_NOTE = 'manifests 32 at a time and files 16 at a time';
const DRAWS = Number(process.env.BENCH_BUCKET_DRAWS ?? 60);
const root = process.env.BENCH_ROOT ?? (await fs.mkdtemp(path.join(os.tmpdir(), 'bench-bucket-')));
const log = pino({ level: 'warn' });
const duck = await Duck.open(2);
const lake = await buildLake(duck, root, 1);

const rgw = await startRgw();
const rgwEnv = rgw.env;
const cacheDir = await fs.mkdtemp(path.join(os.tmpdir(), 'bench-replica-'));
try {
  const common = {
    ...rgwEnv,
    S3_BUCKET: 'bench-lake',
    S3_PREFIX: 'archive',
    BOOK_CACHE_MB: '0',
    SERVING_COPIES: 'off',
    RATE_PAID_PER_SECOND: '100000',
    CURSOR_SECRET: 'bench-bucket-cursor-secret-0123456789',
    KEYS_FILE: path.join(lake.dir, 'state', 'keys.json'),
  };
  const localConfig = loadConfig({ ...common, DATA_DIR: lake.dir });
  const replicaConfig = loadConfig({ ...common, DATA_DIR: cacheDir, LAKE_SOURCE: 'bucket' });
  const s3 = new S3(localConfig.bucket!);
  await s3.ensureBucket();
  const mirrorStart = performance.now();
  const mirrored = await new Publisher(lakePaths(lake.dir), s3, log, 3_600_000, duck).mirror();
  const mirrorSeconds = (performance.now() - mirrorStart) / 1000;

  const { key } = await new KeyStore(localConfig.keysFile).issue('paid', 'bench-bucket');
  const clock = createClock(END + HOUR, 1);
  const local = await startApi(localConfig, duck, clock, log, { port: 0 });
  const replicaDuck = await Duck.open(2);
  type Opened = { data: { lake: { bucket: { manifests: { fetched: number; from_snapshot: number }; cache: { fetched: number } } } } };
  const opening = async (config: typeof replicaConfig) => {
    const began = performance.now();
    const api = await startApi(config, replicaDuck, clock, log, { port: 0 });
    const ms = performance.now() - began;
    const opened = ((await (await fetch(`${api.url}/v3/health`)).json()) as Opened).data.lake.bucket;
    return { api, ms, manifests: opened.manifests, files: opened.cache.fetched };
  };
  // A new replica with the snapshot the mirror wrote, then one more without it (each manifest a GET).
  const replicaOpen = await opening(replicaConfig);
  const replica = replicaOpen.api;
  const openMs = replicaOpen.ms;
  const bareDir = await fs.mkdtemp(path.join(os.tmpdir(), 'bench-replica-'));
  const snapshotBytes = (await s3.get(snapshotKey(s3.config.prefix)))!;
  await s3.delete(snapshotKey(s3.config.prefix));
  const bare = await opening(loadConfig({ ...common, DATA_DIR: bareDir, LAKE_SOURCE: 'bucket' }));
  await bare.api.stop();
  await s3.put(snapshotKey(s3.config.prefix), snapshotBytes);
  await fs.rm(bareDir, { recursive: true, force: true });
  const openRow = (name: string, o: typeof bare) =>
    `| ${name} | ${o.ms.toFixed(0)} | ${o.manifests.fetched} | ${o.manifests.from_snapshot} | ${o.files} | ${o.manifests.fetched + o.files + (o.manifests.from_snapshot ? 1 : 0)} |`;

  // One market per books hour (coin, window, hour), none of the hours a replica preloads at start.
  const index = new FileIndex(lakePaths(lake.dir));
  await index.walk();
  const hours = index.all().filter((f) => f.partition.dataset === 'books' && f.partition.hour < END - 3 * HOUR && f.markets);
  const drawn: string[] = [];
  const shuffled = hours.map((f) => ({ f, r: Math.random() })).sort((a, b) => a.r - b.r);
  for (const { f } of shuffled.slice(0, DRAWS)) drawn.push(Object.keys(f.markets!)[0]);

  const page = async (base: string, id: string) => {
    const began = performance.now();
    const res = await fetch(`${base}/v3/wallet-prediction/${id}/snapshots?limit=100`, { headers: { authorization: `Bearer ${key}` } });
    const body = await res.text();
    if (res.status !== 200) throw new Error(`${res.status} ${body.slice(0, 200)}`);
    return { ms: performance.now() - began, body };
  };
  const series = async (base: string) => {
    const out: { ms: number; body: string }[] = [];
    for (const id of drawn) out.push(await page(base, id));
    return out;
  };
  const localFirst = await series(local.url);
  const localAgain = await series(local.url);
  const fetchedBefore = (await (await fetch(`${replica.url}/v3/health`)).json()) as {
    data: { lake: { bucket: { cache: { fetched: number; bytes: number } } } };
  };
  const cold = await series(replica.url);
  const warm = await series(replica.url);
  const after = (await (await fetch(`${replica.url}/v3/health`)).json()) as typeof fetchedBefore;
  // The envelope's meta differs by request (its id and time); the data and pagination must not.
  const content = (body: string) => {
    const { data, pagination } = JSON.parse(body) as { data: unknown; pagination: unknown };
    return JSON.stringify([data, pagination]);
  };
  const same = [cold, warm].every((pass) => pass.every((p, i) => content(p.body) === content(localFirst[i].body)));
  if (!same) throw new Error('the bucket-served pages differ from the local ones');

  const q = (xs: { ms: number }[], p: number) => {
    const sorted = xs.map((x) => x.ms).sort((a, b) => a - b);
    return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))].toFixed(1);
  };
  const row = (name: string, xs: { ms: number }[]) => `| ${name} | ${q(xs, 0.5)} | ${q(xs, 0.9)} | ${q(xs, 0.99)} |`;
  const fetched = after.data.lake.bucket.cache.fetched - fetchedBefore.data.lake.bucket.cache.fetched;
  const mb = (b: number) => (b / 1024 / 1024).toFixed(1);
  const report = `## Serving from a bucket

\`make bench-bucket\`, ${new Date().toISOString().slice(0, 10)}, ${os.cpus().length} cores (${os.cpus()[0].model}), Node ${process.version}.
The 1-day bench lake (${lake.files} files, ${mb(lake.bytes)} MiB) mirrored into Ceph's RADOS Gateway on the same machine
(single node, memstore OSD, loopback): ${mirrored.files_put} files in ${mirrorSeconds.toFixed(1)} s (${mb(lake.bytes / mirrorSeconds)} MiB/s),
then one API over the local lake and one over the bucket alone, each in this process with the book cache off
(every page through the SQL path). A bucket-served API opened (every manifest listed and brought in from the snapshot, latest books preloaded,
which fetched the last hours' book files) in ${openMs.toFixed(0)} ms.

A new replica's open, with capture's snapshot (the catalogue's and gaps' checkpoints, and the manifests: ${(snapshotBytes.length / 1024).toFixed(0)} KiB gzipped for ${replicaOpen.manifests.from_snapshot} manifests; each manifest taken from it
only when its MD5 is the ETag the listing gives) and without it (a GET per manifest). Files are the markets, gaps and
recent books files the catalogue, gap log and latest books read at open:

| new replica | open ms | manifests GET | manifests from snapshot | files GET | GETs at open |
|---|---|---|---|---|---|
${openRow('with the snapshot', replicaOpen)}
${openRow('without it', bare)}

On loopback a GET costs about a millisecond; across a network each costs a round trip (tens of ms), ${MANIFEST_PARALLEL_NOTE}.
Without the snapshot the GETs at open grow with the lake (a manifest per partition, a markets and a gaps file per
series and hour: ~52,000 at 90 days); with it they are one object and the recent books files the latest books preload.

${DRAWS} markets drawn at random over the day, one per books hour (coin, window, hour), so each first page on the
bucket side fetched its hour's files (${fetched} files fetched, sha256-checked, in the cold pass); the same pages again
read the cache. Every page's data and pagination were checked equal to the local lake's. Milliseconds per 100-snapshot page,
one request at a time:

| lake | p50 | p90 | p99 |
|---|---|---|---|
${row('local disk, first read', localFirst)}
${row('local disk, again', localAgain)}
${row('bucket, cache cold (fetch + verify + query)', cold)}
${row('bucket, cache warm', warm)}

The cold page pays one GET per file of its hour (books; the page's market record and gaps were fetched at open) through
the gateway on loopback: a real store across a network adds its round trip and transfer time per file, once per file
per API server. Warm pages are local-disk reads.
`;
  await writeSection('## Serving from a bucket', report);
  await replica.stop();
  await local.stop();
  replicaDuck.close();
  s3.close();
} finally {
  rgw.stop();
  await fs.rm(cacheDir, { recursive: true, force: true });
  await duck.close();
}
