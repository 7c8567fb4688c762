// A client of Polymarket's market channel with the maintained `ws` library. It owns
// connections only: bounded subscriptions per connection, PING heartbeats, and reconnects with
// backoff and jitter. It notices a connection that stops delivering data while its heartbeat
// still answers (the venue's known silent stall), and reports every span in which its assets
// were not being heard, so the recorder can say so and re-fetch. What messages mean is the
// recorder's business.
import WebSocket from 'ws';
import type { Clock } from '../clock.js';
import type { Logger } from '../log.js';
import type { ClobMarketMessage } from './clob.js';

export type LostReason = 'disconnected' | 'stream_stalled';

export interface ChannelEvents {
  message(msg: ClobMarketMessage, recvTs: number): void;
  /** The connection serving `assets` is gone or silent: nothing after `since` (clock time) can be vouched for. */
  lost(assets: string[], reason: LostReason, since: number, detail: string): void;
}

export interface ChannelOptions {
  url: string;
  maxAssetsPerConnection: number;
  /** Real milliseconds between PINGs (the venue asks for one every 10 s). */
  pingMs: number;
  /** Clock milliseconds without data after which a connection counts as stalled. */
  stallMs: number;
  backoffMinMs: number;
  backoffMaxMs: number;
}

interface Connection {
  id: number;
  socket: WebSocket | null;
  assets: Set<string>;
  /** Clock time of the newest data message, or of the subscription. */
  lastData: number;
  failures: number;
  reconnect: NodeJS.Timeout | null;
  /** Set once a loss is reported, so a stall followed by the close reports one span. */
  lostReported: boolean;
}

export interface ChannelStats {
  connects: number;
  disconnects: number;
  stalls: number;
  messages: number;
  malformed: number;
}

export class MarketChannelClient {
  readonly stats: ChannelStats = { connects: 0, disconnects: 0, stalls: 0, messages: 0, malformed: 0 };
  private readonly connections: Connection[] = [];
  private nextId = 1;
  private timers: NodeJS.Timeout[] = [];
  private closed = false;

  constructor(
    private readonly options: ChannelOptions,
    private readonly clock: Clock,
    private readonly log: Logger,
    private readonly events: ChannelEvents,
  ) {
    this.timers.push(setInterval(() => this.heartbeat(), options.pingMs));
    this.timers.push(setInterval(() => this.watch(), 100));
  }

  /** Subscribes assets not yet subscribed, filling connections up to their bound. */
  track(assets: string[]): void {
    const fresh = assets.filter((a) => !this.connections.some((c) => c.assets.has(a)));
    while (fresh.length && !this.closed) {
      let conn = this.connections.find((c) => c.assets.size < this.options.maxAssetsPerConnection);
      if (!conn) {
        conn = this.open();
      }
      const batch = fresh.splice(0, this.options.maxAssetsPerConnection - conn.assets.size);
      for (const a of batch) conn.assets.add(a);
      if (conn.socket?.readyState === WebSocket.OPEN) conn.socket.send(JSON.stringify({ assets_ids: batch, operation: 'subscribe' }));
    }
  }

  /** Forgets assets whose markets ended; a connection left with none is closed. */
  untrack(assets: string[]): void {
    for (const conn of [...this.connections]) {
      for (const a of assets) conn.assets.delete(a);
      if (conn.assets.size === 0) this.drop(conn);
    }
  }

  /** Whether `asset` is on a connection that is open and not known to be silent. */
  healthy(asset: string): boolean {
    const conn = this.connections.find((c) => c.assets.has(asset));
    return !!conn && conn.socket?.readyState === WebSocket.OPEN && !conn.lostReported;
  }

  /** Whether `asset`'s first connection is still being made or answered: its snapshot is on its way. */
  coming(asset: string): boolean {
    const conn = this.connections.find((c) => c.assets.has(asset));
    return !!conn && !conn.lostReported && conn.failures === 0 && conn.socket !== null && conn.socket.readyState <= WebSocket.OPEN;
  }

  close(): void {
    this.closed = true;
    for (const t of this.timers) clearInterval(t);
    for (const conn of [...this.connections]) this.drop(conn);
  }

  private open(): Connection {
    const conn: Connection = {
      id: this.nextId++,
      socket: null,
      assets: new Set(),
      lastData: this.clock.now(),
      failures: 0,
      reconnect: null,
      lostReported: false,
    };
    this.connections.push(conn);
    this.connect(conn);
    return conn;
  }

  private connect(conn: Connection): void {
    conn.reconnect = null;
    const socket = new WebSocket(this.options.url, { handshakeTimeout: 10_000 });
    conn.socket = socket;
    socket.on('open', () => {
      this.stats.connects++;
      conn.lastData = this.clock.now();
      conn.lostReported = false;
      socket.send(JSON.stringify({ assets_ids: [...conn.assets], type: 'market' }));
    });
    socket.on('message', (data, isBinary) => {
      if (isBinary) return;
      const text = data.toString();
      if (text === 'PONG') return; // a heartbeat proves the connection, not the data
      const recvTs = this.clock.now();
      let parsed: unknown;
      try {
        parsed = JSON.parse(text);
      } catch {
        this.stats.malformed++;
        return;
      }
      conn.lastData = recvTs;
      conn.failures = 0;
      for (const msg of Array.isArray(parsed) ? parsed : [parsed]) {
        if (!msg || typeof msg !== 'object' || typeof (msg as { event_type?: unknown }).event_type !== 'string') {
          this.stats.malformed++;
          continue;
        }
        this.stats.messages++;
        this.events.message(msg as ClobMarketMessage, recvTs);
      }
    });
    socket.on('error', (err) => {
      if (conn.failures === 0) this.log.warn({ connection: conn.id, err: err.message }, 'market channel error');
    });
    socket.on('close', () => {
      if (conn.socket !== socket) return;
      conn.socket = null;
      this.stats.disconnects++;
      this.report(conn, 'disconnected', 'the market channel connection closed');
      if (this.closed || !this.connections.includes(conn)) return;
      conn.failures++;
      // Exponential backoff with full jitter, so many recorders do not reconnect in step.
      const cap = Math.min(this.options.backoffMaxMs, this.options.backoffMinMs * 2 ** Math.min(conn.failures, 16));
      const wait = this.options.backoffMinMs + Math.random() * (cap - this.options.backoffMinMs);
      conn.reconnect = setTimeout(() => this.connect(conn), wait);
    });
  }

  private report(conn: Connection, reason: LostReason, detail: string): void {
    if (conn.lostReported || conn.assets.size === 0) return;
    conn.lostReported = true;
    this.events.lost([...conn.assets], reason, conn.lastData, detail);
  }

  private drop(conn: Connection): void {
    this.connections.splice(this.connections.indexOf(conn), 1);
    if (conn.reconnect) clearTimeout(conn.reconnect);
    const socket = conn.socket;
    conn.socket = null;
    socket?.terminate();
  }

  private heartbeat(): void {
    for (const conn of this.connections) if (conn.socket?.readyState === WebSocket.OPEN) conn.socket.send('PING');
  }

  private watch(): void {
    const now = this.clock.now();
    for (const conn of this.connections) {
      if (conn.socket?.readyState !== WebSocket.OPEN || conn.lostReported) continue;
      if (now - conn.lastData <= this.options.stallMs) continue;
      this.stats.stalls++;
      this.log.warn(
        { connection: conn.id, silent_ms: now - conn.lastData, assets: conn.assets.size },
        'market channel stalled; reconnecting',
      );
      this.report(conn, 'stream_stalled', `no data for ${now - conn.lastData} ms while the heartbeat answered`);
      conn.socket.terminate();
    }
  }
}
