// CONTRACT.md section 6: where each dataset's history starts. Nothing earlier exists, and
// nothing earlier is ever produced.
import type { Venue } from './config.js';

export interface CoverageRow {
  dataset: string;
  venue: Venue;
  coins: readonly string[];
  starts: string;
  what: string;
}

export const COVERAGE: readonly CoverageRow[] = [
  {
    dataset: 'markets',
    venue: 'wallet-prediction',
    coins: ['btc'],
    starts: '2026-05-05',
    what: 'catalogue, resolution, volume, liquidity (backfilled)',
  },
  {
    dataset: 'markets',
    venue: 'wallet-prediction',
    coins: ['eth', 'bnb'],
    starts: '2026-06-29',
    what: 'catalogue, resolution, volume, liquidity (backfilled)',
  },
  {
    dataset: 'metrics',
    venue: 'wallet-prediction',
    coins: ['btc', 'eth', 'bnb'],
    starts: '2026-07-17',
    what: 'price metrics (chance, price, last_trade)',
  },
  { dataset: 'books', venue: 'wallet-prediction', coins: ['btc'], starts: '2026-06-26', what: 'full-L2 lifecycle panel, 15m markets' },
  {
    dataset: 'books',
    venue: 'wallet-prediction',
    coins: ['eth', 'bnb'],
    starts: '2026-07-26',
    what: 'one-minute forward full-depth capture',
  },
  {
    dataset: 'markets',
    venue: 'polymarket',
    coins: ['btc', 'eth', 'sol', 'xrp'],
    starts: '2026-07-26',
    what: 'one-minute forward full-depth capture',
  },
  {
    dataset: 'metrics',
    venue: 'polymarket',
    coins: ['btc', 'eth', 'sol', 'xrp'],
    starts: '2026-07-26',
    what: 'one-minute forward full-depth capture',
  },
  {
    dataset: 'books',
    venue: 'polymarket',
    coins: ['btc', 'eth', 'sol', 'xrp'],
    starts: '2026-07-26',
    what: 'one-minute forward full-depth capture',
  },
  {
    dataset: 'trades',
    venue: 'polymarket',
    coins: ['btc', 'eth', 'sol', 'xrp'],
    starts: '2026-11-25',
    what: 'every trade event of the market channel (last_trade_price)',
  },
  {
    dataset: 'trades',
    venue: 'wallet-prediction',
    coins: ['btc', 'eth', 'bnb'],
    starts: '2026-11-25',
    what: 'last-trade price changes seen over REST (source rest_last_trade; the venue sends no trade events)',
  },
];

/** Epoch ms where `dataset` of `venue`/`coin` starts, or null when the table has no row for it. */
export function coverageStart(dataset: string, venue: Venue, coin: string): number | null {
  const row = COVERAGE.find((r) => r.dataset === dataset && r.venue === venue && r.coins.includes(coin));
  return row ? Date.parse(`${row.starts}T00:00:00Z`) : null;
}
