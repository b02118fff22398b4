#!/bin/sh
# Everyday tools for the malloc test (crates/ebbtide-malloc/tests/all/real_programs.rs), run in an
# empty directory given as $1 under the caller's malloc: awk generating text, a parallel sort
# with a large buffer, multi-threaded xz (blocks of megabytes on several threads), gzip.
# Deterministic output: checksums only.
set -eu
cd "$1"
awk 'BEGIN { for (i = 0; i < 300000; i++) printf "%08d %s %d\n", (i * 7919) % 1000003, substr("abcdefghijklmnopqrstuvwxyz", 1 + i % 26, 1 + i % 9), i }' > in.txt
sort --parallel=2 -S 64M -k2,2 -k1,1n in.txt > sorted.txt
echo "sorted $(md5sum < sorted.txt)"
xz -T2 -3 --block-size=1MiB -k sorted.txt
echo "xz $(md5sum < sorted.txt.xz)"
echo "unxz $(xz -dc sorted.txt.xz | md5sum)"
echo "gzip $(gzip -9 -n -c sorted.txt | md5sum)"
echo "uniq $(cut -d' ' -f2 sorted.txt | uniq -c | sort -rn | head -3 | tr -s ' ' | tr '\n' ';')"
