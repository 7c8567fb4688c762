// Where every dataset lives on disk and what its columns are (CONTRACT.md section 7).
// Pure: no I/O here, so planners and tests can compute paths without touching the lake.
import path from 'node:path';
import type { Venue, Window } from '../config.js';
import { DATASETS, type Dataset } from '../records.js';
import { HOUR, floorTo, hourParts } from '../time.js';

/**
 * The window key of the `reference` dataset's partitions: a coin's reference prices serve its
 * markets of every window, so they are kept once, under `window=all`, beside the windows' own.
 */
export const ALL_WINDOWS = 'all';
export type PartitionWindow = Window | typeof ALL_WINDOWS;

export interface Partition {
  dataset: Dataset;
  venue: Venue;
  coin: string;
  window: PartitionWindow;
  /** Start of the UTC hour, epoch ms. */
  hour: number;
}

export interface Column {
  name: string;
  /** DuckDB type in the Parquet file. Times are epoch ms in the spool. */
  type: string;
}

/**
 * Times are UTC-adjusted (Parquet isAdjustedToUTC=true, microseconds), so pandas, pyarrow and
 * Polars read them as UTC and compare them with UTC times. Files written before 2026-11-23 hold
 * naive TIMESTAMP_MS; `make migrate` rewrites them, and reads accept both meanwhile.
 */
export const TIME_TYPE = 'TIMESTAMPTZ';
const ts = (name: string): Column => ({ name, type: TIME_TYPE });

export function isTime(c: Column): boolean {
  return c.type === TIME_TYPE;
}
const col = (name: string, type: string): Column => ({ name, type });

export const SCHEMAS: Record<Dataset, readonly Column[]> = {
  books: [
    ts('ts'),
    col('market_id', 'VARCHAR'),
    col('token_id', 'VARCHAR'),
    col('outcome_index', 'INTEGER'),
    col('outcome', 'VARCHAR'),
    ts('exchange_ts'),
    ts('recv_ts'),
    col('bid_prices', 'DOUBLE[]'),
    col('bid_sizes', 'DOUBLE[]'),
    col('ask_prices', 'DOUBLE[]'),
    col('ask_sizes', 'DOUBLE[]'),
    // Added 2026-11-26: files sealed before lack it (read as NULL, `make migrate` adds it).
    col('verified_by', 'VARCHAR'),
    col('hash_check', 'VARCHAR'),
    // Added 2026-11-28 (the venue's text and hash; manifest entries say so with `form`).
    col('price_decimals', 'TINYINT'),
    col('size_decimals', 'TINYINT'),
    col('level_texts', 'VARCHAR'),
    col('hash_fields', 'VARCHAR'),
    col('venue_hash', 'VARCHAR'),
  ],
  metrics: [
    ts('ts'),
    col('market_id', 'VARCHAR'),
    col('token_id', 'VARCHAR'),
    col('outcome_index', 'INTEGER'),
    col('outcome', 'VARCHAR'),
    col('chance', 'DOUBLE'),
    col('price', 'DOUBLE'),
    col('last_trade', 'DOUBLE'),
    ts('recv_ts'),
  ],
  markets: [
    ts('ts'),
    col('market_id', 'VARCHAR'),
    col('topic_id', 'VARCHAR'),
    col('slug', 'VARCHAR'),
    col('title', 'VARCHAR'),
    ts('start_time'),
    ts('end_time'),
    ts('created_time'),
    ts('resolved_time'),
    col('status', 'VARCHAR'),
    col('resolution', 'VARCHAR'),
    col('winning_outcome_index', 'INTEGER'),
    col('condition_id', 'VARCHAR'),
    col('question_id', 'VARCHAR'),
    col('oracle', 'VARCHAR'),
    col('outcome_labels', 'VARCHAR[]'),
    col('outcome_token_ids', 'VARCHAR[]'),
    col('volume', 'DOUBLE'),
    col('liquidity', 'DOUBLE'),
    col('participant_count', 'BIGINT'),
    col('chain_id', 'BIGINT'),
    col('chain_name', 'VARCHAR'),
    col('exchange_address', 'VARCHAR'),
    col('exchange_kind', 'VARCHAR'),
    col('collateral', 'VARCHAR'),
    col('fee_rate_bps', 'DOUBLE'),
    col('tick_size', 'DOUBLE'),
    col('reference_price_start', 'DOUBLE'),
    col('reference_price_end', 'DOUBLE'),
  ],
  trades: [
    ts('ts'),
    col('market_id', 'VARCHAR'),
    col('token_id', 'VARCHAR'),
    col('outcome_index', 'INTEGER'),
    col('outcome', 'VARCHAR'),
    col('price', 'DOUBLE'),
    col('size', 'DOUBLE'),
    col('side', 'VARCHAR'),
    col('fee_rate_bps', 'DOUBLE'),
    col('transaction_hash', 'VARCHAR'),
    col('source', 'VARCHAR'),
    ts('exchange_ts'),
    ts('recv_ts'),
    // Added 2026-11-28.
    col('price_decimals', 'TINYINT'),
    col('size_decimals', 'TINYINT'),
  ],
  reference: [ts('ts'), col('source', 'VARCHAR'), col('symbol', 'VARCHAR'), col('price', 'DOUBLE'), ts('sent_ts'), ts('recv_ts')],
  gaps: [
    col('market_id', 'VARCHAR'),
    col('dataset', 'VARCHAR'),
    ts('from_ts'),
    ts('to_ts'),
    col('reason', 'VARCHAR'),
    col('detail', 'VARCHAR'),
    col('failures', 'BIGINT'),
  ],
};

/** Sealed files are sorted by these, so a market's rows are contiguous and in time order. */
export const SORT_KEYS: Record<Dataset, readonly string[]> = {
  books: ['market_id', 'ts', 'outcome_index'],
  metrics: ['market_id', 'ts', 'outcome_index'],
  markets: ['market_id', 'ts'],
  gaps: ['market_id', 'from_ts'],
  trades: ['market_id', 'ts', 'outcome_index'],
  reference: ['source', 'symbol', 'ts'],
};

export function partitionDir(p: Partition): string {
  const { date, hour } = hourParts(p.hour);
  return `${p.dataset}/venue=${p.venue}/coin=${p.coin}/window=${p.window}/date=${date}/hour=${hour}`;
}

const DIR_RE = new RegExp(
  `^(${DATASETS.join('|')})/venue=([a-z-]+)/coin=([a-z0-9]+)/window=(5m|15m|${ALL_WINDOWS})/date=(\\d{4}-\\d{2}-\\d{2})/hour=(\\d{2})$`,
);

export function parsePartitionDir(dir: string): Partition | null {
  const m = DIR_RE.exec(dir.split(path.sep).join('/'));
  if (!m) return null;
  const hour = Date.parse(`${m[5]}T${m[6]}:00:00Z`);
  if (!Number.isFinite(hour)) return null;
  return { dataset: m[1] as Dataset, venue: m[2] as Venue, coin: m[3], window: m[4] as PartitionWindow, hour };
}

export function partitionOf(dataset: Dataset, venue: Venue, coin: string, window: PartitionWindow, atMs: number): Partition {
  return { dataset, venue, coin, window, hour: floorTo(atMs, HOUR) };
}

export interface LakePaths {
  root: string;
  lake: string;
  spool: string;
  manifest: string;
  state: string;
  /** Serving copies of sealed books files (pages/copyformat.ts): derived, rebuilt when missing. */
  serving: string;
  /** Capture's heartbeat, written after every flush (capture/heartbeat.ts). */
  heartbeat: string;
}

export function lakePaths(dataDir: string): LakePaths {
  return {
    root: dataDir,
    lake: path.join(dataDir, 'lake'),
    spool: path.join(dataDir, 'spool'),
    manifest: path.join(dataDir, 'manifest'),
    state: path.join(dataDir, 'state'),
    serving: servingDirOf(path.join(dataDir, 'lake')),
    heartbeat: path.join(dataDir, 'state', 'capture-heartbeat.json'),
  };
}

/** Where the serving copies of a lake's books files live: beside the lake, never inside it (analysts glob the lake). */
export function servingDirOf(lakeDir: string): string {
  return path.join(path.dirname(lakeDir), 'serving');
}

/** Rows of a market are captured within its window, plus the lag of the last poll. */
export const CAPTURE_LAG_MS = 60_000;

export interface MarketSpan {
  venue: Venue;
  coin: string;
  window: Window;
  start_time: number;
  end_time: number;
}

export interface Plan {
  partitions: Partition[];
  from: number;
  to: number;
}

/** The hours of `dataset` that can hold rows of `market` in [from, to); none when they miss. */
export function planPartitions(dataset: Dataset, market: MarketSpan, from: number | null, to: number | null): Plan {
  const lo = Math.max(from ?? -Infinity, market.start_time);
  const hi = Math.min(to ?? Infinity, market.end_time + CAPTURE_LAG_MS);
  const partitions: Partition[] = [];
  for (let h = floorTo(lo, HOUR); h < hi; h += HOUR) partitions.push(partitionOf(dataset, market.venue, market.coin, market.window, h));
  return { partitions: lo < hi ? partitions : [], from: lo, to: hi };
}

/** The hours of a series' `dataset` that can hold rows in [from, to) (a coin's reference prices, which belong to no market). */
export function seriesPartitions(
  dataset: Dataset,
  venue: Venue,
  coin: string,
  window: PartitionWindow,
  from: number,
  to: number,
): Partition[] {
  const out: Partition[] = [];
  for (let hour = floorTo(from, HOUR); hour < to; hour += HOUR) out.push({ dataset, venue, coin, window, hour });
  return out;
}
