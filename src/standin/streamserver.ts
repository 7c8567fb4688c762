// What the stand-in's two WebSocket faces share: one path on the stand-in's HTTP server, a pump
// that sends what the clock has passed, and the faults users report of real feeds (drops,
// reorders, duplicates, silent freezes, disconnect windows), applied to every data message.
import http from 'node:http';
import type { Duplex } from 'node:stream';
import { type WebSocket, WebSocketServer } from 'ws';
import type { Clock } from '../clock.js';
import type { Sim } from './sim.js';

export interface StreamFaults {
  /** Share of data messages never sent. */
  dropRate: number;
  /** Share of data messages sent twice. */
  duplicateRate: number;
  /** Share of data messages held back and sent after the next one. */
  reorderRate: number;
  /** Clock windows in which the connection stays open and answers heartbeats but sends no data (the data is lost). */
  freezes: { from: number; to: number }[];
  /** Clock windows in which connections are closed and new ones refused. */
  disconnects: { from: number; to: number }[];
  /** Snapshots sent on (re)subscribe are this old (clock ms): a stale book the following changes do not fit. */
  staleSnapshotMs: number;
  /**
   * Data messages still to send altered (one level's size), each to one connection only, the others
   * getting the true book: a venue's glitch one recorder sees and another does not.
   */
  tamper: number;
  /** The tokens whose messages `tamper` alters (empty: any). */
  tamperTokens: string[];
}

export const NO_STREAM_FAULTS: StreamFaults = {
  dropRate: 0,
  duplicateRate: 0,
  reorderRate: 0,
  freezes: [],
  disconnects: [],
  staleSnapshotMs: 0,
  tamper: 0,
  tamperTokens: [],
};

const PUMP_MS = 50;

export interface ServerStats {
  connections: number;
  refused: number;
  /** Open connections closed by a disconnect window. */
  cut: number;
  /** Messages sent, after faults; `changes` counts the book changes inside them. */
  messages: number;
  changes: number;
  /** JSON text sent, for the storage benchmark's comparison. */
  bytes: number;
  dropped: number;
  duplicated: number;
  reordered: number;
  frozen: number;
  tampered: number;
}

export interface StreamClient {
  socket: WebSocket;
  held: { text: string; changes: number } | null;
}

/** A data message: its text, how many book changes it carries, and their `token@time` keys. */
export interface Outgoing {
  text: string;
  changes: number;
  keys: string[];
}

export abstract class StreamServer<C extends StreamClient> {
  readonly faults: StreamFaults;
  readonly stats: ServerStats = {
    connections: 0,
    refused: 0,
    cut: 0,
    messages: 0,
    changes: 0,
    bytes: 0,
    dropped: 0,
    duplicated: 0,
    reordered: 0,
    frozen: 0,
    tampered: 0,
  };
  /**
   * `token@time` of changes dropped, frozen or sent late by a fault (bounded). Without sequence
   * numbers, a lost change that a later message rewrites leaves every check passing, so no
   * recorder can know it was missed; tests tell those apart with this.
   */
  readonly undelivered = new Set<string>();
  /** Those of `undelivered` a freeze withheld (a pause's silence tells of them), apart from drops and reorders at random. */
  readonly frozenKeys = new Set<string>();
  /** `token@time` of the changes sent altered to one connection (`tamper`). */
  readonly tamperedKeys = new Set<string>();
  protected readonly clients = new Set<C>();
  private readonly wss = new WebSocketServer({ noServer: true });
  private timer: NodeJS.Timeout | null = null;
  private pumped = -Infinity;

  constructor(
    protected readonly sim: Sim,
    protected readonly clock: Clock,
    protected readonly random: () => number,
    faults: Partial<StreamFaults>,
    private readonly path: string,
  ) {
    this.faults = { ...NO_STREAM_FAULTS, ...faults };
  }

  /** Handles upgrades for this face's path; returns false for other paths. */
  upgrade(req: http.IncomingMessage, socket: Duplex, head: Buffer): boolean {
    if (new URL(req.url ?? '/', 'http://standin').pathname !== this.path) return false;
    if (this.within(this.faults.disconnects, this.clock.now())) {
      this.stats.refused++;
      socket.end('HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
      return true;
    }
    const refusal = this.admit(req);
    if (refusal) {
      this.stats.refused++;
      const body = JSON.stringify(refusal.body);
      socket.end(
        `HTTP/1.1 ${refusal.status} ${http.STATUS_CODES[refusal.status] ?? 'Refused'}\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
      );
      return true;
    }
    this.wss.handleUpgrade(req, socket, head, (ws) => {
      this.stats.connections++;
      const client = this.accept(ws, req);
      this.clients.add(client);
      ws.on('close', () => this.clients.delete(client));
      ws.on('error', () => ws.terminate());
    });
    if (!this.timer) this.timer = setInterval(() => this.tick(), PUMP_MS);
    return true;
  }

  /**
   * The venue time up to which changes have been sent (the last pump's), unbounded before any
   * connection. A paced test clock waits for it too: a stand-in starved of its thread would
   * otherwise look, to capture's stream thread, like a venue gone silent.
   */
  delivered(): number {
    return this.timer ? this.pumped : Infinity;
  }

  close(): void {
    if (this.timer) clearInterval(this.timer);
    for (const c of this.clients) c.socket.terminate();
    this.wss.close();
  }

  /** Why an upgrade is refused (the venue's status and error body), or null to accept it. */
  protected admit(_req: http.IncomingMessage): { status: number; body: unknown } | null {
    return null;
  }

  /** `m` with one level's size changed, or null where this venue's messages have none to change. */
  protected alter(_m: Outgoing): Outgoing | null {
    return null;
  }

  /** A new connection's client state, with its message handling attached. */
  protected abstract accept(socket: WebSocket, req: http.IncomingMessage): C;

  /** The data messages for `client` of the changes in (its cursor, now], in time order. */
  protected abstract pending(client: C, now: number): Outgoing[];

  private within(windows: { from: number; to: number }[], now: number): boolean {
    return windows.some((d) => now >= d.from && now < d.to);
  }

  private tick(): void {
    const now = this.clock.now();
    this.pumped = now;
    if (this.within(this.faults.disconnects, now)) {
      for (const c of this.clients) {
        this.stats.cut++;
        c.socket.terminate();
      }
      this.clients.clear();
      return;
    }
    const frozen = this.within(this.faults.freezes, now);
    for (const client of this.clients) {
      for (let m of this.pending(client, now)) {
        // Never a change another connection got altered: each glitch is one connection's.
        if (
          !frozen &&
          this.faults.tamper > 0 &&
          (this.faults.tamperTokens.length === 0 ||
            m.keys.some((k) => this.faults.tamperTokens.includes(k.slice(0, k.lastIndexOf('@'))))) &&
          m.keys.every((k) => !this.tamperedKeys.has(k))
        ) {
          const altered = this.alter(m);
          if (altered) {
            this.faults.tamper--;
            this.stats.tampered++;
            for (const key of m.keys) this.tamperedKeys.add(key);
            m = altered;
          }
        }
        if (frozen) {
          this.stats.frozen++;
          this.misdelivered(m);
          for (const key of m.keys) if (this.frozenKeys.size < 100_000) this.frozenKeys.add(key);
        } else this.send(client, m);
      }
    }
  }

  private send(client: C, m: Outgoing): void {
    const f = this.faults;
    if (this.random() < f.dropRate) {
      this.stats.dropped++;
      this.misdelivered(m);
      return;
    }
    if (this.random() < f.reorderRate && client.held === null) {
      this.stats.reordered++;
      this.misdelivered(m);
      client.held = { text: m.text, changes: m.changes };
      return;
    }
    this.write(client, m.text, m.changes);
    if (this.random() < f.duplicateRate) {
      this.stats.duplicated++;
      this.write(client, m.text, 0);
    }
    if (client.held !== null) {
      const held = client.held;
      client.held = null;
      this.write(client, held.text, held.changes);
    }
  }

  private misdelivered(m: Outgoing): void {
    for (const key of m.keys) if (this.undelivered.size < 100_000) this.undelivered.add(key);
  }

  private write(client: C, text: string, changes: number): void {
    if (client.socket.readyState !== client.socket.OPEN) return;
    client.socket.send(text);
    this.stats.messages++;
    this.stats.bytes += text.length;
    this.stats.changes += changes;
  }
}
