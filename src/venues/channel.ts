// A client of the venues' book streams with the maintained `ws` library: Polymarket's market
// channel and the wallet venue's orderbook topics differ only in how they subscribe, beat and
// frame (a `StreamProtocol`, in each venue's room). It owns connections only: bounded
// subscriptions per connection, PING heartbeats, and reconnects with backoff and jitter. It
// notices a connection that stops delivering data while its heartbeat still answers (the venue's
// known silent stall), and reports every span in which its assets were not being heard, so the
// recorder can say so and re-fetch. What messages mean is the recorder's business.
import WebSocket from 'ws';
import type { Clock } from '../clock.js';
import type { Logger } from '../log.js';
import { backoffMs } from '../time.js';

export type LostReason = 'disconnected' | 'stream_stalled';

/** Real milliseconds between stall watches, and the lateness of one that follows a freeze (see `watch`). */
const WATCH_MS = 100;
const WATCH_LATE_MS = 1000;

/**
 * Whether a connection is known to have been read past a clock time (`readPast`): `read`, a
 * heartbeat sent after it has been answered; `waiting`, one is on its way; `unanswered`, it has not
 * come within the stall bound; `lost`, the connection is down or silent (its loss is reported).
 */
export type ReadState = 'read' | 'waiting' | 'unanswered' | 'lost';

/** How a venue's stream subscribes, beats and frames its data. */
export interface StreamProtocol {
  /** The frame that subscribes `assets` (on connecting: `initial`), or null where the URL carries them. */
  subscribe(assets: string[], initial: boolean): string | null;
  /** The frame that ends `assets`' subscription on an open connection that keeps others, where the venue has one. */
  unsubscribe?(assets: string[]): string;
  /** The URL of a new connection (signed when made), where not the configured one as it is. */
  url?(base: string): string;
  /** Headers of the upgrade request (the venue's key). */
  headers?: Record<string, string>;
  /** Whether the venue may send nothing for long on a sound connection (its documented pauses): silence is then no stall. */
  quiet?: boolean;
  /** Text heartbeat the client sends, and the server's answer (null: WebSocket ping frames). */
  ping: string | null;
  pong: string | null;
  /** The data messages in one parsed frame (acknowledgements and the like are not data). */
  unwrap(parsed: unknown): object[];
}

export interface ChannelEvents {
  message(msg: object, recvTs: number): void;
  /** A frame of several messages, when the recorder takes them together (one instant's books, say); else each goes to `message`. */
  frame?(messages: object[], recvTs: number): void;
  /** The connection serving `assets` is gone or silent: nothing after `since` (clock time) can be vouched for. */
  lost(assets: string[], reason: LostReason, since: number, detail: string): void;
}

export interface ChannelOptions {
  url: string;
  protocol: StreamProtocol;
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
  /** Clock times of the heartbeats sent on this socket and not answered yet, oldest first. */
  pings: number[];
  /**
   * Clock time of the newest heartbeat answered on this socket: the venue answers in order, so
   * everything it sent before it took that heartbeat has been read.
   */
  answered: number;
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
  /** When each asset's subscribe frame was sent: a snapshot is owed from then. */
  private readonly sentAt = new Map<string, number>();
  /** When each asset's subscribe frame first went out, whatever reconnects came since. */
  private readonly firstSentAt = new Map<string, number>();
  /** Assets that owe no data now (their markets not open yet, or ended): a connection of only these is not stalled by silence. */
  private owingNothing = new Set<string>();
  /** Wall time of the latest stall watch. */
  private watchedAt = Date.now();

  constructor(
    private readonly options: ChannelOptions,
    private readonly clock: Clock,
    private readonly log: Logger,
    private readonly events: ChannelEvents,
  ) {
    this.timers.push(setInterval(() => this.heartbeat(), options.pingMs));
    this.timers.push(setInterval(() => this.watch(), WATCH_MS));
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
      const frame = this.options.protocol.subscribe(batch, false);
      if (conn.socket?.readyState === WebSocket.OPEN) {
        if (frame) conn.socket.send(frame);
        const now = this.clock.now();
        for (const a of batch) this.sent(a, now);
      }
    }
  }

  /** Which assets owe no data now, replacing the last word on it. */
  owesNothing(assets: Set<string>): void {
    this.owingNothing = assets;
  }

  /** Forgets assets whose markets ended; a connection left with none is closed. */
  untrack(assets: string[]): void {
    for (const a of assets) {
      this.sentAt.delete(a);
      this.firstSentAt.delete(a);
    }
    for (const conn of [...this.connections]) {
      const gone = assets.filter((a) => conn.assets.delete(a));
      if (conn.assets.size === 0) this.drop(conn);
      // Otherwise the venue would go on sending what nobody reads.
      else if (gone.length && this.options.protocol.unsubscribe && conn.socket?.readyState === WebSocket.OPEN)
        conn.socket.send(this.options.protocol.unsubscribe(gone));
    }
  }

  /** Whether `asset` is on a connection that is open and not known to be silent. */
  healthy(asset: string): boolean {
    const conn = this.connections.find((c) => c.assets.has(asset));
    return !!conn && conn.socket?.readyState === WebSocket.OPEN && !conn.lostReported;
  }

  /** Clock time the subscribe frame naming `asset` went out on its current connection (undefined: not yet). */
  subscribedAt(asset: string): number | undefined {
    return this.sentAt.get(asset);
  }

  /** Clock time a subscribe frame naming `asset` first went out: a reconnect does not move it. */
  firstSubscribedAt(asset: string): number | undefined {
    return this.firstSentAt.get(asset);
  }

  private sent(asset: string, at: number): void {
    this.sentAt.set(asset, at);
    if (!this.firstSentAt.has(asset)) this.firstSentAt.set(asset, at);
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
      pings: [],
      answered: -Infinity,
    };
    this.connections.push(conn);
    this.connect(conn);
    return conn;
  }

  private connect(conn: Connection): void {
    conn.reconnect = null;
    const { protocol } = this.options;
    const socket = new WebSocket(protocol.url ? protocol.url(this.options.url) : this.options.url, {
      handshakeTimeout: 10_000,
      headers: protocol.headers,
    });
    conn.socket = socket;
    conn.pings = [];
    conn.answered = -Infinity;
    socket.on('open', () => {
      this.stats.connects++;
      conn.lastData = this.clock.now();
      conn.lostReported = false;
      const frame = protocol.subscribe([...conn.assets], true);
      if (frame) socket.send(frame);
      for (const a of conn.assets) this.sent(a, conn.lastData);
    });
    socket.on('message', (data, isBinary) => {
      if (isBinary) return;
      const text = data.toString();
      // A heartbeat proves the connection and that what came before it was read, not that data flows.
      if (text === this.options.protocol.pong) return this.answered(conn, socket);
      const recvTs = this.clock.now();
      let parsed: unknown;
      try {
        parsed = JSON.parse(text);
      } catch {
        this.stats.malformed++;
        return;
      }
      const messages = this.options.protocol.unwrap(parsed);
      if (!messages.length) return;
      conn.lastData = recvTs;
      conn.failures = 0;
      this.stats.messages += messages.length;
      if (messages.length > 1 && this.events.frame) this.events.frame(messages, recvTs);
      else for (const msg of messages) this.events.message(msg, recvTs);
    });
    socket.on('pong', () => this.answered(conn, socket));
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
      const cap = backoffMs(conn.failures, this.options.backoffMinMs, this.options.backoffMaxMs);
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
    for (const conn of this.connections) this.beat(conn);
  }

  private beat(conn: Connection): void {
    if (conn.socket?.readyState !== WebSocket.OPEN) return;
    const ping = this.options.protocol.ping;
    if (ping) conn.socket.send(ping);
    else conn.socket.ping();
    conn.pings.push(this.clock.now());
  }

  private answered(conn: Connection, socket: WebSocket): void {
    if (conn.socket !== socket) return;
    const sent = conn.pings.shift();
    if (sent !== undefined) conn.answered = sent;
  }

  /**
   * Whether everything the venue sent `asset`'s connection before clock time `at` has been read. A
   * quiet asset's silence says nothing while its connection may hold unread frames (a process
   * frozen or starved past `at` reads them only after it resumes): a heartbeat sent after `at` and
   * answered proves it, so one is sent out of turn when none is on its way.
   */
  readPast(asset: string, at: number): ReadState {
    const conn = this.connections.find((c) => c.assets.has(asset));
    if (!conn || conn.socket?.readyState !== WebSocket.OPEN || conn.lostReported) return 'lost';
    if (conn.answered >= at) return 'read';
    const now = this.clock.now();
    const pending = conn.pings.find((sent) => sent >= at);
    if (pending === undefined) {
      if (now >= at) this.beat(conn);
      return 'waiting';
    }
    return now - pending > this.options.stallMs ? 'unanswered' : 'waiting';
  }

  private watch(): void {
    const now = this.clock.now();
    // A tick far later than its interval follows a process frozen or starved: the data that came
    // meanwhile waits unread in the sockets, and is read before the next tick. Judged now, every
    // connection would look silent and be cut, its unread data thrown away with it.
    const late = Date.now() - this.watchedAt > WATCH_LATE_MS;
    this.watchedAt = Date.now();
    if (late) return;
    for (const conn of this.connections) {
      if (conn.socket?.readyState !== WebSocket.OPEN || conn.lostReported || this.options.protocol.quiet) continue;
      if (now - conn.lastData <= this.options.stallMs) continue;
      if ([...conn.assets].every((a) => this.owingNothing.has(a))) continue;
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
