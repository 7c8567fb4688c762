// Stand-in plus capture over real HTTP for simulated hours, then the lake is read back.
import fs from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { fill } from '../src/capture/fill.js';
import type { Heartbeat } from '../src/capture/heartbeat.js';
import { Capture } from '../src/capture/capture.js';
import { clockFromParams, createClock, pacedClock } from '../src/clock.js';
import { createAdapters } from '../src/venues/index.js';
import { StandInUpstream } from '../src/standin/upstream.js';
import { compact } from '../src/lake/compact.js';
import { Duck } from '../src/lake/duckdb.js';
import { listFiles, sha256File } from '../src/lake/fsutil.js';
import { lakePaths, parsePartitionDir } from '../src/lake/layout.js';
import { readManifest } from '../src/lake/manifest.js';
import { listSpool } from '../src/lake/spool.js';
import { HOUR } from '../src/time.js';
import { lakeTable, one, quiet, sealAll, testConfig, testdir } from './helpers.js';
import { spoolSource } from '../src/lake/sql.js';

const START = Date.parse('2026-07-26T12:40:00Z');
const dir = testdir(t);
const config = testConfig(dir);
const duck = await Duck.open(1);
t.teardown(() => duck.close());

const upstream = new StandInUpstream({ keepServed: true });
const run = {
  ...(await fill(config, duck, quiet, { hours: 0, speed: 500, start: START, until: START + 1.5 * HOUR, pollMs: 2000 }, upstream)),
  standin: upstream.standin,
};

t.test('the open hour is readable from the spool before it is sealed', async (t) => {
  const parts = (await listSpool(lakePaths(dir).spool)).filter((p) => p.partition.dataset === 'books');
  t.ok(parts.length > 0, 'the last hour is still in the spool');
  const source = spoolSource(
    'books',
    parts.map((p) => p.file),
    true,
  );
  const newest = await one(duck, `SELECT epoch_ms(max(ts))::BIGINT AS ts FROM ${source}`);
  const captured = Math.max(...[...run.capture.latest.values()].map((l) => l.ts));
  t.equal(Number(newest.ts), captured, 'the newest captured book is visible to readers');
});

t.test('sealing everything', async (t) => {
  const sealed = await sealAll(duck, dir);
  t.ok(sealed.files > 0);
  t.same(await listSpool(lakePaths(dir).spool), [], 'the spool is empty after sealing');
});

t.test("the heartbeat names each market held from this process's first book of it, and none held before one", async (t) => {
  const beat = JSON.parse(await fs.readFile(lakePaths(dir).heartbeat, 'utf8')) as Heartbeat;
  const first = new Map(
    (
      (await duck.rows(`SELECT market_id, epoch_ms(min(ts))::DOUBLE AS first FROM ${lakeTable(dir, 'books')} GROUP BY market_id`)) as {
        market_id: string;
        first: number;
      }[]
    ).map((r) => [r.market_id, r.first]),
  );
  const named = beat.open.map((m) => [m.market_id, m.since ?? null, Array.isArray(m.written)]);
  // Markets named before their first book (about to open) are there or not as the stop falls.
  t.ok(named.filter(([, since]) => since !== null).length > 1, 'markets held with their books');
  t.same(
    named,
    beat.open.map((m) => (first.has(m.market_id) ? [m.market_id, first.get(m.market_id), true] : [m.market_id, null, false])),
    'since: its first book; a market without one vouches for none of another recorder gaps',
  );
});

t.test('hive layout as CONTRACT.md section 7 lays it out', async (t) => {
  const files = await listFiles(path.join(dir, 'lake'), '.parquet');
  t.ok(files.length > 20);
  t.same(
    files.filter((f) => !parsePartitionDir(path.dirname(f))),
    [],
    'every file sits in a hive partition',
  );
  const datasets = new Set(files.map((f) => f.split('/')[0]));
  t.same([...datasets].sort(), ['books', 'markets', 'metrics', 'trades'].concat(datasets.has('gaps') ? ['gaps'] : []).sort());
  const venues = new Set(files.map((f) => f.split('/')[1]));
  t.same([...venues].sort(), ['venue=polymarket', 'venue=wallet-prediction']);
});

t.test('book columns and types', async (t) => {
  const cols = await duck.rows(`DESCRIBE SELECT * FROM ${lakeTable(dir, 'books')}`);
  const types = Object.fromEntries(cols.map((c) => [c.column_name, c.column_type]));
  const TZ = 'TIMESTAMP WITH TIME ZONE';
  t.same(types, {
    ts: TZ,
    market_id: 'VARCHAR',
    token_id: 'VARCHAR',
    outcome_index: 'INTEGER',
    outcome: 'VARCHAR',
    exchange_ts: TZ,
    recv_ts: TZ,
    bid_prices: 'DOUBLE[]',
    bid_sizes: 'DOUBLE[]',
    ask_prices: 'DOUBLE[]',
    ask_sizes: 'DOUBLE[]',
    verified_by: 'VARCHAR',
    hash_check: 'VARCHAR',
    price_decimals: 'TINYINT',
    size_decimals: 'TINYINT',
    level_texts: 'VARCHAR',
    hash_fields: 'VARCHAR',
    venue_hash: 'VARCHAR',
    venue: 'VARCHAR',
    coin: 'VARCHAR',
    window: 'VARCHAR',
    date: 'DATE',
    hour: 'INTEGER',
  });
  const file = (await listFiles(path.join(dir, 'lake/books'), '.parquet'))[0];
  const physical = await duck.rows(
    `SELECT name, converted_type, logical_type FROM parquet_schema('${dir}/lake/books/${file}') WHERE name IN ('ts', 'exchange_ts', 'recv_ts', 'bid_prices')`,
  );
  t.same(
    Object.fromEntries(physical.map((r) => [r.name, r.converted_type])),
    { ts: 'TIMESTAMP_MICROS', exchange_ts: 'TIMESTAMP_MICROS', recv_ts: 'TIMESTAMP_MICROS', bid_prices: 'LIST' },
    'timestamps, standard LIST columns',
  );
  // pandas, pyarrow and Polars read a time as UTC only when the file says it is adjusted to UTC.
  for (const r of physical.filter((r) => r.name !== 'bid_prices'))
    t.match(r.logical_type, /isAdjustedToUTC=1/, `${r.name} is UTC-adjusted`);
  const metrics = Object.fromEntries(
    (await duck.rows(`DESCRIBE SELECT * FROM ${lakeTable(dir, 'metrics')}`)).map((c) => [c.column_name, c.column_type]),
  );
  t.match(metrics, { chance: 'DOUBLE', price: 'DOUBLE', last_trade: 'DOUBLE' }, 'three separate metric columns');
});

t.test('ladders: equal lengths, best first, both outcome tokens', async (t) => {
  const bad = await one(
    duck,
    `SELECT count(*) FILTER (WHERE len(bid_prices) <> len(bid_sizes) OR len(ask_prices) <> len(ask_sizes)) AS unequal,
    count(*) FILTER (WHERE bid_prices <> list_reverse_sort(bid_prices) OR ask_prices <> list_sort(ask_prices)) AS unordered,
    count(*) FILTER (WHERE len(bid_prices) > 0 AND len(ask_prices) > 0 AND bid_prices[1] >= ask_prices[1]) AS crossed,
    count(*) AS n FROM ${lakeTable(dir, 'books')}`,
  );
  t.equal(Number(bad.unequal), 0);
  t.equal(Number(bad.unordered), 0);
  t.equal(Number(bad.crossed), 0);
  t.ok(Number(bad.n) > 1000);
  const tokens = await duck.rows(`SELECT market_id, ts, count(*) AS n FROM ${lakeTable(dir, 'books')} GROUP BY ALL HAVING n <> 2 LIMIT 5`);
  t.same(tokens, [], 'every capture of a market holds both outcome books');
  const times = await one(
    duck,
    `SELECT count(*) FILTER (WHERE exchange_ts > ts) AS ahead, count(*) FILTER (WHERE recv_ts <> ts) AS apart FROM ${lakeTable(dir, 'books')}`,
  );
  t.same(times, { ahead: 0n, apart: 0n }, 'a snapshot is stamped when its books arrived: never before their exchange time');
});

t.test('sealed files are sorted by market_id, ts', async (t) => {
  const files = (await listFiles(path.join(dir, 'lake/books'), '.parquet')).map((f) => path.join(dir, 'lake/books', f));
  const unsorted: string[] = [];
  for (const file of files) {
    const row = await one(
      duck,
      `SELECT count(*) FILTER (WHERE (market_id, ts, outcome_index) < prev) AS unsorted FROM (
      SELECT market_id, ts, outcome_index, lag((market_id, ts, outcome_index)) OVER (ORDER BY file_row_number) AS prev
      FROM read_parquet('${file}', file_row_number = true))`,
    );
    if (Number(row.unsorted) !== 0) unsorted.push(file);
  }
  t.ok(files.length > 10);
  t.same(unsorted, []);
});

t.test('every book the stand-in served is recorded, or lies in a gap of its market', async (t) => {
  const lake = await one(duck, `SELECT count(*) AS n FROM ${lakeTable(dir, 'books')}`);
  const served = run.standin.stats.books['wallet-prediction'] + run.standin.stats.books.polymarket;
  t.equal(Number(lake.n), run.capture.stats.books);
  // A market's books are one answer of both tokens: a token's request that fails (a timeout on a
  // starved machine) discards its sibling's book too, served and never recorded, and the poll's gap
  // from its start covers both. So each token's served books are its rows plus those served inside
  // a gap of its market.
  const rows = new Map(
    (await duck.rows(`SELECT token_id, count(*)::INTEGER AS n FROM ${lakeTable(dir, 'books')} GROUP BY token_id`)).map((r) => [
      String(r.token_id),
      Number(r.n),
    ]),
  );
  const marketOf = new Map(
    (await duck.rows(`SELECT DISTINCT market_id, unnest(outcome_token_ids) AS token_id FROM ${lakeTable(dir, 'markets')}`)).map((r) => [
      String(r.token_id),
      String(r.market_id),
    ]),
  );
  const gaps = (await duck.rows(
    `SELECT market_id, epoch_ms(from_ts)::DOUBLE AS f, epoch_ms(to_ts)::DOUBLE AS t FROM ${lakeTable(dir, 'gaps')} WHERE dataset = 'books'`,
  )) as { market_id: string; f: number; t: number }[];
  // A request whose answer did not arrive in time (a starved machine) is asked again: the venue served
  // the book twice, and the first answer never reached capture. Such books are bounded by the retries.
  const retries = Object.values(run.capture.upstreamStats()).reduce((n, s) => n + s.retries, 0);
  const wrong: Record<string, unknown>[] = [];
  let inGaps = 0;
  let retried = 0;
  for (const [token, times] of run.standin.stats.served!) {
    const market = marketOf.get(token);
    const gapped = times.filter((at) => gaps.some((g) => g.market_id === market && g.f <= at && at < g.t)).length;
    const recorded = rows.get(token) ?? 0;
    inGaps += Math.min(gapped, times.length - recorded);
    retried += Math.max(0, times.length - recorded - gapped);
    if (recorded > times.length) wrong.push({ token, market, served: times.length, recorded, gapped });
  }
  t.same(wrong, [], 'no token has more books recorded than served');
  t.ok(
    retried <= retries,
    `${served} books served: ${Number(lake.n)} recorded, ${inGaps} others served inside a gap of their market, ${retried} outside one (at most the ${retries} requests retried)`,
  );
  const dups = await one(duck, `SELECT count(*) - count(DISTINCT (market_id, token_id, ts)) AS d FROM ${lakeTable(dir, 'books')}`);
  t.equal(Number(dups.d), 0);
});

t.test('markets keep every identifier; books match the deterministic venue', async (t) => {
  const m = await one(
    duck,
    `SELECT * FROM ${lakeTable(dir, 'markets')} WHERE venue = 'polymarket' AND status = 'resolved' ORDER BY ts DESC LIMIT 1`,
  );
  t.ok(m.market_id && m.condition_id && m.slug);
  t.same((m.outcome_labels as string[]).length, 2);
  t.ok(m.winning_outcome_index === 0 || m.winning_outcome_index === 1);
  const sim = run.standin.sim;
  const b = await one(
    duck,
    `SELECT token_id, epoch_ms(exchange_ts)::BIGINT AS ets, bid_prices, ask_prices FROM ${lakeTable(dir, 'books')} WHERE venue = 'polymarket' AND len(bid_prices) > 0 LIMIT 1`,
  );
  const found = sim.byToken('polymarket', String(b.token_id))!;
  t.ok(found, 'the token belongs to a simulated market');
});

t.test('compaction merges a partition with two files and is idempotent', async (t) => {
  const paths = lakePaths(dir);
  const file = (await listFiles(paths.manifest, '.json')).find((f) => f.startsWith('books/'))!;
  const partition = parsePartitionDir(file.replace(/\.json$/, ''))!;
  const before = await readManifest(paths.manifest, partition);
  // A second seal into the same hour, as after a capture restart.
  const extra = path.join(paths.spool, 'restart-seg', file.replace(/\.json$/, ''), '000001.ndjson');
  await fs.mkdir(path.dirname(extra), { recursive: true });
  await fs.writeFile(
    extra,
    JSON.stringify({
      ts: partition.hour + 1,
      market_id: 'zz',
      token_id: 't',
      outcome_index: 0,
      outcome: 'Up',
      exchange_ts: null,
      recv_ts: partition.hour + 2,
      bid_prices: [],
      bid_sizes: [],
      ask_prices: [0.5],
      ask_sizes: [1],
    }) + '\n',
  );
  await sealAll(duck, dir);
  // A slow machine may have sealed the hour in stretches already (capture seals what it has): one file more than before.
  const sealed = before.files.length + 1;
  t.equal((await readManifest(paths.manifest, partition)).files.length, sealed);
  const rows = before.files.reduce((n, f) => n + f.rows, 0) + 1;
  const busy = await compact(duck, paths, partition.hour + 2 * HOUR, undefined, rows - 1);
  t.ok(busy.kept >= 1, 'past the row bound, the files are kept as sealed');
  t.equal((await readManifest(paths.manifest, partition)).files.length, sealed);
  const report = await compact(duck, paths, partition.hour + 2 * HOUR);
  t.ok(report.merged >= 2);
  const after = await readManifest(paths.manifest, partition);
  t.equal(after.files.length, 1);
  t.equal(after.files[0].rows, rows);
  const onDisk = path.join(paths.lake, file.replace(/\.json$/, ''), after.files[0].name);
  t.equal(await sha256File(onDisk), after.files[0].sha256, 'the manifest sha256 is the file’s');
  t.same(
    (await fs.readdir(path.dirname(onDisk))).filter((n) => n.endsWith('.parquet')),
    [after.files[0].name],
    'replaced files left the lake',
  );
  await compact(duck, paths, partition.hour + 2 * HOUR);
  t.same(await readManifest(paths.manifest, partition), after, 'a second compaction changes nothing');
});

t.test("a paced clock holds at its consumer's progress, and a thread's copy of it with it", async (t) => {
  const start = Date.parse('2026-07-26T12:00:00Z');
  let reached = start;
  const clock = pacedClock(start, 1000, Date.now(), Infinity, 1000, () => reached);
  // What a stream thread builds from the params it is sent: the same shared ceiling.
  const copy = clockFromParams(clock.params!);
  // 30 ms of real time at 1000x is 30 simulated seconds, far past the 1 s lead.
  await new Promise((r) => setTimeout(r, 30));
  t.equal(clock.now(), start + 1000, 'held one lead past what the consumer reached');
  t.equal(copy.now(), start + 1000, 'and so is the copy');
  reached = start + 5000;
  t.equal(clock.now(), start + 6000, 'moving on as the consumer does');
  t.equal(copy.now(), start + 6000, 'the copy with it, once this thread has read the clock');
});

t.test('capture forgets the newest books of markets long over: memory stays flat over weeks', async (t) => {
  const dir = testdir(t);
  const from = Date.parse('2026-07-26T05:00:00Z');
  const to = from + 7.2 * HOUR;
  const long = await fill(
    testConfig(dir, { POLYMARKET_COINS: 'btc', WALLET_COINS: 'btc' }),
    duck,
    quiet,
    { hours: 0, speed: 3000, start: from, until: to, pollMs: 10_000 },
    new StandInUpstream(),
  );
  await sealAll(duck, dir);
  const ends = (await duck.rows(
    `SELECT DISTINCT venue || ':' || market_id AS key, epoch_ms(end_time)::DOUBLE AS end_time FROM ${lakeTable(dir, 'markets')}`,
  )) as { key: string; end_time: number }[];
  // Forgotten at the first discovery 6 hours past a market's end (DISCOVER_MS apart, and polls paced by capture).
  const cutoff = long.endedAt - 6 * HOUR - 15 * 60_000;
  const over = ends.filter((m) => m.end_time < cutoff);
  t.ok(over.length > 10, `${over.length} markets over more than 6 hours before the end`);
  t.same(
    over.filter((m) => long.capture.latest.has(m.key)).map((m) => m.key),
    [],
    'none of their books kept',
  );
  const recent = ends.filter((m) => m.end_time <= long.endedAt && m.end_time > long.endedAt - HOUR);
  t.ok(recent.filter((m) => long.capture.latest.has(m.key)).length > 0, "the last hour's are kept");
});

t.test('a book is the newest readers and the feed see only once its rows are on disk', async (t) => {
  const d = testdir(t);
  const clock = createClock(START + 10 * 60_000, 1);
  const standin = new StandInUpstream();
  const polled = await standin.start(clock, testConfig(d), 2000);
  t.teardown(() => standin.stop());
  const cfg = { ...polled, capture: { ...polled.capture, stream: { ...polled.capture.stream, venues: [] } } };
  const adapters = createAdapters(cfg, clock);
  const capture = new Capture(cfg, clock, duck, adapters, quiet, null);
  for (const adapter of adapters) await capture.cycle(adapter, clock.now());
  t.ok(capture.stats.books > 0, `a cycle captured ${capture.stats.books} books`);
  const onDisk = async () => {
    const keys = new Set<string>();
    for (const part of (await listSpool(lakePaths(d).spool)).filter((p) => p.partition.dataset === 'books'))
      for (const line of (await fs.readFile(part.file, 'utf8')).split('\n').filter(Boolean)) {
        const r = JSON.parse(line) as { market_id: string; ts: number };
        keys.add(`${r.market_id}@${r.ts}`);
      }
    return keys;
  };
  t.same([...capture.latest.keys()], [], 'before the flush that writes their rows, no newest book (a kill -9 now would take them back)');
  await capture.flush();
  const written = await onDisk();
  const newest = [...capture.latest].map(([key, book]) => `${key.slice(key.indexOf(':') + 1)}@${book.ts}`);
  t.ok(newest.length > 0, `${newest.length} newest books once flushed`);
  t.same(
    newest.filter((k) => !written.has(k)),
    [],
    'each of them a row on disk',
  );
  await capture.stop();
});
