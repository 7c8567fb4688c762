// The lake on object storage, against a real S3 server (Ceph's RADOS Gateway, test/rgw.ts):
// capture publishes what it seals; a gateway outage during capture delays publishing and loses
// nothing; two `make api` processes with their own caches serve from the bucket alone and answer
// what the local lake answers; an object missing or corrupt in the bucket is a 503, then fetched
// again once it is whole.
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs/promises';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { promisify } from 'node:util';
import { gunzipSync, gzipSync } from 'node:zlib';
import t from 'tap';
import { Publisher } from '../src/bucket/publish.js';
import { BucketReplica } from '../src/bucket/replica.js';
import { type ManifestSnapshot, dataKey, manifestKey, manifestPrefix, snapshotKey } from '../src/bucket/layout.js';
import { S3, S3_RETRIES } from '../src/bucket/s3.js';
import { KeyStore } from '../src/edge/keys.js';
import { startApi } from '../src/api/server.js';
import type { Capture } from '../src/capture/capture.js';
import { startLatestFeed } from '../src/capture/feed.js';
import { fill } from '../src/capture/fill.js';
import { createClock } from '../src/clock.js';
import { Duck } from '../src/lake/duckdb.js';
import { type IndexedFile, FileIndex } from '../src/lake/fileindex.js';
import { listFiles } from '../src/lake/fsutil.js';
import { lakePaths } from '../src/lake/layout.js';
import { StandInUpstream } from '../src/standin/upstream.js';
import { type ApiProcess, quiet, sealAll, startApiProcess, testConfig, testdir } from './helpers.js';
import { startRgw } from './rgw.js';

const START = Date.parse('2026-08-04T10:00:00Z');
const MIDDLE = START + 20 * 60_000;
const END = START + 40 * 60_000;
const CURSOR_SECRET = 'bucket-test-cursor-secret-0123456789';

const rgw = await startRgw(t);
const bucketEnv = { ...rgw.env, S3_BUCKET: 'pmh-lake', S3_PREFIX: 'archive', PUBLISH_MS: '200' };
const dir = testdir(t);
// The reference prices too: published and served from the bucket like every dataset (and the Python client's suite reads them).
const config = testConfig(dir, { ...bucketEnv, CURSOR_SECRET, RATE_PAID_PER_SECOND: '100000', CAPTURE_REFERENCE: 'on' });
const s3 = new S3(config.bucket!);
t.teardown(() => s3.close());
const duck = await Duck.open(2);
t.teardown(() => duck.close());
const paths = lakePaths(dir);
/** The capture of the last stretch: its newest books and health are what its feed serves. */
let captured: Capture | null = null;
const FEED_SECRET = 'bucket-test-feed-secret-0123456789';
/** The key store every API process of the test shares, outside the lake's prefix. */
const KEYS_OBJECT = 'private/keys.json';

/** Capture over [from, to) from the stand-in into the lake, publishing as it goes, then the rest sealed. */
async function capture(from: number, to: number) {
  const run = await fill(config, duck, quiet, { hours: 0, speed: 400, pollMs: 3000, start: from, until: to }, new StandInUpstream({}));
  await sealAll(duck, dir);
  return run;
}

async function localFiles(): Promise<IndexedFile[]> {
  const index = new FileIndex(paths);
  await index.walk();
  return index.all();
}

t.test('capture publishes; a gateway outage delays it, loses nothing, and is caught up', async (t) => {
  const first = await capture(START, MIDDLE);
  // Nobody created the bucket: the pass of capture's stop failed on it and created it; this one publishes.
  t.equal(await s3.head(snapshotKey(s3.config.prefix)), null, 'nothing was published before the bucket existed');
  await first.capture.publisher!.pass();
  t.equal(first.capture.health().publish?.backlog_partitions, 0);
  // The first pass also wrote the manifests snapshot: every local manifest, byte for byte.
  t.ok(first.capture.health().publish?.snapshot_at, 'snapshot written');
  const firstSnapshot = await readSnapshot();
  t.same(firstSnapshot, await localManifests(), `${firstSnapshot.size} manifests in the snapshot`);

  await rgw.gatewayStop();
  const second = await capture(MIDDLE, END);
  captured = second.capture;
  const publisher = second.capture.publisher!;
  await t.rejects(publisher.pass(), 'the bucket is down');
  const down = second.capture.health().publish!;
  t.ok(down.backlog_partitions > 0, `backlog while down: ${down.backlog_partitions} partitions`);
  t.match(down.last_error, /ECONNREFUSED|ECONNRESET|Network|Timeout/);
  t.ok(down.waiting_since);
  t.ok(second.capture.stats.books > 0, 'capture recorded while the bucket was down');

  await rgw.gatewayStart();
  const caughtUp = await publisher.pass();
  t.ok(caughtUp.files_put > 0, `${caughtUp.files_put} files sent after the outage`);
  t.same(
    { backlog: second.capture.health().publish!.backlog_partitions, error: second.capture.health().publish!.last_error },
    { backlog: 0, error: null },
  );

  // Every sealed file is in the bucket with the manifest's sha256, every manifest byte for byte.
  const files = await localFiles();
  t.ok(files.length > 20, `${files.length} sealed files`);
  for (const f of files) {
    const head = await s3.head(dataKey(s3.config.prefix, f.path));
    if (head?.meta.sha256 !== f.sha256 || head.size !== f.bytes) t.fail(`${f.path} is not in the bucket as sealed`);
  }
  for (const p of new Map(files.map((f) => [f.path.split('/').slice(0, -1).join('/'), f.partition])).values()) {
    const local = await fs.readFile(path.join(paths.manifest, `${manifestKey('', p).slice('_manifest/'.length)}`));
    t.same(await s3.get(manifestKey(s3.config.prefix, p)), local);
  }
  // A mirror afterwards finds everything there and sends nothing.
  const mirror = await new Publisher(paths, s3, quiet, 3_600_000, duck).mirror();
  t.same({ put: mirror.files_put, present: mirror.files_present }, { put: 0, present: files.length });
  // The second capture's publisher kept the first's snapshot (one an hour); the mirror wrote a new one.
  t.same(await readSnapshot(), await localManifests(), 'the snapshot after the mirror is the whole lake');
});

async function snapshotObject(): Promise<ManifestSnapshot> {
  return JSON.parse(gunzipSync((await s3.get(snapshotKey(s3.config.prefix)))!).toString('utf8')) as ManifestSnapshot;
}

async function readSnapshot(): Promise<Map<string, string>> {
  return new Map((await snapshotObject()).manifests.map((m) => [m.partition, m.body]));
}

async function localManifests(): Promise<Map<string, string>> {
  const found = new Map<string, string>();
  for (const f of await localFiles()) {
    const dir = f.path.split('/').slice(0, -1).join('/');
    found.set(dir, await fs.readFile(path.join(paths.manifest, `${dir}.json`), 'utf8'));
  }
  return found;
}

t.test('a snapshot that cannot be made never holds publishing', async (t) => {
  // The same lake under another prefix, published by a publisher whose checkpoints reader fails.
  const copy = testdir(t);
  await fs.cp(paths.lake, path.join(copy, 'lake'), { recursive: true });
  await fs.cp(paths.manifest, lakePaths(copy).manifest, { recursive: true });
  const other = new S3({ ...config.bucket!, prefix: 'snapshot-fails/' });
  t.teardown(() => other.close());
  const broken = await Duck.open(1);
  await broken.shutdown();
  const publisher = new Publisher(lakePaths(copy), other, quiet, 3_600_000, broken);
  const report = await publisher.pass();
  t.ok(report.files_put > 0, `${report.files_put} files published`);
  t.match(publisher.health(), { backlog_partitions: 0, last_error: null, snapshot_at: null, snapshot_error: /./ }, 'the failure is said');
  t.equal(await other.get(snapshotKey(other.config.prefix)), null, 'no snapshot');
});

t.test(
  'a gateway failing for a moment: reads and deletes are asked again, a put and a read timed out are not, and a failure that stays is said',
  async (t) => {
    // A proxy in front of the gateway that answers the next `failing` requests itself: a 503 SlowDown,
    // then a connection closed with no answer, in turn; the rest reach the gateway.
    let failing = 0;
    let failed = 0;
    let silent = 0;
    const gateway = new URL(rgw.env.S3_ENDPOINT);
    const proxy = http.createServer((req, res) => {
      // Heard and never answered (closed at the proxy's close).
      if (silent > 0) {
        silent--;
        return;
      }
      if (failing > 0) {
        failing--;
        if (failed++ % 2 === 0) res.writeHead(503, { 'content-type': 'application/xml' }).end('<Error><Code>SlowDown</Code></Error>');
        else req.socket.destroy();
        return;
      }
      const out = http.request(
        { host: gateway.hostname, port: gateway.port, method: req.method, path: req.url, headers: req.headers },
        (answer) => {
          res.writeHead(answer.statusCode ?? 502, answer.headers);
          answer.pipe(res);
        },
      );
      out.on('error', () => res.destroy());
      req.pipe(out);
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    t.teardown(() => new Promise<void>((resolve) => proxy.close(() => resolve())));
    const flaky = new S3({
      ...config.bucket!,
      prefix: 'flaky/',
      endpoint: `http://127.0.0.1:${(proxy.address() as net.AddressInfo).port}`,
    });
    t.teardown(() => flaky.close());
    const body = Buffer.from('a body read through a gateway that fails now and then');
    const sha256 = createHash('sha256').update(body).digest('hex');
    const key = flaky.key('object.bin');
    await flaky.put(key, body);
    const retried = () => S3_RETRIES.count;

    const before = retried();
    failing = 2;
    t.same(await flaky.get(key), body, 'a get');
    failing = 2;
    t.equal((await flaky.head(key))?.size, body.length, 'a head');
    failing = 2;
    const listed: string[] = [];
    for await (const o of flaky.list(flaky.key(''))) listed.push(o.key);
    t.same(listed, [key], 'a listing');
    failing = 2;
    const dest = path.join(testdir(t), 'object.bin');
    t.equal(await flaky.download(key, dest, { size: body.length, sha256 }), true, 'a download');
    t.same(await fs.readFile(dest), body);
    t.equal(retried() - before, 8, 'each asked twice more');

    failing = 1;
    await t.rejects(flaky.put(flaky.key('other.bin'), body), { name: 'S3Error', status: 503 }, 'a put is not asked again');
    t.equal(await flaky.head(flaky.key('other.bin')), null, 'and put nothing');
    failing = 4;
    await t.rejects(flaky.get(key), { name: 'S3Error' }, 'a read failing four times in a row fails');
    t.equal(failing, 0, 'after four attempts, no more');
    // A gateway silent past S3_TIMEOUT_MS is not asked again: a request waiting on a file would wait as long again.
    const impatient = new S3({ ...flaky.config, timeoutMs: 200 });
    t.teardown(() => impatient.close());
    silent = 2;
    const retriedBefore = retried();
    await t.rejects(impatient.get(key), { name: 'S3Error', code: 'Timeout' }, 'a read with no answer in time fails');
    t.equal(silent, 1, 'asked once');
    t.equal(retried(), retriedBefore);
    silent = 0;
    failing = 2;
    await flaky.delete(key);
    t.equal(await flaky.head(key), null, 'a delete');
  },
);

t.test('a file a request still reads is never evicted, by its process or another worker sharing the cache', async (t) => {
  // Two workers' caches over one directory, bound to a byte (every file over it), on a clock the test moves.
  let now = Date.now();
  const cache = lakePaths(testdir(t));
  const [a, b] = [0, 1].map(() => new BucketReplica(cache, s3, 1, quiet, () => now));
  for (const r of [a, b]) {
    await r.open();
    t.teardown(() => r.close());
  }
  const files = (await localFiles()).filter((f) => f.partition.dataset === 'books').slice(0, 4);
  const onDisk = (f: IndexedFile) =>
    fs.access(path.join(cache.lake, f.path)).then(
      () => true,
      () => false,
    );
  await b.ensure([files[0]]);
  const release = a.hold(); // a request on worker a reads files[0], as long as it takes
  await a.ensure([files[0]]);
  now += 600_000;
  await a.renew(); // its timer's work: the file's mtime says it is in use
  await b.ensure([files[1]]);
  await b.evict();
  t.ok(await onDisk(files[0]), 'worker b keeps the file a request of worker a holds, ten minutes into it');
  await a.ensure([files[2]]);
  await a.evict();
  t.ok(await onDisk(files[0]), 'and so does worker a');
  release();
  now += 600_000;
  await a.renew();
  await b.ensure([files[3]]);
  await b.evict();
  t.notOk(await onDisk(files[0]), 'once the request ended and the file went unused, it is evicted');
  t.ok(await onDisk(files[3]), 'the file just fetched stays');
});

/** A bucket that is down: the gateway's address with nothing listening behind it. */
async function deadS3(): Promise<S3> {
  const port = await new Promise<number>((resolve) => {
    const server = net.createServer().listen(0, '127.0.0.1', () => {
      const p = (server.address() as net.AddressInfo).port;
      server.close(() => resolve(p));
    });
  });
  const down = new S3({ ...s3.config, endpoint: `http://127.0.0.1:${port}` });
  return down;
}

/** A GET on a connection of its own (fetch keeps one alive, and with it one cluster worker). */
function getFresh(base: string, route: string, key: string): Promise<{ status: number; body: { data?: unknown } }> {
  return new Promise((resolve, reject) => {
    const req = http.get(`${base}${route}`, { agent: false, headers: { authorization: `Bearer ${key}` } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () =>
        resolve({ status: res.statusCode!, body: JSON.parse(Buffer.concat(chunks).toString('utf8')) as { data?: unknown } }),
      );
      res.on('error', reject);
    });
    req.on('error', reject);
  });
}

async function sha256File(file: string): Promise<string> {
  return createHash('sha256')
    .update(await fs.readFile(file))
    .digest('hex');
}

t.test('a file one worker fetched is served by every worker sharing the cache, without a second download, the bucket down', async (t) => {
  const cache = lakePaths(testdir(t));
  const down = await deadS3();
  t.teardown(() => down.close());
  const [a, b, c] = [s3, down, s3].map((client) => new BucketReplica(cache, client, 1 << 30, quiet));
  for (const r of [a, b, c]) {
    await r.open();
    t.teardown(() => r.close());
  }
  const [file, other] = (await localFiles()).filter((f) => f.partition.dataset === 'books');
  await a.ensure([file]);
  t.match(a.health().cache, { fetched: 1, adopted: 0 }, 'worker a fetched it');
  await b.ensure([file]);
  await b.ensure([file]);
  t.match(
    b.health().cache,
    { fetched: 0, adopted: 1, fetch_errors: 0 },
    'worker b, its bucket down, took it from the shared directory once',
  );
  await t.rejects(b.ensure([other]), { name: 'ObjectUnavailable' }, 'a file nobody fetched is still unavailable while the bucket is down');
  // Bytes on disk that are not the manifest's (same size) are never taken: fetched again, and whole after.
  const onDisk = path.join(cache.lake, file.path);
  const bytes = await fs.readFile(onDisk);
  bytes[bytes.length - 1] ^= 0xff;
  await fs.writeFile(onDisk, bytes);
  await c.ensure([file]);
  t.match(c.health().cache, { fetched: 1, adopted: 0 }, 'a damaged file is downloaded, not adopted');
  t.equal(await sha256File(onDisk), file.sha256, 'and the file on disk is the manifest’s again');
});

t.test('a bounded cache shared by two workers under a walk of more files than it holds', async (t) => {
  let now = Date.now();
  const cache = lakePaths(testdir(t));
  const files = (await localFiles()).filter((f) => f.partition.dataset === 'books').sort((x, y) => y.bytes - x.bytes);
  t.ok(files.length >= 8, `${files.length} books files`);
  // Room for the three largest files, split between two workers as `make api` splits BUCKET_CACHE_MB.
  const bound = files[0].bytes + files[1].bytes + files[2].bytes;
  const workers = [0, 1].map(() => new BucketReplica(cache, s3, Math.floor(bound / 2), quiet, () => now));
  for (const r of workers) {
    await r.open();
    t.teardown(() => r.close());
  }
  const diskBytes = async () => {
    let total = 0;
    for (const rel of await listFiles(cache.lake, '.parquet')) total += (await fs.stat(path.join(cache.lake, rel))).size;
    return total;
  };
  let wrong = 0;
  let over = 0;
  // Each file asked through one worker, then the other; each step a file's idle time later (a real walk takes minutes).
  for (const [i, f] of [...files, ...files.slice(0, 4)].entries()) {
    for (const w of i % 2 ? [workers[1], workers[0]] : workers) {
      await w.ensure([f]);
      if ((await sha256File(path.join(cache.lake, f.path))) !== f.sha256) wrong++;
    }
    now += 130_000;
    for (const w of i % 2 ? [workers[1], workers[0]] : workers) await w.evict();
    if ((await diskBytes()) > bound) over++;
  }
  t.equal(wrong, 0, 'every file ensured is the manifest’s bytes');
  t.equal(over, 0, 'the shared directory stays within the bound after each step');
  const health = workers.map((w) => w.health().cache);
  t.ok(
    health.every((h) => h.evicted > 0),
    `evictions counted in each worker's health: ${JSON.stringify(health)}`,
  );
  t.ok(
    health.some((h) => h.adopted > 0),
    'files the other worker fetched were taken from the directory',
  );
});

t.test("the analyst guide's bucket statements answer over a copy of the bucket", async (t) => {
  // What `aws s3 sync` would bring down: every key under the prefix, at its key.
  const copy = path.join(testdir(t), 'copy');
  let objects = 0;
  for await (const o of s3.list(s3.config.prefix)) {
    const dest = path.join(copy, o.key.slice(s3.config.prefix.length));
    await fs.mkdir(path.dirname(dest), { recursive: true });
    await fs.writeFile(dest, (await s3.get(o.key))!);
    objects++;
  }
  t.ok(objects > 20, `${objects} objects`);
  const guide = await fs.readFile(path.resolve('docs/ANALYSTS.md'), 'utf8');
  const blocks = [...guide.matchAll(/```sql\n-- bucket\n([\s\S]*?)```/g)].map((m) => m[1].replaceAll('s3://BUCKET/PREFIX/', `${copy}/`));
  t.ok(blocks.length >= 3, `${blocks.length} statements`);
  for (const block of blocks) {
    for (const sql of block
      .split(/;\s*\n/)
      .map((q) => q.replace(/^-- bucket\n/gm, '').trim())
      .filter(Boolean)) {
      if (/^SET VARIABLE/.test(sql)) await duck.run(sql);
      else t.ok((await duck.rows(sql)).length > 0, sql.split('\n')[0].slice(0, 70));
    }
  }
});

t.test('two API processes serve from the bucket alone, as the local lake does', async (t) => {
  // One clock for all three processes (a window's status and coverage depend on the time of asking),
  // an hour past the lake: every window is over, and capture's books are still recent enough to be kept.
  const clock = { start: END + 3_600_000, anchor: Date.now() };
  const localConfig = testConfig(dir, { ...bucketEnv, CURSOR_SECRET, RATE_PAID_PER_SECOND: '100000', KEYS_OBJECT });
  const local = await startApi(localConfig, duck, createClock(clock.start, 1, clock.anchor), quiet, { port: 0 });
  t.teardown(() => local.stop());
  const key = (await local.keys.issue('paid', 'bucket test')).key;
  const replicaEnv = {
    ...bucketEnv,
    LAKE_SOURCE: 'bucket',
    KEYS_OBJECT,
    CURSOR_SECRET,
    API_WORKERS: '1',
    RATE_PAID_PER_SECOND: '100000',
    BUCKET_CACHE_MB: '64',
    CLOCK_START: String(clock.start),
    CLOCK_ANCHOR: String(clock.anchor),
  };
  // Capture's newest books over the network, for the first replica; the second has no feed.
  const feed = await startLatestFeed({
    latest: captured!.latest,
    known: captured!.known,
    health: () => captured!.health(),
    host: '127.0.0.1',
    port: 0,
    secret: FEED_SECRET,
    log: quiet,
  });
  t.teardown(() => feed.close());
  // A new replica takes the manifests from capture's snapshot only where they are the bucket's: here two
  // are left out of it and one holds another partition's manifest, and those three are fetched alone.
  const whole = await snapshotObject();
  t.ok(whole.checkpoints?.catalogue && whole.checkpoints.gaps, "the mirror's snapshot carries the catalogue's and the gaps' checkpoints");
  const snapshot = new Map(whole.manifests.map((m) => [m.partition, m.body]));
  const [left, out, wrong] = [...snapshot.keys()];
  snapshot.delete(left);
  snapshot.delete(out);
  snapshot.set(wrong, snapshot.get([...snapshot.keys()].at(-1)!)!);
  const stale: ManifestSnapshot = { ...whole, manifests: [...snapshot].map(([partition, body]) => ({ partition, body })) };
  await s3.put(snapshotKey(s3.config.prefix), gzipSync(JSON.stringify(stale)));
  let published = 0;
  for await (const o of s3.list(manifestPrefix(s3.config.prefix))) if (o.key.endsWith('.json')) published++;
  const replicas: ApiProcess[] = [];
  const replicaDirs = [0, 1].map((i) => path.join(testdir(t), `replica-${i}`));
  for (let i = 0; i < 2; i++) {
    // The first with capture's feed; the second without, as `make api` runs by default on two cores: two workers sharing its cache.
    const feedEnv: Record<string, string> =
      i === 0 ? { CAPTURE_FEED_URL: feed.url, CAPTURE_FEED_SECRET: FEED_SECRET } : { API_WORKERS: '2' };
    const r = await startApiProcess(t, replicaDirs[i], { ...replicaEnv, ...feedEnv });
    replicas.push(r);
  }
  const get = async (base: string, route: string) => {
    const res = await fetch(`${base}${route}`, { headers: { authorization: `Bearer ${key}` } });
    const body = res.headers.get('content-type')?.includes('json') ? ((await res.json()) as Record<string, unknown>) : null;
    return { status: res.status, body, res };
  };
  const same = async (route: string) => {
    const want = await get(local.url, route);
    t.equal(want.status, 200, `${route} locally`);
    for (const r of replicas) {
      const got = await get(r.url, route);
      t.same(
        { status: got.status, data: got.body?.data, pagination: got.body?.pagination },
        { status: 200, data: want.body?.data, pagination: want.body?.pagination },
        `${route} from the bucket`,
      );
    }
    return want.body!;
  };

  const health = await get(replicas[0].url, '/v3/health');
  t.match(health.body, { data: { lake: { source: 'bucket', readable: true, bucket: { bucket: 'pmh-lake', sync_error: null } } } });
  t.same(
    (health.body as { data: { lake: { bucket: { manifests: unknown } } } }).data.lake.bucket.manifests,
    { fetched: 3, from_snapshot: published - 3 },
    `${published} manifests: all but the three the snapshot lacks or holds wrong taken from it`,
  );
  // Markets and gaps from the snapshot's checkpoints: no markets or gaps file fetched to open.
  for (const [i, d] of replicaDirs.entries()) {
    const fetched = [
      ...(await listFiles(path.join(d, 'lake', 'markets'), '.parquet')),
      ...(await listFiles(path.join(d, 'lake', 'gaps'), '.parquet')),
    ];
    // Its warnings say why, if it did (a snapshot it could not read, say).
    const warned = fetched.length
      ? replicas[i].lines.filter((l) => Number(l.level) >= 40 || l.level === 'warn' || l.level === 'error')
      : [];
    t.same(
      fetched,
      [],
      `a new replica opened without fetching a markets or gaps file${warned.length ? `: ${JSON.stringify(warned)}` : ''}`,
    );
  }

  const listed = await same(`/v3/wallet-prediction/markets?order=asc&limit=50&start_time=${START}&end_time=${END}`);
  const markets = listed.data as { market_id: string; coin: string; window: string; start_time: string; end_time: string }[];
  t.ok(markets.length > 4, `${markets.length} markets`);
  const [m0, m1] = markets.map((m) => m.market_id);
  await same(`/v3/wallet-prediction/${m0}`);
  const page = await same(`/v3/wallet-prediction/${m0}/snapshots?limit=5&order=asc`);
  const cursor = (page.pagination as { next_cursor: string | null }).next_cursor;
  t.ok(cursor, 'a second page');
  // A cursor from one process pages on another: they share the cursor secret.
  await same(`/v3/wallet-prediction/${m0}/snapshots?limit=5&order=asc&cursor=${encodeURIComponent(cursor!)}`);
  // Each replica writes the serving copies of the files it fetched (counted in its cache), then pages read them.
  // Markets in turn: one asked again is answered from the book cache, loaded from the copies only if they
  // were written by its second ask (a busy machine may write them later).
  for (const r of replicas) {
    let pages = { copy_reads: 0, copies_written: 0 };
    for (let i = 0; i < 150 && pages.copy_reads === 0; i++) {
      await get(r.url, `/v3/wallet-prediction/${markets[i % markets.length].market_id}/snapshots?limit=5&order=desc`);
      pages = ((await get(r.url, '/v3/health')).body as { data: { api: { pages: typeof pages } } }).data.api.pages;
      if (pages.copy_reads === 0) await new Promise((resolve) => setTimeout(resolve, 200));
    }
    t.ok(pages.copy_reads > 0, `a replica's pages from its serving copies: ${JSON.stringify(pages)}`);
  }
  await same(`/v3/wallet-prediction/${m0}/snapshots?limit=5&order=desc`);
  await same(`/v3/wallet-prediction/${m0}/snapshots?limit=5&order=asc&cursor=${encodeURIComponent(cursor!)}`);
  await same(`/v3/wallet-prediction/${m1}/timeseries?metric=chance&interval=1m`);
  await same(`/v3/wallet-prediction/${m1}/certificate`);
  await same(`/v3/wallet-prediction/coverage`);
  const polyMarkets = await same(`/v3/btc/markets?order=asc&limit=5&start_time=${START}&end_time=${END}`);
  const pm = (polyMarkets.data as { market_id: string }[])[0].market_id;
  await same(`/v3/btc/markets/${pm}/snapshots?limit=3&include_orderbook=true`);
  await same(`/v3/btc/markets/${pm}/trades?limit=10`);
  // The newest book of a market: the sealed one, or capture's over its feed; the same book either way here.
  const live = markets.map((m) => m.market_id).find((id) => captured!.latest.has(`wallet-prediction:${id}`))!;
  t.ok(live, 'a market the last capture holds a book of');
  const sealedLatest = (await get(local.url, `/v3/wallet-prediction/${live}/orderbook/latest`)).body;
  t.match(sealedLatest?.meta, { source: 'sealed' }, 'a market read from the lake says so');
  const noFeed = await get(replicas[1].url, `/v3/wallet-prediction/${live}/orderbook/latest`);
  t.same(noFeed.body?.data, sealedLatest?.data);
  t.match(noFeed.body?.meta, { source: 'sealed', capture_reachable: false }, 'a replica without capture says its latest book is sealed');
  const fromFeed = await get(replicas[0].url, `/v3/wallet-prediction/${live}/orderbook/latest`);
  t.same(fromFeed.body?.data, sealedLatest?.data);
  t.match(fromFeed.body?.meta, { source: 'capture', capture_reachable: true }, "the other has capture's over the network");
  const feedHealth = (await get(replicas[0].url, '/v3/health')).body as {
    data: { capture: { state: string }; lake: { bucket: { capture_feed: { reachable: boolean } } } };
  };
  t.match(
    feedHealth.data,
    { capture: { state: 'stopped' }, lake: { bucket: { capture_feed: { reachable: true, error: null } } } },
    "capture's health as its feed says it",
  );
  await feed.close();
  // Unreachable once the feed has been silent for its bound: the books stay, no longer vouched for.
  for (let i = 0; i < 100; i++) {
    const again = await get(replicas[0].url, `/v3/wallet-prediction/${live}/orderbook/latest`);
    if ((again.body?.meta as { capture_reachable: boolean }).capture_reachable === false) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  // Health is cached for a moment: asked again until it has caught up.
  let silent = (await get(replicas[0].url, '/v3/health')).body;
  for (let i = 0; i < 100 && (silent?.data as { capture: unknown }).capture !== null; i++) {
    await new Promise((r) => setTimeout(r, 200));
    silent = (await get(replicas[0].url, '/v3/health')).body;
  }
  t.match(silent, { data: { capture: null, lake: { bucket: { capture_feed: { reachable: false } } } } });

  const files = await same(`/v3/wallet-prediction/files?dataset=books&limit=1`);
  const file = (files.data as { url: string; sha256: string }[])[0];
  const body = await fetch(`${replicas[1].url}${file.url}`, { headers: { authorization: `Bearer ${key}` } });
  t.equal(body.status, 200);
  t.equal(
    createHash('sha256')
      .update(Buffer.from(await body.arrayBuffer()))
      .digest('hex'),
    file.sha256,
    'a file downloaded from a replica is the sealed file',
  );

  t.test('keys issued and revoked in the bucket apply on every server', async (t) => {
    // Two operators' `make key` at once, each with its own local copy: the conditional write keeps both.
    const stores = ['a', 'b'].map((n) =>
      KeyStore.open({ ...config, keysFile: path.join(testdir(t), `${n}.json`), keysObject: KEYS_OBJECT }),
    );
    const [paid, second] = await Promise.all([stores[0].issue('paid', 'operator a'), stores[1].issue('paid', 'operator b')]);
    const ids = (await stores[0].list()).map((r) => r.key_id);
    // A server that ran with KEYS_FILE alone keeps its keys when KEYS_OBJECT is turned on: they seed the store.
    const legacy = path.join(testdir(t), 'legacy.json');
    const before = await new KeyStore(legacy).issue('paid', 'issued before the bucket');
    const moved = KeyStore.open({ ...config, keysFile: legacy, keysObject: 'private/seeded.json' });
    t.match(await moved.find(before.key), { key_id: before.record.key_id }, 'a key issued before KEYS_OBJECT was set still works');
    t.match(
      JSON.parse((await s3.get('private/seeded.json'))!.toString('utf8')),
      [{ key_id: before.record.key_id }],
      'and is in the bucket',
    );
    t.ok(ids.includes(paid.record.key_id) && ids.includes(second.record.key_id), 'both keys are in the store');
    const status = async (base: string, k: string) =>
      (await fetch(`${base}/v3/wallet-prediction/${m0}`, { headers: { authorization: `Bearer ${k}` } })).status;
    // A server reads the store at most once a second: an unknown key waits for that read, a known one does not.
    const until = async (base: string, k: string, want: number) => {
      let got = await status(base, k);
      for (let i = 0; i < 300 && got !== want; i++) {
        await new Promise((r) => setTimeout(r, 100));
        got = await status(base, k);
      }
      return got;
    };
    for (const r of replicas) {
      t.equal(await until(r.url, paid.key, 200), 200, 'a key issued by another machine is accepted');
      t.equal(await until(r.url, second.key, 200), 200, "and so is the other operator's");
    }
    t.equal(await until(local.url, paid.key, 200), 200, 'by the local API as well');
    t.ok(await stores[1].revoke(paid.record.key_id), 'revoked by the other operator');
    for (const r of [...replicas, { url: local.url }])
      t.equal(await until(r.url, paid.key, 401), 401, 'a revoked key is refused everywhere');
    t.equal(await status(replicas[0].url, second.key), 200, 'the other key still works');
    const copy = JSON.parse(await fs.readFile(path.join(replicaDirs[0], 'state', 'keys.json'), 'utf8')) as { key_id: string }[];
    t.ok(
      copy.some((r) => r.key_id === second.record.key_id),
      "a replica keeps a copy of the store's records for a start while the bucket is down",
    );
    t.notMatch(JSON.stringify(copy), paid.key, 'hashes only');
  });

  t.test("the repository's Python client's suite passes against a bucket-served API", async (t) => {
    const run = promisify(execFile);
    const out = await run('python3', ['-m', 'unittest', '-v', 'clients/python/tests/test_client.py'], {
      timeout: 120_000,
      env: { ...process.env, PMH_API_URL: replicas[1].url, PMH_API_KEY: key, PMH_MARKET_ID: m0, PYTHONDONTWRITEBYTECODE: '1' },
    }).then(
      (r) => ({ code: 0, text: r.stderr }),
      (err: { code: number; stderr?: string }) => ({ code: err.code, text: String(err.stderr ?? err) }),
    );
    t.equal(out.code, 0, out.code === 0 ? 'unittest passed' : out.text);
    const ran = /Ran (\d+) tests?/.exec(out.text);
    t.ok(ran && Number(ran[1]) >= 10, `ran ${ran?.[1]} Python tests`);
  });

  t.test('an object missing or corrupt in the bucket is a 503, then fetched again', async (t) => {
    const all = await localFiles();
    // Metrics hours neither replica has fetched yet (each keeps its files at their lake paths).
    const held = async (f: IndexedFile) =>
      (
        await Promise.all(
          replicaDirs.map((d) =>
            fs.access(path.join(d, 'lake', f.path)).then(
              () => true,
              () => false,
            ),
          ),
        )
      ).some(Boolean);
    const unread = new Map<string, string>();
    for (const f of all) {
      if (f.partition.dataset !== 'metrics' || f.partition.venue !== 'wallet-prediction' || (await held(f))) continue;
      const p = f.partition;
      const id = markets.find(
        (m) =>
          m.coin === p.coin && m.window === p.window && Date.parse(m.start_time) >= p.hour && Date.parse(m.end_time) <= p.hour + 3_600_000,
      )?.market_id;
      if (id) unread.set(f.path, id);
    }
    t.ok(unread.size >= 2, `${unread.size} metrics files not read yet`);
    const [[corruptPath, corruptMarket], [missingPath, missingMarket]] = [...unread];
    const original = await fs.readFile(path.join(paths.lake, corruptPath));
    await s3.put(
      dataKey(s3.config.prefix, corruptPath),
      Buffer.concat([original.subarray(0, original.length - 8), Buffer.from('corrupt!')]),
    );
    await s3.delete(dataKey(s3.config.prefix, missingPath));
    for (const [id, replica] of [
      [corruptMarket, replicas[0]],
      [missingMarket, replicas[1]],
    ] as const) {
      const refused = await get(replica.url, `/v3/wallet-prediction/${id}/timeseries?metric=chance&interval=1m`);
      t.equal(refused.status, 503);
      t.equal(refused.res.headers.get('retry-after'), '5');
      t.match(refused.body, { error: { code: 'UNAVAILABLE' } });
      t.notMatch(JSON.stringify(refused.body), /sha256|archive\/|pmh-lake|NoSuchKey|BadDigest/, 'nothing internal in the answer');
    }
    // A mirror repairs both (the corrupt object lacks the sha256 its manifest names); both are fetched again.
    t.equal((await new Publisher(paths, s3, quiet).mirror()).files_put, 2);
    await same(`/v3/wallet-prediction/${corruptMarket}/timeseries?metric=chance&interval=1m`);
    await same(`/v3/wallet-prediction/${missingMarket}/timeseries?metric=chance&interval=1m`);
    const fetched = (await get(replicas[0].url, '/v3/health')).body as { data: { lake: { bucket: { cache: { fetch_errors: number } } } } };
    t.ok(fetched.data.lake.bucket.cache.fetch_errors >= 1);
  });

  t.test('with the bucket down, a replica serves what it holds and says it is degraded', async (t) => {
    // A page whose file the two-worker replica has not fetched yet: asked once (one worker fetches it), then with the bucket down.
    const fetchedBy = await fs.readdir(path.join(replicaDirs[1], 'lake'), { recursive: true });
    const unfetched = (await localFiles()).find(
      (f) => f.partition.dataset === 'metrics' && f.partition.venue === 'wallet-prediction' && !fetchedBy.includes(f.path),
    );
    const late = markets.find(
      (m) =>
        unfetched &&
        m.coin === unfetched.partition.coin &&
        m.window === unfetched.partition.window &&
        Date.parse(m.start_time) >= unfetched.partition.hour &&
        Date.parse(m.end_time) <= unfetched.partition.hour + 3_600_000,
    );
    t.ok(late, 'a market whose metrics file neither worker of the second replica holds');
    const lateRoute = `/v3/wallet-prediction/${late!.market_id}/timeseries?metric=chance&interval=1m`;
    const want = await get(local.url, lateRoute);
    t.equal((await getFresh(replicas[1].url, lateRoute, key)).status, 200, 'fetched through one worker');
    await rgw.gatewayStop();
    type Health = { status: number; body: { data: { status: string; lake: { bucket: { sync_error: string | null } } } } };
    let health = (await get(replicas[0].url, '/v3/health')) as unknown as Health;
    // The next sync (every 2 s) finds the bucket gone.
    for (let i = 0; i < 100 && !health.body.data.lake.bucket.sync_error; i++) {
      await new Promise((r) => setTimeout(r, 200));
      health = (await get(replicas[0].url, '/v3/health')) as unknown as Health;
    }
    t.match(health.body.data, { status: 'degraded', lake: { bucket: { sync_error: /ECONNREFUSED|ECONNRESET|Network|Timeout/ } } });
    t.equal(health.status, 200, 'degraded, not failing: restarting it would not bring the bucket back');
    await same(`/v3/wallet-prediction/${m0}/snapshots?limit=5&order=asc`);
    // Each on a connection of its own, as clients behind a load balancer come: the cluster hands
    // connections to its workers in turn, so the worker that did not fetch the file answers too.
    const answers = [];
    for (let i = 0; i < 8; i++) {
      const got = await getFresh(replicas[1].url, lateRoute, key);
      answers.push(got.status === 200 && JSON.stringify(got.body.data) === JSON.stringify(want.body?.data) ? 'same' : String(got.status));
    }
    t.same(answers, Array(8).fill('same'), 'every answer 200 and equal to the local lake’s, whichever worker took it');
    await rgw.gatewayStart();
    for (let i = 0; i < 100 && health.body.data.lake.bucket.sync_error; i++) {
      await new Promise((r) => setTimeout(r, 200));
      health = (await get(replicas[0].url, '/v3/health')) as unknown as Health;
    }
    t.match(health.body.data, { status: 'ok', lake: { bucket: { sync_error: null } } }, 'and recovers with it');
  });
});
