// A market window's completeness certificate, computed from the lake when asked: how much of the
// window is covered and, where not, by cause and reason; the books and trades recorded; how far
// capture's receive clock ran behind the venue's. Sealed windows answer the same every time;
// open ones are current to the request.
import type { Venue } from '../config.js';
import { COMPLETE_SHARE, type Coverage, type WindowState, WINDOW_STATES, coverageOf, settledState } from '../lake/certificate.js';
import type { LakeReader } from '../lake/reader.js';
import { RESOLUTION_CHECKS, type ResolutionCheck, resolutionCheck } from '../lake/referenceprice.js';
import { recorderRecords, spooledNow, windowSpans, windowStatus } from '../lake/windowstatus.js';
import { relation } from '../lake/sql.js';
import { HOUR } from '../time.js';
import { CAPTURE_LAG_MS, certificateBooksSql, certificateTradesSql, planPartitions } from './plan.js';
import { HASH_CHECKS, VERIFICATIONS } from '../records.js';
import type { HashChecks, Verifications } from '../lake/manifest.js';
import type { StoredMarket } from '../lake/reader.js';
import { type RequestContext, type Result, type RouteKit, sql } from './route.js';
import { iso, referenceJson } from './shape.js';

export interface WindowsCoverage {
  coin: string;
  window: string;
  /** Ended windows whose books are sealed (with spans): the ones counted. */
  windows: number;
  /** Of those, covered at least 99%. */
  complete: number;
  /** Windows begun by now by state: the settled ones as counted above, and those pending. */
  states: Record<WindowState, number>;
  /** Covered seconds over window seconds, all counted windows together. */
  share: number;
  missing_seconds: Coverage['by_cause'];
  /** Windows begun by now by what the reference price says of the venue's winner (see the record's `reference`). */
  resolution_checks: Record<ResolutionCheck, number>;
  /**
   * Of the counted windows merged from several recorders (those a recorder published nothing of
   * have no claims to read), each recorder's own figures: how many it covered at least 99%, its
   * share of their time, and the record's share of the same windows (empty when one capture made them).
   */
  recorders: Record<string, { windows: number; complete: number; share: number; record_share: number }>;
}

const shareOf = (covered: number, total: number) => (total > 0 ? Math.round((covered / total) * 1e6) / 1e6 : 0);

/** Every window of a venue begun by now, summarised by coin and market window, in one pass over the catalogue. */
export async function coverageByWindow(lake: LakeReader, venue: Venue, now: number): Promise<WindowsCoverage[]> {
  const spooled = await spooledNow(lake);
  const by = new Map<
    string,
    WindowsCoverage & {
      windowSeconds: number;
      coveredSeconds: number;
      byRecorder: Map<string, { windows: number; complete: number; seconds: number; covered: number; recordCovered: number }>;
    }
  >();
  for (const m of lake.walk('asc', now)) {
    if (m.venue !== venue || m.start_time > now) continue;
    const status = windowStatus(lake, m, now, spooled);
    const { state, coverage: c } = status;
    if (!state) continue;
    const key = `${m.coin}|${m.window}`;
    const row = by.get(key) ?? {
      coin: m.coin,
      window: m.window,
      windows: 0,
      complete: 0,
      states: Object.fromEntries(WINDOW_STATES.map((s) => [s, 0])) as Record<WindowState, number>,
      resolution_checks: Object.fromEntries(RESOLUTION_CHECKS.map((c) => [c, 0])) as Record<ResolutionCheck, number>,
      share: 0,
      missing_seconds: { venue: 0, capture: 0, unproved: 0, unrecorded: 0 },
      windowSeconds: 0,
      coveredSeconds: 0,
      recorders: {},
      byRecorder: new Map(),
    };
    by.set(key, row);
    row.states[state]++;
    row.resolution_checks[resolutionCheck(lake.marketReference(m))]++;
    if (!c) continue;
    row.windows++;
    if (c.share >= COMPLETE_SHARE) row.complete++;
    row.windowSeconds += c.window_seconds;
    row.coveredSeconds += c.covered_seconds;
    for (const cause of Object.keys(row.missing_seconds) as (keyof Coverage['by_cause'])[]) row.missing_seconds[cause] += c.by_cause[cause];
    for (const [recorder, own] of Object.entries(status.recorders ?? {})) {
      const r =
        row.byRecorder.get(recorder) ??
        row.byRecorder.set(recorder, { windows: 0, complete: 0, seconds: 0, covered: 0, recordCovered: 0 }).get(recorder)!;
      r.windows++;
      if (own.share >= COMPLETE_SHARE) r.complete++;
      r.seconds += own.window_seconds;
      r.covered += own.covered_seconds;
      r.recordCovered += c.covered_seconds;
    }
  }
  return [...by.values()]
    .sort((a, b) => a.coin.localeCompare(b.coin) || a.window.localeCompare(b.window))
    .map(({ windowSeconds, coveredSeconds, missing_seconds, byRecorder, ...row }) => ({
      ...row,
      share: shareOf(coveredSeconds, windowSeconds),
      recorders: Object.fromEntries(
        [...byRecorder.entries()]
          .sort(([a], [b]) => a.localeCompare(b))
          .map(([recorder, r]) => [
            recorder,
            {
              windows: r.windows,
              complete: r.complete,
              share: shareOf(r.covered, r.seconds),
              record_share: shareOf(r.recordCovered, r.seconds),
            },
          ]),
      ),
      missing_seconds: Object.fromEntries(
        Object.entries(missing_seconds).map(([k, v]) => [k, Math.round(v * 1000) / 1000]),
      ) as Coverage['by_cause'],
    }));
}

/** Each recorder's own coverage and gaps beside the merged record's; null for a record one capture made. */
function recordersOf(lake: LakeReader, m: StoredMarket, asOf: number) {
  const records = recorderRecords(lake, m, asOf);
  if (!records) return null;
  const to = Math.min(m.end_time, asOf);
  return Object.fromEntries(
    Object.entries(records).map(([recorder, { coverage, gaps }]) => [
      recorder,
      {
        coverage,
        gaps: gaps.map((g) => ({ from: iso(Math.max(g.from_ts, m.start_time)), to: iso(Math.min(g.to_ts, to)), reason: g.reason })),
      },
    ]),
  );
}

/** Books by label from the certificate's figures (none without books), `unknown` for books recorded before labels were kept. */
function verificationsOf(figures: Record<string, unknown> | undefined): Verifications {
  return Object.fromEntries([...VERIFICATIONS, 'unknown'].map((v) => [v, Number(figures?.[v] ?? 0)])) as Verifications;
}

/** Books by what the venue's hash said of them, `none` where no hash was checked. */
function hashChecksOf(figures: Record<string, unknown> | undefined): HashChecks {
  return Object.fromEntries([...HASH_CHECKS, 'none'].map((v) => [v, Number(figures?.[`hash_${v}`] ?? 0)])) as HashChecks;
}

export function certificateHandlers({ lake, findMarket }: RouteKit) {
  const certificate =
    (venue: Venue) =>
    async (ctx: RequestContext): Promise<Result> => {
      const m = findMarket(venue, ctx);
      // From an hour before the open: a book recorded before it holds at the open.
      const plan = planPartitions('books', { ...m, start_time: m.start_time - HOUR }, null, null);
      const books = relation('books', await lake.files(plan.partitions, m.market_id), [
        'ts',
        'market_id',
        'outcome_index',
        'exchange_ts',
        'recv_ts',
        'verified_by',
        'hash_check',
      ]);
      const trades = relation('trades', await lake.files(planPartitions('trades', m, null, null).partitions, m.market_id), [
        'ts',
        'market_id',
        'source',
      ]);
      const params = { market_id: m.market_id, start: m.start_time, end: m.end_time, recorded_until: m.end_time + CAPTURE_LAG_MS };
      const [figures] = books ? await lake.duck.for(ctx.signal).rows(...sql(certificateBooksSql(books, params, m.outcomes.length))) : [];
      const counts = trades ? await lake.duck.for(ctx.signal).rows(...sql(certificateTradesSql(trades, params))) : [];
      const gaps = lake.gaps({ venue, coin: m.coin, window: m.window, market_id: m.market_id, dataset: 'books' }, m.start_time, m.end_time);
      const first = (figures?.first as number | null | undefined) ?? null;
      // Capture recording it now has shown it held the market up to its last heartbeat: no further.
      const held = lake.heldUntil(venue, m.market_id);
      const asOf = Math.min(ctx.now, held ?? Infinity);
      // Covered from the instant every outcome has a book: one outcome's book alone vouches for nothing of the other.
      const whole = (figures?.whole as number | null | undefined) ?? null;
      const coverage = coverageOf({ start: m.start_time, end: m.end_time, first: whole, gaps, now: asOf });
      const recordedUntil = m.end_time + CAPTURE_LAG_MS;
      const { pending, lastModified } = windowSpans(lake, m, ctx.now, (ps, market) => lake.spooled(ps, market));
      const [p50, p99] = [figures?.p50 ?? null, figures?.p99 ?? null] as (number | null)[];
      ctx.stats.partitions = plan.partitions.length;
      return {
        data: {
          market_id: m.market_id,
          window: { start: iso(m.start_time), end: iso(m.end_time) },
          complete_as_of: iso(Math.min(asOf, m.end_time)),
          open: ctx.now < m.end_time,
          state: pending ? 'pending' : settledState(coverage),
          last_modified: iso(lastModified),
          coverage,
          gaps: gaps.map((g) => ({
            from: iso(Math.max(g.from_ts, m.start_time)),
            to: iso(Math.min(g.to_ts, m.end_time)),
            reason: g.reason,
            ...(g.provisional ? { provisional: true } : {}),
          })),
          books: {
            recorded: (figures?.books as number | null | undefined) ?? 0,
            first: iso(first),
            verified_by: verificationsOf(figures),
            hash_check: hashChecksOf(figures),
          },
          trades: Object.fromEntries(counts.map((r) => [r.source as string, r.n as number])),
          // A record merged from several recorders: each one's own coverage beside the record's.
          recorders: recordersOf(lake, m, asOf),
          // Receive time less the venue's time of each book in the window: latency and skew (and, polled, the book's age).
          clock_offset_ms: p50 === null || p99 === null ? null : { p50, p99 },
          // The resolution checked against the coin's recorded Chainlink price, and how much of the window that price covers.
          reference: {
            ...referenceJson(lake.marketReference(m)),
            coverage: Math.round(lake.referenceCoverage(m.coin, m.start_time, m.end_time) * 1e6) / 1e6,
          },
        },
        // Pending: ask again once the window and its capture lag are over, or, after that, once sealing has had its turn.
        ...(pending
          ? { headers: { 'Retry-After': String(ctx.now < recordedUntil ? Math.ceil((recordedUntil - ctx.now) / 1000) : 60) } }
          : {}),
      };
    };
  return { certificate };
}
