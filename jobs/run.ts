// `make run`: the stand-in on STANDIN_PORT and capture against it, in one process, on the
// wall clock. (The fill of an empty lake runs before this, as its own job.)
import { Capture } from '../src/capture/capture.js';
import { standinConfig } from '../src/capture/fill.js';
import { createClock } from '../src/clock.js';
import { loadConfig } from '../src/config.js';
import { Duck } from '../src/lake/duckdb.js';
import { acquireLock } from '../src/lake/lock.js';
import { createLogger } from '../src/log.js';
import { StandIn } from '../src/standin/server.js';
import { createAdapters } from '../src/venues/index.js';

const config = loadConfig();
const log = createLogger(config.logLevel, 'run');
const release = await acquireLock(config.dataDir, 'capture');
const clock = createClock();
const standin = new StandIn({ clock, apiKey: config.wallet.apiKey, apiSecret: config.wallet.apiSecret, walletWeightPerMinute: Number.MAX_SAFE_INTEGER });
const url = await standin.start(Number(process.env.STANDIN_PORT ?? 8090));
const cfg = standinConfig(config, url);
const duck = await Duck.open(1);
const capture = new Capture(cfg, clock, duck, createAdapters(cfg, clock), log);
await capture.start();
log.info({ standin: url, lake: `${config.dataDir}/lake` }, 'capturing; Ctrl-C stops');
console.log(`\nThe lake is at ${config.dataDir}/lake. Try:\n  make query SQL='SELECT venue, coin, "window", count(*) AS books FROM books GROUP BY ALL ORDER BY ALL'\n`);
let stopping = false;
const stop = async () => {
  if (stopping) return;
  stopping = true;
  await capture.stop();
  await standin.stop();
  duck.close();
  await release();
  process.exit(0);
};
process.once('SIGINT', stop);
process.once('SIGTERM', stop);
