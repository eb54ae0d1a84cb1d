// The idemgate binary IDEMGATE_TEST_BINARY names, for run.js and the
// harness: make test builds bin/idemgate-test once for every suite. Set to
// anything but an executable file, a line says so and the tests build
// their own, as they do when it is unset.

import fs from 'node:fs';
import path from 'node:path';

/** IDEMGATE_TEST_BINARY's absolute path if it names an executable file, else null. */
export function givenBinary() {
  const given = process.env.IDEMGATE_TEST_BINARY;
  if (!given) return null;
  const bin = path.resolve(given);
  try {
    if (fs.statSync(bin).isFile()) {
      fs.accessSync(bin, fs.constants.X_OK);
      return bin;
    }
  } catch {
    // said below
  }
  console.error(`\nIDEMGATE_TEST_BINARY=${given} is not an executable file; building idemgate instead`);
  return null;
}
