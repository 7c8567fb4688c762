// A market's tape as the wallet's signed order-book stream would have pushed it (UPSTREAMS.md C2):
// one Yes-priced book per recorded instant (the first outcome's, as recorded), in a `DATA` frame
// whose `data` is a JSON string, and a `replay_gap` payload where the record has a gap (it carries
// no `updateTimestampMs`, so a venue client's book handling passes it by).
import type { MarketTape, TapeBooks } from './tape.js';
import type { ReplayWalk } from './session.js';

export const WALLET_AGGREGATE_TOPIC = 'web3_prediction_orderbook_data';
export const WALLET_TOPIC_PREFIX = 'web3_prediction_orderbook_';

/** The acknowledgement the venue sends when a connection's topics are subscribed. */
export const WALLET_ACK = JSON.stringify({ type: 'COMMAND', data: 'SUCCESS', subType: 'SUBSCRIBE', code: '00000000' });

export const walletFrame = (topic: string, payload: string) => JSON.stringify({ type: 'DATA', topic, data: payload });

/** Row i's `n` levels at offset `p` (prices) and `q` (sizes) of its ladders, as `[price, size]` pairs in the venue's text. */
const pairs = (books: TapeBooks, i: number, p: number, q: number, n: number) =>
  Array.from({ length: n }, (_, k) => [books.text(i, p + k), books.text(i, q + k)]);

export class WalletWalk implements ReplayWalk {
  private book: number;
  private gap: number;
  private readonly gaps: MarketTape['gaps'];
  private readonly yes: number;
  private readonly initial: string[] = [];
  /** `{"type":"DATA","topic":<topic>,"data":`: a book's frame is this, its payload as a JSON string, and `}`. */
  private readonly head: string;

  constructor(
    private readonly tape: MarketTape,
    from: number,
    private readonly to: number,
    /** The topic the client subscribed the market by (its own, or the aggregate). */
    private readonly topic: string,
    /** Called with the bytes of every payload rendered for the first time (what a shared tape now holds). */
    private readonly rendered: (bytes: number) => void = () => undefined,
  ) {
    this.head = walletFrame(topic, '').slice(0, -3);
    this.yes = Math.min(...tape.market.outcomes.map((o) => o.index));
    this.gaps = tape.gaps.filter((g) => g.dataset === 'books').sort((a, b) => a.from - b.from);
    this.book = tape.books.lowerBound(from);
    this.gap = this.gaps.findIndex((g) => g.from >= from);
    if (this.gap < 0) this.gap = this.gaps.length;
    for (const g of this.gaps) if (g.from < from && g.to > from) this.initial.push(this.gapFrame(g, from));
    // The book held at `from`: a client of the venue gets it from REST; a replay sends it first.
    for (let i = this.book - 1; i >= 0; i--)
      if (tape.books.outcome[i] === this.yes) {
        this.initial.push(this.bookFrame(i));
        break;
      }
  }

  next(): number {
    if (this.initial.length) return -Infinity;
    while (this.book < this.tape.books.length && this.tape.books.outcome[this.book] !== this.yes) this.book++;
    const t = Math.min(
      this.book < this.tape.books.length ? this.tape.books.ts[this.book] : Infinity,
      this.gap < this.gaps.length ? this.gaps[this.gap].from : Infinity,
    );
    return t < this.to ? t : Infinity;
  }

  take(out: string[]): void {
    if (this.initial.length) {
      out.push(...this.initial.splice(0));
      return;
    }
    const t = this.next();
    if (t === Infinity) return;
    if (this.gap < this.gaps.length && this.gaps[this.gap].from === t) out.push(this.gapFrame(this.gaps[this.gap++], t));
    else out.push(this.bookFrame(this.book++));
  }

  /**
   * Row i's frame. Its payload, quoted as the frame's `data` string, is rendered once per tape and
   * kept in it (keyed by the row) for every later replay of either topic, and in a replay copy.
   */
  private bookFrame(i: number): string {
    let data = this.tape.rendered.get(i);
    if (data === undefined) {
      // A copy holds every payload a walk can ask for; one missing is a damaged copy, never guessed at.
      if (this.tape.copied) throw new Error(`replay copy of market ${this.tape.market.market_id} lacks book ${i}`);
      const books = this.tape.books;
      const [b, a] = [books.bids[i], books.asks[i]];
      data = JSON.stringify(
        JSON.stringify({
          msgType: 'orderbook',
          marketId: Number(this.tape.market.market_id),
          updateTimestampMs: books.ts[i],
          bids: pairs(books, i, 0, b, b),
          asks: pairs(books, i, 2 * b, 2 * b + a, a),
        }),
      );
      this.tape.rendered.set(i, data);
      this.rendered(data.length + 48);
    }
    return `${this.head}${data}}`;
  }

  private gapFrame(g: MarketTape['gaps'][number], at: number): string {
    const payload = JSON.stringify({
      msgType: 'replay_gap',
      marketId: Number(this.tape.market.market_id),
      dataset: g.dataset,
      reason: g.reason,
      from: g.from,
      to: Number.isFinite(g.to) ? g.to : null,
      timestamp: Math.max(g.from, at),
    });
    return walletFrame(this.topic, payload);
  }
}
