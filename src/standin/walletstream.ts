// The stand-in's wallet order-book stream (UPSTREAMS.md C2): Binance's signed SApi WebSocket. The
// topics are in the signed URL (`web3_prediction_orderbook_{marketId}`, or the aggregate
// `web3_prediction_orderbook_data` for every market), the key in `X-MBX-APIKEY`; a bad key or
// signature is refused at the upgrade with the venue's error. Every frame is an envelope whose
// `data` is a JSON string; the connection's acknowledgement says `data:"SUCCESS"`. Each push is one
// book per market, priced in Yes, with no token id (the No book is its mirror). At most once, no
// snapshot on subscribe and nothing replayed after a reconnect: a recorder re-fetches over REST.
// A freeze here is the venue's documented pause: nothing sent while its upstream is down.
import type http from 'node:http';
import type { WebSocket } from 'ws';
import type { Clock } from '../clock.js';
import { WINDOW_MS } from '../time.js';
import { TICKS, ladders } from './orderbook.js';
import { signatureRefusal } from './signed.js';
import type { Sim, SimMarket } from './sim.js';
import { type Outgoing, type StreamClient, type StreamFaults, StreamServer } from './streamserver.js';

export const WALLET_STREAM_PATH = '/sapi/wss';
export const WALLET_TOPIC_PREFIX = 'web3_prediction_orderbook_';
/** Every market's books on one topic. */
export const WALLET_AGGREGATE_TOPIC = 'web3_prediction_orderbook_data';

/**
 * The envelope as Binance's SApi socket frames it. Assumed from Binance's CMS socket
 * (`type`/`topic`/`data` with `data` a JSON string, acknowledgements `type:"COMMAND"`,
 * `data:"SUCCESS"`); UPSTREAMS.md C2 fixes the string payload and the ack's `data`.
 */
export const walletFrame = (topic: string, payload: unknown) => JSON.stringify({ type: 'DATA', topic, data: JSON.stringify(payload) });
export const WALLET_ACK = JSON.stringify({ type: 'COMMAND', data: 'SUCCESS', subType: 'SUBSCRIBE', code: '00000000' });

interface Subscription {
  market: SimMarket;
  topic: string;
  cursor: number;
  /** The Yes book as this connection's pushes have left it. */
  sizes: Float64Array;
}

interface Client extends StreamClient {
  topics: Set<string>;
  /** Clock time of the connection: pushes start here (nothing is replayed from before it). */
  since: number;
  markets: Map<number, Subscription>;
}

export class WalletTopics extends StreamServer<Client> {
  /** Clock time each market's pushes first started (by its wallet market id): a recorder owes its book from a stall bound after. */
  readonly subscribedAt = new Map<number, number>();

  constructor(
    sim: Sim,
    clock: Clock,
    random: () => number,
    faults: Partial<StreamFaults>,
    private readonly credentials: { apiKey: string; apiSecret: string },
  ) {
    super(sim, clock, random, faults, WALLET_STREAM_PATH);
  }

  protected override admit(req: http.IncomingMessage) {
    const url = new URL(req.url ?? '/', 'http://standin');
    const refusal = signatureRefusal(url, req.headers, this.credentials.apiKey, this.credentials.apiSecret);
    if (refusal) return refusal;
    if (!url.searchParams.get('topic')) return { status: 400, body: { code: -1102, msg: "Mandatory parameter 'topic' was not sent." } };
    return null;
  }

  protected accept(socket: WebSocket, req: http.IncomingMessage): Client {
    const topics = new Set((new URL(req.url ?? '/', 'http://standin').searchParams.get('topic') ?? '').split('|').filter(Boolean));
    const client: Client = { socket, topics, since: this.clock.now(), markets: new Map(), held: null };
    // Pushes start from the connection, not from the pump's next turn.
    this.follow(client, this.clock.now());
    socket.send(WALLET_ACK);
    return client;
  }

  /** The markets a connection's topics name that trade at `now` (the aggregate: all of them). */
  private follow(client: Client, now: number): void {
    // From where a market's pushes start: the connection, or a market the aggregate names later from its start
    // (the pump's turn comes some time after it, and the venue's pushes do not wait for that).
    const wanted: { market: SimMarket; topic: string; from: number }[] = [];
    for (const topic of client.topics) {
      if (topic === WALLET_AGGREGATE_TOPIC) {
        for (const coin of this.sim.coins['wallet-prediction']) {
          for (const window of ['5m', '15m'] as const) {
            const start = Math.floor(now / WINDOW_MS[window]) * WINDOW_MS[window];
            if (this.sim.exists('wallet-prediction', coin, window, start))
              wanted.push({
                market: this.sim.market('wallet-prediction', coin, window, start),
                topic,
                from: Math.max(client.since, start - 1),
              });
          }
        }
      } else if (topic.startsWith(WALLET_TOPIC_PREFIX)) {
        const id = Number(topic.slice(WALLET_TOPIC_PREFIX.length));
        const market = Number.isInteger(id) ? this.sim.byCode('wallet-prediction', id - 50_000_000) : null;
        if (market) wanted.push({ market, topic, from: client.since });
      }
    }
    for (const { market, topic, from } of wanted) {
      const id = this.sim.walletMarketId(market);
      if (client.markets.has(id) || from >= market.end) continue;
      client.markets.set(id, { market, topic, cursor: from, sizes: this.sim.bookState(market, 0, from).sizes.slice() });
      if (!this.subscribedAt.has(id)) this.subscribedAt.set(id, from);
    }
  }

  /** One Yes-priced book per market and instant its book changed, in time order. */
  /** The push with its best bid's size (else best ask's) one more: a book the venue never had. */
  protected override alter(m: Outgoing): Outgoing | null {
    const frame = JSON.parse(m.text) as { topic: string; data: string };
    const payload = JSON.parse(frame.data) as { bids: [string, string][]; asks: [string, string][] };
    const level = payload.bids[0] ?? payload.asks[0];
    if (!level) return null;
    level[1] = (Number(level[1]) + 1).toFixed(2);
    return { ...m, text: walletFrame(frame.topic, payload) };
  }

  protected pending(client: Client, now: number): Outgoing[] {
    this.follow(client, now);
    const out: (Outgoing & { t: number })[] = [];
    for (const [id, sub] of client.markets) {
      const { market } = sub;
      if (sub.cursor >= market.end) {
        client.markets.delete(id);
        continue;
      }
      const to = Math.min(now, market.end - 1);
      const changes = this.sim.bookChanges(market, 0, sub.cursor, to);
      for (let i = 0; i < changes.length; i++) {
        const c = changes[i];
        sub.sizes[(c.side === 'BUY' ? 0 : TICKS) + c.tick] = c.size;
        if (changes[i + 1]?.t === c.t) continue;
        const book = ladders({ ts: c.t, seq: 0, sizes: sub.sizes });
        const level = ([p, s]: [number, number]) => [p.toFixed(2), s.toFixed(2)];
        const payload = {
          msgType: 'orderbook',
          marketId: id,
          updateTimestampMs: c.t,
          bids: book.bids.map(level),
          asks: book.asks.map(level),
        };
        // A push changes both outcomes' books: the audit's keys name both tokens.
        out.push({
          t: c.t,
          text: walletFrame(sub.topic, payload),
          changes: 1,
          keys: market.tokenIds.map((token) => `${token}@${c.t}`),
        });
      }
      sub.cursor = to;
    }
    return out.sort((a, b) => a.t - b.t);
  }
}
