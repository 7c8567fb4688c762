// The stand-in's Polymarket price socket (RTDS, UPSTREAMS.md E; docs/RTDS-STUDY.md): subscribe
// and unsubscribe by topic, with or without `filters` (the Chainlink topic's a JSON string with one
// symbol, the exchange topic's comma-separated pairs); a filter that is not a string is answered
// `{"message":"Invalid request body"}` and nothing is sent for it, as third parties report of the
// real host. Updates `{"topic","type":"update","timestamp","payload":{"symbol","timestamp","value"}}`,
// one an observation, about one a second per symbol, in time order across symbols; no snapshot on
// an unfiltered subscription (a filtered one may first get a `type:"subscribe"` frame of recent
// points, knob `snapshotOnFilter`), no sequence; text `PING` answered `PONG`. Prices follow the
// model's reference path (`Sim.reference`), the one the stand-in's markets resolve on, so a
// window's open and close from the socket decide its winner. Faults: the shared ones (drops,
// duplicates, reorders, freezes, disconnects) and `silences`, one symbol sending nothing while
// the others flow.
import type http from 'node:http';
import type { WebSocket } from 'ws';
import type { Clock } from '../clock.js';
import { SECOND } from '../time.js';
import type { Sim } from './sim.js';
import { type Outgoing, type StreamClient, type StreamFaults, StreamServer } from './streamserver.js';

export const RTDS_PATH = '/rtds';

export type RtdsSource = 'chainlink' | 'binance';
const TOPICS: Record<RtdsSource, string> = { chainlink: 'crypto_prices_chainlink', binance: 'crypto_prices' };
const SOURCES = Object.keys(TOPICS) as RtdsSource[];

export interface RtdsFaults extends StreamFaults {
  /** Clock windows in which one symbol (`btc/usd`, `ethusdt`) sends nothing while the others flow (its observations are lost). */
  silences: { symbol: string; from: number; to: number }[];
  /** A filtered subscription first gets a `type:"subscribe"` frame of the symbol's last two minutes. */
  snapshotOnFilter: boolean;
}

/** One observation of the model: its own time, its price, and when the socket sends it. */
export interface ModelObservation {
  source: RtdsSource;
  symbol: string;
  coin: string;
  ts: number;
  price: number;
  sent: number;
}

export const symbolOf = (source: RtdsSource, coin: string): string => (source === 'chainlink' ? `${coin}/usd` : `${coin}usdt`);

/**
 * The observation of `coin` on `source` for second `sec`: one a second, stamped within it, with
 * the price of that second; the exchange's stands a few basis points off the oracle's.
 */
export function modelObservation(sim: Sim, source: RtdsSource, coin: string, sec: number): ModelObservation {
  const ts = sec * SECOND + Math.floor(sim.rand(coin, source, 'offset', sec) * 400);
  const oracle = sim.reference(coin, ts);
  const price = source === 'chainlink' ? oracle : Math.round(oracle * (1 + 0.0004 * (sim.rand(coin, 'basis', sec) - 0.5)) * 100) / 100;
  const sent = ts + 20 + Math.floor(sim.rand(coin, source, 'latency', sec) * 200);
  return { source, symbol: symbolOf(source, coin), coin, ts, price, sent };
}

/** The model's first Chainlink observation of `coin` at or after `t`: a window's open or close as the rule reads it. */
export function chainlinkAtOrAfter(sim: Sim, coin: string, t: number): ModelObservation {
  const sec = Math.floor(t / SECOND);
  const o = modelObservation(sim, 'chainlink', coin, sec);
  return o.ts >= t ? o : modelObservation(sim, 'chainlink', coin, sec + 1);
}

/** Symbols the socket sends that no market here trades. */
export const OTHER_COINS = ['doge', 'hype'];

export const INVALID_REQUEST = JSON.stringify({ message: 'Invalid request body' });

interface Client extends StreamClient {
  /** Per topic, the symbols asked for (null: every symbol). */
  topics: Map<string, Set<string> | null>;
  /** Observations sent up to this clock time (nothing before the connection is replayed). */
  cursor: number;
}

export class RtdsSocket extends StreamServer<Client> {
  declare readonly faults: RtdsFaults;
  private readonly coins: string[];

  constructor(sim: Sim, clock: Clock, random: () => number, faults: Partial<RtdsFaults>) {
    super(sim, clock, random, faults, RTDS_PATH);
    Object.assign(this.faults, { silences: [], snapshotOnFilter: false, ...faults });
    // The venue's socket relays more symbols than the markets' coins (RTDS-STUDY.md 4): a recorder keeps its own.
    this.coins = [...new Set([...Object.values(sim.coins).flat(), ...OTHER_COINS])];
  }

  protected accept(socket: WebSocket, _req: http.IncomingMessage): Client {
    const client: Client = { socket, held: null, topics: new Map(), cursor: this.clock.now() };
    socket.on('message', (data, isBinary) => {
      if (isBinary) return;
      const text = data.toString();
      if (text === 'PING') return socket.send('PONG');
      this.command(client, text);
    });
    return client;
  }

  private command(client: Client, text: string): void {
    let frame: { action?: unknown; subscriptions?: unknown };
    try {
      frame = JSON.parse(text);
    } catch {
      return client.socket.send(INVALID_REQUEST);
    }
    const subs = frame.subscriptions;
    if ((frame.action !== 'subscribe' && frame.action !== 'unsubscribe') || !Array.isArray(subs))
      return client.socket.send(INVALID_REQUEST);
    for (const sub of subs as { topic?: unknown; type?: unknown; filters?: unknown }[]) {
      const source = SOURCES.find((s) => TOPICS[s] === sub?.topic);
      if (!source || (sub.filters !== undefined && typeof sub.filters !== 'string')) {
        client.socket.send(INVALID_REQUEST);
        continue;
      }
      const symbols = this.filtered(source, sub.filters);
      if (symbols === undefined) {
        client.socket.send(INVALID_REQUEST);
        continue;
      }
      const topic = TOPICS[source];
      if (frame.action === 'unsubscribe') {
        client.topics.delete(topic);
        continue;
      }
      const had = client.topics.get(topic);
      client.topics.set(topic, symbols === null || had === null ? null : new Set([...(had ?? []), ...symbols]));
      if (symbols && this.faults.snapshotOnFilter) for (const symbol of symbols) this.snapshot(client, source, symbol);
    }
  }

  /** The symbols a `filters` string names (null: all), or undefined when it names none the venue reads. */
  private filtered(source: RtdsSource, filters: string | undefined): Set<string> | null | undefined {
    if (filters === undefined || filters === '') return null;
    if (source === 'chainlink') {
      try {
        const f = JSON.parse(filters) as { symbol?: unknown };
        return typeof f?.symbol === 'string' ? new Set([f.symbol.toLowerCase()]) : undefined;
      } catch {
        return undefined;
      }
    }
    const pairs = filters.split(',').map((p) => p.trim().toLowerCase());
    return pairs.every((p) => /^[a-z0-9]+$/.test(p)) ? new Set(pairs) : undefined;
  }

  /** The `subscribe` frame of a symbol's last two minutes (RTDC's "initial snapshoot of recent data"). */
  private snapshot(client: Client, source: RtdsSource, symbol: string): void {
    const coin = this.coins.find((c) => symbolOf(source, c) === symbol);
    if (!coin) return;
    const now = this.clock.now();
    const data: { timestamp: number; value: number }[] = [];
    for (let sec = Math.floor((now - 120 * SECOND) / SECOND); sec <= Math.floor(now / SECOND); sec++) {
      const o = modelObservation(this.sim, source, coin, sec);
      if (o.sent <= now) data.push({ timestamp: o.ts, value: o.price });
    }
    client.socket.send(JSON.stringify({ topic: TOPICS[source], type: 'subscribe', timestamp: now, payload: { symbol, data } }));
  }

  /** Observations sent in (cursor, now] for the client's topics and symbols, in the order they are sent. */
  protected pending(client: Client, now: number): Outgoing[] {
    const from = client.cursor;
    client.cursor = now;
    if (now <= from || client.topics.size === 0) return [];
    const out: ModelObservation[] = [];
    // An observation is sent up to 220 ms after its own second began + 400 ms.
    for (let sec = Math.floor((from - SECOND) / SECOND); sec <= Math.floor(now / SECOND); sec++) {
      for (const source of SOURCES) {
        const wanted = client.topics.get(TOPICS[source]);
        if (wanted === undefined) continue;
        for (const coin of this.coins) {
          const o = modelObservation(this.sim, source, coin, sec);
          if (o.sent <= from || o.sent > now || (wanted !== null && !wanted.has(o.symbol))) continue;
          if (this.faults.silences.some((s) => s.symbol === o.symbol && o.ts >= s.from && o.ts < s.to)) {
            if (this.undelivered.size < 100_000) this.undelivered.add(`${o.symbol}@${o.ts}`);
            continue;
          }
          out.push(o);
        }
      }
    }
    return out
      .sort((a, b) => a.sent - b.sent || a.ts - b.ts)
      .map((o) => ({
        text: JSON.stringify({
          topic: TOPICS[o.source],
          type: 'update',
          timestamp: o.sent,
          payload: { symbol: o.symbol, timestamp: o.ts, value: o.price },
        }),
        changes: 1,
        keys: [`${o.symbol}@${o.ts}`],
      }));
  }
}
