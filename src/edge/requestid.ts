// Request ids, the REST edge's and the replay socket's alike: unique per process start (random),
// then a counter, so ids cost nothing per request and never repeat.
import { randomBytes } from 'node:crypto';

const ID_PREFIX = `req_${Date.now().toString(36)}${randomBytes(4).toString('hex')}`;
let idCounter = 0;

export function newRequestId(): string {
  return `${ID_PREFIX}${(idCounter++).toString(36).padStart(6, '0')}`;
}
