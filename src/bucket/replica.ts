// An API process serving from a bucket alone. Manifests are brought into the process's own
// DATA_DIR as if sealed there (each with a line in the local commit log), so the index, the
// catalogue and every query work unchanged; sealed files are fetched when a request first needs
// them, checked against the manifest's size and sha256, and kept on a bounded disk cache.
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { gunzipSync } from 'node:zlib';
import { listFiles, readJson, writeFileAtomic } from '../lake/fsutil.js';
import { CATALOGUE_CHECKPOINT } from '../lake/catalogue.js';
import type { IndexedFile } from '../lake/fileindex.js';
import { GAPS_CHECKPOINT } from '../lake/gaplog.js';
import { type LakePaths, type Partition, partitionDir } from '../lake/layout.js';
import { type PartitionManifest, adoptManifest } from '../lake/manifest.js';
import type { Logger } from '../log.js';
import {
  type CommitObject,
  type ManifestSnapshot,
  commitPrefix,
  dataKey,
  heartbeatKey,
  manifestKey,
  manifestPrefix,
  partitionOfManifestKey,
  recorderPrefix,
  recordersPrefix,
  snapshotKey,
} from './layout.js';
import { RECORDER_ID_RE } from '../config.js';
import { describe } from './publish.js';
import { servingCopyPath } from '../pages/copyformat.js';
import { type S3, S3Error, S3_RETRIES } from './s3.js';

/** A sealed file the bucket could not give (down, missing, or not the bytes its manifest names): a 503, retried later. */
export class ObjectUnavailable extends Error {
  override name = 'ObjectUnavailable';
}

export interface ReplicaHealth {
  bucket: string;
  last_sync: string | null;
  sync_error: string | null;
  /** Manifests brought in: by a GET each, or taken from capture's snapshot (their bytes checked against the listing's ETag). */
  manifests: { fetched: number; from_snapshot: number };
  /** Reads and deletes this process asked the bucket again after a transient failure (no answer, 429, 5xx). */
  retries: number;
  /**
   * `adopted`: files another worker sharing the cache directory fetched, found there and checked
   * here against the manifest (size and sha256) instead of downloaded again.
   */
  cache: { files: number; bytes: number; max_bytes: number; fetched: number; adopted: number; fetch_errors: number; evicted: number };
}

/**
 * A commit object written a little before one already applied (two publishers, or a slow PUT)
 * is still found: each listing starts this far before the newest applied key.
 */
const RELIST_MS = 60_000;
/**
 * A file used this recently is never evicted, whatever the cache's size: work outside a request
 * (the catalogue's and gap log's reads, a serving copy) may have planned it and not opened it yet.
 * Files a request may read are held until it ends (`hold`), however long that is.
 */
const MIN_IDLE_MS = 120_000;
/**
 * Workers of a cluster share the cache directory, and one must not evict a file a request of
 * another still reads: a use sets the file's mtime (at most this often per file), and the files a
 * request in flight may read have theirs renewed this often. Another worker evicts a file only when
 * its mtime is MIN_IDLE_MS old, which a renewed file never is.
 */
const TOUCH_MS = 10_000;
const MAX_HOLD_MS = 1_800_000;
const RENEW_MS = 30_000;
/**
 * Requests at once. A store across a network answers each in tens of milliseconds, so a first open
 * of a long lake (a manifest per partition: about 39,000 at 90 days) is bounded by round trips, not bytes.
 */
const MANIFEST_PARALLEL = 32;
const FETCH_PARALLEL = 16;
/**
 * A walk that finds at least this share of the bucket's manifests changed (a new replica, or one
 * stopped for long) reads capture's snapshot first: one GET instead of one per manifest. The hourly
 * walk of a running replica finds a few, and GETs them.
 */
const SNAPSHOT_SHARE = 0.25;

interface Cached {
  bytes: number;
  usedAt: number;
  /** When this process last set the file's mtime. */
  touchedAt: number;
  /** Its serving copy, once written here: removed with the file, its bytes counted in the cache's. */
  copy?: { sha256: string; bytes: number };
}

interface State {
  /** Manifest ETags as last read, for the full walk. */
  etags: Record<string, string>;
  /** The newest commit object applied. */
  commit: string | null;
}

export class BucketReplica {
  private state: State = { etags: {}, commit: null };
  /** Commit objects applied within RELIST_MS of the newest: skipped when listed again. */
  private applied = new Set<string>();
  private readonly cached = new Map<string, Cached>();
  private cachedBytes = 0;
  private readonly fetching = new Map<string, Promise<void>>();
  private lastSync: number | null = null;
  private syncError: string | null = null;
  private fetched = 0;
  private adopted = 0;
  private fetchErrors = 0;
  private evicted = 0;
  private manifestsFetched = 0;
  private manifestsFromSnapshot = 0;
  private syncing: Promise<number> | null = null;
  /** Requests in flight by when they began; Map order is start order, so the first is the oldest. */
  private readonly holds = new Map<number, number>();
  private holdIds = 0;
  private renewal: NodeJS.Timeout | null = null;
  private evicting: Promise<void> | null = null;
  private heartbeatRead: { text: string; etag: string } | null = null;
  /** Each recorder's heartbeat, by its id, when the record is merged from several (bucket/merger.ts). */
  private readonly recorderBeats = new Map<string, { text: string; etag: string }>();

  /** `now`: the cache's clock (file ages and mtimes); a test moves it instead of waiting minutes. */
  constructor(
    private readonly paths: LakePaths,
    private readonly s3: S3,
    private readonly maxBytes: number,
    private readonly log: Logger,
    private readonly now: () => number = Date.now,
  ) {}

  private get stateFile(): string {
    return path.join(this.paths.state, 'bucket.json');
  }

  /** At start: the files already cached (each was checked when fetched), then every manifest the bucket has changed since. */
  async open(): Promise<number> {
    this.state = (await readJson<State>(this.stateFile)) ?? { etags: {}, commit: null };
    // Serving copies left by an earlier process are not in this one's count: derived data, written again when pages ask.
    await fs.rm(this.paths.serving, { recursive: true, force: true });
    for (const rel of await listFiles(this.paths.lake, '.parquet')) {
      const st = await fs.stat(path.join(this.paths.lake, rel)).catch(() => null);
      if (!st) continue;
      this.cached.set(rel.split(path.sep).join('/'), { bytes: st.size, usedAt: st.mtimeMs, touchedAt: st.mtimeMs });
      this.cachedBytes += st.size;
    }
    this.renewal = setInterval(() => void this.renew(), RENEW_MS).unref();
    return this.sync(true);
  }

  close(): void {
    if (this.renewal) clearInterval(this.renewal);
  }

  /**
   * A request begins: every file ensured from now until the returned release stays on disk, so a
   * statement that opens its files as it goes (DuckDB's multi-file scans do) never finds one gone.
   */
  hold(): () => void {
    const id = this.holdIds++;
    this.holds.set(id, this.now());
    return () => this.holds.delete(id);
  }

  /**
   * Files used since the oldest request in flight began: any of them may be one it reads. A request
   * older than MAX_HOLD_MS no longer holds anything (a client reading a download for hours must not
   * pin the whole cache); its statement has long opened its files, and an open file stays readable.
   */
  private held(c: Cached): boolean {
    const since = this.now() - MAX_HOLD_MS;
    for (const began of this.holds.values()) if (began >= since) return c.usedAt >= began;
    return false;
  }

  /** Sets the mtime of every file a request in flight may read (every RENEW_MS). */
  async renew(): Promise<void> {
    const now = this.now();
    for (const [rel, c] of this.cached) if (this.held(c)) await this.touch(rel, c, now);
  }

  private async touch(rel: string, c: Cached, now: number): Promise<void> {
    c.touchedAt = now;
    const at = new Date(now);
    await fs.utimes(path.join(this.paths.lake, rel), at, at).catch(() => undefined);
  }

  health(): ReplicaHealth {
    return {
      bucket: this.s3.config.bucket,
      last_sync: this.lastSync === null ? null : new Date(this.lastSync).toISOString(),
      sync_error: this.syncError,
      manifests: { fetched: this.manifestsFetched, from_snapshot: this.manifestsFromSnapshot },
      retries: S3_RETRIES.count,
      cache: {
        files: this.cached.size,
        bytes: this.cachedBytes,
        max_bytes: this.maxBytes,
        fetched: this.fetched,
        adopted: this.adopted,
        fetch_errors: this.fetchErrors,
        evicted: this.evicted,
      },
    };
  }

  /**
   * Brings the manifests the bucket changed into the local lake: after the commit objects since
   * the last applied, or (`walk`) every manifest whose ETag changed. Returns how many partitions
   * changed; a bucket that cannot be read leaves everything as it was and says so in health.
   */
  sync(walk = false): Promise<number> {
    this.syncing ??= this.syncOnce(walk)
      .then(
        (n) => {
          if (this.syncError) this.log.info({ bucket: this.s3.config.bucket }, 'bucket readable again');
          this.syncError = null;
          this.lastSync = Date.now();
          return n;
        },
        (err: unknown) => {
          if (this.syncError === null)
            this.log.warn({ bucket: this.s3.config.bucket, error: describe(err) }, 'bucket sync failed; the lake stays as last read');
          this.syncError = describe(err);
          return 0;
        },
      )
      .finally(() => {
        this.syncing = null;
      });
    return this.syncing;
  }

  private async syncOnce(walk: boolean): Promise<number> {
    const prefix = this.s3.config.prefix;
    const changed = new Map<string, { p: Partition; etag?: string }>();
    // Commits are listed before a walk: whatever is committed during it is applied next time.
    const commits: string[] = [];
    const newest = this.state.commit;
    const after = newest ? commitPrefix(prefix) + String(Math.max(0, commitTime(newest) - RELIST_MS)).padStart(15, '0') : undefined;
    for await (const o of this.s3.list(commitPrefix(prefix), after)) if (!this.applied.has(o.key)) commits.push(o.key);
    let listed = 0;
    if (walk) {
      for await (const o of this.s3.list(manifestPrefix(prefix))) {
        const p = partitionOfManifestKey(prefix, o.key);
        listed++;
        if (p && this.state.etags[partitionDir(p)] !== o.etag) changed.set(partitionDir(p), { p, etag: o.etag });
      }
    } else {
      for (const key of commits) {
        const body = await this.s3.get(key);
        if (!body) continue;
        for (const dir of (JSON.parse(body.toString('utf8')) as CommitObject).partitions) {
          const p = partitionOfManifestKey(prefix, `${manifestPrefix(prefix)}${dir}.json`);
          if (p) changed.set(dir, { p });
        }
      }
    }
    let next = 0;
    const list = [...changed.values()];
    const snapshot = walk && list.length > 8 && list.length >= SNAPSHOT_SHARE * listed ? await this.readSnapshot() : null;
    await Promise.all(
      Array.from({ length: MANIFEST_PARALLEL }, async () => {
        while (next < list.length) {
          const { p, etag } = list[next++];
          await this.bringManifest(p, etag, snapshot?.get(partitionDir(p)));
        }
      }),
    );
    for (const key of commits) this.applied.add(key);
    const last = commits.reduce<string | null>((a, k) => (a === null || k > a ? k : a), newest);
    this.state.commit = last;
    if (last) for (const key of this.applied) if (commitTime(key) < commitTime(last) - 2 * RELIST_MS) this.applied.delete(key);
    if (list.length || last !== newest) await writeFileAtomic(this.stateFile, JSON.stringify(this.state));
    await this.readHeartbeat();
    return list.length;
  }

  /**
   * Capture's heartbeat as last published (after the manifests it may vouch for); for a record
   * merged from several recorders (none at the prefix), each recorder's; empty before any.
   */
  get heartbeats(): string[] {
    if (this.heartbeatRead) return [this.heartbeatRead.text];
    return [...this.recorderBeats.values()].map((b) => b.text);
  }

  private async readHeartbeat(): Promise<void> {
    const prefix = this.s3.config.prefix;
    const read = await this.s3.read(heartbeatKey(prefix), this.heartbeatRead?.etag);
    if (read !== 'unchanged') this.heartbeatRead = read && { text: read.body.toString('utf8'), etag: read.etag };
    if (this.heartbeatRead) return;
    const ids = (await this.s3.prefixes(recordersPrefix(prefix))).filter((id) => RECORDER_ID_RE.test(id));
    for (const id of [...this.recorderBeats.keys()]) if (!ids.includes(id)) this.recorderBeats.delete(id);
    for (const id of ids) {
      const held = this.recorderBeats.get(id);
      const beat = await this.s3.read(heartbeatKey(recorderPrefix(prefix, id)), held?.etag);
      if (beat === 'unchanged') continue;
      if (beat) this.recorderBeats.set(id, { text: beat.body.toString('utf8'), etag: beat.etag });
      else this.recorderBeats.delete(id);
    }
  }

  /** Capture's manifests snapshot by partition directory, or null when there is none or it cannot be read (each manifest is then a GET). */
  private async readSnapshot(): Promise<Map<string, string> | null> {
    try {
      const body = await this.s3.get(snapshotKey(this.s3.config.prefix));
      if (!body) return null;
      const snapshot = JSON.parse(gunzipSync(body).toString('utf8')) as ManifestSnapshot;
      if (snapshot.version !== 1 || !Array.isArray(snapshot.manifests)) return null;
      if (snapshot.checkpoints) await this.adoptCheckpoints(snapshot.checkpoints);
      return new Map(snapshot.manifests.map((m) => [m.partition, m.body]));
    } catch (err) {
      this.log.warn({ bucket: this.s3.config.bucket, error: describe(err) }, 'manifests snapshot not read; each manifest is fetched');
      return null;
    }
  }

  /** A replica with checkpoints of its own keeps them; a new one starts from capture's. */
  private async adoptCheckpoints(checkpoints: NonNullable<ManifestSnapshot['checkpoints']>): Promise<void> {
    for (const [name, text] of [
      [CATALOGUE_CHECKPOINT, checkpoints.catalogue],
      [GAPS_CHECKPOINT, checkpoints.gaps],
    ] as const) {
      const file = path.join(this.paths.state, name);
      if (!(await fs.stat(file).catch(() => null))) await writeFileAtomic(file, text);
    }
  }

  /**
   * `etag` as the listing gave it; after a commit object, the MD5 of the body (S3's ETag of a
   * single-part upload). The snapshot's bytes are taken only when they are that ETag's: the
   * manifest the bucket holds now, not the one capture held when it wrote the snapshot.
   */
  private async bringManifest(p: Partition, etag?: string, snapshot?: string): Promise<void> {
    const fromSnapshot = snapshot !== undefined && etag !== undefined && md5(Buffer.from(snapshot)) === etag;
    const body = fromSnapshot ? Buffer.from(snapshot) : await this.s3.get(manifestKey(this.s3.config.prefix, p));
    if (!body) return;
    await adoptManifest(this.paths.manifest, p, JSON.parse(body.toString('utf8')) as PartitionManifest);
    this.state.etags[partitionDir(p)] = etag ?? md5(body);
    if (fromSnapshot) this.manifestsFromSnapshot++;
    else this.manifestsFetched++;
  }

  /**
   * Makes sure `files` are on this disk, fetching those that are not (one fetch per file however
   * many requests want it). Throws ObjectUnavailable when the bucket cannot give one.
   */
  async ensure(files: readonly Pick<IndexedFile, 'path' | 'bytes' | 'sha256'>[]): Promise<void> {
    const now = this.now();
    const missing: Pick<IndexedFile, 'path' | 'bytes' | 'sha256'>[] = [];
    // Another worker of a cluster shares this directory: it may have evicted a file this one holds,
    // or fetched one this one has not counted yet (the directory, not this map, says what is there).
    const present = await Promise.all(
      files.map((f) =>
        fs.access(path.join(this.paths.lake, f.path)).then(
          () => true,
          () => false,
        ),
      ),
    );
    const onDisk = new Set<string>();
    files.forEach((f, i) => {
      const c = this.cached.get(f.path);
      if (present[i]) onDisk.add(f.path);
      if (c && c.bytes === f.bytes && present[i]) {
        c.usedAt = now;
        if (now - c.touchedAt >= TOUCH_MS) void this.touch(f.path, c, now);
      } else missing.push(f);
    });
    if (!missing.length) return;
    let next = 0;
    const failures: unknown[] = [];
    await Promise.all(
      Array.from({ length: Math.min(FETCH_PARALLEL, missing.length) }, async () => {
        while (next < missing.length) {
          const f = missing[next++];
          let fetch = this.fetching.get(f.path);
          if (!fetch) {
            fetch = (onDisk.has(f.path) ? this.adopt(f) : this.fetch(f)).finally(() => this.fetching.delete(f.path));
            this.fetching.set(f.path, fetch);
          }
          await fetch.catch((err: unknown) => failures.push(err));
        }
      }),
    );
    if (failures.length) throw failures[0];
    this.evictBehind();
  }

  /**
   * A file on disk this process has not counted: another worker of the cluster fetched it (the
   * cache directory is shared, and only a verified download is ever renamed into place). Taken
   * when its size and sha256 are the manifest's, without a download, so it is served while the
   * bucket is down; anything else is fetched as if absent.
   */
  private async adopt(f: Pick<IndexedFile, 'path' | 'bytes' | 'sha256'>): Promise<void> {
    const file = path.join(this.paths.lake, f.path);
    const digest = await sha256Of(file, f.bytes);
    if (digest !== f.sha256) return this.fetch(f);
    await this.remember(f);
    this.adopted++;
  }

  private async fetch(f: Pick<IndexedFile, 'path' | 'bytes' | 'sha256'>): Promise<void> {
    const key = dataKey(this.s3.config.prefix, f.path);
    try {
      const found = await this.s3.download(key, path.join(this.paths.lake, f.path), { size: f.bytes, sha256: f.sha256 });
      if (!found) throw new S3Error(404, 'NoSuchKey', `${key} is not in the bucket`);
    } catch (err) {
      this.fetchErrors++;
      this.log.warn({ key, error: describe(err) }, 'sealed file not fetched');
      throw new ObjectUnavailable(describe(err));
    }
    await this.remember(f);
    this.fetched++;
  }

  /** A verified file on disk, counted in this process's cache and marked used. */
  private async remember(f: Pick<IndexedFile, 'path' | 'bytes'>): Promise<void> {
    const old = this.cached.get(f.path);
    if (old) this.cachedBytes -= old.bytes + (old.copy?.bytes ?? 0);
    const now = this.now();
    const c: Cached = { bytes: f.bytes, usedAt: now, touchedAt: now };
    this.cached.set(f.path, c);
    this.cachedBytes += f.bytes;
    await this.touch(f.path, c, now);
  }

  /** A serving copy written of a cached file: it counts toward the bound and goes when the file does. */
  copyWritten(rel: string, sha256: string, bytes: number): void {
    const c = this.cached.get(rel);
    if (!c) return;
    this.cachedBytes += bytes - (c.copy?.bytes ?? 0);
    c.copy = { sha256, bytes };
    this.evictBehind();
  }

  /** Eviction after a fetch, not awaited by the request: a file it cannot remove is logged, never a crash. */
  private evictBehind(): void {
    this.evict().catch((err: unknown) => this.log.warn({ error: describe(err) }, 'cache eviction failed'));
  }

  /**
   * Least recently used first, down to the bound. Kept whatever the size: a file a request in flight
   * may read, one used within MIN_IDLE_MS, and one whose mtime says another worker used it lately.
   */
  evict(): Promise<void> {
    if (this.cachedBytes <= this.maxBytes) return Promise.resolve();
    this.evicting ??= this.evictOnce().finally(() => {
      this.evicting = null;
    });
    return this.evicting;
  }

  private async evictOnce(): Promise<void> {
    const now = this.now();
    const byAge = [...this.cached].sort((a, b) => a[1].usedAt - b[1].usedAt);
    for (const [rel, c] of byAge) {
      if (this.cachedBytes <= this.maxBytes || now - c.usedAt < MIN_IDLE_MS) break;
      if (this.fetching.has(rel) || this.held(c)) continue;
      const file = path.join(this.paths.lake, rel);
      const mtime = await fs.stat(file).then(
        (st) => st.mtimeMs,
        () => null,
      );
      // Another worker sharing the directory evicted it: no longer this process's to count.
      if (mtime === null) {
        if (this.cached.get(rel) === c && !this.fetching.has(rel)) {
          this.cached.delete(rel);
          this.cachedBytes -= c.bytes + (c.copy?.bytes ?? 0);
          if (c.copy) await fs.rm(servingCopyPath(this.paths.serving, c.copy.sha256), { force: true });
        }
        continue;
      }
      // Checked again after the stat: a request may have begun using it meanwhile.
      if (now - mtime < MIN_IDLE_MS || this.cached.get(rel) !== c || now - c.usedAt < MIN_IDLE_MS || this.held(c)) continue;
      this.cached.delete(rel);
      this.cachedBytes -= c.bytes + (c.copy?.bytes ?? 0);
      this.evicted++;
      // Unlinked, not truncated: a reader that has it open keeps its bytes.
      await fs.rm(file, { force: true });
      if (c.copy) await fs.rm(servingCopyPath(this.paths.serving, c.copy.sha256), { force: true });
    }
  }
}

/** The sha256 of a file, or null when it is not `bytes` long (or not there). */
async function sha256Of(file: string, bytes: number): Promise<string | null> {
  const st = await fs.stat(file).catch(() => null);
  if (!st || st.size !== bytes) return null;
  const hash = createHash('sha256');
  try {
    await pipeline(createReadStream(file), hash);
  } catch {
    return null;
  }
  return hash.digest('hex');
}

function md5(body: Buffer): string {
  return createHash('md5').update(body).digest('hex');
}

function commitTime(key: string): number {
  return Number(/_commits\/(\d{15})-/.exec(key)?.[1] ?? 0);
}
