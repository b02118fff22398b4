-- A sqlite3 bulk load and queries for the malloc test
-- (crates/ebbtide-malloc/tests/real_programs.rs). Deterministic: no random(), no dates.
PRAGMA journal_mode = WAL;
PRAGMA cache_size = -65536;
CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT, city TEXT, note TEXT);
CREATE TABLE orders(id INTEGER PRIMARY KEY, customer INTEGER REFERENCES customers(id),
                    amount INTEGER, item TEXT, meta TEXT);
BEGIN;
WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 50000)
INSERT INTO customers
SELECT x, 'customer-' || x, 'city-' || (x * 7919 % 211), substr(hex(zeroblob(x % 120)), 1, x % 200) FROM n;
WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 300000)
INSERT INTO orders
SELECT x, 1 + (x * 104729 % 50000), (x * 31337) % 10007, 'item-' || (x % 977),
       json_object('k', x, 'tags', json_array('a' || (x % 5), 'b' || (x % 11)), 'pad', printf('%.*c', x % 64, 'p'))
FROM n;
COMMIT;
CREATE INDEX orders_customer ON orders(customer);
CREATE INDEX orders_item_amount ON orders(item, amount);
CREATE INDEX customers_city ON customers(city);
SELECT 'counts', (SELECT count(*) FROM customers), (SELECT count(*) FROM orders), (SELECT sum(amount) FROM orders);
SELECT 'top cities', group_concat(city || '=' || total, ',') FROM (
  SELECT c.city, sum(o.amount) AS total FROM orders o JOIN customers c ON c.id = o.customer
  GROUP BY c.city ORDER BY total DESC, c.city LIMIT 5);
SELECT 'items', item, count(*), min(amount), max(amount), avg(amount) FROM orders
  GROUP BY item ORDER BY count(*) DESC, item LIMIT 3;
SELECT 'json', json_extract(meta, '$.tags[1]') AS t, count(*) FROM orders GROUP BY t ORDER BY t LIMIT 4;
SELECT 'window', id, amount, sum(amount) OVER (ORDER BY id ROWS BETWEEN 5 PRECEDING AND CURRENT ROW)
  FROM orders WHERE customer = 4242 ORDER BY id LIMIT 5;
SELECT 'distinct', count(DISTINCT note), length(group_concat(DISTINCT substr(name, 1, 12))) FROM customers;
UPDATE orders SET meta = json_set(meta, '$.seen', amount % 3) WHERE amount % 2 = 0;
DELETE FROM orders WHERE amount % 5 = 0;
SELECT 'after', count(*), sum(json_extract(meta, '$.seen')) FROM orders;
VACUUM;
PRAGMA integrity_check;
SELECT 'sorted', group_concat(name, ',') FROM (SELECT name FROM customers ORDER BY note DESC, name LIMIT 5);
