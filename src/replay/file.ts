// A replayed range written as newline-delimited venue messages (`make replay`), for tools that
// read files: the same walks as the WebSocket replay, one message per line (the wallet's as its
// whole frame), as fast as the file takes them or at a chosen pace.
import type { Writable } from 'node:stream';
import type { Clock } from '../clock.js';
import type { Venue, Window } from '../config.js';
import type { LakeReader, StoredMarket } from '../lake/reader.js';
import { PolymarketWalk } from './polymarket.js';
import { ReplaySession } from './session.js';
import { PRE_OPEN_MS, TapeCache } from './tape.js';
import { WALLET_TOPIC_PREFIX, WalletWalk } from './wallet.js';

export interface FileReplay {
  venue: Venue;
  from: number;
  to: number;
  speed: number;
  /** Market ids; or every market of the venue (of `coin` and `window` when given) whose books can fall in the range. */
  markets?: string[];
  coin?: string;
  window?: Window;
}

/** Books come after a window's end for as long as capture's last answers take. */
const LAG_MS = 5 * 60_000;

function marketsToReplay(lake: LakeReader, r: FileReplay, now: number): StoredMarket[] {
  const all = [...lake.walk('asc', now)].filter((m) => m.venue === r.venue);
  if (r.markets?.length) return r.markets.map((id) => all.find((m) => m.market_id === id)).filter((m) => m !== undefined);
  return all.filter(
    (m) =>
      (!r.coin || m.coin === r.coin) &&
      (!r.window || m.window === r.window) &&
      m.start_time - PRE_OPEN_MS < r.to &&
      m.end_time + LAG_MS > r.from,
  );
}

/** Writes the replay to `out`; resolves with what was written. */
export async function replayToFile(lake: LakeReader, clock: Clock, r: FileReplay, out: Writable) {
  const markets = marketsToReplay(lake, r, clock.now());
  // One pass over each market: no tape is read twice, so none is kept.
  const tapes = new TapeCache(0);
  const session = new ReplaySession(
    {
      from: r.from,
      to: r.to,
      speed: r.speed,
      playAt: null,
      clock,
      frames: (messages) => [`${messages.join('\n')}\n`],
      maxPerFrame: 256,
      maxMarkets: Infinity,
    },
    { send: (text, done) => void out.write(text, (err) => done(err ?? undefined)) },
  );
  for (const m of markets)
    session.subscribe(m.market_id, async (at) => {
      const tape = await tapes.get(lake, r.venue, m, clock.now());
      return r.venue === 'polymarket'
        ? new PolymarketWalk(tape, at, r.to, true)
        : new WalletWalk(tape, at, r.to, `${WALLET_TOPIC_PREFIX}${m.market_id}`);
    });
  if (!markets.length) return { markets: 0, messages: 0 };
  await session.run();
  return { markets: markets.length, messages: session.stats.messages };
}
