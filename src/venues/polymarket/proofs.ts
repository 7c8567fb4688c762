// The streamed copy of each token's book and its proofs: the best bid and ask on every change
// entry (a disagreement is proof of a wrong copy), the 10-field book hash (a match proves the copy;
// a mismatch only asks for REST's word, since the venue's hashed timestamp and fields drift, and
// books in doubt become a gap unless a later field proves them), and REST books (equal levels at
// the same instant prove it, different ones disprove it). What each check vouched for is written
// with the rows (`verified_by`, `hash_check`); the recorder (recorder.ts) keeps the socket, the
// tokens and the rows, and asks these checks of every book it takes.
import type { Clock } from '../../clock.js';
import type { Market, VerifiedBy } from '../../records.js';
import type { Quote } from '../adapter.js';
import {
  type BookState,
  type ClobBookExtras,
  type ClobBookSummary,
  type ClobPriceChange,
  HASH_LAYOUTS,
  type HashLayout,
  clobBookHash,
  LocalBook,
  sameLevels,
  stateLadders,
  wholeChange,
} from './book.js';
import type { StreamGapReason, StreamSink } from '../stream.js';
import { type Awaiting, NO_HASH, type Verdict, type Verdicts, decided } from './verdicts.js';

/** Checks by strength, strongest first: a later check replaces a weaker one only. */
const STRENGTH: Record<VerifiedBy, number> = { snapshot: 0, hash: 1, rest: 2, best_bid_ask: 3, none: 4 };
/** Books kept per token for checks that arrive late (a REST answer for an instant the stream has passed). */
const HISTORY = 128;
/**
 * Books a doubt keeps for a later check: a token waiting for REST's fields doubts every book until
 * they come (731 books in 118 simulated s at 240x, beside stress-ng), and one let go unchecked
 * keeps the doubt open, so the span becomes a gap though nothing was lost. About 1 KB each
 * (their ladders' hash texts, a side shared while unchanged): 4 MB a token at most.
 */
const DOUBT_BOOKS = 4096;
/** How far the venue's hashed timestamp may be from the message's (public recorders see a few ms). */
const HASH_SKEW_MS = 5;
/**
 * The venue's formula is taken as changed only after this many stream hashes in a row that no
 * layout or skew reproduced AND REST_GIVE_WAY REST books in a row whose own hash did not reproduce
 * (then only one candidate is tried, and all one time in PROBE_EVERY). Stream misses alone are no
 * evidence: beside stress-ng, a restarted recorder's copies missed 200 in a row (changes dropped,
 * fields late), stopped doubting them, and a book wrong below its best levels stood outside every
 * gap. A REST book's hash covers only the venue's own text, so its misses are the formula's.
 */
const HASH_GIVE_WAY = 200;
const REST_GIVE_WAY = 3;
const PROBE_EVERY = 50;
/** Whether a summary's hash is the formula's over it, in either layout, at its timestamp or within the skew. */
function summaryHashReproduces(s: ClobBookSummary, hash: string): boolean {
  const ts = Number(s.timestamp);
  for (let d = 0; d <= HASH_SKEW_MS; d++)
    for (const at of d === 0 ? [s.timestamp] : [String(ts - d), String(ts + d)])
      for (const layout of HASH_LAYOUTS) if (clobBookHash({ ...s, timestamp: at }, layout) === hash) return true;
  return false;
}

/** Whether the venue's best level (absent, or `empty` for an empty side) is the copy's `mine`. */
function venueBest(given: string | undefined, empty: number, mine: number | null): boolean {
  return given === undefined || given === '' || Number(given) === (mine ?? empty) || (mine === null && Number(given) === empty);
}

/** A book whose hash did not reproduce, with the hashed fields known when it was checked. */
export interface Doubted extends Awaiting {
  ts: number;
  timestamp: string;
  hash: string;
  state: BookState;
  fields: ClobBookExtras;
}

/** A streamed token: the copy of its book, what proves it, and the recorder's bookkeeping of it. */
export interface Token {
  market: Market;
  index: number;
  label: string;
  book: LocalBook;
  synced: boolean;
  /** Venue time of the newest book proved equal to the venue's (snapshot, hash match, REST agreement). */
  verifiedTs: number;
  /** What vouches for the copy's current book: written with each row of it (`verified_by`). */
  check: VerifiedBy;
  /** What the venue's hash said of the copy's current book: written with each row of it (`hash_check`). */
  verdict: Verdict;
  /** Books whose hash did not reproduce, within EXPLAIN_MS: a hashed field arriving may still explain them. */
  awaiting: Doubted[];
  /** Whether the stream ever sent this token's book. */
  streamed: boolean;
  /** Venue time of the newest event the stream sent of this token: its market ends by its own events, not another's. */
  heardTs: number;
  /** Clock time capture asked for the token: a gap for a snapshot that never came starts there. */
  trackedAt: number;
  /**
   * A REST book newer than the copy (of instant `ts`), settled when the stream passes that instant.
   * One the copy does not hold yet (`agrees` false) is a change the stream owes: it must come within
   * the stall bound, counted from the first such book pending (`at` its receive time, `first` its
   * instant). One the copy holds (`agrees`) proves it only then: a change of an earlier instant may
   * still come.
   */
  restAhead: { summary: ClobBookSummary; ts: number; at: number; first: number; agrees: boolean } | null;
  /** The copy's recent books, oldest first, for checks of instants the stream has passed. */
  history: BookState[];
  /**
   * Books whose hash no candidate reproduced since the last proof (`from`): each is proved later if
   * a trade or field it hashed arrives; any left when the next hash proves the copy were never
   * the venue's for certain, and the span becomes a gap. Past DOUBT_BOOKS books the oldest are let
   * go unchecked (`forgotten`): no later field can prove them, so they stay in doubt.
   */
  doubt: { from: number; books: Doubted[]; forgotten: number } | null;
  /** Venue time a REST check was last asked for after a hash mismatch (one per stall bound). */
  checkAskedTs: number;
  /** The token's newest recorded exchange time: an older snapshot (a stale resubscribe) adds no row. */
  recordedTs: number;
  /** The newest trade price (`last_trade_price`), the polled chance, and the quote last written. */
  lastTrade: number | null;
  chance: number | null;
  price: number | null;
  written: Quote | null;
  /** Changes that arrived while waiting for a snapshot, per message, applied after it when newer. */
  pending: { ts: number; timestamp: string; changes: ClobPriceChange[] }[];
  /** The venue announced the market's resolution while the token was tracked: not kept subscribed for it once ended. */
  resolved: boolean;
}

/** A token capture asked for at `now`, unsynced until its first book; rows at or before `recordedTs` are already spooled. */
export function newToken(
  market: Market,
  outcome: { index: number; label: string; token_id: string },
  now: number,
  recordedTs: number,
): Token {
  return {
    market,
    index: outcome.index,
    label: outcome.label,
    book: new LocalBook(market.condition_id ?? '', outcome.token_id),
    synced: false,
    verifiedTs: -Infinity,
    check: 'none',
    verdict: NO_HASH,
    awaiting: [],
    recordedTs,
    trackedAt: now,
    restAhead: null,
    history: [],
    doubt: null,
    checkAskedTs: -Infinity,
    streamed: false,
    heardTs: -Infinity,
    lastTrade: null,
    chance: null,
    price: null,
    written: null,
    pending: [],
    resolved: false,
  };
}

export interface StreamStats {
  snapshots: number;
  changes: number;
  rows: number;
  /** Changes whose book the venue's hash proved at once. */
  verified: number;
  /** Changes proved later: by a hash once a trade or field it covered arrived. */
  lateProofs: number;
  /** Books whose hash did not reproduce while neither the stream's hashes nor REST's own had for long (the formula taken as changed): not held in doubt. */
  undoubted: number;
  /** Changes of a token that did not know every hashed field yet (REST's minimum size and neg-risk): in doubt until they come. */
  fieldless: number;
  /** Changes whose hash did not reproduce but whose best bid and ask agreed with the venue's. */
  bestChecked: number;
  /** Changes with neither a reproduced hash nor the venue's best levels. */
  unverified: number;
  /** REST books that proved the copy. */
  restProofs: number;
  /** Copies disproved: best levels or a REST book at the same instant that differ. */
  mismatches: number;
  /** Change entries missing a field applying them needs. */
  incomplete: number;
  resyncs: number;
  /** REST fetches made at once for desynced tokens. */
  refetches: number;
  /** Tokens whose snapshot did not come within the stall bound of their subscription (taken from REST or a later book, with a gap). */
  snapshotTimeouts: number;
  /** Rows whose exchange time did not advance past the market's previous row. */
  nudged: number;
  /** `last_trade_price` messages taken as trade rows. */
  trades: number;
  /** `tick_size_change` messages taken (one per token). */
  tickChanges: number;
  /** Markets whose `market_resolved` was taken. */
  resolutions: number;
  /** `new_market` announcements seen: discovery finds the markets (with their windows, which these lack); counted only. */
  newMarkets: number;
  /** Events of a market's window that arrived after the market was let go: each a stream_late gap. */
  late: number;
}

export const NO_STREAM_STATS: Readonly<StreamStats> = {
  snapshots: 0,
  changes: 0,
  rows: 0,
  verified: 0,
  lateProofs: 0,
  undoubted: 0,
  fieldless: 0,
  bestChecked: 0,
  unverified: 0,
  restProofs: 0,
  mismatches: 0,
  incomplete: 0,
  resyncs: 0,
  refetches: 0,
  snapshotTimeouts: 0,
  nudged: 0,
  trades: 0,
  tickChanges: 0,
  resolutions: 0,
  newMarkets: 0,
  late: 0,
};

/** What the proofs ask of the recorder. */
export interface ProofHost {
  readonly stats: StreamStats;
  readonly sink: StreamSink;
  readonly verdicts: Verdicts<Doubted, Token>;
  /** Fetches the token's REST book at once (a resync, or a check). */
  requestBook(assetId: string): void;
  /** Whether every token of the market is synced on a healthy connection. */
  live(m: Market): boolean;
  /**
   * The record's time of the market's next row of venue time `ts`: a row is stamped past the
   * market's previous one, so a token whose changes trail the other's (or a trade) is recorded
   * after its venue time, and a gap proved over its books ends there, not at the venue's time.
   */
  rowTime(m: Market, ts: number): number;
  /** Takes a full book (here: a REST book that disproved the copy) as the token's copy. */
  snapshot(t: Token, s: ClobBookSummary, ts: number, recvTs: number, source: 'stream' | 'rest'): void;
}

export class CopyProofs {
  /** The hash layout that matched last, tried first. */
  private layout: HashLayout = HASH_LAYOUTS[0];
  /** Hashes in a row that no candidate reproduced. */
  private hashMisses = 0;
  /** REST books in a row whose own hash no candidate reproduced. */
  private restHashMisses = 0;
  private readonly stats: StreamStats;
  private readonly sink: StreamSink;
  private readonly verdicts: Verdicts<Doubted, Token>;

  constructor(
    private readonly host: ProofHost,
    private readonly clock: Clock,
    private readonly stallMs: number,
  ) {
    this.stats = host.stats;
    this.sink = host.sink;
    this.verdicts = host.verdicts;
  }

  private requestBook(assetId: string): void {
    this.host.requestBook(assetId);
  }

  private live(m: Market): boolean {
    return this.host.live(m);
  }

  private snapshot(t: Token, s: ClobBookSummary, ts: number, recvTs: number, source: 'stream' | 'rest'): void {
    this.host.snapshot(t, s, ts, recvTs, source);
  }

  /**
   * Applies one message's changes to a synced token and checks them against what the venue said
   * of the book after them. A repeated message changes nothing and records nothing; an entry
   * missing a field, or best levels that differ, desync the token (no row from it).
   */
  applyChecked(t: Token, changes: ClobPriceChange[], timestamp: string, ts: number): 'vouched' | 'unchanged' | 'desynced' {
    for (const c of changes) {
      if (wholeChange(c)) continue;
      this.stats.incomplete++;
      this.desync(t, 'stream_resync', `a price_change entry at ${timestamp} lacks a usable price, side or size`);
      return 'desynced';
    }
    let changed = false;
    // Best levels are the venue's after each entry, or after the message's last entry for the token: either is accepted.
    let laterBest: ClobPriceChange[] | null = null;
    let best = false;
    for (const c of changes as (ClobPriceChange & { size: string })[]) {
      changed = t.book.apply(c, ts) || changed;
      if (c.best_bid === undefined && c.best_ask === undefined) continue;
      best = true;
      if (!this.bestAgrees(t, c)) (laterBest ??= []).push(c);
    }
    if (laterBest?.some((c) => !this.bestAgrees(t, c))) {
      this.stats.mismatches++;
      const { bid, ask } = t.book.best();
      this.desync(t, 'stream_resync', `the venue's best bid/ask at ${timestamp} differ from the copy's (${bid}/${ask})`);
      return 'desynced';
    }
    // The venue signs the token's book after the message's last change for it.
    let hash: string | undefined;
    for (let i = changes.length - 1; i >= 0 && hash === undefined; i--) hash = changes[i].hash || undefined;
    if (!changed) {
      if (ts <= t.book.ts) return 'unchanged';
      return this.missedBefore(t, timestamp, ts, hash);
    }
    t.book.sent(hash ?? null);
    this.remember(t);
    // A new book: what vouched for the last one says nothing of it.
    t.check = 'none';
    // Settled before this instant's proof: an earlier instant REST disproved is a gap up to this one
    // when the hash proves it, and a resync when nothing does.
    const disproof = this.settleRestAhead(t);
    const how = hash !== undefined ? this.hashMatches(t, timestamp, ts, hash) : null;
    if (how) {
      this.stats.verified++;
      t.verdict = decided(how);
      this.vouch(t, 'hash');
      if (disproof) this.lostBefore(t, ts, disproof);
      else this.proveByHash(t, ts);
    } else if (disproof) {
      this.desync(t, 'stream_resync', disproof);
      return 'desynced';
    } else {
      if (hash !== undefined) {
        // While the venue's hashes reproduce at all, a book whose hash does not is in doubt until
        // proved; so is every book of a token still missing hashed fields (REST has not answered
        // yet), re-tried when they come.
        if (!t.book.knowsAllFields()) this.stats.fieldless++;
        if (!t.book.knowsAllFields() || !this.formulaChanged()) {
          const book = this.awaitVerdict(t, ts, timestamp, hash);
          if (!t.doubt) t.doubt = { from: t.verifiedTs, books: [book], forgotten: 0 };
          else if (t.doubt.books.push(book) > DOUBT_BOOKS) {
            t.doubt.books.shift();
            t.doubt.forgotten++;
          }
        } else {
          // The formula taken as changed: said so at once, never held in doubt or for an explanation.
          this.stats.undoubted++;
          t.verdict = decided('mismatch');
        }
        // A mismatch asks for REST's word at once (a copy gone wrong is then found within a round trip), not per message.
        if (ts - t.checkAskedTs > this.stallMs) {
          t.checkAskedTs = ts;
          this.requestBook(t.book.assetId);
        }
      }
      if (hash === undefined) t.verdict = NO_HASH;
      if (best) this.stats.bestChecked++;
      else this.stats.unverified++;
      if (best) this.vouch(t, 'best_bid_ask');
    }
    return 'vouched';
  }

  /** Whether an entry's best bid and ask (where given) are the copy's: "0" bid and "1" ask stand for an empty side. */
  private bestAgrees(t: Token, c: ClobPriceChange): boolean {
    const { bid, ask } = t.book.best();
    return venueBest(c.best_bid, 0, bid) && venueBest(c.best_ask, 1, ask);
  }

  /**
   * A newer message that changes nothing in the copy (it removes a level the copy lacks, or sets a
   * size the copy already holds): the change that made it necessary never arrived. When the venue's
   * hash still vouches for the copy, the span since the last proof is a gap and this instant a
   * row; without a hash to say so, the copy is resynced.
   */
  private missedBefore(t: Token, timestamp: string, ts: number, hash: string | undefined): 'vouched' | 'desynced' {
    const detail = `a change at ${timestamp} left the streamed copy as it was: a change before it never arrived`;
    t.book.ts = ts;
    const how = hash === undefined ? null : this.hashMatches(t, timestamp, ts, hash);
    if (!how) {
      this.desync(t, 'stream_resync', detail);
      return 'desynced';
    }
    t.verdict = decided(how);
    this.stats.verified++;
    this.vouch(t, 'hash');
    this.remember(t);
    this.lostBefore(t, ts, detail);
    return 'vouched';
  }

  /** The hash proves the copy at `ts` although something was lost before it: a gap since the last proof, up to this instant. */
  private lostBefore(t: Token, ts: number, detail: string): void {
    this.sink.lost(t.market, 'stream_resync', this.lastProof(t), detail);
    t.doubt = null;
    this.prove(t, ts);
    if (this.live(t.market)) this.sink.recovered(t.market, this.host.rowTime(t.market, ts));
  }

  /** The token's copy is no longer the venue's: stop recording it until a full book arrives. */
  desync(t: Token, reason: StreamGapReason, detail: string): void {
    if (!t.synced) return;
    t.synced = false;
    t.restAhead = null;
    t.pending = [];
    t.history = [];
    this.verdicts.abandon(t);
    const from = this.lastProof(t);
    t.doubt = null;
    this.sink.lost(t.market, reason, from, detail);
    this.requestBook(t.book.assetId);
  }

  /** A hashed field changed (a trade, a tick, REST's fields): books in doubt may reproduce now. */
  recheck(t: Token): void {
    this.verdicts.explain(t, (u) => this.reproduces(t, u));
    const d = t.doubt;
    // The venue hashes every field: while one is unknown no book reproduces, and a trade (a field
    // change) would re-hash thousands of them each time.
    if (!d || !t.synced || !t.book.knowsAllFields()) return;
    let proved = -Infinity;
    d.books = d.books.filter((u) => {
      const reproduced = (u.verdict.check !== undefined && u.verdict.check !== u.verdict.unexplained) || this.reproduces(t, u);
      if (!reproduced) return true;
      // The formula reproduces, if late.
      this.hashMisses = 0;
      this.stats.lateProofs++;
      proved = Math.max(proved, u.ts);
      if (u.ts >= t.book.ts) this.vouch(t, 'hash');
      return false;
    });
    // Every book kept is the venue's, but the ones let go were never checked (seen beside
    // stress-ng: a token without REST's fields for 27 s, a change lost in its first seconds).
    if (!d.books.length && d.forgotten)
      return this.lostBefore(t, proved, `${d.forgotten} book(s) whose hash did not reproduce, too many to keep for a later check`);
    this.prove(t, proved);
    if (!d.books.length) t.doubt = null;
  }

  /** Whether a book's hash reproduces with the hashed fields as they are now (the trade or tick that came since). */
  private reproduces(t: Token, u: Doubted): boolean {
    const now = t.book.fields();
    // The fields of its time, completed by those learnt since (REST's minimum size and neg-risk
    // may come after the first changes), or the fields as they are now.
    const then = {
      ...now,
      tick_size: u.fields.tick_size ?? now.tick_size,
      last_trade_price: u.fields.last_trade_price ?? now.last_trade_price,
    };
    return (
      HASH_LAYOUTS.some((layout) => t.book.hashWith(u.timestamp, layout, u.state, then) === u.hash) ||
      !!this.hashMatches(t, u.timestamp, u.ts, u.hash, u.state, true)
    );
  }

  /** A book whose hash did not reproduce: its verdict waits for a field that explains it. */
  private awaitVerdict(t: Token, ts: number, timestamp: string, hash: string): Doubted {
    const verdict: Verdict = { unexplained: t.book.knowsAllFields() ? 'mismatch' : 'unverifiable' };
    const u = { ts, timestamp, hash, state: t.history[t.history.length - 1], fields: t.book.fields(), verdict, at: this.clock.now() };
    t.verdict = verdict;
    this.verdicts.await(t, u);
    return u;
  }

  /** What the venue's hash says of a full book just taken (the channel's hashes a trade it sends after it, as changes do). */
  snapshotVerdict(t: Token, s: ClobBookSummary & { hash?: string }, ts: number): void {
    const hash = typeof s.hash === 'string' && s.hash ? s.hash : undefined;
    if (hash === undefined) t.verdict = NO_HASH;
    else {
      const how = this.hashMatches(t, s.timestamp, ts, hash, undefined, true);
      if (how) t.verdict = decided(how);
      else this.awaitVerdict(t, ts, s.timestamp, hash);
    }
  }

  /**
   * The venue's hash proved the copy at `ts`. Books in doubt before it that no later field
   * reproduced may have held a change lost and since overwritten: the span is a gap.
   */
  proveByHash(t: Token, ts: number): void {
    const d = t.doubt;
    if (d) this.lostBefore(t, ts, `${d.books.length + d.forgotten} book(s) whose hash did not reproduce before ${ts}`);
    else this.prove(t, ts);
  }

  /**
   * Whether the venue's hash reproduces: the last layout that matched at the message's time first,
   * then both layouts within the hashed timestamp's skew. While none has matched for long (the
   * venue changed its formula), only the first is tried, and all now and then.
   */
  private hashMatches(
    t: Token,
    timestamp: string,
    ts: number,
    hash: string,
    state?: BookState,
    probe = false,
  ): 'match' | 'explained' | null {
    if (t.book.hash(timestamp, this.layout, state) === hash) {
      this.hashMisses = 0;
      return 'match';
    }
    // Without every hashed field no search can reproduce the venue's hash, and its misses say nothing of the formula.
    if (!t.book.knowsAllFields()) return null;
    if (!probe && this.formulaChanged() && this.hashMisses++ % PROBE_EVERY !== 0) return null;
    for (const layout of this.layout === HASH_LAYOUTS[0] ? HASH_LAYOUTS : [...HASH_LAYOUTS].reverse()) {
      for (let d = 0; d <= HASH_SKEW_MS; d++) {
        for (const at of d === 0 ? [ts] : [ts - d, ts + d]) {
          if (d === 0 && layout === this.layout) continue;
          if (t.book.hash(String(at), layout, state) !== hash) continue;
          this.layout = layout;
          this.hashMisses = 0;
          return 'match';
        }
      }
    }
    // The fields as they were before their latest changes (a source ahead of the stream moved them).
    for (let e = 1; e <= t.book.earlierFields; e++) {
      if (t.book.hash(timestamp, this.layout, state, e) !== hash) continue;
      this.hashMisses = 0;
      return 'explained';
    }
    if (!probe) this.hashMisses++;
    return null;
  }

  /** Whether the venue's hash formula is taken as changed: the stream's hashes and REST's own both stopped reproducing. */
  private formulaChanged(): boolean {
    return this.hashMisses >= HASH_GIVE_WAY && this.restHashMisses >= REST_GIVE_WAY;
  }

  /**
   * A REST book's own hash, over the venue's text of it: one that reproduces shows the formula is
   * right, so the stream's misses are the copies' (or their fields'), and every such book is doubted.
   */
  noteRestHash(s: ClobBookSummary & { hash?: string }): void {
    if (typeof s.hash !== 'string' || !s.hash) return;
    if (summaryHashReproduces(s, s.hash)) {
      this.restHashMisses = 0;
      this.hashMisses = 0;
    } else this.restHashMisses++;
  }

  /** Books still in doubt when no later proof can come: the span since the last proof is a gap. */
  settleDoubt(t: Token, why: string): void {
    const d = t.doubt;
    if (!d || !t.synced) return;
    t.doubt = null;
    // Without every hashed field (REST never answered) a hash says nothing either way: the books
    // stand on their best levels, as any book the hash cannot check.
    if (!t.book.knowsAllFields()) return;
    this.sink.lost(
      t.market,
      'stream_resync',
      d.from,
      `${d.books.length + d.forgotten} book(s) whose hash did not reproduce, unproved when ${why}`,
    );
  }

  /**
   * A token let go while REST showed a change its stream had not delivered (the bound that change
   * had to arrive in outlasted the market): it was lost, and a stream that far behind vouches for
   * nothing after its copy's last proof, up to the market's end (found with a freeze across an end).
   */
  loseUndelivered(t: Token): void {
    const ahead = t.restAhead;
    // Only a change REST showed of an instant before the end: REST may stamp its answer after the
    // book's last change, so a book of a later instant may differ by a change after the window.
    if (!ahead || ahead.agrees || !t.synced || ahead.first >= t.market.end_time) return;
    t.restAhead = null;
    this.stats.mismatches++;
    this.sink.lost(
      t.market,
      'stream_resync',
      this.lastProof(t),
      `the stream never delivered the change REST showed at ${ahead.ts} before its market ended; streamed copy at ${t.book.ts}`,
    );
  }

  /** A REST book of a synced token: proof, disproof, or a change the stream must still deliver. */
  checkRest(t: Token, s: ClobBookSummary, ts: number, recvTs: number): void {
    if (ts <= t.book.ts) {
      const then = this.stateAt(t, ts);
      // Older than the books kept: nothing to compare with.
      if (!then) return;
      if (sameLevels(s, stateLadders(then))) return this.proveByRest(t, ts, ts);
      this.stats.mismatches++;
      this.desync(t, 'stream_resync', `REST book at ${ts} differs from the streamed copy of that instant`);
      this.snapshot(t, s, ts, recvTs, 'rest');
      return;
    }
    // Newer than the copy, which proves nothing yet even with equal levels: the venue's book at `ts`
    // equal to the copy's of an earlier instant says the copy is right at `ts` only if the stream
    // has no change between the two still to deliver (on a starved machine it trails REST by
    // seconds). Seen beside stress-ng: the copy had lost a change, the next one it got made it
    // REST's book, and the venue undid the lost one before REST's instant; proved at once, the copy
    // stood as verified over a book the venue never had. Settled when the stream passes `ts`.
    if (sameLevels(s, t.book.ladders())) {
      // Kept behind a book the stream still owes (its bound runs on), or an earlier agreement (it settles sooner).
      if (!t.restAhead) t.restAhead = { summary: s, ts, at: recvTs, first: ts, agrees: true };
      return;
    }
    if (!t.restAhead || t.restAhead.agrees || t.restAhead.ts < ts) {
      // The bound runs from the first REST book the stream has not passed. A stream that got past
      // it since is behind, not silent (on a starved machine it may trail every poll by a little
      // for longer than the bound): a later REST book starts the bound again. A change it lost on
      // the way still shows, when it passes that book's instant (settleRestAhead) or in a hash.
      const held = t.restAhead !== null && !t.restAhead.agrees && t.book.ts <= t.restAhead.first ? t.restAhead : null;
      t.restAhead = { summary: s, ts, at: held?.at ?? recvTs, first: held?.first ?? ts, agrees: false };
    }
    if (recvTs - t.restAhead.at > this.stallMs) {
      this.desync(t, 'stream_resync', `the stream never delivered the change REST showed at ${ts}; streamed copy at ${t.book.ts}`);
      this.snapshot(t, s, ts, recvTs, 'rest');
    }
  }

  /**
   * A REST book (of the venue's instant `restTs`) held the copy's levels at `at`: the copy is
   * proved there. Its rows say so only when REST's instant is the current book's own: a later
   * REST book equal to the copy proves the levels then, not that none changed and changed back since.
   */
  private proveByRest(t: Token, at: number, restTs: number): void {
    this.stats.restProofs++;
    t.restAhead = null;
    this.prove(t, at);
    if (restTs === t.book.ts) this.vouch(t, 'rest');
  }

  /**
   * A new book of the copy against a pending REST book. Up to its instant the stream has not passed
   * it (more messages of that millisecond may come), and whether the copy holds its levels says
   * only whether the stream still owes a change: holding them meets the stall bound, leaving them
   * again owes one anew (from now). Past it, the copy then must have held its levels. What
   * disproved it, if anything (the caller decides whether the copy is proved again since).
   */
  private settleRestAhead(t: Token): string | null {
    const ahead = t.restAhead;
    if (!ahead) return null;
    if (t.book.ts <= ahead.ts) {
      const agrees = sameLevels(ahead.summary, t.book.ladders());
      if (ahead.agrees && !agrees) ahead.at = this.clock.now();
      ahead.agrees = agrees;
      return null;
    }
    const then = this.stateAt(t, ahead.ts);
    t.restAhead = null;
    // Passed so far that the book of that instant is no longer kept: nothing to compare with.
    if (!then) return null;
    if (sameLevels(ahead.summary, stateLadders(then))) {
      this.proveByRest(t, ahead.ts, ahead.ts);
      return null;
    }
    this.stats.mismatches++;
    return `the streamed copy never held the book REST showed at ${ahead.ts}`;
  }

  /** The copy's book in force at `ts`, or null when it is older than the books kept. */
  stateAt(t: Token, ts: number): BookState | null {
    const h = t.history;
    for (let i = h.length - 1; i >= 0; i--) if (h[i].ts <= ts) return h[i];
    return null;
  }

  remember(t: Token): void {
    // Trimmed in halves, not shifted per change: a shift moves every kept book, on the hottest path.
    if (t.history.push(t.book.state()) > 2 * HISTORY) t.history.splice(0, HISTORY);
  }

  prove(t: Token, ts: number): void {
    if (ts > t.verifiedTs) t.verifiedTs = ts;
  }

  /**
   * A check vouched for the copy's current book: rows of it from now on carry the strongest check
   * it passed. Rows already written keep the check of their writing (a proof that comes later
   * never rewrites the spool), so the lake's labels are a lower bound.
   */
  vouch(t: Token, by: VerifiedBy): void {
    if (STRENGTH[by] < STRENGTH[t.check]) t.check = by;
  }

  /** Where a gap of the token starts: its last proof, or before the first book in doubt since. */
  lastProof(t: Token): number {
    return t.doubt ? Math.min(t.doubt.from, t.verifiedTs) : t.verifiedTs;
  }
}
