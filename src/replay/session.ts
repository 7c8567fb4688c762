// One replay: the walks of the markets a client subscribed to, merged in time order and sent at
// the chosen pace, no faster than the client takes them. Protocol-free: the venue's shapes are in
// the walks (polymarket.ts, wallet.ts) and its framing in `frame`.
import type { Clock } from '../clock.js';

/** A market's messages in time order (see PolymarketWalk). */
export interface ReplayWalk {
  /** The time of the next message: -Infinity for messages due at once, Infinity when none is left. */
  next(): number;
  /** Appends the next instant's messages to `out`. */
  take(out: string[]): void;
}

export interface ReplaySink {
  /** Writes one frame; `done` once it left this process's buffers (or failed). */
  send(frame: string, done: (err?: Error) => void): void;
  /**
   * Holds frames back until `uncork`, so a batch leaves in one write: a venue that sends a message
   * per frame (the wallet's) otherwise costs a system call per message, about 100,000 a second.
   */
  cork?(): void;
  uncork?(): void;
}

export interface ReplayOptions {
  from: number;
  to: number;
  /** A multiple of real time; Infinity: as fast as the client takes it. */
  speed: number;
  /** The clock time at which `from` plays (null: when the first subscription arrives); connections sharing it share one timeline. */
  playAt: number | null;
  clock: Clock;
  /** Frames of messages (the venue's framing: one, several as an array, or each its own). */
  frames: (messages: string[]) => string[];
  /** Messages per frame at most. */
  maxPerFrame: number;
  /** Markets playing at once at most (REPLAY_MAX_MARKETS). */
  maxMarkets: number;
  /**
   * As fast as possible, how long (real ms) the replay waits after a client's subscription before
   * moving on from its start: a client subscribing by frames sends them in a burst. 0 where the URL
   * says it all (the wallet's topics). Default 20.
   */
  settleMs?: number;
}

/**
 * Frames written but not yet handed to the socket before the replay waits: what bounds a connection's
 * memory. 8 frames, or more while they hold under 64 KiB: a venue that frames each message alone (the
 * wallet's) then writes a batch of messages at once instead of waiting on the socket every eight.
 */
const MAX_UNSENT_FRAMES = 8;
const MAX_UNSENT_BYTES = 64 * 1024;
/** How often a paced replay looks again when nothing is due (real ms): a subscription or the clock may have moved. */
const IDLE_MS = 10;
/** As fast as possible, a replay waits this long (real ms) after a client's subscription before moving on from its start. */
const SETTLE_MS = 20;

/** The key prefix of walks that subscribe markets themselves (a topic's schedule), not markets. */
export const SCHEDULE = 'schedule:';

/** A market whose walk is over: still subscribed (a repeated subscription does not start it again), holding nothing. */
const DONE: ReplayWalk = { next: () => Infinity, take: () => undefined };

interface Entry {
  t: number;
  key: string;
  walk: ReplayWalk;
}

interface Subscription {
  load: (at: number) => Promise<ReplayWalk | null>;
  market: boolean;
  /** The schedule that subscribed it, if one did: a seek lets the schedule subscribe again from the new time. */
  owner: string | null;
}

export class ReplaySession {
  private readonly heap: Entry[] = [];
  private readonly walks = new Map<string, ReplayWalk>();
  private readonly loads = new Set<Promise<unknown>>();
  private playAt: number | null;
  /** The historical time the replay has reached. */
  private reached: number;
  private unsent = 0;
  private unsentBytes = 0;
  private drained: (() => void) | null = null;
  /** Whether frames are being held back for one write (ReplaySink.cork). */
  private corked = false;
  private wake: (() => void) | null = null;
  private failed: Error | null = null;
  private stopped = false;
  private subscribedAt = -Infinity;
  private readonly subscriptions = new Map<string, Subscription>();
  /** The schedule whose walk is taking now: what it subscribes is its own. */
  private taking: string | null = null;
  /** The historical time held while paused; null while playing. */
  private paused: number | null = null;
  /** Answers to the client's controls, sent in order with the replay's frames, before any of the new position's. */
  private readonly notices: string[] = [];
  /** Messages sent per market, over the whole replay (every market ever subscribed, also those let go). */
  readonly sent = new Map<string, number>();
  private readonly played = new Set<string>();
  readonly stats = {
    messages: 0,
    frames: 0,
    markets: 0,
    unsent: 0,
    firstMessageMs: null as number | null,
    loading: 0,
    /** The historical time up to which every message due has been handed to the socket (a starved replay falls behind its clock). */
    sentTo: -Infinity,
  };
  private readonly began = performance.now();

  constructor(
    private readonly options: ReplayOptions,
    private readonly sink: ReplaySink,
  ) {
    this.playAt = options.playAt;
    this.reached = options.from;
  }

  /** The historical time playing now. */
  position(): number {
    const { from, to, speed, clock } = this.options;
    if (this.paused !== null) return this.paused;
    if (speed === Infinity || this.playAt === null) return Math.min(this.reached, to);
    return Math.min(to, Math.max(from, from + (clock.now() - this.playAt) * speed));
  }

  /**
   * Adds a market from the replay's present on (or from `at`): `load` gets the historical time it starts at and
   * gives its walk (null: nothing recorded). The replay waits for loads in flight, so a market's
   * first messages are never skipped while its tape is read. `market`: false for a walk that
   * subscribes markets itself (a topic's schedule), not counted as one.
   */
  subscribe(key: string, load: (at: number) => Promise<ReplayWalk | null>, market = true, at?: number): 'subscribed' | 'full' {
    if (this.walks.has(key) || this.stopped) return 'subscribed';
    // Each market playing holds its tape: a replay holds at most `maxMarkets` at once (those played out hold nothing).
    if (market && this.playing() >= this.options.maxMarkets) return 'full';
    this.playAt ??= this.options.clock.now();
    const subscription = { load, market, owner: this.taking };
    this.subscriptions.set(key, subscription);
    if (market && !this.sent.has(key)) this.sent.set(key, 0);
    this.start(key, subscription, at);
    return 'subscribed';
  }

  /** Loads a subscription's walk from `at`: the replay's present unless a schedule says when it was due. */
  private start(key: string, { load, market }: Subscription, at = this.position()): void {
    // A client's (its frames come in a burst); not a schedule's, which subscribes each market as the replay reaches it.
    if (this.taking === null) this.subscribedAt = performance.now();
    const placeholder: ReplayWalk = { next: () => Infinity, take: () => undefined };
    const loading = load(at).then(
      (walk) => {
        if (!walk || this.stopped || this.walks.get(key) !== placeholder) return;
        this.walks.set(key, walk);
        if (market && !this.played.has(key)) {
          this.played.add(key);
          this.stats.markets++;
        }
        const t = walk.next();
        if (t !== Infinity) this.push({ t, key, walk });
      },
      (err: Error) => {
        this.failed ??= err;
      },
    );
    this.walks.set(key, placeholder);
    this.loads.add(loading);
    this.stats.loading++;
    void loading.finally(() => {
      this.loads.delete(loading);
      this.stats.loading--;
      this.poke();
    });
    this.poke();
  }

  private playing(): number {
    let n = 0;
    for (const [key, walk] of this.walks) if (walk !== DONE && !key.startsWith(SCHEDULE)) n++;
    return n;
  }

  unsubscribe(key: string): void {
    this.walks.delete(key);
    this.subscriptions.delete(key);
  }

  /** The subscriptions a schedule made (its hours, its markets). */
  ownedBy(schedule: string): string[] {
    return [...this.subscriptions].filter(([, s]) => s.owner === schedule).map(([key]) => key);
  }

  /** The markets this replay has played (or tried to): every one subscribed at any time. */
  markets(): string[] {
    return [...this.sent.keys()];
  }

  /** Sends `text` in order with the replay's frames: after what was already on its way, before anything taken next. */
  notify(text: string): void {
    this.notices.push(text);
    this.poke();
  }

  /** Holds the replay at its present; a paced replay's clock stops with it (it leaves a shared `play_at` timeline). */
  pause(): number {
    this.paused ??= this.position();
    return this.paused;
  }

  resume(): number {
    const at = this.position();
    if (this.paused === null) return at;
    this.paused = null;
    this.moveClockTo(at);
    this.poke();
    return at;
  }

  /**
   * Moves the replay to `at` (within its range): every market subscribed starts again there, a
   * book per token first, as at a subscription; a schedule subscribes again what is due by then.
   */
  seek(at: number): number {
    this.heap.length = 0;
    this.reached = at;
    if (this.paused !== null) this.paused = at;
    else this.moveClockTo(at);
    for (const [key, s] of this.subscriptions) if (s.owner !== null) this.subscriptions.delete(key);
    this.walks.clear();
    for (const [key, s] of this.subscriptions) this.start(key, s);
    this.poke();
    return at;
  }

  /** A paced replay's clock set so that `at` plays now. */
  private moveClockTo(at: number): void {
    const { from, speed, clock } = this.options;
    if (speed !== Infinity && this.playAt !== null) this.playAt = clock.now() - (at - from) / speed;
  }

  stop(): void {
    this.stopped = true;
    this.poke();
    this.drained?.();
  }

  /**
   * Runs until `to` (paced) or until every subscribed market is over (as fast as possible), the
   * client leaves (`stop`) or a tape fails to load (thrown). Resolves with why it ended.
   */
  async run(): Promise<'end' | 'stopped'> {
    const { to, speed, frames, maxPerFrame, settleMs: settle = SETTLE_MS } = this.options;
    const out: string[] = [];
    while (!this.stopped) {
      if (this.loads.size) await Promise.all([...this.loads]);
      if (this.failed) throw this.failed;
      if (this.stopped) break;
      if (this.notices.length) {
        for (const text of this.notices.splice(0)) if (this.send(text)) await this.drain();
        this.uncork();
        continue;
      }
      // Paused, only what is due at once goes: the books of a market subscribed or sought meanwhile.
      const paused = this.paused !== null;
      // As fast as possible, a frame fills across instants once the subscriptions have settled.
      const now = paused ? -Infinity : speed === Infinity && performance.now() - this.subscribedAt >= settle ? to - 1 : this.position();
      // Paced, a frame holds one instant, as the venue's do: a client that takes a frame's messages as
      // one instant would merge two (two instants of one venue millisecond, say, which the archive keeps
      // a millisecond apart). As fast as possible, frames fill across instants.
      let instant: number | null = null;
      while (this.heap.length && this.heap[0].t <= now && out.length < maxPerFrame) {
        if (speed !== Infinity && instant !== null && this.heap[0].t !== instant && out.length) break;
        const e = this.pop();
        instant = e.t;
        if (this.walks.get(e.key) !== e.walk) continue;
        const before = out.length;
        this.taking = e.key.startsWith(SCHEDULE) ? e.key : null;
        e.walk.take(out);
        this.taking = null;
        const sent = this.sent.get(e.key);
        if (sent !== undefined) this.sent.set(e.key, sent + out.length - before);
        if (e.t > this.reached) this.reached = Math.min(e.t, to);
        e.t = e.walk.next();
        if (e.t !== Infinity) this.push(e);
        // Over: its tape is let go (a market of a week's replay is held while it plays, not after).
        else this.walks.set(e.key, DONE);
        // A schedule subscribed a market just now: nothing later goes before its tape is read and its first messages are in.
        if (this.loads.size) break;
      }
      if (out.length) {
        this.stats.messages += out.length;
        // Awaited only when the socket must drain first: a message per frame (the wallet's) would otherwise wait a microtask each.
        for (const text of frames(out)) if (this.send(text)) await this.drain();
        this.uncork();
        out.length = 0;
        continue;
      }
      if (!paused && now > this.stats.sentTo) this.stats.sentTo = now;
      if (paused || this.playAt === null) {
        await this.idle(IDLE_MS);
        continue;
      }
      // A walk still being read (an hour a schedule subscribed just now) may have messages before
      // anything on the heap, or be all there is: the loop's top waits for it before going on or ending.
      if (this.loads.size) continue;
      if (speed === Infinity) {
        // As fast as possible: over when nothing is left to send, and no subscription came just now
        // (a client's frames of one burst all start at `from`).
        if (performance.now() - this.subscribedAt < settle) {
          await this.idle(1);
          continue;
        }
        if (!this.heap.length) {
          this.reached = to;
          return 'end';
        }
        this.reached = this.heap[0].t;
        continue;
      }
      if (now >= to) return 'end';
      const due = this.heap.length ? this.heap[0].t : to;
      const realMs = (due - now) / speed / this.options.clock.speed;
      await this.idle(Math.max(1, Math.min(IDLE_MS, realMs)));
    }
    return 'stopped';
  }

  /** Writes a frame; true when the unsent bound is reached and the replay must `drain` before the next. */
  private send(text: string): boolean {
    this.stats.frames++;
    this.stats.firstMessageMs ??= performance.now() - this.began;
    this.unsent++;
    this.unsentBytes += text.length;
    this.stats.unsent = this.unsent;
    if (!this.corked) {
      this.corked = true;
      this.sink.cork?.();
    }
    this.sink.send(text, (err) => {
      this.unsent--;
      this.unsentBytes -= text.length;
      this.stats.unsent = this.unsent;
      if (err) this.stop();
      const resume = this.drained;
      this.drained = null;
      resume?.();
    });
    return this.full();
  }

  private async drain(): Promise<void> {
    // What is held back must go before its writes can finish.
    this.uncork();
    while (this.full() && !this.stopped) await new Promise<void>((r) => (this.drained = r));
  }

  private full(): boolean {
    return this.unsent >= MAX_UNSENT_FRAMES && this.unsentBytes >= MAX_UNSENT_BYTES;
  }

  private uncork(): void {
    if (!this.corked) return;
    this.corked = false;
    this.sink.uncork?.();
  }

  private idle(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        this.wake = null;
        resolve();
      }, ms);
      this.wake = () => {
        clearTimeout(timer);
        this.wake = null;
        resolve();
      };
    });
  }

  private poke(): void {
    this.wake?.();
  }

  private push(e: Entry): void {
    const h = this.heap;
    h.push(e);
    for (let i = h.length - 1; i > 0;) {
      const p = (i - 1) >> 1;
      if (h[p].t <= h[i].t) break;
      [h[p], h[i]] = [h[i], h[p]];
      i = p;
    }
  }

  private pop(): Entry {
    const h = this.heap;
    const top = h[0];
    const last = h.pop()!;
    if (h.length) {
      h[0] = last;
      for (let i = 0; ;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < h.length && h[l].t < h[m].t) m = l;
        if (r < h.length && h[r].t < h[m].t) m = r;
        if (m === i) break;
        [h[m], h[i]] = [h[i], h[m]];
        i = m;
      }
    }
    return top;
  }
}
