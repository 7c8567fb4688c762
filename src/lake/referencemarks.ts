// What the sealed reference files say around every 5-minute boundary (each market window starts and
// ends on one): per feed and 5-minute bucket, its first observation (time and price) and its last.
// The first of a bucket is the first at or after the boundary that opens it, the last of the bucket
// before is the one before that boundary: all a window's open and close need, held in memory
// (two feeds of five coins: 24 marks a coin-hour). Each sealed file is read once, kept by path and
// sha256 and in a checkpoint, as the gaps are (gaplog.ts).
import path from 'node:path';
import type { Duck } from './duckdb.js';
import type { FileIndex, IndexedFile } from './fileindex.js';
import { fileCheckpointText, readFileCheckpoint, writeFileAtomic } from './fsutil.js';
import type { LakePaths } from './layout.js';
import { parquetSource } from './sql.js';
import { MINUTE } from '../time.js';

/** Below DATA_DIR/state. */
export const MARKS_CHECKPOINT = 'reference-marks.ndjson';
export const MARK_BUCKET_MS = 5 * MINUTE;

export interface Mark {
  /** `<source>:<symbol>`. */
  feed: string;
  /** Start of the bucket, epoch ms (a multiple of MARK_BUCKET_MS). */
  bucket: number;
  first_t: number;
  first_p: number;
  last_t: number;
}

/** Around the boundary `t`: the feed's first observation at or after it, and the time of its last before it (sealed files only). */
export interface Around {
  first: { ts: number; price: number } | null;
  before: number | null;
}

export class ReferenceMarks {
  /** Each sealed file's marks, by `path@sha256`. */
  private readonly sealed = new Map<string, Mark[]>();
  private merged = new Map<string, Mark>();
  private signature = '';
  private checkpointRead = false;

  constructor(
    private readonly paths: LakePaths,
    private readonly duck: Duck,
    private readonly index: FileIndex,
    private readonly ensure: (files: readonly IndexedFile[]) => Promise<void>,
  ) {}

  private get checkpointFile(): string {
    return path.join(this.paths.state, MARKS_CHECKPOINT);
  }

  /** Reads the reference files sealed since the last load; returns how many. */
  async load(): Promise<number> {
    const files = this.index.all().filter((f) => f.partition.dataset === 'reference');
    const signature = files.map((f) => f.sha256).join(',');
    if (signature === this.signature) return 0;
    if (!this.checkpointRead) await this.readCheckpoint();
    const current = new Set(files.map(fileKey));
    for (const key of this.sealed.keys()) if (!current.has(key)) this.sealed.delete(key);
    const unread = files.filter((f) => !this.sealed.has(fileKey(f)));
    for (let i = 0; i < unread.length; i += 2000) {
      const chunk = unread.slice(i, i + 2000);
      await this.ensure(chunk);
      const byPath = new Map(chunk.map((f) => [f.path, { key: fileKey(f), marks: [] as Mark[] }]));
      const rows = await this.duck.rows(
        `SELECT filename, source || ':' || symbol AS feed, (epoch_ms(ts) // ${MARK_BUCKET_MS})::DOUBLE * ${MARK_BUCKET_MS} AS bucket,
           min(epoch_ms(ts))::DOUBLE AS first_t, arg_min(price, ts) AS first_p, max(epoch_ms(ts))::DOUBLE AS last_t
         FROM ${parquetSource(
           chunk.map((f) => path.join(this.paths.lake, f.path)),
           'filename = true',
         )} GROUP BY ALL`,
      );
      for (const r of rows) {
        const file = byPath.get(path.relative(this.paths.lake, String(r.filename)).split(path.sep).join('/'));
        file?.marks.push({
          feed: String(r.feed),
          bucket: Number(r.bucket),
          first_t: Number(r.first_t),
          first_p: Number(r.first_p),
          last_t: Number(r.last_t),
        });
      }
      for (const { key, marks } of byPath.values()) this.sealed.set(key, marks);
    }
    // Two files of one hour (a compaction's, a backfill's) hold one bucket together: its first is the earliest, its last the latest.
    const merged = new Map<string, Mark>();
    for (const marks of this.sealed.values())
      for (const m of marks) {
        const key = `${m.feed}@${m.bucket}`;
        const had = merged.get(key);
        if (!had) merged.set(key, { ...m });
        else {
          if (m.first_t < had.first_t) Object.assign(had, { first_t: m.first_t, first_p: m.first_p });
          had.last_t = Math.max(had.last_t, m.last_t);
        }
      }
    this.merged = merged;
    this.signature = signature;
    return unread.length;
  }

  around(feed: string, t: number): Around {
    if (t % MARK_BUCKET_MS !== 0) return { first: null, before: null };
    const mark = this.merged.get(`${feed}@${t}`);
    return {
      first: mark ? { ts: mark.first_t, price: mark.first_p } : null,
      before: this.merged.get(`${feed}@${t - MARK_BUCKET_MS}`)?.last_t ?? null,
    };
  }

  /** The feed's first and last observation in the bucket starting at `bucket`, if it has any. */
  mark(feed: string, bucket: number): Mark | undefined {
    return this.merged.get(`${feed}@${bucket}`);
  }

  private async readCheckpoint(): Promise<void> {
    this.checkpointRead = true;
    await readFileCheckpoint(this.checkpointFile, 'marks', this.sealed);
  }

  async writeCheckpoint(): Promise<void> {
    await writeFileAtomic(this.checkpointFile, fileCheckpointText(this.sealed, 'marks'));
  }
}

function fileKey(f: IndexedFile): string {
  return `${f.path}@${f.sha256}`;
}
