// The OpenAPI 3.1 document, generated from the route table and the same parameter specs the
// server validates with.
import { STATUS_OF, type ErrorCode } from '../edge/errors.js';
import type { Route } from './route.js';
import { WINDOW_STATES } from '../lake/certificate.js';
import { REFERENCE_SOURCES } from '../records.js';
import { RESOLUTION_CHECKS } from '../lake/referenceprice.js';

const nullable = (schema: Record<string, unknown>) => ({ anyOf: [schema, { type: 'null' }] });
const str = { type: 'string' };
const num = { type: 'number' };
const time = { type: 'string', format: 'date-time' };
const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const obj = (properties: Record<string, unknown>, required = Object.keys(properties)) => ({
  type: 'object',
  properties,
  required,
  additionalProperties: false,
});

const outcome = obj({ index: { type: 'integer' }, label: str, token_id: str });
const ladder = { type: 'array', items: num };

// `provisional`: not in the lake yet (open at capture's last heartbeat, or the rest of a window capture stopped holding); a restart writes the real one.
const provisional = { type: 'boolean', enum: [true] };
const gap = obj({ from: time, to: time, reason: str, provisional }, ['from', 'to', 'reason']);
const feedHealth = obj({ url: str, reachable: { type: 'boolean' }, last_ok: nullable(time), error: nullable(str) });
const missingSeconds = obj({ venue: num, capture: num, unproved: num, unrecorded: num });
const windowCoverage = obj({
  share: num,
  window_seconds: num,
  covered_seconds: num,
  by_cause: obj({ venue: num, capture: num, unproved: num, unrecorded: num }),
  by_reason: { type: 'object', additionalProperties: num },
});
const coverage = obj({ dataset: str, starts: time, truncated: { type: 'boolean' }, note: str });
/** A window checked against its coin's reference price: on the market record, and (with the reference's coverage) on the certificate. */
const referenceCheckFields = {
  source: { type: 'string', enum: ['chainlink'] },
  symbol: str,
  open: nullable(obj({ ts: time, price: num })),
  close: nullable(obj({ ts: time, price: num })),
  outcome_by_reference: nullable({ type: 'string', enum: ['Up', 'Down'] }),
  agrees_with_resolution: nullable({ type: 'boolean' }),
};

export const SCHEMAS: Record<string, unknown> = {
  // Every property a route may add, declared, so generated clients type them.
  Meta: {
    type: 'object',
    properties: {
      request_id: str,
      timestamp: time,
      coverage: {
        ...coverage,
        description: 'Where recorded history starts for this dataset; `truncated` when the request reached before it.',
      },
      gaps: { type: 'array', items: gap, description: 'Capture gaps overlapping the requested range: spans nothing was recorded for.' },
      metric: { type: 'string', enum: ['chance', 'price', 'last_trade'] },
      outcome: obj({ index: { type: 'integer' }, label: nullable(str) }),
      notice: str,
      note: str,
      at: { ...time, description: 'snapshots/at: the instant asked for.' },
      age_ms: { ...nullable({ type: 'integer' }), description: 'snapshots/at: how old the returned book was at that instant.' },
    },
    required: ['request_id', 'timestamp'],
  },
  Pagination: obj({ limit: { type: 'integer' }, has_more: { type: 'boolean' }, next_cursor: nullable(str) }),
  Error: obj({
    error: obj({
      code: { type: 'string', enum: Object.keys(STATUS_OF) },
      message: str,
      details: { type: 'array', items: obj({ param: str, message: str }, ['message']) },
    }),
    meta: ref('Meta'),
  }),
  Outcome: outcome,
  Market: obj({
    market_id: str,
    topic_id: nullable(str),
    venue: str,
    slug: nullable(str),
    title: nullable(str),
    coin: str,
    window: { type: 'string', enum: ['5m', '15m'] },
    start_time: time,
    end_time: time,
    created_time: nullable(time),
    resolved_time: nullable(time),
    resolution_latency_seconds: nullable(num),
    status: { type: 'string', enum: ['upcoming', 'open', 'closed', 'resolved', 'cancelled'] },
    coverage: {
      ...nullable(
        obj({
          share: num,
          missing_seconds: missingSeconds,
          recorders: nullable({ type: 'object', additionalProperties: obj({ share: num, missing_seconds: missingSeconds }) }),
        }),
      ),
      description:
        "The sealed window's certificate in brief (see the certificate route): the share of the window covered and the seconds missing by cause; `recorders`, for a record merged from several recorders (captures on different hosts, `RECORDER_ID`), each one's own share and missing seconds as the merge read them (null for a record one capture made). Null while the window is open or its books are not yet sealed.",
    },
    availability: {
      ...obj({ state: nullable({ type: 'string', enum: [...WINDOW_STATES] }), last_modified: nullable(time) }),
      description:
        'How far the window’s record can be trusted yet: `pending` while the window is open (plus its minute of capture lag), capture still holds it, or its books are not sealed (figures may change); then `complete` (covered at least 99%), `partial`, or `not_captured` (nothing of it recorded). Null only for windows sealed before per-market spans were kept. `last_modified`: when a books file holding the market was last sealed.',
    },
    resolution: { type: 'string', enum: ['pending', 'resolved', 'invalid'] },
    winning_outcome: nullable(ref('Outcome')),
    condition: obj({
      condition_id: nullable(str),
      question_id: nullable(str),
      oracle: nullable(str),
      outcome_slot_count: nullable({ type: 'integer' }),
    }),
    outcomes: { type: 'array', items: ref('Outcome') },
    volume: nullable(num),
    liquidity: nullable(num),
    participant_count: nullable({ type: 'integer' }),
    chain: obj({ chain_id: nullable({ type: 'integer' }), name: nullable(str) }),
    exchange: obj({
      address: nullable(str),
      kind: nullable(str),
      collateral: nullable(str),
      fee_rate_bps: nullable(num),
      tick_size: nullable(num),
    }),
    reference_price: {
      ...obj({ start: nullable(num), end: nullable(num) }),
      description: 'The start and end prices the venue itself publishes for the window, where it does (the wallet venue); null elsewhere.',
    },
    reference: {
      ...obj(referenceCheckFields),
      description:
        "The window as its coin's recorded Chainlink price (Polymarket's price socket) saw it: `open` is the first observation at or after the window's start, `close` the first at or after its end, each null where the record cannot vouch it is the first (a gap of the feed at that instant, or its hour not sealed yet), never a later one. `outcome_by_reference`: Up when close >= open. `agrees_with_resolution`: whether the venue's recorded winner is that outcome (null until both are known). The wallet venue names no resolution source; its markets are checked against the same symbols.",
    },
  }),
  Book: obj(
    {
      outcome_index: { type: 'integer' },
      outcome: str,
      token_id: str,
      exchange_time: nullable(time),
      bid_prices: ladder,
      bid_sizes: ladder,
      ask_prices: ladder,
      ask_sizes: ladder,
      best_bid: nullable(num),
      best_ask: nullable(num),
      bid_depth: num,
      ask_depth: num,
    },
    ['outcome_index', 'outcome', 'token_id', 'exchange_time'],
  ),
  Snapshot: obj({ timestamp: time, books: { type: 'array', items: ref('Book') } }),
  Sample: obj({ timestamp: time, value: num }),
  Health: obj({
    status: { type: 'string', enum: ['ok', 'degraded', 'failing'] },
    capture: nullable(
      obj(
        {
          state: { type: 'string', enum: ['running', 'failing', 'stopped'] },
          last_flush: nullable(time),
          flush_age_ms: nullable({ type: 'integer' }),
          max_flush_age_ms: { type: 'integer' },
          storage_error: nullable(str),
          buffered_rows: { type: 'integer' },
          dropped_rows: { type: 'integer' },
          seal_backlog: { type: 'integer' },
          seal_error: nullable(str),
          // Only where capture publishes to a bucket.
          publish: obj({
            bucket: str,
            backlog_partitions: { type: 'integer' },
            waiting_since: nullable(time),
            last_published_at: nullable(time),
            last_error: nullable(str),
            files_put: { type: 'integer' },
          }),
        },
        [
          'state',
          'last_flush',
          'flush_age_ms',
          'max_flush_age_ms',
          'storage_error',
          'buffered_rows',
          'dropped_rows',
          'seal_backlog',
          'seal_error',
        ],
      ),
    ),
    lake: obj(
      {
        readable: { type: 'boolean' },
        error: nullable(str),
        query_engine: str,
        newest_capture: nullable(time),
        files: { type: 'integer' },
        markets: { type: 'integer' },
        // `local`: this machine's lake. `bucket`: manifests and files from object storage, fetched into a bounded cache.
        source: { type: 'string', enum: ['local', 'bucket'] },
        bucket: obj({
          bucket: str,
          last_sync: nullable(time),
          sync_error: nullable(str),
          // Reads asked of the bucket again after a transient failure (no answer, 429, 5xx), up to four attempts each.
          retries: { type: 'integer' },
          cache: obj({
            files: { type: 'integer' },
            bytes: { type: 'integer' },
            max_bytes: { type: 'integer' },
            fetched: { type: 'integer' },
            // Files another worker sharing the cache directory fetched, checked here (size, sha256) instead of downloaded again.
            adopted: { type: 'integer' },
            fetch_errors: { type: 'integer' },
            evicted: { type: 'integer' },
          }),
          // Capture's latest-book feed, where one is configured (CAPTURE_FEED_URL).
          capture_feed: nullable(feedHealth),
          capture_feeds: { type: 'array', items: feedHealth },
        }),
      },
      ['readable', 'error', 'query_engine', 'newest_capture', 'files', 'markets', 'source'],
    ),
    api: obj({
      in_flight: { type: 'integer' },
      queued: { type: 'integer' },
      max_in_flight: { type: 'integer' },
      shed: { type: 'integer' },
      exports: obj({ in_use: { type: 'integer' }, slots: { type: 'integer' }, slow_readers_cut: { type: 'integer' } }),
      // This process's: in a cluster each worker answers for its share.
      connections: obj({ open: { type: 'integer' }, refused: { type: 'integer' }, max: { type: 'integer' } }),
      // Where pages come from: the book cache, the serving copies, markets followed in the spool, SQL.
      pages: obj({
        book_cache_bytes: { type: 'integer' },
        book_cache_hits: { type: 'integer' },
        book_cache_markets: { type: 'integer' },
        // Whole markets decoded into the cache, and those asked for often enough but kept out (they would push out markets asked for as often).
        book_cache_loads: { type: 'integer' },
        book_cache_refused: { type: 'integer' },
        // Markets still in the spool followed in memory as capture appends (pages of them without a statement).
        live_markets: { type: 'integer' },
        live_bytes: { type: 'integer' },
        live_pages: { type: 'integer' },
        serving_copies: { type: 'boolean' },
        copy_reads: { type: 'integer' },
        // Pieces of copies (a block's table, a page's chunks as inflated) kept in memory, and pages' reads of them there.
        copy_cache_bytes: { type: 'integer' },
        copy_cache_hits: { type: 'integer' },
        copy_cache_kept: { type: 'integer' },
        // Of those, gzip pages sent mostly as the copies hold them pre-deflated.
        copy_deflated_pages: { type: 'integer' },
        copies_written: { type: 'integer' },
        copies_queued: { type: 'integer' },
      }),
      // Finished markets' replay messages rendered once on disk (REPLAY_COPIES; off on a bucket-served lake).
      replay: obj(
        {
          copies: { type: 'boolean' },
          copy_reads: { type: 'integer' },
          copies_written: { type: 'integer' },
          copies_queued: { type: 'integer' },
          // Under COPIES_SHARE (absent when unbounded): what replay copies may take (the share of the books
          // Parquet less the serving copies), what they take, the serving copies' bytes, and copies removed or not written for want of room.
          copies_share: { type: 'number' },
          copies_budget_bytes: { type: 'integer' },
          copies_bytes: { type: 'integer' },
          serving_copies_bytes: { type: 'integer' },
          copies_evicted: { type: 'integer' },
          copies_skipped: { type: 'integer' },
        },
        ['copies', 'copy_reads', 'copies_written', 'copies_queued'],
      ),
    }),
  }),
  Coverage: obj({
    published: { type: 'array', items: obj({ dataset: str, coins: { type: 'array', items: str }, starts: str, what: str }) },
    recorded: {
      type: 'array',
      items: obj({
        dataset: str,
        coin: str,
        window: str,
        first: nullable(time),
        last: nullable(time),
        rows: { type: 'integer' },
        files: { type: 'integer' },
      }),
    },
    windows: {
      type: 'array',
      description:
        'Ended market windows whose books are sealed, by coin and window: how many, how many covered at least 99%, the share of their time covered, and the seconds missing by cause (see the certificate route).',
      items: obj({
        coin: str,
        window: str,
        windows: { type: 'integer' },
        complete: { type: 'integer' },
        states: obj(Object.fromEntries(WINDOW_STATES.map((state) => [state, { type: 'integer' }]))),
        resolution_checks: obj(Object.fromEntries(RESOLUTION_CHECKS.map((c) => [c, { type: 'integer' }]))),
        share: num,
        recorders: {
          type: 'object',
          additionalProperties: obj({ windows: { type: 'integer' }, complete: { type: 'integer' }, share: num, record_share: num }),
          description:
            'Of the counted windows merged from several recorders (a window no recorder published anything of has no recorder figures), each recorder’s own: how many windows, how many it covered at least 99%, the share of their time it covered, and `record_share`, the merged record’s share of the same windows (empty when one capture made the record).',
        },
        missing_seconds: missingSeconds,
      }),
    },
    gaps: {
      type: 'array',
      items: obj({ coin: str, window: str, market_id: nullable(str), dataset: str, from: time, to: time, reason: str, provisional }, [
        'coin',
        'window',
        'market_id',
        'dataset',
        'from',
        'to',
        'reason',
      ]),
    },
  }),
  File: obj({
    dataset: str,
    coin: str,
    window: str,
    date: str,
    hour: { type: 'integer' },
    rows: { type: 'integer' },
    bytes: { type: 'integer' },
    sha256: str,
    url: str,
  }),
  Gap: gap,
  BookChange: {
    ...obj({
      seq: {
        type: 'integer',
        description:
          "This outcome's recorded books counted from the market's open, this one included: with `token_id`, the change's key, the same on every page and in every range. It skips the numbers of books in which only the other outcome changed.",
      },
      timestamp: time,
      outcome_index: { type: 'integer' },
      outcome: str,
      token_id: str,
      exchange_time: nullable(time),
      type: { type: 'string', enum: ['snapshot', 'delta'] },
      bid_prices: ladder,
      bid_sizes: ladder,
      ask_prices: ladder,
      ask_sizes: ladder,
    }),
    description:
      'One outcome at one recorded time. `snapshot`: its whole book, best level first, as in Book. `delta`: only the levels whose size changed since its previous recorded book, best first, with the new size (0 removes the level).',
  },
  Trade: {
    ...obj({
      timestamp: time,
      exchange_time: nullable(time),
      recv_time: time,
      outcome_index: { type: 'integer' },
      outcome: str,
      token_id: str,
      price: num,
      size: nullable(num),
      side: nullable({ type: 'string', enum: ['buy', 'sell'] }),
      fee_rate_bps: nullable(num),
      transaction_hash: nullable(str),
      source: { type: 'string', enum: ['stream', 'rest_last_trade'] },
    }),
    description:
      'One trade of one outcome token. `source` says what the venue sent: `stream`, a trade event (price, size, side, fee and transaction hash as the venue gave them; `timestamp` and `exchange_time` are its time of the trade); `rest_last_trade`, only a last-trade price that REST showed changed (at `timestamp`, when it was seen; size, side and hash null: it may stand for several fills, and is no fill record). `recv_time` is when capture received it.',
  },
  ReferencePrice: {
    ...obj({
      ts: time,
      recv_ts: time,
      sent_ts: time,
      price: num,
      source: { type: 'string', enum: [...REFERENCE_SOURCES] },
      symbol: str,
    }),
    description:
      "One observation of a coin's price as Polymarket's price socket (RTDS) relayed it: `ts` is the observation's own time (what a window's open and close are compared on), `sent_ts` when the socket sent it, `recv_ts` when capture received it. `chainlink` is the oracle the markets resolve on (`btc/usd`), `binance` the exchange beside it (`btcusdt`). Each observation once; a span in which some may be missing is in `meta.gaps`.",
  },
  Certificate: {
    ...obj({
      market_id: str,
      window: obj({ start: time, end: time }),
      complete_as_of: time,
      open: { type: 'boolean' },
      state: { type: 'string', enum: [...WINDOW_STATES] },
      last_modified: nullable(time),
      coverage: windowCoverage,
      gaps: { type: 'array', items: gap },
      books: obj({
        recorded: num,
        first: nullable(time),
        verified_by: obj({ snapshot: num, hash: num, rest: num, best_bid_ask: num, none: num, unknown: num }),
        hash_check: obj({ match: num, explained: num, mismatch: num, unverifiable: num, none: num }),
      }),
      trades: { type: 'object', additionalProperties: num, description: 'Trades in the window by source (stream, rest_last_trade).' },
      clock_offset_ms: nullable(obj({ p50: num, p99: num })),
      reference: obj({ ...referenceCheckFields, coverage: num }),
      recorders: nullable({ type: 'object', additionalProperties: obj({ coverage: windowCoverage, gaps: { type: 'array', items: gap } }) }),
    }),
    description:
      "The completeness of a market window, from the lake. `state`: `pending` while the window is open (plus its minute of capture lag), capture still holds it, or its books are not sealed, answered with a Retry-After; then `complete` (at least 99% covered), `partial` or `not_captured`. `complete_as_of`: the instant the figures hold up to (for a window capture is recording, its last heartbeat). `gaps[].provisional`: a gap not written yet, open at capture's last heartbeat or the rest of a window capture stopped holding; a restart writes the real one. `coverage.share`: the part of the window (up to `complete_as_of` while open) with a record; a book holds until the next, so only gaps and the time before every outcome has a recorded book are missing (`books.first` is the market's first book of either outcome). `by_cause`: `venue` (the venue answered errors, timed out, dropped or froze its feed), `capture` (this service was down or its disk refused rows), `unproved` (changes the copy could not prove), `unrecorded` (before capture held the market, with no gap to say why); each instant counted once. `by_reason`: seconds per recorded gap reason. `books.verified_by`: the window's recorded books by what vouched for each when it was recorded (the lake's `verified_by` column): `snapshot` the venue's own whole book (a stream snapshot, a push, a REST answer), `hash` rebuilt from changes and the venue's book hash reproduced, `rest` rebuilt and equal to a REST book of the same instant, `best_bid_ask` rebuilt and only its best levels were the venue's, `none` nothing checked it, `unknown` recorded before labels were kept. A proof that arrives after a book was written is not carried back to it, so the checked counts are a lower bound. `books.hash_check`: the window's books by what the venue's book hash said of each (the lake's `hash_check` column; Polymarket sends a hash with every book and change): `match` reproduced from the copy, `explained` reproduced only with a hashed field other than the one the copy held at that instant (as a rule the last trade price, sent within a second after the book that hashed it; or the value before a change REST reported early), `mismatch` every hashed field known and not reproduced (a wrong copy, or the venue's formula changed: such a book stands on what `verified_by` says, never on its hash), `unverifiable` a hash sent while a field it covers was not known yet, `none` no hash to check (the wallet venue sends none, a REST fallback, or recorded before 2026-11-27). `clock_offset_ms`: receive time less the venue time of the books recorded in the window (for streamed books the delivery latency plus the clocks' skew; for polled books also how old the venue's book was when polled). `reference`: the window checked against the coin's recorded Chainlink price, as on the market record (`open`, `close`, `outcome_by_reference`, `agrees_with_resolution`), and `coverage`, the share of the window the sealed reference record vouches for (5-minute spans with observations, less the feed's gaps). `recorders`: for a record merged from several recorders (captures on different hosts, `RECORDER_ID`), each one's own coverage and gaps beside the record's, as the merge read them (a span a recorder had not sealed and published when merged is `unpublished`); null for a record one capture made.",
  },
  WhoAmI: obj({ key_id: str, plan: { type: 'string', enum: ['free', 'paid'] }, rate_limit: obj({ per_second: num }) }),
};

const envelope = (data: unknown, list: boolean) => ({
  type: 'object',
  properties: { data, ...(list ? { pagination: ref('Pagination') } : {}), meta: ref('Meta') },
  required: ['data', 'meta', ...(list ? ['pagination'] : [])],
  additionalProperties: false,
});

export const RESPONSES: Record<string, unknown> = {
  Health: envelope(ref('Health'), false),
  WhoAmI: envelope(ref('WhoAmI'), false),
  MarketList: envelope({ type: 'array', items: ref('Market') }, true),
  MarketOne: envelope(ref('Market'), false),
  LatestBook: envelope(nullable(obj({ market_id: str, timestamp: time, books: { type: 'array', items: ref('Book') } })), false),
  SnapshotList: envelope({ type: 'array', items: ref('Snapshot') }, true),
  SnapshotAt: envelope(nullable(ref('Snapshot')), false),
  ChangeList: envelope({ type: 'array', items: ref('BookChange') }, true),
  SampleList: envelope({ type: 'array', items: ref('Sample') }, true),
  Coverage: envelope(ref('Coverage'), false),
  FileList: envelope({ type: 'array', items: ref('File') }, true),
  TradeList: envelope({ type: 'array', items: ref('Trade') }, true),
  ReferenceList: envelope({ type: 'array', items: ref('ReferencePrice') }, true),
  Certificate: envelope(ref('Certificate'), false),
  OpenApi: { type: 'object' },
};

const header = (description: string, schema: Record<string, unknown> = { type: 'integer' }) => ({ description, schema });
const HEADERS: Record<string, unknown> = {
  RequestId: header("This request's id; quote it when reporting a problem.", str),
  RateLimitLimit: header('Requests per second this key may make.', num),
  RateLimitRemaining: header('Requests left in the current second.'),
  RateLimitReset: header('Seconds until the allowance refills.'),
  RetryAfter: header('Seconds to wait before retrying.'),
};
const headerRef = (name: string) => ({ $ref: `#/components/headers/${name}` });
const KEYED_HEADERS = {
  'X-Request-Id': headerRef('RequestId'),
  'X-RateLimit-Limit': headerRef('RateLimitLimit'),
  'X-RateLimit-Remaining': headerRef('RateLimitRemaining'),
  'X-RateLimit-Reset': headerRef('RateLimitReset'),
};
// The second entry is for generators that know no Parquet type (openapi-python-client reads
// octet-stream as a file); both are the same bytes.
const PARQUET = {
  'application/vnd.apache.parquet': { schema: { type: 'string', format: 'binary', contentMediaType: 'application/vnd.apache.parquet' } },
  'application/octet-stream': { schema: { type: 'string', format: 'binary' } },
};

const ERRORS_BY_ACCESS: Record<Route['access'], ErrorCode[]> = {
  // Unknown query parameters are refused everywhere, these routes too (a typo never passes silently).
  public: ['INVALID_PARAMETER', 'INTERNAL_ERROR'],
  key: [
    'INVALID_PARAMETER',
    'INVALID_CURSOR',
    'INVALID_RANGE',
    'AUTH_MISSING',
    'AUTH_INVALID',
    'NOT_FOUND',
    'MARKET_NOT_FOUND',
    'RATE_LIMITED',
    'INTERNAL_ERROR',
    'UNAVAILABLE',
  ],
  paid: [
    'INVALID_PARAMETER',
    'INVALID_CURSOR',
    'INVALID_RANGE',
    'AUTH_MISSING',
    'AUTH_INVALID',
    'PLAN_REQUIRED',
    'MARKET_NOT_FOUND',
    'RATE_LIMITED',
    'INTERNAL_ERROR',
    'UNAVAILABLE',
  ],
};

function docNote(r: Route, param: string): string {
  if (param !== 'format') return '';
  return ` This operation is documented with its JSON response; for files use the \`${r.path.replace(/:([a-z_]+)/g, '{$1}')}.csv\` and \`.parquet\` operations, whose responses are typed.`;
}

export function openApiDocument(routes: Route[]): Record<string, unknown> {
  const paths: Record<string, unknown> = {};
  for (const r of routes) {
    const statuses = new Map<number, ErrorCode[]>();
    for (const code of ERRORS_BY_ACCESS[r.access]) statuses.set(STATUS_OF[code], [...(statuses.get(STATUS_OF[code]) ?? []), code]);
    statuses.set(405, ['METHOD_NOT_ALLOWED']);
    statuses.set(413, ['PAYLOAD_TOO_LARGE']);
    statuses.set(431, ['HEADERS_TOO_LARGE']);
    const okHeaders = r.access === 'public' ? { 'X-Request-Id': headerRef('RequestId') } : KEYED_HEADERS;
    const file = (description: string, content: unknown, extra: Record<string, unknown> = {}) => ({
      description,
      headers: { ...okHeaders, ...extra },
      content,
    });
    // One response type per operation: exports are operations of their own (`.csv`, `.parquet`).
    const responses: Record<string, unknown> =
      r.response === 'Parquet'
        ? {
            200: file('The file', PARQUET, { ETag: { schema: str }, 'Content-Length': { schema: { type: 'integer' } } }),
            206: file('The requested byte range', PARQUET, { 'Content-Range': { schema: str } }),
            304: { description: 'Not modified (If-None-Match matched the ETag)' },
            416: { description: 'RANGE_NOT_SATISFIABLE', content: { 'application/json': { schema: ref('Error') } } },
          }
        : r.response === 'Csv'
          ? {
              200: file(
                'The whole range as CSV: a header row, then one row per book (or sample); ladders as JSON arrays in cells',
                { 'text/csv': { schema: str } },
                { 'Content-Disposition': { schema: str } },
              ),
            }
          : r.response === 'ParquetExport'
            ? {
                200: file("The whole range as one Parquet file, in the lake's column types", PARQUET, {
                  'Content-Disposition': { schema: str },
                }),
              }
            : {
                200: {
                  description: r.summary,
                  headers: okHeaders,
                  content: { 'application/json': { schema: ref(`Response${r.response}`) } },
                },
              };
    for (const [status, codes] of statuses) {
      const retry = status === 429 || status === 503 ? { 'Retry-After': headerRef('RetryAfter') } : {};
      responses[status] = {
        description: codes.join(', '),
        headers: { 'X-Request-Id': headerRef('RequestId'), ...retry },
        content: { 'application/json': { schema: ref('Error') } },
      };
    }
    if (r.id === 'health') {
      responses[503] = {
        description: 'A component is failing (capture has not persisted within its bound, or the lake is unreadable); the body says which',
        content: { 'application/json': { schema: ref(`Response${r.response}`) } },
      };
    }
    paths[r.path.replace(/:([a-z_]+)/g, '{$1}').replace('/*path', '/{path}')] = {
      get: {
        operationId: r.id.replace(/[^A-Za-z0-9]+(.)/g, (_, c: string) => c.toUpperCase()),
        summary: r.summary,
        ...(r.access === 'public' ? { security: [] } : {}),
        ...(r.access === 'paid' ? { description: 'Paid plans only: a free key gets 403 PLAN_REQUIRED.' } : {}),
        parameters: r.params.map((p) => ({
          name: p.name,
          in: p.in,
          required: p.required ?? p.in === 'path',
          description: `${p.description} Accepts ${p.expect}.${docNote(r, p.name)}`,
          // Lists may also come comma-separated; repeated (the OpenAPI default) is what generators send.
          schema: p.schema,
          ...(p.list ? { style: 'form', explode: true } : {}),
        })),
        responses,
      },
    };
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'Prediction-market history',
      version: '3.0.0',
      description:
        'Recorded full-L2 order books, market records and price series. Every answer is an envelope: `data` and `meta` (lists add `pagination` with an opaque `next_cursor`); every error is the `Error` schema, `{ error: { code, message, details }, meta }`, with the statuses listed per route.',
    },
    servers: [{ url: '/' }],
    security: [{ bearer: [] }],
    paths,
    components: {
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer', description: '`pmh_` + 32 base62 characters' } },
      headers: HEADERS,
      schemas: { ...SCHEMAS, ...Object.fromEntries(Object.entries(RESPONSES).map(([k, v]) => [`Response${k}`, v])) },
    },
  };
}
