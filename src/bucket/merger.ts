// Merges what several recorders published (each under `_recorders/<id>/`, bucket/publish.ts) into
// the record at the prefix, which replicas, `/files` and analysts read as they read a single
// capture's. A unit of work is a group, the partitions of one venue, coin, window and hour: its
// gaps need its books (disagreements) and the recorders' books and gaps of the hours either side
// (where a gap or a market's first book may lie). A group is merged again whenever a recorder's
// commit names a partition of it or of a neighbour, and while some recorder's horizon has not
// passed it. Any process may merge: the inputs decide the files (lake/merge.ts), and a manifest is
// replaced only by a conditional PUT over the one read, never by a merge that read less.
import fs from 'node:fs/promises';
import path from 'node:path';
import { type Config, RECORDER_ID_RE } from '../config.js';
import type { Duck } from '../lake/duckdb.js';
import { readJson, shortHash, writeFileAtomic } from '../lake/fsutil.js';
import { type Partition, parsePartitionDir, partitionDir } from '../lake/layout.js';
import type { ManifestFile, MergedFrom, PartitionManifest } from '../lake/manifest.js';
import {
  type Disagreement,
  type RecorderClaims,
  type RecorderFiles,
  disagreements,
  doubtedSpans,
  mergeGaps,
  mergeRows,
  readGaps,
  recorderClaims,
  stageDoubts,
  wholeFrom,
  writeGaps,
} from '../lake/merge.js';
import type { Logger } from '../log.js';
import { DATASETS, type Dataset, type GapRow } from '../records.js';
import { HOUR } from '../time.js';
import {
  type CommitObject,
  commitKey,
  commitPrefix,
  dataKey,
  heartbeatKey,
  manifestKey,
  recorderPrefix,
  recordersPrefix,
} from './layout.js';
import { S3, S3Error } from './s3.js';
import { describe } from './publish.js';

export interface MergeReport {
  recorders: number;
  groups: number;
  /** Partitions whose merged manifest this pass replaced. */
  partitions: number;
  files_put: number;
  disagreements: number;
  /** Groups left for a later pass: a recorder's horizon short of them, or a failure. */
  pending: number;
  /** Files this merger put that no manifest came to name (a lost race, or a stop in between), deleted. */
  orphans_deleted: number;
  /** Bytes of fetched inputs kept for later merges after the pass (at most `cacheBytes`). */
  cache_bytes: number;
}

interface Group {
  venue: Partition['venue'];
  coin: string;
  window: Partition['window'];
  hour: number;
}

const groupId = (g: Group) => `${g.venue}|${g.coin}|${g.window}|${g.hour}`;
const parseGroup = (id: string): Group => {
  const [venue, coin, window, hour] = id.split('|');
  return { venue: venue as Group['venue'], coin, window: window as Group['window'], hour: Number(hour) };
};

/** What a merge reads of a recorder's published heartbeat (capture/heartbeat.ts writes it). */
interface RecorderBeat {
  sealed_through?: number;
  gaps?: {
    market_id: string | null;
    dataset: GapRow['dataset'];
    from_ts: number;
    until: number | null;
    reason: string;
    detail: string;
    failures: number;
  }[];
}

interface State {
  /** Per recorder, the last of its commit objects applied. */
  offsets: Record<string, string>;
  pending: string[];
  /**
   * Files put and not yet named by the manifest put after them, and files a manifest put named no
   * more and not yet deleted (written before either, so a process killed in between still knows):
   * each is deleted once no manifest names it, `graceMs` after it was last put.
   */
  unnamed?: Unnamed[];
}

/** A file of the bucket that may be named by no manifest; `at` when it was put (0: long ago). */
interface Unnamed {
  key: string;
  partition: string;
  name: string;
  at: number;
}

export interface MergerOptions {
  /** Which hours' groups this merger merges (all by default): a job merging a range, a test its hour. */
  hours?: (hour: number) => boolean;
  /**
   * How long a file put and named by no manifest is left alone: another merger of the same inputs
   * may have put the same file (same name) and be about to name it.
   */
  graceMs?: number;
  /** Groups merged at once (MERGE_CONCURRENCY): each writes only its own hour's partitions. */
  concurrency?: number;
  /**
   * Bytes of fetched inputs kept between passes (MERGE_CACHE_BYTES), the groups merged longest ago
   * dropped first: a group pending behind a recorder that stays down would keep its inputs forever.
   */
  cacheBytes?: number;
}

/** One recorder's manifest of one partition as the bucket holds it now. */
type Held = PartitionManifest | null;

export class Merger {
  private state: State | null = null;
  /**
   * The recorders' horizons and open gaps at the last pass (null before this process's first): a
   * pending group is looked at again when its clip of a horizon moved or a gap open over it changed.
   */
  private last: { horizons: Map<string, number>; open: Map<string, GapRow[]> } | null = null;
  /** When this process last merged each group directory (one not merged since it started: never). */
  private readonly used = new Map<string, number>();
  /** Bytes of fetched inputs held after the last eviction (null before this process's first). */
  private cached: number | null = null;
  /** Set by `stop`: a pass ends after the group it is merging, the rest left pending for the next process. */
  private stopping = false;

  stop(): void {
    this.stopping = true;
  }

  private readonly hours: (hour: number) => boolean;
  private readonly graceMs: number;
  private readonly concurrency: number;
  private readonly cacheBytes: number;
  /** State writes in the order they were asked for: groups merged side by side note files at once. */
  private saving: Promise<void> = Promise.resolve();

  constructor(
    /** The record's prefix; the recorders are below it. */
    private readonly s3: S3,
    /** Inputs fetched and outputs staged here: a directory of this process's own. */
    private readonly workDir: string,
    private readonly duck: Duck,
    private readonly log: Logger,
    options: MergerOptions = {},
  ) {
    this.hours = options.hours ?? (() => true);
    this.graceMs = options.graceMs ?? 10 * 60_000;
    this.concurrency = options.concurrency ?? 4;
    this.cacheBytes = options.cacheBytes ?? 2 ** 31;
  }

  private get prefix(): string {
    return this.s3.config.prefix;
  }

  private get stateFile(): string {
    return path.join(this.workDir, 'merge.json');
  }

  async pass(): Promise<MergeReport> {
    this.state ??= (await readJson<State>(this.stateFile)) ?? { offsets: {}, pending: [] };
    const state = this.state;
    const recorders = (await this.s3.prefixes(recordersPrefix(this.prefix))).filter((id) => RECORDER_ID_RE.test(id)).sort();
    const horizons = new Map<string, number>();
    const open = new Map<string, GapRow[]>();
    for (const r of recorders) {
      const body = await this.s3.get(heartbeatKey(recorderPrefix(this.prefix, r)));
      const beat = body ? (JSON.parse(body.toString('utf8')) as RecorderBeat) : null;
      // Before its first seal pass a recorder vouches for nothing: 0, the epoch (JSON has no -Infinity).
      horizons.set(r, typeof beat?.sealed_through === 'number' ? beat.sealed_through : 0);
      // Gaps still open at its heartbeat are in no partition yet: it vouches for none of their span.
      open.set(
        r,
        (beat?.gaps ?? []).map((g) => ({
          market_id: g.market_id,
          dataset: g.dataset,
          from_ts: g.from_ts,
          to_ts: g.until ?? Number.MAX_SAFE_INTEGER,
          reason: g.reason,
          detail: g.detail,
          failures: g.failures,
        })),
      );
    }
    const groups = new Set<string>();
    const offsets: Record<string, string> = { ...state.offsets };
    for (const r of recorders) {
      const commits = commitPrefix(recorderPrefix(this.prefix, r));
      for await (const o of this.s3.list(commits, state.offsets[r])) {
        const body = await this.s3.get(o.key);
        if (body === null) continue;
        for (const dir of (JSON.parse(body.toString('utf8')) as CommitObject).partitions) {
          const p = parsePartitionDir(dir);
          if (!p) continue;
          for (const hour of [p.hour - HOUR, p.hour, p.hour + HOUR]) if (this.hours(hour)) groups.add(groupId({ ...p, hour }));
        }
        offsets[r] = o.key;
      }
    }
    const orphans = await this.sweep(state);
    // A pending group waits on a horizon short of its end or a gap open over it: it is merged again
    // when one such moved or changed. One waiting on a recorder that stays down is not looked at every
    // pass the others' horizons move.
    const before = this.last;
    for (const id of state.pending) {
      const start = parseGroup(id).hour - HOUR;
      const end = start + 3 * HOUR;
      const clipOf = (h: Map<string, number>, r: string) => Math.min(h.get(r) ?? 0, end);
      const openOf = (o: Map<string, GapRow[]>, r: string) =>
        JSON.stringify((o.get(r) ?? []).filter((x) => x.from_ts < end && x.to_ts > start));
      if (
        !before ||
        [...before.horizons.keys()].some((r) => !horizons.has(r)) ||
        recorders.some((r) => clipOf(before.horizons, r) !== clipOf(horizons, r) || openOf(before.open, r) !== openOf(open, r))
      )
        groups.add(id);
    }
    this.last = { horizons, open };
    const report: MergeReport = {
      recorders: recorders.length,
      groups: 0,
      partitions: 0,
      files_put: 0,
      disagreements: 0,
      pending: 0,
      orphans_deleted: orphans,
      cache_bytes: 0,
    };
    const pending = new Set(state.pending);
    const queue = [...groups].sort();
    const work = async () => {
      for (let id = queue.shift(); id !== undefined; id = queue.shift()) {
        if (this.stopping) {
          pending.add(id);
          continue;
        }
        try {
          const done = await this.mergeGroup(parseGroup(id), recorders, horizons, open, report);
          if (done) pending.delete(id);
          else pending.add(id);
          report.groups++;
        } catch (err) {
          pending.add(id);
          this.log.warn({ group: id, error: describe(err) }, 'merge failed; retried');
        }
      }
    };
    // Groups are disjoint (each writes its own hour's partitions and only reads its neighbours'), so
    // they merge side by side: a group's time is mostly requests to the bucket and small statements.
    await Promise.all(Array.from({ length: Math.min(this.concurrency, queue.length) }, work));
    report.pending = pending.size;
    // Only a group merged fetches: the cache grew, or changed, only then.
    if (report.groups > 0 || this.cached === null) this.cached = await this.evict();
    report.cache_bytes = this.cached;
    this.state = { ...state, offsets, pending: [...pending].sort() };
    await this.saveState();
    if (report.partitions > 0) this.log.info(report, 'merged');
    return report;
  }

  /**
   * Merges the group's partitions whose inputs changed; true when every recorder's horizon has
   * passed the group (nothing a recorder publishes later can be about it but a late re-seal,
   * which its commit names).
   */
  private async mergeGroup(
    g: Group,
    recorders: string[],
    horizons: Map<string, number>,
    open: Map<string, GapRow[]>,
    report: MergeReport,
  ): Promise<boolean> {
    const held = new Map<string, Held>();
    const manifest = async (r: string, dataset: Dataset, hour: number): Promise<Held> => {
      const p: Partition = { ...g, dataset, hour };
      const key = manifestKey(recorderPrefix(this.prefix, r), p);
      if (!held.has(key)) {
        const body = await this.s3.get(key);
        held.set(key, body ? (JSON.parse(body.toString('utf8')) as PartitionManifest) : null);
      }
      return held.get(key)!;
    };
    // What a recorder vouches for ends at its horizon, and nothing of this group lies past two hours on.
    const clip = (r: string) => Math.min(horizons.get(r) ?? 0, g.hour + 2 * HOUR);
    // Open gaps that reach into the group (a gap open since before it, or opened in it).
    const openGaps = (r: string) => (open.get(r) ?? []).filter((o) => o.from_ts < g.hour + 2 * HOUR && o.to_ts > g.hour - HOUR);
    const complete = recorders.every((r) => clip(r) === g.hour + 2 * HOUR && openGaps(r).length === 0);
    const workDir = path.join(this.workDir, shortHash(groupId(g)));
    this.used.set(path.basename(workDir), Date.now());
    const changed: string[] = [];
    let raced = false;
    const input = async (o: { r: string; m: Held }, d: Dataset, hour: number): Promise<RecorderFiles> => ({
      recorder: o.r,
      files: await this.fetch(o.r, { ...g, dataset: d, hour }, o.m?.files ?? [], workDir),
    });
    // Books and gaps both read what each recorder vouches for (its first books and its books gaps,
    // the hours either side included): the gaps to keep, and the books to leave out (merge.ts Doubt).
    const near = await Promise.all(
      recorders.flatMap((r) =>
        [g.hour - HOUR, g.hour, g.hour + HOUR].flatMap((hour) =>
          (['books', 'gaps'] as const).map(async (d) => ({ r, d, hour, m: await manifest(r, d, hour) })),
        ),
      ),
    );
    const books = (r: string) => near.find((n) => n.r === r && n.d === 'books' && n.hour === g.hour)!.m;
    let claims = null as Promise<RecorderClaims[]> | null;
    const claimsOf = () =>
      (claims ??= Promise.all(
        recorders.map(async (r): Promise<RecorderClaims> => {
          const mine = near.filter((n) => n.r === r);
          const gapsOf = async (hour: number) =>
            readGaps(
              this.duck,
              (
                await input(
                  mine.find((n) => n.d === 'gaps' && n.hour === hour)!,
                  'gaps',
                  hour,
                )
              ).files,
            );
          const first = wholeFrom(mine.filter((x) => x.d === 'books').flatMap((n) => n.m?.files ?? []));
          const own = await gapsOf(g.hour);
          const nearGaps = [...own, ...openGaps(r), ...(await gapsOf(g.hour - HOUR)), ...(await gapsOf(g.hour + HOUR))];
          return { recorder: r, own, near: nearGaps, first, horizon: clip(r) };
        }),
      ));
    let doubted = null as Promise<string | null> | null;
    const doubtedOf = () => (doubted ??= claimsOf().then((c) => stageDoubts(workDir, doubtedSpans(c))));
    try {
      for (const dataset of [...DATASETS].sort((a, b) => Number(a === 'gaps') - Number(b === 'gaps'))) {
        const p: Partition = { ...g, dataset };
        const own = await Promise.all(recorders.map(async (r) => ({ r, m: await manifest(r, dataset, g.hour) })));
        if (own.every((o) => o.m === null) && !(dataset === 'gaps' && recorders.some((r) => books(r) !== null))) continue;
        const named = (m: Held) => (m?.files ?? []).map((f) => [f.name, f.sha256]);
        const doubts = dataset === 'books' ? doubtedSpans(await claimsOf()) : [];
        const fingerprint = shortHash(
          JSON.stringify({
            dataset,
            own: own.map((o) => [o.r, named(o.m)]),
            near: dataset === 'gaps' ? near.map((n) => [n.r, n.d, n.hour, named(n.m)]) : [],
            clips: dataset === 'gaps' ? recorders.map((r) => [r, clip(r), openGaps(r)]) : [],
            // Books read the claims only for the rows they leave out: a horizon moving elsewhere rewrites
            // no books, nor does this key where none is left out (books merged before it keep their names).
            ...(doubts.length ? { doubts } : {}),
          }),
        );
        const newest = (m: Held) => Math.max(0, ...(m?.files ?? []).map((f) => f.written_at));
        const merged: MergedFrom = {
          fingerprint,
          recorders: Object.fromEntries(own.map((o) => [o.r, { written_at: newest(o.m), horizon: clip(o.r) }])),
        };
        const current = await this.s3.read(manifestKey(this.prefix, p));
        const there = current && current !== 'unchanged' ? (JSON.parse(current.body.toString('utf8')) as PartitionManifest) : null;
        if (there && !there.merged) {
          this.log.warn({ partition: partitionDir(p) }, 'a manifest at the prefix not made by a merge: left as it is');
          continue;
        }
        if (there?.merged?.fingerprint === fingerprint) continue;
        if (there?.merged && readLess(merged, there.merged)) continue;

        const name = `merged-${fingerprint}.parquet`;
        const outDir = path.join(workDir, 'out');
        const writtenAt = Math.max(...own.map((o) => newest(o.m)));
        const sources = own.flatMap((o) => (o.m?.files ?? []).map((f) => `${o.r}/${f.name}`)).sort();
        let entry: ManifestFile | null;
        if (dataset === 'gaps') {
          const found: Disagreement[] = await disagreements(
            this.duck,
            await Promise.all(recorders.map((r) => input({ r, m: books(r) }, 'books', g.hour))),
            await doubtedOf(),
          );
          report.disagreements += found.length;
          const gaps = mergeGaps(await claimsOf(), found, g.hour + HOUR);
          entry = await writeGaps(this.duck, outDir, p, gaps, name, { sources, writtenAt, claims: recorderClaims(await claimsOf()) });
        } else {
          const inputs = await Promise.all(own.map((o) => input(o, dataset, g.hour)));
          const doubts = dataset === 'books' ? await doubtedOf() : null;
          entry = await mergeRows(this.duck, outDir, p, inputs, name, { sources, writtenAt, doubted: doubts });
        }
        const files: ManifestFile[] = [];
        let intent: Unnamed | null = null;
        // The files the manifest names now and the new one will not: to leave the bucket once it is
        // replaced, as a compaction's do (a glob over the bucket must not read an hour twice). Noted
        // first, so a delete that fails or a kill before it leaves them to `sweep`, never in the bucket for good.
        const replaced: Unnamed[] = (there?.files ?? [])
          .filter((f) => !(entry && f.name === name))
          .map((f) => ({ key: dataKey(this.prefix, `${partitionDir(p)}/${f.name}`), partition: partitionDir(p), name: f.name, at: 0 }));
        if (entry) intent = { key: dataKey(this.prefix, `${partitionDir(p)}/${name}`), partition: partitionDir(p), name, at: Date.now() };
        if (intent || replaced.length) await this.intend(...(intent ? [intent] : []), ...replaced);
        if (entry && intent) {
          const file = path.join(outDir, partitionDir(p), name);
          await this.s3.put(intent.key, { file, size: entry.bytes, sha256: entry.sha256 }, { sha256: entry.sha256 });
          report.files_put++;
          files.push(entry);
        }
        const body: PartitionManifest = { partition: partitionDir(p), files, merged };
        try {
          await this.s3.put(
            manifestKey(this.prefix, p),
            Buffer.from(JSON.stringify(body, null, 1)),
            {},
            current && current !== 'unchanged' ? { ifMatch: current.etag } : { ifNoneMatch: '*' },
          );
        } catch (err) {
          // Another merger replaced it since it was read (RGW may say so with a 500, not a 412: see
          // edge/keys.ts): the next pass looks again. The file put for it stays for now (another merger
          // of the same inputs may have named it meanwhile); `sweep` deletes it if none came to.
          if (err instanceof S3Error && (err.status === 412 || err.status >= 500)) {
            raced = true;
            continue;
          }
          throw err;
        }
        this.forget(intent);
        // A replica fetching one of them just then is told to retry.
        for (const u of replaced) {
          const deleted = await this.s3.delete(u.key).then(
            () => true,
            () => false,
          );
          if (deleted) this.forget(u);
        }
        changed.push(partitionDir(p));
        report.partitions++;
      }
    } finally {
      await fs.rm(path.join(workDir, 'out'), { recursive: true, force: true });
      const staged = await doubted?.catch(() => null);
      if (staged) await fs.rm(staged, { force: true });
      if (complete) await fs.rm(workDir, { recursive: true, force: true });
    }
    if (changed.length) {
      const commit: CommitObject = { at: Date.now(), partitions: changed.sort() };
      await this.s3.put(commitKey(this.prefix, commit.at), Buffer.from(JSON.stringify(commit)));
    }
    return complete && !raced;
  }

  private saveState(): Promise<void> {
    const write = async () => {
      await fs.mkdir(this.workDir, { recursive: true });
      await writeFileAtomic(this.stateFile, JSON.stringify(this.state));
    };
    const run = this.saving.then(write, write);
    this.saving = run.catch(() => undefined);
    return run;
  }

  /** Notes files about to be put, or to be deleted once no manifest names them, durably, before either. */
  private async intend(...u: Unnamed[]): Promise<void> {
    this.state!.unnamed = [...(this.state!.unnamed ?? []), ...u];
    await this.saveState();
  }

  /** Done with: named by the manifest it was put for, or deleted. */
  private forget(u: Unnamed | null): void {
    if (u) this.state!.unnamed = (this.state!.unnamed ?? []).filter((x) => x !== u);
  }

  /**
   * Deletes the files this merger put that no manifest names `graceMs` after they were last put
   * (by it or by another merger of the same inputs); returns how many.
   */
  private async sweep(state: State): Promise<number> {
    const now = Date.now();
    let deleted = 0;
    const kept: NonNullable<State['unnamed']> = [];
    for (const u of state.unnamed ?? []) {
      if (now - u.at < this.graceMs) {
        kept.push(u);
        continue;
      }
      const p = parsePartitionDir(u.partition);
      const body = p ? await this.s3.get(manifestKey(this.prefix, p)) : null;
      const named = body && (JSON.parse(body.toString('utf8')) as PartitionManifest).files.some((f) => f.name === u.name);
      if (named) continue;
      const there = await this.s3.head(u.key);
      if (!there) continue;
      if (!(now - there.modified >= this.graceMs)) {
        kept.push({ ...u, at: there.modified || now });
        continue;
      }
      await this.s3.delete(u.key);
      deleted++;
    }
    state.unnamed = kept;
    if (deleted) this.log.info({ deleted }, 'merged files no manifest names deleted');
    return deleted;
  }

  /**
   * Drops the inputs of the groups merged longest ago (those not merged since this process
   * started first) until at most `cacheBytes` are kept; returns the bytes kept. Runs between a
   * pass's groups and the next pass, so no group is reading them.
   */
  private async evict(): Promise<number> {
    const dirs: { name: string; bytes: number; used: number }[] = [];
    for (const entry of await fs.readdir(this.workDir, { withFileTypes: true }).catch(() => [])) {
      if (!entry.isDirectory()) continue;
      const dir = path.join(this.workDir, entry.name);
      let bytes = 0;
      for (const f of await fs.readdir(dir, { recursive: true, withFileTypes: true }))
        if (f.isFile()) bytes += (await fs.stat(path.join(f.parentPath, f.name)).catch(() => ({ size: 0 }))).size;
      dirs.push({ name: entry.name, bytes, used: this.used.get(entry.name) ?? 0 });
    }
    dirs.sort((a, b) => a.used - b.used || a.name.localeCompare(b.name));
    let kept = dirs.reduce((n, d) => n + d.bytes, 0);
    for (const d of dirs) {
      if (kept <= this.cacheBytes) break;
      await fs.rm(path.join(this.workDir, d.name), { recursive: true, force: true });
      this.used.delete(d.name);
      kept -= d.bytes;
    }
    return kept;
  }

  /** A recorder's files of a partition on local disk (fetched once per group and checked against their sha256). */
  private async fetch(recorder: string, p: Partition, files: readonly ManifestFile[], workDir: string): Promise<string[]> {
    const local: string[] = [];
    for (const f of files) {
      const dest = path.join(workDir, 'in', recorder, partitionDir(p), f.name);
      const size = await fs.stat(dest).then(
        (s) => s.size,
        () => -1,
      );
      if (size !== f.bytes)
        await this.s3.download(dataKey(recorderPrefix(this.prefix, recorder), `${partitionDir(p)}/${f.name}`), dest, {
          size: f.bytes,
          sha256: f.sha256,
        });
      local.push(dest);
    }
    return local;
  }
}

/** Whether `ours` read no more than `theirs` of every recorder (and less of one): a merge older than the one there. */
export function readLess(ours: MergedFrom, theirs: MergedFrom): boolean {
  const names = new Set([...Object.keys(ours.recorders), ...Object.keys(theirs.recorders)]);
  let less = false;
  for (const r of names) {
    const a = ours.recorders[r] ?? { written_at: 0, horizon: 0 };
    const b = theirs.recorders[r] ?? { written_at: 0, horizon: 0 };
    if (a.written_at > b.written_at || a.horizon > b.horizon) return false;
    if (a.written_at < b.written_at || a.horizon < b.horizon) less = true;
  }
  return less;
}

/**
 * Merges every `config.mergeMs` (a pass never overlaps the last) until the returned stop is
 * called; a pass that fails is logged once a streak and tried again at the next.
 */
export function startMerging(config: Config, duck: Duck, log: Logger): { stop: () => Promise<void>; last: () => MergeReport | null } {
  if (!config.bucket) throw new Error('merging needs a bucket');
  const merger = new Merger(new S3(config.bucket), path.join(config.dataDir, 'state', 'merge'), duck, log, {
    concurrency: config.mergeConcurrency,
    cacheBytes: config.mergeCacheBytes,
  });
  let running: Promise<unknown> = Promise.resolve();
  let busy = false;
  let failing = false;
  let last: MergeReport | null = null;
  const timer = setInterval(() => {
    // A pass still running is not queued behind: on a starved machine a pass outlasts MERGE_MS, and
    // chained passes piled up without bound, each listing the bucket and taking the cores the seal needs.
    if (busy) return;
    busy = true;
    running = merger
      .pass()
      .then(
        (report) => {
          last = report;
          if (failing) log.info('merging recovered');
          failing = false;
        },
        (err: unknown) => {
          if (!failing) log.warn({ error: describe(err) }, 'merge pass failed; retried');
          failing = true;
        },
      )
      .finally(() => (busy = false));
  }, config.mergeMs);
  return {
    // A stop (capture's, on SIGTERM) waits for the group being merged, not the pass: the rest stay pending.
    stop: async () => {
      clearInterval(timer);
      merger.stop();
      await running;
    },
    last: () => last,
  };
}
