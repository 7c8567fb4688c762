// Every query and path parameter, declared once. The same declarations build the ajv
// validators and the OpenAPI document, so the two cannot disagree.
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import { REFERENCE_COINS, VENUE_COINS, WINDOWS } from '../config.js';
import { WINDOW_STATES } from '../lake/certificate.js';
import { RESOLUTION_CHECKS } from '../lake/referenceprice.js';
import { DATASETS, REFERENCE_SOURCES } from '../records.js';
import { parseTime } from '../time.js';
import { echo, fail } from '../edge/errors.js';

export interface ParamSpec {
  name: string;
  in: 'query' | 'path';
  description: string;
  /** OpenAPI 3.1 / JSON Schema of the value after parsing. */
  schema: Record<string, unknown>;
  /** What the error message says is accepted. */
  expect: string;
  required?: boolean;
  /** A list: comma-separated (`status=open,closed`), repeated (`status=open&status=closed`, as generated clients send arrays), or both. */
  list?: boolean;
  /** A path segment naming a collection: a value outside it is a missing resource (404), not a bad parameter. */
  notFound?: boolean;
}

export const INTERVALS: Record<string, number> = { '1s': 1e3, '5s': 5e3, '15s': 15e3, '1m': 6e4, '5m': 3e5, '15m': 9e5, '1h': 3.6e6 };
export const MARKET_STATUSES = ['upcoming', 'open', 'closed', 'resolved', 'cancelled'] as const;
export const METRICS = ['chance', 'price', 'last_trade', 'reference'] as const;
export const WALLET_COINS = VENUE_COINS['wallet-prediction'];
export const POLY_COINS = VENUE_COINS.polymarket;
export const MAX_LIMIT = 1000;

const q = (
  name: string,
  description: string,
  schema: Record<string, unknown>,
  expect: string,
  extra: Partial<ParamSpec> = {},
): ParamSpec => ({ name, in: 'query', description, schema, expect, ...extra });
const time = (name: string, description: string) =>
  q(
    name,
    description,
    { type: 'string', format: 'timestamp', examples: ['2026-07-26T13:30:00Z', '1785072600000'] },
    'epoch milliseconds or an ISO-8601 time (UTC when no zone)',
  );
const enumOf = (values: readonly string[]) => `one of: ${values.join(', ')}`;

export const P = {
  limit: q(
    'limit',
    'Items per page.',
    { type: 'integer', minimum: 1, maximum: MAX_LIMIT, default: 100 },
    `an integer from 1 to ${MAX_LIMIT}`,
  ),
  cursor: q(
    'cursor',
    'Opaque cursor from `pagination.next_cursor`.',
    { type: 'string', minLength: 1, maxLength: 2048 },
    'a cursor from pagination.next_cursor',
  ),
  start_time: time('start_time', 'Inclusive start of the time range.'),
  end_time: time('end_time', 'Exclusive end of the time range.'),
  interval: q(
    'interval',
    'Downsampling: the last record in each UTC-aligned bucket; absent means every record.',
    { type: 'string', enum: Object.keys(INTERVALS) },
    enumOf(Object.keys(INTERVALS)),
  ),
  order: q('order', 'Time order.', { type: 'string', enum: ['asc', 'desc'] }, enumOf(['asc', 'desc'])),
  outcome: q(
    'outcome',
    'Outcome token: 0, 1, or its label (case-insensitive).',
    { type: 'string', pattern: '^[0-9A-Za-z _-]{1,32}$' },
    '0, 1, or an outcome label such as Up',
  ),
  walletCoin: q(
    'coin',
    'Coins, comma-separated.',
    { type: 'array', items: { type: 'string', enum: [...WALLET_COINS] }, minItems: 1, uniqueItems: true },
    enumOf(WALLET_COINS),
    { list: true },
  ),
  window: q(
    'window',
    'Market windows, comma-separated.',
    { type: 'array', items: { type: 'string', enum: [...WINDOWS] }, minItems: 1, uniqueItems: true },
    enumOf(WINDOWS),
    { list: true },
  ),
  type: q(
    'type',
    'Alias of `window` (the name other archives use), comma-separated.',
    { type: 'array', items: { type: 'string', enum: [...WINDOWS] }, minItems: 1, uniqueItems: true },
    enumOf(WINDOWS),
    { list: true },
  ),
  timestamp: { ...time('timestamp', 'The instant: the book recorded at or before it is returned.'), required: true } as ParamSpec,
  status: q(
    'status',
    'Market statuses, comma-separated.',
    { type: 'array', items: { type: 'string', enum: [...MARKET_STATUSES] }, minItems: 1, uniqueItems: true },
    enumOf(MARKET_STATUSES),
    { list: true },
  ),
  state: q(
    'state',
    'Window states, comma-separated: `pending` (open, held by capture or not sealed yet), `complete` (covered at least 99%), `partial`, `not_captured`.',
    { type: 'array', items: { type: 'string', enum: [...WINDOW_STATES] }, minItems: 1, uniqueItems: true },
    enumOf(WINDOW_STATES),
    { list: true },
  ),
  minCoverage: q(
    'min_coverage',
    'Only settled windows (not `pending`) whose sealed books cover at least this share of the window (0 to 1; see the certificate route). Windows still open, held by capture or not yet sealed are left out.',
    { type: 'number', minimum: 0, maximum: 1 },
    'a number from 0 to 1',
  ),
  resolutionCheck: q(
    'resolution_check',
    "Only windows whose venue-recorded winner `agrees` or `disagrees` with the recorded reference price's outcome, or is `unchecked` (either unknown yet). See the record's `reference`.",
    { type: 'array', items: { type: 'string', enum: [...RESOLUTION_CHECKS] }, minItems: 1, uniqueItems: true },
    `some of: ${RESOLUTION_CHECKS.join(', ')}`,
    { list: true },
  ),
  metric: q(
    'metric',
    "Which series: displayed probability, displayed price, newest execution, or `reference`: the coin's Chainlink price (the markets' resolution source) over the market's window, a signal of its own, never merged into the others.",
    { type: 'string', enum: [...METRICS] },
    enumOf(METRICS),
    { required: true },
  ),
  includeOrderbook: q(
    'include_orderbook',
    'Include full ladders; otherwise best levels and depth.',
    { type: 'string', enum: ['true', 'false'] },
    'true or false',
  ),
  format: q(
    'format',
    'json (paginated), or csv / parquet: the whole range as one file, unpaginated.',
    { type: 'string', enum: ['json', 'csv', 'parquet'] },
    enumOf(['json', 'csv', 'parquet']),
  ),
  source: q(
    'source',
    'Where the reference price comes from: `chainlink` (the oracle the markets resolve on) or `binance` (the exchange, beside it).',
    { type: 'string', enum: [...REFERENCE_SOURCES], default: 'chainlink' },
    enumOf(REFERENCE_SOURCES),
  ),
  dataset: q('dataset', 'Which dataset.', { type: 'string', enum: [...DATASETS] }, enumOf(DATASETS)),
  filePath: {
    name: 'path',
    in: 'path',
    description: 'A file path from the listing: `<dataset>/venue=.../hour=HH/<name>.parquet`.',
    schema: {
      type: 'string',
      pattern: `^(${DATASETS.join('|')})/venue=[a-z-]+/coin=[a-z0-9]+/window=(5m|15m|all)/date=\\d{4}-\\d{2}-\\d{2}/hour=\\d{2}/[A-Za-z0-9_-]+\\.parquet$`,
      maxLength: 300,
    },
    expect: 'a path from the files listing',
    required: true,
  } as ParamSpec,
  marketId: {
    name: 'market_id',
    in: 'path',
    description: 'Market identifier at the venue.',
    schema: { type: 'string', pattern: '^[0-9A-Za-z_-]{1,80}$' },
    expect: 'up to 80 letters, digits, "_" or "-"',
    required: true,
  } as ParamSpec,
  coin: {
    name: 'coin',
    in: 'path',
    description: 'Coin of the per-coin routes.',
    schema: { type: 'string', enum: [...POLY_COINS] },
    expect: enumOf(POLY_COINS),
    required: true,
    notFound: true,
  } as ParamSpec,
  referenceCoin: {
    name: 'coin',
    in: 'path',
    description: 'Coin whose reference price is asked for.',
    schema: { type: 'string', enum: [...REFERENCE_COINS] },
    expect: enumOf(REFERENCE_COINS),
    required: true,
    notFound: true,
  } as ParamSpec,
} as const;

const ajv = new Ajv({ allErrors: false, strict: false });
ajv.addFormat('timestamp', { type: 'string', validate: (s: string) => parseTime(s) !== null });

export interface Validator {
  specs: ParamSpec[];
  check: ValidateFunction;
}

export function validator(specs: ParamSpec[]): Validator {
  const properties = Object.fromEntries(specs.map((s) => [s.name, s.schema]));
  const required = specs.filter((s) => s.required).map((s) => s.name);
  return { specs, check: ajv.compile({ type: 'object', properties, required, additionalProperties: false }) };
}

export type Parsed = Record<string, unknown>;

/** Validates raw query (or path) values; throws INVALID_PARAMETER naming the first problem. */
export function parse(v: Validator, raw: Record<string, string | string[] | undefined>, kind: 'query' | 'path'): Parsed {
  const values: Parsed = {};
  const accepted = v.specs.filter((s) => s.in === kind).map((s) => s.name);
  for (const [name, value] of Object.entries(raw)) {
    const spec = v.specs.find((s) => s.name === name && s.in === kind);
    if (!spec) {
      fail('INVALID_PARAMETER', `Unknown parameter ${echo(name)}. Accepted: ${accepted.join(', ') || 'none'}`, [
        { param: name, message: 'unknown parameter' },
      ]);
    }
    if (Array.isArray(value) && !spec.list)
      fail('INVALID_PARAMETER', `Parameter "${name}" was given ${value.length} times; give it once`, [
        { param: name, message: 'repeated' },
      ]);
    if (value === undefined) continue;
    values[name] = convert(spec, Array.isArray(value) ? value.join(',') : value);
  }
  if (!v.check(values)) {
    const err = (v.check.errors ?? [])[0] as ErrorObject;
    const name = err.keyword === 'required' ? String(err.params.missingProperty) : err.instancePath.split('/')[1];
    const spec = v.specs.find((s) => s.name === name)!;
    if (err.keyword === 'required') {
      fail('INVALID_PARAMETER', `Missing required parameter "${name}". Expected ${spec.expect}`, [{ param: name, message: 'required' }]);
    }
    if (spec.notFound)
      fail('NOT_FOUND', `No ${name} ${echo(raw[name])} on these routes. Expected ${spec.expect}`, [{ param: name, message: 'not found' }]);
    fail('INVALID_PARAMETER', `Invalid "${name}": ${echo(raw[name])}. Expected ${spec.expect}`, [
      { param: name, message: err.message ?? 'invalid' },
    ]);
  }
  return values;
}

function convert(spec: ParamSpec, value: string): unknown {
  if (spec.list) return value.split(',').map((s) => s.trim().toLowerCase());
  if (spec.schema.type === 'integer') return /^-?\d{1,16}$/.test(value) ? Number(value) : value;
  // Plain decimals only: no exponents, hex or Infinity that Number() would take.
  if (spec.schema.type === 'number') return /^-?\d{1,16}(\.\d{1,16})?$/.test(value) ? Number(value) : value;
  return value;
}

/** Both times parsed, ordered, and in range. */
export function timeRange(p: Parsed, maxSpanMs?: number): { from: number | null; to: number | null } {
  const from = p.start_time === undefined ? null : parseTime(String(p.start_time));
  const to = p.end_time === undefined ? null : parseTime(String(p.end_time));
  if (from !== null && to !== null && from >= to) {
    fail(
      'INVALID_RANGE',
      `start_time ${echo(p.start_time)} is not before end_time ${echo(p.end_time)}; the range is half-open [start, end)`,
      [{ param: 'start_time', message: 'not before end_time' }],
    );
  }
  if (maxSpanMs !== undefined && from !== null && to !== null && to - from > maxSpanMs) {
    fail('INVALID_RANGE', `The range is longer than ${maxSpanMs / 86_400_000} days`, [{ param: 'end_time', message: 'range too long' }]);
  }
  return { from, to };
}
