// A window's status from what is in memory (the manifests' per-market spans, the gap log, the spool's
// listing): what market listings, the coverage summary and a replay's closing packet say of each
// window without reading a file. The certificate route reads the files for the same figures.
import { type Coverage, type WindowStatus, coverageOf, settledState } from './certificate.js';
import { type Partition, CAPTURE_LAG_MS, partitionDir, partitionOf, planPartitions } from './layout.js';
import type { LakeReader, StoredMarket } from './reader.js';
import { listSpool } from './spool.js';
import { HOUR } from '../time.js';

/** Whether any of `partitions` holds rows of a market in the spool. */
export type Spooled = (partitions: Partition[], market: string) => boolean;

/** `Spooled` from one listing of the spool, for a request that asks of many windows. */
export async function spooledNow(lake: LakeReader): Promise<Spooled> {
  const parts = await listSpool(lake.paths.spool);
  // A part of no one market (a spool of an older version) may hold any market's rows.
  const anyMarket = new Set(parts.filter((p) => p.market === undefined).map((p) => partitionDir(p.partition)));
  const byMarket = new Set(parts.filter((p) => p.market !== undefined).map((p) => `${partitionDir(p.partition)}|${p.market}`));
  return (partitions, market) => partitions.some((p) => anyMarket.has(partitionDir(p)) || byMarket.has(`${partitionDir(p)}|${market}`));
}

/**
 * What the manifests say of a window without reading a file: whether it is still `pending` (open
 * with its capture lag, held by capture, or its books in the spool), its first book from the
 * per-market spans (`spans` false for files sealed before they were kept), and its last sealing.
 */
export function windowSpans(lake: LakeReader, m: StoredMarket, now: number, spooled: Spooled) {
  const recordedUntil = m.end_time + CAPTURE_LAG_MS;
  const { partitions } = planPartitions('books', { ...m, start_time: m.start_time - HOUR }, null, null);
  let first = Infinity;
  let lastModified: number | null = null;
  let spans = true;
  for (const p of partitions)
    for (const f of lake.sealedOf(p)) {
      const span = f.markets?.[m.market_id];
      if (!f.markets) spans = false;
      if (!span) continue;
      first = Math.min(first, span[1]);
      lastModified = Math.max(lastModified ?? 0, f.written_at);
    }
  const pending = now < recordedUntil || lake.heldUntil(m.venue, m.market_id) !== null || spooled(partitions, m.market_id);
  return { pending, spans, first: first < recordedUntil ? first : null, lastModified };
}

/**
 * A window's status from memory: the same figures the certificate reads from the files, its gaps
 * from the gap log. Coverage only once settled.
 */
export function windowStatus(
  lake: LakeReader,
  m: StoredMarket,
  now: number,
  spooled: Spooled = (ps, market) => lake.spooled(ps, market),
): WindowStatus {
  const { pending, spans, first, lastModified } = windowSpans(lake, m, now, spooled);
  if (pending) return { state: 'pending', coverage: null, last_modified: lastModified, recorders: null };
  if (!spans) return { state: null, coverage: null, last_modified: lastModified, recorders: null };
  const gaps = lake.gaps(
    { venue: m.venue, coin: m.coin, window: m.window, market_id: m.market_id, dataset: 'books' },
    m.start_time,
    m.end_time,
  );
  const coverage = coverageOf({ start: m.start_time, end: m.end_time, first, gaps, now });
  const recorders = recorderRecords(lake, m, now);
  return {
    state: settledState(coverage),
    coverage,
    last_modified: lastModified,
    recorders: recorders && Object.fromEntries(Object.entries(recorders).map(([r, own]) => [r, own.coverage])),
  };
}

/** One recorder's own record of a window, as the merge read it. */
export interface RecorderRecord {
  coverage: Coverage;
  /** Its books gaps reaching into the window (before `asOf`), `unpublished` past its horizon. */
  gaps: { from_ts: number; to_ts: number; reason: string }[];
}

/**
 * Each recorder's own record of the window, from the claims the merged record's gaps file keeps
 * (lake/merge.ts); null for a record only one recorder made. Past a recorder's horizon (what it
 * had sealed and published when merged) it vouches for nothing: that span is `unpublished`.
 */
export function recorderRecords(lake: LakeReader, m: StoredMarket, asOf: number): Record<string, RecorderRecord> | null {
  const claims = lake.sealedOf(partitionOf('gaps', m.venue, m.coin, m.window, m.start_time)).find((f) => f.recorders)?.recorders;
  if (!claims) return null;
  const to = Math.min(m.end_time, asOf);
  return Object.fromEntries(
    Object.entries(claims).map(([recorder, claim]) => {
      const mine = claim.markets[m.market_id];
      const gaps = (mine?.gaps ?? []).map(([from_ts, to_ts, reason]) => ({ from_ts, to_ts, reason }));
      if (claim.horizon < to) gaps.push({ from_ts: claim.horizon, to_ts: to, reason: 'unpublished' });
      return [
        recorder,
        {
          coverage: coverageOf({ start: m.start_time, end: m.end_time, first: mine?.first ?? null, gaps, now: asOf }),
          gaps: gaps.filter((g) => g.to_ts > m.start_time && g.from_ts < to),
        },
      ];
    }),
  );
}
