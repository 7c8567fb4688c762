import { createHmac } from 'node:crypto';

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
