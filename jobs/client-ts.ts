// make client-ts: regenerates the TypeScript client's types (clients/typescript/src/api.d.ts)
// from the OpenAPI document the route table produces, with openapi-typescript.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { openApiDocument } from '../src/api/openapi.js';
import type { RouteDeps } from '../src/api/route.js';
import { buildRoutes } from '../src/api/routes.js';

// Building the table reads no dependency; only handlers do, and none runs here.
const document = openApiDocument(buildRoutes({} as RouteDeps));
const tmp = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'openapi-')), 'openapi.json');
fs.writeFileSync(tmp, JSON.stringify(document));
const out = path.resolve('clients/typescript/src/api.d.ts');
execFileSync(path.resolve('node_modules/.bin/openapi-typescript'), [tmp, '-o', out], { stdio: 'inherit' });
fs.rmSync(path.dirname(tmp), { recursive: true });
