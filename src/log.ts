import pino, { type Logger } from 'pino';

export type { Logger };

/**
 * Lines are written in batches of about this many bytes, and at least every FLUSH_MS: within
 * PIPE_BUF (4 KiB on Linux), which a pipe writes at once, so the lines of API workers sharing
 * stdout never cut into one another.
 */
const PIPE_BUF = 4096;
const BATCH_BYTES = PIPE_BUF - 512;
const FLUSH_MS = 500;

/**
 * JSON lines, or pino-pretty when a person is watching a terminal. Lines are batched: a write
 * per request line cost a system call for every request (measurably, next to a sub-millisecond
 * page); pino flushes what is pending when the process exits.
 */
export function createLogger(level: string, name: string, dest = 1, format: 'json' | 'pretty' | 'auto' = 'auto'): Logger {
  const pretty = dest === 1 && (format === 'pretty' || (format === 'auto' && process.stdout.isTTY));
  const options = {
    name,
    level,
    redact: { paths: ['*.apiKey', '*.apiSecret', '*.authorization', 'req.headers.authorization', '*.key'], censor: '[redacted]' },
  };
  if (pretty)
    return pino({ ...options, transport: { target: 'pino-pretty', options: { colorize: true, translateTime: 'SYS:HH:MM:ss.l' } } });
  const destination = pino.destination({ dest, sync: false, minLength: BATCH_BYTES, maxWrite: PIPE_BUF });
  setInterval(() => {
    // Nothing to write, or a write already under way: both are fine to skip.
    try {
      destination.flush();
    } catch {
      // retried at the next tick
    }
  }, FLUSH_MS).unref();
  return pino(options, destination);
}
