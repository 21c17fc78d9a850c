"""Infrastructure the assets stand on: where the lake is, the Spark session, Delta table I/O."""
