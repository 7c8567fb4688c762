import type { Window } from './config.js';

export const SECOND = 1000;
export const MINUTE = 60 * SECOND;
export const HOUR = 60 * MINUTE;
export const DAY = 24 * HOUR;

export const WINDOW_MS: Record<Window, number> = { '5m': 5 * MINUTE, '15m': 15 * MINUTE };

export function floorTo(ms: number, step: number): number {
  return Math.floor(ms / step) * step;
}

/** `YYYY-MM-DD` and `HH` of the UTC hour holding `ms`. */
const hourNames = new Map<number, { date: string; hour: string }>();

/** The UTC date and hour of `ms`'s hour; remembered, since every spooled row asks (and formatting a date is costly). */
export function hourParts(ms: number): { date: string; hour: string } {
  const start = floorTo(ms, HOUR);
  let parts = hourNames.get(start);
  if (!parts) {
    const iso = new Date(start).toISOString();
    parts = { date: iso.slice(0, 10), hour: iso.slice(11, 13) };
    if (hourNames.size >= 10_000) hourNames.clear();
    hourNames.set(start, parts);
  }
  return parts;
}

export function isoMs(ms: number): string {
  return new Date(ms).toISOString();
}

/**
 * Parses `YYYY-MM-DD`, an ISO time (UTC when no zone) or epoch ms. A date or time that does not
 * exist (`2026-02-30`, `24:00`) is refused: `Date.parse` would roll it over into another one.
 */
export function parseTime(raw: string): number | null {
  if (/^\d{1,15}$/.test(raw)) return Number(raw);
  const parts = /^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2})[\d:.]*(Z|[+-]\d{2}:?\d{2})?)?$/.exec(raw);
  if (!parts) return null;
  const [year, month, day, hour] = parts.slice(1, 5).map(Number);
  const daysInMonth = new Date(Date.UTC(year, month, 0)).getUTCDate();
  if (month < 1 || month > 12 || day < 1 || day > daysInMonth || (parts[4] !== undefined && hour > 23)) return null;
  const hasZone = /(Z|[+-]\d{2}:?\d{2})$/.test(raw) && raw.length > 10;
  const text = raw.length === 10 ? `${raw}T00:00:00Z` : hasZone ? raw : `${raw.replace(' ', 'T')}Z`;
  const ms = Date.parse(text);
  return Number.isFinite(ms) ? ms : null;
}

/** Exponential backoff: `minMs` at attempt 0, doubled each attempt, never past `maxMs`. */
export function backoffMs(attempt: number, minMs: number, maxMs: number): number {
  return Math.min(maxMs, minMs * 2 ** Math.min(Math.max(0, attempt), 30));
}

/** A half-open span [from, to) of epoch ms. */
export type Span = [number, number];

/** What of `spans` lies outside every one of `holes`. */
export function subtract(spans: readonly Span[], holes: readonly Span[]): Span[] {
  let out = spans.filter(([a, b]) => b > a);
  for (const [ha, hb] of holes) {
    out = out.flatMap(([a, b]): Span[] => {
      if (hb <= a || ha >= b) return [[a, b]];
      return (
        [
          [a, Math.min(b, ha)],
          [Math.max(a, hb), b],
        ] as Span[]
      ).filter(([x, y]) => y > x);
    });
  }
  return out;
}
