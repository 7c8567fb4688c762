// A tap plugin in place of @tapjs/typescript (ts-node): that one loads the TypeScript compiler into
// every test process and transpiles every source file with it: a quarter of the suite's CPU on two
// cores. tsx (what `make` uses) would be as fast, but it prints each file on one line, and line
// coverage of one-line code counts one statement per file. So: esbuild, lines kept, maps inline.
exports.importLoader = 'tap-esbuild/register.mjs';
exports.loader = 'tap-esbuild/hooks.mjs';
exports.preload = true;
exports.testFileExtensions = ['ts'];
