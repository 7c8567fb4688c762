// Capture and the stand-in agree on time through a Clock. In production it is the wall
// clock; for fills, tests and benchmarks it starts in the past and runs faster, so hours
// of market life pass through the unchanged capture code in seconds.
export interface Clock {
  now(): number;
  /** Resolves after `ms` of clock time. */
  sleep(ms: number): Promise<void>;
  readonly speed: number;
  /** What rebuilds this clock in another thread (see clockFromParams); absent for hand-driven test clocks. */
  readonly params?: ClockParams;
}

export interface ClockParams {
  origin: number;
  speed: number;
  anchor: number;
  cap: number;
  /** One float the clock never reads past, shared with the threads of a paced clock (see pacedClock). */
  ceiling?: SharedArrayBuffer;
}

/**
 * `anchorMs` is the wall-clock instant at which the clock reads `startMs`; processes sharing all
 * three agree. `capMs` stops the clock there: a fill ends exactly where live capture begins.
 */
export function createClock(
  startMs: number | null = null,
  speed = 1,
  anchorMs = Date.now(),
  capMs = Infinity,
  ceiling?: SharedArrayBuffer,
): Clock {
  const realStart = anchorMs;
  const origin = startMs ?? realStart;
  const free = () => Math.min(capMs, Math.floor(origin + (Date.now() - realStart) * speed));
  const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, Math.max(0, ms / speed)));
  const params = { origin, speed, anchor: realStart, cap: capMs };
  if (!ceiling) return { speed, params, now: free, sleep };
  const limit = new Float64Array(ceiling);
  // Never backwards, though the ceiling is published by another thread.
  let last = -Infinity;
  return {
    speed,
    params: { ...params, ceiling },
    now: () => (last = Math.max(last, Math.min(free(), limit[0]))),
    sleep,
  };
}

export function clockFrom(c: { startMs: number | null; speed: number; anchorMs: number | null }): Clock {
  return createClock(c.startMs, c.speed, c.anchorMs ?? Date.now());
}

/** The same clock as the one `params` came from: another thread reads the same instants. */
export function clockFromParams(p: ClockParams): Clock {
  return createClock(p.origin, p.speed, p.anchor, p.cap, p.ceiling);
}

/**
 * A clock at `speed` that never runs more than `leadMs` past `reached()` (how far its consumer has
 * got). A fill replays hours through real capture: at a fixed speed, a busy machine would let
 * the venue's time run past polls that had not happened, and what was recorded would depend on
 * the load. Paced, the lake a fill writes depends on the work, not on the machine. Its threads
 * (clockFromParams) read the same ceiling, which each reading in this thread moves on.
 */
export function pacedClock(startMs: number, speed: number, anchorMs: number, capMs: number, leadMs: number, reached: () => number): Clock {
  const ceiling = new SharedArrayBuffer(Float64Array.BYTES_PER_ELEMENT);
  const limit = new Float64Array(ceiling);
  limit[0] = startMs + leadMs;
  const shared = createClock(startMs, speed, anchorMs, capMs, ceiling);
  return {
    ...shared,
    now: () => {
      limit[0] = Math.max(limit[0], reached() + leadMs);
      return shared.now();
    },
  };
}
