// The replay endpoints on the API's port: a WebSocket per replay, speaking the venue's protocol so
// a client written for the live feed connects unchanged. Refusals are answered before the upgrade
// as the API's error envelope, with the same status codes as every route.
import type http from 'node:http';
import type { Duplex } from 'node:stream';
import { type WebSocket, WebSocketServer } from 'ws';
import type { Clock } from '../clock.js';
import type { Venue } from '../config.js';
import type { LakeReader, StoredMarket } from '../lake/reader.js';
import type { Logger } from '../log.js';
import { newRequestId } from '../edge/requestid.js';
import { ApiError, echo, fail } from '../edge/errors.js';
import { authenticate } from '../edge/auth.js';
import type { KeyStore, Plan } from '../edge/keys.js';
import type { RateLimiter, LeasedLimiter } from '../edge/ratelimit.js';
import { spooledNow, windowStatus } from '../lake/windowstatus.js';
import { type MarketQuality, PROTOCOLS, type ReplayKind } from './protocols.js';
import { feedGaps, readObservations } from './rtds.js';
import { REFERENCE_COINS } from '../config.js';
import { type ReplayRequest, replayRequest } from './request.js';

import { type ReplaySink, ReplaySession } from './session.js';
import { textFrames } from './wsframes.js';
import type { TapeCache } from './tape.js';

/**
 * Frames written while corked go out as one buffer at `uncork` (wsframes.ts): a batch holds no
 * await, so nothing else writes to the socket between its first frame and its write.
 */
function batchSink(ws: WebSocket, socket: Duplex): ReplaySink {
  let batch: string[] | null = null;
  let dones: ((err?: Error) => void)[] = [];
  return {
    send: (text, done) => {
      if (ws.readyState !== ws.OPEN) return done(new Error('closed'));
      if (!batch) return ws.send(text, done);
      batch.push(text);
      dones.push(done);
    },
    cork: () => {
      if (!ws.extensions) batch ??= [];
    },
    uncork: () => {
      if (!batch) return;
      const [frames, waiting] = [batch, dones];
      [batch, dones] = [null, []];
      if (!frames.length) return;
      if (ws.readyState !== ws.OPEN) return waiting.forEach((done) => done(new Error('closed')));
      socket.write(textFrames(frames), (err) => waiting.forEach((done) => done(err ?? undefined)));
    },
  };
}

export const REPLAY_PATHS: Record<string, ReplayKind> = {
  '/v3/replay/polymarket/ws/market': 'polymarket',
  '/v3/replay/wallet-prediction/sapi/wss': 'wallet-prediction',
  '/v3/replay/polymarket/rtds': 'polymarket-rtds',
};

export interface ReplayLimits {
  /** Replays open at once in this process, and per key. */
  total: number;
  perKey: number;
  /** Markets one replay plays at once. */
  markets: number;
  maxRangeMs: number;
}

export interface ReplayDeps {
  lake: LakeReader;
  tapes: TapeCache;
  keys: KeyStore;
  limiter: RateLimiter | LeasedLimiter;
  rate: (plan: Plan) => number;
  clock: Clock;
  log: Logger;
  limits: ReplayLimits;
}

/** The API's answer to a refused upgrade: its error envelope on the raw socket, then closed. */
function refuse(socket: Duplex, err: ApiError, requestId: string): void {
  const body = JSON.stringify({
    error: { code: err.code, message: err.message, details: err.details },
    meta: { request_id: requestId, timestamp: new Date().toISOString() },
  });
  const headers = Object.entries(err.headers)
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join('');
  socket.end(
    `HTTP/1.1 ${err.status} ${err.code}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n` +
      `X-Request-Id: ${requestId}\r\n${headers}Connection: close\r\n\r\n${body}`,
  );
}

/** Polymarket's tokens to their markets, rebuilt from the catalogue when a token is not found (at most every 2 s). */
class TokenIndex {
  private map = new Map<string, StoredMarket>();
  private builtAt = -Infinity;

  constructor(
    private readonly lake: LakeReader,
    private readonly venue: Venue,
  ) {}

  find(token: string, now: number): StoredMarket | null {
    let m = this.map.get(token);
    if (!m && Date.now() - this.builtAt > 2000) {
      this.builtAt = Date.now();
      this.map = new Map();
      for (const market of this.lake.walk('asc', now))
        if (market.venue === this.venue) for (const o of market.outcomes) this.map.set(o.token_id, market);
      m = this.map.get(token);
    }
    return m ?? null;
  }
}

/** Per market the replay played, what its certificate says of its window now (from memory) and how many messages went. */
async function qualityOf(lake: LakeReader, venue: Venue, session: ReplaySession, now: number): Promise<MarketQuality[]> {
  const spooled = await spooledNow(lake);
  return session.markets().flatMap((id) => {
    const m = lake.market(venue, id, now);
    if (!m) return [];
    const { state, coverage } = windowStatus(lake, m, now, spooled);
    const key = { venue, coin: m.coin, window: m.window, market_id: m.market_id, dataset: 'books' as const };
    const gaps = lake.gaps(key, m.start_time, m.end_time).length;
    return [{ market: m, state, coverage, gaps, messages: session.sent.get(id) ?? 0 }];
  });
}

/** Under the API's idle bound for sockets (API_IDLE_MS, 60 s by default). */
const PING_MS = 20_000;

export interface ReplayEndpoint {
  /** The HTTP server's `upgrade` listener. */
  upgrade(req: http.IncomingMessage, socket: Duplex, head: Buffer): void;
  /** Ends every replay (the server stopping: an upgraded socket is no longer the HTTP server's to close). */
  close(): void;
  /** The replays open now, each with what it has sent and how many frames wait for its socket; and the tapes' cache. */
  stats(): { open: ReplaySession['stats'][]; tapes: { bytes: number; hits: number; misses: number } };
}

export function replayEndpoint(deps: ReplayDeps): ReplayEndpoint {
  const wss = new WebSocketServer({ noServer: true, maxPayload: 1 << 20 });
  const open = new Map<string, number>();
  const sessions = new Set<ReplaySession>();
  let total = 0;
  const tokens = new TokenIndex(deps.lake, 'polymarket');

  const authorize = (req: http.IncomingMessage, query: Record<string, string>) =>
    // Venue clients set no headers, so the key may come in the URL here; it is never logged.
    authenticate(deps, /^Bearer\s+(\S+)$/i.exec(req.headers.authorization ?? '')?.[1] ?? query.api_key, {
      need: 'paid',
      howToSend: 'Send your API key as "Authorization: Bearer <key>" (or api_key in a replay URL)',
      paidOnly: 'Replays are available on paid plans; this key is on the free plan',
    });

  const start = (
    ws: WebSocket,
    /** The connection under the WebSocket: corked while a batch of frames is written (one write for many frames). */
    socket: Duplex,
    kind: ReplayKind,
    request: ReplayRequest,
    query: Record<string, string>,
    keyId: string,
    requestId: string,
  ) => {
    const began = performance.now();
    total++;
    open.set(keyId, (open.get(keyId) ?? 0) + 1);
    deps.log.info(
      { req_id: requestId, key_id: keyId, venue: request.venue, from: request.from, to: request.to, speed: request.speed },
      'replay started',
    );
    const protocol = PROTOCOLS[kind];
    const session = new ReplaySession(
      {
        ...request,
        clock: deps.clock,
        frames: protocol.frames,
        settleMs: protocol.subscribesByFrames ? undefined : 0,
        maxPerFrame: request.speed === Infinity ? 64 : 256,
        maxMarkets: deps.limits.markets,
      },
      batchSink(ws, socket),
    );
    const client = protocol.open({
      request,
      query,
      session,
      send: (text) => ws.send(text),
      market: (id) => deps.lake.market(request.venue, id, deps.clock.now()),
      token: (id) => tokens.find(id, deps.clock.now()),
      markets: () => [...deps.lake.walk('asc', deps.clock.now())].filter((m) => m.venue === request.venue),
      tape: (m) => deps.tapes.get(deps.lake, request.venue, m, deps.clock.now()),
      maxMarkets: deps.limits.markets,
      charge: (tape, bytes) => deps.tapes.charge(tape, bytes),
      observations: async (source, from, to) => ({
        rows: await readObservations(deps.lake, source, REFERENCE_COINS, from, to),
        gaps: feedGaps(deps.lake, source, REFERENCE_COINS, from, to),
      }),
      referenceCoins: REFERENCE_COINS,
    });
    ws.on('message', (data, binary) => client.message(binary ? '' : data.toString()));
    // A protocol ping now and then: a replay with nothing due keeps its socket (and the API's idle bound) alive.
    const pinger = setInterval(() => ws.ping(), PING_MS);
    ws.on('close', () => {
      clearInterval(pinger);
      session.stop();
    });
    ws.on('error', () => session.stop());
    sessions.add(session);
    const finish = (how: string) => {
      sessions.delete(session);
      deps.log.info(
        { req_id: requestId, key_id: keyId, how, ...session.stats, ms: Math.round(performance.now() - began) },
        'replay finished',
      );
      total--;
      const n = (open.get(keyId) ?? 1) - 1;
      if (n) open.set(keyId, n);
      else open.delete(keyId);
    };
    void (async () => {
      try {
        const how = await session.run();
        if (how === 'end' && ws.readyState === ws.OPEN) {
          const end = client.end(await qualityOf(deps.lake, request.venue, session, deps.clock.now()));
          if (ws.readyState === ws.OPEN) {
            ws.send(end);
            ws.close(1000, 'replay complete');
          }
        }
        finish(how);
      } catch (err) {
        deps.log.error({ req_id: requestId, err }, 'replay failed');
        if (ws.readyState === ws.OPEN) ws.close(1011, 'internal error');
        finish('failed');
      }
    })();
  };

  const upgrade = (req: http.IncomingMessage, socket: Duplex, head: Buffer) => {
    const requestId = newRequestId();
    const url = new URL(req.url ?? '/', 'http://replay');
    const kind = REPLAY_PATHS[url.pathname];
    const query = Object.fromEntries(url.searchParams);
    (async () => {
      if (!kind) fail('NOT_FOUND', `No replay at ${echo(url.pathname)}; replays: ${Object.keys(REPLAY_PATHS).join(', ')}`);
      const key = await authorize(req, query);
      const request = replayRequest(kind, query, deps.clock.now(), deps.limits.maxRangeMs);
      if (total >= deps.limits.total) fail('UNAVAILABLE', 'Every replay slot is in use; retry shortly', [], { 'Retry-After': '5' });
      if ((open.get(key.key_id) ?? 0) >= deps.limits.perKey)
        fail('RATE_LIMITED', `At most ${deps.limits.perKey} replays at once per key`, [], { 'Retry-After': '5' });
      wss.handleUpgrade(req, socket, head, (ws) => start(ws, socket, kind, request, query, key.key_id, requestId));
    })().catch((err: unknown) => {
      if (err instanceof ApiError) refuse(socket, err, requestId);
      else {
        deps.log.error({ req_id: requestId, err }, 'replay upgrade failed');
        refuse(socket, new ApiError(500, 'INTERNAL_ERROR', 'Internal error'), requestId);
      }
    });
  };

  return {
    upgrade,
    stats: () => ({
      open: [...sessions].map((s) => ({ ...s.stats })),
      tapes: { bytes: deps.tapes.usedBytes, hits: deps.tapes.hits, misses: deps.tapes.misses },
    }),
    close: () => {
      for (const ws of wss.clients) {
        ws.close(1001, 'server stopping');
        setTimeout(() => ws.terminate(), 1000).unref();
      }
    },
  };
}
