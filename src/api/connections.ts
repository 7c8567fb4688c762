// Bounds on the sockets any client can hold, keyed or not. Each open socket is a file descriptor
// shared with capture's spool and the lake's files, so idle ones are closed on a timer (headers
// that never come, a request body that never ends, keep-alive past its time, a reader that stops
// reading), one address holds at most a share of them, and the total stays below the process's
// descriptor limit with headroom left for everything else.
import fs from 'node:fs';
import http from 'node:http';
import type { ConnectionLimits } from '../config.js';
import type { Socket } from 'node:net';

export interface ConnectionStats {
  open: number;
  /** Refused at once: over the per-address or the total cap. */
  refused: number;
}

/** Descriptors kept for the process's own files (lake, spool, DuckDB, exports) whatever the clients hold. */
export const FD_HEADROOM = 1024;

/** The process's soft limit on open files (Linux), or null where it cannot be read. */
export function openFileLimit(limitsFile = '/proc/self/limits'): number | null {
  try {
    const line = fs
      .readFileSync(limitsFile, 'utf8')
      .split('\n')
      .find((l) => l.startsWith('Max open files'));
    const soft = line?.slice('Max open files'.length).trim().split(/\s+/)[0];
    return soft && /^\d+$/.test(soft) ? Number(soft) : null;
  } catch {
    return null;
  }
}

/** The total cap: as configured, and never above what the descriptor limit leaves after the headroom. */
export function connectionCap(configured: number, fdLimit: number | null): number {
  return fdLimit === null ? configured : Math.max(64, Math.min(configured, fdLimit - FD_HEADROOM));
}

/** An HTTP server for `handler` that holds clients to `limits`. */

export function boundedServer(handler: http.RequestListener, limits: ConnectionLimits, stats: ConnectionStats): http.Server {
  const server = http.createServer(
    {
      headersTimeout: limits.headersTimeoutMs,
      requestTimeout: limits.requestTimeoutMs,
      keepAliveTimeout: limits.keepAliveMs,
      // How often the timeouts above are enforced (Node's default, 30 s, would let idle sockets pile up).
      connectionsCheckingInterval: Math.min(1000, limits.headersTimeoutMs),
    },
    handler,
  );
  server.maxConnections = limits.total;
  server.on('drop', () => stats.refused++);
  server.timeout = limits.idleMs;
  const byAddress = new Map<string, number>();
  server.on('connection', (socket: Socket) => {
    const address = socket.remoteAddress ?? 'unknown';
    const held = byAddress.get(address) ?? 0;
    if (held >= limits.perAddress) {
      stats.refused++;
      socket.destroy();
      return;
    }
    byAddress.set(address, held + 1);
    stats.open++;
    // Node times out headers only once a request has begun: a socket that never sends a byte would
    // stay open for good. Its first bytes must come within the headers timeout; then the idle bound holds.
    socket.setTimeout(limits.headersTimeoutMs);
    socket.once('data', () => socket.setTimeout(limits.idleMs));
    socket.on('timeout', () => socket.destroy());
    socket.once('close', () => {
      stats.open--;
      const left = (byAddress.get(address) ?? 1) - 1;
      if (left > 0) byAddress.set(address, left);
      else byAddress.delete(address);
    });
  });
  return server;
}
