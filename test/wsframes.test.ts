import http from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import WebSocket, { WebSocketServer } from 'ws';
import { textFrames } from '../src/replay/wsframes.js';

t.test('frames written as one buffer are what a ws client reads: every length form, multibyte text', async (t) => {
  const texts = [
    '',
    'a',
    'x'.repeat(125),
    'x'.repeat(126),
    'é'.repeat(63),
    'é'.repeat(64),
    'y'.repeat(65_535),
    'z'.repeat(65_536),
    '{"€":"✓"}',
  ];
  const wss = new WebSocketServer({ noServer: true });
  const server = http.createServer();
  server.on('upgrade', (req, socket, head) =>
    wss.handleUpgrade(req, socket, head, (ws) => {
      // Written to the upgraded socket beside ws's own frames, as the replay server does.
      ws.send('before');
      socket.write(textFrames(texts));
      ws.close(1000, 'done');
    }),
  );
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => server.close());
  const got: string[] = [];
  await new Promise<void>((resolve, reject) => {
    const ws = new WebSocket(`ws://127.0.0.1:${(server.address() as AddressInfo).port}/`);
    ws.on('message', (data: Buffer, binary: boolean) => {
      t.notOk(binary, 'a text frame');
      got.push(data.toString());
    });
    ws.on('close', (code) => (code === 1000 ? resolve() : reject(new Error(`closed ${code}`))));
    ws.on('error', reject);
  });
  t.same(got, ['before', ...texts]);
});
