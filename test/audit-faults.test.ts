// The 20-minute fault audits, one per venue: capture against the stand-in speaking each venue's
// own ways, with faults injected at set simulated times; nothing wrong outside gaps, and the gaps
// measured against the injected fault time.
import t, { type Test } from 'tap';
import { ThreadedStream } from '../src/capture/streamthreads.js';
import type { WalletStreamRecorder } from '../src/venues/wallet/recorder.js';
import { lakeTable } from './helpers.js';
import { auditStream } from './streamaudit.js';
import { streamRun } from './streamrun.js';

/**
 * The 20-minute audits' pace: 60x in the suite. A gap ends on a reconnect's backoff and the next
 * push, which take real time that 60x stretches six-fold against 10x, and a starved machine
 * stretches further. So the suite asserts what holds at any speed (nothing wrong outside gaps,
 * nothing knowable missing without one) and reports what depends on it (the share recorded, gap
 * time over the injected time); `AUDIT_SPEED=10 AUDIT_STRICT=1` holds those figures to their
 * targets (BENCHMARKS.md: 80% recorded, gaps within 10% over the injected time).
 */
const AUDIT_SPEED = Number(process.env.AUDIT_SPEED ?? 60);
const AUDIT_SECONDS = Math.ceil((20 * 60) / AUDIT_SPEED);
const STRICT = process.env.AUDIT_STRICT === '1';
/** Gap time allowed outside the injected windows, as a share of them (held only when strict). */
const AUDIT_OVER = AUDIT_SPEED <= 10 ? 0.1 : 0.5;

type Window = { from: number; to: number };
/** Fault windows `ms` long, starting `minutes` after `at`. */
const windows = (at: number, minutes: number[], ms: number): Window[] =>
  minutes.map((m) => ({ from: at + m * 60_000, to: at + m * 60_000 + ms }));

/** An efficiency figure: held to its target in a strict run, reported in the suite's. */
function figure(t: Test, met: boolean, message: string): void {
  if (STRICT) t.ok(met, message);
  else t.comment(`${met ? 'within target' : 'OUTSIDE TARGET (speed-dependent, not asserted)'}: ${message}`);
}

t.test("the venue's own ways, over 20 simulated minutes: every market recorded, nothing wrong outside gaps", async (t) => {
  // What the real channel does (UPSTREAMS.md C1): hashes over the other layout, a few ms off the
  // message's time, covering trades announced later; books after trades; entries without a size;
  // snapshots that never come; books whose prices lack the leading zero; the custom feature events
  // beside the books (best levels, new markets); and drops. Markets open one after another, so later
  // tokens are added to open connections. Bounds are in simulated time, wide enough for a busy machine.
  const quirks = {
    hashLayout: 'hash-last',
    hashSkewMs: 3,
    tradeLeadMs: 300,
    bookAfterTrade: true,
    incompleteRate: 0.002,
    snapshotLossRate: 0.3,
    bestBidAsk: true,
    bareDecimals: true,
  } as const;
  // And, in simulated time from capture's first book, silent freezes and refused reconnects: fault time whose gaps are measured against it.
  let freezes: Window[] = [];
  let disconnects: Window[] = [];
  const run = await streamRun(t, { dropRate: 0.002 }, AUDIT_SECONDS, AUDIT_SPEED, {
    quirks,
    spanMs: 20 * 60_000,
    env: { POLL_MS: '5000', STREAM_STALL_MS: '60000', STREAM_PING_MS: '30000' },
    faultsFromFirstBook: (at) => {
      // The second across a market's end: what REST saw change in its last seconds the stream never delivers.
      const end = Math.ceil((at + 13 * 60_000) / 300_000) * 300_000;
      freezes = [...windows(at, [5], 40_000), { from: end - 20_000, to: end + 20_000 }];
      disconnects = windows(at, [9], 30_000);
      return { freezes, disconnects };
    },
  });
  const { expected, recorded, unknowable } = auditStream(t, run);
  const stats = (run.capture.streams.get('polymarket') as ThreadedStream).stats;
  const served = run.standin.stream;
  // A disconnect window cuts the open connections; whether a reconnect comes inside it (refused) or
  // after is the starved machine's: the clock's pace puts a pump, and so a cut, inside every window.
  t.ok(
    served.stats.frozen > 0 && served.stats.cut > 0,
    `the faults happened: ${served.stats.frozen} messages held in freezes, ${served.stats.cut} connections cut and ${served.stats.refused} refused`,
  );
  t.ok(
    served.withheldSnapshots > 0,
    `${served.withheldSnapshots} snapshots withheld (${stats.snapshotTimeouts} came later than the bound, from REST or a book after a trade, each with a gap for the wait)`,
  );
  t.ok(stats.incomplete > 0, `${stats.incomplete} entries without a size desynced their token (no row from them)`);
  t.ok(served.bestBidAsks > 0, `${served.bestBidAsks} best_bid_ask custom feature events came beside the books, and changed nothing`);
  t.ok(
    stats.newMarkets > 0 && stats.newMarkets <= served.newMarkets,
    `${stats.newMarkets} of ${served.newMarkets} new_market announcements came (some lost to drops), and changed nothing`,
  );
  t.ok(stats.lateProofs > 0, `${stats.lateProofs} hashes proved once the trade they covered was announced`);
  const verdicts: Record<string, number> = {};
  for (const r of run.rows) verdicts[r.hash_check ?? 'none'] = (verdicts[r.hash_check ?? 'none'] ?? 0) + 1;
  t.ok(
    verdicts.explained > 0,
    `books whose hash the trade announced after them explained are labelled so, not as mismatches: ${JSON.stringify(verdicts)}`,
  );
  t.equal(stats.undoubted, 0, 'the formula reproduces, so every book whose hash did not is held in doubt until proved');
  const checked = stats.verified + stats.lateProofs + stats.bestChecked;
  t.ok(
    checked >= 0.95 * (checked + stats.unverified),
    `${checked} of ${checked + stats.unverified} changes checked: ${stats.verified} by hash at once, ${stats.lateProofs} by a later one, ${stats.bestChecked} by best bid/ask`,
  );
  t.ok(
    unknowable <= expected * 0.001 + 2,
    `changes missing without a gap (${unknowable} of ${expected}) are only ones withheld and overwritten`,
  );
  figure(t, recorded > expected * 0.8, `${recorded} of ${expected} change instants recorded`);

  // Every market capture knew and the venue traded during the run has rows for both outcomes, late-added ones included.
  const markets = (await run.duck.rows(
    `SELECT DISTINCT market_id, epoch_ms(start_time)::BIGINT AS s, epoch_ms(end_time)::BIGINT AS e FROM ${lakeTable(run.dir, 'markets')}`,
  )) as { market_id: string; s: bigint; e: bigint }[];
  const first = run.rows[0].ts;
  const traded = markets.filter((m) => Number(m.s) >= first && Number(m.e) <= run.end);
  t.ok(traded.length >= 3, `${traded.length} markets opened and closed during the run`);
  const withRows = traded.filter((m) => [0, 1].every((i) => run.rows.some((r) => r.market_id === m.market_id && r.outcome_index === i)));
  t.equal(withRows.length, traded.length, 'each has books of both outcomes');
  // Fault time in which a market's book did not change lost nothing and needs no gap (a hash after a
  // freeze can prove the book unchanged), and every change lost in one is checked above (no change
  // outside gaps is missing), so this asks only that faults are gapped at all: most of their time,
  // whatever the load. The usual share (all of it on most runs, 86.6% once) is a figure.
  const lives = fromFirstBook(traded, run.rows);
  const { injected, gapped, inside, windowed, outside } = faultTime(run, [...freezes, ...disconnects], lives);
  t.ok(
    inside >= 0.5 * injected,
    `${(inside / 1000).toFixed(1)} s of the ${(injected / 1000).toFixed(1)} s of injected freezes and disconnects over ${traded.length} markets' lives lie in gaps`,
  );
  // Each stretch of fault time outside gaps, with the venue's changes in it: what the figure needs to be read.
  const stretches = outside.map((o) => {
    const m = run.sim.byCode('polymarket', Number(o.market_id) - 1_000_000)!;
    const changes = ([0, 1] as const).map((i) => run.sim.bookChanges(m, i, o.from, o.to).length);
    return `${o.market_id} ${o.from}..${o.to} (${changes.join('+')} venue changes)`;
  });
  figure(
    t,
    inside >= 0.9 * injected,
    `${((100 * inside) / injected).toFixed(1)}% of the fault time lies in gaps${stretches.length ? `; outside: ${stretches.join(', ')}` : ''}`,
  );
  // A freeze's gap runs from the last proof before it to the first after it (a poll's, every 5 s here): real time, scaled by the pace.
  figure(
    t,
    windowed - inside <= AUDIT_OVER * injected,
    `the gaps that meet those windows hold ${(windowed / 1000).toFixed(1)} s, ${((100 * (windowed - inside)) / injected).toFixed(1)}% over the injected time`,
  );
  t.pass(
    `${run.gaps.length} gaps, ${(gapped / 1000).toFixed(1)} s over those markets' lives (${((gapped - windowed) / 1000).toFixed(1)} s of them in the gaps of drops and incomplete entries, found by hash, best levels and REST)`,
  );
});

t.test('the wallet venue over 20 simulated minutes: pauses, disconnects and lost pushes, nothing wrong outside gaps', async (t) => {
  // The feed's documented pauses (nothing sent while its upstream is down) and refused reconnects,
  // in simulated time; lost, repeated and reordered pushes throughout. Bounds are in simulated time,
  // wide enough for a busy machine at 60x. A push is a whole book without a sequence number: one
  // lost and overwritten by the next before any REST poll saw its book is invisible to any
  // recorder, so the pushes lost at random are few (0.05%) and those are what may go unseen.
  // From capture's first book, whenever a busy machine gets there.
  let freezes: Window[] = [];
  let disconnects: Window[] = [];
  const run = await streamRun(t, { dropRate: 0.0005, reorderRate: 0.01, duplicateRate: 0.02 }, AUDIT_SECONDS, AUDIT_SPEED, {
    venue: 'wallet-prediction',
    spanMs: 20 * 60_000,
    env: { POLL_MS: '5000', STREAM_STALL_MS: '60000', STREAM_PING_MS: '30000' },
    faultsFromFirstBook: (at) => {
      freezes = windows(at, [3, 9, 15], 40_000);
      disconnects = windows(at, [6, 12], 30_000);
      return { freezes, disconnects };
    },
  });
  const { expected, recorded, unknowable, withheld } = auditStream(t, run);
  t.ok(expected > 5000, `${expected} book changes of the wallet markets`);
  // The audit counts a change the venue withheld and capture did not record, outside every gap, as
  // unknowable. Withheld by a pause, it was knowable: the silence and REST's newer book tell, so none
  // of those may be missing. (A disconnect withholds nothing: no push is sent while it lasts, and
  // every change after it is owed.) Only a push dropped or reordered at random and overwritten before
  // any poll saw its book is invisible to any recorder: at most the changes of the dropped pushes
  // (how many a poll catches depends on REST's round trips in simulated time, so on the load). Told
  // apart by what withheld each, not by its time: a starved pump sends a pause's last changes after
  // it, where a random drop can take them (2026-11-29, beside stress-ng).
  const faults = [...freezes, ...disconnects];
  const frozen = run.standin.walletStream.frozenKeys;
  t.same(
    withheld.filter((w) => frozen.has(w.key)).slice(0, 3),
    [],
    `no change withheld in a pause is missing outside a gap (${withheld.length} withheld at random are)`,
  );
  // A dropped push is one market's book: the change of each of its two outcomes.
  const droppedChanges = 2 * run.standin.walletStream.stats.dropped;
  t.ok(
    unknowable <= droppedChanges,
    `changes missing without a gap (${unknowable} of ${expected}) are only ones dropped at random (${droppedChanges}) and overwritten`,
  );
  figure(t, recorded > expected * 0.8, `${recorded} of ${expected} change instants recorded`);
  const reasons = new Set(run.gaps.map((g) => g.reason));
  t.notOk(reasons.has('stream_stalled'), 'a pause is not taken for a stalled socket');

  // Every market the venue traded during the run has rows of both outcomes.
  const first = run.rows[0].ts;
  const markets = await run.duck.rows(
    `SELECT DISTINCT market_id, epoch_ms(start_time)::BIGINT AS s, epoch_ms(end_time)::BIGINT AS e FROM ${lakeTable(run.dir, 'markets')}`,
  );
  const closed = (markets as { market_id: string; s: bigint; e: bigint }[]).filter((m) => Number(m.s) >= first && Number(m.e) <= run.end);
  t.ok(closed.length >= 3, `${closed.length} markets opened and closed during the run`);
  t.same(
    closed
      .filter((m) => ![0, 1].every((i) => run.rows.some((r) => r.market_id === m.market_id && r.outcome_index === i)))
      .map((m) => m.market_id),
    [],
    'each has books of both outcomes',
  );

  const { injected, gapped, inside } = faultTime(run, faults, fromFirstBook(closed, run.rows));
  // Fault time in which a market's book did not change lost nothing and needs no gap (a poll proving
  // the book unchanged inside a pause ends the need), and every change lost in one is checked above,
  // so this only asks that pauses are gapped at all: most of their time, whatever the load.
  t.ok(
    inside >= 0.5 * injected,
    `${(inside / 1000).toFixed(1)} s of the ${(injected / 1000).toFixed(1)} s of injected pauses and disconnects over ${closed.length} markets' lives lie in gaps`,
  );
  // Past the windows a gap reaches back to the last proof of the book before a pause (a poll's, or the last push: silence
  // looks like a quiet book) and on to the first push after it, or the reconnect: real time, scaled by the pace.
  figure(
    t,
    gapped - inside <= AUDIT_OVER * injected,
    `${(gapped / 1000).toFixed(1)} s in gaps in all, ${((100 * (gapped - injected)) / injected).toFixed(1)}% over the injected time (${((gapped - inside) / 1000).toFixed(1)} s outside the windows)`,
  );
  const wallet = run.capture.streams.get('wallet-prediction') as WalletStreamRecorder;
  // Each pause is found from the venue's own clock (no push of any market for STREAM_PAUSE_MS): a gap for every market held.
  t.ok(
    wallet.stats.pauses >= freezes.length,
    `${wallet.stats.pauses} silences of the whole stream taken for pauses (${freezes.length} injected, and the disconnects'); ${wallet.stats.missed} REST books the stream passed without holding them`,
  );
});

/**
 * Markets' lives from their first recorded book: before it the record vouches for nothing (a
 * certificate counts that time unrecorded, never covered), and how soon a starved capture gets
 * there is the machine's, not a promise.
 */
function fromFirstBook<M extends { market_id: string; s: bigint; e: bigint }>(
  markets: M[],
  rows: { market_id: string; ts: number }[],
): M[] {
  const first = new Map<string, number>();
  for (const r of rows) first.set(r.market_id, Math.min(first.get(r.market_id) ?? Infinity, r.ts));
  return markets.map((m) => ({ ...m, s: BigInt(Math.max(Number(m.s), first.get(m.market_id) ?? Number(m.e))) }));
}

/**
 * Time inside gaps against the injected fault windows, summed over markets (by their lives, from
 * `s` to `e`), gaps of different kinds merged: how much of the fault time is covered (`inside`), how
 * much time is in gaps in all (`gapped`), and in the gaps that meet a window (`windowed`: a fault's
 * own gaps, apart from those of faults spread through the run, drops say).
 */
function faultTime(
  run: { gaps: { market_id: string; f: number; t: number }[] },
  faults: { from: number; to: number }[],
  markets: { market_id: string; s: bigint; e: bigint }[],
) {
  const union = (spans: [number, number][]) => {
    const merged: [number, number][] = [];
    for (const [f, to] of [...spans].sort((a, b) => a[0] - b[0])) {
      const last = merged.at(-1);
      if (last && f <= last[1]) last[1] = Math.max(last[1], to);
      else merged.push([f, to]);
    }
    return merged;
  };
  const length = (spans: [number, number][]) => spans.reduce((sum, [f, to]) => sum + Math.max(0, to - f), 0);
  let injected = 0;
  let gapped = 0;
  let inside = 0;
  let windowed = 0;
  const outside: { market_id: string; from: number; to: number }[] = [];
  for (const m of markets) {
    const clip = ([f, to]: [number, number]): [number, number] => [Math.max(f, Number(m.s)), Math.min(to, Number(m.e))];
    const windows = union(faults.map((w) => clip([w.from, w.to])));
    const gaps = union(run.gaps.filter((g) => g.market_id === m.market_id).map((g) => clip([g.f, g.t])));
    injected += length(windows);
    gapped += length(gaps);
    inside += length(gaps.flatMap(([f, to]) => windows.map(([wf, wt]): [number, number] => [Math.max(f, wf), Math.min(to, wt)])));
    windowed += length(gaps.filter(([f, to]) => windows.some(([wf, wt]) => f < wt && to > wf)));
    for (const [wf, wt] of windows) {
      let at = wf;
      for (const [f, to] of gaps) {
        if (to <= at || f >= wt) continue;
        if (f > at) outside.push({ market_id: m.market_id, from: at, to: f });
        at = Math.max(at, to);
      }
      if (at < wt) outside.push({ market_id: m.market_id, from: at, to: wt });
    }
  }
  return { injected, gapped, inside, windowed, outside };
}
