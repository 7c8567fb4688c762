// The feed side of the streamed-capture benchmark, a child process (the venue's side, sharing this
// machine's two cores with the recorder's threads): the stand-in's book changes for many tokens,
// grouped and hashed as the market channel sends them, prepared before the clock starts, then sent
// as fast as the sockets drain (or at a paced rate).
import { type WebSocket, WebSocketServer } from 'ws';
import { Sim } from '../src/standin/sim.js';
import { conditionId } from '../src/standin/stream.js';
import { LocalBook } from '../src/venues/polymarket/book.js';

const {
  markets: count,
  seconds,
  from,
  rate,
} = JSON.parse(process.argv[2]) as { markets: number; seconds: number; from: number; rate: number };
const sim = new Sim(1, { 'wallet-prediction': ['btc'], polymarket: ['btc', 'eth', 'sol', 'xrp'] });
const markets = Array.from({ length: count }, (_, i) => {
  const m = sim.market('polymarket', ['btc', 'eth', 'sol', 'xrp'][i % 4], '15m', from - 15 * 60_000 * Math.floor(i / 4));
  // Every benchmark market trades over the same span, whatever its real window.
  return { ...m, start: from - 60_000, end: from + seconds * 1000 + 1 };
});

const snapshots: string[] = [];
const frames: string[] = [];
let changes = 0;
const bytes = { frames: 0 };
for (const m of markets) {
  const perInstant = new Map<number, { asset: string; index: 0 | 1; price: string; size: string; side: 'BUY' | 'SELL' }[]>();
  const books = [0, 1].map((index) => {
    const state = sim.bookState(m, index as 0 | 1, from);
    const book = new LocalBook(conditionId(m), m.tokenIds[index]);
    const level = ([p, s]: [number, number]) => ({ price: String(p), size: s.toFixed(2) });
    const { bids, asks } = sim.book(m, index as 0 | 1, from);
    const summary = {
      market: conditionId(m),
      asset_id: m.tokenIds[index],
      timestamp: String(state.ts),
      bids: bids.map(level).reverse(),
      asks: asks.map(level).reverse(),
      // The hashed fields the channel's first book carries; the minimum size and neg-risk come from REST, which the bench has not.
      tick_size: '0.01',
      last_trade_price: '0.500',
    };
    book.reset(summary, state.ts);
    book.note(summary);
    snapshots.push(JSON.stringify({ event_type: 'book', ...summary, hash: book.hash(summary.timestamp) }));
    for (const c of sim.bookChanges(m, index as 0 | 1, from, from + seconds * 1000)) {
      const list = perInstant.get(c.t) ?? [];
      list.push({ asset: m.tokenIds[index], index: index as 0 | 1, price: String(c.tick / 100), size: c.size.toFixed(2), side: c.side });
      perInstant.set(c.t, list);
    }
    return book;
  });
  for (const t of [...perInstant.keys()].sort((a, b) => a - b)) {
    const list = perInstant.get(t)!;
    const entries: Record<string, string>[] = [];
    for (const c of list) {
      books[c.index].apply(c, t);
      entries.push({ asset_id: c.asset, price: c.price, size: c.size, side: c.side });
    }
    // Each token's entries carry its hash and best levels after the instant, as the venue's do.
    for (const index of new Set(list.map((c) => c.index))) {
      const { bid, ask } = books[index].best();
      const hash = books[index].hash(String(t));
      for (const e of entries) {
        if (e.asset_id !== m.tokenIds[index]) continue;
        Object.assign(e, { hash, best_bid: bid === null ? '0' : String(bid), best_ask: ask === null ? '1' : String(ask) });
      }
    }
    changes += list.length;
    frames.push(JSON.stringify({ event_type: 'price_change', market: conditionId(m), timestamp: String(t), price_changes: entries }));
  }
}
// Markets interleave in time as a real feed would.
const timed = frames.map((text) => ({
  text,
  t: Number(/"timestamp":"(\d+)"/.exec(text)![1]),
  asset: /"asset_id":"([^"]+)"/.exec(text)![1],
  changes: text.split('"asset_id"').length - 1,
}));
timed.sort((a, b) => a.t - b.t);
for (const f of timed) bytes.frames += f.text.length;
const tokenCount = markets.length * 2;

// Capture may spread the tokens over several connections (one per stream thread): each gets the
// messages of its own tokens, and the clock starts once every token is subscribed.
const wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
const socketOf = new Map<string, WebSocket>();
let started = false;
wss.on('connection', (ws) => {
  ws.once('message', (d) => {
    const assets = (JSON.parse(d.toString()) as { assets_ids: string[] }).assets_ids;
    for (const a of assets) socketOf.set(a, ws);
    if (socketOf.size === tokenCount && !started) {
      started = true;
      void send();
    }
  });
  ws.on('message', (d) => {
    if (d.toString() === 'PING') ws.send('PONG');
  });
});

async function send(): Promise<void> {
  for (const ws of new Set(socketOf.values())) {
    ws.send(`[${snapshots.filter((text) => socketOf.get(/"asset_id":"([^"]+)"/.exec(text)![1]) === ws).join(',')}]`);
  }
  const began = performance.now();
  let sent = 0;
  for (const f of timed) {
    // Paced at `rate` changes a second over all connections: an offered load the recorder must keep up with.
    while (rate > 0 && sent >= (rate * (performance.now() - began)) / 1000) await new Promise<void>((r) => setTimeout(r, 1));
    const ws = socketOf.get(f.asset)!;
    ws.send(f.text);
    sent += f.changes;
    // Back-pressure: wait for the socket to drain rather than buffer the whole feed.
    while (ws.bufferedAmount > 8 * 2 ** 20) await new Promise<void>((r) => setTimeout(r, 1));
  }
  process.send!({ sent: timed.length, sendSeconds: (performance.now() - began) / 1000 });
}
wss.on('listening', () => {
  const port = (wss.address() as { port: number }).port;
  process.send!({
    ready: true,
    port,
    changes,
    frames: frames.length,
    bytes: bytes.frames,
    tokens: markets.flatMap((m) => m.tokenIds),
    markets: markets.map((m) => ({ code: m.code, coin: m.coin, tokenIds: m.tokenIds, condition: conditionId(m) })),
  });
});
