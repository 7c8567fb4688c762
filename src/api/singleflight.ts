/**
 * One run of `start` per key at a time: callers asking while it runs share its promise. Used
 * where a burst of requests for the same cold data would otherwise queue one query each.
 */
export function singleFlight<K, V>(pending: Map<K, Promise<V>>, key: K, start: () => Promise<V>): Promise<V> {
  let running = pending.get(key);
  if (!running) {
    running = start().finally(() => pending.delete(key));
    pending.set(key, running);
  }
  return running;
}
