// AWS Signature Version 4 for S3, as its documentation defines it (checked in tests against the
// documentation's own example request). Pure: the time comes in, the header goes out.
import { createHash, createHmac } from 'node:crypto';

export interface Credentials {
  accessKeyId: string;
  secretAccessKey: string;
  region: string;
}

export interface SignedRequest {
  method: string;
  /** Host as sent (with the port when it is not the scheme's). */
  host: string;
  /** The path before encoding: `/bucket/key`. */
  path: string;
  query?: Record<string, string>;
  /** Extra headers to sign, any case. */
  headers?: Record<string, string>;
  /** Hex sha256 of the body, or `UNSIGNED-PAYLOAD`. */
  payloadHash: string;
}

export const EMPTY_SHA256 = createHash('sha256').update('').digest('hex');

/** RFC 3986 unreserved characters stay; everything else is %XX in upper case (S3's UriEncode). */
export function uriEncode(text: string, keepSlash: boolean): string {
  let out = '';
  for (const byte of Buffer.from(text, 'utf8')) {
    const c = String.fromCharCode(byte);
    if (/[A-Za-z0-9\-._~]/.test(c) || (keepSlash && c === '/')) out += c;
    else out += `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

export function canonicalQuery(query: Record<string, string> = {}): string {
  return Object.keys(query)
    .map((k) => [uriEncode(k, false), uriEncode(query[k], false)])
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([k, v]) => `${k}=${v}`)
    .join('&');
}

const hmac = (key: Buffer | string, text: string) => createHmac('sha256', key).update(text, 'utf8').digest();

/** The headers to send: the caller's, plus `x-amz-date`, `x-amz-content-sha256` and `authorization`. */
export function sign(req: SignedRequest, creds: Credentials, at: Date): Record<string, string> {
  const amzDate = at
    .toISOString()
    .replace(/[-:]/g, '')
    .replace(/\.\d{3}/, '');
  const day = amzDate.slice(0, 8);
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(req.headers ?? {})) headers[k.toLowerCase()] = String(v).trim().replace(/\s+/g, ' ');
  headers.host = req.host;
  headers['x-amz-date'] = amzDate;
  headers['x-amz-content-sha256'] = req.payloadHash;
  const names = Object.keys(headers).sort();
  const canonical = [
    req.method,
    uriEncode(req.path, true),
    canonicalQuery(req.query),
    ...names.map((n) => `${n}:${headers[n]}`),
    '',
    names.join(';'),
    req.payloadHash,
  ].join('\n');
  const scope = `${day}/${creds.region}/s3/aws4_request`;
  const toSign = ['AWS4-HMAC-SHA256', amzDate, scope, createHash('sha256').update(canonical, 'utf8').digest('hex')].join('\n');
  const key = hmac(hmac(hmac(hmac(`AWS4${creds.secretAccessKey}`, day), creds.region), 's3'), 'aws4_request');
  const signature = createHmac('sha256', key).update(toSign, 'utf8').digest('hex');
  const { host: _host, ...sent } = headers;
  return {
    ...sent,
    authorization: `AWS4-HMAC-SHA256 Credential=${creds.accessKeyId}/${scope},SignedHeaders=${names.join(';')},Signature=${signature}`,
  };
}
