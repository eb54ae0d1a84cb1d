"""The package installs with pip from its directory, without build
isolation and without any index (its backend needs nothing but the
standard library), and imports from outside the repository."""

import os
import subprocess
import sys
import unittest

from . import harness


class InstallTest(unittest.TestCase):
    def test_pip_installs_it_and_it_imports_from_elsewhere(self) -> None:
        if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode != 0:
            if os.environ.get("CI") == "true":
                self.fail("pip is not available to %s (CI=true: failing, not skipping)" % sys.executable)
            self.skipTest("pip is not available to " + sys.executable)
        target = harness.tempdir()
        r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-build-isolation", "--no-index",
                            "--no-deps", "--target", target, harness.CLIENT_DIR], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        elsewhere = harness.tempdir()
        check = ("import idemgate\n"
                 "print(idemgate.__file__)\n"
                 "print(idemgate.__version__)\n"
                 "print(idemgate.canonical({'b': 1, 'a': [1.0, 'x']}).decode())\n")
        r = subprocess.run([sys.executable, "-c", check], cwd=elsewhere, capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=target))
        self.assertEqual(r.returncode, 0, r.stderr)
        where, version, canon = r.stdout.splitlines()
        self.assertTrue(where.startswith(target), where)
        self.assertRegex(version, r"^\d+\.\d+\.\d+$")
        self.assertEqual(canon, '{"a":[1,"x"],"b":1}')
        self.assertTrue(os.path.isdir(os.path.join(target, "idemgate-%s.dist-info" % version)))
        # Typed, and says so (PEP 561): a type checker reads its annotations.
        self.assertTrue(os.path.isfile(os.path.join(target, "idemgate", "py.typed")), "no py.typed installed")


if __name__ == "__main__":
    unittest.main()
