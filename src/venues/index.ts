// The venues capture records, by name: their REST adapters, their stream recorders and what
// each stream carries. Nothing above this room names a venue.
import type { Clock } from '../clock.js';
import type { Config, Venue } from '../config.js';
import type { Logger } from '../log.js';
import type { VenueAdapter } from './adapter.js';
import { StreamRecorder } from './polymarket/recorder.js';
import { PolymarketAdapter } from './polymarket/rest.js';
import { ReferenceRecorder, type ReferenceSink } from './polymarket/reference.js';

export type { ReferenceFeed, ReferenceRecorder, ReferenceSink } from './polymarket/reference.js';
import type { StreamSink, VenueRecorder } from './stream.js';
import { WalletStreamRecorder } from './wallet/recorder.js';
import { WalletAdapter } from './wallet/rest.js';

export function createAdapter(config: Config, clock: Clock, venue: Venue): VenueAdapter {
  return venue === 'polymarket' ? new PolymarketAdapter(config, clock) : new WalletAdapter(config, clock);
}

export function createAdapters(config: Config, clock: Clock): VenueAdapter[] {
  return config.capture.venues.map((v) => createAdapter(config, clock, v));
}

export interface StreamTraits {
  /** Its channel sends every trade (Polymarket's `last_trade_price`); otherwise the last trade is known only from REST. */
  tradesInStream: boolean;
  /**
   * Its volume wants stream threads (Polymarket's market channel: tens of thousands of changes a second,
   * each parsed, applied and hash-checked); one aggregate topic (the wallet venue's) stays on capture's thread.
   */
  threaded: boolean;
}

export function streamTraits(venue: Venue): StreamTraits {
  return venue === 'polymarket' ? { tradesInStream: true, threaded: true } : { tradesInStream: false, threaded: false };
}

export function createRecorder(venue: Venue, config: Config, clock: Clock, log: Logger, sink: StreamSink): VenueRecorder {
  return venue === 'polymarket' ? new StreamRecorder(config, clock, log, sink) : new WalletStreamRecorder(config, clock, log, sink);
}

/** The recorder of the reference prices the markets resolve on (Polymarket's price socket), or null when off. */
export function createReferenceRecorder(config: Config, clock: Clock, log: Logger, sink: ReferenceSink): ReferenceRecorder | null {
  return config.capture.reference.on ? new ReferenceRecorder(config, clock, log, sink) : null;
}
