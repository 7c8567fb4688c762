// What a replay connection says in each venue's protocol: how a client subscribes (Polymarket's
// `assets_ids` frames and PING text; the wallet's topics in the URL), how messages are framed, and
// how the replay says it is over.
import type { Venue } from '../config.js';
import type { Coverage, WindowState } from '../lake/certificate.js';
import type { StoredMarket } from '../lake/reader.js';
import { type ControlAnswer, applyControl, isControl } from './control.js';
import { PolymarketWalk } from './polymarket.js';
import type { ReplayRequest } from './request.js';
import { type ReplaySession, type ReplayWalk, SCHEDULE } from './session.js';
import { type MarketTape, PRE_OPEN_MS } from './tape.js';
import { WALLET_ACK, WALLET_AGGREGATE_TOPIC, WALLET_TOPIC_PREFIX, WalletWalk, walletFrame } from './wallet.js';
import { type FeedGap, HourSchedule, ObservationWalk, type SentObservation, filteredSymbols } from './rtds.js';
import { RTDS_TOPICS } from '../venues/polymarket/rtds.js';
import type { ReferenceSource } from '../records.js';

/** What a protocol may ask of the replay it speaks for. */
export interface ReplayContext {
  request: ReplayRequest;
  query: Record<string, string>;
  session: ReplaySession;
  /** Sends a frame outside the replay's pace (a PONG, an acknowledgement). */
  send(text: string): void;
  market(id: string): StoredMarket | null;
  token(id: string): StoredMarket | null;
  /** The venue's markets, by window start. */
  markets(): StoredMarket[];
  tape(m: StoredMarket): Promise<MarketTape>;
  /** Markets a replay plays at once at most. */
  maxMarkets: number;
  charge(tape: MarketTape, bytes: number): void;
  /** A reference source's observations of the coins sent in [from, to), and its feeds' gaps there (the price socket's replay). */
  observations(source: ReferenceSource, from: number, to: number): Promise<{ rows: SentObservation[]; gaps: FeedGap[] }>;
  /** The coins whose reference prices the archive keeps. */
  referenceCoins: readonly string[];
}

/** What the archive holds of a market the replay played, as its certificate says, and what the replay sent of it. */
export interface MarketQuality {
  market: StoredMarket;
  /** The window's state and coverage (null while pending: not yet sealed, or still recording). */
  state: WindowState | null;
  coverage: Coverage | null;
  /** The window's gaps of the books. */
  gaps: number;
  messages: number;
}

export interface ReplayClient {
  message(text: string): void;
  /** The last message, once `to` is reached: the range and, per market played, what its record was worth. */
  end(quality: MarketQuality[]): string;
}

/** A market's quality as the replay's end states it, with the venue's own name for the market. */
function qualityOf(q: MarketQuality, name: Record<string, unknown>) {
  return { ...name, state: q.state, coverage: q.coverage, gaps: q.gaps, messages: q.messages };
}

/** A control frame applied and its answer rendered by the venue's framing, sent in order with the replay. */
function control(ctx: ReplayContext, frame: unknown, render: (answer: ControlAnswer) => string): void {
  ctx.session.notify(render(applyControl(ctx.session, ctx.request, frame)));
}

export interface ReplayProtocol {
  frames(messages: string[]): string[];
  open(ctx: ReplayContext): ReplayClient;
  /** Its client subscribes by frames after connecting (ReplayOptions.settleMs); without, by its URL alone. */
  subscribesByFrames: boolean;
}

/**
 * The messages of a market's walk for the tokens a client subscribed to, where that is not all of
 * them (the venue sends only subscribed tokens' messages; rendered messages are shared, whole-market,
 * so a partial subscription filters its copies).
 */
class TokenFilter implements ReplayWalk {
  constructor(
    private readonly walk: ReplayWalk,
    private readonly tokens: number,
    private readonly wanted: Set<string>,
  ) {}

  next(): number {
    return this.walk.next();
  }

  take(out: string[]): void {
    const start = out.length;
    this.walk.take(out);
    if (this.wanted.size >= this.tokens) return;
    let kept = start;
    for (let i = start; i < out.length; i++) {
      const text = onlyTokens(out[i], this.wanted);
      if (text !== null) out[kept++] = text;
    }
    out.length = kept;
  }
}

/** A Polymarket message cut to the subscribed tokens, or null when none of it concerns them. */
function onlyTokens(text: string, wanted: Set<string>): string | null {
  const m = JSON.parse(text) as Record<string, unknown>;
  if (m.event_type === 'price_change') {
    const entries = (m.price_changes as { asset_id: string }[]).filter((c) => wanted.has(c.asset_id));
    return entries.length ? JSON.stringify({ ...m, price_changes: entries }) : null;
  }
  if (typeof m.asset_id === 'string') return wanted.has(m.asset_id) ? text : null;
  // Market-wide: a gap names the subscribed tokens; a resolution names the market's, as the venue's does.
  if (Array.isArray(m.asset_ids)) return JSON.stringify({ ...m, asset_ids: (m.asset_ids as string[]).filter((a) => wanted.has(a)) });
  return text;
}

const polymarket: ReplayProtocol = {
  // One message as itself, several of one instant as a JSON array (as the venue frames its book dumps).
  frames: (messages) => [messages.length === 1 ? messages[0] : `[${messages.join(',')}]`],
  subscribesByFrames: true,
  open(ctx) {
    let custom = false;
    const { session, request } = ctx;
    /** Per market, the tokens subscribed to. */
    const wanted = new Map<string, Set<string>>();
    const named = (assets: unknown) =>
      (Array.isArray(assets) ? assets : []).flatMap((a) => {
        const m = typeof a === 'string' ? ctx.token(a) : null;
        return m ? [{ asset: a as string, m }] : [];
      });
    return {
      message(text) {
        if (text === 'PING') return ctx.send('PONG');
        let frame: { assets_ids?: unknown; operation?: unknown; custom_feature_enabled?: unknown } | null = null;
        try {
          frame = JSON.parse(text);
        } catch {
          frame = null;
        }
        // What the venue answers to anything it cannot take: text, not JSON, and the connection stays.
        if (!frame || typeof frame !== 'object') return ctx.send('INVALID OPERATION');
        if (isControl(frame))
          return control(ctx, frame, (a) =>
            JSON.stringify(
              a.kind === 'replay_error' ? { event_type: a.kind, message: a.message } : { event_type: a.kind, timestamp: String(a.at) },
            ),
          );
        if (frame.custom_feature_enabled === true) custom = true;
        if (frame.operation === 'unsubscribe') {
          for (const { asset, m } of named(frame.assets_ids)) {
            const tokens = wanted.get(m.market_id);
            tokens?.delete(asset);
            if (tokens?.size === 0) {
              wanted.delete(m.market_id);
              session.unsubscribe(m.market_id);
            }
          }
          return;
        }
        // A frame's tokens by market: a market named with both its tokens is subscribed once.
        const byMarket = new Map<string, { m: StoredMarket; assets: string[] }>();
        const refused: string[] = [];
        for (const { asset, m } of named(frame.assets_ids)) {
          const entry = byMarket.get(m.market_id) ?? { m, assets: [] };
          entry.assets.push(asset);
          byMarket.set(m.market_id, entry);
        }
        for (const { m, assets } of byMarket.values()) {
          const tokens = wanted.get(m.market_id) ?? new Set<string>();
          wanted.set(m.market_id, tokens);
          const added = assets.filter((a) => !tokens.has(a));
          if (!added.length) continue;
          // A token added to a market already playing: the market starts again from now, a book per token first.
          if (tokens.size) session.unsubscribe(m.market_id);
          for (const a of added) tokens.add(a);
          const subscribed = session.subscribe(m.market_id, async (at) => {
            const tape = await ctx.tape(m);
            const walk = new PolymarketWalk(tape, at, request.to, custom, (bytes) => ctx.charge(tape, bytes));
            return new TokenFilter(walk, m.outcomes.length, tokens);
          });
          if (subscribed === 'full') {
            wanted.delete(m.market_id);
            refused.push(...tokens);
          }
        }
        // Not the venue's (it has no cap): said once per frame, naming what was not subscribed.
        if (refused.length)
          ctx.send(
            JSON.stringify({
              event_type: 'replay_limit',
              message: `At most ${ctx.maxMarkets} markets play at once in a replay; these tokens were not subscribed`,
              asset_ids: refused,
            }),
          );
      },
      end: (quality) =>
        JSON.stringify({
          event_type: 'replay_end',
          from: String(request.from),
          to: String(request.to),
          markets: quality.map((q) =>
            qualityOf(q, { market: q.market.condition_id ?? q.market.market_id, asset_ids: q.market.outcomes.map((o) => o.token_id) }),
          ),
        }),
    };
  },
};

/**
 * The aggregate topic's markets, each subscribed as the replay reaches a few minutes before its
 * window (a walk that sends nothing itself): a week's replay holds the markets of the moment, not
 * the week's.
 */
class MarketSchedule implements ReplayWalk {
  private i = 0;

  constructor(
    private readonly markets: StoredMarket[],
    /** `at`: the time it was due, for a market due when the schedule started (it plays from there, wherever the clock got to meanwhile). */
    private readonly subscribe: (m: StoredMarket, at?: number) => void,
    /** Where the replay stood when the schedule started: markets due by then are subscribed at once (also while paused). */
    private readonly at: number,
    private readonly to: number,
  ) {}

  next(): number {
    const m = this.markets[this.i];
    const t = m ? m.start_time - PRE_OPEN_MS : Infinity;
    return t <= this.at ? -Infinity : t < this.to ? t : Infinity;
  }

  take(): void {
    const due = this.next() === -Infinity;
    this.subscribe(this.markets[this.i++], due ? this.at : undefined);
  }
}

const wallet: ReplayProtocol = {
  // The venue pushes one book per frame.
  frames: (messages) => messages,
  // Topics are in the signed URL.
  subscribesByFrames: false,
  open(ctx) {
    const { session, request } = ctx;
    const subscribe = (m: StoredMarket, topic: string, from?: number) =>
      session.subscribe(
        m.market_id,
        async (at) => {
          const tape = await ctx.tape(m);
          return new WalletWalk(tape, at, request.to, topic, (bytes) => ctx.charge(tape, bytes));
        },
        true,
        from,
      );
    const topics = ctx.query.topic.split('|');
    for (const topic of topics) {
      if (topic === WALLET_AGGREGATE_TOPIC) {
        const markets = ctx.markets().filter((m) => m.end_time > request.from && m.start_time - PRE_OPEN_MS < request.to);
        markets.sort((a, b) => a.start_time - b.start_time);
        // From where the replay stands (its start, or where a seek moved it): markets over by then are not played.
        session.subscribe(
          `${SCHEDULE}${topic}`,
          async (at) =>
            new MarketSchedule(
              markets.filter((m) => m.end_time > at),
              (m, due) => subscribe(m, topic, due),
              at,
              request.to,
            ),
          false,
        );
      } else {
        const m = ctx.market(topic.slice(WALLET_TOPIC_PREFIX.length));
        if (m) subscribe(m, topic);
      }
    }
    ctx.send(WALLET_ACK);
    const payload = (body: Record<string, unknown>) => walletFrame(topics[0], JSON.stringify(body));
    return {
      // Binance's SApi socket takes no frames of a client: only the replay's controls are answered.
      message: (text) => {
        let frame: unknown = null;
        try {
          frame = JSON.parse(text);
        } catch {
          return;
        }
        if (isControl(frame))
          control(ctx, frame, (a) =>
            payload(a.kind === 'replay_error' ? { msgType: a.kind, message: a.message } : { msgType: a.kind, timestamp: a.at }),
          );
      },
      end: (quality) =>
        payload({
          msgType: 'replay_end',
          from: request.from,
          to: request.to,
          markets: quality.map((q) => qualityOf(q, { marketId: Number(q.market.market_id) })),
        }),
    };
  },
};

/**
 * Polymarket's price socket: topics subscribed (and unsubscribed) by the venue's frames, with or
 * without `filters`; text PING answered PONG; a frame it cannot take answered with its error body.
 * The end packet and the controls' answers are frames of a topic the venue never sends, `replay`.
 */
const rtds: ReplayProtocol = {
  // The socket sends each update as its own frame.
  frames: (messages) => messages,
  subscribesByFrames: true,
  open(ctx) {
    const { session, request } = ctx;
    /** Per topic subscribed, the symbols asked for (null: all), read by its walks as they send. */
    const topics = new Map<ReferenceSource, { wanted: Set<string> | null }>();
    const invalid = () => ctx.send(JSON.stringify({ message: 'Invalid request body' }));
    const schedule = (source: ReferenceSource) => `${SCHEDULE}rtds:${source}`;
    const start = (source: ReferenceSource, wanted: { wanted: Set<string> | null }) =>
      session.subscribe(
        schedule(source),
        async (at) =>
          new HourSchedule(at, request.to, (from, to, due) =>
            session.subscribe(
              `rtds:${source}:${from}`,
              async (now) => {
                const { rows, gaps } = await ctx.observations(source, from, to);
                // A gap open where the replay starts is said at once; a later one where it begins, in its own hour.
                const said = due === undefined ? gaps.filter((g) => g.from >= from) : gaps;
                return new ObservationWalk(rows, said, RTDS_TOPICS[source], wanted, Math.max(now, from));
              },
              false,
              due,
            ),
          ),
        false,
      );
    return {
      message(text) {
        if (text === 'PING') return ctx.send('PONG');
        let frame: { action?: unknown; subscriptions?: unknown } | null;
        try {
          frame = JSON.parse(text);
        } catch {
          return invalid();
        }
        if (isControl(frame))
          return control(ctx, frame, (a) =>
            JSON.stringify(
              a.kind === 'replay_error'
                ? { topic: 'replay', type: a.kind, timestamp: Date.now(), payload: { message: a.message } }
                : { topic: 'replay', type: a.kind, timestamp: Date.now(), payload: { timestamp: a.at } },
            ),
          );
        if (!frame || (frame.action !== 'subscribe' && frame.action !== 'unsubscribe') || !Array.isArray(frame.subscriptions))
          return invalid();
        for (const sub of frame.subscriptions as { topic?: unknown; filters?: unknown }[]) {
          const source = (Object.keys(RTDS_TOPICS) as ReferenceSource[]).find((s) => RTDS_TOPICS[s] === sub?.topic);
          const symbols = source ? filteredSymbols(source, sub.filters, ctx.referenceCoins) : undefined;
          if (!source || symbols === undefined) {
            invalid();
            continue;
          }
          const had = topics.get(source);
          if (frame.action === 'unsubscribe') {
            // Its hours go with it: each was subscribed by the topic's schedule.
            if (had) for (const key of session.ownedBy(schedule(source))) session.unsubscribe(key);
            session.unsubscribe(schedule(source));
            topics.delete(source);
            continue;
          }
          // More symbols on a topic playing: its walks send them from now (the socket has no snapshot to send first).
          if (had) {
            if (had.wanted !== null) had.wanted = symbols === null ? null : new Set([...had.wanted, ...symbols]);
            continue;
          }
          const entry = { wanted: symbols };
          topics.set(source, entry);
          start(source, entry);
        }
      },
      end: () =>
        JSON.stringify({
          topic: 'replay',
          type: 'replay_end',
          timestamp: Date.now(),
          payload: { from: request.from, to: request.to, messages: session.stats.messages },
        }),
    };
  },
};

/** A replay socket's protocol: each venue's feed, and Polymarket's price socket. */
export type ReplayKind = Venue | 'polymarket-rtds';

export const PROTOCOLS: Record<ReplayKind, ReplayProtocol> = { polymarket, 'wallet-prediction': wallet, 'polymarket-rtds': rtds };
