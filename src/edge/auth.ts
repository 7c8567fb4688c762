// The one key check of every keyed request, REST or a replay's upgrade: the key presented, known
// and not revoked, its request counted against its plan's rate, its plan against what is asked.
// Failures are the API's errors (errors.ts); the caller renders them its own way.
import { fail } from './errors.js';
import { KEY_RE, type KeyRecord, type KeyStore, type Plan } from './keys.js';
import type { Limiter, RateDecision } from './ratelimit.js';

export interface AuthDeps {
  keys: KeyStore;
  limiter: Limiter;
  /** A plan's requests per second. */
  rate: (plan: Plan) => number;
}

export interface AuthAsk {
  /** What the route needs: any key, or a paid one. */
  need: 'key' | 'paid';
  /** How to send a key, said when none came. */
  howToSend: string;
  /** Why a free key is refused, when a paid one is needed. */
  paidOnly: string;
  /** A request without a valid key (counted against its address by the REST edge). */
  anonymous?: () => void;
  /** The rate decision, before a refusal: the REST edge sends it as X-RateLimit headers either way. */
  decided?: (decision: RateDecision) => void;
}

/** The key record of `presented` (null: none sent), or the API error that refuses it. */
export async function authenticate(deps: AuthDeps, presented: string | null | undefined, ask: AuthAsk): Promise<KeyRecord> {
  if (!presented) {
    ask.anonymous?.();
    fail('AUTH_MISSING', ask.howToSend);
  }
  const key = KEY_RE.test(presented) ? await deps.keys.find(presented) : null;
  if (!key) {
    ask.anonymous?.();
    fail('AUTH_INVALID', 'The API key is unknown, revoked or malformed');
  }
  const taken = deps.limiter.take(key.key_id, deps.rate(key.plan));
  const decision = taken instanceof Promise ? await taken : taken;
  ask.decided?.(decision);
  if (!decision.allowed)
    fail('RATE_LIMITED', `Over the ${key.plan} plan's rate of ${decision.limit} requests per second; retry after ${decision.reset} s`, [], {
      'Retry-After': String(Math.max(1, decision.reset)),
    });
  if (ask.need === 'paid' && key.plan !== 'paid') fail('PLAN_REQUIRED', ask.paidOnly);
  return key;
}
