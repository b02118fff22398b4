#!/bin/sh
# jq for the malloc test (crates/ebbtide-malloc/tests/all/real_programs.rs), run in an empty
# directory given as $1 under the caller's malloc: jq's values are reference-counted malloc
# blocks (objects, arrays, strings grown by realloc), and its regular expressions are
# Oniguruma's. Deterministic output: counts and checksums only.
set -eu
cd "$1"
awk 'BEGIN { printf "["; for (i = 0; i < 30000; i++) { if (i) printf ","; printf "{\"id\":%d,\"name\":\"n%05d\",\"group\":\"g%d\",\"tags\":[\"t%d\",\"t%d\"],\"score\":%d.%d}", i, (i * 7919) % 100000, i % 37, i % 11, i % 13, (i * 31) % 1000, i % 10 }; printf "]\n" }' > in.json
echo "count $(jq 'length' in.json)"
echo "groups $(jq -c 'group_by(.group) | map({g: .[0].group, n: length, s: (map(.score) | add | floor)}) | sort_by(-.n, .g) | .[0:3]' in.json)"
echo "sorted $(jq -c 'sort_by(.name) | map(.id)' in.json | md5sum)"
echo "tags $(jq -c '[.[].tags[]] | unique' in.json | md5sum)"
echo "regex $(jq '[.[] | select(.name | test("^n0[0-4][0-9]*7$"))] | length' in.json)"
echo "strings $(jq -r '.[] | "\(.id):\(.name | ascii_upcase):\(.tags | join("+"))"' in.json | md5sum)"
echo "base64 $(jq -r '[.[0:2000][] | tostring | @base64] | join(",")' in.json | md5sum)"
echo "reduce $(jq 'reduce .[] as $x ({}; .[$x.group] += [$x.id]) | map_values(length) | to_entries | length' in.json)"
echo "stream $(jq -c --stream 'select(length == 2)' in.json | wc -l)"
