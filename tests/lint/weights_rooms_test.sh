#!/bin/bash
# src/kinds/weights/ is split into rooms by what a file may touch:
#   proto/  the swarm protocol's cores and the records' codec: each other only
#           (checked by proto_is_sans_io_test.sh);
#   files/  the disk (manifest, staging, destination, digests, local copies):
#           proto/, files/, common/ and the public headers; no socket, no peer;
#   net/    the drivers (fetcher, server, registry): anything below the kind,
#           never the kind (weight_shards_kind.h) or the daemon;
#   the folder itself: the kind, the one pull pipeline, data_plane.h (the
#           protocol's text and the kinds' names, which includes nothing).
# A file that reaches up or sideways fails here, naming the line.
set -euo pipefail
dir=$1/src/kinds/weights
[[ -d $dir/files && -d $dir/net && -d $dir/proto ]] || { echo "no rooms under $dir"; exit 1; }
fail=0
check() {  # room, allowed-prefix regex
  local room=$1 allowed=$2 bad
  bad=$(grep -nE '#include "' "$dir/$room"/*.h "$dir/$room"/*.cc | grep -vE "#include \"($allowed)" || true)
  if [[ -n $bad ]]; then
    echo "$room/ may include only ($allowed):"
    echo "$bad"
    fail=1
  fi
}
check files 'kinds/weights/(files|proto)/|common/|seedd/'
check net 'kinds/weights/(files|proto|net)/|kinds/weights/data_plane\.h|common/|seedd/|transport/|stores/|wire/'
if grep -nE '#include "' "$dir/data_plane.h"; then
  echo "data_plane.h names the protocol and includes nothing of the project"
  fail=1
fi
loose=$(find "$dir" -maxdepth 1 -type f \( -name '*.h' -o -name '*.cc' \) -printf '%f\n' | sort |
  grep -vxE 'data_plane\.h|weight_shards_kind\.(h|cc)|pull\.(h|cc)|progress_log\.h' || true)
if [[ -n $loose ]]; then
  echo "files outside a room (put each in proto/, files/ or net/):"
  echo "$loose"
  fail=1
fi
[[ $fail == 0 ]] || exit 1
echo "ok: files/ $(ls "$dir/files" | wc -l), net/ $(ls "$dir/net" | wc -l), proto/ $(ls "$dir/proto" | wc -l) files, each in its room"
