// The API alone on PORT, over an existing lake (capture running elsewhere, or none): API_WORKERS
// processes (one per core by default) sharing the port, keys' rate limits held by the primary.
import cluster from 'node:cluster';
import { clockFrom } from '../src/clock.js';
import { loadConfig } from '../src/config.js';
import { startCluster } from '../src/api/cluster.js';
import type { RateChannel } from '../src/edge/ratelimit.js';
import { prepareApiState, startApi } from '../src/api/server.js';
import { Duck } from '../src/lake/duckdb.js';
import { createLogger } from '../src/log.js';

const config = loadConfig();
const workers = config.api.workers;
const log = createLogger(config.logLevel, 'api', 1, config.logFormat);

if (cluster.isPrimary && workers > 1) {
  await prepareApiState(config);
  const api = await startCluster(workers, log, { incrementalMarking: config.api.incrementalMarking });
  log.info({ url: `http://${config.host}:${api.port}`, workers }, 'api listening');
  const stop = async () => {
    await api.stop();
    process.exit(0);
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  // Spawned over IPC by a supervisor (the test suite, a process manager) that is gone: stop as on SIGTERM.
  process.once('disconnect', stop);
} else {
  const duck = await Duck.open(2);
  const rates: RateChannel = {
    send: (message) => process.send!(message),
    listen: (handler) => process.on('message', handler),
  };
  const api = await startApi(config, duck, clockFrom(config.clock), log, cluster.isWorker ? { cluster: { workers, rates } } : {});
  if (cluster.isPrimary) log.info({ url: api.url, markets: api.lake.size }, 'api listening');
  let stopping: Promise<void> | null = null;
  const stop = () =>
    (stopping ??= (async () => {
      await api.stop();
      await duck.shutdown();
      process.exit(0);
    })());
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  // A worker whose primary is gone cannot lease tokens, and a process whose supervisor (spawned over IPC)
  // is gone serves no one it answers to: either finishes what it serves and ends.
  process.once('disconnect', stop);
}
