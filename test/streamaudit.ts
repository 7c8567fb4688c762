// Reading back a streamed lake and judging it against the stand-in's book model: shared by the
// stream tests and the kill -9 test of a streaming capture process.
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Test } from 'tap';
import type { Venue } from '../src/config.js';
import type { Duck } from '../src/lake/duckdb.js';
import type { StandIn } from '../src/standin/server.js';
import type { Sim } from '../src/standin/sim.js';
import { tradeMessage } from '../src/standin/stream.js';
import { lakeTable } from './helpers.js';
import { proofOf, readHeartbeat } from '../src/capture/heartbeat.js';
import { lakePaths } from '../src/lake/layout.js';

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
  verified_by: string | null;
  hash_check: string | null;
}

export interface Gap {
  market_id: string;
  f: number;
  t: number;
  reason: string;
  /** What capture said of it (not compared: tests match on the rest). */
  detail?: string;
}

/** A market capture knew: from its first recorded version to its end. */
export interface Known {
  market_id: string;
  known: number;
  end: number;
}

/** The books, book gaps and known markets of a sealed lake, times as epoch milliseconds. */
/**
 * The lake's books, gaps and markets. `stopped`: capture ended with no restart after, so its last
 * heartbeat's presumed downtime counts too, as every reader of the record takes it (the rest of
 * each window it held, from the market's newest book: capture/heartbeat.ts `proofOf`); a stream
 * thread starved behind the others at the stop had not yet received what came after that book.
 */
export async function readStreamLake(
  duck: Duck,
  dir: string,
  options: { stopped?: boolean } = {},
): Promise<{ rows: Recorded[]; gaps: Gap[]; markets: Known[] }> {
  const rows = (await duck.rows(
    `SELECT market_id, token_id, outcome_index, epoch_ms(ts)::BIGINT AS ts, epoch_ms(exchange_ts)::BIGINT AS ex, bid_prices, bid_sizes, ask_prices, ask_sizes, verified_by, hash_check
     FROM ${lakeTable(dir, 'books')} ORDER BY ts, outcome_index`,
  )) as unknown as Recorded[];
  const gapFiles = await fs.readdir(path.join(dir, 'lake', 'gaps')).catch(() => []);
  const gaps = gapFiles.length
    ? ((await duck.rows(
        `SELECT market_id, epoch_ms(from_ts)::BIGINT AS f, epoch_ms(to_ts)::BIGINT AS t, reason, detail FROM ${lakeTable(dir, 'gaps')} WHERE dataset = 'books'`,
      )) as unknown as Gap[])
    : [];
  const markets = (await duck.rows(
    `SELECT market_id, min(epoch_ms(ts))::BIGINT AS known, max(epoch_ms(end_time))::BIGINT AS "end" FROM ${lakeTable(dir, 'markets')} GROUP BY market_id`,
  )) as unknown as Known[];
  for (const r of rows) Object.assign(r, { ts: Number(r.ts), ex: Number(r.ex), outcome_index: Number(r.outcome_index) });
  for (const g of gaps) Object.assign(g, { f: Number(g.f), t: Number(g.t) });
  if (options.stopped) gaps.push(...(await presumedDowntime(dir)));
  for (const m of markets) Object.assign(m, { known: Number(m.known), end: Number(m.end) });
  return { rows, gaps, markets };
}

/**
 * What every reader of the record takes as down once capture stopped for good (no restart after):
 * the rest of each window its last heartbeat held, from the market's newest book (heartbeat.ts
 * `proofOf`). A stream thread starved behind the others at the stop had not yet received what came
 * after that book.
 */
export async function presumedDowntime(dir: string): Promise<Gap[]> {
  const beat = await readHeartbeat(lakePaths(dir));
  if (!beat?.stopped) throw new Error('capture did not stop cleanly: no stopped heartbeat to read its presumed downtime from');
  return proofOf(beat, Date.now(), Infinity)
    .gaps.filter((g) => g.dataset === 'books')
    .map((g) => ({ market_id: g.market_id!, f: g.from_ts, t: g.to_ts, reason: `${g.reason} (presumed)` }));
}

/**
 * Every recorded book equals the venue's at its exchange time, and every change it missed lies
 * in a gap. `undelivered` names changes the stand-in withheld (`token@timestamp`): without
 * sequence numbers, a lost change that the token's next message overwrites leaves every hash
 * matching, so no recorder can notice it; only those may be missing without a gap.
 *
 * Every outcome of every market capture knew is audited, rows or none: from its first row, or a
 * stall bound after the venue took its subscription (a snapshot is owed by then; before it the
 * venue sends nothing of the token), whichever is earlier, to the market's end or the newest exchange time recorded less `slackMs` (what capture
 * may still have had in flight when it stopped), whichever is earlier.
 */
export function auditStream(
  t: Test,
  run: {
    rows: Recorded[];
    gaps: Gap[];
    markets: Known[];
    sim: Sim;
    undelivered: Set<string>;
    /** When the venue first took the token's subscription (undefined: never), from the stand-in's side. */
    subscribedAt: (marketId: string, index: 0 | 1) => number | undefined;
    venue?: Venue;
    stallMs: number;
    slackMs: number;
    /** A run whose capture stopped for good: its presumed downtime (`presumedDowntime`), which covers a missed change as a gap does. */
    presumed?: Gap[];
  },
) {
  const { rows, gaps, sim } = run;
  const presumed = run.presumed ?? [];
  const venue = run.venue ?? 'polymarket';
  // Market ids as the stand-in's venues number them.
  const market = (id: string) => sim.byCode(venue, Number(id) - (venue === 'polymarket' ? 1_000_000 : 50_000_000))!;
  // From its end a market's book is what the venue's REST answers for a closed market (the wallet's:
  // empty, stamped at the end; a recorder polling late, as a starved one does, records it there).
  const truthOf = (r: Recorded) => {
    const m = market(r.market_id);
    return r.ex >= m.end ? { timestamp: m.end, bids: [], asks: [] } : sim.book(m, r.outcome_index as 0 | 1, r.ex);
  };
  const wrong = rows.filter((r) => {
    const truth = truthOf(r);
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
  // A storage gap spans its dropped rows' times, [first dropped, first kept again): a row's time is its change's
  // exchange time moved a millisecond past the market's previous row where they collide (`nudged`), so a change
  // at `at` was a row at or a few ms after it.
  const NUDGE_MS = 10;
  // A storage gap still open when capture stopped for good is read as presumed downtime from its
  // start, its first dropped row, as the storage gap it is (red beside stress-ng: the change at a
  // presumed storage gap's start judged uncovered).
  const covered = (marketId: string, at: number) =>
    gaps.some(
      (g) =>
        g.market_id === marketId &&
        (g.reason === 'storage' || g.reason === 'storage (presumed)' ? g.f <= at + NUDGE_MS && at < g.t : g.f < at && at <= g.t),
    );
  // A recorded row lies in a gap by its own time (the record's clock, which gaps share and the
  // certificate reads), not its exchange time: a change that reached capture after a resync's book
  // is stamped a millisecond past it (venues/stream.ts advance), under load far past its exchange
  // time (beside stress-ng: a row at 554527 of a resync gap from 554514, its exchange time 553823).
  const astray = wrong.filter((r) => !covered(r.market_id, r.ts));
  t.same(
    astray.slice(0, 3).map((r) => `${r.market_id}:${r.outcome_index}@${r.ex}`),
    [],
    `every recorded book (${rows.length}) outside gaps equals the venue's book at its exchange time (${wrong.length - astray.length} inside gaps do not)${
      // On the line a CI summary keeps: what the first such book was labelled, and how many of its token are wrong.
      astray.length
        ? `; first: ${astray[0].market_id}:${astray[0].outcome_index} ts ${astray[0].ts} ex ${astray[0].ex} ${astray[0].verified_by}/${astray[0].hash_check}, ${astray.filter((r) => r.token_id === astray[0].token_id).length} of its token`
        : ''
    }`,
    // What a failure needs to be read: the first such row, the venue's book then, and its market's gaps nearby.
    astray.length
      ? {
          first: astray[0],
          venue: truthOf(astray[0]),
          gaps: gaps.filter((g) => g.market_id === astray[0].market_id && Math.abs(g.f - astray[0].ex) < 60_000),
          astray: astray.length,
          astrayOfToken: astray.filter((r) => r.token_id === astray[0].token_id).map((r) => r.ex),
          withheld: [...run.undelivered]
            .filter((u) => u.startsWith(astray[0].token_id + '@'))
            .map((u) => Number(u.split('@')[1]))
            .filter((at) => Math.abs(at - astray[0].ex) < 10_000),
        }
      : {},
  );
  // What the lake says vouched for a book must be true of it, inside a gap or not: a whole book of
  // the venue's, a reproduced hash or an equal REST book mean the venue's book; best levels, its best levels.
  const labels: Record<string, number> = {};
  for (const r of rows) labels[r.verified_by ?? 'unknown'] = (labels[r.verified_by ?? 'unknown'] ?? 0) + 1;
  const falseProofs = wrong.filter((r) => r.verified_by === 'snapshot' || r.verified_by === 'hash' || r.verified_by === 'rest');
  t.same(
    falseProofs.slice(0, 3).map((r) => `${r.market_id}:${r.outcome_index}@${r.ex} by ${r.verified_by}`),
    [],
    `every book vouched for by a whole book, a hash or REST is the venue's (${JSON.stringify(labels)})`,
    falseProofs.length ? { first: falseProofs[0], venue: truthOf(falseProofs[0]) } : {},
  );
  const falseBest = rows.filter((r) => {
    if (r.verified_by !== 'best_bid_ask') return false;
    const truth = truthOf(r);
    return truth.bids[0]?.[0] !== r.bid_prices[0] || truth.asks[0]?.[0] !== r.ask_prices[0];
  });
  t.same(
    falseBest.slice(0, 3).map((r) => `${r.market_id}:${r.outcome_index}@${r.ex}`),
    [],
    "every book vouched for by its best levels has the venue's best bid and ask",
  );
  t.equal(labels.unknown ?? 0, 0, 'every book recorded says what vouched for it');
  // The venue's hash reproduced (at once, or with a field that came within a second) means the venue's book.
  const checks: Record<string, number> = {};
  for (const r of rows) checks[r.hash_check ?? 'none'] = (checks[r.hash_check ?? 'none'] ?? 0) + 1;
  const falseMatches = wrong.filter((r) => r.hash_check === 'match' || r.hash_check === 'explained');
  t.same(
    falseMatches.slice(0, 3).map((r) => `${r.market_id}:${r.outcome_index}@${r.ex} ${r.hash_check}`),
    [],
    `every book whose hash matched or was explained is the venue's (${JSON.stringify(checks)})`,
    falseMatches.length ? { first: falseMatches[0], venue: truthOf(falseMatches[0]) } : {},
  );
  if (venue === 'wallet-prediction') t.equal(rows.length - (checks.none ?? 0), 0, 'the wallet venue sends no hash: none is checked');
  else t.ok(checks.match > 0, "Polymarket's books carry hash verdicts");
  const byToken = new Map<string, Recorded[]>();
  for (const r of rows) {
    const key = `${r.market_id}:${r.outcome_index}`;
    const list = byToken.get(key);
    if (list) list.push(r);
    else byToken.set(key, [r]);
  }
  const ofVenue = (id: string) => Number(id) >= 50_000_000 === (venue === 'wallet-prediction');
  const newest = rows.reduce((max, r) => Math.max(max, r.ex), -Infinity) - run.slackMs;
  let expected = 0;
  let recorded = 0;
  let unknowable = 0;
  /** The changes behind `unknowable`: withheld by the venue (a drop, a reorder, a pause) and not recorded. */
  const withheld: { market_id: string; at: number; key: string }[] = [];
  let audited = 0;
  let beforeFirst = 0;
  /** Changes after a market's newest book when capture stopped for good (`presumed`): gaps to every reader. */
  let afterStop = 0;
  // From when both outcomes have a book, as the certificate counts coverage: before it, one
  // outcome's book was not known, and the record vouches for nothing of the market.
  const firstOfOutcome = new Map<string, number>();
  for (const r of rows) {
    const key = `${r.market_id}:${r.outcome_index}`;
    firstOfOutcome.set(key, Math.min(firstOfOutcome.get(key) ?? Infinity, r.ex));
  }
  const firstOfMarket = new Map<string, number>();
  for (const r of rows)
    firstOfMarket.set(
      r.market_id,
      Math.max(firstOfOutcome.get(`${r.market_id}:0`) ?? Infinity, firstOfOutcome.get(`${r.market_id}:1`) ?? Infinity),
    );
  const uncovered: string[] = [];
  let firstUncovered: object | undefined;
  for (const known of run.markets.filter((k) => ofVenue(k.market_id))) {
    const m = market(known.market_id);
    for (const index of [0, 1] as const) {
      const key = `${known.market_id}:${index}`;
      const list = byToken.get(key) ?? [];
      const seen = new Set(list.map((r) => r.ex));
      const subscribed = run.subscribedAt(known.market_id, index);
      // Never subscribed while capture knew the market: owed from when it learnt of it.
      const from = Math.min(Math.max(subscribed ?? known.known, known.known) + run.stallMs, list.length ? list[0].ex : Infinity);
      const to = Math.min(known.end, newest);
      if (to <= from) continue;
      audited++;
      const instants = new Set(sim.bookChanges(m, index, from, to).map((c) => c.t));
      expected += instants.size;
      for (const at of instants) {
        if (seen.has(at)) recorded++;
        else if (covered(known.market_id, at)) continue;
        else if (presumed.some((g) => g.market_id === known.market_id && g.f < at && at <= g.t)) afterStop++;
        else if (run.undelivered.has(`${m.tokenIds[index]}@${at}`)) {
          unknowable++;
          withheld.push({ market_id: known.market_id, at, key: `${m.tokenIds[index]}@${at}` });
        } else if (at < (firstOfMarket.get(known.market_id) ?? Infinity)) {
          // Before both outcomes have a recorded book the record vouches for nothing (a certificate counts
          // that time `unrecorded`, never covered): late, as a starved capture is, but not a false record.
          beforeFirst++;
        } else {
          uncovered.push(`${key}@${at}`);
          // What a failure needs to be read: the token's audited span, its rows' span and its market's gaps.
          firstUncovered ??= {
            key,
            at,
            known,
            subscribed,
            from,
            to,
            rows: [list[0]?.ex, list.at(-1)?.ex, list.length],
            firstRows: list.slice(0, 3).map((r) => [r.ts, r.ex, r.verified_by]),
            otherOutcome: (byToken.get(`${known.market_id}:${1 - index}`) ?? []).slice(0, 3).map((r) => [r.ts, r.ex, r.verified_by]),
            // Whether the market's rows stopped, or only this outcome's book stopped changing in them.
            lastRows: list.slice(-3).map((r) => [r.ts, r.ex, r.verified_by]),
            otherLast: (byToken.get(`${known.market_id}:${1 - index}`) ?? []).slice(-3).map((r) => [r.ts, r.ex, r.verified_by]),
            subscribedOther: run.subscribedAt(known.market_id, (1 - index) as 0 | 1),
            gaps: gaps.filter((g) => g.market_id === known.market_id),
          };
        }
      }
    }
  }
  t.ok(audited > 0 || rows.length === 0, `${audited} outcome books audited, rows or none, over the span capture knew them`);
  t.same(
    uncovered.slice(0, 5),
    [],
    `every change not recorded lies inside a gap (${recorded} of ${expected} recorded${afterStop ? `; ${afterStop} after a market's newest book at the stop, in its presumed downtime` : ''})`,
    {
      first: firstUncovered,
    },
  );
  t.pass(`undetectable losses (${unknowable}) are all of changes the stand-in withheld`);
  t.comment(`${beforeFirst} changes came before their market's first recorded book (unrecorded time, not vouched for)`);
  const last = new Map<string, number>();
  let backwards = 0;
  for (const r of rows) {
    if ((last.get(r.market_id) ?? -Infinity) > r.ts) backwards++;
    last.set(r.market_id, r.ts);
  }
  t.equal(backwards, 0, "a market's snapshot times only move forward");
  const uncoveredMarkets = [...new Set(uncovered.map((k) => k.split(':')[0]))];
  return { expected, recorded, unknowable, withheld, beforeFirst, wrong: wrong.length, astray, labels, uncoveredMarkets };
}

/**
 * The audit of one venue's part of a lake that captured both from `standin` (the stand-in numbers
 * the wallet venue's markets from 50,000,000).
 */
export function auditVenue(
  t: Test,
  lake: { rows: Recorded[]; gaps: Gap[]; markets: Known[] },
  standin: StandIn,
  venue: Venue,
  bounds: { stallMs: number; slackMs: number },
): ReturnType<typeof auditStream> {
  const ofVenue = (id: string) => Number(id) >= 50_000_000 === (venue === 'wallet-prediction');
  return auditStream(t, {
    rows: lake.rows.filter((r) => ofVenue(r.market_id)),
    gaps: lake.gaps.filter((g) => ofVenue(g.market_id)),
    markets: lake.markets,
    sim: standin.sim,
    undelivered: venue === 'polymarket' ? standin.stream.undelivered : standin.walletStream.undelivered,
    subscribedAt: subscriptions(standin, venue),
    venue,
    ...bounds,
  });
}

/** The stand-in's record of when it took each outcome's subscription, as the audit asks for it. */
export function subscriptions(standin: StandIn, venue: Venue): (marketId: string, index: 0 | 1) => number | undefined {
  if (venue === 'wallet-prediction') return (id) => standin.walletStream.subscribedAt.get(Number(id));
  return (id, index) => {
    const m = standin.sim.byCode('polymarket', Number(id) - 1_000_000);
    return m ? standin.stream.subscribedAt.get(m.tokenIds[index]) : undefined;
  };
}

/**
 * The trades of a streamed lake against the stand-in's model: none twice, none the venue did not
 * make, each with what the venue sent, and every trade the venue made while capture held the
 * token's book (from its first recorded book to its market's newest, less `slackMs` in flight at
 * the stop) outside a gap.
 */
export async function auditTrades(
  t: Test,
  run: { duck: Duck; dir: string; sim: Sim; rows: Recorded[]; gaps: Gap[]; slackMs: number },
): Promise<{ recorded: number; expected: number }> {
  // Per market: its stream thread may lag another's at the stop.
  const newest = new Map<string, number>();
  for (const r of run.rows) newest.set(r.market_id, Math.max(newest.get(r.market_id) ?? -Infinity, r.ts));
  const trades = (await run.duck.rows(
    `SELECT market_id, token_id, epoch_ms(ts)::DOUBLE AS ts, price, size, side, transaction_hash FROM ${lakeTable(run.dir, 'trades')}`,
  )) as unknown as {
    market_id: string;
    token_id: string;
    ts: number;
    price: number;
    size: number;
    side: string;
    transaction_hash: string;
  }[];
  const byKey = new Map<string, (typeof trades)[number][]>();
  for (const r of trades) byKey.set(`${r.token_id}@${r.ts}`, [...(byKey.get(`${r.token_id}@${r.ts}`) ?? []), r]);
  t.same(
    [...byKey].filter(([, rs]) => rs.length > 1).map(([k]) => k),
    [],
    'no trade recorded twice',
  );
  const wrong = trades.filter((r) => {
    const found = run.sim.byToken('polymarket', r.token_id);
    const s = r.ts / 1000;
    const price = found && Number.isInteger(s) ? run.sim.tradeAt(found.market, found.index, s) : null;
    if (price === null) return true;
    const sent = tradeMessage(run.sim, found!.market, found!.index, s, price);
    return (
      r.price !== Number(sent.price) ||
      r.size !== Number(sent.size) ||
      r.side !== sent.side.toLowerCase() ||
      r.transaction_hash !== sent.transaction_hash
    );
  });
  t.same(wrong, [], 'each recorded trade is one the venue made, as it sent it');
  // Trades have gaps of their own where the books' proof reached back past a resubscription.
  const tradeGaps = (await run.duck
    .rows(
      `SELECT market_id, epoch_ms(from_ts)::DOUBLE AS f, epoch_ms(to_ts)::DOUBLE AS t FROM ${lakeTable(run.dir, 'gaps')} WHERE dataset = 'trades'`,
    )
    .catch(() => [])) as unknown as Gap[];
  const first = new Map<string, number>();
  for (const r of run.rows) if (r.ts < (first.get(r.token_id) ?? Infinity)) first.set(r.token_id, r.ts);
  let expected = 0;
  const missing: string[] = [];
  for (const [token, from] of first) {
    const { market, index } = run.sim.byToken('polymarket', token)!;
    const id = String(market.code + 1_000_000);
    const gaps = [...run.gaps, ...tradeGaps].filter((g) => g.market_id === id);
    for (let s = Math.floor(from / 1000) + 1; s * 1000 <= Math.min(market.end, newest.get(id)! - run.slackMs); s++) {
      if (run.sim.tradeAt(market, index, s) === null || gaps.some((g) => g.f <= s * 1000 && s * 1000 <= g.t)) continue;
      expected++;
      if (!byKey.has(`${token}@${s * 1000}`)) missing.push(`${token}@${s * 1000}`);
    }
  }
  t.same(
    missing.slice(0, 5),
    [],
    `every trade outside gaps while the book was held is recorded (${expected - missing.length} of ${expected})`,
  );
  return { recorded: trades.length, expected };
}
