// The admission policy alone: which request a full queue refuses, and who a freed slot goes to.
import t from 'tap';
import { Admission } from '../src/api/admission.js';

const paid = (id: string) => ({ id, weight: 1 });
const settled = async <T>(p: Promise<T>) =>
  p.then(
    (v) => ({ ok: true as const, v }),
    (err: { status?: number }) => ({ ok: false as const, status: err.status }),
  );

t.test(
  'a key with nothing in the system takes a full queue’s place from a key holding several, whatever their arrival rates',
  async (t) => {
    const admission = new Admission({ limit: 1, queue: 2, waitMs: 60_000 });
    const running = await admission.enter(undefined, paid('pusher'));
    const pushed = [admission.enter(undefined, paid('pusher')), admission.enter(undefined, paid('pusher'))].map(settled);
    // The bystander has asked far more often lately than the pusher (a starved client pushes slowly):
    // what it holds, nothing, is what counts.
    for (let i = 0; i < 50; i++) (admission as unknown as { arrived(id: string): void }).arrived('bystander');
    const bystander = admission.enter(undefined, paid('bystander'));
    const refused = await pushed[1];
    t.same(refused, { ok: false, status: 503 }, "the pusher's newest waiter is refused for it");
    t.equal(admission.queued, 2);
    // Both now hold one waiting and run nothing: the slot goes to the one not refused lately (the
    // bystander, however often it asked), then the pusher's older waiter.
    running();
    const admitted = await bystander;
    t.type(admitted, 'function', 'the bystander first');
    admitted();
    const first = await pushed[0];
    t.ok(first.ok, "then the pusher's older waiter");
    if (first.ok) first.v();
    t.equal(admission.inFlight, 0);
    t.equal(admission.shed, 1);
  },
);

t.test('between keys holding alike, the one asking more lately gives way; a key never evicts its own', async (t) => {
  const admission = new Admission({ limit: 1, queue: 1, waitMs: 60_000 });
  const running = await admission.enter(undefined, paid('a'));
  for (let i = 0; i < 20; i++) (admission as unknown as { arrived(id: string): void }).arrived('b');
  const b = settled(admission.enter(undefined, paid('b')));
  // c holds nothing: b's waiter (b holds one) gives way.
  const c = settled(admission.enter(undefined, paid('c')));
  t.same(await b, { ok: false, status: 503 });
  // c again, now holding one waiting: refused, never evicting its own.
  t.same(await settled(admission.enter(undefined, paid('c'))), { ok: false, status: 503 });
  running();
  const admitted = await c;
  t.ok(admitted.ok);
  if (admitted.ok) admitted.v();
});

t.test('among keys holding alike, one refused lately gives way first, however slowly it asks', async (t) => {
  const admission = new Admission({ limit: 1, queue: 2, waitMs: 60_000 });
  const internals = admission as unknown as { arrived(id: string): void; refuse(id: string): never };
  const running = await admission.enter(undefined, paid('runner'));
  // The bystander asks often and serially (one at a time); the pusher was refused before.
  for (let i = 0; i < 50; i++) internals.arrived('bystander');
  t.throws(() => internals.refuse('pusher'));
  const bystander = settled(admission.enter(undefined, paid('bystander')));
  const pushed = settled(admission.enter(undefined, paid('pusher')));
  // A newcomer holding nothing: a waiter gives way, the refused pusher's, not the bystander's.
  const newcomer = settled(admission.enter(undefined, paid('newcomer')));
  t.same(await pushed, { ok: false, status: 503 }, "the refused key's waiter gives way");
  // Neither refused: the slots go to the one asking less lately first, then the other; neither is shed.
  running();
  const first = await newcomer;
  t.ok(first.ok, 'the newcomer (asking less lately) first');
  if (first.ok) first.v();
  const second = await bystander;
  t.ok(second.ok, 'then the bystander, never shed');
  if (second.ok) second.v();
});
