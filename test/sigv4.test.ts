// SigV4 against AWS's own documented example (S3 API reference, "Signature Calculations for the
// Authorization Header", GET Object with a Range), and the bucket layout's keys. The real server
// (Ceph's RADOS Gateway) checks the rest in test/bucket.test.ts.
import t from 'tap';
import { EMPTY_SHA256, canonicalQuery, sign, uriEncode } from '../src/bucket/sigv4.js';
import { commitKey, dataKey, manifestKey, partitionOfManifestKey } from '../src/bucket/layout.js';
import { loadConfig } from '../src/config.js';

const creds = { accessKeyId: 'AKIAIOSFODNN7EXAMPLE', secretAccessKey: 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY', region: 'us-east-1' };

t.test("AWS's GET Object example signs to the documented signature", async (t) => {
  const headers = sign(
    {
      method: 'GET',
      host: 'examplebucket.s3.amazonaws.com',
      path: '/test.txt',
      headers: { Range: 'bytes=0-9' },
      payloadHash: EMPTY_SHA256,
    },
    creds,
    new Date(Date.UTC(2013, 4, 24)),
  );
  t.equal(
    headers.authorization,
    'AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41',
  );
  t.equal(headers['x-amz-date'], '20130524T000000Z');
  t.equal(headers['x-amz-content-sha256'], 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855');
});

t.test('keys and queries are encoded as S3 canonicalises them', async (t) => {
  t.equal(
    uriEncode('/b/books/venue=polymarket/date=2026-11-25/hour=03/part 1.parquet', true),
    '/b/books/venue%3Dpolymarket/date%3D2026-11-25/hour%3D03/part%201.parquet',
  );
  t.equal(uriEncode("a/b*'()!", false), 'a%2Fb%2A%27%28%29%21');
  t.equal(
    canonicalQuery({ prefix: 'p/x', 'list-type': '2', 'continuation-token': 'a+b=' }),
    'continuation-token=a%2Bb%3D&list-type=2&prefix=p%2Fx',
  );
});

t.test('the bucket layout: data at the lake path, manifests and commits under _-names', async (t) => {
  const p = {
    dataset: 'books' as const,
    venue: 'polymarket' as const,
    coin: 'btc',
    window: '5m' as const,
    hour: Date.UTC(2026, 10, 25, 3),
  };
  t.equal(
    dataKey('lake/', 'books/venue=polymarket/coin=btc/window=5m/date=2026-11-25/hour=03/x.parquet'),
    'lake/books/venue=polymarket/coin=btc/window=5m/date=2026-11-25/hour=03/x.parquet',
  );
  t.equal(manifestKey('lake/', p), 'lake/_manifest/books/venue=polymarket/coin=btc/window=5m/date=2026-11-25/hour=03.json');
  t.same(partitionOfManifestKey('lake/', manifestKey('lake/', p)), p);
  t.equal(partitionOfManifestKey('lake/', 'lake/books/x.json'), null);
  const a = commitKey('', 1_000);
  const b = commitKey('', 20_000);
  t.ok(a < b, 'commit keys sort by time');
  t.match(a, /^_commits\/000000000001000-[0-9a-f]{8}\.json$/);
});

t.test('bucket and capture-feed settings are validated and the prefix normalised', async (t) => {
  const env = { S3_BUCKET: 'lake', S3_ACCESS_KEY_ID: 'id', S3_SECRET_ACCESS_KEY: 'secret', S3_PREFIX: '/archive' };
  const c = loadConfig(env);
  t.same(
    { ...c.bucket, secretAccessKey: 'hidden' },
    {
      endpoint: 'https://s3.us-east-1.amazonaws.com',
      region: 'us-east-1',
      bucket: 'lake',
      prefix: 'archive/',
      accessKeyId: 'id',
      secretAccessKey: 'hidden',
      timeoutMs: 30_000,
    },
  );
  t.equal(loadConfig({}).bucket, null);
  t.throws(() => loadConfig({ S3_BUCKET: 'lake' }), /without S3_ACCESS_KEY_ID/);
  t.throws(() => loadConfig({ ...env, S3_BUCKET: 'Not_A_Bucket' }), /not a bucket name/);
  t.throws(() => loadConfig({ LAKE_SOURCE: 'bucket' }), /needs S3_BUCKET/);
  t.throws(() => loadConfig({ CAPTURE_FEED_URL: 'http://capture:9090' }), /need CAPTURE_FEED_SECRET/);
  t.throws(() => loadConfig({ CAPTURE_FEED_PORT: '9090', CAPTURE_FEED_SECRET: 'short' }), /16 characters/);
  t.same(loadConfig({ CAPTURE_FEED_PORT: '9090', CAPTURE_FEED_SECRET: 'a-long-enough-secret' }).captureFeed, {
    port: 9090,
    host: '127.0.0.1',
    secret: 'a-long-enough-secret',
    urls: [],
  });
  t.same(
    loadConfig({ CAPTURE_FEED_URL: 'http://rec-a:9090/, http://rec-b:9090', CAPTURE_FEED_SECRET: 'a-long-enough-secret' }).captureFeed.urls,
    ['http://rec-a:9090', 'http://rec-b:9090'],
    'one feed per recorder, comma-separated',
  );
  t.throws(() => loadConfig({ CAPTURE_FEED_URL: 'http://rec-a:9090,nope', CAPTURE_FEED_SECRET: 'a-long-enough-secret' }), /not a URL/);
});
