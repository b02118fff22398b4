#!/bin/sh
# A git session for the malloc test (crates/ebbtide-malloc/tests/all/real_programs.rs), run in an
# empty directory given as $1. Every git below (and this shell) runs under the caller's malloc;
# identities, dates and configuration are fixed, so the transcript is the same under any malloc.
set -eu
cd "$1"
export HOME="$1" GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null LC_ALL=C TZ=UTC
export GIT_AUTHOR_NAME="Ada Author" GIT_AUTHOR_EMAIL=ada@example.invalid
export GIT_COMMITTER_NAME="Cy Committer" GIT_COMMITTER_EMAIL=cy@example.invalid
at() { export GIT_AUTHOR_DATE="$1 +0000" GIT_COMMITTER_DATE="$1 +0000"; }

git init -q -b main repo
cd repo
git config core.pager cat
git config gc.auto 0
mkdir -p src doc
awk 'BEGIN { for (i = 0; i < 150; i++) for (j = i; j <= i + 200; j++) print "line " i ": " j > ("src/file" i ".txt") }'
seq 1 3000 | awk '{ printf "paragraph %d %s\n", $1, substr("abcdefghijklmnopqrstuvwxyz", 1 + $1 % 26) }' > doc/big.txt
at "2024-01-01T10:00:00"
git add -A
git commit -q -m "first: 150 files and a big one"
echo "== after first commit"
git rev-parse HEAD
git ls-files | wc -l

# Second commit: edits, deletions, renames, new files.
# (one process per step, not per file: every process start costs the same under any malloc)
sed -i 's/^line /LINE /' $(awk 'BEGIN { for (i = 0; i < 150; i += 3) print "src/file" i ".txt" }')
git rm -q -f $(awk 'BEGIN { for (i = 1; i < 150; i += 10) print "src/file" i ".txt" }')
for i in 2 27 52 77 102 127; do git mv src/file$i.txt src/moved$i.txt; done
seq 1 500 | sed 's/^/new /' > src/new.txt
sed -i '100,200d' doc/big.txt
at "2024-01-02T11:30:00"
git add -A
git commit -q -m "second: edits, deletions, renames"

# A branch, a commit on each side, a merge.
git checkout -q -b topic
echo "topic line" >> doc/big.txt
at "2024-01-03T09:00:00"
git commit -q -am "topic work"
git checkout -q main
echo "main line" >> src/new.txt
at "2024-01-03T10:00:00"
git commit -q -am "main work"
at "2024-01-04T08:00:00"
git merge -q --no-edit topic
echo "== log"
git log --graph --stat --format='%H %an <%ae> %ad %cn %s' --date=iso-strict
echo "== diff"
git diff --stat -M HEAD~3 HEAD
git diff HEAD~3 HEAD -- src/file3.txt src/new.txt
echo "== grep, blame"
git grep -c 'LINE 9' -- src | head -5
git blame -s src/file3.txt | sed -n '1,3p'
echo "== gc, repack, fsck"
git gc -q
git repack -q -a -d -f --window=50
git fsck --full --strict 2>&1
git count-objects -v | grep -E '^(count|in-pack|packs|garbage):'
git cat-file --batch-all-objects --batch-check | sort
echo "== archive"
git archive --format=tar HEAD | tar -tf - | sort | md5sum
echo "== done"
