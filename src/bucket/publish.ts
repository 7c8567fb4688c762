// Publishes the lake to a bucket after the local commit: the sealed files of every partition the
// commit log names, then its manifest, then one commit object naming the partitions. Capture
// never waits for it: a bucket that is down leaves the commit log's offset where it was, the
// backlog grows in health, and the next pass starts again from there. Every step is idempotent
// (a file already there with the manifest's sha256 is not sent again), so a crash between
// steps only repeats work.
import fs from 'node:fs/promises';
import { promisify } from 'node:util';
import { gzip } from 'node:zlib';
import path from 'node:path';
import type { Duck } from '../lake/duckdb.js';
import { commitPartition } from '../lake/fileindex.js';
import { followLines, listFiles, readJson, writeFileAtomic } from '../lake/fsutil.js';
import { type LakePaths, type Partition, parsePartitionDir, partitionDir } from '../lake/layout.js';
import { COMMIT_LOG, type PartitionManifest, readManifest } from '../lake/manifest.js';
import { LakeReader } from '../lake/reader.js';
import type { Logger } from '../log.js';
import {
  type CommitObject,
  type ManifestSnapshot,
  commitKey,
  dataKey,
  heartbeatKey,
  manifestKey,
  recorderPrefix,
  snapshotKey,
} from './layout.js';
import { S3Error } from './s3.js';
import type { PublishHealth } from '../health.js';
import type { Config } from '../config.js';
import { lakePaths } from '../lake/layout.js';
import { S3 } from './s3.js';

export interface PublishReport {
  partitions: number;
  files_put: number;
  files_present: number;
  files_deleted: number;
}

/** Partitions published at once: each is a few requests, most of them small. */
const PARALLEL = 4;

/** The publisher of the lake in `config.dataDir` that a process's config asks for: none without a bucket. */
export function publisherFor(config: Config, log: Logger, duck: Duck): Publisher | null {
  if (!config.bucket) return null;
  // One of several recorders publishes its own lake beside theirs; the record at the prefix is their merge.
  const bucket = config.recorderId ? { ...config.bucket, prefix: recorderPrefix(config.bucket.prefix, config.recorderId) } : config.bucket;
  return new Publisher(lakePaths(config.dataDir), new S3(bucket), log, config.publishSnapshotMs, duck);
}

export class Publisher {
  private offset: number | null = null;
  private backlog = 0;
  private waitingSince: number | null = null;
  private lastPublishedAt: number | null = null;
  private lastError: string | null = null;
  private filesPut = 0;
  private running: Promise<PublishReport> | null = null;
  private snapshotAt: number | null = null;
  private snapshotError: string | null = null;
  /** After a failed snapshot, not before this. */
  private snapshotRetryAt = 0;
  /** The heartbeat's text as last put. */
  private heartbeatPut: string | null = null;

  /** The lake as the API reads it, for the snapshot's checkpoints; its own state directory, never the API's files. */
  private reader: LakeReader | null = null;
  private readerLane: Duck | null = null;

  /**
   * `snapshotMs`: how often a pass also writes the snapshot (layout.ts `snapshotKey`); with `duck`
   * it carries the catalogue's and the gaps' checkpoints too.
   */
  constructor(
    private readonly paths: LakePaths,
    private readonly s3: S3,
    private readonly log: Logger,
    private readonly snapshotMs = 3_600_000,
    private readonly duck: Duck | null = null,
  ) {}

  private get stateFile(): string {
    return path.join(this.paths.state, 'publish.json');
  }

  health(): PublishHealth {
    return {
      bucket: this.s3.config.bucket,
      backlog_partitions: this.backlog,
      waiting_since: this.waitingSince === null ? null : new Date(this.waitingSince).toISOString(),
      last_published_at: this.lastPublishedAt === null ? null : new Date(this.lastPublishedAt).toISOString(),
      last_error: this.lastError,
      files_put: this.filesPut,
      snapshot_at: this.snapshotAt === null ? null : new Date(this.snapshotAt).toISOString(),
      snapshot_error: this.snapshotError,
    };
  }

  /** Publishes what the local commit log named since the last successful pass; concurrent callers share one pass. */
  pass(): Promise<PublishReport> {
    this.running ??= this.passOnce().finally(() => {
      this.running = null;
    });
    return this.running;
  }

  private async passOnce(): Promise<PublishReport> {
    if (this.offset === null) {
      const state = await readJson<{ offset: number; snapshot_at?: number }>(this.stateFile);
      this.offset = state?.offset ?? 0;
      this.snapshotAt = state?.snapshot_at ?? null;
    }
    const named = new Map<string, Partition>();
    const at = await followLines(path.join(this.paths.manifest, COMMIT_LOG), this.offset, (line) => {
      const p = parsePartitionDir(commitPartition(line));
      if (p) named.set(partitionDir(p), p);
    });
    this.backlog = named.size;
    if (at === null || at === this.offset) {
      await this.publishHeartbeat();
      return { partitions: 0, files_put: 0, files_present: 0, files_deleted: 0 };
    }
    try {
      const report = await this.publish([...named.values()]);
      this.offset = at;
      // After the pass: the snapshot then names no manifest whose files the bucket lacks, save those
      // sealed meanwhile. It only speeds a new replica's start, so one that fails never holds
      // publishing: it is said in health and tried again a while later, not at every pass.
      const now = Date.now();
      if ((this.snapshotAt === null || now - this.snapshotAt >= this.snapshotMs) && now >= this.snapshotRetryAt) await this.trySnapshot();
      await writeFileAtomic(this.stateFile, JSON.stringify({ offset: this.offset, snapshot_at: this.snapshotAt }));
      await this.publishHeartbeat();
      if (this.lastError) this.log.info({ bucket: this.s3.config.bucket, backlog: this.backlog }, 'publishing recovered');
      this.backlog = 0;
      this.waitingSince = null;
      this.lastError = null;
      this.lastPublishedAt = Date.now();
      return report;
    } catch (err) {
      // A bucket not created yet is created (where the credentials may), and the next pass goes on.
      if (err instanceof S3Error && err.code === 'NoSuchBucket') await this.s3.ensureBucket().catch(() => undefined);
      this.waitingSince ??= Date.now();
      const message = describe(err);
      // Once per streak: a bucket down for an hour is one line, not 1,800.
      if (this.lastError === null)
        this.log.warn({ bucket: this.s3.config.bucket, backlog: this.backlog, error: message }, 'publishing failed; retried');
      this.lastError = message;
      throw err;
    }
  }

  /**
   * Every local manifest, byte for byte, in one gzipped object. Replicas check each against the
   * bucket's listing (its ETag is the MD5 of the bytes published), so one sealed after the pass,
   * or a snapshot hours old, costs only the GETs of what differs.
   */
  async snapshot(): Promise<{ manifests: number; bytes: number }> {
    const manifests: ManifestSnapshot['manifests'] = [];
    for (const p of await this.localPartitions()) {
      const body = await fs.readFile(path.join(this.paths.manifest, `${partitionDir(p)}.json`), 'utf8').catch(() => null);
      if (body !== null) manifests.push({ partition: partitionDir(p), body });
    }
    const at = Date.now();
    const snapshot: ManifestSnapshot = {
      version: 1,
      at,
      manifests,
      ...(this.duck ? { checkpoints: await this.checkpoints(this.duck) } : {}),
    };
    // Off the event loop: tens of MB at 90 days would stall capture's.
    const bytes = await gzipAsync(JSON.stringify(snapshot));
    await this.s3.put(snapshotKey(this.s3.config.prefix), bytes);
    this.snapshotAt = at;
    return { manifests: manifests.length, bytes: bytes.length };
  }

  /** The snapshot, its failure said in health and the log (once a streak) and tried again a tenth of `snapshotMs` later (at most 10 minutes). */
  private async trySnapshot(): Promise<void> {
    try {
      await this.snapshot();
      this.snapshotError = null;
    } catch (err) {
      if (this.snapshotError === null)
        this.log.warn({ bucket: this.s3.config.bucket, error: describe(err) }, 'snapshot not written; retried');
      this.snapshotError = describe(err);
      this.snapshotRetryAt = Date.now() + Math.min(this.snapshotMs / 10, 600_000);
    }
  }

  private async checkpoints(duck: Duck): Promise<{ catalogue: string; gaps: string }> {
    if (this.reader) await this.reader.update();
    else {
      // A lane of its own, so sealing never queues behind its first read of every markets and gaps file;
      // kept only once opened whole (a half-opened reader would checkpoint a catalogue missing markets).
      this.readerLane ??= await duck.fork(1);
      const reader = new LakeReader(this.readerLane, { ...this.paths, state: path.join(this.paths.state, 'snapshot-reader') });
      await reader.open();
      this.reader = reader;
    }
    return this.reader.writeCheckpoints();
  }

  /** Every partition the local lake has a manifest of. */
  private async localPartitions(): Promise<Partition[]> {
    return (await listFiles(this.paths.manifest, '.json'))
      .map((rel) =>
        parsePartitionDir(
          rel
            .replace(/\.json$/, '')
            .split(path.sep)
            .join('/'),
        ),
      )
      .filter((p): p is Partition => p !== null);
  }

  /** Every partition of the local lake, whatever the commit log says: `make mirror-bucket`. */
  /**
   * Capture's heartbeat, when it changed since the last put: after the files it vouches for, so a
   * replica never takes a market as held further than the bucket's files show. Once a pass (about
   * 1,800 small PUTs an hour at PUBLISH_MS 2 s); a failure leaves the replicas with the older one,
   * which they judge by its age.
   */
  async publishHeartbeat(everything = false): Promise<void> {
    const text = await fs.readFile(this.paths.heartbeat, 'utf8').catch(() => null);
    if (text === null || text === this.heartbeatPut) return;
    // Read after the heartbeat: a commit logged meanwhile (a seal it may count as done, `sealed_through`)
    // is not in the bucket yet, so the heartbeat waits for the pass that publishes it.
    let unpublished = false;
    if (!everything && this.offset !== null)
      await followLines(path.join(this.paths.manifest, COMMIT_LOG), this.offset, () => {
        unpublished = true;
      });
    if (unpublished) return;
    await this.s3.put(heartbeatKey(this.s3.config.prefix), Buffer.from(text)).then(
      () => {
        this.heartbeatPut = text;
      },
      (err: unknown) => this.log.debug({ error: describe(err) }, 'heartbeat not published'),
    );
  }

  async mirror(): Promise<PublishReport> {
    const report = await this.publish(await this.localPartitions(), true);
    await this.publishHeartbeat(true);
    // Everything is published: a snapshot that fails is said (health, log), not a failed mirror.
    await this.trySnapshot();
    return report;
  }

  /**
   * Files, then manifests, then the commit object: a reader that sees a manifest finds its files,
   * and one that follows commits finds the manifests. `check` asks the bucket about every file
   * (a mirror into a bucket someone may have changed); otherwise a file the bucket's previous
   * manifest already named with the same sha256 is taken as there.
   */
  private async publish(partitions: Partition[], check = false): Promise<PublishReport> {
    const report: PublishReport = { partitions: 0, files_put: 0, files_present: 0, files_deleted: 0 };
    const done: string[] = [];
    let next = 0;
    await Promise.all(
      Array.from({ length: PARALLEL }, async () => {
        while (next < partitions.length) {
          const p = partitions[next++];
          await this.publishPartition(p, check, report);
          done.push(partitionDir(p));
          report.partitions++;
        }
      }),
    );
    if (done.length) {
      const commit: CommitObject = { at: Date.now(), partitions: done.sort() };
      await this.s3.put(commitKey(this.s3.config.prefix, commit.at), Buffer.from(JSON.stringify(commit)));
    }
    return report;
  }

  private async publishPartition(p: Partition, check: boolean, report: PublishReport): Promise<void> {
    const prefix = this.s3.config.prefix;
    const previous = await this.s3
      .get(manifestKey(prefix, p))
      .then((b) => (b ? (JSON.parse(b.toString('utf8')) as PartitionManifest) : null));
    const before = new Map((previous?.files ?? []).map((f) => [f.name, f.sha256]));
    // A compaction may swap the manifest while its files go up: the file it replaced is then in
    // the trash, and the partition is published again from the new manifest.
    for (let attempt = 0; ; attempt++) {
      const manifestBytes = await fs.readFile(path.join(this.paths.manifest, `${partitionDir(p)}.json`)).catch(() => null);
      const manifest: PartitionManifest = manifestBytes
        ? (JSON.parse(manifestBytes.toString('utf8')) as PartitionManifest)
        : await readManifest(this.paths.manifest, p);
      try {
        for (const f of manifest.files) {
          const key = dataKey(prefix, `${partitionDir(p)}/${f.name}`);
          if (!check && before.get(f.name) === f.sha256) continue;
          const there = check || before.has(f.name) ? await this.s3.head(key) : null;
          if (there && there.size === f.bytes && there.meta.sha256 === f.sha256) {
            report.files_present++;
            continue;
          }
          await this.s3.put(
            key,
            { file: path.join(this.paths.lake, partitionDir(p), f.name), size: f.bytes, sha256: f.sha256 },
            { sha256: f.sha256 },
          );
          report.files_put++;
          this.filesPut++;
        }
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT' && attempt < 3) continue;
        throw err;
      }
      await this.s3.put(manifestKey(prefix, p), manifestBytes ?? Buffer.from(JSON.stringify(manifest, null, 1)));
      // Replaced files leave the bucket as they left the lake: a glob over the bucket must not
      // read a compacted hour twice.
      const kept = new Set(manifest.files.map((f) => f.name));
      for (const name of before.keys()) {
        if (kept.has(name)) continue;
        await this.s3.delete(dataKey(prefix, `${partitionDir(p)}/${name}`));
        report.files_deleted++;
      }
      return;
    }
  }
}

const gzipAsync = promisify(gzip);

/** An error as one line for health and the log: never a URL with a signature, never a key. */
export function describe(err: unknown): string {
  if (err instanceof S3Error) return `${err.code}${err.status ? ` (HTTP ${err.status})` : ''}: ${err.message.slice(0, 160)}`;
  const e = err as NodeJS.ErrnoException;
  return `${e.code ?? 'ERROR'}: ${String(e.message).slice(0, 160)}`;
}
