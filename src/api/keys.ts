// API keys: `pmh_` + 32 base62 characters, shown once at issue. Only a SHA-256 of each key is
// stored; a presented key is hashed and looked up by that hash. The lookup needs no constant-time
// compare: what its timing could leak is about the hash of the attacker's own guess, which says
// nothing about any stored key, and a map keeps the check O(1) however many keys exist.
// The file is re-read when it changes, so keys issued or revoked by the CLI apply at once.
import { createHash, randomBytes, randomInt } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { readJson, writeFileAtomic } from '../lake/fsutil.js';

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

export class KeyStore {
  private records: KeyRecord[] = [];
  /** Active records by hash, rebuilt at each load. */
  private active = new Map<string, KeyRecord>();
  private loadedMtime = -1;
  private checkedAt = 0;

  constructor(readonly file: string) {}

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
    const mtime = await fs.stat(this.file).then(
      (s) => s.mtimeMs,
      () => 0,
    );
    if (mtime !== this.loadedMtime || force) {
      this.records = (await readJson<KeyRecord[]>(this.file)) ?? [];
      this.index();
      this.loadedMtime = mtime;
    }
    this.checkedAt = Date.now();
  }

  async issue(plan: Plan, label: string): Promise<{ key: string; record: KeyRecord }> {
    await this.refresh(true);
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
    this.records.push(record);
    this.index();
    await writeFileAtomic(this.file, JSON.stringify(this.records, null, 1));
    return { key, record };
  }

  async list(): Promise<KeyRecord[]> {
    await this.refresh(true);
    return this.records;
  }

  async revoke(keyId: string): Promise<boolean> {
    await this.refresh(true);
    const record = this.records.find((r) => r.key_id === keyId && !r.revoked_at);
    if (!record) return false;
    record.revoked_at = new Date().toISOString();
    this.index();
    await writeFileAtomic(this.file, JSON.stringify(this.records, null, 1));
    return true;
  }

  /** The active record of a presented key, or null. */
  async find(key: string): Promise<KeyRecord | null> {
    await this.refresh();
    return this.active.get(hash(key)) ?? null;
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
