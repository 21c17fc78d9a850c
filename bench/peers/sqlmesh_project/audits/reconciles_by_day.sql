AUDIT (name reconciles_by_day, blocking true);
-- The project's reconciles_with_upstream: per day of the batch, this table's measures (@here) equal the upstream
-- table's (@there), both a struct of DECIMAL(38,2). Returns the days that differ (an audit fails on any row).
WITH here AS (
  SELECT order_date AS day, @here AS m FROM @this_model GROUP BY order_date
), there AS (
  SELECT order_date AS day, @there AS m FROM @upstream
  WHERE order_date BETWEEN CAST(@start_ds AS DATE) AND CAST(@end_ds AS DATE)
  GROUP BY order_date
)
SELECT COALESCE(here.day, there.day) AS day, here.m AS here, there.m AS there
FROM here FULL OUTER JOIN there ON here.day = there.day
WHERE NOT (here.m <=> there.m)
