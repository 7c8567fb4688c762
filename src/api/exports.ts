// Exports (format=csv|parquet): DuckDB COPYs into a temporary file on a connection of its own,
// and the response streams that file while it grows.
//
// Why not a named pipe: a COPY into a pipe blocks on the slowest client, and each blocked COPY
// (and each pending open of a pipe) holds one of libuv's few threadpool threads; four of them
// stalled every query and capture's fsync. A file lets the COPY finish at disk speed whatever
// the client does, and only a bounded number of exports exist at once: beyond the pool, 503
// with Retry-After, before any work. An export is admitted by its slot alone, not by the page
// admission (api/admission.ts): its COPY runs on a lane of its own, and a page queued behind
// exports waiting for their first bytes was shed on a busy machine. A reader that takes less than
// a minimum rate while bytes wait for it, for a sustained time, is cut off, so two stalled clients
// cannot hold the slots for as long as their sockets stay open. The file is removed on every exit path (done, failed, client gone, too
// slow), and the export directory is emptied at start for what a crash left.
import fs from 'node:fs/promises';
import { Readable } from 'node:stream';
import type { Duck, Params } from '../lake/duckdb.js';
import { fail } from '../edge/errors.js';

/** How often a stream looks for bytes the COPY has written since. */
const POLL_MS = 20;
const CHUNK = 256 * 1024;

/** The slowest reader an export keeps: below `bytesPerSecond` over `windowMs` while bytes wait, it is cut off. */
export interface MinimumRate {
  bytesPerSecond: number;
  windowMs: number;
}

export class ExportPool {
  private active = 0;
  private readonly idle: Duck[];
  /** Exports cut off for reading too slowly. */
  slowReaders = 0;

  private constructor(
    readonly size: number,
    lanes: Duck[],
    private readonly minRate: MinimumRate,
  ) {
    this.idle = lanes;
  }

  static async open(duck: Duck, size: number, minRate: MinimumRate): Promise<ExportPool> {
    return new ExportPool(size, await Promise.all(Array.from({ length: size }, () => duck.fork(1))), minRate);
  }

  get inUse(): number {
    return this.active;
  }

  /** Holds a slot, or refuses at once when every one is held. `release` is idempotent. */
  reserve(): { release: () => void } {
    if (this.active >= this.size) {
      fail('UNAVAILABLE', `All ${this.size} export slots are busy; retry in a few seconds`, [], { 'Retry-After': '2' });
    }
    this.active++;
    let released = false;
    return {
      release: () => {
        if (released) return;
        released = true;
        this.active--;
      },
    };
  }

  /**
   * Starts `COPY (<sql>) TO <file>` on a reserved slot and resolves once the file is worth
   * streaming (bytes written, or the COPY done). A COPY that fails first throws, so the caller
   * still sends a clean error. The slot is held until every byte is read from the file, or else
   * the stream closes and the COPY has ended (released on every path, the file removed after);
   * the connection until the COPY ends.
   */
  async start(
    slot: { release: () => void },
    file: string,
    copy: string,
    params: Params,
    signal: AbortSignal,
  ): Promise<{ stream: Readable; rows: Promise<number> }> {
    // As many lanes as slots, and a slot is held until its COPY has ended: a held slot always finds a lane.
    const lane = this.idle.pop()!;
    /** Settles once the lane is back in the pool, after its COPY has ended. */
    let copying: Promise<void> | null = null;
    // The file goes once the COPY is over (removed sooner, a COPY still opening it would make it anew).
    const release = () =>
      void (copying ?? Promise.resolve()).then(() => {
        slot.release();
        return fs.rm(file, { force: true });
      });
    try {
      await fs.writeFile(file, '', { mode: 0o600 });
      const handle = await fs.open(file, 'r');
      const rows = lane.for(signal).run(copy, params);
      const settled = rows.then(
        () => null,
        (err: unknown) => err as Error,
      );
      copying = settled.then(() => void this.idle.push(lane));
      // The slot is free once every byte is read from the file, before the client has the last of
      // them: one export after another never finds it still held.
      const stream = new GrowingFile(handle, settled, slot.release, release, this.minRate, () => this.slowReaders++);
      const first = await Promise.race([stream.waitForBytes(), settled]);
      if (first instanceof Error) {
        stream.destroy();
        throw first;
      }
      return { stream, rows };
    } catch (err) {
      if (!copying) this.idle.push(lane);
      release();
      throw err;
    }
  }
}

/** Why an export ended early: its reader took too little for too long. */
export class SlowReader extends Error {
  override name = 'SlowReader';
  readonly code = 'EXPORT_READER_TOO_SLOW';
}

/** A file another writer is still appending to: ends when the writer is done and every byte is read. */
class GrowingFile extends Readable {
  private at = 0;
  private done: Error | null | undefined = undefined;
  private readonly watchdog: NodeJS.Timeout;

  constructor(
    private readonly handle: fs.FileHandle,
    settled: Promise<Error | null>,
    private readonly onRead: () => void,
    private readonly onClose: () => void,
    minRate: MinimumRate,
    onSlow: () => void,
  ) {
    super({ highWaterMark: CHUNK });
    void settled.then((err) => {
      this.done = err;
    });
    // Bytes waiting in this stream's buffer mean the reader, not the COPY, is behind: too few taken
    // in a window while that holds (the socket's buffers full, or a client reading a trickle) ends it.
    let taken = 0;
    const least = (minRate.bytesPerSecond * minRate.windowMs) / 1000;
    this.watchdog = setInterval(() => {
      const moved = this.at - taken;
      taken = this.at;
      if (this.readableLength > 0 && moved < least) {
        onSlow();
        this.destroy(new SlowReader(`the reader took ${moved} bytes in ${minRate.windowMs} ms, under ${minRate.bytesPerSecond} B/s`));
      }
    }, minRate.windowMs);
    this.watchdog.unref();
  }

  /** Resolves once the file has bytes, or the writer is done. */
  async waitForBytes(): Promise<void> {
    while (this.done === undefined && !this.destroyed && (await this.handle.stat()).size === 0) await sleep(POLL_MS);
  }

  override _read(): void {
    void this.pump().catch((err: Error) => this.destroy(err));
  }

  private async pump(): Promise<void> {
    for (;;) {
      if (this.destroyed) return;
      // Read `done` before reading bytes: a writer that finished before an empty read wrote everything.
      const finished = this.done;
      const buffer = Buffer.allocUnsafe(CHUNK);
      const { bytesRead } = await this.handle.read(buffer, 0, CHUNK, this.at);
      if (bytesRead > 0) {
        this.at += bytesRead;
        this.push(buffer.subarray(0, bytesRead));
        return;
      }
      if (finished === null) {
        this.onRead();
        this.push(null);
        return;
      }
      // The transfer is cut short rather than ending as if complete.
      if (finished) throw finished;
      await sleep(POLL_MS);
    }
  }

  override _destroy(err: Error | null, callback: (err?: Error | null) => void): void {
    clearInterval(this.watchdog);
    this.handle
      .close()
      .catch(() => undefined)
      .finally(() => {
        this.onClose();
        callback(err);
      });
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
