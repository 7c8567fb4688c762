// Order books: the latest in memory, recorded snapshots a page at a time (from the decoded-book
// cache for markets that are over, else one SQL statement), and the book in force at an instant.
import type { Venue } from '../config.js';
import type { Partition } from '../lake/layout.js';
import type { StoredMarket } from '../lake/reader.js';
import { BOOK_COLUMNS, TIME_COLUMNS, relation } from '../lake/sql.js';
import { type LatestBook, marketKey } from '../records.js';
import { parseTime } from '../time.js';
import { exportFile } from './bulk.js';
import {
  bookCountsSql,
  type PageQuery,
  latestSql,
  marketBooksSql,
  planPartitions,
  snapshotBooksSql,
  snapshotPageSql,
  snapshotTimesSql,
} from './plan.js';
import {
  DeflatedJson,
  PAGE_FRAME,
  RawJson,
  type RequestContext,
  type Result,
  type RouteKit,
  coverageMeta,
  pagination,
  resolveOutcome,
  sql,
  exporting,
} from './route.js';
import { type BookLike, type RenderedSnapshots, bookJson, iso, marketBooks, pageFromBooks, rowBook, snapshotsJson } from './shape.js';
import type { JsonRow } from '../lake/duckdb.js';
import { singleFlight } from './singleflight.js';
import { predeflated } from '../pages/copyformat.js';
import type { DeflatedSnapshots } from '../pages/copyreader.js';

export function bookHandlers(kit: RouteKit) {
  const { deps, lake, cursors, findMarket, gapsMeta, pageQuery } = kit;

  /**
   * A page of a market that is over and wholly sealed, without a statement: the page's rows alone
   * from its files' serving copies (the pieces read lately kept in memory by the copies' own
   * cache), else from the book cache; without copies (or with some missing, then queued to be
   * written), asked again lately (a client walking it), the whole market by SQL into the book
   * cache. Null for a market still recording or with rows (partly) in the spool, and for a first
   * page without copies: those take the SQL path. With `gzip`, a page of the pre-deflated shape
   * comes from the copies as the pieces they hold pre-deflated. A market just over (capture seals
   * it at its end) is served so at once, in its minute of capture lag too: the page is what its
   * files hold now, as SQL's would be, and a late row spooled after it sends its pages to SQL
   * until sealed (waiting out the lag sent the markets users look at most to SQL, 10-13 ms a page).
   */
  const bookPage = async (
    venue: Venue,
    m: StoredMarket,
    pq: PageQuery,
    ladders: boolean,
    now: number,
    gzip: boolean,
  ): Promise<RenderedSnapshots | DeflatedSnapshots | null> => {
    // A market still recording has rows in the spool: its pages go straight to the live path, no look at its files.
    if ((deps.books.maxBytes === 0 && !deps.serving) || m.end_time > now) return null;
    const span = planPartitions('books', m, null, null);
    // What its files hold of this market alone: capture seals a market at its end, while its hour's others still record.
    const signature = lake.marketSignature(span.partitions, m.market_id);
    // Rows still in the spool (not sealed yet, or written late) are read by SQL.
    if (!signature || lake.spooled(span.partitions, m.market_id)) return null;
    const key = marketKey(venue, m.market_id);
    const sealed = deps.serving ? span.partitions.flatMap((p) => lake.sealedOf(p, m.market_id)) : [];
    // A gzip page of the pre-deflated shape: from the copy, cached or not, asked before or not (nothing to compress,
    // a seventh of the bytes; a client walking a market so is no reason to load it whole).
    // Only from copies on disk: on a bucket-served process, a cached market's evicted files are not fetched for it.
    if (deps.serving && gzip && predeflated(pq, ladders) && !(await deps.serving.missing(sealed)).length) {
      // Its files kept as used (a bucket-served process evicts a copy with its file).
      await lake.ensure(sealed);
      const page = await deps.serving.page(sealed, m.market_id, {
        span,
        q: pq,
        ladders,
        maxTimes: pq.limit,
        frame: PAGE_FRAME,
        gzip: true,
      });
      if (page) return page;
    }
    // From the copies, never loaded whole: a whole market decoded into the book cache cost more than
    // it saved on markets drawn uniformly (bench-compare, deep pages at 4 connections 0.36x the req/s
    // of no cache), where a page's pieces kept as read cost a copy.
    if (deps.serving) {
      await lake.ensure(sealed);
      const page = await deps.serving.page(sealed, m.market_id, { span, q: pq, ladders, maxTimes: pq.limit, frame: PAGE_FRAME });
      if (page) return page;
      deps.serving.schedule(await deps.serving.missing(sealed));
    }
    const cached = deps.books.peek(key, signature);
    if (cached) return pageFromBooks(cached, pq, ladders, pq.limit, PAGE_FRAME);
    if (!(deps.books.maxBytes > 0 && deps.books.worthLoading(key, 1))) return null;
    const loaded = await deps.books.load(key, signature, async () => {
      const files = await lake.files(span.partitions, m.market_id);
      if (files.spool.length) return null;
      const wide = relation('books', files, BOOK_COLUMNS);
      return wide ? marketBooks(await lake.duck.chunks(...sql(marketBooksSql(wide, m.market_id, span.from, span.to)))) : null;
    });
    return loaded && pageFromBooks(loaded, pq, ladders, pq.limit, PAGE_FRAME);
  };

  /**
   * A page of a market whose rows are all in the spool (recording, or over and not sealed yet),
   * from its books followed in memory. Asked once lately, it takes the SQL path (one page costs
   * less than reading the whole market); asked again (a client polling it or walking it), the
   * market is followed from then on, each page reading only what capture appended since.
   */
  const livePage = async (venue: Venue, m: StoredMarket, pq: PageQuery, ladders: boolean): Promise<RenderedSnapshots | null> => {
    if (deps.live.maxBytes === 0) return null;
    const key = marketKey(venue, m.market_id);
    const parts = await lake.spoolOnly(planPartitions('books', m, null, null).partitions, m.market_id);
    if (!parts?.length || (!deps.live.has(key) && !deps.books.askedBefore(key))) return null;
    const books = await deps.live.books(key, parts);
    deps.live.pages++;
    return pageFromBooks(books, pq, ladders, pq.limit, PAGE_FRAME);
  };

  const snapshots =
    (id: string, venue: Venue, ladderDefault: boolean) =>
    async (ctx: RequestContext): Promise<Result> => {
      const m = findMarket(venue, ctx, ctx.path.coin);
      const scope = `${id}:${m.market_id}`;
      const { pq, req } = pageQuery(ctx, m, scope, resolveOutcome(m, ctx.query.outcome, null));
      if (exporting(ctx.query)) return exportFile(kit, ctx, m, 'snapshots', pq, 'books');
      const ladders = ctx.query.include_orderbook === undefined ? ladderDefault : ctx.query.include_orderbook === 'true';
      const plan = planPartitions('books', m, pq.from, pq.to);
      ctx.stats.partitions = plan.partitions.length;
      const limit = pq.limit;
      const meta = { coverage: coverageMeta('books', venue, [m.coin], req.from), gaps: gapsMeta(venue, m, 'books', pq.from, pq.to) };
      const rendered =
        (await bookPage(venue, m, pq, ladders, ctx.now, ctx.gzip)) ??
        (await livePage(venue, m, pq, ladders)) ??
        (await sqlPage(ctx, m, plan.partitions, pq, ladders, limit));
      ctx.stats.rows = rendered.books;
      return {
        data: 'deflated' in rendered ? new DeflatedJson(rendered.deflated) : new RawJson(rendered.json, rendered.framed ?? null),
        pagination: pagination(limit, rendered.times > limit, () => cursors.issue(scope, req.filters, [rendered.last!])),
        meta,
      };
    };

  /** A page by SQL: a market still recording, or one not in the book cache. */
  const sqlPage = async (
    ctx: RequestContext,
    m: StoredMarket,
    partitions: Partition[],
    bounded: PageQuery,
    ladders: boolean,
    limit: number,
  ): Promise<RenderedSnapshots> => {
    const files = await lake.files(partitions, m.market_id);
    const wide = relation('books', files, BOOK_COLUMNS);
    const db = lake.duck.for(ctx.signal);
    if (wide && bounded.intervalMs === null) {
      // (limit + 1) times x outcomes rows; more only when some time holds more rows than outcomes.
      for (let rows = (limit + 1) * (bounded.outcomeIndex === null ? Math.max(m.outcomes.length, 1) : 1); ; rows *= 2) {
        const chunks = await db.chunks(...sql(snapshotPageSql(wide, bounded, rows)));
        const rendered = snapshotsJson(chunks, ladders, bounded.order, limit);
        if (chunks.reduce((n, c) => n + c.rowCount, 0) < rows || rendered.times > limit) return rendered;
      }
    }
    if (!wide) return snapshotsJson([], ladders, bounded.order, limit);
    const times = (await db.rows(...sql(snapshotTimesSql(relation('books', files, TIME_COLUMNS)!, bounded)))).map((r) => Number(r.ts));
    const shown = times.slice(0, limit);
    const chunks = shown.length ? await db.chunks(...sql(snapshotBooksSql(wide, bounded, shown))) : [];
    return { ...snapshotsJson(chunks, ladders, bounded.order, limit), times: times.length };
  };

  /**
   * The book in force at an instant: the newest recorded at or before it, with how old it was
   * then (`age_ms`) and the capture gaps between the two, which say when it may be stale.
   */
  const snapshotAt = (id: string, venue: Venue, ladderDefault: boolean) => {
    const pageOf = snapshots(id, venue, ladderDefault);
    return async (ctx: RequestContext): Promise<Result> => {
      const at = parseTime(String(ctx.query.timestamp))!;
      const m = findMarket(venue, ctx, ctx.path.coin);
      const { timestamp: _, ...rest } = ctx.query;
      const result = await pageOf({ ...ctx, gzip: false, query: { ...rest, end_time: String(at + 1), order: 'desc', limit: 1 } });
      const { text } = result.data as RawJson;
      const [snapshot] = JSON.parse(typeof text === 'string' ? text : text.toString('utf8')) as { timestamp: string }[];
      const since = snapshot ? Date.parse(snapshot.timestamp) : m.start_time;
      return {
        data: snapshot ?? null,
        meta: {
          at: iso(at),
          age_ms: snapshot ? at - since : null,
          coverage: result.meta?.coverage,
          gaps: gapsMeta(venue, m, 'books', since, at + 1),
        },
      };
    };
  };

  const latestReading = new Map<string, Promise<LatestBook | undefined>>();
  const latestRendered = new WeakMap<LatestBook, Buffer>();

  /**
   * A market not seen by capture or the spool tail since this process started (it ended
   * before): its newest hour is read once and kept. Newer rows, if any ever come, arrive
   * through capture or the tail and replace it; an older result never replaces a newer one.
   */
  const readLatest = async (m: StoredMarket, key: string): Promise<LatestBook | undefined> => {
    const plan = planPartitions('books', m, null, null);
    for (const p of [...plan.partitions].reverse()) {
      const source = relation('books', await lake.files([p], m.market_id), BOOK_COLUMNS);
      const rows = source ? await lake.duck.rows(latestSql(source), { market_id: m.market_id }) : [];
      if (!rows.length) continue;
      const read: LatestBook = { ts: Number(rows[0].ts), books: rows.map((r) => ({ market_id: m.market_id, ...rowBook(r) })) };
      deps.sealedLatest.add(read);
      const meanwhile = deps.latest.get(key);
      if (meanwhile && meanwhile.ts >= read.ts) return meanwhile;
      deps.latest.set(key, read);
      return read;
    }
    return undefined;
  };

  const latest =
    (venue: Venue) =>
    async (ctx: RequestContext): Promise<Result> => {
      const m = findMarket(venue, ctx);
      const outcome = resolveOutcome(m, ctx.query.outcome, null);
      const key = marketKey(venue, m.market_id);
      let latest = deps.latest.get(key);
      if (!latest) {
        // One read per market however many requests ask at once: a burst of requests for markets
        // not in memory would otherwise queue one query each and starve every lane.
        // Shared (not tied to this request), so no one client's leaving may cancel it.
        latest = await singleFlight(latestReading, key, () => readLatest(m, key));
        ctx.stats.partitions = planPartitions('books', m, null, null).partitions.length;
      }
      if (latest) deps.latestReads.read(key, ctx.now);
      const books = latest?.books.filter((b) => outcome === null || b.outcome_index === outcome) ?? [];
      ctx.stats.rows = books.length;
      const meta = deps.latestMeta(latest);
      if (!latest) return { data: null, meta };
      if (outcome !== null)
        return { data: { market_id: m.market_id, timestamp: iso(latest.ts), books: books.map((b) => bookJson(b)) }, meta };
      // A book is rendered once, however often it is asked for until capture records the next.
      let rendered = latestRendered.get(latest);
      if (!rendered) {
        rendered = Buffer.from(JSON.stringify({ market_id: m.market_id, timestamp: iso(latest.ts), books: books.map((b) => bookJson(b)) }));
        latestRendered.set(latest, rendered);
      }
      return { data: new RawJson(rendered), meta };
    };

  /**
   * Recorded book changes in time order: per outcome, its first book in the range in full
   * (`snapshot`), then each later recorded book as the levels that differ from the one before it
   * (`delta`: new size, 0 removes), so applying them in order rebuilds every recorded book
   * exactly. A time at which an outcome's book did not change adds nothing. `limit` counts items;
   * a page ends on a whole capture time, and a deep page starts from the books in force at its
   * cursor, so walking pages gives the same items as one long page.
   */
  const changes =
    (id: string, venue: Venue) =>
    async (ctx: RequestContext): Promise<Result> => {
      const m = findMarket(venue, ctx, ctx.path.coin);
      const scope = `${id}:${m.market_id}`;
      const { pq, req } = pageQuery(ctx, m, scope, resolveOutcome(m, ctx.query.outcome, null));
      const plan = planPartitions('books', m, pq.from, pq.to);
      ctx.stats.partitions = plan.partitions.length;
      const meta = { coverage: coverageMeta('books', venue, [m.coin], req.from), gaps: gapsMeta(venue, m, 'books', pq.from, pq.to) };
      const wide = relation('books', await lake.files(plan.partitions, m.market_id), BOOK_COLUMNS);
      const db = lake.duck.for(ctx.signal);
      const outcomes = pq.outcomeIndex === null ? Math.max(m.outcomes.length, 1) : 1;
      const before = new Map<number, BookLike>();
      if (wide && pq.after !== null) {
        // The books in force at the cursor: the newest row of each outcome at or before it, within the range.
        const back = { ...pq, order: 'desc' as const, to: pq.after + 1, after: null };
        for (const r of await db.rows(...sql(snapshotPageSql(wide, back, outcomes * 8)))) {
          const b = rowBook(r);
          if (!before.has(b.outcome_index)) before.set(b.outcome_index, b);
        }
      }
      // Sequence numbers count each outcome's books from the market's open, so they do not depend on the page.
      const seq = new Map<number, number>();
      const counted = planPartitions('books', m, m.start_time, pq.after === null ? pq.from : pq.after + 1);
      // A first page from the open has nothing before it: no listing, no query.
      const narrow = counted.partitions.length
        ? relation('books', await lake.files(counted.partitions, m.market_id), ['market_id', 'ts', 'outcome_index'])
        : null;
      if (narrow) {
        for (const r of await db.rows(...sql(bookCountsSql(narrow, m.market_id, counted.from, counted.to)))) {
          seq.set(Number(r.outcome_index), Number(r.books));
        }
      }
      const items: BookChange[] = [];
      let last: number | null = null;
      let more = false;
      let after = pq.after;
      while (wide && !more) {
        const rows = await db.rows(...sql(snapshotPageSql(wide, { ...pq, order: 'asc', after }, (pq.limit + 1) * outcomes)));
        const groups = groupByTime(rows);
        // The last time of a full read may continue past it: read again from there.
        const complete = rows.length < (pq.limit + 1) * outcomes;
        if (!complete && groups.length > 1) groups.pop();
        for (const [ts, books] of groups) {
          const made = books
            .map((b) => changeOf(ts, b, before.get(b.outcome_index), (seq.get(b.outcome_index) ?? 0) + 1))
            .filter((c) => c !== null);
          if (items.length && items.length + made.length > pq.limit) {
            more = true;
            break;
          }
          items.push(...made);
          for (const b of books) {
            before.set(b.outcome_index, b);
            seq.set(b.outcome_index, (seq.get(b.outcome_index) ?? 0) + 1);
          }
          last = ts;
        }
        if (complete || more) break;
        after = last;
      }
      ctx.stats.rows = items.length;
      return {
        data: items,
        pagination: pagination(pq.limit, more, () => cursors.issue(scope, req.filters, [last!])),
        meta,
      };
    };

  return { latest, snapshots, snapshotAt, changes };
}

export interface BookChange {
  /** The outcome's recorded books counted from the market's open, this one included: with `token_id`, a change's key. */
  seq: number;
  timestamp: string;
  outcome_index: number;
  outcome: string;
  token_id: string;
  exchange_time: string | null;
  type: 'snapshot' | 'delta';
  /** The whole side for a snapshot, best first; the levels whose size changed for a delta (size 0 removes). */
  bid_prices: number[];
  bid_sizes: number[];
  ask_prices: number[];
  ask_sizes: number[];
}

function groupByTime(rows: JsonRow[]): [number, BookLike[]][] {
  const groups: [number, BookLike[]][] = [];
  for (const r of rows) {
    const ts = Number(r.ts);
    if (groups.at(-1)?.[0] !== ts) groups.push([ts, []]);
    groups.at(-1)![1].push(rowBook(r));
  }
  return groups;
}

/** The levels of `now` whose size differs from `was`, and those `was` had that `now` lacks (size 0), best first. */
function levelDiff(wasPrices: number[], wasSizes: number[], prices: number[], sizes: number[], dir: 1 | -1) {
  const before = new Map(wasPrices.map((p, i) => [p, wasSizes[i]]));
  const kept = new Set(prices);
  const out: [number, number][] = prices.map((p, i) => [p, sizes[i]] as [number, number]).filter(([p, size]) => before.get(p) !== size);
  for (const p of wasPrices) if (!kept.has(p)) out.push([p, 0]);
  out.sort((x, y) => dir * (x[0] - y[0]));
  return { prices: out.map((l) => l[0]), sizes: out.map((l) => l[1]) };
}

/** One outcome's book as a change from its previous book; null when nothing changed. */
export function changeOf(ts: number, b: BookLike, prev: BookLike | undefined, seq: number): BookChange | null {
  const head = {
    seq,
    timestamp: iso(ts)!,
    outcome_index: b.outcome_index,
    outcome: b.outcome,
    token_id: b.token_id,
    exchange_time: iso(b.exchange_ts),
  };
  if (!prev) {
    const { bid_prices, bid_sizes, ask_prices, ask_sizes } = b;
    return { ...head, type: 'snapshot', bid_prices, bid_sizes, ask_prices, ask_sizes };
  }
  const bids = levelDiff(prev.bid_prices, prev.bid_sizes, b.bid_prices, b.bid_sizes, -1);
  const asks = levelDiff(prev.ask_prices, prev.ask_sizes, b.ask_prices, b.ask_sizes, 1);
  if (!bids.prices.length && !asks.prices.length) return null;
  return { ...head, type: 'delta', bid_prices: bids.prices, bid_sizes: bids.sizes, ask_prices: asks.prices, ask_sizes: asks.sizes };
}
