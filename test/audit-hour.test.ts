// Capture over a simulated hour of the market channel, and under drops, reorders, duplicates, a
// freeze and a disconnect: every change of every market in count and content, or inside a gap.
import t from 'tap';

import { ThreadedStream } from '../src/capture/streamthreads.js';
import { SECOND } from '../src/time.js';
import { lakeTable } from './helpers.js';
import { auditStream } from './streamaudit.js';
import { streamRun } from './streamrun.js';

t.test('an hour of simulated time: every change of every market, in count and content', async (t) => {
  // 240x, paced (streamRun): a simulated hour in 15 s of real time on an idle machine, longer on a busy one, whose
  // starved capture the venue's clock waits for instead of running past markets it had no time to discover. Stall
  // bounds and polls are in simulated time, set wide enough that a real 100 ms pause (24 simulated seconds) is not
  // taken for a silent stream. The run lasts until the clock is well past an hour after the first book.
  const run = await streamRun(t, {}, 16, 240, {
    spanMs: 3_900_000,
    env: { POLL_MS: '20000', STREAM_STALL_MS: '600000', STREAM_PING_MS: '60000' },
  });
  const { expected, recorded } = auditStream(t, run);
  const markets = new Set(run.rows.map((r) => r.market_id));
  const newest = run.rows.reduce((max, r) => Math.max(max, r.ts), -Infinity);
  const span = (newest - run.rows[0].ts) / 3_600_000;
  t.ok(span >= 1, `the recording spans ${span.toFixed(2)} simulated hours`);
  t.ok(markets.size >= 14, `${markets.size} markets, one after another`);
  t.ok(expected > 50_000, `${expected} change instants`);
  t.equal(recorded, expected, 'every one recorded');
  t.same(run.gaps, [], 'and no gap');

  // Each market recorded and resolved before the stop (the newest row, less what may have been in flight) carries the venue's resolution time and winner, from its market_resolved.
  const versions = (await run.duck.rows(
    `SELECT market_id, any_value(outcome_token_ids[1]) AS token, max(epoch_ms(resolved_time))::BIGINT AS resolved,
       arg_max(winning_outcome_index, ts) AS winner FROM ${lakeTable(run.dir, 'markets')} GROUP BY market_id`,
  )) as { market_id: string; token: string; resolved: bigint | null; winner: number | null }[];
  const due = versions
    .map((v) => ({ ...v, sim: run.sim.byToken('polymarket', v.token)!.market }))
    .filter((v) => markets.has(v.market_id) && v.sim.resolvedAt <= newest - run.slackMs);
  t.ok(due.length >= 10, `${due.length} recorded markets resolved during the run`);
  t.same(
    due
      .filter((v) => v.resolved === null || Number(v.resolved) !== v.sim.resolvedAt || v.winner !== run.sim.winner(v.sim))
      .map((v) => v.market_id),
    [],
    'each with the resolution time and winner the venue announced',
  );
});

t.test('under drops, reorders, duplicates, a freeze and a disconnect, nothing is invented and gaps cover the rest', async (t) => {
  // The freeze and the disconnect come 40 and 80 simulated seconds after capture's first book, whenever a busy machine gets there.
  const run = await streamRun(t, { dropRate: 0.003, reorderRate: 0.003, duplicateRate: 0.05, staleSnapshotMs: 4000 }, 7, 20, {
    spanMs: 140 * SECOND,
    faultsFromFirstBook: (at) => ({
      freezes: [{ from: at + 40 * SECOND, to: at + 50 * SECOND }],
      disconnects: [{ from: at + 80 * SECOND, to: at + 83 * SECOND }],
    }),
  });
  const { expected, recorded } = auditStream(t, run);
  t.ok(recorded > expected / 2, `most changes are still recorded (${recorded} of ${expected})`);
  const reasons = new Set(run.gaps.map((g) => g.reason));
  t.ok(reasons.has('stream_resync'), 'lost or misordered changes are found by hash and resynced');
  t.ok(reasons.has('stream_stalled'), 'the freeze is noticed');
  // A connection open at the disconnect is cut, and that is a `disconnected` gap. On a starved machine
  // capture may still be reconnecting from the freeze's stall cut then (refused with a 503 meanwhile):
  // nothing open to cut, the stall's gap still open over it (the audit above holds every change to it).
  const { cut, refused } = run.standin.stream.stats;
  t.comment(`stand-in: ${JSON.stringify(run.standin.stream.stats)}; gap reasons: ${[...reasons].sort().join(', ')}`);
  if (cut > 0) t.ok(reasons.has('disconnected'), `the disconnect is recorded (${cut} connections cut)`);
  else
    t.ok(
      refused > 0 && reasons.has('stream_stalled'),
      `nothing open to cut at the disconnect (${refused} connects refused): the stall's gap spans it`,
    );
  t.ok(run.standin.stream.stats.duplicated > 0 && run.standin.stream.stats.dropped > 0 && run.standin.stream.stats.reordered > 0);
  t.ok(
    (run.capture.streams.get('polymarket') as ThreadedStream).stats.connects >= 3,
    'capture reconnected after the freeze and the disconnect',
  );
});
