// The controls an open replay takes, in either venue's socket: JSON frames the venues never send
// (`{"replay":"pause"}`, `{"replay":"resume"}`, `{"replay":"seek","to":…}`), validated (ajv) and
// each answered in order with the replay's messages; what the answer says, not how a venue frames it.
import { Ajv } from 'ajv';
import { parseTime } from '../time.js';
import type { ReplayRequest } from './request.js';
import type { ReplaySession } from './session.js';

export type ControlAnswer =
  { kind: 'replay_paused' | 'replay_resumed' | 'replay_seeked'; at: number } | { kind: 'replay_error'; message: string };

const ajv = new Ajv({ allErrors: false, strict: false });
const check = ajv.compile({
  type: 'object',
  required: ['replay'],
  properties: {
    replay: { enum: ['pause', 'resume', 'seek'] },
    to: { type: ['string', 'integer'] },
  },
  additionalProperties: false,
  if: { properties: { replay: { const: 'seek' } } },
  then: { required: ['to'] },
  else: { not: { required: ['to'] } },
});

/** Whether a client's frame is a replay control (it names `replay`), not one of the venue's frames. */
export function isControl(frame: unknown): boolean {
  return typeof frame === 'object' && frame !== null && !Array.isArray(frame) && 'replay' in frame;
}

/** Applies a control to the session; the answer says where the replay now stands, or exactly what was wrong (nothing changed). */
export function applyControl(session: ReplaySession, request: ReplayRequest, frame: unknown): ControlAnswer {
  if (!check(frame)) {
    const e = check.errors![0];
    const message =
      e.keyword === 'enum'
        ? 'replay must be "pause", "resume" or "seek"'
        : e.keyword === 'required'
          ? 'a seek needs "to": an ISO 8601 time or epoch milliseconds'
          : e.keyword === 'additionalProperties'
            ? `Unknown field "${String(e.params.additionalProperty).slice(0, 40)}"; a control takes replay and, to seek, to`
            : e.keyword === 'not'
              ? 'only a seek takes "to"'
              : 'to must be an ISO 8601 time or epoch milliseconds';
    return { kind: 'replay_error', message };
  }
  const { replay, to } = frame as { replay: 'pause' | 'resume' | 'seek'; to?: string | number };
  if (replay === 'pause') return { kind: 'replay_paused', at: session.pause() };
  if (replay === 'resume') return { kind: 'replay_resumed', at: session.resume() };
  const at = parseTime(String(to));
  if (at === null) return { kind: 'replay_error', message: 'to must be an ISO 8601 time or epoch milliseconds' };
  if (at < request.from || at >= request.to)
    return { kind: 'replay_error', message: `to must be within the replay's range, from ${request.from} to before ${request.to}` };
  return { kind: 'replay_seeked', at: session.seek(at) };
}
