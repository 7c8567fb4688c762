import { createHmac, randomBytes } from 'node:crypto';

/** HMAC-SHA256 of the exact query string, hex: how the wallet API authenticates a call. */
export function signQuery(secret: string, query: string): string {
  return createHmac('sha256', secret).update(query).digest('hex');
}

/** `params` plus timestamp and recvWindow, with the signature appended last. */
export function signedQuery(secret: string, params: Record<string, string | number>, now = Date.now(), recvWindow = 5000): string {
  const query = new URLSearchParams({ ...stringify(params), recvWindow: String(recvWindow), timestamp: String(now) }).toString();
  return `${query}&signature=${signQuery(secret, query)}`;
}

function stringify(params: Record<string, string | number>): Record<string, string> {
  return Object.fromEntries(Object.entries(params).map(([k, v]) => [k, String(v)]));
}

/**
 * The signed SApi WebSocket URL (Binance's CMS general info): `random`, `topic` (topics joined by
 * `|`), `recvWindow` and `timestamp`, sorted by name, signed over that query string.
 */
export function signedSocketUrl(base: string, secret: string, topics: string[], now = Date.now(), recvWindow = 30_000): string {
  const params: Record<string, string> = {
    random: randomBytes(16).toString('hex'),
    recvWindow: String(recvWindow),
    timestamp: String(now),
    topic: topics.join('|'),
  };
  const query = Object.keys(params)
    .sort()
    .map((k) => `${k}=${encodeURIComponent(params[k])}`)
    .join('&');
  // A base that has a query of its own (a replay's range) keeps it.
  return `${base}${base.includes('?') ? '&' : '?'}${query}&signature=${signQuery(secret, query)}`;
}
