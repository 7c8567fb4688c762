import pino, { type Logger } from 'pino';

export type { Logger };

/** JSON lines, or pino-pretty when a person is watching a terminal. */
export function createLogger(level: string, name: string): Logger {
  const pretty = process.stdout.isTTY && process.env.LOG_FORMAT !== 'json';
  return pino({
    name,
    level,
    redact: { paths: ['*.apiKey', '*.apiSecret', '*.authorization', 'req.headers.authorization', '*.key'], censor: '[redacted]' },
    ...(pretty ? { transport: { target: 'pino-pretty', options: { colorize: true, translateTime: 'SYS:HH:MM:ss.l' } } } : {}),
  });
}
