// make backfill VENUE=wallet-prediction COIN=btc WINDOW=15m FROM=2026-05-05 TO=2026-05-12 [UPSTREAM=live]
import { parseArgs } from 'node:util';
import { CoverageError, backfill } from '../src/capture/backfill.js';
import { standinConfig } from '../src/standin/upstream.js';
import { clockFrom } from '../src/clock.js';
import { VENUES, VENUE_COINS, type Venue, WINDOWS, type Window, loadConfig } from '../src/config.js';
import { Duck } from '../src/lake/duckdb.js';
import { createLogger } from '../src/log.js';
import { terminalProgress } from '../src/progress.js';
import { StandIn } from '../src/standin/server.js';
import { isoMs, parseTime } from '../src/time.js';
import { createAdapter } from '../src/venues/index.js';

const { values } = parseArgs({
  options: {
    venue: { type: 'string' },
    coin: { type: 'string' },
    window: { type: 'string' },
    from: { type: 'string' },
    to: { type: 'string' },
    standin: { type: 'boolean', default: false },
  },
});
const fail = (message: string): never => {
  console.error(`backfill: ${message}`);
  process.exit(2);
};
const venue = (VENUES as readonly string[]).includes(values.venue ?? '')
  ? (values.venue as Venue)
  : fail(`VENUE=${JSON.stringify(values.venue ?? '')}; expected one of: ${VENUES.join(', ')}`);
const coin = VENUE_COINS[venue].includes(values.coin ?? '')
  ? values.coin!
  : fail(`COIN=${JSON.stringify(values.coin ?? '')}; expected one of: ${VENUE_COINS[venue].join(', ')}`);
const window = (WINDOWS as readonly string[]).includes(values.window ?? '')
  ? (values.window as Window)
  : fail(`WINDOW=${JSON.stringify(values.window ?? '')}; expected one of: ${WINDOWS.join(', ')}`);
const from =
  parseTime(values.from ?? '') ?? fail(`FROM=${JSON.stringify(values.from ?? '')}; expected a date like 2026-05-05 or an ISO time`);
const to = parseTime(values.to ?? '') ?? fail(`TO=${JSON.stringify(values.to ?? '')}; expected a date like 2026-05-12 or an ISO time`);

let config = loadConfig();
const log = createLogger(config.logLevel, 'backfill', 1, config.logFormat);
const clock = clockFrom(config.clock);
let standin: StandIn | null = null;
if (values.standin) {
  standin = new StandIn({
    clock,
    apiKey: config.wallet.apiKey,
    apiSecret: config.wallet.apiSecret,
    walletWeightPerMinute: Number.MAX_SAFE_INTEGER,
  });
  config = standinConfig(config, await standin.start(0));
}
const duck = await Duck.open(1);
const started = Date.now();
try {
  const summary = await backfill(
    config,
    duck,
    createAdapter(config, clock, venue),
    { venue, coin, window, from, to },
    clock.now(),
    terminalProgress(`backfill ${venue} ${coin} ${window}`),
  );
  for (const note of summary.notes) log.warn(note);
  const seconds = (Date.now() - started) / 1000;
  console.log(
    `backfill ${venue} ${coin} ${window} ${isoMs(summary.from).slice(0, 10)}..${isoMs(summary.to).slice(0, 10)}: ${summary.markets} markets, ${summary.metrics} metric rows, ${summary.files} files, ${summary.days} days (${summary.skippedDays} resumed) in ${seconds.toFixed(1)} s (${(summary.markets / Math.max(seconds, 0.001)).toFixed(1)} markets/s)`,
  );
} catch (err) {
  if (err instanceof CoverageError) fail(err.message);
  throw err;
} finally {
  await duck.close();
  await standin?.stop();
}
