// The replay session alone, with walks of its own making: when a fast replay may end.
import t from 'tap';
import { createClock } from '../src/clock.js';
import { type ReplayWalk, ReplaySession, SCHEDULE } from '../src/replay/session.js';

/** A walk sending `messages`, one an instant from `at`. */
function walk(messages: string[], at: number): ReplayWalk {
  let i = 0;
  return { next: () => (i < messages.length ? at + i : Infinity), take: (out) => void out.push(messages[i++]) };
}

t.test('as fast as possible, a replay does not end while an hour a schedule subscribed is still being read', async (t) => {
  const sent: string[] = [];
  const session = new ReplaySession(
    {
      from: 0,
      to: 3_600_000,
      speed: Infinity,
      playAt: null,
      clock: createClock(),
      frames: (m) => m,
      maxPerFrame: 64,
      maxMarkets: Infinity,
    },
    { send: (text, done) => (sent.push(text), done()) },
  );
  const done = session.run();
  // A topic's schedule: due at once, it subscribes the range's one hour, whose rows take a while to read
  // (a busy machine: longer than the 20 ms a replay settles after the client's subscription).
  let scheduled = false;
  session.subscribe(
    `${SCHEDULE}topic`,
    async () => {
      // Starved: the schedule comes after the client's subscription has settled.
      await new Promise((r) => setTimeout(r, 50));
      return {
        next: () => (scheduled ? Infinity : -Infinity),
        take: () => {
          scheduled = true;
          session.subscribe(
            'hour',
            async () => {
              await new Promise((r) => setTimeout(r, 100));
              return walk(['a', 'b', 'c'], 10);
            },
            false,
          );
        },
      };
    },
    false,
  );
  t.equal(await done, 'end');
  t.same(sent, ['a', 'b', 'c'], 'the hour is played whole before the end');
});
