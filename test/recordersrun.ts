// The harness of the two-recorder streaming runs (recorders-stream.solo.ts, faults off;
// recorders-faults.solo.ts, the stand-in's faults on; both in make test's solo slot): two recorders streaming both venues from the
// stand-in, restarted one at a time for a deploy, then each killed with kill -9 for a minute in turn,
// four times, over ten simulated minutes, publishing to a real S3 server (Ceph's RADOS Gateway): the
// record merged in the bucket holds every change of the venues' truth outside the stand-in's own
// faults, with no book twice and none differing from the venue's, and no downtime gap, since one
// recorder was always up; both down at once leave exactly that span as a gap, and a push altered for
// one recorder is kept out as a disagreement. Each kill waits
// for the other recorder to be recording (its heartbeat counting rows), so the scenario follows
// what capture did, not the machine's pace. A replica from the bucket with both feeds serves the
// open hour's markets through the kills; another, after the merge, serves exactly the record.
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Test } from 'tap';
import { Merger } from '../src/bucket/merger.js';
import { dataKey, manifestKey } from '../src/bucket/layout.js';
import { S3 } from '../src/bucket/s3.js';
import type { Heartbeat } from '../src/capture/heartbeat.js';
import type { Venue, Window } from '../src/config.js';
import type { Duck } from '../src/lake/duckdb.js';
import { lakePaths, partitionDir, partitionOf } from '../src/lake/layout.js';
import type { PartitionManifest } from '../src/lake/manifest.js';
import { KeyStore } from '../src/edge/keys.js';
import type { StreamFaults } from '../src/standin/streamserver.js';
import { HOUR } from '../src/time.js';
import {
  type ApiProcess,
  captureEnv,
  captureProcesses,
  exited,
  lakeTable,
  processRig,
  quiet,
  sleep,
  startApiProcess,
  testConfig,
} from './helpers.js';
import { freePort, startRgw } from './rgw.js';
import { type Gap, type Known, type Recorded, auditStream, readStreamLake, subscriptions } from './streamaudit.js';

// Early in hour 12: the record runs from it to the end of the hour the last turn ends in (a turn
// takes 3-4 simulated minutes on an idle machine, more on a starved one), so a slow machine records
// more hours, never fewer changes.
const START = Date.parse('2026-07-26T12:18:30Z');
const HOUR12 = Date.parse('2026-07-26T12:00:00Z');
const SPEED = 20;
const DOWN_MS = 60_000;
/** A deploy's restart: stopped cleanly, the new version started. */
const DEPLOY_MS = 10_000;
const BOTH_DOWN_MS = 30_000;
const RECORDERS = ['rec-a', 'rec-b'] as const;
const VENUES: Venue[] = ['polymarket', 'wallet-prediction'];
const FEED_SECRET = 'recorders-run-feed-secret';

export interface KillRunOptions {
  /** The bucket the run's recorders publish to. */
  bucket: string;
  /**
   * The stand-in's own faults while the recorders run (each venue's stream), set once both record:
   * a change they cause to be lost for one recorder is still the other's to keep.
   */
  faults?: { polymarket: Partial<StreamFaults>; wallet: Partial<StreamFaults> };
}

/**
 * Two recorders, each killed with kill -9 for a minute in turn, four times; then the record merged
 * in the bucket, from hour 12 to the end of the hour the last turn ended in, is audited against
 * the stand-in's truth.
 */
export async function killEachInTurn(t: Test, options: KillRunOptions): Promise<void> {
  const rgw = await startRgw(t);
  const { dir, clock, standin, url, duck, clockEnv } = await processRig(t, START, SPEED);
  // Markets sealed half a minute after their hour, as books are, so the record's catalogue is in it.
  const bucketEnv = {
    ...rgw.env,
    S3_BUCKET: options.bucket,
    S3_PREFIX: 'archive/',
    PUBLISH_MS: '200',
    MERGE_MS: '1000',
    // One group at a time: two captures' merges, a gateway and stress share two cores (at 4, the run
    // outlasted the file's bound beside stress-ng).
    MERGE_CONCURRENCY: '1',
    MARKETS_SEAL_GRACE_MS: '30000',
  };
  const s3 = new S3(testConfig(dir, bucketEnv).bucket!);
  t.teardown(() => s3.close());
  await s3.ensureBucket();

  const lakeOf = (r: string) => path.join(dir, r);
  // Each recorder's feed on a port of its own, the same after each restart, as on a host.
  const feedPorts = Object.fromEntries(await Promise.all(RECORDERS.map(async (r) => [r, await freePort()])));
  const start = Object.fromEntries(
    RECORDERS.map((r) => [
      r,
      captureProcesses(
        t,
        captureEnv(lakeOf(r), url, clockEnv, {
          LOG_LEVEL: 'warn',
          CAPTURE_STREAM: VENUES.join(','),
          CAPTURE_VENUES: VENUES.join(','),
          POLYMARKET_COINS: 'btc',
          WALLET_COINS: 'btc',
          RECORDER_ID: r,
          // A second of real time (20x) before a quiet stream counts as stalled: two captures, a gateway
          // and their merges share two cores here.
          STREAM_STALL_MS: '20000',
          CAPTURE_FEED_PORT: String(feedPorts[r]),
          CAPTURE_FEED_SECRET: FEED_SECRET,
          ...bucketEnv,
        }),
      ),
    ]),
  ) as Record<(typeof RECORDERS)[number], ReturnType<typeof captureProcesses>>;

  async function heartbeat(r: string): Promise<Heartbeat | null> {
    return JSON.parse(await fs.readFile(lakePaths(lakeOf(r)).heartbeat, 'utf8').catch(() => 'null')) as Heartbeat | null;
  }

  /** Until `other` holds every market `victim` holds (a book of each, as their heartbeats say). */
  async function holdsAll(other: string, victim: string): Promise<void> {
    for (const began = Date.now(); Date.now() - began < 180_000; await sleep(100)) {
      const [o, v] = [await heartbeat(other), await heartbeat(victim)];
      const held = new Set((o?.open ?? []).filter((m) => m.newest !== null && m.newest !== undefined).map((m) => m.market_id));
      if (o && v && v.open.every((m) => m.newest === null || m.newest === undefined || held.has(m.market_id))) return;
    }
    throw new Error(`${other} did not hold ${victim}'s markets within 180 s`);
  }

  /** Until `r`'s process started after `since` has acknowledged rows (it records again). */
  async function recording(r: string, since: string | null): Promise<void> {
    for (const began = Date.now(); Date.now() - began < 180_000; await sleep(100)) {
      const beat = await heartbeat(r);
      if (beat && beat.segment !== since && beat.acknowledged > 0) return;
    }
    throw new Error(`${r} did not record within 180 s`);
  }

  /** Both recorders killed together for BOTH_DOWN_MS, then started again: the markets both held, and the span both were down. */
  async function downTogether(): Promise<BothDown> {
    const beats = await Promise.all(RECORDERS.map(heartbeat));
    const segments = beats.map((b) => b!.segment);
    for (const r of RECORDERS) running[r].kill('SIGKILL');
    for (const r of RECORDERS) await exited(running[r]);
    const from = clock.now();
    while (clock.now() < from + BOTH_DOWN_MS) await sleep(50);
    const to = clock.now();
    for (const r of RECORDERS) running[r] = start[r]();
    for (const [i, r] of RECORDERS.entries()) await recording(r, segments[i]);
    // Held: a book of it on disk at the last heartbeat before the kill; still running when both are back.
    const held = beats.map((b) => new Set(b!.open.filter((m) => m.newest != null && m.end_time > to).map((m) => m.market_id)));
    return { from, to, markets: new Set([...held[0]].filter((id) => held[1].has(id))) };
  }

  const running = { 'rec-a': start['rec-a'](), 'rec-b': start['rec-b']() };
  for (const r of RECORDERS) await recording(r, null);
  const clockVars = { CLOCK_START: String(clockEnv.start), CLOCK_SPEED: String(clockEnv.speed), CLOCK_ANCHOR: String(clockEnv.anchor) };
  // A replica from the bucket with both recorders' feeds, through the kills: what users read live.
  const live = await LiveReplica.start(t, path.join(dir, 'live'), {
    ...bucketEnv,
    ...clockVars,
    CAPTURE_FEED_URL: RECORDERS.map((r) => `http://127.0.0.1:${feedPorts[r]}`).join(','),
    CAPTURE_FEED_SECRET: FEED_SECRET,
  });
  // A glitch of the venue one recorder sees: a wallet push sent altered to one connection, the true book
  // to the other, while both hold the same markets (checked in the record below).
  await holdsAll('rec-a', 'rec-b');
  await holdsAll('rec-b', 'rec-a');
  // Of a wallet market both hold with two minutes to run: its recorders keep its books a while yet.
  // Waited for: a market listed a moment ago is held by one recorder before the other.
  let target: Heartbeat['open'][number] | undefined;
  for (const began = Date.now(); !target; await sleep(100)) {
    const beats = await Promise.all(RECORDERS.map(heartbeat));
    target = beats[0]?.open.find(
      (m) =>
        m.venue === 'wallet-prediction' &&
        m.newest != null &&
        m.end_time - clock.now() >= 120_000 &&
        (beats[1]?.open ?? []).some((o) => o.market_id === m.market_id && o.newest != null),
    );
    if (!target && Date.now() - began > 180_000)
      throw new Error(`no wallet market both recorders hold with two minutes to run: ${JSON.stringify(beats.map((b) => b?.open))}`);
  }
  const targetMarket = standin.sim.byCode('wallet-prediction', Number(target.market_id) - 50_000_000)!;
  Object.assign(standin.walletStream.faults, { tamper: 1, tamperTokens: targetMarket.tokenIds });
  for (const began = Date.now(); standin.walletStream.stats.tampered < 1; await sleep(50))
    if (Date.now() - began > 180_000) throw new Error('the stand-in sent no altered push within 180 s');
  // Until both have the push's books on disk: a kill loses what was not flushed yet (inside its gap).
  const [key] = standin.walletStream.tamperedKeys;
  const at = Number(key.slice(key.lastIndexOf('@') + 1));
  for (const r of RECORDERS)
    for (
      const began = Date.now();
      ((await heartbeat(r))?.open.find((m) => m.market_id === target.market_id)?.newest ?? -Infinity) < at;
      await sleep(100)
    )
      if (Date.now() - began > 180_000) throw new Error(`${r} did not flush market ${target.market_id}'s books past ${at} within 180 s`);
  if (options.faults) {
    Object.assign(standin.stream.faults, options.faults.polymarket);
    Object.assign(standin.walletStream.faults, options.faults.wallet);
  }
  // Both at once for 30 s: that span is a gap of the record, in each recorder's name (checked below).
  const together = await downTogether();
  t.ok(together.markets.size > 0, `${together.markets.size} markets both recorders held when both went down`);
  // A deploy first (each stopped cleanly and started again, one at a time), then the kills in turn.
  const turns = [
    ...RECORDERS.map((victim) => ({ victim, signal: 'SIGTERM' as const, downMs: DEPLOY_MS })),
    ...[0, 1, 2, 3].map((i) => ({ victim: RECORDERS[i % 2], signal: 'SIGKILL' as const, downMs: DOWN_MS })),
  ];
  const own: Record<string, string[]> = { 'rec-a': [], 'rec-b': [] };
  let ended = 0;
  for (const [i, { victim, signal, downMs }] of turns.entries()) {
    const other = RECORDERS.find((r) => r !== victim)!;
    // The other must hold every market the victim holds: recording, and past its restart's first minute.
    await recording(other, null);
    await holdsAll(other, victim);
    const segment = (await heartbeat(victim))!.segment;
    running[victim].kill(signal);
    const code = await exited(running[victim]);
    if (signal === 'SIGTERM') t.equal(code, 0, `${victim} stops cleanly for the deploy`);
    const downAt = clock.now();
    // Down for its time, and until the replica has served an open market's newest book moving on.
    const advanced = live.advances(s3);
    while (clock.now() < downAt + downMs) await sleep(50);
    await advanced;
    running[victim] = start[victim]();
    await recording(victim, segment);
    own[victim].push(signal);
    ended = clock.now();
    t.comment(`${victim} (${signal}) down ${new Date(downAt).toISOString()} to ${new Date(ended).toISOString()}`);
    if (i === turns.length - 1) break;
    // A while recording before the other goes: its subscriptions' snapshots in.
    const back = clock.now();
    while (clock.now() < back + 30_000) await sleep(50);
  }
  // The record: hour 12 through the hour the last turn ended in.
  const until = Math.ceil(ended / HOUR) * HOUR;
  const hours = Array.from({ length: (until - HOUR12) / HOUR }, (_, i) => HOUR12 + i * HOUR);
  t.comment(`the record: ${new Date(HOUR12).toISOString()} to ${new Date(until).toISOString()}`);
  t.same(
    own,
    { 'rec-a': ['SIGTERM', 'SIGKILL', 'SIGKILL'], 'rec-b': ['SIGTERM', 'SIGKILL', 'SIGKILL'] },
    'each recorder was restarted for the deploy, then killed twice',
  );
  await live.stop();
  // Stopped cleanly once the record's last hour is due (the clock past it and its grace): each stop
  // seals what is due and publishes it with the heartbeat that vouches for it. Waiting for a running
  // capture to seal instead measured the machine: beside stress-ng an hour's seal pass took 4 min.
  const due = until + Math.max(Number(bucketEnv.MARKETS_SEAL_GRACE_MS), 30_000);
  while (clock.now() < due) await sleep(100);
  for (const r of RECORDERS) running[r].kill('SIGTERM');
  for (const r of RECORDERS) t.equal(await exited(running[r]), 0, `${r} stops cleanly`);
  for (const r of RECORDERS) {
    const sealed = (await heartbeat(r))?.sealed_through ?? 0;
    t.ok(sealed >= until, `${r}'s last heartbeat vouches for the record's hours (sealed through ${new Date(sealed).toISOString()})`);
  }
  // The record's hours alone: on a starved machine the clock (20x) has run past them by now.
  const report = await new Merger(s3, path.join(dir, 'merge'), duck, quiet, { hours: (hour) => hour >= HOUR12 && hour < until }).pass();
  t.comment(`last merge pass: ${JSON.stringify(report)}`);

  // The record on local disk, laid out as a lake, read as the stream audits read a capture's.
  const record = path.join(dir, 'record');
  for (const hour of hours)
    for (const venue of VENUES)
      for (const dataset of ['books', 'gaps', 'markets'] as const)
        for (const window of ['5m', '15m'] as const) {
          const p = partitionOf(dataset, venue, 'btc', window, hour);
          const body = await s3.get(manifestKey(s3.config.prefix, p));
          if (!body) continue;
          const m = JSON.parse(body.toString('utf8')) as PartitionManifest;
          t.ok(m.merged, `${m.partition} is a merged record`);
          for (const f of m.files)
            await s3.download(dataKey(s3.config.prefix, `${m.partition}/${f.name}`), path.join(record, 'lake', partitionDir(p), f.name), {
              size: f.bytes,
              sha256: f.sha256,
            });
        }
  const lake = await readStreamLake(duck, record);
  const keys = lake.rows.map((r) => `${r.market_id}|${r.token_id}|${r.ts}`);
  t.ok(keys.length > 1000, `${keys.length} books in the record`);
  t.equal(new Set(keys).size, keys.length, 'no (market, outcome, ts) twice');
  // Within the sealed hour (a gap reaching past it waits for the other recorder's next hour to be
  // sealed), from the record's first book of the market on (before it, neither recorder held the
  // market yet: time the certificate counts as unrecorded, whatever the gap says).
  const first = new Map<string, number>();
  for (const r of lake.rows) first.set(r.market_id, Math.min(first.get(r.market_id) ?? Infinity, r.ts));
  const down = lake.gaps.filter(
    (g) => g.reason === 'process_down' && Math.max(g.f, first.get(g.market_id) ?? Infinity) < Math.min(g.t, until),
  );
  // A recorder up may still lack a span (its stream stalled on a starved machine): a downtime gap of the
  // record is right exactly where the other recorder had a gap of its own too.
  const ownGaps = new Map<string, { market_id: string; f: number; t: number }[]>();
  for (const r of RECORDERS)
    ownGaps.set(
      r,
      (await duck.rows(
        `SELECT market_id, epoch_ms(from_ts)::DOUBLE AS f, epoch_ms(to_ts)::DOUBLE AS t FROM ${lakeTable(lakeOf(r), 'gaps')} WHERE dataset = 'books'`,
      )) as { market_id: string; f: number; t: number }[],
    );
  // Nor before a recorder's own first book of the market: a market listed just before a kill is
  // held by the victim alone until the other learns of it.
  const ownFirst = new Map<string, Map<string, number>>();
  for (const r of RECORDERS)
    ownFirst.set(
      r,
      new Map(
        (
          (await duck.rows(
            `SELECT market_id, epoch_ms(min(ts))::DOUBLE AS first FROM ${lakeTable(lakeOf(r), 'books')} GROUP BY market_id`,
          )) as { market_id: string; first: number }[]
        ).map((x) => [x.market_id, x.first]),
      ),
    );
  // What of a span recorder `r` held: outside the union of its own gaps of the market (one gap may
  // end where the next begins, a stream resync after a stall say) and after its first book.
  const heldBy = (r: string, g: { market_id: string; f: number; t: number }): [number, number][] => {
    let left: [number, number][] = [[Math.max(g.f, ownFirst.get(r)!.get(g.market_id) ?? Infinity), g.t]];
    for (const o of ownGaps.get(r)!.filter((x) => x.market_id === g.market_id))
      left = left.flatMap(([a, b]): [number, number][] => [
        ...(o.f > a ? [[a, Math.min(b, o.f)] as [number, number]] : []),
        ...(o.t < b ? [[Math.max(a, o.t), b] as [number, number]] : []),
      ]);
    return left.filter(([a, b]) => b > a);
  };
  const unjust = down
    // Judged within the sealed hour: past it, a recorder vouches for nothing until its next hour is
    // sealed (its horizon), and the gap there stays, pending, until then.
    .map((g) => ({ ...g, held: Object.fromEntries(RECORDERS.map((r) => [r, heldBy(r, { ...g, t: Math.min(g.t, until) })])) }))
    .filter((g) => Object.values(g.held).some((spans) => spans.length > 0));
  t.same(
    unjust,
    [],
    `no downtime gap in the record where one recorder held the market (${down.length} where both lacked it, ${down.reduce((s, g) => s + (g.t - g.f), 0) / 1000} s)`,
    // What a failure needs to be read: each recorder's own gaps of the market around it, and its first book.
    unjust.length
      ? {
          around: RECORDERS.map((r) => ({
            r,
            first: ownFirst.get(r)!.get(unjust[0].market_id),
            gaps: ownGaps
              .get(r)!
              .filter((o) => o.market_id === unjust[0].market_id && o.t >= unjust[0].f - 60_000 && o.f <= unjust[0].t + 60_000),
          })),
        }
      : {},
  );
  for (const r of RECORDERS) {
    const gaps = await duck.rows(`SELECT count(*)::INTEGER AS n FROM ${lakeTable(lakeOf(r), 'gaps')} WHERE reason = 'process_down'`);
    t.ok(Number(gaps[0].n) > 0, `${r}'s own record has ${gaps[0].n} downtime gaps`);
  }
  const [{ both }] = await duck.rows(
    `SELECT count(*) FILTER (WHERE len(recorders) = 2)::INTEGER AS both FROM ${lakeTable(record, 'books')}`,
  );
  t.ok(Number(both) > 0, `${both} books kept by both recorders, stored once`);
  // The span both were down: in the record, a process_down gap of each market both held, in each recorder's name.
  const catalogued = new Set(lake.markets.map((m) => m.market_id));
  const spanned = (await duck.rows(
    `SELECT market_id, recorders FROM ${lakeTable(record, 'gaps')}
     WHERE dataset = 'books' AND reason = 'process_down' AND epoch_ms(from_ts) <= $from AND epoch_ms(to_ts) >= $to`,
    { from: together.from, to: together.to },
  )) as { market_id: string; recorders: string[] }[];
  const namedBy = new Map<string, Set<string>>();
  for (const g of spanned) for (const r of g.recorders) namedBy.set(g.market_id, (namedBy.get(g.market_id) ?? new Set()).add(r));
  const unnamed = [...together.markets]
    .filter((id) => catalogued.has(id))
    .filter((id) => RECORDERS.some((r) => !namedBy.get(id)?.has(r)))
    .map((id) => ({ id, named: [...(namedBy.get(id) ?? [])] }));
  t.same(unnamed, [], 'both down: the span is a process_down gap of every market both held, in each recorder’s name');
  await disagreementReported(t, {
    duck,
    record,
    lakes: RECORDERS.map(lakeOf),
    rows: lake.rows,
    altered: standin.walletStream.tamperedKeys,
  });
  for (const venue of VENUES) {
    const { astray } = auditStream(t, {
      rows: lake.rows.filter((r) => isVenue(venue, r.market_id)),
      gaps: lake.gaps.filter((g) => isVenue(venue, g.market_id)),
      markets: lake.markets.filter((m) => isVenue(venue, m.market_id)),
      sim: standin.sim,
      undelivered: venue === 'polymarket' ? standin.stream.undelivered : standin.walletStream.undelivered,
      subscribedAt: subscriptions(standin, venue),
      venue,
      stallMs: 20_000,
      slackMs: 1000 * SPEED,
    });
    if (astray.length)
      t.fail(`the first wrong book outside gaps as each recorder kept it: ${await asKept(duck, RECORDERS.map(lakeOf), astray[0])}`);
  }
  await replicaServesTheRecord(t, {
    dir: path.join(dir, 'replica'),
    env: { ...bucketEnv, ...clockVars },
    record: lake,
    both: together,
    until,
  });
  live.servedTheRecord(t, lake.rows, until);
  if (options.faults) {
    const { stats } = standin.stream;
    const wallet = standin.walletStream.stats;
    t.ok(
      stats.dropped + wallet.dropped > 0 && wallet.reordered + wallet.duplicated > 0,
      `the stand-in's faults happened: Polymarket ${stats.dropped} messages dropped; the wallet venue ${wallet.dropped} dropped, ${wallet.reordered} reordered, ${wallet.duplicated} duplicated`,
    );
  }
}

/**
 * What users read of the run: an API process serving from the bucket alone (`LAKE_SOURCE=bucket`)
 * gives, for every market window of the record, exactly the books of the record audited above (every
 * snapshot, each book's ladders) and a certificate whose gaps are the record's and which names both
 * recorders.
 */
async function replicaServesTheRecord(
  t: Test,
  {
    dir,
    env,
    record,
    both,
    until,
  }: {
    dir: string;
    env: Record<string, string>;
    record: { rows: Recorded[]; gaps: Gap[]; markets: Known[] };
    both: BothDown;
    /** The end of the record's last hour. */
    until: number;
  },
): Promise<void> {
  await fs.mkdir(dir, { recursive: true });
  const { key } = await KeyStore.open(testConfig(dir), quiet).issue('paid', 'recorders run');
  const replica = await startApiProcess(t, dir, {
    ...env,
    LAKE_SOURCE: 'bucket',
    API_WORKERS: '1',
    RATE_PAID_PER_SECOND: '100000',
  });
  type Answer<T> = { status: number; body: { data: T; pagination?: { next_cursor: string | null } } };
  const get = async <T>(route: string): Promise<Answer<T>> => {
    const res = await fetch(`${replica.url}${route}`, { headers: { authorization: `Bearer ${key}` } }).catch((err: Error) => {
      // What the replica said of it: a failure needs its side to be read.
      const said = replica.lines.slice(-6).map((l) => [l.time, l.msg, l.route, l.status, l.ms]);
      throw new Error(
        `${route}: ${err.message} (${String(err.cause)}) at ${Date.now()}; replica exit ${replica.child.exitCode}, its last lines ${JSON.stringify(said)} ${replica.stderr.join('').slice(-2000)}`,
      );
    });
    return { status: res.status, body: (await res.json()) as Answer<T>['body'] };
  };
  const iso = (ms: number) => new Date(ms).toISOString();
  const bookText = (token: string, ts: number, ex: number, b: Omit<ServedBook, 'token_id' | 'exchange_time'>) =>
    JSON.stringify([token, ts, ex, b.bid_prices, b.bid_sizes, b.ask_prices, b.ask_sizes]);
  // The markets of the record's catalogue: the hour's books also hold the next hour's markets' books
  // before their open, whose catalogue is that hour's (sealed after it).
  const markets = record.markets.map((m) => m.market_id);
  let windows = 0;
  let books = 0;
  let bothChecked = 0;
  const bothWrong: Record<string, unknown>[] = [];
  const wrong: Record<string, unknown>[] = [];
  for (const id of markets) {
    const venue: Venue = isVenue('polymarket', id) ? 'polymarket' : 'wallet-prediction';
    const base = venue === 'polymarket' ? `/v3/btc/markets/${id}` : `/v3/wallet-prediction/${id}`;
    const market = await get<{ start_time: string; end_time: string }>(base);
    t.equal(market.status, 200, `the replica knows market ${id}`);
    if (market.status !== 200) continue;
    const [start, end] = [Date.parse(market.body.data.start_time), Date.parse(market.body.data.end_time)];
    // Windows wholly within the merged hours (the venue lists the next hour's ahead).
    if (start < HOUR12 || end > until) continue;
    windows++;
    const served: string[] = [];
    const range = `start_time=${iso(start)}&end_time=${iso(end)}&limit=1000${venue === 'polymarket' ? '&include_orderbook=true' : ''}`;
    let cursor: string | null = null;
    do {
      const route = `${base}/snapshots?${range}${cursor ? `&cursor=${cursor}` : ''}`;
      const page: Answer<{ timestamp: string; books: ServedBook[] }[]> = await get(route);
      if (page.status !== 200) throw new Error(`${route}: HTTP ${page.status} ${JSON.stringify(page.body)}`);
      for (const s of page.body.data)
        for (const b of s.books) served.push(bookText(b.token_id, Date.parse(s.timestamp), Date.parse(b.exchange_time), b));
      cursor = page.body.pagination?.next_cursor ?? null;
    } while (cursor);
    const kept = record.rows
      .filter((r) => r.market_id === id && r.ts >= start && r.ts < end)
      .map((r) => bookText(r.token_id, r.ts, r.ex, r));
    books += kept.length;
    const cert = await get<{
      state: string;
      books: { recorded: number };
      gaps: { from: string; to: string; reason: string; provisional?: boolean }[];
      recorders: Record<string, { gaps: { from: string; to: string; reason: string }[] }> | null;
    }>(`${base}/certificate`);
    // Both recorders down together: the span is a gap of the record, and of each recorder, as process_down
    // (as the certificate clips it to the window: a market held before its open was down from its start).
    if (both.markets.has(id)) {
      bothChecked++;
      const spans = (s: { from: string; to: string; reason: string }) =>
        s.reason === 'process_down' && Date.parse(s.from) <= Math.max(both.from, start) && Date.parse(s.to) >= Math.min(both.to, end);
      const named = RECORDERS.filter((r) => (cert.body.data.recorders?.[r]?.gaps ?? []).some(spans));
      if (!(cert.body.data.gaps ?? []).some(spans) || named.length !== RECORDERS.length)
        bothWrong.push({ id, both: [iso(both.from), iso(both.to)], gaps: cert.body.data.gaps, recorders: cert.body.data.recorders });
    }
    const gaps = (cert.body.data.gaps ?? []).filter((g) => !g.provisional).map((g) => [Date.parse(g.from), Date.parse(g.to), g.reason]);
    const recordGaps = record.gaps
      .filter((g) => g.market_id === id && g.f < end && g.t > start)
      .map((g) => [Math.max(g.f, start), Math.min(g.t, end), g.reason]);
    const sort = (a: unknown[][]) => a.map((x) => JSON.stringify(x)).sort();
    const same = (a: string[], b: string[]) => a.length === b.length && a.every((x, i) => x === b[i]);
    const [servedSet, keptSet] = [new Set(served), new Set(kept)];
    const missing = kept.filter((x) => !servedSet.has(x));
    const extra = served.filter((x) => !keptSet.has(x));
    if (
      missing.length ||
      extra.length ||
      served.length !== kept.length ||
      cert.status !== 200 ||
      cert.body.data.state === 'pending' ||
      cert.body.data.books.recorded !== kept.length ||
      !same(sort(gaps), sort(recordGaps)) ||
      Object.keys(cert.body.data.recorders ?? {})
        .sort()
        .join() !== RECORDERS.join()
    )
      wrong.push({
        id,
        window: [iso(start), iso(end)],
        served: served.length,
        kept: kept.length,
        missing: missing.slice(0, 2),
        extra: extra.slice(0, 2),
        certificate: {
          status: cert.status,
          state: cert.body.data.state,
          books: cert.body.data.books,
          recorders: Object.keys(cert.body.data.recorders ?? {}),
        },
        gaps: { served: sort(gaps), record: sort(recordGaps) },
      });
  }
  t.ok(windows >= 4, `${windows} market windows of the record read from the replica`);
  t.ok(bothChecked > 0, `${bothChecked} windows of the record held by both recorders when both went down`);
  t.same(bothWrong, [], `both down ${iso(both.from)} to ${iso(both.to)}: a gap of each such window, and of each recorder, process_down`);
  t.same(
    wrong,
    [],
    `a replica from the bucket serves the record: ${books} books of ${windows} windows, each window's certificate with the record's gaps and both recorders`,
  );
}

/**
 * The altered push: where the two recorders kept different books of a token at its instant, the
 * record keeps neither and a `recorders_disagree` gap naming both spans the instant; or, where one
 * of them doubted its own book (a books gap of its own from it on: its REST check found the copy
 * wrong, seen once in four faults runs), the other's book stands, once (the audit has checked every
 * book of the record is the venue's). Where they kept the same (an outcome the alteration did not
 * touch), the record keeps it once. Never the altered book alone.
 */
async function disagreementReported(
  t: Test,
  { duck, record, lakes, rows, altered }: { duck: Duck; record: string; lakes: string[]; rows: Recorded[]; altered: ReadonlySet<string> },
): Promise<void> {
  const disagreeing = (await duck.rows(
    `SELECT market_id, epoch_ms(from_ts)::DOUBLE AS f, epoch_ms(to_ts)::DOUBLE AS t, recorders FROM ${lakeTable(record, 'gaps')}
     WHERE dataset = 'books' AND reason = 'recorders_disagree'`,
  )) as { market_id: string; f: number; t: number; recorders: string[] }[];
  const ladders = async (dir: string, token: string, at: number) =>
    (await duck.rows(
      `SELECT market_id, to_json([bid_prices, bid_sizes, ask_prices, ask_sizes])::VARCHAR AS ladders FROM ${lakeTable(dir, 'books')}
       WHERE token_id = $token AND epoch_ms(exchange_ts) = $at`,
      { token, at },
    )) as { market_id: string; ladders: string }[];
  let differing = 0;
  const doubts: string[] = [];
  const wrong: Record<string, unknown>[] = [];
  for (const key of altered) {
    const [token, at] = [key.slice(0, key.lastIndexOf('@')), Number(key.slice(key.lastIndexOf('@') + 1))];
    const kept = await Promise.all(lakes.map((dir) => ladders(dir, token, at)));
    if (kept.some((k) => k.length !== 1)) {
      wrong.push({ key, kept: kept.map((k) => k.length), why: 'each recorder keeps one book of the altered instant' });
      continue;
    }
    const market = kept[0][0].market_id;
    const inRecord = rows.filter((r) => r.token_id === token && r.ex === at).length;
    if (kept[0][0].ladders === kept[1][0].ladders) {
      if (inRecord !== 1) wrong.push({ key, inRecord, why: 'the same book from both, once in the record' });
      continue;
    }
    differing++;
    const doubting = await Promise.all(
      lakes.map(
        async (dir) =>
          (await duck.rows(
            `SELECT reason FROM ${lakeTable(dir, 'gaps')}
             WHERE dataset = 'books' AND market_id = $market AND epoch_ms(from_ts) <= $at AND epoch_ms(to_ts) > $at`,
            { market, at },
          )) as { reason: string }[],
      ),
    );
    const doubted = doubting.findIndex((d) => d.length > 0);
    if (doubted >= 0) doubts.push(`${path.basename(lakes[doubted])}: ${doubting[doubted].map((d) => d.reason).join(', ')}`);
    const gap = disagreeing.find((g) => g.market_id === market && g.f < at && at < g.t);
    const disagreement = inRecord === 0 && gap !== undefined && gap.recorders.length === lakes.length;
    const otherStands =
      doubted >= 0 &&
      doubting[1 - doubted].length === 0 &&
      inRecord === 1 &&
      (await ladders(record, token, at)).map((k) => k.ladders).join() === kept[1 - doubted][0].ladders;
    if (!disagreement && !otherStands)
      wrong.push({
        key,
        inRecord,
        gap,
        doubting,
        why: 'neither book in the record and a recorders_disagree gap naming both over it; or, one recorder doubting its own, the other’s book once',
      });
  }
  t.ok(
    differing > 0,
    `${differing} books of the altered push differ between the recorders${doubts.length ? `, ${doubts.length} doubted by their recorder (${doubts[0]})` : ''}`,
  );
  t.same(wrong, [], "the recorders' disagreement is kept out of the record and reported as a gap, or the doubted book left out");
}

/**
 * What a failure of the record's audit needs to be read, on one line (a CI summary keeps that):
 * each recorder's own rows of the book's token around its time, with their labels, and its own
 * gaps of the market around it.
 */
async function asKept(duck: Duck, lakes: string[], row: Recorded): Promise<string> {
  const around = { token: row.token_id, market: row.market_id, from: row.ts - 5000, to: row.ts + 5000 };
  const seen = await Promise.all(
    lakes.map(async (dir) => {
      const rows = await duck.rows(
        `SELECT epoch_ms(ts)::DOUBLE AS ts, verified_by AS by, hash_check AS h FROM ${lakeTable(dir, 'books')}
         WHERE token_id = $token AND epoch_ms(ts) BETWEEN $from AND $to ORDER BY abs(epoch_ms(ts) - $at) LIMIT 16`,
        { token: around.token, from: around.from, to: around.to, at: row.ts },
      );
      rows.sort((a, b) => Number(a.ts) - Number(b.ts));
      const gaps = await duck.rows(
        `SELECT epoch_ms(from_ts)::DOUBLE AS f, epoch_ms(to_ts)::DOUBLE AS t, reason FROM ${lakeTable(dir, 'gaps')}
         WHERE dataset = 'books' AND market_id = $market AND epoch_ms(to_ts) >= $from - 55000 AND epoch_ms(from_ts) <= $to + 55000 ORDER BY f`,
        { market: around.market, from: around.from, to: around.to },
      );
      const same = rows.some((r) => Number(r.ts) === row.ts);
      return `${path.basename(dir)}: ${same ? 'has it' : 'lacks it'}; rows ${rows.map((r) => `${Number(r.ts) - row.ts}:${r.by}/${r.h}`).join(' ')}; gaps ${gaps
        .map((g) => `[${Number(g.f) - row.ts},${Number(g.t) - row.ts}] ${g.reason}`)
        .join(' ')}`;
    }),
  );
  return `${row.market_id}:${row.outcome_index} at ${row.ts} (times relative to it) | ${seen.join(' | ')}`;
}

interface BothDown {
  from: number;
  to: number;
  /** Markets both recorders held when both went down, still running when both were back. */
  markets: Set<string>;
}

interface LatestAnswer {
  data: { market_id: string; timestamp: string; books: ServedBook[] } | null;
  meta: { source?: string; capture_reachable?: boolean };
}

interface ServedBook {
  token_id: string;
  exchange_time: string;
  bid_prices: number[];
  bid_sizes: number[];
  ask_prices: number[];
  ask_sizes: number[];
}

/**
 * An API process from the bucket with the recorders' feeds (`CAPTURE_FEED_URL`) while they are
 * killed in turn: it knows the open hour's markets, whose catalogue the bucket cannot have yet
 * (markets are sealed an hour after their window's hour), from the feeds, and their newest books
 * move on while one recorder is down. Each newest book it served is checked against the record.
 */
class LiveReplica {
  private readonly served: { market_id: string; ts: number; books: ServedBook[] }[] = [];
  private readonly feedOnly = new Set<string>();

  private constructor(
    private readonly process: ApiProcess,
    private readonly key: string,
  ) {}

  static async start(t: Test, dir: string, env: Record<string, string>): Promise<LiveReplica> {
    await fs.mkdir(dir, { recursive: true });
    const { key } = await KeyStore.open(testConfig(dir), quiet).issue('paid', 'live replica');
    return new LiveReplica(
      await startApiProcess(t, dir, { ...env, LAKE_SOURCE: 'bucket', API_WORKERS: '1', RATE_PAID_PER_SECOND: '100000' }),
      key,
    );
  }

  private async get<T>(route: string): Promise<{ status: number; body: T }> {
    const res = await fetch(`${this.process.url}${route}`, { headers: { authorization: `Bearer ${this.key}` } });
    return { status: res.status, body: (await res.json()) as T };
  }

  /**
   * Until a wallet market the replica lists as open has a newer book from capture than when first
   * asked (the recorder still up is the only one whose feed answers). Each market answered is one
   * whose markets partition the bucket holds no sealed record of: the replica knows it from the feeds.
   */
  async advances(s3: S3): Promise<void> {
    const first = new Map<string, number>();
    for (const began = Date.now(); Date.now() - began < 180_000; await sleep(100)) {
      const open = await this.get<{ data: { market_id: string; coin: string; window: Window; start_time: string }[] }>(
        '/v3/wallet-prediction/markets?status=open&limit=50',
      );
      if (open.status !== 200) throw new Error(`open markets: HTTP ${open.status} ${JSON.stringify(open.body)}`);
      for (const m of open.body.data) {
        if (!this.feedOnly.has(m.market_id)) {
          const p = partitionOf('markets', 'wallet-prediction', m.coin, m.window, Date.parse(m.start_time));
          if (await s3.head(manifestKey(s3.config.prefix, p))) continue;
          this.feedOnly.add(m.market_id);
        }
        const latest = await this.get<LatestAnswer>(`/v3/wallet-prediction/${m.market_id}/orderbook/latest`);
        if (latest.status !== 200 || !latest.body.data || latest.body.meta.source !== 'capture') continue;
        const ts = Date.parse(latest.body.data.timestamp);
        this.served.push({ market_id: m.market_id, ts, books: latest.body.data.books });
        if (!first.has(m.market_id)) first.set(m.market_id, ts);
        else if (ts > first.get(m.market_id)!) return;
      }
    }
    throw new Error(`no open market's newest book moved on within 180 s on the replica (asked: ${JSON.stringify([...first])})`);
  }

  async stop(): Promise<void> {
    this.process.child.kill('SIGTERM');
    await exited(this.process.child);
  }

  /** Every newest book served within the record (hour 12 until `until`) is its book in force at its time, outcome by outcome. */
  servedTheRecord(t: Test, rows: Recorded[], until: number): void {
    const inHour = this.served.filter((s) => s.ts >= HOUR12 && s.ts < until);
    const byToken = new Map<string, Recorded[]>();
    for (const r of rows) {
      const list = byToken.get(r.token_id) ?? [];
      list.push(r);
      byToken.set(r.token_id, list);
    }
    for (const list of byToken.values()) list.sort((a, b) => a.ts - b.ts);
    const text = (ex: number, b: Omit<ServedBook, 'token_id' | 'exchange_time'>) =>
      JSON.stringify([ex, b.bid_prices, b.bid_sizes, b.ask_prices, b.ask_sizes]);
    const wrong = inHour.flatMap((s) =>
      s.books.flatMap((b) => {
        const inForce = (byToken.get(b.token_id) ?? []).filter((r) => r.ts <= s.ts).at(-1);
        const want = inForce ? text(inForce.ex, inForce) : null;
        return want === text(Date.parse(b.exchange_time), b)
          ? []
          : [{ market_id: s.market_id, ts: s.ts, token: b.token_id, want, served: text(Date.parse(b.exchange_time), b) }];
      }),
    );
    t.ok(this.feedOnly.size > 0, `${this.feedOnly.size} open markets known to the replica from the feeds alone`);
    t.ok(inHour.length > 0, `${inHour.length} newest books served live within the record`);
    t.same(wrong.slice(0, 3), [], `each newest book served live is the record's book in force at its time (${wrong.length} not)`);
  }
}

/** The stand-in numbers Polymarket's markets from 1,000,000 and the wallet venue's from 50,000,000. */
function isVenue(venue: Venue, marketId: string): boolean {
  const id = Number(marketId);
  return venue === 'polymarket' ? id >= 1_000_000 && id < 50_000_000 : id >= 50_000_000;
}
