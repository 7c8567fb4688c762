// The API reference page: Swagger UI (the `swagger-ui-dist` package, served from this process,
// no CDN) over /v3/openapi.json. A key pasted into its Authorize dialog travels as a Bearer
// header, never in a URL, and is not kept after the tab closes.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import type Koa from 'koa';

const require = createRequire(import.meta.url);

export const DOCS_PATH = '/v3/docs';

const HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Prediction-market history: API reference</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="${DOCS_PATH}/assets/favicon-32x32.png">
<link rel="stylesheet" href="${DOCS_PATH}/assets/swagger-ui.css">
</head>
<body>
<div id="reference"></div>
<script src="${DOCS_PATH}/assets/swagger-ui-bundle.js"></script>
<script src="${DOCS_PATH}/init.js"></script>
</body>
</html>
`;

const INIT = `window.ui = SwaggerUIBundle({
  url: '/v3/openapi.json',
  dom_id: '#reference',
  deepLinking: true,
  tryItOutEnabled: true,
  persistAuthorization: false,
  displayRequestDuration: true,
});
`;

// Scripts and styles from this origin only; Swagger UI sets inline styles, and shows data: images.
const CSP = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'";

interface Page {
  type: string;
  body: Buffer;
  csp?: boolean;
}

function assets(): Map<string, Page> {
  const dir = path.dirname(require.resolve('swagger-ui-dist/package.json'));
  const files: Record<string, string> = { 'swagger-ui.css': 'text/css; charset=utf-8', 'swagger-ui-bundle.js': 'text/javascript; charset=utf-8', 'favicon-32x32.png': 'image/png' };
  const pages = new Map<string, Page>([
    [DOCS_PATH, { type: 'text/html; charset=utf-8', body: Buffer.from(HTML), csp: true }],
    [`${DOCS_PATH}/init.js`, { type: 'text/javascript; charset=utf-8', body: Buffer.from(INIT) }],
  ]);
  for (const [name, type] of Object.entries(files)) pages.set(`${DOCS_PATH}/assets/${name}`, { type, body: fs.readFileSync(path.join(dir, name)) });
  return pages;
}

/** Serves the reference page and its assets (read once at start); everything else passes on. */
export function docsPages(): Koa.Middleware {
  const pages = assets();
  return async (ctx, next) => {
    const page = (ctx.method === 'GET' || ctx.method === 'HEAD') ? pages.get(ctx.path) : undefined;
    if (!page) return next();
    ctx.state.routeId = 'docs';
    ctx.type = page.type;
    ctx.set('Cache-Control', page.csp ? 'no-cache' : 'public, max-age=3600');
    ctx.set('X-Content-Type-Options', 'nosniff');
    if (page.csp) ctx.set('Content-Security-Policy', CSP);
    ctx.body = page.body;
  };
}
