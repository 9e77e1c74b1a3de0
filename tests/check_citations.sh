#!/usr/bin/env bash
# Every citation in the sources resolves. Comments cite the repository's own texts as
# "docs/<name>.md §N" (or "§N-M", a range: both ends are checked), and the paper as
# "paper §N". A docs citation needs the file and a heading numbered N in it
# ("## 2. ..." or "### 2.1 ..."); a paper citation needs N in the list of the paper's
# sections in docs/design.md §7. Texts that are not in the repository (the old design
# brief and algorithms reference, the style notes) may not be cited at all.
# Prints each broken citation; exits non-zero if there is one.
set -u
root=${1:-.}
cd "$root" || exit 2
# (a virtual environment inside the tree, bench/.venv, holds other projects' files)
files=$(find src tools tests bench include docs cmake scripts python -name .venv -prune -o -type f \
          \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.sh' \
             -o -name '*.md' -o -name '*.txt' -o -name '*.cmake' -o -name '*.py' \) \
          ! -name check_citations.sh -print 2>/dev/null; echo CMakeLists.txt README.md)
bad=0
n=0
# has_heading FILE NUM: FILE has a markdown heading numbered NUM.
has_heading() {
  local re=${2//./\\.}
  grep -Eq "^#+[[:space:]]+${re}\.?([[:space:]]|$)" "$1"
}
paper_sections=$(sed -n '/^## 7\. /,/^## 8\. /p' docs/design.md |
                 sed -n 's/^| \([0-9][0-9.]*\) |.*/\1/p')
for f in $files; do
  [ -f "$f" ] || continue
  # Texts outside the repository.
  while IFS=: read -r line text; do
    echo "$f:$line: cites a text that is not in the repository: $text"
    bad=1
  done < <(grep -nEo '(DESIGN|REFERENCE|STYLE)\.md|(DESIGN|REFERENCE|STYLE)( §| section| [0-9])[^ ,;)]*|\(practice [0-9]+\)' "$f")
  # docs/<name>.md §N[-M]
  while IFS=: read -r line cite; do
    n=$((n + 1))
    name=$(sed -E 's/^(docs\/)?([A-Za-z0-9_-]+\.md).*/\2/' <<<"$cite")
    nums=$(sed -E 's/.*§([0-9][0-9.]*[0-9]|[0-9])([-–]([0-9][0-9.]*[0-9]|[0-9]))?.*/\1 \3/' <<<"$cite")
    doc=docs/$name
    if [ ! -f "$doc" ]; then
      echo "$f:$line: $cite: no $doc"; bad=1; continue
    fi
    for num in $nums; do
      has_heading "$doc" "$num" || { echo "$f:$line: $cite: $doc has no section $num"; bad=1; }
    done
  done < <(grep -nEo '(docs/)?[A-Za-z0-9_-]+\.md §[0-9][0-9.]*([-–][0-9][0-9.]*)?' "$f" |
           sed -E 's/\.+$//')
  # paper §N
  while IFS=: read -r line cite; do
    n=$((n + 1))
    num=$(sed -E 's/.*§([0-9.]*[0-9]).*/\1/' <<<"$cite")
    grep -qxF "$num" <<<"$paper_sections" ||
      { echo "$f:$line: $cite: the paper has no section $num (docs/design.md §7)"; bad=1; }
  done < <(grep -nEo "paper('s)? §[0-9][0-9.]*" "$f")
done
if [ "$n" -eq 0 ]; then echo "citations: found none (pattern broken?)"; bad=1; fi
if [ $bad = 0 ]; then echo "citations: $n resolved"; else echo "citations: failed"; fi
exit $bad
