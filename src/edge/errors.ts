// The one error type routes throw; the error middleware renders it as the contract's envelope.
export type ErrorCode =
  | 'INVALID_PARAMETER'
  | 'INVALID_CURSOR'
  | 'INVALID_RANGE'
  | 'AUTH_MISSING'
  | 'AUTH_INVALID'
  | 'PLAN_REQUIRED'
  | 'NOT_FOUND'
  | 'MARKET_NOT_FOUND'
  | 'METHOD_NOT_ALLOWED'
  | 'RANGE_NOT_SATISFIABLE'
  | 'RATE_LIMITED'
  | 'INTERNAL_ERROR'
  | 'UNAVAILABLE'
  | 'PAYLOAD_TOO_LARGE'
  | 'HEADERS_TOO_LARGE';

export interface ErrorDetail {
  param?: string;
  message: string;
}

export class ApiError extends Error {
  override name = 'ApiError';
  constructor(
    readonly status: number,
    readonly code: ErrorCode,
    message: string,
    readonly details: ErrorDetail[] = [],
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }
}

export const STATUS_OF: Record<ErrorCode, number> = {
  INVALID_PARAMETER: 400,
  INVALID_CURSOR: 400,
  INVALID_RANGE: 400,
  AUTH_MISSING: 401,
  AUTH_INVALID: 401,
  PLAN_REQUIRED: 403,
  NOT_FOUND: 404,
  MARKET_NOT_FOUND: 404,
  METHOD_NOT_ALLOWED: 405,
  RANGE_NOT_SATISFIABLE: 416,
  PAYLOAD_TOO_LARGE: 413,
  HEADERS_TOO_LARGE: 431,
  RATE_LIMITED: 429,
  INTERNAL_ERROR: 500,
  UNAVAILABLE: 503,
};

export function fail(code: ErrorCode, message: string, details: ErrorDetail[] = [], headers: Record<string, string> = {}): never {
  throw new ApiError(STATUS_OF[code], code, message, details, headers);
}

/** Echoes a caller's value in a message: quoted, escaped, and cut short. */
export function echo(value: unknown): string {
  const text = JSON.stringify(typeof value === 'string' && value.length > 80 ? `${value.slice(0, 80)}...` : value) ?? 'undefined';
  return text;
}
