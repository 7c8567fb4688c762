import type { StreamProtocol } from '../channel.js';
import { signedSocketUrl } from './signing.js';

/** Every wallet market's books on one topic: one signed URL for good, whatever markets come and go. */
export const WALLET_AGGREGATE_TOPIC = 'web3_prediction_orderbook_data';

/**
 * The wallet venue's order-book stream (UPSTREAMS.md C2): Binance's signed SApi socket, topics in
 * the signed URL (the aggregate topic, filtered by market here, so adding markets never re-signs),
 * the key in `X-MBX-APIKEY`, WebSocket ping frames. A frame's `data` is a JSON string to parse
 * again (predict.fun's own feed sends it as an object: taken too); acknowledgements say
 * `"SUCCESS"` and are not data. The stream pauses while the venue's upstream is down: silence is
 * not a broken socket.
 */
export function walletTopics(apiKey: string, apiSecret: string): StreamProtocol {
  return {
    subscribe: () => null,
    url: (base) => signedSocketUrl(base, apiSecret, [WALLET_AGGREGATE_TOPIC]),
    headers: { 'X-MBX-APIKEY': apiKey },
    quiet: true,
    ping: null,
    pong: null,
    unwrap: (parsed) => {
      const frame = parsed as { data?: unknown } | null;
      if (!frame || typeof frame !== 'object') return [];
      let data = frame.data;
      if (typeof data === 'string') {
        if (data === 'SUCCESS') return [];
        try {
          data = JSON.parse(data);
        } catch {
          return [];
        }
      }
      return data && typeof data === 'object' && 'marketId' in data && 'updateTimestampMs' in data ? [data] : [];
    },
  };
}
