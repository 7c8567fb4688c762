// Runs the upstream stand-in on STANDIN_PORT (default 8090) until interrupted.
import { clockFrom } from '../src/clock.js';
import { loadConfig } from '../src/config.js';
import { createLogger } from '../src/log.js';
import { StandIn } from '../src/standin/server.js';

const config = loadConfig();
const log = createLogger(config.logLevel, 'standin', 1, config.logFormat);
const standin = new StandIn({
  clock: clockFrom(config.clock),
  seed: config.standin.seed,
  apiKey: config.wallet.apiKey,
  apiSecret: config.wallet.apiSecret,
  walletWeightPerMinute: config.standin.walletWeightPerMinute,
});
const url = await standin.start(config.standin.port, '127.0.0.1');
log.info({ url }, 'stand-in listening');
const stop = async () => {
  await standin.stop();
  process.exit(0);
};
process.once('SIGINT', stop);
process.once('SIGTERM', stop);
// Spawned over IPC by a supervisor (the test suite, a process manager) that is gone: stop as on SIGTERM.
process.once('disconnect', stop);
