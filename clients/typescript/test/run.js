// The suite's entry point (npm test, make typescript): builds idemgate once
// from this repository (unless IDEMGATE_BIN, or IDEMGATE_TEST_BINARY as
// make test sets it, names one), then runs every test file with Node's
// own test runner, two at a time, each file a process of its own. Without
// go the suite skips loudly, and under CI=true it fails.

import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { givenBinary } from './given-binary.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..', '..', '..');
const ci = process.env.CI === 'true';

if (!fs.existsSync(path.join(here, '..', 'node_modules', 'ai'))) {
  const msg = 'clients/typescript/node_modules is missing: run npm ci there (.ci/setup does)';
  if (ci) {
    console.error(`${msg} (CI=true: failing, not skipping)`);
    process.exit(1);
  }
  console.error(`*** ${msg}; the framework tests will fail`);
}

let bin = process.env.IDEMGATE_BIN || givenBinary();
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'idemgate-ts-bin-'));
if (!bin) {
  if (spawnSync('go', ['version']).status !== 0) {
    const msg = "go is not installed: the TypeScript client's tests need it to build idemgate";
    if (ci) {
      console.error(`${msg} (CI=true: failing, not skipping)`);
      process.exit(1);
    }
    console.error(`\n*** SKIP: ${msg}`);
    process.exit(0);
  }
  bin = path.join(tmp, 'idemgate');
  const b = spawnSync('go', ['build', '-o', bin, './cmd/idemgate'], { cwd: repo, stdio: 'inherit' });
  if (b.status !== 0) process.exit(b.status || 1);
}

const files = process.argv.slice(2).length
  ? process.argv.slice(2)
  : fs.readdirSync(here).filter((f) => f.endsWith('.test.js')).sort().map((f) => path.join(here, f));
const r = spawnSync(process.execPath, ['--test', '--test-concurrency=2', ...files], {
  stdio: 'inherit', env: { ...process.env, IDEMGATE_BIN: bin },
});
fs.rmSync(tmp, { recursive: true, force: true });
process.exit(r.status ?? 1);
