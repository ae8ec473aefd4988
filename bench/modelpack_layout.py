"""Writes a generated model as ModelPack artifacts in OCI image layouts, for the
origin benches: DIR/v1 (FILES raw layers of MIB/FILES random bytes each, plus
config.json, paths in org.cncf.model.filepath) and, with --revision, DIR/v2 (the
third file rewritten). Each layout's one manifest is tagged "latest".
Usage: modelpack_layout.py DIR MIB FILES [--revision]"""
import hashlib
import json
import os
import sys


def layout(d, files):
    os.makedirs(d + "/blobs/sha256")

    def blob(b):
        h = hashlib.sha256(b).hexdigest()
        with open(f"{d}/blobs/sha256/{h}", "wb") as f:
            f.write(b)
        return {"digest": "sha256:" + h, "size": len(b)}

    layers = []
    for p, b in sorted(files.items()):
        layer = blob(b)
        layer["mediaType"] = "application/vnd.cncf.model.weight.v1.raw"
        layer["annotations"] = {"org.cncf.model.filepath": p}
        layers.append(layer)
    cfg = blob(json.dumps({"descriptor": {"name": "bench"}}).encode())
    cfg["mediaType"] = "application/vnd.cncf.model.config.v1+json"
    m = blob(json.dumps({"schemaVersion": 2,
                         "mediaType": "application/vnd.oci.image.manifest.v1+json",
                         "config": cfg, "layers": layers}).encode())
    m["mediaType"] = "application/vnd.oci.image.manifest.v1+json"
    m["annotations"] = {"org.opencontainers.image.ref.name": "latest"}
    with open(d + "/oci-layout", "w") as f:
        f.write('{"imageLayoutVersion":"1.0.0"}')
    with open(d + "/index.json", "w") as f:
        json.dump({"schemaVersion": 2, "manifests": [m]}, f)


def main():
    work, mib, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    size = mib * (1 << 20) // n
    names = [f"model-{i + 1:05d}-of-{n:05d}.bin" for i in range(n)]
    files = {name: os.urandom(size) for name in names}
    files["config.json"] = b'{"architectures": ["Bench"]}'
    layout(os.path.join(work, "v1"), files)
    if "--revision" in sys.argv[4:]:
        files[names[min(2, n - 1)]] = os.urandom(size)
        layout(os.path.join(work, "v2"), files)


main()
