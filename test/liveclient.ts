// An independent client of Polymarket's market channel, written from UPSTREAMS.md C1 alone (none of
// capture's code): it subscribes to every token the venue has been asked for, as a live bot would,
// and keeps every frame as it was received, for a replay to be compared with.
import { createHmac, randomBytes } from 'node:crypto';
import WebSocket from 'ws';

/** Put among the frames where the connection was cut (the client connects again at once). */
export const RECONNECT = 'RECONNECT';

export interface LiveRecording {
  /** Every frame's text as received, PONGs left out; `RECONNECT` where the connection was cut. */
  frames: string[];
  stop(): void;
}

/**
 * A connection that keeps every frame as received (`keep` says which) and, when cut, says so with
 * `RECONNECT` and connects again at once; `tick` runs every `everyMs` on the open socket.
 */
function recording(open: () => WebSocket, keep: (text: string) => boolean, everyMs: number, tick: (ws: WebSocket) => void): LiveRecording {
  const frames: string[] = [];
  let stopped = false;
  let ws: WebSocket | null = null;
  const connect = () => {
    if (stopped) return;
    const socket = open();
    ws = socket;
    socket.on('message', (data) => {
      const text = data.toString();
      if (keep(text)) frames.push(text);
    });
    socket.on('error', () => undefined);
    socket.on('close', () => {
      if (ws !== socket) return;
      frames.push(RECONNECT);
      setTimeout(connect, 20);
    });
  };
  connect();
  const timer = setInterval(() => {
    if (ws?.readyState === WebSocket.OPEN) tick(ws);
  }, everyMs);
  return {
    frames,
    stop() {
      stopped = true;
      clearInterval(timer);
      ws?.close();
    },
  };
}

/** Records the market channel at `url` for the tokens `tokens()` names, subscribing new ones as they appear; reconnects when cut. */
export function recordMarketChannel(url: string, tokens: () => string[]): LiveRecording {
  let asked = new Set<string>();
  const ask = (ws: WebSocket) => {
    const fresh = tokens().filter((t) => !asked.has(t));
    if (!fresh.length) return;
    // The documented frames: the first names the channel, later ones add tokens to it.
    const frame = asked.size
      ? { assets_ids: fresh, operation: 'subscribe', type: 'market', initial_dump: true }
      : { assets_ids: fresh, type: 'market', initial_dump: true, custom_feature_enabled: true };
    for (const t of fresh) asked.add(t);
    ws.send(JSON.stringify(frame));
  };
  const open = () => {
    asked = new Set();
    const ws = new WebSocket(url);
    ws.on('open', () => ask(ws));
    return ws;
  };
  return recording(
    open,
    (text) => text !== 'PONG',
    50,
    (ws) => {
      ask(ws);
      ws.send('PING');
    },
  );
}

/**
 * The spans the client itself was cut off: from the newest venue time it had heard before each cut to
 * the first after it (`timesOf` a frame's venue times). What it knows there is its own affair, not the venue's.
 */
export function cutsOf(frames: readonly string[], timesOf: (frame: string) => number[] = marketTimes): { from: number; to: number }[] {
  const cuts: { from: number; to: number }[] = [];
  let heard = -Infinity;
  let open: { from: number; to: number } | null = null;
  for (const text of frames) {
    if (text === RECONNECT) {
      open = { from: heard, to: Infinity };
      cuts.push(open);
      continue;
    }
    for (const ts of timesOf(text)) {
      heard = Math.max(heard, ts);
      if (open) {
        open.to = ts;
        open = null;
      }
    }
  }
  return cuts;
}

const marketTimes = (frame: string) =>
  messagesOf([frame])
    .map((m) => Number(m.timestamp))
    .filter(Number.isFinite);

/** A wallet frame's venue times (`updateTimestampMs`). */
export const walletTimes = (frame: string) =>
  walletPushesOf([frame])
    .map((p) => Number(p.updateTimestampMs))
    .filter(Number.isFinite);

/** The messages of recorded frames: a frame is one JSON object or an array of them; bare text is not a message. */
export function messagesOf(frames: readonly string[]): Record<string, unknown>[] {
  const out: Record<string, unknown>[] = [];
  for (const text of frames) {
    if (text === RECONNECT) continue;
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      continue;
    }
    for (const m of Array.isArray(parsed) ? parsed : [parsed]) if (m && typeof m === 'object') out.push(m as Record<string, unknown>);
  }
  return out;
}

/**
 * Records the wallet venue's aggregate order-book topic at `base` (its SApi socket path included), as
 * UPSTREAMS.md C2 says a client connects: the topic in a query signed with HMAC-SHA256 over it, the
 * key in `X-MBX-APIKEY`; every frame kept as received, `RECONNECT` where it was cut.
 */
export function recordWalletTopics(base: string, apiKey: string, secret: string): LiveRecording {
  const open = () => {
    const query = `random=${randomBytes(8).toString('hex')}&topic=web3_prediction_orderbook_data&recvWindow=5000&timestamp=${Date.now()}`;
    const signature = createHmac('sha256', secret).update(query).digest('hex');
    return new WebSocket(`${base}?${query}&signature=${signature}`, { headers: { 'X-MBX-APIKEY': apiKey } });
  };
  return recording(
    open,
    () => true,
    1000,
    (ws) => ws.ping(),
  );
}

/** The order-book payloads of wallet frames: each `DATA` frame's `data` is a JSON string, parsed a second time. */
export function walletPushesOf(frames: readonly string[]): Record<string, unknown>[] {
  const out: Record<string, unknown>[] = [];
  for (const text of frames) {
    if (text === RECONNECT) continue;
    try {
      const frame = JSON.parse(text) as { type?: string; data?: unknown };
      if (frame.type !== 'DATA' || typeof frame.data !== 'string') continue;
      const push = JSON.parse(frame.data) as Record<string, unknown>;
      if (push && typeof push === 'object') out.push(push);
    } catch {
      continue;
    }
  }
  return out;
}
