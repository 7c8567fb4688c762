// What capture's heartbeat lets a reader vouch for: a running capture proves the markets it holds
// up to its last heartbeat (or newest row), a stopped or silent one leaves the rest of each window
// as a provisional process_down gap, and the certificate's figures follow.
import t from 'tap';
import { type Heartbeat, combineProofs, parseHeartbeat, proofOf } from '../src/capture/heartbeat.js';
import { coverageOf } from '../src/lake/certificate.js';

const START = Date.parse('2026-07-26T12:45:00Z');
const END = START + 15 * 60_000;
const FLUSHED = 1_000_000;

function beat(over: Partial<Heartbeat> = {}): Heartbeat {
  return {
    ts: START + 240_000,
    flushed_at: FLUSHED,
    acknowledged: 10,
    health: { buffered_rows: 0, dropped_rows: 0, seal_backlog: 0, seal_error: null },
    segment: 's1',
    open: [
      { venue: 'polymarket', coin: 'btc', window: '15m', market_id: 'm1', end_time: END, newest: START + 230_000, since: START - 60_000 },
      // Known before its open: a book recorded then would otherwise hold through a downtime after it.
      {
        venue: 'polymarket',
        coin: 'btc',
        window: '15m',
        market_id: 'm2',
        end_time: END + 15 * 60_000,
        newest: null,
        since: START - 60_000,
      },
    ],
    gaps: [
      {
        venue: 'polymarket',
        coin: 'btc',
        window: '15m',
        market_id: 'm1',
        dataset: 'books',
        from_ts: START + 200_000,
        until: END,
        reason: 'disconnected',
        detail: 'socket closed',
        failures: 1,
        channel: 'stream',
      },
    ],
    ...over,
  };
}

t.test('a running capture proves each market it holds up to its heartbeat, no further', async (t) => {
  const proof = proofOf(beat(), FLUSHED + 500, 10_000);
  t.equal(proof.down, false);
  t.equal(proof.heldUntil.get('polymarket:m1'), START + 240_000);
  t.equal(proof.heldUntil.get('polymarket:m2'), START + 240_000);
  t.same(
    proof.gaps.map((g) => [g.market_id, g.from_ts, g.to_ts, g.reason, g.provisional]),
    [['m1', START + 200_000, START + 240_000, 'disconnected', true]],
    'an open gap is known missing up to the heartbeat',
  );
});

t.test('a stopped capture leaves the rest of every window it held as a provisional process_down gap', async (t) => {
  const proof = proofOf(beat({ stopped: true }), FLUSHED + 500, 10_000);
  t.equal(proof.down, true);
  t.equal(proof.heldUntil.size, 0);
  // From the newest book where there is one, as a restart will write it; else from the heartbeat.
  t.same(
    proof.gaps.map((g) => [g.market_id, g.dataset, g.from_ts, g.to_ts, g.reason]),
    [
      ['m1', 'books', START + 200_000, END, 'disconnected'],
      ['m1', 'books', START + 230_000, END, 'process_down'],
      ['m1', 'metrics', START + 230_000, END, 'process_down'],
      ['m2', 'books', START + 240_000, END + 15 * 60_000, 'process_down'],
      ['m2', 'metrics', START + 240_000, END + 15 * 60_000, 'process_down'],
    ],
  );
  // The window's coverage, an hour later: recorded to the gap's start only.
  const m1 = proof.gaps.filter((g) => g.market_id === 'm1' && g.dataset === 'books');
  const c = coverageOf({ start: START, end: END, first: START, gaps: m1, now: END + 3_600_000 });
  t.equal(c.covered_seconds, 200);
  t.equal(c.by_cause.capture, 670, 'the time after the newest book is capture’s');
  t.equal(c.by_cause.venue, 30, 'the disconnect before it the venue’s');
});

t.test('a silent capture (killed, or starved of its flushes) is taken as down after the bound, not before', async (t) => {
  t.equal(proofOf(beat(), FLUSHED + 10_000, 10_000).down, false);
  const late = proofOf(beat(), FLUSHED + 10_001, 10_000);
  t.equal(late.down, true);
  t.ok(late.gaps.some((g) => g.reason === 'process_down'));
  // A market whose newest book is at its end: nothing of its window left to presume.
  const open = beat().open.map((m) => (m.market_id === 'm1' ? { ...m, newest: END } : m));
  const ended = proofOf(beat({ stopped: true, open }), FLUSHED, 10_000);
  t.notOk(ended.gaps.some((g) => g.market_id === 'm1' && g.reason === 'process_down'));
});

t.test('no heartbeat: nothing added; a heartbeat read from the bucket is checked before it is believed', async (t) => {
  t.same(proofOf(null, 0, 10_000), { heldUntil: new Map(), held: new Map(), gaps: [], down: false });
  t.equal(parseHeartbeat(null), null);
  t.equal(parseHeartbeat('not json'), null);
  t.equal(parseHeartbeat('{"ts":1}'), null);
  t.same(parseHeartbeat(JSON.stringify(beat())), beat());
});

t.test("several recorders' heartbeats as one proof: a gap stays only where no other recorder holds the market", async (t) => {
  const now = FLUSHED + 1000;
  // A runs and holds m1 and m2 with no gap; B stopped (its presumed downtime is a gap on both).
  const a = proofOf(beat({ gaps: [], ts: START + 250_000 }), now, 10_000);
  const b = proofOf(beat({ stopped: true }), now, 10_000);
  t.ok(
    b.gaps.some((g) => g.reason === 'process_down'),
    "B's downtime, presumed",
  );
  const both = combineProofs([a, b]);
  t.equal(both.down, false, 'down only when every recorder is');
  t.equal(both.heldUntil.get('polymarket:m1'), START + 250_000, 'held as far as the latest recorder has shown');
  t.same(both.gaps, [], "A holds both markets without a gap: none of B's gaps stand");
  // A with a gap of its own over B's: that span neither vouches for.
  const aGapped = proofOf(beat({ ts: START + 250_000 }), now, 10_000);
  const kept = combineProofs([aGapped, b]);
  t.same(
    [...new Set(kept.gaps.map((g) => `${g.market_id} ${g.reason}`))].sort(),
    ['m1 disconnected', 'm1 process_down'],
    "on m1 both lacked a span: A's gap and B's stand; on m2 A vouches",
  );
  // Both stopped: down, every gap stands.
  const down = combineProofs([b, proofOf(beat({ stopped: true }), now, 10_000)]);
  t.equal(down.down, true);
  t.equal(down.gaps.length, 2 * b.gaps.length);
  t.equal(combineProofs([a]), a, 'one recorder: its own proof');
});

t.test('another recorder covers a presumed downtime only where it held the market, less its gaps written and open', async (t) => {
  const now = FLUSHED + 1000;
  const b = proofOf(beat({ stopped: true }), now, 10_000);
  // A restarted at START + 100 s: its downtime gap on m1 ran to START + 260 s (written to its lake); m2 it has held throughout.
  const restarted = beat({ gaps: [], ts: START + 300_000 });
  restarted.open = restarted.open.map((m) =>
    m.market_id === 'm1' ? { ...m, since: START + 100_000, written: [[START - 50_000, START + 260_000]] } : m,
  );
  const a = proofOf(restarted, now, 10_000);
  t.same(a.held.get('polymarket:m1'), [[START + 260_000, Infinity]]);
  const both = combineProofs([a, b]);
  t.same(
    both.gaps.map((g) => [g.market_id, g.dataset, g.from_ts, g.to_ts, g.reason]).sort(),
    [
      ['m1', 'books', START + 200_000, START + 260_000, 'disconnected'],
      ['m1', 'books', START + 230_000, START + 260_000, 'process_down'],
      ['m1', 'metrics', START + 230_000, START + 260_000, 'process_down'],
    ],
    "B's gaps on m1 stand up to where A's record resumed; on m2 A vouches for all of them",
  );
  // A gap A has open now (not written yet) is a hole in what it held: B's gaps stand over it too.
  const gapped = beat({ ts: START + 300_000 });
  gapped.gaps = [{ ...gapped.gaps[0], market_id: 'm2', from_ts: START + 280_000, until: END + 15 * 60_000 }];
  const over = combineProofs([proofOf(gapped, now, 10_000), b]);
  t.same(
    over.gaps.filter((g) => g.market_id === 'm2' && g.reason === 'process_down').map((g) => [g.dataset, g.from_ts, g.to_ts]),
    [
      ['books', START + 280_000, START + 300_000],
      ['metrics', START + 280_000, START + 300_000],
    ],
    "on m2, B's downtime stands where A's own gap was open (up to A's heartbeat, as far as A's gap is known)",
  );
  // A heartbeat from a capture that does not say since when it held a market vouches for none of another's gaps.
  const old = beat({ gaps: [], ts: START + 300_000 });
  old.open = old.open.map(({ since: _since, ...m }) => m);
  t.equal(combineProofs([proofOf(old, now, 10_000), b]).gaps.length, b.gaps.length);
  // Nor one whose times are not numbers (JSON writes -Infinity as null).
  const odd = JSON.parse(JSON.stringify(beat({ gaps: [], ts: START + 300_000 }), (k, v) => (k === 'since' ? null : v))) as Heartbeat;
  t.equal(combineProofs([proofOf(odd, now, 10_000), b]).gaps.length, b.gaps.length);
});
