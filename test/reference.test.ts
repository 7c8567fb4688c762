// Reference prices (issue 48): the price socket's documented messages through the real parser; the
// stand-in speaking the socket as UPSTREAMS.md E and Polymarket's clients do; the rule for the
// price at an instant; and capture recording the socket against the stand-in with its faults on,
// audited against the stand-in's model: every observation outside gaps once and exactly, none
// invented, every fault inside a gap, and each window's open and close equal to the model's.
import fs from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import WebSocket from 'ws';
import { Capture } from '../src/capture/capture.js';
import { createClock, pacedClock } from '../src/clock.js';
import { startApi } from '../src/api/server.js';
import { Duck } from '../src/lake/duckdb.js';
import { firstAtOrAfter, outcomeOf } from '../src/lake/referenceprice.js';
import { StandIn } from '../src/standin/server.js';
import { Sim } from '../src/standin/sim.js';
import { VENUE_COINS } from '../src/config.js';
import { RTDS_PATH, chainlinkAtOrAfter, modelObservation, type RtdsSource } from '../src/standin/rtds.js';
import { standinConfig } from '../src/standin/upstream.js';
import { HOUR, MINUTE, SECOND } from '../src/time.js';
import { observationsOf, rtdsProtocol } from '../src/venues/polymarket/rtds.js';
import { lakeServer, lakeTable, quiet, sealAll, testConfig, testdir } from './helpers.js';

t.test("the socket's documented messages through the parser", async (t) => {
  // UPSTREAMS.md E and the RTDS page (also Polymarket's Rust client's fixtures), verbatim.
  const chainlink = JSON.parse(
    '{"topic":"crypto_prices_chainlink","type":"update","timestamp":1753314064237,"payload":{"symbol":"eth/usd","timestamp":1753314064213,"value":3456.78}}',
  );
  const binance = JSON.parse(
    '{"topic":"crypto_prices","type":"update","timestamp":1753314088421,"payload":{"symbol":"btcusdt","timestamp":1753314088395,"value":67234.50}}',
  );
  t.same(observationsOf(chainlink), [
    { source: 'chainlink', symbol: 'eth/usd', ts: 1753314064213, price: 3456.78, sent_ts: 1753314064237 },
  ]);
  t.same(observationsOf(binance), [{ source: 'binance', symbol: 'btcusdt', ts: 1753314088395, price: 67234.5, sent_ts: 1753314088421 }]);
  // The shape RTDC documents for a filtered subscription's first frame (equity_prices' documented one, crypto's topic).
  const snapshot = {
    topic: 'crypto_prices_chainlink',
    type: 'subscribe',
    timestamp: 1711382300000,
    payload: {
      symbol: 'btc/usd',
      data: [
        { timestamp: 1711382280000, value: 67000.1 },
        { timestamp: 1711382281000, value: '67001.25' },
      ],
    },
  };
  t.same(
    observationsOf(snapshot).map((o) => [o.ts, o.price]),
    [
      [1711382280000, 67000.1],
      [1711382281000, 67001.25],
    ],
    "a snapshot's points, a price as a decimal string too (the venue's SDKs accept both)",
  );
  t.same(observationsOf([chainlink, binance]).length, 2, 'an array frame');
  for (const none of [
    { status: 'success', message: 'subscribed', connection_id: 'abc' },
    { message: 'Invalid request body' },
    { topic: 'equity_prices', type: 'update', timestamp: 1, payload: { symbol: 'aapl', timestamp: 1, value: 198.3 } },
    { ...chainlink, payload: { ...chainlink.payload, value: 'NaN' } },
    { ...chainlink, payload: { ...chainlink.payload, timestamp: null } },
    'PONG',
  ])
    t.same(observationsOf(none), [], `no observation in ${JSON.stringify(none)}`);
  t.same(rtdsProtocol.unwrap(chainlink), [chainlink]);
  t.same(rtdsProtocol.unwrap({ status: 'success' }), [], 'an acknowledgement is no data: it does not prove the feed');
  t.same(JSON.parse(rtdsProtocol.subscribe(['crypto_prices_chainlink', 'crypto_prices'], true)!), {
    action: 'subscribe',
    subscriptions: [
      { topic: 'crypto_prices_chainlink', type: '*' },
      { topic: 'crypto_prices', type: 'update' },
    ],
  });
});

t.test(
  'the price at an instant: the first observation at or after it, only where the record shows nothing was missed before it',
  async (t) => {
    const obs = [
      { ts: 1000, price: 10 },
      { ts: 2000, price: 11 },
      { ts: 3000, price: 12 },
      { ts: 9000, price: 13 },
    ];
    t.same(firstAtOrAfter(obs, [], 1500), { ts: 2000, price: 11 });
    t.same(firstAtOrAfter(obs, [], 2000), { ts: 2000, price: 11 }, 'an observation at the instant is the price at it');
    t.same(firstAtOrAfter(obs, [{ from_ts: 3000, to_ts: 9000 }], 4000), null, 'a gap between the one before and the first after: unknown');
    t.same(firstAtOrAfter(obs, [{ from_ts: 3000, to_ts: 9000 }], 2500), { ts: 3000, price: 12 }, 'a gap after the first does not matter');
    t.same(firstAtOrAfter(obs, [], 500), null, 'nothing recorded before the instant: the first recorded may not be the first sent');
    t.same(firstAtOrAfter(obs, [], 9500), null, 'nothing after it yet');
    t.equal(outcomeOf({ ts: 1, price: 5 }, { ts: 2, price: 5 }), 'Up', 'a close equal to the open is Up');
    t.equal(outcomeOf({ ts: 1, price: 5 }, { ts: 2, price: 4.99 }), 'Down');
    t.equal(outcomeOf(null, { ts: 2, price: 4 }), null);
  },
);

/** Frames a client gets on `url` after sending `frames`, until `until` says it has enough. */
async function converse(url: string, frames: string[], until: (got: string[]) => boolean): Promise<string[]> {
  const ws = new WebSocket(url);
  const got: string[] = [];
  await new Promise<void>((resolve, reject) => {
    ws.on('open', () => frames.forEach((f) => ws.send(f)));
    ws.on('message', (d) => {
      got.push(d.toString());
      if (until(got)) resolve();
    });
    ws.on('error', reject);
  });
  ws.terminate();
  return got;
}

t.test(
  'the stand-in speaks the socket: filters as the docs write them, the error for an array filter, PONG, snapshots on a filter',
  async (t) => {
    const start = Date.UTC(2026, 10, 20, 10, 0);
    const clock = pacedClock(start, 5, Date.now(), Infinity, HOUR, () => Infinity);
    const standin = new StandIn({ clock, rtdsFaults: { snapshotOnFilter: true } });
    const url = `${(await standin.start(0)).replace(/^http/, 'ws')}${RTDS_PATH}`;
    t.teardown(() => standin.stop());
    const documented = JSON.stringify({
      action: 'subscribe',
      subscriptions: [
        { topic: 'crypto_prices_chainlink', type: '*', filters: '{"symbol":"btc/usd"}' },
        { topic: 'crypto_prices', type: 'update', filters: 'btcusdt,ethusdt' },
      ],
    });
    const updates = (got: string[]) => got.filter((g) => g.includes('"update"')).map((g) => JSON.parse(g));
    const got = await converse(url, [documented, 'PING'], (g) => updates(g).length >= 12 && g.includes('PONG'));
    t.ok(got.includes('PONG'), 'PING is answered PONG');
    const snapshot = got.map((g) => JSON.parse(g === 'PONG' ? 'null' : g)).find((m) => m?.type === 'subscribe');
    t.equal(snapshot?.payload.symbol, 'btc/usd', 'a filtered subscription first gets the symbol’s recent points');
    t.ok(observationsOf(snapshot).length > 100, 'two minutes of them');
    const symbols = new Set(updates(got).map((u) => u.payload.symbol));
    t.same([...symbols].sort(), ['btc/usd', 'btcusdt', 'ethusdt'], 'only the symbols the filters name');
    for (const u of updates(got)) {
      const [o] = observationsOf(u);
      const coin = o.symbol.replace(/\/usd$|usdt$/, '');
      const model = modelObservation(standin.sim, o.source as RtdsSource, coin, Math.floor(o.ts / SECOND));
      t.same([o.ts, o.price, o.sent_ts], [model.ts, model.price, model.sent], `${o.symbol} at ${o.ts} is the model's`);
    }
    const array = JSON.stringify({
      action: 'subscribe',
      subscriptions: [{ topic: 'crypto_prices', type: 'update', filters: ['btcusdt'] }],
    });
    t.same(
      await converse(url, [array], (g) => g.length >= 1),
      ['{"message":"Invalid request body"}'],
      'a filter as a JSON array is refused',
    );
  },
);

t.test(
  'capture records the socket with its faults on: every observation outside gaps once, each fault a gap, each window priced as the model',
  async (t) => {
    const dir = testdir(t);
    const start = Date.UTC(2026, 10, 20, 10, 0) - 30 * SECOND;
    const span = 20 * MINUTE;
    const speed = 30;
    // Faults from the model's own clock: a freeze of the whole socket, a window with connections refused,
    // one symbol silent while the others flow (across a 5-minute window's start), and repeats.
    const freeze = { from: start + 3 * MINUTE, to: start + 3 * MINUTE + 40 * SECOND };
    const disconnect = { from: start + 7 * MINUTE, to: start + 7 * MINUTE + 30 * SECOND };
    const silence = { symbol: 'eth/usd', from: start + 10 * MINUTE + 10 * SECOND, to: start + 11 * MINUTE };
    const restart = { from: start + 14 * MINUTE, to: start + 15 * MINUTE + 20 * SECOND };
    let reached = () => start;
    const clock = pacedClock(start, speed, Date.now(), start + span, 10 * SECOND, () => reached());
    const standin = new StandIn({
      clock,
      rtdsFaults: { freezes: [freeze], disconnects: [disconnect], silences: [silence], duplicateRate: 0.05, reorderRate: 0.02 },
    });
    const url = await standin.start(0);
    t.teardown(() => standin.stop());
    const base = standinConfig(
      testConfig(dir, { CAPTURE_REFERENCE: 'on', STREAM_BACKOFF_MIN_MS: '20', STREAM_BACKOFF_MAX_MS: '200' }),
      url,
    );
    const config = { ...base, capture: { ...base.capture, venues: [] } };
    const duck = await Duck.open(2);
    t.teardown(() => duck.close());
    const run = async (until: number) => {
      const capture = new Capture(config, clock, duck, [], quiet, null);
      reached = () => Math.min(capture.progress(), standin.rtds.delivered());
      await capture.start();
      while (clock.now() < until) await new Promise((r) => setTimeout(r, 20));
      await capture.stop();
      return capture;
    };
    // A process that stops and one that starts later: what came between is a downtime gap.
    const first = await run(restart.from);
    reached = () => restart.to;
    while (clock.now() < restart.to) await new Promise((r) => setTimeout(r, 20));
    const second = await run(start + span);
    t.ok(first.reference!.counts.duplicates > 0, `repeats were dropped (${first.reference!.counts.duplicates})`);
    await sealAll(duck, dir);

    const rows = await duck.rows(
      `SELECT epoch_ms(ts)::BIGINT AS ts, source, symbol, price, epoch_ms(sent_ts)::BIGINT AS sent, coin, "window" FROM ${lakeTable(dir, 'reference')} ORDER BY source, symbol, ts`,
    );
    const gaps = await duck.rows(
      `SELECT market_id, epoch_ms(from_ts)::BIGINT AS f, epoch_ms(to_ts)::BIGINT AS t, reason FROM ${lakeTable(dir, 'gaps')} WHERE dataset = 'reference'`,
    );
    // That the run recorded at all, not how much: a loaded machine's stalls are gaps, which the checks
    // below account for (beside stress-ng --cpu 4 and the suite, 9,938 of the ~12,000 an idle run keeps).
    t.ok(rows.length > 5_000, `${rows.length} observations recorded`);
    t.ok(
      rows.every((r) => r.window === 'all'),
      'kept under window=all',
    );
    const seen = new Set<string>();
    let invented = 0;
    let twice = 0;
    for (const r of rows) {
      const key = `${r.symbol}@${r.ts}`;
      if (seen.has(key)) twice++;
      seen.add(key);
      const model = modelObservation(standin.sim, r.source as RtdsSource, String(r.coin), Math.floor(Number(r.ts) / SECOND));
      if (model.ts !== Number(r.ts) || model.price !== Number(r.price) || model.sent !== Number(r.sent)) invented++;
    }
    t.equal(invented, 0, 'every row is an observation the socket sent, as it sent it');
    t.equal(twice, 0, 'each recorded once');
    const gapsOf = (feed: string) => gaps.filter((g) => g.market_id === feed).map((g) => ({ from_ts: Number(g.f), to_ts: Number(g.t) }));
    const inside = (feed: string, ts: number) => gapsOf(feed).some((g) => g.from_ts < ts && g.to_ts > ts);
    let missing = 0;
    let inGaps = 0;
    const coins = [...new Set(Object.values(standin.sim.coins).flat())];
    for (const source of ['chainlink', 'binance'] as const)
      for (const coin of coins) {
        const symbol = source === 'chainlink' ? `${coin}/usd` : `${coin}usdt`;
        const feed = `${source}:${symbol}`;
        const own = rows.filter((r) => r.symbol === symbol).map((r) => Number(r.ts));
        t.ok(own.length > 0, `${feed} recorded`);
        for (let sec = Math.floor(own[0] / SECOND); sec * SECOND <= own[own.length - 1]; sec++) {
          const o = modelObservation(standin.sim, source, coin, sec);
          if (o.ts < own[0] || o.ts > own[own.length - 1] || seen.has(`${symbol}@${o.ts}`)) continue;
          if (inside(feed, o.ts)) inGaps++;
          else missing++;
        }
        for (const fault of [freeze, disconnect, restart])
          t.ok(
            gapsOf(feed).some((g) => g.from_ts < fault.to && g.to_ts > fault.from),
            `${feed}: a gap over the fault at ${new Date(fault.from).toISOString()}`,
          );
      }
    t.equal(missing, 0, `every observation sent and not recorded lies inside a gap (${inGaps} did)`);
    t.ok(
      gapsOf('chainlink:eth/usd').some((g) => g.from_ts < silence.to && g.to_ts > silence.from),
      'the silent symbol has a gap over its silence',
    );
    // The others, flowing, have none there of their own: one there is the whole socket's (a starved
    // process's silence counts on the clock), which every feed then has.
    const over = (feed: string) => gapsOf(feed).some((g) => g.from_ts < silence.to && g.to_ts > silence.from);
    t.ok(!over('chainlink:btc/usd') || over('binance:btcusdt'), 'the others, flowing, have no gap of their own there');
    t.ok(
      gaps.some((g) => g.reason === 'process_down'),
      'the downtime between the two processes is a gap',
    );
    t.ok(second.stats.reference > 0);

    // Each 5- and 15-minute window inside the run: open and close by the rule equal the model's, or null inside a gap.
    let priced = 0;
    let unknown = 0;
    for (const coin of coins) {
      const feed = `chainlink:${coin}/usd`;
      const obs = rows.filter((r) => r.symbol === `${coin}/usd`).map((r) => ({ ts: Number(r.ts), price: Number(r.price) }));
      for (const w of [5 * MINUTE, 15 * MINUTE])
        for (let s = Math.ceil(start / w) * w; s + w < start + span; s += w) {
          for (const at of [s, s + w]) {
            const got = firstAtOrAfter(obs, gapsOf(feed), at);
            const truth = chainlinkAtOrAfter(standin.sim, coin, at);
            if (got === null) {
              unknown++;
              t.ok(
                gapsOf(feed).some((g) => g.from_ts < truth.ts && g.to_ts > at - 2 * SECOND),
                `${feed} at ${new Date(at).toISOString()}: null only where a gap is`,
              );
            } else {
              priced++;
              t.same(got, { ts: truth.ts, price: truth.price }, `${feed} at ${new Date(at).toISOString()}`);
            }
          }
          const open = firstAtOrAfter(obs, gapsOf(feed), s);
          const close = firstAtOrAfter(obs, gapsOf(feed), s + w);
          if (open && close)
            t.equal(
              outcomeOf(open, close),
              standin.sim.winner({ coin, start: s, end: s + w } as never) === 0 ? 'Up' : 'Down',
              'the model’s winner',
            );
        }
    }
    t.ok(priced > 0 && unknown > 0, `${priced} instants priced, ${unknown} unknown (inside gaps)`);
    t.comment(
      `${rows.length} observations, ${gaps.length} gaps, ${inGaps} unrecorded inside them; ${priced} instants priced, ${unknown} unknown`,
    );

    // Replayed, the silent symbol's gap is said where it begins, and nothing is sent inside it.
    const api = await startApi(config, duck, createClock(start + span + HOUR, 1), quiet, { port: 0 });
    t.teardown(() => api.stop());
    const key = (await api.keys.issue('paid', 'test')).key;
    const texts = await new Promise<string[]>((resolve, reject) => {
      const ws = new WebSocket(
        `${api.url.replace(/^http/, 'ws')}/v3/replay/polymarket/rtds?from=${silence.from - 30 * SECOND}&to=${silence.to + 30 * SECOND}&speed=max`,
        { headers: { authorization: `Bearer ${key}` } },
      );
      const got: string[] = [];
      ws.on('open', () =>
        ws.send(
          JSON.stringify({
            action: 'subscribe',
            subscriptions: [{ topic: 'crypto_prices_chainlink', type: '*', filters: '{"symbol":"eth/usd"}' }],
          }),
        ),
      );
      ws.on('message', (d) => got.push(d.toString()));
      ws.on('close', () => resolve(got));
      ws.on('error', reject);
    });
    const messages = texts.map((x) => JSON.parse(x));
    const said = messages.filter((m) => m.type === 'replay_gap');
    // Every gap of the feed over the replayed range, the silence's among them, said once (a starved run may have more).
    const replayFrom = silence.from - 30 * SECOND;
    const replayTo = silence.to + 30 * SECOND;
    const expectedGaps = gapsOf('chainlink:eth/usd').filter((g) => g.from_ts < replayTo && g.to_ts > replayFrom);
    t.ok(
      expectedGaps.some((g) => g.from_ts < silence.to && g.to_ts > silence.from),
      'the silence is a gap of the feed',
    );
    t.same(
      said.map((m) => [m.payload.topic, m.payload.symbol, m.payload.from, m.payload.to]).sort(),
      expectedGaps.map((g) => ['crypto_prices_chainlink', 'eth/usd', g.from_ts, g.to_ts]).sort(),
      'the replay says each gap of the feed, once',
    );
    const updates = messages.filter((m) => m.type === 'update');
    t.ok(updates.length > 20 && updates.every((m) => m.payload.symbol === 'eth/usd'), `${updates.length} updates, of the symbol asked for`);
    t.same(
      updates.filter((m) => expectedGaps.some((g) => m.payload.timestamp > g.from_ts && m.payload.timestamp < g.to_ts)),
      [],
      'none inside them',
    );

    // The reference's coverage counts no time capture did not hold the feed: not before its first observation, nor after its last.
    const own = rows.filter((r) => r.symbol === 'btc/usd').map((r) => Number(r.ts));
    const firstBucket = Math.floor(own[0] / (5 * MINUTE)) * 5 * MINUTE;
    const lastBucket = Math.floor(own[own.length - 1] / (5 * MINUTE)) * 5 * MINUTE;
    const opening = api.lake.referenceCoverage('btc', firstBucket, firstBucket + 5 * MINUTE);
    const closing = api.lake.referenceCoverage('btc', lastBucket, lastBucket + 5 * MINUTE);
    t.ok(opening > 0 && opening <= (firstBucket + 5 * MINUTE - own[0]) / (5 * MINUTE), `the window capture started inside: ${opening}`);
    t.ok(closing > 0 && closing <= (own[own.length - 1] - lastBucket) / (5 * MINUTE), `the window capture stopped inside: ${closing}`);
  },
);

t.test('a fill records the reference; /v3/reference/{coin} serves it; every market record checks its resolution against it', async (t) => {
  const start = Date.UTC(2026, 10, 20, 10, 0);
  const end = start + 40 * MINUTE;
  // The venues resolve some markets against their own reference price: the check must find exactly those.
  // Its ~30 requests of one key come in well under a second on an idle machine: past the paid plan's 25 a second, the
  // replays were refused (429). Rate limits are not what this test is about (api.test's are).
  const { api, key, duck, dir } = await lakeServer(t, {
    start,
    end,
    env: { CAPTURE_REFERENCE: 'on', RATE_PAID_PER_SECOND: '100000' },
    fill: { misresolveRate: 0.3 },
  });
  const model = new Sim(1, VENUE_COINS);
  const k = await key();
  const get = async (path: string) => {
    const res = await fetch(`${api.url}${path}`, { headers: { authorization: `Bearer ${k}` } });
    return { status: res.status, body: (await res.json()) as { data: any; pagination: any; meta: any; error?: any } };
  };
  const lake = await duck.rows(
    `SELECT epoch_ms(ts)::BIGINT AS ts, price FROM ${lakeTable(dir, 'reference')} WHERE symbol = 'bnb/usd' AND ts >= epoch_ms(${start + 10 * MINUTE}::BIGINT) AND ts < epoch_ms(${start + 25 * MINUTE}::BIGINT) ORDER BY ts`,
  );
  t.ok(lake.length > 800, `the fill recorded bnb's Chainlink price (${lake.length} in 15 minutes)`);
  const walked: { ts: string; price: number }[] = [];
  let pages = 0;
  for (let cursor: string | null = null; pages === 0 || cursor; pages++) {
    const q = `start_time=${start + 10 * MINUTE}&end_time=${start + 25 * MINUTE}&limit=400${cursor ? `&cursor=${cursor}` : ''}`;
    const { status, body } = await get(`/v3/reference/bnb?${q}`);
    t.equal(status, 200);
    walked.push(...body.data);
    cursor = body.pagination.next_cursor;
    if (pages === 0) {
      t.same(Object.keys(body.data[0]).sort(), ['price', 'recv_ts', 'sent_ts', 'source', 'symbol', 'ts']);
      t.equal(body.data[0].source, 'chainlink');
      t.equal(body.data[0].symbol, 'bnb/usd');
      t.same(body.meta.gaps, [], 'no gap in a fill without faults');
    }
  }
  t.ok(pages >= 3, `walked in ${pages} pages`);
  t.same(
    walked.map((o) => [Date.parse(o.ts), o.price]),
    lake.map((r) => [Number(r.ts), Number(r.price)]),
    'every observation of the range once, in time order',
  );
  const binance = await get(`/v3/reference/btc?source=binance&start_time=${start + MINUTE}&end_time=${start + 2 * MINUTE}&order=desc`);
  t.equal(binance.status, 200);
  t.ok(
    binance.body.data.length >= 55 && binance.body.data.every((o: any) => o.symbol === 'btcusdt' && o.source === 'binance'),
    'the exchange source',
  );
  t.ok(Date.parse(binance.body.data[0].ts) > Date.parse(binance.body.data[1].ts), 'descending on asking');
  const range = `start_time=${start + 10 * MINUTE}&end_time=${start + 25 * MINUTE}`;
  const csv = await fetch(`${api.url}/v3/reference/bnb.csv?${range}`, { headers: { authorization: `Bearer ${k}` } });
  t.equal(csv.status, 200);
  const lines = (await csv.text()).trim().split('\n');
  t.equal(lines[0], 'ts,source,symbol,price,sent_ts,recv_ts', 'the CSV export: a header');
  t.same(
    lines.slice(1).map((l) => [Date.parse(l.split(',')[0]), Number(l.split(',')[3])]),
    lake.map((r) => [Number(r.ts), Number(r.price)]),
    'and every observation of the range',
  );
  const parquet = await fetch(`${api.url}/v3/reference/bnb?${range}&format=parquet`, { headers: { authorization: `Bearer ${k}` } });
  t.equal(parquet.status, 200);
  t.equal(
    Buffer.from(await parquet.arrayBuffer())
      .subarray(0, 4)
      .toString(),
    'PAR1',
    'the Parquet export',
  );
  t.equal((await get(`/v3/reference/bnb.csv?${range}&limit=5`)).status, 400, 'no paging with a file');
  t.equal((await get('/v3/reference/doge')).status, 404, 'a coin with no reference');
  // In bulk too, in both namespaces: bnb's reference (a wallet coin) is listed and served by the wallet namespace.
  const referenceFiles = (await get('/v3/wallet-prediction/files?dataset=reference&coin=bnb&limit=100')).body.data;
  t.ok(
    referenceFiles.length > 0 && referenceFiles.every((f: any) => f.dataset === 'reference' && f.coin === 'bnb' && f.window === 'all'),
    `${referenceFiles.length} files`,
  );
  const file = await fetch(`${api.url}${referenceFiles[0].url}`, { headers: { authorization: `Bearer ${k}` } });
  t.equal(
    Buffer.from(await file.arrayBuffer())
      .subarray(0, 4)
      .toString(),
    'PAR1',
    'and downloaded',
  );
  t.ok((await get('/v3/btc/files?dataset=reference&limit=5')).body.data.length > 0, 'and the per-coin files list theirs');
  t.ok(
    (await get('/v3/wallet-prediction/coverage')).body.data.recorded.some((r: any) => r.dataset === 'reference' && r.coin === 'bnb'),
    "/coverage's recorded spans name them",
  );
  const bad = await get('/v3/reference/btc?source=pyth');
  t.equal(bad.status, 400);
  t.match(bad.body.error.message, /source/);
  t.equal((await get(`/v3/reference/btc?start_time=${start}&end_time=${start + 400 * 86_400_000}`)).status, 400, 'a range too long');
  const res = await fetch(`${api.url}/v3/reference/btc`);
  t.equal(res.status, 401, 'a key is needed');

  // Every market record of both namespaces: open and close by the rule equal the model's, or null
  // where the record cannot vouch (before capture's first observation); the outcome the model's;
  // the venue's recorded winner checked against it.
  const records: any[] = [];
  for (const base of ['/v3/wallet-prediction/markets', ...['btc', 'eth', 'sol', 'xrp'].map((c) => `/v3/${c}/markets`)])
    for (let cursor: string | null = null, first = true; first || cursor; first = false) {
      const { body } = await get(`${base}?limit=100${cursor ? `&cursor=${cursor}` : ''}`);
      records.push(...body.data);
      cursor = body.pagination.next_cursor;
    }
  let checked = 0;
  let unknownOpen = 0;
  const disagreeing = new Set<string>();
  for (const r of records) {
    const s = Date.parse(r.start_time);
    const e = Date.parse(r.end_time);
    if (s < start || e > end - 2 * MINUTE) continue;
    const label = `${r.venue} ${r.market_id} ${r.coin} ${r.window} ${r.start_time}`;
    t.equal(r.reference.source, 'chainlink');
    t.equal(r.reference.symbol, `${r.coin}/usd`);
    for (const [got, at] of [
      [r.reference.open, s],
      [r.reference.close, e],
    ] as const) {
      const truth = chainlinkAtOrAfter(model, r.coin, at);
      if (got === null) {
        unknownOpen++;
        t.equal(at, start, `${label}: null only at capture's first instant (nothing recorded before it)`);
      } else t.same(got, { ts: new Date(truth.ts).toISOString(), price: truth.price }, `${label} at ${new Date(at).toISOString()}`);
    }
    if (!r.reference.open || !r.reference.close) {
      t.equal(r.reference.agrees_with_resolution, null, `${label}: unchecked without both`);
      continue;
    }
    const byReference = model.referenceWinner({ coin: r.coin, start: s, end: e }) === 0 ? 'Up' : 'Down';
    t.equal(r.reference.outcome_by_reference, byReference, `${label}: the model's outcome`);
    if (r.resolution !== 'resolved') continue;
    checked++;
    t.equal(r.reference.agrees_with_resolution, r.winning_outcome.label === byReference, `${label}: the venue's winner checked`);
    if (!r.reference.agrees_with_resolution) disagreeing.add(`${r.venue}:${r.market_id}`);
  }
  t.ok(checked > 20 && disagreeing.size > 0 && disagreeing.size < checked, `${checked} resolutions checked, ${disagreeing.size} disagree`);
  t.ok(unknownOpen > 0, 'windows opening as capture started have no open: nothing before it was recorded');
  const listed = new Set<string>();
  for (const base of ['/v3/wallet-prediction/markets', ...['btc', 'eth', 'sol', 'xrp'].map((c) => `/v3/${c}/markets`)]) {
    const { status, body } = await get(`${base}?resolution_check=disagrees&limit=1000`);
    t.equal(status, 200);
    for (const r of body.data) listed.add(`${r.venue}:${r.market_id}`);
  }
  t.same([...listed].sort(), [...disagreeing].sort(), 'markets?resolution_check=disagrees lists exactly those');
  const coverage = (await get('/v3/wallet-prediction/coverage')).body.data.windows;
  t.equal(
    coverage.reduce((n: number, w: any) => n + w.resolution_checks.disagrees, 0),
    [...disagreeing].filter((id) => id.startsWith('predict_fun')).length,
    '/coverage counts them by coin and window',
  );
  const one = records.find((r) => r.venue === 'polymarket' && Date.parse(r.start_time) === start + 15 * MINUTE && r.window === '15m');
  const cert = await get(`/v3/${one.coin}/markets/${one.market_id}/certificate`);
  t.equal(cert.status, 200);
  t.same(
    cert.body.data.reference,
    { ...one.reference, coverage: 1 },
    "the certificate: the record's check, the reference covering the whole window",
  );
  t.equal((await get('/v3/btc/markets?resolution_check=wrong')).status, 400);

  // The reference as a market's fourth timeseries signal: the coin's Chainlink observations over its window, on their own.
  const w = records.find((r) => r.venue === 'predict_fun' && Date.parse(r.start_time) === start + 15 * MINUTE && r.window === '15m');
  const series: any[] = [];
  for (let cursor: string | null = null, first = true; first || cursor; first = false) {
    const { status, body } = await get(
      `/v3/wallet-prediction/${w.market_id}/timeseries?metric=reference&limit=500${cursor ? `&cursor=${cursor}` : ''}`,
    );
    t.equal(status, 200);
    if (first)
      t.match(body.meta, { metric: 'reference', outcome: null, reference: { source: 'chainlink', symbol: `${w.coin}/usd` }, gaps: [] });
    series.push(...body.data);
    cursor = body.pagination.next_cursor;
  }
  const direct = (await get(`/v3/reference/${w.coin}?start_time=${w.start_time}&end_time=${Date.parse(w.end_time) + 60_000}&limit=1000`))
    .body.data;
  t.same(
    series.map((p) => [p.timestamp, p.value]),
    direct.map((o: any) => [o.ts, o.price]),
    'every observation of the window and its capture lag',
  );
  t.same(
    series.find((p) => p.timestamp >= w.start_time),
    { timestamp: w.reference.open.ts, value: w.reference.open.price },
    "the record's open is among them",
  );
  const minutes = (await get(`/v3/wallet-prediction/${w.market_id}/timeseries?metric=reference&interval=1m&limit=100`)).body.data;
  t.equal(minutes.length, 16, 'the last of each minute (and of the capture lag’s)');
  const exported = await fetch(`${api.url}/v3/wallet-prediction/${w.market_id}/timeseries.csv?metric=reference`, {
    headers: { authorization: `Bearer ${k}` },
  });
  t.equal((await exported.text()).trim().split('\n').length, series.length + 1, 'the CSV export: a header and every sample');

  // Replay over a socket speaking the price socket's protocol: the documented subscribe frame, every
  // observation of the range sent in the venue's own message, as the venue sent it, read back by capture's parser.
  const base = api.url.replace(/^http/, 'ws');
  const rtds = (query: string, frames: string[]) =>
    new Promise<{ texts: string[]; arrivals: number[] }>((resolve, reject) => {
      const ws = new WebSocket(`${base}/v3/replay/polymarket/rtds?${query}`, { headers: { authorization: `Bearer ${k}` } });
      const got = { texts: [] as string[], arrivals: [] as number[] };
      ws.on('open', () => frames.forEach((f) => ws.send(f)));
      ws.on('message', (d) => {
        got.texts.push(d.toString());
        got.arrivals.push(api.clock.now());
      });
      ws.on('close', () => resolve(got));
      ws.on('error', reject);
    });
  const from = start + 20 * MINUTE;
  const to = from + 3 * MINUTE;
  const documented = JSON.stringify({
    action: 'subscribe',
    subscriptions: [
      { topic: 'crypto_prices_chainlink', type: '*', filters: '{"symbol":"btc/usd"}' },
      { topic: 'crypto_prices', type: 'update', filters: 'btcusdt,ethusdt' },
    ],
  });
  const replayed = await rtds(`from=${from}&to=${to}&speed=max`, [documented, 'PING', 'not json', '{"replay":"seek"}']);
  t.ok(
    replayed.texts.some(
      (x) => x.startsWith('{"topic":"replay","type":"replay_error"') && /a seek needs "to"/.test(JSON.parse(x).payload.message),
    ),
    "a replay control is answered in the socket's framing, on a topic of its own",
  );
  t.ok(replayed.texts.includes('PONG'), 'PING is answered PONG');
  t.ok(replayed.texts.includes('{"message":"Invalid request body"}'), 'a frame the socket cannot take is answered with its error body');
  const ended = JSON.parse(replayed.texts.at(-1)!);
  t.match(ended, { topic: 'replay', type: 'replay_end', payload: { from, to } }, 'the last frame ends the replay');
  const got = replayed.texts.flatMap((x) => (x.startsWith('{"topic":"crypto') ? observationsOf(JSON.parse(x)) : []));
  const want = await duck.rows(
    `SELECT source, symbol, epoch_ms(ts)::BIGINT AS ts, price, epoch_ms(sent_ts)::BIGINT AS sent FROM ${lakeTable(dir, 'reference')}
     WHERE ((source = 'chainlink' AND symbol = 'btc/usd') OR (source = 'binance' AND symbol IN ('btcusdt', 'ethusdt')))
       AND sent_ts >= epoch_ms(${from}::BIGINT) AND sent_ts < epoch_ms(${to}::BIGINT) ORDER BY sent_ts, ts, symbol`,
  );
  t.ok(want.length > 500, `${want.length} observations in the range`);
  t.same(
    [...got].sort((a, b) => a.sent_ts - b.sent_ts || a.ts - b.ts || a.symbol.localeCompare(b.symbol)),
    want.map((r) => ({ source: r.source, symbol: r.symbol, ts: Number(r.ts), price: Number(r.price), sent_ts: Number(r.sent) })),
    'every observation of the subscribed symbols once, as the venue sent it',
  );
  t.same(
    got.map((o) => o.sent_ts),
    [...got.map((o) => o.sent_ts)].sort((a, b) => a - b),
    'in the order the socket sent them',
  );
  t.equal(ended.payload.messages, got.length);
  // Beside the market channel on one timeline (the same play_at): neither sends an instant before its time on it.
  // On the API's clock, which play_at is read on.
  const playAt = api.clock.now() + 1500;
  const speed = 30;
  const market = records.find(
    (r) => r.venue === 'polymarket' && Date.parse(r.start_time) <= from && Date.parse(r.end_time) >= from + MINUTE,
  );
  const window = `from=${from}&to=${from + MINUTE}&speed=${speed}&play_at=${playAt}`;
  const [prices, books] = await Promise.all([
    rtds(window, [JSON.stringify({ action: 'subscribe', subscriptions: [{ topic: 'crypto_prices_chainlink', type: '*' }] })]),
    new Promise<{ texts: string[]; arrivals: number[] }>((resolve, reject) => {
      const ws = new WebSocket(`${base}/v3/replay/polymarket/ws/market?${window}`, { headers: { authorization: `Bearer ${k}` } });
      const got = { texts: [] as string[], arrivals: [] as number[] };
      ws.on('open', () => ws.send(JSON.stringify({ assets_ids: market.outcomes.map((o: any) => o.token_id), type: 'market' })));
      ws.on('message', (d) => {
        got.texts.push(d.toString());
        got.arrivals.push(api.clock.now());
      });
      ws.on('close', () => resolve(got));
      ws.on('error', reject);
    }),
  ]);
  const early = (texts: string[], arrivals: number[], timeOf: (m: any) => number | null) =>
    texts.flatMap((x, i) => {
      const m = JSON.parse(x.startsWith('[') ? x : `[${x}]`)[0];
      const at = timeOf(m);
      return at !== null && arrivals[i] < playAt + (at - from) / speed - 5 ? [x.slice(0, 80)] : [];
    });
  const priceTimes = prices.texts.filter((x) => x.startsWith('{"topic":"crypto')).length;
  t.ok(priceTimes > 50 && books.texts.length > 1, `${priceTimes} prices and ${books.texts.length} book frames on one timeline`);
  t.same(
    early(prices.texts, prices.arrivals, (m) => (m.topic?.startsWith('crypto') ? m.timestamp : null)),
    [],
    'no price before its time',
  );
  t.same(
    early(books.texts, books.arrivals, (m) => (m.timestamp && m.event_type !== 'replay_end' ? Number(m.timestamp) : null)),
    [],
    'no book before its time',
  );

  // The analyst guide's reference examples run against this lake and return rows.
  const guide = await fs.readFile(path.resolve('docs/ANALYSTS.md'), 'utf8');
  const examples = [...guide.matchAll(/```sql\n-- run with reference\n([\s\S]*?)```/g)].map((m) =>
    m[1].replaceAll('LAKE', path.join(dir, 'lake')),
  );
  t.equal(examples.length, 2, 'two examples');
  for (const example of examples) t.ok((await duck.rows(example.trim().replace(/;$/, ''))).length > 0, example.split('\n')[0]);
});
