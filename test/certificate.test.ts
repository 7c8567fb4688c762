// The completeness certificate of a market window: its coverage from the first recorded book and
// the gaps (pure), then the route over a lake capture filled with an upstream outage inside a
// market, every figure checked against an independent count over the lake's files.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { certificateBooksSql } from '../src/api/plan.js';
import { causeOf, coverageOf } from '../src/lake/certificate.js';
import { Duck } from '../src/lake/duckdb.js';
import { listFiles } from '../src/lake/fsutil.js';
import type { PartitionManifest } from '../src/lake/manifest.js';
import { WALLET_PREFIX } from '../src/standin/server.js';
import { lakeServer, lakeTable } from './helpers.js';

const START = 1_000_000;
const END = START + 900_000;
const S = 1000;

t.test('a window recorded from its open, without a gap, is wholly covered', async (t) => {
  const c = coverageOf({ start: START, end: END, first: START - 30 * S, gaps: [], now: END + 60 * S });
  t.same(c, {
    share: 1,
    window_seconds: 900,
    covered_seconds: 900,
    by_cause: { venue: 0, capture: 0, unproved: 0, unrecorded: 0 },
    by_reason: {},
  });
});

t.test('gaps are charged once by cause, each reason kept on its own', async (t) => {
  const c = coverageOf({
    start: START,
    end: END,
    first: START + 10 * S,
    gaps: [
      { from_ts: START + 100 * S, to_ts: START + 160 * S, reason: 'process_down' },
      // Overlaps the downtime by 20 s: those count once, to capture.
      { from_ts: START + 140 * S, to_ts: START + 200 * S, reason: 'http_5xx' },
      { from_ts: START + 500 * S, to_ts: START + 505 * S, reason: 'stream_resync' },
      // Reaches past the window: only its part inside counts.
      { from_ts: END - 5 * S, to_ts: END + 100 * S, reason: 'disconnected' },
    ],
    now: END + 60 * S,
  });
  t.same(c.by_cause, { venue: 45, capture: 60, unproved: 5, unrecorded: 10 }, 'the 10 s before the first book are unrecorded');
  t.same(c.by_reason, { process_down: 60, http_5xx: 60, stream_resync: 5, disconnected: 5 });
  t.equal(c.covered_seconds, 900 - 120);
  t.equal(c.share, Math.round((780 / 900) * 1e6) / 1e6);
});

t.test('an open window counts up to now; a market never recorded is unrecorded, not covered', async (t) => {
  const open = coverageOf({ start: START, end: END, first: START, gaps: [], now: START + 300 * S });
  t.equal(open.window_seconds, 300);
  t.equal(open.share, 1);
  const never = coverageOf({ start: START, end: END, first: null, gaps: [], now: END });
  t.equal(never.share, 0);
  t.equal(never.by_cause.unrecorded, 900);
  const notYet = coverageOf({ start: START, end: END, first: null, gaps: [], now: START - 5 * S });
  t.equal(notYet.window_seconds, 0, 'a window not begun has nothing to cover');
  t.equal(notYet.share, 0);
});

t.test("a market is covered once every outcome has a book: one outcome's alone vouches for nothing of the other", async (t) => {
  const duck = await Duck.open(1);
  t.teardown(() => duck.close());
  const row = (ms: number, market: string, outcome: number) =>
    `(epoch_ms(${ms}::BIGINT), '${market}', ${outcome}, epoch_ms(${ms}::BIGINT), epoch_ms(${ms + 50}::BIGINT), 'snapshot', NULL)`;
  const source = `SELECT * FROM (VALUES ${[
    row(START - 30 * S, 'm', 0),
    row(START + 20 * S, 'm', 1),
    row(START + 100 * S, 'm', 0),
    row(START + 10 * S, 'one', 0),
  ].join(', ')}) v(ts, market_id, outcome_index, exchange_ts, recv_ts, verified_by, hash_check)`;
  const figures = async (market: string) => {
    const q = certificateBooksSql(source, { market_id: market, start: START, end: END, recorded_until: END + 60 * S }, 2);
    return (await duck.rows(q.sql, q.params))[0];
  };
  const both = await figures('m');
  t.equal(both.first, START - 30 * S, "the market's first book, of either outcome");
  t.equal(both.whole, START + 20 * S, 'covered from the second outcome’s first book');
  t.equal(coverageOf({ start: START, end: END, first: both.whole as number, gaps: [], now: END }).by_cause.unrecorded, 20);
  t.equal((await figures('one')).whole, null, 'an outcome never recorded: never whole');
});

t.test('every reason capture records has a cause', async (t) => {
  for (const reason of ['timeout', 'network', 'http_5xx', 'rate_limited', 'disconnected', 'stream_stalled'])
    t.equal(causeOf(reason), 'venue', reason);
  for (const reason of ['process_down', 'storage']) t.equal(causeOf(reason), 'capture', reason);
  for (const reason of ['stream_resync', 'stream_late']) t.equal(causeOf(reason), 'unproved', reason);
  t.equal(causeOf('something new'), 'capture', 'an unknown reason is charged to capture, never to the venue');
});

t.test('the certificate route: its figures are what the lake holds, the outage charged to the venue', async (t) => {
  const start = Date.parse('2026-07-27T23:44:00Z');
  const end = Date.parse('2026-07-28T00:01:00Z');
  const marketStart = Date.parse('2026-07-27T23:45:00Z');
  const outage = { from: Date.parse('2026-07-27T23:50:00Z'), to: Date.parse('2026-07-27T23:53:00Z') };
  const {
    api,
    dir,
    duck,
    key: issue,
  } = await lakeServer(t, {
    start,
    end,
    env: { RATE_PAID_PER_SECOND: '100000' },
    fill: { speed: 400, pollMs: 1000, faults: { outages: [{ path: `${WALLET_PREFIX}/order-book`, from: outage.from, to: outage.to }] } },
  });
  const key = await issue();
  const market = api.lake
    .all(end)
    .find((m) => m.venue === 'wallet-prediction' && m.coin === 'btc' && m.window === '15m' && m.start_time === marketStart)!;
  t.ok(market, 'the fill recorded the market');
  const res = await fetch(`${api.url}/v3/wallet-prediction/${market.market_id}/certificate`, {
    headers: { authorization: `Bearer ${key}` },
  });
  const body = await res.json();
  t.equal(res.status, 200, JSON.stringify(body.error ?? ''));
  const cert = body.data;

  // Independently, from the files.
  const window = { id: market.market_id, s: market.start_time, e: market.end_time };
  const [books] = (await duck.rows(
    `SELECT count(*) FILTER (WHERE ts >= epoch_ms($s::BIGINT) AND ts < epoch_ms($e::BIGINT))::INTEGER AS n, epoch_ms(min(ts))::DOUBLE AS first
     FROM ${lakeTable(dir, 'books')} WHERE market_id = $id`,
    window,
  )) as { n: number; first: number }[];
  t.equal(cert.books.recorded, books.n, `${books.n} books recorded in the window`);
  t.equal(Date.parse(cert.books.first), books.first, 'from the first recorded book');
  const checks = await duck.rows(
    `SELECT coalesce(verified_by, 'unknown') AS by, count(*)::INTEGER AS n FROM ${lakeTable(dir, 'books')}
     WHERE market_id = $id AND ts >= epoch_ms($s::BIGINT) AND ts < epoch_ms($e::BIGINT) GROUP BY ALL`,
    window,
  );
  t.same(
    cert.books.verified_by,
    { snapshot: 0, hash: 0, rest: 0, best_bid_ask: 0, none: 0, unknown: 0, ...Object.fromEntries(checks.map((r) => [r.by, r.n])) },
    `the window's books by what vouched for them, as the lake's verified_by says: ${JSON.stringify(cert.books.verified_by)}`,
  );
  t.equal(cert.books.verified_by.snapshot, books.n, 'every polled book is the venue’s own (a REST answer)');
  // Each books file's manifest entry counts its books by label, as the file holds them.
  const entries = (await listFiles(path.join(dir, 'manifest', 'books'), '.json')).flatMap(
    (rel) => (JSON.parse(readFileSync(path.join(dir, 'manifest', 'books', rel), 'utf8')) as PartitionManifest).files,
  );
  const labelled = Object.fromEntries(
    (
      await duck.rows(`SELECT coalesce(verified_by, 'unknown') AS by, count(*)::INTEGER AS n FROM ${lakeTable(dir, 'books')} GROUP BY ALL`)
    ).map((r) => [r.by, r.n]),
  );
  const summed: Record<string, number> = {};
  for (const f of entries) for (const [k, v] of Object.entries(f.verified_by ?? {})) if (v) summed[k] = (summed[k] ?? 0) + v;
  t.same(summed, labelled, `manifest entries count ${entries.length} files' books by label`);
  const verdicts = Object.fromEntries(
    (await duck.rows(`SELECT coalesce(hash_check, 'none') AS c, count(*)::INTEGER AS n FROM ${lakeTable(dir, 'books')} GROUP BY ALL`)).map(
      (r) => [r.c, r.n],
    ),
  );
  const summedVerdicts: Record<string, number> = {};
  for (const f of entries) for (const [k, v] of Object.entries(f.hash_check ?? {})) if (v) summedVerdicts[k] = (summedVerdicts[k] ?? 0) + v;
  t.same(summedVerdicts, verdicts, `and by hash verdict (${JSON.stringify(verdicts)}: polled books carry no hash check)`);
  t.same(cert.books.hash_check, { match: 0, explained: 0, mismatch: 0, unverifiable: 0, none: books.n }, "the certificate's hash verdicts");
  const spans = entries.flatMap((f) =>
    Object.entries(f.markets ?? {})
      .filter(([id]) => id === market.market_id)
      .map(([, s]) => s),
  );
  t.equal(
    spans.reduce((n, s) => n + (s[3] ?? 0), 0),
    Number(
      (
        await duck.rows(`SELECT count(*) FILTER (WHERE verified_by <> 'none') AS n FROM ${lakeTable(dir, 'books')} WHERE market_id = $id`, {
          id: window.id,
        })
      )[0].n,
    ),
    "the market's spans count its checked books",
  );
  const trades = await duck.rows(
    `SELECT source, count(*)::INTEGER AS n FROM ${lakeTable(dir, 'trades')}
     WHERE market_id = $id AND ts >= epoch_ms($s::BIGINT) AND ts < epoch_ms($e::BIGINT) GROUP BY source`,
    window,
  );
  t.same(cert.trades, Object.fromEntries(trades.map((r) => [r.source, r.n])), 'trades by source');
  const gaps = (await duck.rows(
    `SELECT reason, sum(epoch_ms(least(to_ts, epoch_ms($e::BIGINT))) - epoch_ms(greatest(from_ts, epoch_ms($s::BIGINT))))::DOUBLE / 1000 AS seconds
     FROM ${lakeTable(dir, 'gaps')} WHERE (market_id = $id OR market_id IS NULL) AND dataset = 'books'
       AND from_ts < epoch_ms($e::BIGINT) AND to_ts > epoch_ms($s::BIGINT) GROUP BY reason`,
    window,
  )) as { reason: string; seconds: number }[];
  t.ok(gaps.length > 0, `the outage is a recorded gap: ${JSON.stringify(gaps)}`);
  t.same(cert.coverage.by_reason, Object.fromEntries(gaps.map((g) => [g.reason, g.seconds])), 'seconds per reason, as the gap rows say');
  const missing = Object.values(cert.coverage.by_cause as Record<string, number>).reduce((a, b) => a + b, 0);
  t.ok(cert.coverage.by_cause.venue >= 150, `the outage (180 s injected) is charged to the venue: ${cert.coverage.by_cause.venue} s`);
  t.equal(cert.coverage.window_seconds, 900);
  t.equal(Math.round((cert.coverage.window_seconds - missing) * 1000) / 1000, cert.coverage.covered_seconds);
  t.ok(cert.coverage.share < 1 && cert.coverage.share > 0.7, `share ${cert.coverage.share}`);
  t.equal(cert.open, false);
  t.ok(
    cert.clock_offset_ms === null || cert.clock_offset_ms.p99 >= cert.clock_offset_ms.p50,
    `clock offset ${JSON.stringify(cert.clock_offset_ms)}`,
  );

  // The market record carries the same figures, read from memory (manifests' spans and the gap log).
  const get = async (path: string) => {
    const r = await fetch(`${api.url}${path}`, { headers: { authorization: `Bearer ${key}` } });
    return { status: r.status, body: await r.json() };
  };
  const record = (await get(`/v3/wallet-prediction/${market.market_id}`)).body.data;
  t.same(
    record.coverage,
    { share: cert.coverage.share, missing_seconds: cert.coverage.by_cause, recorders: null },
    'the record summarises the certificate (one capture made it: no per-recorder figures)',
  );
  const all = (await get('/v3/wallet-prediction/markets?limit=1000')).body.data as any[];
  const sealed = all.filter((m) => m.coverage !== null);
  t.ok(sealed.length >= 3, `${sealed.length} of ${all.length} windows sealed and ended carry coverage`);
  for (const m of sealed.slice(0, 6)) {
    const c = (await get(`/v3/wallet-prediction/${m.market_id}/certificate`)).body.data.coverage;
    t.same(m.coverage, { share: c.share, missing_seconds: c.by_cause, recorders: null }, `${m.market_id}: as its certificate says`);
  }
  // /coverage sums the same records by coin and window.
  const summary = (await get('/v3/wallet-prediction/coverage')).body.data.windows as any[];
  t.ok(
    summary.every((r) => Object.keys(r.recorders).length === 0),
    'one capture made the record: no per-recorder figures',
  );
  const expected = new Map<
    string,
    { windows: number; complete: number; total: number; covered: number; missing: Record<string, number> }
  >();
  for (const m of sealed) {
    const k = `${m.coin}|${m.window}`;
    const e = expected.get(k) ?? {
      windows: 0,
      complete: 0,
      total: 0,
      covered: 0,
      missing: { venue: 0, capture: 0, unproved: 0, unrecorded: 0 },
    };
    const seconds = (Date.parse(m.end_time) - Date.parse(m.start_time)) / 1000;
    const missing = Object.values(m.coverage.missing_seconds as Record<string, number>).reduce((a, b) => a + b, 0);
    e.windows++;
    if (m.coverage.share >= 0.99) e.complete++;
    e.total += seconds;
    e.covered += seconds - missing;
    for (const [cause, v] of Object.entries(m.coverage.missing_seconds as Record<string, number>)) e.missing[cause] += v;
    expected.set(k, e);
  }
  t.same(
    summary.map((r) => [`${r.coin}|${r.window}`, r.windows, r.complete, r.missing_seconds]),
    [...expected]
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([k, e]) => [
        k,
        e.windows,
        e.complete,
        Object.fromEntries(Object.entries(e.missing).map(([c, v]) => [c, Math.round(v * 1000) / 1000])),
      ]),
    `/coverage summarises the ${sealed.length} sealed windows by coin and window`,
  );
  t.ok(
    summary.every(
      (r) => Math.abs(r.share - expected.get(`${r.coin}|${r.window}`)!.covered / expected.get(`${r.coin}|${r.window}`)!.total) < 1e-5,
    ),
    'each share is the covered time over the windows’ time',
  );

  // Discovery keeps exactly the windows covered at least as much as asked.
  const threshold = cert.coverage.share + 1e-6;
  const filtered = await get(`/v3/wallet-prediction/markets?limit=1000&min_coverage=${threshold}`);
  t.equal(filtered.status, 200, JSON.stringify(filtered.body.error ?? ''));
  const complete = filtered.body.data as any[];
  t.same(
    complete.map((m) => m.market_id),
    sealed.filter((m) => m.coverage.share >= threshold).map((m) => m.market_id),
    `min_coverage=${threshold.toFixed(4)}: ${complete.length} windows`,
  );
  t.notOk(
    complete.some((m) => m.market_id === market.market_id),
    'the window with the outage is not among them',
  );
  const lower = (await get(`/v3/wallet-prediction/markets?limit=1000&min_coverage=${cert.coverage.share}`)).body.data as any[];
  t.ok(
    lower.some((m) => m.market_id === market.market_id),
    'and is at its own share',
  );
  // Each window's state: settled ones by their share, the rest pending; the filter keeps exactly those asked for.
  t.equal(cert.state, 'partial', 'the window with the outage is partial');
  t.equal(res.headers.get('retry-after'), null, 'a settled certificate has nothing to wait for');
  t.equal(record.availability.state, 'partial');
  t.ok(Date.parse(record.availability.last_modified) > 0, `last modified ${record.availability.last_modified}`);
  const expectedState = (m: any) =>
    m.coverage === null ? 'pending' : m.coverage.share >= 0.99 ? 'complete' : m.coverage.share === 0 ? 'not_captured' : 'partial';
  t.same(
    all.filter((m) => m.availability.state !== expectedState(m)).map((m) => [m.market_id, m.availability.state]),
    [],
    'every record’s state follows its coverage (null coverage: pending)',
  );
  for (const state of ['complete', 'partial', 'pending'] as const) {
    const listed = (await get(`/v3/wallet-prediction/markets?limit=1000&state=${state}`)).body.data as any[];
    t.same(
      listed.map((m) => m.market_id),
      all.filter((m) => expectedState(m) === state).map((m) => m.market_id),
      `state=${state}: ${listed.length} windows`,
    );
  }
  const pendingOne = all.find((m) => m.availability.state === 'pending' && Date.parse(m.start_time) < end);
  if (pendingOne) {
    const r = await fetch(`${api.url}/v3/wallet-prediction/${pendingOne.market_id}/certificate`, {
      headers: { authorization: `Bearer ${key}` },
    });
    t.equal((await r.json()).data.state, 'pending');
    t.ok(Number(r.headers.get('retry-after')) >= 1, `a pending certificate says when to ask again: ${r.headers.get('retry-after')} s`);
  }
  const begun = all.filter((m) => Date.parse(m.start_time) <= end);
  const counted = summary.reduce((n, r) => n + Object.values(r.states as Record<string, number>).reduce((a, b) => a + b, 0), 0);
  t.equal(counted, begun.length, `/coverage counts every window begun by now by state: ${counted}`);
  const badState = await get('/v3/wallet-prediction/markets?state=done');
  t.equal(badState.status, 400, 'an unknown state is refused');
  t.match(badState.body.error.message, /state/);
  const bad = await get('/v3/wallet-prediction/markets?min_coverage=1.5');
  t.equal(bad.status, 400, 'a share above 1 is refused');
  t.match(bad.body.error.message, /min_coverage/);

  const unknown = await fetch(`${api.url}/v3/wallet-prediction/99999999/certificate`, { headers: { authorization: `Bearer ${key}` } });
  t.equal(unknown.status, 404, 'an unknown market is 404');
});
