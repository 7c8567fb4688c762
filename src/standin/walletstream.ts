// The stand-in's wallet orderbook topics (UPSTREAMS.md A): `web3_prediction_orderbook_{marketId}`
// on a Binance-style stream (SUBSCRIBE by topic name), each message a whole book of one outcome
// token with its `updateTimestampMs`. At most once, no snapshot on subscribe and nothing replayed
// after a reconnect: a recorder re-fetches over REST. Faults as on the market channel.
import type { WebSocket } from 'ws';
import type { Clock } from '../clock.js';
import { TICKS, ladders } from './orderbook.js';
import type { Sim, SimMarket } from './sim.js';
import { type Outgoing, type StreamClient, type StreamFaults, StreamServer } from './streamserver.js';

export const WALLET_STREAM_PATH = '/ws/web3';
export const WALLET_TOPIC_PREFIX = 'web3_prediction_orderbook_';

interface Subscription {
  market: SimMarket;
  cursor: number;
  sizes: [Float64Array, Float64Array];
}

interface Client extends StreamClient {
  topics: Map<string, Subscription>;
}

export class WalletTopics extends StreamServer<Client> {
  constructor(sim: Sim, clock: Clock, random: () => number, faults: Partial<StreamFaults> = {}) {
    super(sim, clock, random, faults, WALLET_STREAM_PATH);
  }

  protected accept(socket: WebSocket): Client {
    const client: Client = { socket, topics: new Map(), held: null };
    socket.on('message', (data) => {
      let request: { method?: unknown; params?: unknown; id?: unknown };
      try {
        request = JSON.parse(data.toString());
      } catch {
        return socket.send(JSON.stringify({ error: { code: 2, msg: 'Invalid JSON' } }));
      }
      if (request.method !== 'SUBSCRIBE' || !Array.isArray(request.params)) {
        return socket.send(JSON.stringify({ error: { code: 1, msg: 'Invalid request' }, id: request.id ?? null }));
      }
      const now = this.clock.now();
      for (const topic of request.params.map(String)) {
        const id = Number(topic.startsWith(WALLET_TOPIC_PREFIX) ? topic.slice(WALLET_TOPIC_PREFIX.length) : NaN);
        const market = Number.isInteger(id) ? this.sim.byCode('wallet-prediction', id - 50_000_000) : null;
        if (!market || client.topics.has(topic)) continue;
        const at = Math.min(now, market.end - 1);
        const sizes = [0, 1].map((i) => this.sim.bookState(market, i as 0 | 1, at).sizes.slice()) as [Float64Array, Float64Array];
        client.topics.set(topic, { market, cursor: now, sizes });
      }
      socket.send(JSON.stringify({ result: null, id: request.id ?? null }));
    });
    return client;
  }

  /** One whole book per token and instant its book changed, in time order. */
  protected pending(client: Client, now: number): Outgoing[] {
    const out: (Outgoing & { t: number })[] = [];
    for (const [topic, sub] of client.topics) {
      const { market } = sub;
      if (sub.cursor >= market.end) continue;
      const to = Math.min(now, market.end - 1);
      for (const index of [0, 1] as const) {
        const changes = this.sim.bookChanges(market, index, sub.cursor, to);
        const sizes = sub.sizes[index];
        for (let i = 0; i < changes.length; i++) {
          const c = changes[i];
          sizes[(c.side === 'BUY' ? 0 : TICKS) + c.tick] = c.size;
          if (changes[i + 1]?.t === c.t) continue;
          const book = ladders({ ts: c.t, seq: 0, sizes });
          const level = ([p, s]: [number, number]) => ({ price: p.toFixed(2), size: s.toFixed(2) });
          const data = {
            marketId: this.sim.walletMarketId(market),
            tokenId: market.tokenIds[index],
            outcome: index === 0 ? 'YES' : 'NO',
            updateTimestampMs: c.t,
            bids: book.bids.map(level),
            asks: book.asks.map(level),
          };
          out.push({ t: c.t, text: JSON.stringify({ stream: topic, data }), changes: 1, keys: [`${market.tokenIds[index]}@${c.t}`] });
        }
      }
      sub.cursor = to;
    }
    return out.sort((a, b) => a.t - b.t);
  }
}
