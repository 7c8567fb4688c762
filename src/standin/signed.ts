// How the wallet venue (Binance's SApi) authenticates a call, REST and WebSocket alike: the key in
// `X-MBX-APIKEY`, an HMAC-SHA256 with the secret over the query string before `&signature=`, a
// timestamp inside `recvWindow`. Refusals carry the venue's error shape.
import { createHmac, timingSafeEqual } from 'node:crypto';
import type http from 'node:http';

export interface Refusal {
  status: number;
  body: { code: number; msg: string };
}

const refuse = (status: number, code: number, msg: string): Refusal => ({ status, body: { code, msg } });

export function signatureRefusal(url: URL, headers: http.IncomingHttpHeaders, apiKey: string, secret: string): Refusal | null {
  if (headers['x-mbx-apikey'] !== apiKey) return refuse(401, -2015, 'Invalid API-key, IP, or permissions for action.');
  const raw = url.search.slice(1);
  const at = raw.lastIndexOf('&signature=');
  const signature = url.searchParams.get('signature');
  const timestamp = Number(url.searchParams.get('timestamp'));
  if (at < 0 || !signature || !timestamp) return refuse(400, -1102, "Mandatory parameter 'signature' or 'timestamp' was not sent.");
  const recvWindow = Number(url.searchParams.get('recvWindow') ?? 5000);
  if (Math.abs(Date.now() - timestamp) > recvWindow) return refuse(400, -1021, 'Timestamp for this request is outside of the recvWindow.');
  const expected = createHmac('sha256', secret).update(raw.slice(0, at)).digest();
  const given = Buffer.from(signature, 'hex');
  if (given.length !== expected.length || !timingSafeEqual(given, expected))
    return refuse(400, -1022, 'Signature for this request is not valid.');
  return null;
}
