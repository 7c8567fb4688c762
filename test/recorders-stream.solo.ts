// Two recorders, each killed with kill -9 for a minute in turn, four times, the stand-in's faults
// off: the record merged in the bucket has every change of the venues' truth and no downtime gap.
// In make test's solo slot (see recorders-faults.solo.ts).
import t from 'tap';
import { killEachInTurn } from './recordersrun.js';

t.test('kill -9 of each recorder in turn: the record has every change and no downtime gap', (t) =>
  killEachInTurn(t, { bucket: 'pmh-streams' }),
);
