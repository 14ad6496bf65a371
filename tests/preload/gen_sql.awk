# gen_sql.awk - writes an SQL script for the sqlite3 shell: a schema, ROWS
# single-row INSERTs in one transaction (lots of parsing and B-tree work),
# an index, and queries with GROUP BY / ORDER BY / joins / window functions.
# Usage: awk -v rows=100000 -f gen_sql.awk > load.sql ; sqlite3 db < load.sql
# Deterministic: its own LCG, no srand().
# Park-Miller "minimal standard" generator: products stay below 2^46, so
# awk's doubles compute it exactly.
function rnd(n) {
    state = (state * 16807) % 2147483647
    return state % n
}
BEGIN {
    if (rows == "") rows = 100000
    state = 4242
    split("north south east west centre", region, " ")
    split("alpha beta gamma delta epsilon zeta eta theta iota kappa", word, " ")

    print "PRAGMA journal_mode=MEMORY;"
    print "CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT NOT NULL, region TEXT NOT NULL);"
    print "CREATE TABLE orders(id INTEGER PRIMARY KEY, customer INTEGER NOT NULL REFERENCES customers(id),"
    print "  amount_cents INTEGER NOT NULL, qty INTEGER NOT NULL, note TEXT, day TEXT NOT NULL);"
    print "BEGIN;"
    for (c = 1; c <= 1000; c++)
        printf "INSERT INTO customers VALUES(%d,'%s-%s-%d','%s');\n", c, word[1 + rnd(10)], word[1 + rnd(10)], c, region[1 + rnd(5)]
    for (i = 1; i <= rows; i++) {
        note = ""
        k = rnd(6)
        for (j = 0; j < k; j++) note = note word[1 + rnd(10)] " "
        printf "INSERT INTO orders(customer,amount_cents,qty,note,day) VALUES(%d,%d,%d,'%s','2024-%02d-%02d');\n", 1 + rnd(1000), rnd(1000000), 1 + rnd(20), note, 1 + rnd(12), 1 + rnd(28)
    }
    print "COMMIT;"
    print "CREATE INDEX orders_customer ON orders(customer);"
    print "CREATE INDEX orders_day_amount ON orders(day, amount_cents);"
    print "ANALYZE;"
    print ".mode list"
    print ".separator |"
    print "SELECT 'count', count(*), sum(amount_cents), sum(qty) FROM orders;"
    print "SELECT 'region', c.region, count(*), sum(o.amount_cents), max(o.amount_cents)"
    print "  FROM orders o JOIN customers c ON c.id = o.customer GROUP BY c.region ORDER BY c.region;"
    print "SELECT 'month', substr(day,1,7) AS m, count(*), sum(qty) FROM orders GROUP BY m ORDER BY m;"
    print "SELECT 'top', customer, sum(amount_cents) AS s FROM orders GROUP BY customer ORDER BY s DESC, customer LIMIT 10;"
    print "SELECT 'range', count(*), sum(amount_cents) FROM orders WHERE customer BETWEEN 100 AND 199;"
    print "SELECT 'day', day, count(*), min(amount_cents) FROM orders WHERE day >= '2024-06-01' AND day < '2024-06-08' GROUP BY day ORDER BY day;"
    print "SELECT 'notes', count(*) FROM orders WHERE note LIKE '%gamma%delta%';"
    print "SELECT 'words', length(group_concat(note, ',')) FROM (SELECT note FROM orders ORDER BY amount_cents DESC, id LIMIT 5000);"
    print "SELECT 'rank', region, name, total FROM (SELECT c.region, c.name, sum(o.amount_cents) AS total,"
    print "  row_number() OVER (PARTITION BY c.region ORDER BY sum(o.amount_cents) DESC, c.id) AS rn"
    print "  FROM orders o JOIN customers c ON c.id = o.customer GROUP BY c.id) WHERE rn <= 3 ORDER BY region, rn;"
    print "SELECT 'sorted', id, amount_cents FROM orders ORDER BY note DESC, amount_cents, id LIMIT 5;"
    print "SELECT 'distinct', count(DISTINCT note), count(DISTINCT customer || '/' || qty) FROM orders;"
    print "DELETE FROM orders WHERE amount_cents % 3 = 0;"
    print "UPDATE orders SET note = upper(note) || printf('%05d', id % 99999) WHERE qty > 15;"
    print "SELECT 'after', count(*), sum(length(note)) FROM orders;"
    print "VACUUM;"
    print "PRAGMA integrity_check;"
}
