// The stand-in as capture's upstream: where `make run`, `make backfill` (without UPSTREAM=live),
// a fill, the tests and the benchmarks point capture. Production code never imports this module;
// the jobs that choose the stand-in hand it in.
import type { FillUpstream } from '../capture/fill.js';
import type { Clock } from '../clock.js';
import type { Config } from '../config.js';
import { type Faults, StandIn, WALLET_PREFIX } from './server.js';
import { MARKET_CHANNEL_PATH } from './stream.js';
import { WALLET_STREAM_PATH } from './walletstream.js';
import { RTDS_PATH } from './rtds.js';

/** The config capture uses against a stand-in at `url`, with upstream budgets lifted. */
export function standinConfig(config: Config, url: string, pollMs?: number): Config {
  return {
    ...config,
    capture: { ...config.capture, pollMs: pollMs ?? config.capture.pollMs },
    wallet: {
      ...config.wallet,
      baseUrl: `${url}${WALLET_PREFIX}`,
      wsUrl: `${url.replace(/^http/, 'ws')}${WALLET_STREAM_PATH}`,
      requestsPerSecond: 100_000,
      concurrency: 32,
    },
    polymarket: {
      ...config.polymarket,
      gammaUrl: url,
      clobUrl: url,
      wsUrl: `${url.replace(/^http/, 'ws')}${MARKET_CHANNEL_PATH}`,
      rtdsUrl: `${url.replace(/^http/, 'ws')}${RTDS_PATH}`,
      requestsPerSecond: 100_000,
      concurrency: 32,
    },
  };
}

/** A stand-in started on a fill's clock, signing with capture's wallet credentials. */
export class StandInUpstream implements FillUpstream {
  private served: StandIn | null = null;

  constructor(private readonly options: { seed?: number; faults?: Partial<Faults>; misresolveRate?: number; keepServed?: boolean } = {}) {}

  /** The stand-in once started (its model and counts are what tests audit against). */
  get standin(): StandIn {
    if (!this.served) throw new Error('the stand-in has not been started');
    return this.served;
  }

  async start(clock: Clock, config: Config, pollMs: number): Promise<Config> {
    this.served = new StandIn({
      clock,
      seed: this.options.seed ?? 1,
      apiKey: config.wallet.apiKey,
      apiSecret: config.wallet.apiSecret,
      walletWeightPerMinute: Number.MAX_SAFE_INTEGER,
      faults: this.options.faults,
      misresolveRate: this.options.misresolveRate,
      keepServed: this.options.keepServed,
    });
    return standinConfig(config, await this.served.start(0), pollMs);
  }

  async stop(): Promise<void> {
    await this.served?.stop();
  }
}
