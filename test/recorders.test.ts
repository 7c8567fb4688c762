// Two recorders, one record, against a real S3 server (Ceph's RADOS Gateway): two captures record
// the stand-in's venues into lakes of their own and publish them under `_recorders/<id>/`; the
// merge makes the record at the prefix, which an API process serves from the bucket alone. Each
// recorder is down for a while (a capture stopped, then started again, as a restart does): the
// record has no gap where the other was up, and exactly the span both were down is a gap with
// both recorders' reasons.
import fs from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { type MergeReport, Merger } from '../src/bucket/merger.js';
import { dataKey, heartbeatKey, manifestKey, recorderPrefix } from '../src/bucket/layout.js';
import { S3, S3Error } from '../src/bucket/s3.js';
import { startApi } from '../src/api/server.js';
import { fill } from '../src/capture/fill.js';
import { createClock } from '../src/clock.js';
import type { Config } from '../src/config.js';
import { Duck } from '../src/lake/duckdb.js';
import { partitionOf } from '../src/lake/layout.js';
import type { PartitionManifest } from '../src/lake/manifest.js';
import { parquetSource } from '../src/lake/sql.js';
import { StandInUpstream } from '../src/standin/upstream.js';
import { HOUR } from '../src/time.js';
import { quiet, startApiProcess, testConfig, testdir } from './helpers.js';
import { startRgw } from './rgw.js';

const START = Date.parse('2026-08-04T10:30:00Z');
const END = Date.parse('2026-08-04T11:04:00Z');
const HOUR10 = Date.parse('2026-08-04T10:00:00Z');
const MIN = 60_000;
/** Each recorder's downtime: A's contains B's, so B's is the span both were down (both held the 10:40 window then). */
const DOWN = { 'rec-a': [START + 12 * MIN, START + 20 * MIN], 'rec-b': [START + 13 * MIN, START + 14 * MIN] } as const;
const KEYS_OBJECT = 'private/keys.json';

const rgw = await startRgw(t);
// Markets sealed half a minute after their hour (not an hour), so the catalogue of hour 10 is in the bucket by the end.
const bucketEnv = { ...rgw.env, S3_BUCKET: 'pmh-record', S3_PREFIX: 'archive/', PUBLISH_MS: '200', MARKETS_SEAL_GRACE_MS: '30000' };
const duck = await Duck.open(2);
t.teardown(() => duck.close());
const main = new S3(testConfig(testdir(t), bucketEnv).bucket!);
t.teardown(() => main.close());
await main.ensureBucket();

/** A recorder's capture over [from, to), published to its own place in the bucket. */
async function record(config: Config, from: number, to: number) {
  const run = await fill(config, duck, quiet, { hours: 0, speed: 400, pollMs: 3000, start: from, until: to }, new StandInUpstream({}));
  // What sealed at the stop, and the heartbeat that vouches for it.
  await run.capture.publisher!.pass();
  return run;
}

const recorders = Object.keys(DOWN) as (keyof typeof DOWN)[];
const configs = new Map(recorders.map((r) => [r, testConfig(path.join(testdir(t), r), { ...bucketEnv, RECORDER_ID: r })]));
const mergeDir = path.join(testdir(t), 'merge');
const merger = new Merger(main, mergeDir, duck, quiet);
// A's lake is merged alone first (B has published nothing yet), then again with B's: the record grows.
const alone: MergeReport[] = [];
for (const r of recorders) {
  const [down, up] = DOWN[r];
  await record(configs.get(r)!, START, down);
  await record(configs.get(r)!, up, END);
  alone.push(await merger.pass());
}
const first = alone[1];

/** The merged manifest of a partition of hour 10, or null. */
async function merged(dataset: 'books' | 'gaps', coin = 'btc', window: '5m' | '15m' = '5m'): Promise<PartitionManifest | null> {
  const body = await main.get(manifestKey(main.config.prefix, partitionOf(dataset, 'polymarket', coin, window, HOUR10)));
  return body ? (JSON.parse(body.toString('utf8')) as PartitionManifest) : null;
}

/** A manifest's files, fetched from `prefix`, as one relation. */
async function relationOf(prefix: string, m: PartitionManifest, dir: string): Promise<string> {
  const files: string[] = [];
  for (const f of m.files) {
    const dest = path.join(dir, prefix.replaceAll('/', '_'), f.name);
    await main.download(dataKey(prefix, `${m.partition}/${f.name}`), dest, { size: f.bytes, sha256: f.sha256 });
    files.push(dest);
  }
  return parquetSource(files, 'union_by_name=true');
}

async function recorderManifest(r: string, dataset: 'books' | 'gaps'): Promise<PartitionManifest | null> {
  const body = await main.get(manifestKey(recorderPrefix(main.config.prefix, r), partitionOf(dataset, 'polymarket', 'btc', '5m', HOUR10)));
  return body ? (JSON.parse(body.toString('utf8')) as PartitionManifest) : null;
}

t.test('the record holds every book either recorder kept, once, and says who kept it', async (t) => {
  t.ok(first.partitions > 0, `${first.partitions} partitions merged from ${first.recorders} recorders`);
  t.equal(first.recorders, 2);
  t.equal(alone[0].recorders, 1, 'the record was merged from A alone before B published');
  t.equal(first.disagreements, 0, 'recorders of one venue never disagree');
  const dir = testdir(t);
  const m = (await merged('books'))!;
  t.ok(m?.merged, 'the manifest says what it was merged from');
  const books = await relationOf(main.config.prefix, m, dir);
  const [{ rows, keys }] = await duck.rows(
    `SELECT count(*)::INTEGER AS rows, count(DISTINCT (market_id, outcome_index, ts))::INTEGER AS keys FROM ${books}`,
  );
  t.ok(Number(rows) > 0);
  t.equal(rows, keys, `${rows} books, no (market, outcome, ts) twice`);
  const inputs: string[] = [];
  for (const r of recorders)
    inputs.push(await relationOf(recorderPrefix(main.config.prefix, r), (await recorderManifest(r, 'books'))!, dir));
  const [{ union }] = await duck.rows(
    `SELECT count(*)::INTEGER AS union FROM (${inputs.map((i) => `SELECT market_id, outcome_index, ts FROM ${i}`).join(' UNION ')})`,
  );
  t.equal(rows, union, 'every (market, outcome, ts) either recorder kept is in the record');
  // The partition was merged again as each recorder's seals came in: only the last merge's file is left for a glob.
  const listed: string[] = [];
  for await (const o of main.list(`${main.config.prefix}${m.partition}/`)) listed.push(o.key.slice(o.key.lastIndexOf('/') + 1));
  t.same(
    listed,
    m.files.map((f) => f.name),
    'the bucket holds the files its manifest names, no other',
  );
  const during = await duck.rows(
    `SELECT DISTINCT recorders FROM ${books} WHERE epoch_ms(ts) > ${DOWN['rec-b'][1] + MIN} AND epoch_ms(ts) < ${DOWN['rec-a'][1]}`,
  );
  t.same(
    during.map((r) => r.recorders),
    [['rec-b']],
    'while A was down, the books are B’s',
  );
});

t.test('a gap remains only where both recorders were down, with both reasons', async (t) => {
  const dir = testdir(t);
  const downtime = async (prefix: string, m: PartitionManifest, column = 'NULL') =>
    (
      await duck.rows(
        `SELECT market_id, epoch_ms(from_ts)::DOUBLE AS f, epoch_ms(to_ts)::DOUBLE AS t, ${column} AS recorders FROM ${await relationOf(prefix, m, dir)}
         WHERE dataset = 'books' AND reason = 'process_down' ORDER BY market_id, f`,
      )
    ).map((g) => ({ market: String(g.market_id), f: Number(g.f), t: Number(g.t), recorders: g.recorders as string[] | undefined }));
  const own = new Map<string, Awaited<ReturnType<typeof downtime>>>();
  for (const r of recorders) own.set(r, await downtime(recorderPrefix(main.config.prefix, r), (await recorderManifest(r, 'gaps'))!));
  t.ok(own.get('rec-a')!.length > 0 && own.get('rec-b')!.length > 0, 'each recorder’s own record has its downtime as gaps');
  const gaps = await downtime(main.config.prefix, (await merged('gaps'))!, 'recorders');
  t.ok(gaps.length > 0, `${gaps.length} downtime gaps in the record`);
  // B's downtime as B recorded it (from its last heartbeat to its first book after the restart) lies inside A's.
  const withinB = (g: { market: string; f: number; t: number }) =>
    own.get('rec-b')!.some((b) => b.market === g.market && b.f <= g.f && g.t <= b.t);
  t.same(
    gaps.filter((g) => !withinB(g)),
    [],
    'every downtime gap in the record lies where both were down',
  );
  t.same([...new Set(gaps.map((g) => JSON.stringify(g.recorders)))].sort(), ['["rec-a"]', '["rec-b"]'], 'each recorder’s reason is kept');
  const aOutsideB = own.get('rec-a')!.reduce((ms, a) => ms + (a.t - a.f), 0) - own.get('rec-b')!.reduce((ms, b) => ms + (b.t - b.f), 0);
  t.ok(aOutsideB > 0, `A's ${(aOutsideB / 1000).toFixed(0)} s of downtime outside B's are not gaps of the record`);
});

t.test('merges are deterministic: a merge anywhere else of the same inputs writes the same files', async (t) => {
  const again = await new Merger(main, path.join(testdir(t), 'elsewhere'), duck, quiet).pass();
  t.equal(again.partitions, 0, 'a second merger finds every partition merged from what it would read');
  const before = (await merged('books'))!;
  // The record's manifest gone (an operator's mistake): merged again, byte for byte the same file.
  await main.delete(manifestKey(main.config.prefix, partitionOf('books', 'polymarket', 'btc', '5m', HOUR10)));
  const redo = new Merger(main, path.join(testdir(t), 'redo'), duck, quiet);
  await redo.pass();
  const after = (await merged('books'))!;
  t.same(
    after.files.map((f) => [f.name, f.sha256]),
    before.files.map((f) => [f.name, f.sha256]),
  );
});

t.test('an API process serves the record from the bucket: the windows B covered are whole', async (t) => {
  const clock = { start: END + 3_600_000, anchor: Date.now() };
  const local = await startApi(
    testConfig(testdir(t), { ...bucketEnv, KEYS_OBJECT }),
    duck,
    createClock(clock.start, 1, clock.anchor),
    quiet,
    {
      port: 0,
    },
  );
  t.teardown(() => local.stop());
  const key = (await local.keys.issue('paid', 'recorders test')).key;
  const replica = await startApiProcess(t, testdir(t), {
    ...bucketEnv,
    LAKE_SOURCE: 'bucket',
    KEYS_OBJECT,
    API_WORKERS: '1',
    RATE_PAID_PER_SECOND: '100000',
    CLOCK_START: String(clock.start),
    CLOCK_ANCHOR: String(clock.anchor),
  });
  const get = async (route: string) => {
    const res = await fetch(`${replica.url}${route}`, { headers: { authorization: `Bearer ${key}` } });
    return { status: res.status, body: (await res.json()) as { data: Record<string, unknown>[] | Record<string, unknown> } };
  };
  const list = await get(`/v3/btc/markets?window=5m&start_time=${START}&end_time=${END}&limit=100`);
  t.equal(list.status, 200);
  const windows = (list.body.data as { market_id: string; start_time: string; end_time: string }[]).filter(
    (m) => Date.parse(m.start_time) >= START + 5 * MIN && Date.parse(m.end_time) <= HOUR10 + 60 * MIN,
  );
  t.ok(windows.length >= 4, `${windows.length} windows of hour 10 after both recorders had started`);
  type Covered = { share: number; by_reason: Record<string, number>; by_cause: Record<string, number> };
  const overlaps = (w: { start_time: string; end_time: string }, [from, to]: readonly [number, number]) =>
    Date.parse(w.start_time) < to && Date.parse(w.end_time) > from;
  let aBehind = 0;
  for (const w of windows) {
    const cert = await get(`/v3/btc/markets/${w.market_id}/certificate`);
    const data = cert.body.data as {
      coverage: Covered;
      recorders: Record<string, { coverage: Covered; gaps: { from: string; to: string; reason: string }[] }> | null;
    };
    const both = overlaps(w, DOWN['rec-b']);
    if (both) t.ok(data.coverage.by_reason.process_down > 0, `${w.start_time}: both were down, and it says so`);
    else t.same(data.coverage.by_reason.process_down ?? 0, 0, `${w.start_time}: one recorder was up throughout: no downtime`);
    // Beside the record, each recorder's own coverage: its downtime is its gap, and the record covers at least what each did.
    const own = data.recorders!;
    t.same(Object.keys(own).sort(), recorders, `${w.start_time}: each recorder's coverage`);
    for (const r of recorders) {
      const down = overlaps(w, DOWN[r]);
      // Down over the window: its downtime gap, or (a market it did not hold yet when stopped) no book of it: unrecorded.
      const missed = own[r].coverage.by_cause.capture + own[r].coverage.by_cause.unrecorded;
      if (down) t.ok(missed > 0, `${w.start_time}: ${r} was down, and its coverage says so (${missed} s)`);
      else t.same(own[r].coverage.by_reason.process_down ?? 0, 0, `${w.start_time}: ${r} was up`);
      t.ok(
        data.coverage.share >= own[r].coverage.share,
        `${w.start_time}: the record covers ${data.coverage.share}, ${r} ${own[r].coverage.share}`,
      );
      t.ok(
        own[r].gaps.every((g) => g.reason !== 'unpublished'),
        `${w.start_time}: ${r} had published the window when merged`,
      );
    }
    if (overlaps(w, DOWN['rec-a']) && !both && data.coverage.share > own['rec-a'].coverage.share) aBehind++;
    // The market record carries the same in brief.
    const record = (await get(`/v3/btc/markets/${w.market_id}`)).body.data as {
      coverage: { recorders: Record<string, { share: number; missing_seconds: Record<string, number> }> | null };
    };
    t.same(
      record.coverage.recorders,
      Object.fromEntries(recorders.map((r) => [r, { share: own[r].coverage.share, missing_seconds: own[r].coverage.by_cause }])),
      `${w.start_time}: the market record's per-recorder coverage is the certificate's`,
    );
  }
  t.ok(aBehind > 0, `${aBehind} windows where the record covers more than A did: B's books filled A's downtime`);
  // The coverage table (the wallet venue's namespace: both venues were recorded) sums each
  // recorder's figures by coin and window, beside the record's.
  const table = (await get('/v3/wallet-prediction/coverage')).body.data as {
    windows: {
      coin: string;
      window: string;
      windows: number;
      share: number;
      recorders: Record<string, { windows: number; complete: number; share: number; record_share: number }>;
    }[];
  };
  const rows = table.windows.filter((w) => w.windows > 0);
  t.ok(rows.length > 0, `${rows.length} coins and windows with counted windows`);
  for (const row of rows) {
    const at = `${row.coin} ${row.window}`;
    t.same(Object.keys(row.recorders), recorders, `${at}: the coverage table names each recorder`);
    for (const r of recorders) {
      const own = row.recorders[r];
      // The venue lists windows ahead: those after the run no recorder published anything of.
      t.ok(own.windows > 0 && own.windows <= row.windows, `${at}: ${r} has figures for ${own.windows} of ${row.windows} windows`);
      t.ok(own.share <= own.record_share, `${at}: of the same windows the record covers ${own.record_share}, ${r} ${own.share}`);
      t.ok(own.complete <= own.windows);
    }
  }
  t.ok(
    rows.some((row) => recorders.some((r) => row.recorders[r].share < row.recorders[r].record_share)),
    'the record covers more than a recorder did (the other filled its downtime)',
  );
});

t.test(
  'a merged file no manifest names (a lost race, a kill before the manifest) is deleted after its grace; a named one stays',
  async (t) => {
    const m = (await merged('books'))!;
    const lost = 'merged-0000000000000000.parquet';
    const orphanKey = dataKey(main.config.prefix, `${m.partition}/${lost}`);
    await main.put(orphanKey, Buffer.from('PAR1 put, then the race was lost'));
    const namedKey = dataKey(main.config.prefix, `${m.partition}/${m.files[0].name}`);
    // The state a merger leaves when killed between putting a file and the manifest naming it.
    const work = path.join(testdir(t), 'sweeper');
    await fs.mkdir(work, { recursive: true });
    const at = Date.now();
    await fs.writeFile(
      path.join(work, 'merge.json'),
      JSON.stringify({
        offsets: {},
        pending: [],
        unnamed: [
          { key: orphanKey, partition: m.partition, name: lost, at },
          { key: namedKey, partition: m.partition, name: m.files[0].name, at },
        ],
      }),
    );
    const none = () => false;
    t.equal(
      (await new Merger(main, work, duck, quiet, { hours: none, graceMs: 3_600_000 }).pass()).orphans_deleted,
      0,
      'within its grace, left alone',
    );
    t.ok(await main.head(orphanKey));
    t.equal(
      (await new Merger(main, work, duck, quiet, { hours: none, graceMs: 0 }).pass()).orphans_deleted,
      1,
      'after it, the unnamed one is deleted',
    );
    t.equal(await main.head(orphanKey), null);
    t.ok(await main.head(namedKey), 'the file the manifest names stays');
    t.same(JSON.parse(await fs.readFile(path.join(work, 'merge.json'), 'utf8')).unnamed, [], 'nothing left to look at');
  },
);

t.test('a file a merged manifest names no more leaves the bucket; a delete that fails is left to the next sweep', async (t) => {
  const m = (await merged('books'))!;
  const p = partitionOf('books', 'polymarket', 'btc', '5m', HOUR10);
  const key = manifestKey(main.config.prefix, p);
  // The manifest as a merge of fewer inputs left it: another fingerprint, and a file of its own.
  const older = 'merged-ffffffffffffffff.parquet';
  const olderKey = dataKey(main.config.prefix, `${m.partition}/${older}`);
  await main.put(olderKey, Buffer.from('PAR1 an older merge'));
  await main.put(
    key,
    Buffer.from(
      JSON.stringify({ ...m, files: [...m.files, { ...m.files[0], name: older }], merged: { ...m.merged!, fingerprint: 'older' } }),
    ),
  );
  // Its deletes refused, as a gateway under load may.
  class RefusingDeletes extends S3 {
    override async delete(): Promise<void> {
      throw new S3Error(503, 'SlowDown', 'delete refused');
    }
  }
  const refusing = new RefusingDeletes(main.config);
  t.teardown(() => refusing.close());
  const work = path.join(testdir(t), 'remerge');
  const hour = (h: number) => h === HOUR10;
  await new Merger(refusing, work, duck, quiet, { hours: hour, graceMs: 0 }).pass();
  t.same(
    (await merged('books'))!.files.map((f) => f.name),
    m.files.map((f) => f.name),
    'merged again: the manifest names the merge of every input, not the older file',
  );
  t.ok(await main.head(olderKey), 'its delete refused, the older file is still there');
  const unnamed = JSON.parse(await fs.readFile(path.join(work, 'merge.json'), 'utf8')).unnamed as { key: string }[];
  t.same(
    unnamed.map((u) => u.key),
    [olderKey],
    'and noted for the sweep',
  );
  t.equal((await new Merger(main, work, duck, quiet, { hours: () => false, graceMs: 0 }).pass()).orphans_deleted, 1, 'swept');
  t.equal(await main.head(olderKey), null, 'gone from the bucket');
  t.ok(await main.head(dataKey(main.config.prefix, `${m.partition}/${m.files[0].name}`)), 'the named file stays');
});

// Last: it moves a recorder's published horizon, which every merge after it would read.
t.test(
  'a merger keeps at most its cache of inputs, and looks again at a pending group only when a horizon it waits on moved',
  async (t) => {
    const work = path.join(testdir(t), 'capped');
    const capped = new Merger(main, work, duck, quiet, { cacheBytes: 0 });
    const groupDirs = async () => (await fs.readdir(work, { withFileTypes: true })).filter((e) => e.isDirectory()).map((e) => e.name);
    // The record's books of hour 10 gone: this merger fetches the recorders' files to merge them again.
    await main.delete(manifestKey(main.config.prefix, partitionOf('books', 'polymarket', 'btc', '5m', HOUR10)));
    const first = await capped.pass();
    t.ok(first.partitions >= 1, 'merged again');
    t.ok(first.pending > 0, `${first.pending} groups wait on the recorders' horizons (their inputs would be kept)`);
    t.equal(first.cache_bytes, 0);
    t.same(await groupDirs(), [], 'no inputs kept past a cache of 0 bytes');

    // A's horizon moves past every group, B's stays (a recorder down for good): each pending group is
    // looked at again once; when A's moves again, none is (they wait on B alone), and none is lost.
    const key = heartbeatKey(recorderPrefix(main.config.prefix, 'rec-a'));
    const original = (await main.get(key))!;
    t.teardown(() => main.put(key, original));
    const moveA = async (to: number, gaps?: object[]) =>
      main.put(
        key,
        Buffer.from(
          JSON.stringify({ ...(JSON.parse(original.toString('utf8')) as object), sealed_through: to, ...(gaps ? { gaps } : {}) }),
        ),
      );
    await moveA(HOUR10 + 5 * HOUR);
    const moved = await capped.pass();
    t.ok(moved.groups >= first.pending, `${moved.groups} groups looked at again`);
    t.equal(moved.pending, first.pending, 'still pending: B has not sealed them');
    await moveA(HOUR10 + 6 * HOUR);
    const again = await capped.pass();
    t.equal(again.groups, 0, "no group looked at: A's clip of each was at its end already");
    t.equal(again.pending, first.pending);
    // A gap open at A's heartbeat over hour 10 (closed later, it lands in a partition a commit names,
    // but a group it only reaches into hears of it this way): the groups it reaches are looked at again.
    const open = {
      market_id: 'm-open',
      dataset: 'books',
      from_ts: HOUR10 + 600_000,
      until: null,
      reason: 'stream_stalled',
      detail: null,
      failures: 1,
    };
    await moveA(HOUR10 + 6 * HOUR, [open]);
    const opened = await capped.pass();
    t.ok(opened.groups > 0 && opened.groups <= first.pending, `${opened.groups} pending groups the open gap reaches looked at again`);
    await moveA(HOUR10 + 6 * HOUR, [open]);
    t.equal((await capped.pass()).groups, 0, 'and not again while it stays as it was');
  },
);
