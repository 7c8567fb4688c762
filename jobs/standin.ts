// Runs the upstream stand-in on STANDIN_PORT (default 8090) until interrupted.
import { clockFrom } from '../src/clock.js';
import { loadConfig } from '../src/config.js';
import { createLogger } from '../src/log.js';
import { StandIn } from '../src/standin/server.js';

const config = loadConfig();
const log = createLogger(config.logLevel, 'standin');
const standin = new StandIn({
  clock: clockFrom(config.clock),
  seed: Number(process.env.STANDIN_SEED ?? 1),
  apiKey: config.wallet.apiKey,
  apiSecret: config.wallet.apiSecret,
  walletWeightPerMinute: Number(process.env.STANDIN_WALLET_WEIGHT ?? 12_000),
});
const url = await standin.start(Number(process.env.STANDIN_PORT ?? 8090), '127.0.0.1');
log.info({ url }, 'stand-in listening');
const stop = async () => {
  await standin.stop();
  process.exit(0);
};
process.once('SIGINT', stop);
process.once('SIGTERM', stop);
