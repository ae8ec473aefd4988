"""The engine side of bench/ready.sh: what a replica does before it serves.
Loads its JIT extension (torch.utils.cpp_extension.load: compiles unless the
extensions directory holds a build of the same source), reads its autotune
table, and takes every tensor of its model into torch (a copy, as to the
device). Prints how many tensors and whether it compiled."""

import glob
import json
import os
import sys
import time

model_dir, ext_src, table_glob = sys.argv[1], sys.argv[2], sys.argv[3]
import torch
import torch.utils.cpp_extension as ce
from seedd._tensors import tensors_of

ext_dir = os.environ["TORCH_EXTENSIONS_DIR"]
built = glob.glob(os.path.join(ext_dir, "seedd_ready", "*.so"))
ext = ce.load(name="seedd_ready", sources=[ext_src])
assert ext.add(torch.zeros(2)).tolist() == [1.0, 1.0]
tables = glob.glob(table_glob)
assert tables, "no autotune table at %s" % table_glob
with open(tables[0]) as f:
    assert isinstance(json.load(f), dict)
n = 0
for top, dirs, names in os.walk(model_dir):
    dirs[:] = sorted(d for d in dirs if not d.startswith("."))
    for name in sorted(names):
        if name.endswith(".safetensors"):
            for _, t in tensors_of(os.path.join(top, name)):
                t.clone()
                n += 1
print("engine ready: %d tensors, extension %s" % (n, "prebuilt" if built else "compiled"))
