// The spool's keeper: the one place that decides what capture keeps, drops and gaps for storage.
// Rows are buffered and fsynced each flush; while the disk fails they stay buffered, retried with
// backoff, up to a bound. Past it new rows are dropped, and each market's span of dropped rows is
// one `storage` gap, from its first dropped row to its first kept one. Nothing is invented.
import type { Market } from '../records.js';
import type { Logger } from '../log.js';
import type { Spool } from '../lake/spool.js';
import { type GapLedger, gapKey, scopeOf } from './gaps.js';
import { backoffMs } from '../time.js';

/** Failing storage is retried after this, doubling up to the cap. */
const RETRY_MIN_MS = 250;
const RETRY_MAX_MS = 10_000;

export interface StorageHealth {
  failing: boolean;
  last_flush: string | null;
  storage_error: string | null;
  buffered_rows: number;
  dropped_rows: number;
}

export class SpoolKeeper {
  /** Wall time of the last flush that saved everything buffered. */
  lastFlushAt: number | null = null;
  /** Set while the spool cannot be written. */
  private storage: { since: number; attempts: number; retryAt: number; error: string } | null = null;
  private dropped = 0;

  constructor(
    readonly spool: Spool,
    private readonly maxBufferBytes: number,
    private readonly gaps: GapLedger,
    private readonly log: Logger,
  ) {}

  /** Whether the flush timer should try now: while storage fails, attempts back off instead of hammering the disk. */
  get due(): boolean {
    return !this.storage || Date.now() >= this.storage.retryAt;
  }

  /**
   * Whether `rows` rows of `m`'s `dataset` stamped `ts` may be buffered. Past the bound (storage
   * failing for long) they are dropped under the market's storage gap, which its next kept row ends.
   */
  keeps(m: Market, dataset: 'books' | 'metrics' | 'trades', ts: number, rows: number): boolean {
    // Called on every streamed change: a gap's key is made only while rows are being dropped. A late
    // row stamped inside a storage gap that ended with its market is not kept.
    if (this.gaps.insideEnded(m, dataset, ts)) {
      this.dropped += rows;
      return false;
    }
    if (this.spool.bufferedBytes < this.maxBufferBytes) {
      if (this.gaps.dropping) {
        const open = this.gaps.get(gapKey({ ...scopeOf(m), dataset, channel: 'storage' }));
        // Proofs and REST successes, which end other gaps, do not end this one: only a kept row does.
        if (open) this.gaps.close(open, Math.max(ts, open.from_ts + 1));
      }
      return true;
    }
    this.dropped += rows;
    this.gaps.fail({ ...scopeOf(m), dataset, channel: 'storage' }, ts, {
      kind: 'storage',
      message: `spool storage failing (${this.storage?.error ?? 'buffer full'}); rows not kept`,
    });
    return false;
  }

  /**
   * Writes and fsyncs what is buffered; the wall time it was all saved, or null while the disk
   * refuses it. Never throws: a failing disk is logged once when it starts and once when it recovers.
   */
  async flush(): Promise<number | null> {
    try {
      await this.spool.flush();
    } catch (err) {
      this.failed(err as NodeJS.ErrnoException);
      return null;
    }
    this.lastFlushAt = Date.now();
    if (this.storage) {
      this.log.warn(
        { failed_for_ms: this.lastFlushAt - this.storage.since, attempts: this.storage.attempts, dropped_rows: this.dropped },
        'spool storage recovered; buffered rows saved',
      );
      this.storage = null;
    }
    return this.lastFlushAt;
  }

  health(): StorageHealth {
    return {
      failing: this.storage !== null,
      last_flush: this.lastFlushAt === null ? null : new Date(this.lastFlushAt).toISOString(),
      storage_error: this.storage?.error ?? null,
      buffered_rows: this.spool.bufferedRows,
      dropped_rows: this.dropped,
    };
  }

  private failed(err: NodeJS.ErrnoException): void {
    const now = Date.now();
    const error = `${err.code ?? 'ERROR'}: ${String(err.message).slice(0, 200)}`;
    if (!this.storage) {
      this.storage = { since: now, attempts: 0, retryAt: now, error };
      this.log.error(
        { err: { code: err.code, message: err.message }, buffered_rows: this.spool.bufferedRows, limit_bytes: this.maxBufferBytes },
        'spool storage failing; rows stay buffered and are retried',
      );
    }
    this.storage.attempts++;
    this.storage.error = error;
    this.storage.retryAt = now + backoffMs(this.storage.attempts, RETRY_MIN_MS, RETRY_MAX_MS);
  }
}
