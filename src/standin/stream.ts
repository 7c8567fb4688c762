// The stand-in's Polymarket market channel (UPSTREAMS.md B): subscribe by `assets_ids`, a `book`
// snapshot per asset, then `price_change` (new aggregate size per level, 0 removes it, a book
// hash per asset), `last_trade_price` and PING/PONG text heartbeats. No sequence numbers, as
// the venue sends none. Faults are the failures users report of the real feed: drops, reorders,
// duplicates, silent freezes, disconnects and stale snapshots on resubscribe.
import type http from 'node:http';
import type { Duplex } from 'node:stream';
import { type WebSocket, WebSocketServer } from 'ws';
import type { Clock } from '../clock.js';
import { SECOND } from '../time.js';
import { type ClobLevel, clobBookHash } from '../venues/clob.js';
import { TICKS, bestAsk, bestBid, ladders } from './orderbook.js';
import type { Sim, SimMarket } from './sim.js';

export interface StreamFaults {
  /** Share of data messages never sent. */
  dropRate: number;
  /** Share of data messages sent twice. */
  duplicateRate: number;
  /** Share of data messages held back and sent after the next one. */
  reorderRate: number;
  /** Clock windows in which the connection stays open and answers PING but sends no data (the data is lost). */
  freezes: { from: number; to: number }[];
  /** Clock windows in which connections are closed and new ones refused. */
  disconnects: { from: number; to: number }[];
  /** Snapshots sent on (re)subscribe are this old (clock ms): a stale book the following changes do not fit. */
  staleSnapshotMs: number;
}

export const NO_STREAM_FAULTS: StreamFaults = {
  dropRate: 0,
  duplicateRate: 0,
  reorderRate: 0,
  freezes: [],
  disconnects: [],
  staleSnapshotMs: 0,
};

export const MARKET_CHANNEL_PATH = '/ws/market';
const PUMP_MS = 50;

export interface StreamStats {
  connections: number;
  refused: number;
  subscriptions: number;
  /** Messages sent, after faults; `changes` counts the level changes inside them. */
  messages: number;
  changes: number;
  /** JSON text sent, for the storage benchmark's comparison. */
  bytes: number;
  dropped: number;
  duplicated: number;
  reordered: number;
  frozen: number;
}

interface Subscription {
  market: SimMarket;
  index: 0 | 1;
  /** Changes up to this clock time have been sent (or lost to a fault). */
  cursor: number;
  /** The book as this connection's changes have left it, for the hashes and best levels. */
  sizes: Float64Array;
}

interface Client {
  socket: WebSocket;
  assets: Map<string, Subscription>;
  held: string | null;
}

export function conditionId(m: SimMarket): string {
  return `0x${m.code.toString(16).padStart(64, 'a')}`;
}

const level = (price: number, size: number): ClobLevel => ({ price: String(price), size: size.toFixed(2) });

/** A token's book as the CLOB summarizes it (bids ascending, asks descending: best levels last), with its hash. */
export function clobSummary(sim: Sim, m: SimMarket, index: 0 | 1, t: number) {
  const state = sim.bookState(m, index, t);
  return summaryOf(m, index, Math.min(state.ts, t), state.sizes);
}

function summaryOf(m: SimMarket, index: 0 | 1, timestamp: number, sizes: Float64Array) {
  const { bids, asks } = ladders({ ts: timestamp, seq: 0, sizes });
  const body = {
    market: conditionId(m),
    asset_id: m.tokenIds[index],
    timestamp: String(timestamp),
    bids: bids.map(([p, s]) => level(p, s)).reverse(),
    asks: asks.map(([p, s]) => level(p, s)).reverse(),
  };
  return { ...body, hash: clobBookHash(body) };
}

export class MarketChannel {
  readonly faults: StreamFaults;
  readonly stats: StreamStats = {
    connections: 0,
    refused: 0,
    subscriptions: 0,
    messages: 0,
    changes: 0,
    bytes: 0,
    dropped: 0,
    duplicated: 0,
    reordered: 0,
    frozen: 0,
  };
  /** `asset@timestamp` of changes dropped, frozen or reordered by a fault (bounded). */
  readonly undelivered = new Set<string>();
  private readonly wss = new WebSocketServer({ noServer: true });
  private readonly clients = new Set<Client>();
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly sim: Sim,
    private readonly clock: Clock,
    private readonly random: () => number,
    faults: Partial<StreamFaults> = {},
  ) {
    this.faults = { ...NO_STREAM_FAULTS, ...faults };
  }

  /** Takes over `upgrade` requests for the channel's path on the stand-in's HTTP server. */
  attach(server: http.Server): void {
    server.on('upgrade', (req: http.IncomingMessage, socket: Duplex, head: Buffer) => {
      const path = new URL(req.url ?? '/', 'http://standin').pathname;
      if (path !== MARKET_CHANNEL_PATH || this.disconnected(this.clock.now())) {
        this.stats.refused++;
        socket.end('HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
        return;
      }
      this.wss.handleUpgrade(req, socket, head, (ws) => this.connected(ws));
    });
    this.timer = setInterval(() => this.pump(), PUMP_MS);
  }

  close(): void {
    if (this.timer) clearInterval(this.timer);
    for (const c of this.clients) c.socket.terminate();
    this.wss.close();
  }

  private disconnected(now: number): boolean {
    return this.faults.disconnects.some((d) => now >= d.from && now < d.to);
  }

  private frozen(now: number): boolean {
    return this.faults.freezes.some((d) => now >= d.from && now < d.to);
  }

  private connected(socket: WebSocket): void {
    this.stats.connections++;
    const client: Client = { socket, assets: new Map(), held: null };
    this.clients.add(client);
    socket.on('close', () => this.clients.delete(client));
    socket.on('error', () => socket.terminate());
    socket.on('message', (data, isBinary) => {
      const text = isBinary ? '' : data.toString();
      // Heartbeats are answered even while data is frozen: that is what makes a freeze silent.
      if (text === 'PING') return socket.send('PONG');
      let request: { assets_ids?: unknown; type?: unknown; operation?: unknown };
      try {
        request = JSON.parse(text);
      } catch {
        return socket.send(JSON.stringify({ error: 'invalid json' }));
      }
      if (!Array.isArray(request.assets_ids)) return socket.send(JSON.stringify({ error: 'assets_ids required' }));
      if (request.operation === 'unsubscribe') {
        for (const id of request.assets_ids) client.assets.delete(String(id));
        return;
      }
      this.subscribe(client, request.assets_ids.map(String));
    });
  }

  private subscribe(client: Client, ids: string[]): void {
    const now = this.clock.now();
    const snapshotAt = now - this.faults.staleSnapshotMs;
    const books = [];
    for (const id of ids) {
      const found = this.sim.byToken('polymarket', id);
      if (!found || now >= found.market.resolvedAt || client.assets.has(id)) continue;
      const { market, index } = found;
      const at = Math.min(snapshotAt, market.end - 1);
      const state = this.sim.bookState(market, index, at);
      // The hashes that follow are of the venue's true book, whatever snapshot this connection was sent.
      const current = this.sim.bookState(market, index, Math.min(now, market.end - 1));
      client.assets.set(id, { market, index, cursor: Math.max(now, at), sizes: current.sizes.slice() });
      this.stats.subscriptions++;
      books.push({ event_type: 'book', ...summaryOf(market, index, Math.min(state.ts, at), state.sizes) });
    }
    // The venue answers a subscription with one array of snapshots.
    if (books.length) client.socket.send(JSON.stringify(books));
  }

  /** Sends every change since each subscription's cursor, grouped as the venue groups them: one message per market and instant. */
  private pump(): void {
    const now = this.clock.now();
    if (this.disconnected(now)) {
      for (const c of this.clients) c.socket.terminate();
      return;
    }
    const frozen = this.frozen(now);
    for (const client of this.clients) {
      const messages = new Map<string, { t: number; body: Record<string, unknown>; changes: Record<string, string>[] }>();
      const trades: { t: number; body: Record<string, unknown> }[] = [];
      for (const [id, sub] of client.assets) {
        const { market, index } = sub;
        if (sub.cursor >= market.end) continue;
        const to = Math.min(now, market.end - 1);
        const changes = this.sim.bookChanges(market, index, sub.cursor, to);
        for (let i = 0; i < changes.length; i++) {
          const c = changes[i];
          sub.sizes[(c.side === 'BUY' ? 0 : TICKS) + c.tick] = c.size;
          // One entry per change; the hash and best levels are of the book after the instant's last change.
          const last = changes[i + 1]?.t !== c.t;
          const key = `${market.code}:${c.t}`;
          let m = messages.get(key);
          if (!m) {
            m = { t: c.t, body: { event_type: 'price_change', market: conditionId(market), timestamp: String(c.t) }, changes: [] };
            messages.set(key, m);
          }
          const entry: Record<string, string> = { asset_id: id, price: String(c.tick / 100), size: c.size.toFixed(2), side: c.side };
          m.changes.push(entry);
          if (last) {
            const summary = summaryOf(market, index, c.t, sub.sizes);
            const bid = bestBid(sub.sizes);
            const ask = bestAsk(sub.sizes);
            for (const e of m.changes) {
              if (e.asset_id !== id || e.hash) continue;
              e.hash = summary.hash;
              e.best_bid = bid === null ? '0' : String(bid / 100);
              e.best_ask = ask === null ? '1' : String(ask / 100);
            }
          }
        }
        for (let s = Math.floor(sub.cursor / SECOND) + 1; s * SECOND <= to; s++) {
          const price = this.sim.tradeAt(market, index, s);
          if (price === null) continue;
          trades.push({
            t: s * SECOND,
            body: {
              event_type: 'last_trade_price',
              asset_id: id,
              market: conditionId(market),
              price: price.toFixed(2),
              side: this.sim.rand(market.code, 'trade-side', s) < 0.5 ? 'BUY' : 'SELL',
              size: (5 + Math.floor(this.sim.rand(market.code, 'trade-size', index, s) * 500)).toFixed(2),
              fee_rate_bps: '0',
              timestamp: String(s * SECOND),
            },
          });
        }
        sub.cursor = to;
      }
      const out = [...[...messages.values()].map((m) => ({ t: m.t, body: { ...m.body, price_changes: m.changes } })), ...trades].sort(
        (a, b) => a.t - b.t,
      );
      for (const { body } of out) {
        const changes = (body.price_changes as unknown[] | undefined)?.length ?? 0;
        if (frozen) {
          this.stats.frozen++;
          this.misdelivered(body);
          continue;
        }
        this.send(client, JSON.stringify(body), changes, body);
      }
    }
  }

  private send(client: Client, text: string, changes: number, body: Record<string, unknown>): void {
    const f = this.faults;
    if (this.random() < f.dropRate) {
      this.stats.dropped++;
      this.misdelivered(body);
      return;
    }
    if (this.random() < f.reorderRate && client.held === null) {
      this.stats.reordered++;
      this.misdelivered(body);
      client.held = text;
      return;
    }
    this.write(client, text, changes);
    if (this.random() < f.duplicateRate) {
      this.stats.duplicated++;
      this.write(client, text, changes);
    }
    if (client.held !== null) {
      const held = client.held;
      client.held = null;
      this.write(client, held, 0);
    }
  }

  /**
   * Notes the book changes of a message dropped, frozen or sent late. The venue's protocol has no
   * sequence numbers: when a later message rewrites the same levels, the next hash still
   * matches and no recorder can know the change was missed. Tests tell those apart with this.
   */
  private misdelivered(body: Record<string, unknown>): void {
    if (body.event_type !== 'price_change' || this.undelivered.size >= 100_000) return;
    for (const c of body.price_changes as { asset_id: string }[]) this.undelivered.add(`${c.asset_id}@${body.timestamp}`);
  }

  private write(client: Client, text: string, changes: number): void {
    if (client.socket.readyState !== client.socket.OPEN) return;
    client.socket.send(text);
    this.stats.messages++;
    this.stats.bytes += text.length;
    this.stats.changes += changes;
  }
}
