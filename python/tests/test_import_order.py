"""Importing kvserve before torch, or torch before kvserve, in a fresh
interpreter: both work and leave both usable (kvserve's extension exports
only its entry point, so nothing it links can stand in for a library torch
loads later; on the GPU image the kvserve-first order used to abort inside
torch's import). Each order runs in its own process, as a user's script
would."""
from __future__ import annotations

import os
import subprocess
import sys
import unittest

try:
    import torch  # noqa: F401  (only to know whether the test can run)
except ImportError:
    torch = None

SCRIPT = """
import sys
order = sys.argv[1].split(",")
for name in order:
    __import__(name)
import kvserve, torch
# Both are usable after the import: a tensor goes through a kvserve frame.
kv = torch.arange(2 * 2 * 1 * 3 * 32, dtype=torch.float32).reshape(2, 2, 1, 3, 32)
frame = kvserve.encode(kv, "none")
out = kvserve.decode(frame)
assert torch.equal(torch.as_tensor(out), kv), "round trip differs"
if torch.cuda.is_available() and kvserve.cuda_available():
    dev = kv.to("cuda", torch.bfloat16)
    back = kvserve.decode(kvserve.encode(dev, "none"), out=torch.empty_like(dev))
    assert torch.equal(back, dev), "device round trip differs"
print("ok", ",".join(order))
"""


@unittest.skipIf(torch is None, "torch not installed")
class ImportOrderTest(unittest.TestCase):
    def run_order(self, order: str) -> None:
        env = dict(os.environ)
        result = subprocess.run([sys.executable, "-c", SCRIPT, order], env=env, capture_output=True, text=True,
                                timeout=300)
        self.assertEqual(result.returncode, 0,
                         f"import order {order}: exit {result.returncode}\n{result.stdout}\n{result.stderr}")
        self.assertIn(f"ok {order}", result.stdout)

    def test_kvserve_first(self):
        self.run_order("kvserve,torch")

    def test_torch_first(self):
        self.run_order("torch,kvserve")


if __name__ == "__main__":
    unittest.main()
