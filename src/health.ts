// What processes report of themselves to each other and to /v3/health: capture's health (its
// spool, seal and publishing) and its feed's answer. Shared by capture, the bucket replicas and
// the API, so it sits on the floor under all three.
import type { LatestBook, Market } from './records.js';

/** What `/v3/health` reports of publishing. */
export interface PublishHealth {
  bucket: string;
  /** Partitions committed locally and not yet in the bucket. */
  backlog_partitions: number;
  /** Since when the oldest of them waits (the first failed pass), or null. */
  waiting_since: string | null;
  last_published_at: string | null;
  last_error: string | null;
  files_put: number;
  /** When the manifests snapshot a new replica starts from was last written, or null. */
  snapshot_at: string | null;
  snapshot_error: string | null;
}

/** What `/v3/health` reports of capture. */
export interface CaptureHealth {
  state: 'running' | 'failing' | 'stopped';
  last_flush: string | null;
  flush_age_ms: number | null;
  storage_error: string | null;
  buffered_rows: number;
  dropped_rows: number;
  seal_backlog: number;
  seal_error: string | null;
  /** Publishing to the bucket, when there is one. */
  publish?: PublishHealth;
}

/** What `GET /latest?after=<seq>` answers. */
export interface FeedAnswer {
  /** The feed's process, and its count of changes: pass both (`feed`, `after`) next time. */
  feed: string;
  seq: number;
  health: CaptureHealth;
  /** Capture's newest version of every market whose version changed after `after`, with when it was captured (`ts`). */
  markets: (Market & { ts: number })[];
  /** `<venue>:<market_id>` and its newest book, for every book changed after `after`. */
  books: [string, LatestBook][];
}
