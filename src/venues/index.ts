import type { Clock } from '../clock.js';
import type { Config, Venue } from '../config.js';
import type { VenueAdapter } from './adapter.js';
import { PolymarketAdapter } from './polymarket/rest.js';
import { WalletAdapter } from './wallet/rest.js';

export function createAdapter(config: Config, clock: Clock, venue: Venue): VenueAdapter {
  return venue === 'polymarket' ? new PolymarketAdapter(config, clock) : new WalletAdapter(config, clock);
}

export function createAdapters(config: Config, clock: Clock): VenueAdapter[] {
  return config.capture.venues.map((v) => createAdapter(config, clock, v));
}
