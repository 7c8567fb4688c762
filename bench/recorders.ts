// make bench-recorders: what a second recorder costs. Two captures (the real capture code, polling
// the stand-in on a fast clock, as `make run` fills a lake) record the same two simulated hours
// into lakes of their own and publish them to Ceph's RADOS Gateway on this machine under
// `_recorders/<id>/` (B down for ten minutes in the first hour); then the record is merged. Bucket
// objects and bytes per prefix, requests sent, the merge's time per sealed hour (from scratch, and a
// pass with nothing new), and how long after an hour's end its merged record is served.
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { recordersPrefix } from '../src/bucket/layout.js';
import { Merger } from '../src/bucket/merger.js';
import { S3, S3_REQUESTS } from '../src/bucket/s3.js';
import { fill } from '../src/capture/fill.js';
import { loadConfig } from '../src/config.js';
import { Duck } from '../src/lake/duckdb.js';
import { sealingDuck } from '../src/lake/seal.js';
import { StandInUpstream } from '../src/standin/upstream.js';
import { HOUR } from '../src/time.js';
import { writeSection } from './report.js';
import { startRgw } from './tools.js';

const HOURS = Number(process.env.BENCH_RECORDER_HOURS ?? 2);
const START = Date.parse('2026-08-04T10:00:00Z');
const END = START + HOURS * HOUR + 2 * 60_000;
const DOWN = [START + 20 * 60_000, START + 30 * 60_000];
const log = pino({ level: 'warn' });
const root = await fs.mkdtemp(path.join(os.tmpdir(), 'bench-recorders-'));
const rgw = await startRgw();
const rgwEnv = rgw.env;
const snapshot = () => ({ ...S3_REQUESTS });
const since = (before: Record<string, number>) =>
  Object.fromEntries(Object.entries(S3_REQUESTS).map(([m, n]) => [m, n - (before[m] ?? 0)]));

/** The process's resident size from now until `stop`: its peak, and where it began. */
function peakRss() {
  const before = process.memoryUsage.rss();
  let peak = before;
  const timer = setInterval(() => (peak = Math.max(peak, process.memoryUsage.rss())), 20);
  return {
    stop: () => {
      clearInterval(timer);
      return { before, peak: Math.max(peak, process.memoryUsage.rss()) };
    },
  };
}

try {
  const common = { ...rgwEnv, S3_BUCKET: 'bench-record', S3_PREFIX: 'archive/', MARKETS_SEAL_GRACE_MS: '30000', PUBLISH_MS: '2000' };
  const duck = await Duck.open(2);
  // Merges on DuckDB as `make merge` and a recorder's merger have it: one thread, SEAL_MEMORY_LIMIT.
  const mergeDuck = await Duck.open(1, sealingDuck(loadConfig({ ...common, DATA_DIR: root })));
  const main = new S3(loadConfig({ ...common, DATA_DIR: root }).bucket!);
  await main.ensureBucket();
  const published: Record<string, Record<string, number>> = {};
  for (const [recorder, spans] of [
    ['rec-a', [[START, END]]],
    [
      'rec-b',
      [
        [START, DOWN[0]],
        [DOWN[1], END],
      ],
    ],
  ] as const) {
    const config = loadConfig({ ...common, DATA_DIR: path.join(root, recorder), RECORDER_ID: recorder });
    const before = snapshot();
    for (const [from, to] of spans) {
      const run = await fill(config, duck, log, { hours: 0, speed: 400, pollMs: 3000, start: from, until: to }, new StandInUpstream({}));
      await run.capture.publisher!.pass();
    }
    published[recorder] = since(before);
  }
  const bytes = async (prefix: string, skip?: string) => {
    let n = 0;
    let objects = 0;
    for await (const o of main.list(prefix)) {
      if (skip && o.key.startsWith(skip)) continue;
      n += o.size;
      objects++;
    }
    return { n, objects };
  };

  // One group at a time first, then the record removed and merged again with MERGE_CONCURRENCY's default.
  const serialMemory = peakRss();
  const serialBegan = performance.now();
  await new Merger(main, path.join(root, 'merge-serial'), mergeDuck, log, { concurrency: 1 }).pass();
  const serialMs = performance.now() - serialBegan;
  const serialPeak = serialMemory.stop();
  for await (const o of main.list(main.config.prefix)) if (!o.key.startsWith(recordersPrefix(main.config.prefix))) await main.delete(o.key);
  const concurrency = loadConfig({ ...common, DATA_DIR: root }).mergeConcurrency;
  const before = snapshot();
  const mergeMemory = peakRss();
  const began = performance.now();
  const merger = new Merger(main, path.join(root, 'merge'), mergeDuck, log, { concurrency });
  const first = await merger.pass();
  const mergeMs = performance.now() - began;
  const mergePeak = mergeMemory.stop();
  const mergeRequests = since(before);
  const idleBefore = snapshot();
  const idleBegan = performance.now();
  await merger.pass();
  const idleMs = performance.now() - idleBegan;
  const idleRequests = since(idleBefore);
  // A merger process started again: its first pass looks again at every group still pending.
  const restartBefore = snapshot();
  const restartBegan = performance.now();
  const restarted = await new Merger(main, path.join(root, 'merge'), mergeDuck, log, { concurrency }).pass();
  const restartMs = performance.now() - restartBegan;
  const restartRequests = since(restartBefore);

  const a = await bytes(`${recordersPrefix(main.config.prefix)}rec-a/`);
  const b = await bytes(`${recordersPrefix(main.config.prefix)}rec-b/`);
  const record = await bytes(main.config.prefix, recordersPrefix(main.config.prefix));
  const mib = (n: number) => (n / 2 ** 20).toFixed(2);
  const perHour = (r: Record<string, number>) =>
    Object.entries(r)
      .map(([m, n]) => `${m} ${(n / (HOURS + 1 / 30)).toFixed(0)}`)
      .join(', ');
  const cpus = os.cpus();
  const report = `## Two recorders (make bench-recorders)

Machine: ${cpus.length} x ${cpus[0]?.model ?? 'cpu'}, ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}; Ceph RADOS Gateway (memstore OSD) on the same machine.
Two recorders (the real capture code polling the stand-in every 3 simulated s at 400x, the way \`make run\` fills a lake;
streamed capture records more rows an hour) over ${HOURS} simulated hours of both venues' markets (the default coins and windows), B down 10 minutes in the first.

| | objects | MiB |
|---|---|---|
| recorder A's lake (\`_recorders/rec-a/\`) | ${a.objects} | ${mib(a.n)} |
| recorder B's lake (\`_recorders/rec-b/\`) | ${b.objects} | ${mib(b.n)} |
| the merged record (the prefix) | ${record.objects} | ${mib(record.n)} |

- **Bucket bytes**: the record costs ${(record.n / Math.max(a.n, 1)).toFixed(2)}x one recorder's lake; with two recorders the bucket holds ${((a.n + b.n + record.n) / Math.max(record.n, 1)).toFixed(2)}x the record.
- **Requests a recorder sends an hour publishing** (A): ${perHour(published['rec-a'])}. The fill publishes once at its end; a live capture publishes every PUBLISH_MS, and re-puts a partition's manifest at each of its commits.
- **The merge, from scratch** (${first.groups} groups, ${first.partitions} partitions, ${first.files_put} files put, ${first.disagreements} disagreements), ${concurrency} groups at once (MERGE_CONCURRENCY): ${(mergeMs / 1000).toFixed(1)} s, ${(mergeMs / 1000 / HOURS).toFixed(1)} s a sealed hour, requests ${JSON.stringify(mergeRequests)}; one group at a time: ${(serialMs / 1000).toFixed(1)} s, ${(serialMs / 1000 / HOURS).toFixed(1)} s a sealed hour.
- **The merge's memory** (the resident size of the process running it, sampled every 20 ms; capture's process when a recorder merges): ${concurrency} groups at once, peak ${mib(mergePeak.peak)} MiB, ${mib(mergePeak.peak - mergePeak.before)} MiB above the process before the pass; one group at a time, peak ${mib(serialPeak.peak)} MiB, ${mib(serialPeak.peak - serialPeak.before)} MiB above. Its DuckDB is configured as \`make merge\` and a recorder's merger have it: one thread, \`SEAL_MEMORY_LIMIT\` (256MB), spilling beside the lake.
- **A pass with nothing new**: ${idleMs.toFixed(0)} ms, requests ${JSON.stringify(idleRequests)} (the recorders' listing, their heartbeats and commits since the last pass).
- **The first pass of a merger started again**: ${(restartMs / 1000).toFixed(1)} s, requests ${JSON.stringify(restartRequests)}: it looks again at the ${restarted.pending} groups still pending (some recorder's horizon short of them), each a GET of every recorder's manifests of the group and its neighbours. Most of the merge's time is such requests and DuckDB statements over small files: a group is merged again at each commit of a recorder that names it or a neighbour.
- **When a merged hour is served**: a recorder seals an hour SEAL_GRACE_MS (30 s) after its end, publishes within PUBLISH_MS (2 s), and its merger (MERGE_MS, 10 s) merges what the commit names: the hour's record is in the bucket about ${(30 + 2 + 10 + mergeMs / 1000 / HOURS).toFixed(0)} s after its end, its gaps final once every recorder's horizon has passed it (a recorder's next seal).
`;
  await writeSection('## Two recorders', report);
  await mergeDuck.shutdown();
  await duck.shutdown();
  main.close();
} finally {
  rgw.stop();
  await fs.rm(root, { recursive: true, force: true });
}
process.exit(0);
