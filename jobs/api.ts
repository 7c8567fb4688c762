// The API alone on PORT, over an existing lake (capture running elsewhere, or none).
import { clockFrom } from '../src/clock.js';
import { loadConfig } from '../src/config.js';
import { startApi } from '../src/api/server.js';
import { Duck } from '../src/lake/duckdb.js';
import { createLogger } from '../src/log.js';

const config = loadConfig();
const log = createLogger(config.logLevel, 'api', 1, config.logFormat);
const duck = await Duck.open(2);
const api = await startApi(config, duck, clockFrom(config.clock), log);
log.info({ url: api.url, markets: api.lake.size }, 'api listening');
const stop = async () => {
  await api.stop();
  duck.close();
  process.exit(0);
};
process.once('SIGINT', stop);
process.once('SIGTERM', stop);
