// The wallet venue's replay: its signed socket's shape (topics in the URL, `DATA` frames whose
// `data` is a JSON string, one Yes-priced book per push) from a lake capture recorded off the
// stand-in's wallet stream with a disconnect; parsed by capture's own protocol code, and capture's
// wallet recorder pointed at it records the original's books row for row.
import t from 'tap';
import WebSocket from 'ws';
import { startApi } from '../src/api/server.js';
import { createClock } from '../src/clock.js';
import { SECOND } from '../src/time.js';
import { walletTopics } from '../src/venues/wallet/channel.js';
import { quiet, testConfig } from './helpers.js';
import { roundTrip } from './replayrun.js';
import { type LiveRecording, cutsOf, recordWalletTopics, walletPushesOf, walletTimes } from './liveclient.js';
import { WALLET_STREAM_PATH } from '../src/standin/walletstream.js';
import { OPEN, stopGaps, streamRun } from './streamrun.js';

const START = OPEN + 250 * SECOND;
const DISCONNECT = { from: START + 40 * SECOND, to: START + 46 * SECOND };
// A live bot's record of the same session: every frame of the aggregate topic the venue sent it.
let live: LiveRecording | null = null;
const run = await streamRun(t, { disconnects: [DISCONNECT] }, 5, 20, {
  venue: 'wallet-prediction',
  start: START,
  spanMs: 100 * SECOND,
  during: async (_capture, _clock, { url }) => {
    live = recordWalletTopics(`${url.replace('http', 'ws')}${WALLET_STREAM_PATH}`, 'standin-key', 'standin-secret');
  },
});
const liveFrames = (live as LiveRecording | null)!;
liveFrames.stop();
const END = run.end;

const api = await startApi(testConfig(run.dir, { RATE_PAID_PER_SECOND: '1000' }), run.duck, createClock(END + 60 * SECOND, 1), quiet, {
  port: 0,
});
t.teardown(() => api.stop());
const paid = (await api.keys.issue('paid', 'replay')).key;
const path = '/v3/replay/wallet-prediction/sapi/wss';
const protocol = walletTopics('venue-key', 'venue-secret');

/** Connects with the venue's signed URL shape, as capture's own client builds it, and collects the unwrapped pushes. */
function replay(query: string, topics: string[]): Promise<{ pushes: Record<string, unknown>[]; frames: string[]; code: number }> {
  return new Promise((resolve, reject) => {
    const url = `${api.url.replace('http', 'ws')}${path}?${query}`;
    const signed = walletTopics('venue-key', 'venue-secret').url!(url).replace(
      /topic=[^&]*/,
      `topic=${encodeURIComponent(topics.join('|'))}`,
    );
    const ws = new WebSocket(signed, { headers: { ...protocol.headers, Authorization: `Bearer ${paid}` } });
    const got = { pushes: [] as Record<string, unknown>[], frames: [] as string[], code: 0 };
    ws.on('message', (data) => {
      const text = data.toString();
      got.frames.push(text);
      for (const m of protocol.unwrap(JSON.parse(text))) got.pushes.push(m as Record<string, unknown>);
    });
    ws.on('unexpected-response', (_req, res) => reject(new Error(`refused ${res.statusCode}`)));
    ws.on('close', (code) => resolve({ ...got, code }));
    ws.on('error', reject);
  });
}

const ups = run.rows.filter((r) => r.outcome_index === 0 && r.ts >= START && r.ts < END);
const markets = [...new Set(run.rows.map((r) => r.market_id))];

t.test('the replay pushes what the venue pushed: a live client’s record of the session, book by book', async (t) => {
  const got = await replay(`from=${START}&to=${END}&speed=max`, ['web3_prediction_orderbook_data']);
  const keyed = (pushes: Record<string, unknown>[]) =>
    new Map(
      pushes
        .filter((p) => p.msgType === 'orderbook')
        .map((p) => [`${p.marketId}@${p.updateTimestampMs}`, JSON.stringify([p.bids, p.asks])] as const),
    );
  const heard = keyed(walletPushesOf(liveFrames.frames));
  const replayed = keyed(got.pushes);
  // Outside the record's gaps and the live client's own cuts (the venue replays nothing after a reconnect).
  const gaps = [...run.gaps, ...(await stopGaps(run))];
  const cuts = cutsOf(liveFrames.frames, walletTimes);
  let compared = 0;
  const differ: string[] = [];
  for (const [key, books] of replayed) {
    const [market, at] = key.split('@');
    const ts = Number(at);
    if (ts < START || gaps.some((g) => g.market_id === market && ts >= g.f - 10 && ts <= g.t + 10)) continue;
    if (cuts.some((c) => ts >= c.from && ts <= c.to)) continue;
    const l = heard.get(key);
    if (l === undefined) continue;
    compared++;
    if (l !== books) differ.push(`${key}: ${l} != ${books}`);
  }
  t.ok(heard.size > 100, `${heard.size} books the live client was pushed`);
  // Most recorded books are REST polls (the venue never pushed them), and the disconnect cuts the client off.
  t.ok(compared > 50, `${compared} books both pushed, compared`);
  t.same(differ.slice(0, 3), [], `${differ.length} differ in their levels or text`);
});

t.test('the aggregate topic replays every market’s recorded Yes books, in the venue’s frames', async (t) => {
  t.ok(markets.length >= 3, `${markets.length} markets`);
  const got = await replay(`from=${START}&to=${END}&speed=max`, ['web3_prediction_orderbook_data']);
  t.equal(got.code, 1000);
  t.same(JSON.parse(got.frames[0]), { type: 'COMMAND', data: 'SUCCESS', subType: 'SUBSCRIBE', code: '00000000' }, 'acknowledged first');
  for (const f of got.frames.slice(1)) {
    const frame = JSON.parse(f) as { type: string; topic: string; data: unknown };
    if (frame.type !== 'DATA' || frame.topic !== 'web3_prediction_orderbook_data' || typeof frame.data !== 'string')
      t.fail(`frame ${f.slice(0, 200)}`);
  }
  const books = got.pushes.filter((p) => p.msgType === 'orderbook' && Number(p.updateTimestampMs) >= START);
  const key = (market: string | number, ts: number, bids: unknown, asks: unknown) => `${market}@${ts}:${JSON.stringify([bids, asks])}`;
  // In time order; the order of two markets' books of one millisecond is not defined.
  const times = books.map((p) => Number(p.updateTimestampMs));
  t.ok(
    times.every((x, i) => i === 0 || x >= times[i - 1]),
    'in time order',
  );
  t.same(
    books.map((p) => key(p.marketId as number, Number(p.updateTimestampMs), p.bids, p.asks)).sort(),
    ups
      .map((r) =>
        key(
          Number(r.market_id),
          r.ts,
          // In the venue's text: the stand-in writes every price and size with two decimals (standin/walletstream.ts).
          r.bid_prices.map((p, i) => [p.toFixed(2), r.bid_sizes[i].toFixed(2)]),
          r.ask_prices.map((p, i) => [p.toFixed(2), r.ask_sizes[i].toFixed(2)]),
        ),
      )
      .sort(),
    `${ups.length} Yes books, each once, in the venue's text`,
  );
  const gaps = got.frames
    .slice(1)
    .map((f) => JSON.parse(JSON.parse(f).data ?? 'null'))
    .filter((d) => d?.msgType === 'replay_gap');
  t.same(
    gaps.map((g) => `${g.marketId}:${g.from}:${g.to}:${g.reason}`).sort(),
    [...run.gaps, ...(await stopGaps(run))]
      .filter((g) => g.t > START && g.f < END)
      .map((g) => `${g.market_id}:${g.f}:${g.t}:${g.reason}`)
      .sort(),
    'every book gap announced, and passed by the venue client’s unwrap (no updateTimestampMs)',
  );
  t.notOk(got.pushes.some((p) => p.msgType === 'replay_gap'));
  // The end: per market played, its window's state, coverage and gaps as its certificate says, and the frames it sent.
  const end = JSON.parse(JSON.parse(got.frames.at(-1)!).data) as {
    msgType: string;
    markets: { marketId: number; state: string | null; coverage: object | null; gaps: number; messages: number }[];
  };
  t.equal(end.msgType, 'replay_end');
  const played = [...new Set(ups.map((r) => Number(r.market_id)))];
  t.ok(
    played.every((id) => end.markets.some((q) => q.marketId === id)),
    `every market with books in the range is in the end packet (${end.markets.length} played)`,
  );
  for (const q of end.markets) {
    const frames = got.frames.slice(1, -1).filter((f) => JSON.parse(JSON.parse(f).data).marketId === q.marketId).length;
    t.equal(q.messages, frames, `${q.marketId}: ${frames} frames`);
    const res = await fetch(`${api.url}/v3/wallet-prediction/${q.marketId}/certificate`, {
      headers: { Authorization: `Bearer ${paid}` },
    });
    const cert = ((await res.json()) as { data: { state: string; coverage: object; gaps: unknown[] } }).data;
    t.same(
      [q.state, q.gaps, q.coverage],
      [cert.state, cert.gaps.length, cert.state === 'pending' ? null : cert.coverage],
      `${q.marketId}: ${cert.state}, ${cert.gaps.length} gaps, as its certificate`,
    );
  }
});

t.test('a seek on the aggregate topic: each market of that moment from its book there, answered in the venue framing', async (t) => {
  const mid = START + 30 * SECOND + 123;
  const url = walletTopics('venue-key', 'venue-secret').url!(
    `${api.url.replace('http', 'ws')}${path}?from=${START}&to=${mid + 4 * SECOND}&speed=2`,
  ).replace(/topic=[^&]*/, 'topic=web3_prediction_orderbook_data');
  const ws = new WebSocket(url, { headers: { ...protocol.headers, Authorization: `Bearer ${paid}` } });
  const payloads: Record<string, unknown>[] = [];
  ws.on('message', (data) => {
    const frame = JSON.parse(data.toString()) as { type: string; data?: string };
    if (frame.type === 'DATA' && typeof frame.data === 'string') payloads.push(JSON.parse(frame.data));
  });
  const closed = new Promise((resolve) => ws.on('close', resolve));
  await new Promise((resolve) => ws.once('open', resolve));
  ws.send(JSON.stringify({ replay: 'pause' }));
  ws.send(JSON.stringify({ replay: 'seek', to: String(mid) }));
  ws.send(JSON.stringify({ replay: 'resume' }));
  await closed;
  const kinds = payloads.map((p) => p.msgType).filter((k) => String(k).startsWith('replay_') && k !== 'replay_gap');
  t.same(kinds, ['replay_paused', 'replay_seeked', 'replay_resumed', 'replay_end'], 'each control answered in order, the end last');
  const seeked = payloads.findIndex((p) => p.msgType === 'replay_seeked');
  t.equal(payloads[seeked].timestamp, mid);
  const after = payloads.slice(seeked).filter((p) => p.msgType === 'orderbook');
  // A market recording at `mid` starts again from the Yes book it held then.
  const live = [...new Set(ups.filter((r) => r.ts < mid).map((r) => Number(r.market_id)))].filter((id) =>
    ups.some((r) => Number(r.market_id) === id && r.ts >= mid),
  );
  t.ok(live.length > 0);
  for (const id of live) {
    const held = ups.filter((r) => Number(r.market_id) === id && r.ts < mid).at(-1)!;
    const first = after.find((p) => p.marketId === id);
    t.equal(first?.updateTimestampMs, held.ts, `${id} starts again from its book held at the seek`);
  }
});

t.test('one market’s own topic replays that market alone; a malformed topic is refused', async (t) => {
  const id = markets[0];
  const got = await replay(`from=${START}&to=${END}&speed=max`, [`web3_prediction_orderbook_${id}`]);
  t.ok(got.pushes.length > 0);
  t.ok(got.pushes.every((p) => String(p.marketId) === id));
  await t.rejects(replay(`from=${START}&to=${END}&speed=max`, ['orderbook_everything']), /refused 400/);
});

t.test('round trip: capture’s wallet recorder pointed at the replay records the original’s books, row for row', async (t) => {
  const { diagnosis, compared, unrecorded, missing, extra } = await roundTrip(t, 'wallet-prediction', run, START, END);
  t.ok(compared > 200, `${compared} rows of A compared`, { diagnosis });
  t.same(unrecorded, [], 'every outcome A recorded after B subscribed, B recorded too');
  t.same(missing.slice(0, 3), [], `${missing.length} of A's rows not in B`);
  t.same(extra.slice(0, 3), [], `${extra.length} of B's rows not in A`);
});
