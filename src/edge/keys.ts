// API keys: `pmh_` + 32 base62 characters, shown once at issue. Only a SHA-256 of each key is
// stored; a presented key is hashed and looked up by that hash. The lookup needs no constant-time
// compare: what its timing could leak is about the hash of the attacker's own guess, which says
// nothing about any stored key, and a map keeps the check O(1) however many keys exist.
// The file is re-read when it changes, so keys issued or revoked by the CLI apply at once.
import { createHash, randomBytes, randomInt } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { describe } from '../bucket/publish.js';
import { ObjectUnavailable } from '../bucket/replica.js';
import { S3, S3Error } from '../bucket/s3.js';
import type { Config } from '../config.js';
import { readJson, writeFileAtomic } from '../lake/fsutil.js';
import { alive } from '../lake/lock.js';
import type { Logger } from '../log.js';

export type Plan = 'free' | 'paid';
export const PLANS: readonly Plan[] = ['free', 'paid'];
export const KEY_RE = /^pmh_[0-9A-Za-z]{32}$/;
const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

export interface KeyRecord {
  key_id: string;
  hash: string;
  plan: Plan;
  label: string;
  created_at: string;
  revoked_at: string | null;
}

/** Where the records live: a file on this disk, or one object in a bucket every API server reads. */
interface KeyBackend {
  /** Answering from memory while a read runs behind: a read of the store costs a round trip. */
  readonly remote: boolean;
  /** The records, unless they are still those of `version` (null: read them whatever). */
  read(version: string | null): Promise<{ records: KeyRecord[]; version: string } | 'unchanged'>;
  /** Writes `records` if the store is still at `version`; null when someone wrote in between. */
  write(records: KeyRecord[], version: string | null): Promise<string | null>;
}

class FileKeys implements KeyBackend {
  readonly remote = false;
  constructor(private readonly file: string) {}

  /** The file's inode and time: a write replaces the file (a rename), so both change with every write. */
  private async versionOf(): Promise<string> {
    const stat = await fs.stat(this.file).catch(() => null);
    return stat ? `${stat.ino}:${stat.mtimeMs}` : '0';
  }

  async read(version: string | null): Promise<{ records: KeyRecord[]; version: string } | 'unchanged'> {
    const now = await this.versionOf();
    if (now === version) return 'unchanged';
    return { records: (await readJson<KeyRecord[]>(this.file)) ?? [], version: now };
  }

  /**
   * Writes if the file is still at `version`, under a lock file taken with O_EXCL: two processes
   * issuing keys at once (two `make key`, or servers started together) would otherwise both write
   * over the records they read, and one key printed would not be there (seen: a 401 for a key
   * `make bench-compare`'s second server had just issued). Null: try again from a fresh read.
   */
  async write(records: KeyRecord[], version: string | null): Promise<string | null> {
    const lock = `${this.file}.lock`;
    await fs.mkdir(path.dirname(this.file), { recursive: true });
    const taken = await fs.writeFile(lock, String(process.pid), { flag: 'wx' }).then(
      () => true,
      (err: NodeJS.ErrnoException) => {
        if (err.code !== 'EEXIST') throw err;
        return false;
      },
    );
    if (!taken) {
      // Left by a process that died holding it (or before it wrote its pid): removed, and the write tried again.
      const holder = Number(await fs.readFile(lock, 'utf8').catch(() => '0'));
      const age = Date.now() - ((await fs.stat(lock).catch(() => null))?.mtimeMs ?? Date.now());
      if (holder ? !alive(holder) : age > 10_000) await fs.rm(lock, { force: true });
      return null;
    }
    try {
      if (version !== null && (await this.versionOf()) !== version) return null;
      await writeFileAtomic(this.file, JSON.stringify(records, null, 1));
      return await this.versionOf();
    } finally {
      await fs.rm(lock, { force: true });
    }
  }
}

/**
 * The key store as one object in a bucket, so API servers on any machine share keys without a
 * shared disk. Read with If-None-Match (a 304 while nothing changed), written with If-Match, so two
 * operators issuing keys at once never lose one. The last records read are kept in `copy`, which a
 * server starting while the bucket is down reads instead.
 */
class BucketKeys implements KeyBackend {
  readonly remote = true;
  private failing = false;

  constructor(
    private readonly s3: S3,
    private readonly key: string,
    private readonly copy: string,
    private readonly log?: Logger,
  ) {}

  async read(version: string | null): Promise<{ records: KeyRecord[]; version: string } | 'unchanged'> {
    let found: Awaited<ReturnType<S3['read']>>;
    try {
      found = await this.s3.read(this.key, version ?? undefined);
      if (this.failing) this.log?.info({ bucket: this.s3.config.bucket }, 'key store readable again');
      this.failing = false;
    } catch (err) {
      if (!this.failing)
        this.log?.warn({ bucket: this.s3.config.bucket, error: describe(err) }, 'key store not read; the keys last read stay');
      this.failing = true;
      if (version !== null) return 'unchanged';
      // Nothing read yet in this process: the copy of the last records read, if there is one.
      const kept = await readJson<KeyRecord[]>(this.copy);
      if (kept) return { records: kept, version: STALE };
      throw new ObjectUnavailable(`key store: ${describe(err)}`);
    }
    if (found === 'unchanged' || (found === null && version === ABSENT)) return 'unchanged';
    if (found === null) return this.seed(version);
    const records = JSON.parse(found.body.toString('utf8')) as KeyRecord[];
    // The copy is only for a start while the bucket is down: a disk that refuses it never holds fresh records back.
    await writeFileAtomic(this.copy, found.body).catch((err: unknown) =>
      this.log?.warn({ error: describe(err) }, 'local copy of the key store not written'),
    );
    return { records, version: found.etag };
  }

  /**
   * No store in the bucket yet. When `copy` holds keys (the KEYS_FILE of a server that ran before
   * KEYS_OBJECT was set, or a copy of a store since deleted), they become the store, never replaced by
   * an empty one: turning KEYS_OBJECT on keeps every issued key. If another server seeded it first, its store is read.
   */
  private async seed(asked: string | null): Promise<{ records: KeyRecord[]; version: string } | 'unchanged'> {
    const kept = (await readJson<KeyRecord[]>(this.copy)) ?? [];
    if (!kept.length) return { records: [], version: ABSENT };
    const version = await this.write(kept, ABSENT);
    // Seeded by another server meanwhile (or refused): read next time, these kept until then.
    if (version === null) return asked === null ? { records: kept, version: STALE } : 'unchanged';
    this.log?.info({ bucket: this.s3.config.bucket, keys: kept.length }, 'key store seeded from KEYS_FILE');
    return { records: kept, version };
  }

  async write(records: KeyRecord[], version: string | null): Promise<string | null> {
    if (version === STALE) throw new Error('the key store in the bucket cannot be read: nothing was changed');
    try {
      const body = Buffer.from(JSON.stringify(records, null, 1));
      const etag = await this.s3.put(
        this.key,
        body,
        {},
        version === ABSENT || version === null ? { ifNoneMatch: '*' } : { ifMatch: version },
      );
      await writeFileAtomic(this.copy, body).catch((err: unknown) =>
        this.log?.warn({ error: describe(err) }, 'local copy of the key store not written'),
      );
      return etag;
    } catch (err) {
      // 412: written in between. RGW answers a conditional write that raced another with a 500
      // instead: both are read again and retried (a write that did land is found by that read).
      if (err instanceof S3Error && (err.status === 412 || err.status === 409 || err.status === 500 || err.status === 503)) return null;
      throw err;
    }
  }
}

/** The versions of a bucket store that is not there yet, and of records read from the local copy (never written back). */
const ABSENT = 'absent';
const STALE = 'stale';

export class KeyStore {
  private records: KeyRecord[] = [];
  /** Active records by hash, rebuilt at each load. */
  private active = new Map<string, KeyRecord>();
  private version: string | null = null;
  private checkedAt = 0;
  private readonly backend: KeyBackend;

  /** `file`: the store, or with `bucket` the local copy of the one in the bucket. */
  constructor(
    readonly file: string,
    bucket?: { s3: S3; key: string; log?: Logger },
  ) {
    this.backend = bucket ? new BucketKeys(bucket.s3, bucket.key, file, bucket.log) : new FileKeys(file);
  }

  /** The store the configuration names: KEYS_OBJECT in the bucket (KEYS_FILE its local copy), or KEYS_FILE. */
  static open(config: Pick<Config, 'keysFile' | 'keysObject' | 'bucket'>, log?: Logger): KeyStore {
    return config.keysObject && config.bucket
      ? new KeyStore(config.keysFile, { s3: new S3(config.bucket), key: config.keysObject, log })
      : new KeyStore(config.keysFile);
  }

  static at(dataDir: string): KeyStore {
    return new KeyStore(path.join(dataDir, 'state', 'keys.json'));
  }

  private refreshing: Promise<void> | null = null;

  /** Concurrent callers share one read, so none sees the store before its first load. */
  private refresh(force = false): Promise<void> {
    if (this.refreshing) return this.refreshing;
    if (!force && Date.now() - this.checkedAt < 1000) return Promise.resolve();
    this.refreshing = this.reload(force).finally(() => {
      this.refreshing = null;
    });
    return this.refreshing;
  }

  private async reload(force: boolean): Promise<void> {
    const read = await this.backend.read(force ? null : this.version);
    if (read !== 'unchanged') {
      this.records = read.records;
      this.version = read.version;
      this.index();
    }
    this.checkedAt = Date.now();
  }

  /** Reads the store, applies `change` and writes it back; again from a fresh read if another writer came in between. */
  private async change<T>(change: (records: KeyRecord[]) => { records: KeyRecord[]; result: T }): Promise<T> {
    // Each round lets at least one of the writers racing through: room for a dozen at once (a burst of `make key`).
    for (let attempt = 0; attempt < 64; attempt++) {
      await this.refresh(true);
      const { records, result } = change(this.records.map((r) => ({ ...r })));
      if (records === this.records) return result;
      const version = await this.backend.write(records, this.version);
      if (version === null) {
        // Apart again before the next try: two writers that raced would otherwise race again.
        await new Promise((r) => setTimeout(r, 10 + randomInt(90)));
        continue;
      }
      this.records = records;
      this.version = version;
      this.index();
      return result;
    }
    throw new Error('the key store kept changing under this write: try again');
  }

  async issue(plan: Plan, label: string): Promise<{ key: string; record: KeyRecord }> {
    let key = 'pmh_';
    for (let i = 0; i < 32; i++) key += BASE62[randomInt(62)];
    const record: KeyRecord = {
      key_id: `key_${randomBytes(6).toString('hex')}`,
      hash: hash(key),
      plan,
      label,
      created_at: new Date().toISOString(),
      revoked_at: null,
    };
    await this.change((records) =>
      // Already there: a write this process retried had landed.
      records.some((r) => r.key_id === record.key_id)
        ? { records: this.records, result: undefined }
        : { records: [...records, record], result: undefined },
    );
    return { key, record };
  }

  async list(): Promise<KeyRecord[]> {
    await this.refresh(true);
    return this.records;
  }

  async revoke(keyId: string): Promise<boolean> {
    const at = new Date().toISOString();
    return this.change((records) => {
      const record = records.find((r) => r.key_id === keyId);
      // Revoked at this call's time: a write this process retried had landed.
      if (record?.revoked_at === at) return { records: this.records, result: true };
      if (!record || record.revoked_at) return { records: this.records, result: false };
      record.revoked_at = at;
      return { records, result: true };
    });
  }

  /**
   * The active record of a presented key, or null. From a bucket, a key already known is answered
   * at once while the store is read behind (a revocation reaches every server within about a
   * second); an unknown one waits for that read, at most one a second however many are presented.
   */
  async find(key: string): Promise<KeyRecord | null> {
    const h = hash(key);
    if (this.backend.remote && this.version !== null) {
      const known = this.active.get(h);
      if (known) {
        this.refresh().catch(() => undefined);
        return known;
      }
    }
    await this.refresh();
    return this.active.get(h) ?? null;
  }

  private index(): void {
    this.active = new Map(this.records.filter((r) => !r.revoked_at).map((r) => [r.hash, r]));
  }
}

function hash(key: string): string {
  return createHash('sha256').update(key).digest('hex');
}

/**
 * The key `make run` prints: issued once and kept in a 0600 file beside the key store (which
 * still holds only its hash), so restarts reuse it instead of piling up keys. A key that was
 * revoked, or a file that was tampered with, gets a new one.
 */
export async function runKey(store: KeyStore, dataDir: string): Promise<{ key: string; issued: boolean }> {
  const file = path.join(dataDir, 'state', 'run-key');
  const kept = (await fs.readFile(file, 'utf8').catch(() => '')).trim();
  if (KEY_RE.test(kept) && (await store.find(kept))?.plan === 'paid') return { key: kept, issued: false };
  const { key } = await store.issue('paid', 'make run');
  await writeFileAtomic(file, key, 0o600);
  return { key, issued: true };
}
