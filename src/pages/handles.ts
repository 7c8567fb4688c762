// Open serving copies, kept for the pages after: a cold page's reads are two or three, and opening
// and closing its file added two more trips through the threadpool each time. A copy never
// changes once written (named by its Parquet's sha256, renamed into place whole), so a kept handle
// reads what a fresh one would; one removed as damaged is forgotten (`forget`) before it is
// written again under the same name.
import fs from 'node:fs/promises';

export interface FileLease {
  handle: fs.FileHandle;
  release(): void;
}

interface Kept {
  handle: Promise<fs.FileHandle>;
  users: number;
  /** Let go of (evicted or forgotten): closed when its last user releases it. */
  dropped: boolean;
}

export class FileHandles {
  /** By path, least recently used first. */
  private readonly kept = new Map<string, Kept>();
  opened = 0;

  constructor(private readonly max: number) {}

  /** The file open for reading; rejects as `fs.open` does (a missing file is not remembered). */
  async lease(file: string): Promise<FileLease> {
    let k = this.kept.get(file);
    if (k) {
      this.kept.delete(file);
      this.kept.set(file, k);
    } else {
      k = { handle: fs.open(file, 'r'), users: 0, dropped: false };
      this.opened++;
      this.kept.set(file, k);
      const opening = k;
      opening.handle.catch(() => {
        if (this.kept.get(file) === opening) this.kept.delete(file);
      });
      this.trim();
    }
    k.users++;
    let handle: fs.FileHandle;
    try {
      handle = await k.handle;
    } catch (err) {
      k.users--;
      throw err;
    }
    const leased = k;
    let released = false;
    return {
      handle,
      release: () => {
        if (released) return;
        released = true;
        leased.users--;
        if (leased.dropped && leased.users === 0) void close(leased);
      },
    };
  }

  /** A file removed (a damaged copy): its handle is closed once no read holds it, and the next lease opens the file anew. */
  forget(file: string): void {
    const k = this.kept.get(file);
    if (!k) return;
    this.kept.delete(file);
    this.drop(k);
  }

  get size(): number {
    return this.kept.size;
  }

  /** Every handle let go of (the process stops serving): each closed now, or when the read holding it is done. */
  close(): void {
    for (const k of this.kept.values()) this.drop(k);
    this.kept.clear();
  }

  private trim(): void {
    for (const [file, k] of this.kept) {
      if (this.kept.size <= this.max) return;
      this.kept.delete(file);
      this.drop(k);
    }
  }

  private drop(k: Kept): void {
    k.dropped = true;
    if (k.users === 0) void close(k);
  }
}

async function close(k: Kept): Promise<void> {
  const handle = await k.handle.catch(() => null);
  await handle?.close().catch(() => undefined);
}
