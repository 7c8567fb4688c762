// Reading back a streamed lake and judging it against the stand-in's book model: shared by the
// stream tests and the kill -9 test of a streaming capture process.
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Test } from 'tap';
import type { Venue } from '../src/config.js';
import type { Duck } from '../src/lake/duckdb.js';
import type { Sim } from '../src/standin/sim.js';
import { lakeTable } from './helpers.js';

export interface Recorded {
  market_id: string;
  token_id: string;
  outcome_index: number;
  ts: number;
  ex: number;
  bid_prices: number[];
  bid_sizes: number[];
  ask_prices: number[];
  ask_sizes: number[];
}

export interface Gap {
  market_id: string;
  f: number;
  t: number;
  reason: string;
  /** What capture said of it (not compared: tests match on the rest). */
  detail?: string;
}

/** The books and book gaps of a sealed lake, times as epoch milliseconds. */
export async function readStreamLake(duck: Duck, dir: string): Promise<{ rows: Recorded[]; gaps: Gap[] }> {
  const rows = (await duck.rows(
    `SELECT market_id, token_id, outcome_index, epoch_ms(ts)::BIGINT AS ts, epoch_ms(exchange_ts)::BIGINT AS ex, bid_prices, bid_sizes, ask_prices, ask_sizes
     FROM ${lakeTable(dir, 'books')} ORDER BY ts, outcome_index`,
  )) as unknown as Recorded[];
  const gapFiles = await fs.readdir(path.join(dir, 'lake', 'gaps')).catch(() => []);
  const gaps = gapFiles.length
    ? ((await duck.rows(
        `SELECT market_id, epoch_ms(from_ts)::BIGINT AS f, epoch_ms(to_ts)::BIGINT AS t, reason, detail FROM ${lakeTable(dir, 'gaps')} WHERE dataset = 'books'`,
      )) as unknown as Gap[])
    : [];
  for (const r of rows) Object.assign(r, { ts: Number(r.ts), ex: Number(r.ex), outcome_index: Number(r.outcome_index) });
  for (const g of gaps) Object.assign(g, { f: Number(g.f), t: Number(g.t) });
  return { rows, gaps };
}

/**
 * Every recorded book equals the venue's at its exchange time, and every change it missed lies
 * in a gap. `undelivered` names changes the stand-in withheld (`token@timestamp`): without
 * sequence numbers, a lost change that the token's next message overwrites leaves every hash
 * matching, so no recorder can notice it; only those may be missing without a gap.
 */
export function auditStream(t: Test, run: { rows: Recorded[]; gaps: Gap[]; sim: Sim; undelivered: Set<string>; venue?: Venue }) {
  const { rows, gaps, sim } = run;
  const venue = run.venue ?? 'polymarket';
  // Market ids as the stand-in's venues number them.
  const market = (id: string) => sim.byCode(venue, Number(id) - (venue === 'polymarket' ? 1_000_000 : 50_000_000))!;
  const wrong = rows.filter((r) => {
    const truth = sim.book(market(r.market_id), r.outcome_index as 0 | 1, r.ex);
    return (
      truth.timestamp !== r.ex ||
      JSON.stringify([
        truth.bids.map((l) => l[0]),
        truth.bids.map((l) => l[1]),
        truth.asks.map((l) => l[0]),
        truth.asks.map((l) => l[1]),
      ]) !== JSON.stringify([r.bid_prices, r.bid_sizes, r.ask_prices, r.ask_sizes])
    );
  });
  // A book recorded after a change went astray, before a check found it, lies in the gap that check opened.
  // A storage gap spans its dropped rows, [first dropped, first kept again).
  const covered = (marketId: string, at: number) =>
    gaps.some((g) => g.market_id === marketId && (g.reason === 'storage' ? g.f <= at && at < g.t : g.f < at && at <= g.t));
  const astray = wrong.filter((r) => !covered(r.market_id, r.ex));
  t.same(
    astray.slice(0, 3).map((r) => `${r.market_id}:${r.outcome_index}@${r.ex}`),
    [],
    `every recorded book (${rows.length}) outside gaps equals the venue's book at its exchange time (${wrong.length - astray.length} inside gaps do not)`,
  );
  const byToken = new Map<string, Recorded[]>();
  for (const r of rows) {
    const key = `${r.market_id}:${r.outcome_index}`;
    const list = byToken.get(key);
    if (list) list.push(r);
    else byToken.set(key, [r]);
  }
  let expected = 0;
  let recorded = 0;
  let unknowable = 0;
  const uncovered: string[] = [];
  for (const [key, list] of byToken) {
    const [marketId, index] = key.split(':');
    const m = market(marketId);
    const seen = new Set(list.map((r) => r.ex));
    const instants = new Set(sim.bookChanges(m, Number(index) as 0 | 1, Math.min(...seen), Math.max(...seen)).map((c) => c.t));
    expected += instants.size;
    for (const at of instants) {
      if (seen.has(at)) recorded++;
      else if (covered(marketId, at)) continue;
      else if (run.undelivered.has(`${m.tokenIds[Number(index)]}@${at}`)) unknowable++;
      else uncovered.push(`${key}@${at}`);
    }
  }
  t.same(uncovered.slice(0, 5), [], `every change not recorded lies inside a gap (${recorded} of ${expected} recorded)`);
  t.pass(`undetectable losses (${unknowable}) are all of changes the stand-in withheld`);
  const last = new Map<string, number>();
  let backwards = 0;
  for (const r of rows) {
    if ((last.get(r.market_id) ?? -Infinity) > r.ts) backwards++;
    last.set(r.market_id, r.ts);
  }
  t.equal(backwards, 0, "a market's snapshot times only move forward");
  return { expected, recorded, unknowable, wrong: wrong.length };
}
