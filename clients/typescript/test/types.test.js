// The hand-written declarations hold for what a TypeScript user writes
// (test/types/consumer.ts). The adapters return the type they are given,
// so the frameworks' own declarations (heavy to check) are left out.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { PKG } from './harness.js';

test('the type declarations check with tsc --strict', () => {
  const tsc = path.join(PKG, 'node_modules', 'typescript', 'bin', 'tsc');
  const r = spawnSync(process.execPath, [tsc, '-p', path.join(PKG, 'test', 'types')], { cwd: PKG, encoding: 'utf8' });
  assert.equal(r.status, 0, r.stdout + r.stderr);
});
