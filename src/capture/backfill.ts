// Backfill of the market catalogue (and price history where the venue keeps it), walked day
// by day over deterministic windows. Each partition it touches gets one `backfill.parquet`,
// so a re-run replaces what it wrote instead of adding to it. Days finished are checkpointed,
// so an interrupted run resumes where it stopped. Books are never backfilled: no book history
// exists before capture began.
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Progress } from '../progress.js';
import type { Config, Venue, Window } from '../config.js';
import { coverageStart } from '../coverage.js';
import type { Duck } from '../lake/duckdb.js';
import { readJson, writeFileAtomic } from '../lake/fsutil.js';
import { type LakePaths, type Partition, lakePaths, partitionDir, partitionOf } from '../lake/layout.js';
import { commitFiles, writeParquet } from '../lake/writer.js';
import { type Market, type MetricRow, marketLakeRow } from '../records.js';
import { DAY, isoMs } from '../time.js';
import type { VenueAdapter } from '../venues/adapter.js';
import { spoolSource } from '../lake/sql.js';

export interface BackfillRequest {
  venue: Venue;
  coin: string;
  window: Window;
  from: number;
  to: number;
}

export interface BackfillSummary {
  from: number;
  to: number;
  clampedFrom: number | null;
  days: number;
  skippedDays: number;
  markets: number;
  metrics: number;
  files: number;
  notes: string[];
}

export class CoverageError extends Error {
  override name = 'CoverageError';
}

export const BACKFILL_FILE = 'backfill.parquet';

export async function backfill(
  config: Config,
  duck: Duck,
  adapter: VenueAdapter,
  req: BackfillRequest,
  now: number,
  progress?: Progress,
): Promise<BackfillSummary> {
  const paths = lakePaths(config.dataDir);
  const notes: string[] = [];
  const start = coverageStart('markets', req.venue, req.coin);
  if (start === null) throw new CoverageError(`no coverage for ${req.venue} ${req.coin}: nothing to backfill`);
  if (req.from >= req.to) throw new CoverageError(`FROM ${isoMs(req.from)} is not before TO ${isoMs(req.to)}`);
  if (req.to <= start) {
    throw new CoverageError(
      `${req.venue} ${req.coin} history starts ${isoMs(start).slice(0, 10)}; the range ends ${isoMs(req.to).slice(0, 10)}, before it. Nothing earlier exists.`,
    );
  }
  const from = Math.max(req.from, start);
  const to = Math.min(req.to, now);
  if (from > req.from) notes.push(`FROM clamped to ${isoMs(start).slice(0, 10)}: ${req.venue} ${req.coin} history starts there`);
  if (to < req.to) notes.push(`TO clamped to now (${isoMs(to)})`);
  const metricsStart = coverageStart('metrics', req.venue, req.coin);
  const checkpoint = path.join(paths.state, 'backfill', `${req.venue}-${req.coin}-${req.window}-${from}-${to}.json`);
  const done = new Set((await readJson<{ days: number[] }>(checkpoint))?.days ?? []);
  const days: number[] = [];
  for (let d = Math.floor(from / DAY) * DAY; d < to; d += DAY) days.push(d);
  const summary: BackfillSummary = {
    from,
    to,
    clampedFrom: from > req.from ? from : null,
    days: days.length,
    skippedDays: 0,
    markets: 0,
    metrics: 0,
    files: 0,
    notes,
  };
  let finished = 0;
  const todo = days.filter((d) => {
    if (!done.has(d)) return true;
    summary.skippedDays++;
    finished++;
    return false;
  });
  progress?.update(finished, days.length, 0);
  let saving = Promise.resolve();
  await pool(todo, config.backfill.concurrency, async (day) => {
    const markets: Market[] = [];
    for await (const m of adapter.catalogue(req.coin, req.window, Math.max(day, from), Math.min(day + DAY, to), now)) markets.push(m);
    const metrics: MetricRow[] = [];
    if (metricsStart !== null) {
      for (const m of markets.filter((x) => x.end_time > metricsStart)) {
        for (const p of await adapter.priceHistory(m)) {
          if (p.ts < metricsStart) continue;
          const o = m.outcomes.find((x) => x.index === p.outcome_index)!;
          metrics.push({
            ts: p.ts,
            market_id: m.market_id,
            token_id: o.token_id,
            outcome_index: o.index,
            outcome: o.label,
            chance: null,
            price: p.price,
            last_trade: null,
            recv_ts: null,
          });
        }
      }
    }
    const files = await writeDay(duck, paths, req, markets, metrics);
    summary.files += files;
    summary.markets += markets.length;
    summary.metrics += metrics.length;
    done.add(day);
    finished++;
    saving = saving.then(() => writeFileAtomic(checkpoint, JSON.stringify({ days: [...done].sort() })));
    await saving;
    progress?.update(finished, days.length, summary.markets);
  });
  progress?.finish();
  if (summary.metrics === 0) notes.push(`no price history stored: ${adapter.historyKept}`);
  await fs.rm(checkpoint, { force: true });
  return summary;
}

async function writeDay(duck: Duck, paths: LakePaths, req: BackfillRequest, markets: Market[], metrics: MetricRow[]): Promise<number> {
  const groups = new Map<string, { partition: Partition; rows: Record<string, unknown>[] }>();
  const add = (partition: Partition, row: Record<string, unknown>) => {
    const key = partitionDir(partition);
    const g = groups.get(key) ?? { partition, rows: [] };
    g.rows.push(row);
    groups.set(key, g);
  };
  // A backfilled version is stamped with the market's end, so a re-run writes the same bytes.
  for (const m of markets) add(partitionOf('markets', req.venue, req.coin, req.window, m.start_time), marketLakeRow(m, m.end_time));
  for (const r of metrics) add(partitionOf('metrics', req.venue, req.coin, req.window, r.ts), r as unknown as Record<string, unknown>);
  const staging = path.join(paths.state, 'staging');
  await fs.mkdir(staging, { recursive: true });
  for (const { partition, rows } of groups.values()) {
    const file = path.join(staging, `${partitionDir(partition).replaceAll('/', '_')}.ndjson`);
    await fs.writeFile(file, rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
    const entry = await writeParquet(
      duck,
      paths.lake,
      partition,
      BACKFILL_FILE,
      spoolSource(partition.dataset, [file], false),
      ['backfill'],
      {
        manifestDir: paths.manifest,
      },
    );
    entry.written_at = 0; // the manifest of a re-run is byte-identical too
    await commitFiles(paths.lake, paths.manifest, path.join(paths.root, 'trash'), partition, [entry], []);
    await fs.rm(file, { force: true });
  }
  return groups.size;
}

async function pool<T>(items: T[], concurrency: number, work: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(concurrency, items.length) }, async () => {
      while (next < items.length) await work(items[next++]);
    }),
  );
}
