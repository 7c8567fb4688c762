// Opaque keyset cursors: base64url(JSON) + "." + HMAC. The payload names the route scope and a
// digest of every filter, so a cursor replayed elsewhere or with other filters is refused.
// It carries the last key of the page, never an offset, so rows captured meanwhile do not shift it.
import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import { echo, fail } from '../edge/errors.js';

export type Keyset = (string | number)[];

interface Payload {
  s: string;
  f: string;
  k: Keyset;
}

export class Cursors {
  constructor(private readonly secret: Buffer) {}

  /** `scope` is the route with its market and namespace; `filters` everything but limit and cursor. */
  issue(scope: string, filters: Record<string, unknown>, key: Keyset): string {
    const body = Buffer.from(JSON.stringify({ s: scope, f: digest(filters), k: key } satisfies Payload)).toString('base64url');
    return `${body}.${this.mac(body)}`;
  }

  read(cursor: string, scope: string, filters: Record<string, unknown>): Keyset {
    const [body, mac, extra] = cursor.split('.');
    const invalid = (why: string): never =>
      fail('INVALID_CURSOR', `Invalid "cursor": ${echo(cursor)}. ${why}`, [{ param: 'cursor', message: why }]);
    if (!body || !mac || extra !== undefined) invalid('It was not issued by this service');
    const expected = Buffer.from(this.mac(body));
    const given = Buffer.from(mac);
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) invalid('It was not issued by this service, or was altered');
    let payload: Payload;
    try {
      payload = JSON.parse(Buffer.from(body, 'base64url').toString('utf8'));
    } catch {
      return invalid('It was not issued by this service');
    }
    if (payload.s !== scope) invalid('It belongs to another route or market');
    if (payload.f !== digest(filters)) invalid('It was issued with other filters; repeat the original query parameters with it');
    return payload.k;
  }

  private mac(body: string): string {
    return createHmac('sha256', this.secret).update(body).digest('base64url').slice(0, 32);
  }
}

function digest(filters: Record<string, unknown>): string {
  const canonical = Object.keys(filters)
    .sort()
    .filter((k) => filters[k] !== undefined)
    .map((k) => [k, filters[k]]);
  return createHash('sha256').update(JSON.stringify(canonical)).digest('base64url').slice(0, 16);
}
