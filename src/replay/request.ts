// What a replay socket's URL asks for: the venue, the range and the pace, validated (ajv) before
// the upgrade; what the protocols and the session are handed.
import { Ajv } from 'ajv';
import type { Venue } from '../config.js';
import { parseTime } from '../time.js';
import { echo, fail } from '../edge/errors.js';
import { WALLET_AGGREGATE_TOPIC } from './wallet.js';

export interface ReplayRequest {
  venue: Venue;
  from: number;
  to: number;
  speed: number;
  playAt: number | null;
}

const ajv = new Ajv({ allErrors: false, strict: false });
ajv.addFormat('timestamp', { type: 'string', validate: (s: string) => parseTime(s) !== null });
const RANGE = {
  from: { type: 'string', format: 'timestamp' },
  to: { type: 'string', format: 'timestamp' },
  speed: { type: 'string', pattern: '^(max|[0-9]+(\\.[0-9]+)?)$' },
  play_at: { type: 'string', format: 'timestamp' },
  api_key: { type: 'string', maxLength: 64 },
};
const TOPIC = 'web3_prediction_orderbook_(data|[0-9]+)';
const rangeOnly = ajv.compile({ type: 'object', properties: RANGE, required: ['from'], additionalProperties: false });
const checks: Record<Venue | 'polymarket-rtds', ReturnType<typeof ajv.compile>> = {
  polymarket: rangeOnly,
  'polymarket-rtds': rangeOnly,
  // The venue's own query (topics and its signature, which a replay takes and does not check) beside the range.
  'wallet-prediction': ajv.compile({
    type: 'object',
    properties: {
      ...RANGE,
      topic: { type: 'string', pattern: `^${TOPIC}(\\|${TOPIC})*$` },
      random: { type: 'string' },
      recvWindow: { type: 'string' },
      timestamp: { type: 'string' },
      signature: { type: 'string' },
    },
    required: ['from', 'topic'],
    additionalProperties: false,
  }),
};

/** The replay's range and pace from the URL, or the reason it is refused (INVALID_PARAMETER / INVALID_RANGE). */
export function replayRequest(
  kind: Venue | 'polymarket-rtds',
  query: Record<string, string>,
  now: number,
  maxRangeMs: number,
): ReplayRequest {
  const venue: Venue = kind === 'polymarket-rtds' ? 'polymarket' : kind;
  const check = checks[kind];
  if (!check(query)) {
    const e = check.errors![0];
    const param = e.instancePath.slice(1) || String(e.params.additionalProperty ?? e.params.missingProperty ?? '');
    const message =
      e.keyword === 'additionalProperties'
        ? `Unknown parameter ${echo(param)}; this replay takes ${Object.keys((check.schema as { properties: object }).properties).join(', ')}`
        : e.keyword === 'required'
          ? `Missing parameter ${echo(param)}`
          : e.keyword === 'format'
            ? `${param} must be an ISO 8601 time or epoch milliseconds`
            : param === 'topic'
              ? `topic must be ${WALLET_AGGREGATE_TOPIC} or web3_prediction_orderbook_<marketId>, several joined by "|"`
              : param === 'speed'
                ? `speed must be a positive multiple of real time or "max"`
                : `${param} is malformed`;
    fail('INVALID_PARAMETER', message, [{ param, message }]);
  }
  const from = parseTime(query.from)!;
  const to = query.to === undefined ? now : parseTime(query.to)!;
  const speed = query.speed === undefined ? 1 : query.speed === 'max' ? Infinity : Number(query.speed);
  if (speed !== Infinity && (!(speed > 0) || speed > 10_000))
    fail('INVALID_PARAMETER', 'speed must be above 0 and at most 10000, or "max"', [{ param: 'speed', message: 'out of range' }]);
  if (to <= from) fail('INVALID_RANGE', 'to must be after from');
  if (to - from > maxRangeMs) fail('INVALID_RANGE', `A replay covers at most ${Math.round(maxRangeMs / 86_400_000)} days`);
  return { venue, from, to, speed, playAt: query.play_at === undefined ? null : parseTime(query.play_at)! };
}
