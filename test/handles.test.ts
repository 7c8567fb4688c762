// The serving copies' open files: a file read again is not opened again, no more than the bound
// stay open, a handle in use is never closed under its read (evicted, forgotten or at the end), a
// file forgotten after it was replaced is read anew, and a missing one is not remembered.
import fs from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { FileHandles } from '../src/pages/handles.js';
import { testdir } from './helpers.js';

const read = async (handle: fs.FileHandle) => {
  const { size } = await handle.stat();
  const out = Buffer.alloc(size);
  await handle.read(out, 0, size, 0);
  return out.toString();
};

/** Whether the handle closes (a close takes a trip through the threadpool; bounded only against a hang). */
const closes = async (handle: fs.FileHandle) => {
  for (let waited = 0; handle.fd !== -1 && waited < 30_000; waited += 5) await new Promise((r) => setTimeout(r, 5));
  return handle.fd === -1;
};

t.test('kept open for the next read, at most the bound, none closed under a read', async (t) => {
  const dir = testdir(t);
  const files = await Promise.all(
    [0, 1, 2, 3].map(async (i) => {
      const f = path.join(dir, `copy${i}`);
      await fs.writeFile(f, `copy ${i}`);
      return f;
    }),
  );
  const handles = new FileHandles(2);
  const a = await handles.lease(files[0]);
  const again = await handles.lease(files[0]);
  t.equal(again.handle, a.handle, 'a file leased twice is opened once');
  t.equal(handles.opened, 1);
  again.release();
  a.release();
  a.release();
  // files[0] is evicted by the third file while a lease holds it.
  const held = await handles.lease(files[0]);
  t.equal(held.handle, a.handle, 'released, it stays open for the next read');
  for (const f of files.slice(1, 3)) (await handles.lease(f)).release();
  t.equal(handles.size, 2, 'no more than the bound kept');
  t.equal(await read(held.handle), 'copy 0', 'an evicted handle still reads while it is leased');
  held.release();
  t.ok(await closes(held.handle), 'and is closed when it is released');
  const reopened = await handles.lease(files[0]);
  t.not(reopened.handle, held.handle, 'an evicted file is opened again');
  reopened.release();
  t.equal(handles.opened, 4);

  const kept = await handles.lease(files[3]);
  handles.close();
  t.equal(handles.size, 0, 'close lets go of every handle');
  t.equal(await read(kept.handle), 'copy 3', 'one leased still reads');
  kept.release();
  t.ok(await closes(kept.handle), 'and closes at its release');
  t.ok(await closes(reopened.handle), 'one not leased is closed');
});

t.test('a file forgotten is read anew; a missing file is not remembered', async (t) => {
  const dir = testdir(t);
  const file = path.join(dir, 'copy');
  const handles = new FileHandles(8);
  await t.rejects(handles.lease(file), { code: 'ENOENT' }, 'a missing file rejects');
  t.equal(handles.size, 0, 'and is not kept');
  await fs.writeFile(file, 'damaged');
  const old = await handles.lease(file);
  t.equal(await read(old.handle), 'damaged');
  // Written again under its name, as a damaged copy is: atomically, by rename.
  await fs.writeFile(`${file}.tmp`, 'written again');
  await fs.rename(`${file}.tmp`, file);
  const stale = await handles.lease(file);
  t.equal(await read(stale.handle), 'damaged', 'until forgotten, a kept handle reads the file it opened');
  stale.release();
  handles.forget(file);
  t.equal(await read(old.handle), 'damaged', 'a forgotten handle still reads while leased');
  old.release();
  t.ok(await closes(old.handle), 'and closes at its release');
  const fresh = await handles.lease(file);
  t.equal(await read(fresh.handle), 'written again', 'the next lease opens the file anew');
  fresh.release();
});
