// The sealed files of the lake, in memory: every manifest read once (or a checkpoint of them),
// then only the partitions the commit log names. Queries, the files listing and downloads all
// read this one index; a query first follows the commit log, so a file sealed a moment ago is
// read at once.
import fs from 'node:fs/promises';
import path from 'node:path';
import { followLines, listFiles, writeFileAtomic } from './fsutil.js';
import { type LakePaths, type Partition, parsePartitionDir, partitionDir } from './layout.js';
import { COMMIT_LOG, type ManifestFile, readManifest } from './manifest.js';

/** A sealed file as the listing and downloads see it (from its partition's manifest). */
export interface IndexedFile extends ManifestFile {
  partition: Partition;
  /** Path below the lake root, `books/venue=.../hour=HH/<name>`. */
  path: string;
}

export class FileIndex {
  /** Sealed files by partition directory. */
  private index = new Map<string, IndexedFile[]>();
  private sorted: IndexedFile[] | null = null;
  /** Bytes of the commit log already applied. */
  private offset = 0;
  /** Partitions the commit log named since the last `takeChanged`: what the catalogue re-reads. */
  private changed = new Map<string, Partition>();
  private following: Promise<void> | null = null;

  constructor(private readonly paths: LakePaths) {}

  private get commitLog(): string {
    return path.join(this.paths.manifest, COMMIT_LOG);
  }

  private get checkpointFile(): string {
    return path.join(this.paths.state, 'index.ndjson');
  }

  /**
   * The index at start: its checkpoint plus the commit log since, so a restart of a long lake
   * reads one file instead of every manifest (38,880 of them at 90 days: 10-13 s). Without a
   * usable checkpoint, every manifest is walked and a checkpoint written.
   */
  async open(): Promise<'checkpoint' | 'walk'> {
    if (await this.readCheckpoint()) {
      await this.follow();
      return 'checkpoint';
    }
    await this.walk();
    await this.writeCheckpoint();
    return 'walk';
  }

  /** Walks every manifest: without a checkpoint, and hourly as a safety net behind the commit log. */
  async walk(): Promise<void> {
    // Lines appended from here on are followed later; re-reading a partition twice is harmless.
    this.offset = await fs.stat(this.commitLog).then(
      (s) => s.size,
      () => 0,
    );
    const index = new Map<string, IndexedFile[]>();
    const partitions = (await listFiles(this.paths.manifest, '.json'))
      .map((rel) => parsePartitionDir(rel.replace(/\.json$/, '')))
      .filter((p): p is Partition => p !== null);
    // Thousands of small reads: 32 at a time rather than one after another.
    let next = 0;
    await Promise.all(
      Array.from({ length: 32 }, async () => {
        while (next < partitions.length) {
          const p = partitions[next++];
          index.set(partitionDir(p), await this.read(p));
        }
      }),
    );
    this.index = index;
    this.sorted = null;
  }

  /** Re-reads the manifests the commit log names since the last call; concurrent callers share one pass. */
  follow(): Promise<void> {
    this.following ??= this.followOnce().finally(() => {
      this.following = null;
    });
    return this.following;
  }

  private async followOnce(): Promise<void> {
    const named = new Map<string, Partition>();
    const at = await followLines(this.commitLog, this.offset, (line) => {
      const p = parsePartitionDir(commitPartition(line));
      if (p) named.set(partitionDir(p), p);
    });
    if (at !== null) this.offset = at;
    for (const [dir, p] of named) {
      this.index.set(dir, await this.read(p));
      this.changed.set(dir, p);
    }
    if (named.size) this.sorted = null;
  }

  /** The partitions changed since the last call. */
  takeChanged(): Partition[] {
    const out = [...this.changed.values()];
    this.changed = new Map();
    return out;
  }

  private async read(p: Partition): Promise<IndexedFile[]> {
    const dir = partitionDir(p);
    return (await readManifest(this.paths.manifest, p)).files.map((f) => ({ ...f, partition: p, path: `${dir}/${f.name}` }));
  }

  private async readCheckpoint(): Promise<boolean> {
    try {
      const lines = (await fs.readFile(this.checkpointFile, 'utf8')).split('\n');
      const { commit_offset: offset } = JSON.parse(lines[0]) as { commit_offset: number };
      // A commit log shorter than the checkpoint's offset is not the log it was taken against.
      const size = await fs.stat(this.commitLog).then(
        (st) => st.size,
        () => 0,
      );
      if (size < offset) return false;
      const index = new Map<string, IndexedFile[]>();
      for (let i = 1; i < lines.length; i++) {
        if (!lines[i]) continue;
        const [dir, files] = JSON.parse(lines[i]) as [string, ManifestFile[]];
        const p = parsePartitionDir(dir);
        if (!p) continue;
        index.set(
          dir,
          files.map((f) => ({ ...f, partition: p, path: `${dir}/${f.name}` })),
        );
      }
      this.index = index;
      this.sorted = null;
      this.offset = offset;
      return true;
    } catch {
      return false; // none yet, or damaged: a walk rebuilds it
    }
  }

  async writeCheckpoint(): Promise<void> {
    const lines = [JSON.stringify({ commit_offset: this.offset })];
    for (const [dir, files] of this.index) lines.push(JSON.stringify([dir, files.map(({ partition: _p, path: _path, ...f }) => f)]));
    await writeFileAtomic(this.checkpointFile, `${lines.join('\n')}\n`);
  }

  /** The sealed files of one partition. */
  of(p: Partition): IndexedFile[] {
    return this.index.get(partitionDir(p)) ?? [];
  }

  /** Every sealed file, by hour, then path. */
  all(): IndexedFile[] {
    this.sorted ??= [...this.index.values()]
      .flat()
      .sort((a, b) => a.partition.hour - b.partition.hour || (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
    return this.sorted;
  }

  find(relPath: string): IndexedFile | null {
    return this.index.get(path.posix.dirname(relPath))?.find((f) => f.path === relPath) ?? null;
  }

  /** The sealed files of `partitions` as the index has them: which content a cache was built from. */
  signature(partitions: Partition[]): string {
    let out = '';
    for (const p of partitions) for (const f of this.of(p)) out += `${f.path}@${f.sha256}\n`;
    return out;
  }
}

/** The partition a commit line names; a damaged line names none (the hourly walk covers it). */
export function commitPartition(line: string): string {
  try {
    return String((JSON.parse(line) as { partition?: unknown }).partition);
  } catch {
    return '';
  }
}
