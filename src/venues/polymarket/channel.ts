import type { StreamProtocol } from '../channel.js';

/**
 * Polymarket's market channel (UPSTREAMS.md C1): `assets_ids`, PING/PONG text, an array or one
 * object per frame. Every subscribe asks for `initial_dump`: without it the venue often sends no
 * snapshot for tokens added later. The first frame also asks for the custom feature events
 * (`best_bid_ask`, `new_market`, `market_resolved`).
 */
export const MARKET_CHANNEL: StreamProtocol = {
  subscribe: (assets, initial) =>
    JSON.stringify(
      initial
        ? { assets_ids: assets, type: 'market', initial_dump: true, custom_feature_enabled: true }
        : { assets_ids: assets, operation: 'subscribe', type: 'market', initial_dump: true },
    ),
  unsubscribe: (assets) => JSON.stringify({ assets_ids: assets, operation: 'unsubscribe', type: 'market' }),
  ping: 'PING',
  pong: 'PONG',
  unwrap: (parsed) =>
    (Array.isArray(parsed) ? parsed : [parsed]).filter(
      (m) => !!m && typeof m === 'object' && typeof (m as { event_type?: unknown }).event_type === 'string',
    ),
};
