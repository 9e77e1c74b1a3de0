#!/usr/bin/env bash
# docs/format.md's section table lists exactly the sections of src/index/sections.h, in
# the list's order, with the same element type, shape and residency (device or host):
# the list drives build, open and info, and this keeps the document from drifting from
# it. A section added to the list without its row in the document (or a row left for a
# section removed) fails here, naming the first difference.
set -u
. "$(dirname "$0")/lib.sh"
list=$(index_sections)
doc=$(awk '/^## Sections/ {f = 1; next} /^## / {f = 0} f && /^\| `/' "$SRC/docs/format.md" |
  sed -n 's/^| `\([^`]*\)` | \([^|]*\) | \([^|]*\) | .* | \(device\|host\) |$/\1|\2|\3|\4/p')
[ -n "$list" ] && ok || bad "no sections parsed from src/index/sections.h"
[ "$(echo "$list" | wc -l)" -ge 17 ] && ok || bad "fewer sections parsed from sections.h than the index has"
if [ "$list" = "$doc" ]; then ok; else
  bad "docs/format.md's section table differs from src/index/sections.h (name|dtype|shape|where; < list, > doc):"
  diff <(echo "$list") <(echo "$doc") >&2
fi
echo "$pass passed, $fail failed"
[ $fail = 0 ]
