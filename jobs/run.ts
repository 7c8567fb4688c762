// `make run`: the stand-in on STANDIN_PORT, capture against it and the API on PORT, in one
// process on the wall clock, so the API answers the latest book from capture's memory.
// (The fill of an empty lake runs before this, as its own job.)
import { startApi } from '../src/api/server.js';
import { Capture } from '../src/capture/capture.js';
import { captureFeedOf } from '../src/capture/feed.js';
import { createClock } from '../src/clock.js';
import { loadConfig } from '../src/config.js';
import { Duck } from '../src/lake/duckdb.js';
import { acquireLock } from '../src/lake/lock.js';
import { createLogger } from '../src/log.js';
import { runKey } from '../src/edge/keys.js';
import { StandIn } from '../src/standin/server.js';
import { standinConfig } from '../src/standin/upstream.js';
import { createAdapters } from '../src/venues/index.js';
import { publisherFor } from '../src/bucket/publish.js';
import { onBooksFile } from '../src/lake/writer.js';
import { writeServingCopy } from '../src/pages/copywriter.js';

// Sealed books files get their serving copy before their commit (the API's fast page path).
onBooksFile(writeServingCopy);

const config = loadConfig();
const log = createLogger(config.logLevel, 'run', 1, config.logFormat);
const release = await acquireLock(config.dataDir, 'capture');
const clock = createClock();
const standin = new StandIn({
  clock,
  apiKey: config.wallet.apiKey,
  apiSecret: config.wallet.apiSecret,
  walletWeightPerMinute: Number.MAX_SAFE_INTEGER,
});
const url = await standin.start(config.standin.port);
const cfg = standinConfig(config, url);
const duck = await Duck.open(2);
// Sealing an hour takes seconds: capture gets a lane of its own so it never queues the API's reads.
const captureDuck = await duck.fork(1);
const capture = new Capture(cfg, clock, captureDuck, createAdapters(cfg, clock), log, publisherFor(cfg, log, captureDuck));
await capture.start();
const api = await startApi(config, duck, clock, log, { latest: capture.latest, capture });
const feed = await captureFeedOf(config, capture, log);
const { key, issued } = await runKey(api.keys, config.dataDir);
const market = api.lake.all(clock.now()).find((m) => m.venue === 'wallet-prediction' && m.status === 'open');
log.info({ standin: url, api: api.url, lake: `${config.dataDir}/lake`, markets: api.lake.size }, 'capturing and serving; Ctrl-C stops');
console.log(`
API ${api.url}  (${issued ? 'a paid key was issued for `make run`' : 'the paid key of earlier runs'}, kept in ${config.dataDir}/state/run-key; \`make key PLAN=paid LABEL=me\` issues more)
  export KEY=${key}
  curl -s -H "Authorization: Bearer $KEY" '${api.url}/v3/wallet-prediction/markets?coin=btc&window=15m&limit=2'
  curl -s -H "Authorization: Bearer $KEY" '${api.url}/v3/wallet-prediction/${market?.market_id ?? '<market_id>'}/orderbook/latest'
  curl -s -H "Authorization: Bearer $KEY" '${api.url}/v3/wallet-prediction/${market?.market_id ?? '<market_id>'}/snapshots?limit=5'
  curl -s '${api.url}/v3/health'
Explorer:  ${api.url}/v3/explorer  (paste the key)
Reference: ${api.url}/v3/docs  (paste the key under Authorize)
Lake SQL: make query DATA_DIR=${config.dataDir} SQL='SELECT venue, coin, "window", count(*) AS books FROM books GROUP BY ALL ORDER BY ALL'
`);
let stopping = false;
const stop = async () => {
  if (stopping) return;
  stopping = true;
  await feed?.close();
  await api.stop();
  await capture.stop();
  await standin.stop();
  // The fork's lanes are the instance's too: one shutdown waits for both.
  await duck.shutdown();
  await release();
  process.exit(0);
};
process.once('SIGINT', stop);
process.once('SIGTERM', stop);
// Spawned over IPC by a supervisor (the test suite, a process manager) that is gone: stop as on SIGTERM.
process.once('disconnect', stop);
