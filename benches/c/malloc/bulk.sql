-- sqlite bulk load of ebbtide-bench-malloc: `sqlite3 :memory:` reads this on stdin, after a
-- first line the driver writes: `CREATE TEMP TABLE n(rows); INSERT INTO n VALUES (ROWS);`.
-- Deterministic rows (no random()): the output is the same under every allocator and the
-- driver compares it with glibc's.
PRAGMA cache_size = -65536;
CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, grp INTEGER, payload TEXT);
BEGIN;
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < (SELECT rows FROM n))
INSERT INTO t(id, name, grp, payload)
SELECT x, printf('name-%08d-%x', x, (x * 2654435761) % 4294967296), x % 97,
       substr(hex(zeroblob(64)), 1, 8 + (x * 40503) % 120) || printf('%d', x)
FROM c;
CREATE INDEX t_name ON t(name);
CREATE INDEX t_grp ON t(grp, payload);
COMMIT;
UPDATE t SET payload = payload || '-updated' WHERE id % 3 = 0;
DELETE FROM t WHERE id % 5 = 0;
SELECT count(*), sum(length(payload)), sum(grp), max(name) FROM t;
SELECT grp, count(*), sum(length(name)) FROM t GROUP BY grp ORDER BY grp LIMIT 3;
