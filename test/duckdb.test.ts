// Statements fail with DuckDB's error type attached, and "the lake cannot be read" is decided
// on that type, not on the wording of a message.
import fs from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { Duck, DuckError } from '../src/lake/duckdb.js';
import { sqlPath } from '../src/lake/sql.js';
import { testdir } from './helpers.js';

const duck = await Duck.open(1);
t.teardown(() => duck.close());
const dir = testdir(t);

async function failure(sql: string): Promise<DuckError> {
  try {
    await duck.rows(sql);
  } catch (err) {
    if (err instanceof DuckError) return err;
    throw err;
  }
  throw new Error(`${sql} did not fail`);
}

t.test('missing and corrupt files are unreadable lake; bad SQL is not', async (t) => {
  const missing = await failure(`SELECT * FROM read_parquet(${sqlPath(path.join(dir, 'nope.parquet'))})`);
  t.same([missing.type, missing.unreadable], ['IO', true], 'a missing file');
  const corrupt = path.join(dir, 'corrupt.parquet');
  await fs.writeFile(corrupt, 'not parquet at all, just text');
  const bad = await failure(`SELECT * FROM read_parquet(${sqlPath(corrupt)})`);
  t.ok(bad.unreadable, `a corrupt file (${bad.type}): ${bad.message.slice(0, 80)}`);
  const parser = await failure('SELEC 1');
  t.same([parser.type, parser.unreadable], ['Parser', false], 'a statement that is wrong is a fault of ours, not of the lake');
  const binder = await failure('SELECT no_such_column FROM range(1)');
  t.equal(binder.unreadable, false);
  t.ok(binder.cause instanceof Error, 'the original error is kept as the cause');
});

t.test('shutdown interrupts running statements, waits for them, then closes (a close under one deadlocked exit)', async (t) => {
  const own = await Duck.open(2);
  const forked = await own.fork(1);
  const long = forked.rows('SELECT count(*) AS n FROM range(10000000000) a');
  const quick = own.rows('SELECT 1 AS one');
  // Running, not merely queued: shutdown must interrupt it rather than wait out ten billion rows.
  while (forked.pending === 0) await new Promise((r) => setTimeout(r, 5));
  await new Promise((r) => setTimeout(r, 50));
  // Expected before the shutdown: the statement may be interrupted while the shutdown is still
  // waiting for the instance, and a rejection nothing awaits yet is an unhandled one.
  const interrupted = t.rejects(long, /interrupt/i, 'the running statement was interrupted');
  await own.shutdown();
  await interrupted;
  t.same(await quick, [{ one: 1 }], 'a statement that finished kept its result');
  await t.rejects(own.rows('SELECT 1'), 'the instance is closed after');
});

t.test('close waits for every lane, forks included, and refuses statements after (a close under one crashed the process)', async (t) => {
  const own = await Duck.open(1);
  const fork = await own.fork(1);
  const running = fork.rows('SELECT count(*) AS n FROM range(10000000000) a');
  while (fork.pending === 0) await new Promise((r) => setTimeout(r, 5));
  await new Promise((r) => setTimeout(r, 50));
  const settled = Promise.allSettled([running]);
  const closing = own.close();
  // Queued on the fork while the lanes drain: run (or interrupted) before the instance goes, never under its close.
  const queued = Promise.allSettled([fork.rows('SELECT 1 AS one')]);
  await closing;
  const [[first], [second]] = await Promise.all([settled, queued]);
  t.equal(first.status, 'rejected', 'the running statement was interrupted');
  t.ok(second.status === 'fulfilled' || /interrupt/i.test(String(second.reason)), 'the queued one ran or was interrupted');
  await t.rejects(fork.rows('SELECT 1'), /closed/, 'a statement after the close is refused');
});
