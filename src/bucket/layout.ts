// Where the lake sits in a bucket. The data keys are the lake's own hive paths, so an analyst's
// `s3://bucket/prefix/books/**/*.parquet` reads it as the local lake reads; what only this
// service needs sits under `_`-names, which Spark, Hive and DuckDB globs over datasets skip.
import { randomBytes } from 'node:crypto';
import { type Partition, parsePartitionDir, partitionDir } from '../lake/layout.js';

/** A sealed file: `books/venue=.../hour=03/<name>`, the same path as below the local lake. */
export function dataKey(prefix: string, filePath: string): string {
  return `${prefix}${filePath}`;
}

/** A partition's manifest, byte for byte the local one: `_manifest/books/venue=.../hour=03.json`. */
export function manifestKey(prefix: string, p: Partition): string {
  return `${prefix}_manifest/${partitionDir(p)}.json`;
}

export function manifestPrefix(prefix: string): string {
  return `${prefix}_manifest/`;
}

/** The partition a manifest key names, or null. */
export function partitionOfManifestKey(prefix: string, key: string): Partition | null {
  if (!key.startsWith(manifestPrefix(prefix)) || !key.endsWith('.json')) return null;
  return parsePartitionDir(key.slice(manifestPrefix(prefix).length, -'.json'.length));
}

/**
 * Every manifest in one gzipped object, so a new replica of a long lake reads one object instead of
 * a manifest per partition (39,000 at 90 days). Only a hint: a replica takes a manifest from it when
 * the body's MD5 is the ETag the listing gives for that manifest now, and GETs the others.
 */
export function snapshotKey(prefix: string): string {
  return `${prefix}_snapshot/manifests.json.gz`;
}

/**
 * Capture's heartbeat as its last publishing pass found it: replicas read from it how far capture
 * has shown it held each open market, and whether it stopped (capture/heartbeat.ts).
 */
export function heartbeatKey(prefix: string): string {
  return `${prefix}_capture/heartbeat.json`;
}

export interface ManifestSnapshot {
  version: 1;
  at: number;
  /** Each manifest's bytes as the local lake holds them (and published them), by partition directory. */
  manifests: { partition: string; body: string }[];
  /**
   * The catalogue's and the gaps' checkpoints of the same lake (lake/catalogue.ts, lake/gaplog.ts):
   * a new replica starts from them instead of fetching every markets and gaps file. Each covers
   * files by path and sha256, so one the bucket has replaced since is read again.
   */
  checkpoints?: { catalogue: string; gaps: string };
}

/**
 * Buckets cannot append, so the commit log is a series of small objects whose keys sort by time:
 * a reader lists only the keys after the last one it applied (`start-after`).
 */
export function commitPrefix(prefix: string): string {
  return `${prefix}_commits/`;
}

export function commitKey(prefix: string, at: number): string {
  return `${commitPrefix(prefix)}${String(at).padStart(15, '0')}-${randomBytes(4).toString('hex')}.json`;
}

/** What a commit object holds: the partitions whose manifests were replaced, in the local commit log's spelling. */
export interface CommitObject {
  at: number;
  partitions: string[];
}

/** Where recorders of one record each publish their own lake (config `recorderId`): `_recorders/<id>/`. */
export function recordersPrefix(prefix: string): string {
  return `${prefix}_recorders/`;
}

export function recorderPrefix(prefix: string, recorder: string): string {
  return `${recordersPrefix(prefix)}${recorder}/`;
}
